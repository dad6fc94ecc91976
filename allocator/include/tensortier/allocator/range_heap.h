// RangeHeap: hands out ranges of one region of bytes [0, size) whose memory the caller got in one
// piece (a GPU tier's arena: one cudaMalloc), best fit, and takes them back, joining free
// neighbours. A tier that cannot map pages per range (device memory) serves its ranges from it.
//
//   0 ┌─────────┬──────┬────────────┬───────────────┐ size
//     │ taken   │ free │  taken     │     free      │   free blocks by offset (to join
//     └─────────┴──────┴────────────┴───────────────┘   neighbours) and by size (best fit)
//
// Why not a library: Debian packages no sub-allocator of offsets (minimalloc and the offset
// planner place ranges whose lifetimes are known ahead; these come and go as asked).
// Ownership: offsets only; the memory is the caller's. Thread safety: none (the tier locks).
#pragma once

#include <cstdint>
#include <map>
#include <optional>

namespace tensortier {

class RangeHeap {
 public:
  explicit RangeHeap(std::uint64_t size_bytes);

  // The offset of `bytes` (> 0) free bytes whose address base + offset is a multiple of
  // `alignment` (a power of two), from the smallest free block that holds them; nullopt where no
  // free block does.
  std::optional<std::uint64_t> take(std::uint64_t bytes, std::uint64_t alignment, std::uintptr_t base = 0);
  // Gives back [offset, offset + bytes), which take() handed out with that size. Returns false,
  // changing nothing, where take() did not hand out exactly that range (a double free, a wrong
  // size or offset).
  bool give_back(std::uint64_t offset, std::uint64_t bytes);

  std::uint64_t size_bytes() const { return size_bytes_; }
  std::uint64_t free_bytes() const { return free_bytes_; }
  // The largest range take() could give with no alignment asked.
  std::uint64_t largest_free_bytes() const;
  std::size_t free_blocks() const { return by_offset_.size(); }
  std::size_t taken_ranges() const { return taken_.size(); }

 private:
  void insert(std::uint64_t offset, std::uint64_t bytes);
  void erase(std::map<std::uint64_t, std::uint64_t>::iterator block);

  std::uint64_t size_bytes_;
  std::uint64_t free_bytes_;
  std::map<std::uint64_t, std::uint64_t> by_offset_;     // free block: offset -> bytes
  std::multimap<std::uint64_t, std::uint64_t> by_size_;  // free block: bytes -> offset
  std::map<std::uint64_t, std::uint64_t> taken_;         // handed out: offset -> bytes
};

}  // namespace tensortier
