// best_fit_pool and caching_allocator (see pool_models.h).
#include "tensortier/allocator/pool_models.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <vector>

namespace tensortier {
namespace {

// A step's requests in time order: each buffer allocated at `lower` and freed at `upper`; at one
// time the frees come first (their room is free again for what is born then).
struct Event {
  std::uint64_t time = 0;
  bool alloc = false;
  std::size_t buffer = 0;
};

std::vector<Event> events_of(std::span<const PlannedBuffer> buffers) {
  std::vector<Event> events;
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    events.push_back({buffers[i].lower, true, i});
    events.push_back({buffers[i].upper, false, i});
  }
  std::ranges::stable_sort(events, [](const Event& a, const Event& b) {
    return a.time != b.time ? a.time < b.time : (!a.alloc && b.alloc);
  });
  return events;
}

constexpr std::uint64_t round_up(std::uint64_t v, std::uint64_t to) {
  return (v + to - 1) / to * to;
}

// Free blocks of one address space, by address and by (size, address), with coalescing.
class FreeBlocks {
 public:
  void add(std::uint64_t at, std::uint64_t bytes, std::uint32_t segment) {
    // Coalesce with the free neighbours of the same segment.
    auto next = by_address_.lower_bound(at);
    if (next != by_address_.end() && next->first == at + bytes && next->second.segment == segment) {
      bytes += next->second.bytes;
      remove(next);
    }
    auto prev = by_address_.lower_bound(at);
    if (prev != by_address_.begin()) {
      --prev;
      if (prev->first + prev->second.bytes == at && prev->second.segment == segment) {
        at = prev->first;
        bytes += prev->second.bytes;
        remove(prev);
      }
    }
    by_address_.emplace(at, Block{bytes, segment});
    by_size_.emplace(bytes, at);
  }
  // The smallest block of at least `bytes` (lowest address among equals) whose size is under
  // `most`; taken out of the free list. nullopt where none.
  std::optional<std::pair<std::uint64_t, std::pair<std::uint64_t, std::uint32_t>>> take_best(
      std::uint64_t bytes, std::uint64_t most) {
    auto it = by_size_.lower_bound({bytes, 0});
    if (it == by_size_.end() || it->first >= most) return std::nullopt;
    const std::uint64_t at = it->second;
    auto block = by_address_.find(at);
    const std::pair<std::uint64_t, std::uint32_t> size_segment{block->second.bytes, block->second.segment};
    remove(block);
    return std::pair{at, size_segment};
  }
  // The free block that ends at `end`, where there is one (the top of a grown region).
  std::optional<std::pair<std::uint64_t, std::uint64_t>> ending_at(std::uint64_t end) const {
    auto it = by_address_.lower_bound(end);
    if (it == by_address_.begin()) return std::nullopt;
    --it;
    if (it->first + it->second.bytes != end) return std::nullopt;
    return std::pair{it->first, it->second.bytes};
  }
  void erase_at(std::uint64_t at) { remove(by_address_.find(at)); }

 private:
  struct Block {
    std::uint64_t bytes = 0;
    std::uint32_t segment = 0;
  };
  void remove(std::map<std::uint64_t, Block>::iterator it) {
    by_size_.erase({it->second.bytes, it->first});
    by_address_.erase(it);
  }
  std::map<std::uint64_t, Block> by_address_;
  std::set<std::pair<std::uint64_t, std::uint64_t>> by_size_;  // (bytes, address)
};

}  // namespace

PoolFootprint best_fit_pool(std::span<const PlannedBuffer> buffers) {
  constexpr std::uint64_t kAlign = 512;
  FreeBlocks free;
  std::uint64_t top = 0, live = 0;
  PoolFootprint out;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> placed(buffers.size());  // (at, bytes)
  for (const Event& e : events_of(buffers)) {
    const std::uint64_t bytes = round_up(std::max<std::uint64_t>(buffers[e.buffer].bytes, 1), kAlign);
    if (!e.alloc) {
      free.add(placed[e.buffer].first, placed[e.buffer].second, 0);
      live -= placed[e.buffer].second;
      continue;
    }
    std::uint64_t at = 0;
    if (auto block = free.take_best(bytes, UINT64_MAX)) {
      at = block->first;
      if (block->second.first > bytes) free.add(at + bytes, block->second.first - bytes, 0);
    } else if (auto last = free.ending_at(top)) {  // grow the free block on top
      at = last->first;
      free.erase_at(at);
      top = at + bytes;
    } else {
      at = top;
      top += bytes;
    }
    placed[e.buffer] = {at, bytes};
    live += bytes;
    out.reserved_bytes = std::max(out.reserved_bytes, top);
    out.allocated_bytes = std::max(out.allocated_bytes, live);
  }
  return out;
}

PoolFootprint caching_allocator(std::span<const PlannedBuffer> buffers) {
  constexpr std::uint64_t kMinBlock = 512, kSmallSize = 1 << 20, kSmallBuffer = 2 << 20,
                          kLargeBuffer = 20 << 20, kMinLargeAlloc = 10 << 20, kRoundLarge = 2 << 20;
  FreeBlocks small, large;  // each pool's free blocks; segments are separate address ranges
  std::uint64_t next_address = 0, reserved = 0, live = 0;
  std::uint32_t segments = 0;
  PoolFootprint out;
  struct Taken {
    std::uint64_t at = 0, bytes = 0;
    std::uint32_t segment = 0;
    bool small = false;
  };
  std::vector<Taken> taken(buffers.size());
  for (const Event& e : events_of(buffers)) {
    if (!e.alloc) {
      const Taken& t = taken[e.buffer];
      (t.small ? small : large).add(t.at, t.bytes, t.segment);
      live -= t.bytes;
      continue;
    }
    const std::uint64_t bytes = round_up(std::max<std::uint64_t>(buffers[e.buffer].bytes, 1), kMinBlock);
    const bool is_small = bytes <= kSmallSize;
    FreeBlocks& pool = is_small ? small : large;
    auto block = pool.take_best(bytes, UINT64_MAX);  // max_split_size unset: any block that fits
    std::uint64_t at = 0, block_bytes = 0;
    std::uint32_t segment = 0;
    if (block) {
      at = block->first;
      block_bytes = block->second.first;
      segment = block->second.second;
    } else {  // a new segment from the device
      block_bytes = is_small                 ? kSmallBuffer
                    : bytes < kMinLargeAlloc ? kLargeBuffer
                                             : round_up(bytes, kRoundLarge);
      at = next_address;
      next_address += block_bytes;
      segment = ++segments;
      reserved += block_bytes;
    }
    const std::uint64_t remaining = block_bytes - bytes;
    const bool split = is_small ? remaining >= kMinBlock : remaining > kSmallSize;
    const std::uint64_t used = split ? bytes : block_bytes;
    if (split) pool.add(at + bytes, remaining, segment);
    taken[e.buffer] = {at, used, segment, is_small};
    live += used;
    out.reserved_bytes = std::max(out.reserved_bytes, reserved);
    out.allocated_bytes = std::max(out.allocated_bytes, live);
  }
  return out;
}

}  // namespace tensortier
