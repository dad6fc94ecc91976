// SlotBitmap: which fixed-size slots of one small-object chunk are taken, so that space freed in
// a chunk is reused while other objects in it still live (first fit over a bitmap).
//
// A group chunk (64 KiB, object_allocator.h) holds small objects in 64-byte slots: 1024 slots, 16
// words. A run of free slots is found word by word (full words are skipped whole), from the
// lowest slot that may be free, so a take costs at most a pass over the 16 words plus the run's
// own bits. std::bitset has no "find a run of n clear bits", which is the one thing needed here.
//
// Ownership: a value type; each chunk holds one. Thread safety: none (the allocator's mutex
// guards every chunk).
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace tensortier {

template <std::size_t Slots>
class SlotBitmap {
  static_assert(Slots > 0 && Slots % 64 == 0, "whole 64-bit words");

 public:
  static constexpr std::size_t kSlots = Slots;

  // Takes `count` contiguous free slots (1..Slots) and returns the first; nullopt when no run of
  // that length is free.
  std::optional<std::size_t> take(std::size_t count) {
    if (count == 0 || count > free_) return std::nullopt;
    std::size_t pos = first_free_;
    while (pos + count <= Slots) {
      pos = next_free(pos);
      if (pos + count > Slots) return std::nullopt;
      const std::size_t taken = next_taken(pos, pos + count);
      if (taken == pos + count) {
        set(pos, count, true);
        free_ -= count;
        if (pos == first_free_) first_free_ = next_free(pos + count);
        return pos;
      }
      pos = taken + 1;
    }
    return std::nullopt;
  }

  // Frees slots [first, first + count), which take() handed out.
  void give_back(std::size_t first, std::size_t count) {
    set(first, count, false);
    free_ += count;
    first_free_ = std::min(first_free_, first);
  }

  void clear() {
    words_.fill(0);
    free_ = Slots;
    first_free_ = 0;
  }

  std::size_t free_slots() const { return free_; }
  bool taken(std::size_t slot) const { return ((words_[slot / 64] >> (slot % 64)) & 1U) != 0; }

 private:
  // The first free slot at or after `pos` (Slots when none).
  std::size_t next_free(std::size_t pos) const {
    while (pos < Slots) {
      const std::uint64_t open = ~words_[pos / 64] >> (pos % 64);
      if (open != 0) return std::min(Slots, pos + static_cast<std::size_t>(std::countr_zero(open)));
      pos = (pos / 64 + 1) * 64;  // the rest of this word is taken
    }
    return Slots;
  }
  // The first taken slot in [pos, end) (end when none).
  std::size_t next_taken(std::size_t pos, std::size_t end) const {
    while (pos < end) {
      const std::uint64_t used = words_[pos / 64] >> (pos % 64);
      if (used != 0) return std::min(end, pos + static_cast<std::size_t>(std::countr_zero(used)));
      pos = (pos / 64 + 1) * 64;
    }
    return end;
  }
  void set(std::size_t first, std::size_t count, bool value) {
    for (std::size_t slot = first; slot < first + count; ++slot) {
      const std::uint64_t bit = std::uint64_t{1} << (slot % 64);
      if (value) {
        words_[slot / 64] |= bit;
      } else {
        words_[slot / 64] &= ~bit;
      }
    }
  }

  std::array<std::uint64_t, Slots / 64> words_{};
  std::size_t free_ = Slots;
  std::size_t first_free_ = 0;  // no slot below it is free
};

}  // namespace tensortier
