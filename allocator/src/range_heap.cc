// RangeHeap (see range_heap.h).
#include "tensortier/allocator/range_heap.h"

#include <iterator>

namespace tensortier {

RangeHeap::RangeHeap(std::uint64_t size_bytes) : size_bytes_(size_bytes), free_bytes_(0) {
  if (size_bytes > 0) insert(0, size_bytes);
}

void RangeHeap::insert(std::uint64_t offset, std::uint64_t bytes) {
  by_offset_.emplace(offset, bytes);
  by_size_.emplace(bytes, offset);
  free_bytes_ += bytes;
}

void RangeHeap::erase(std::map<std::uint64_t, std::uint64_t>::iterator block) {
  auto [first, last] = by_size_.equal_range(block->second);
  for (auto it = first; it != last; ++it) {
    if (it->second == block->first) {
      by_size_.erase(it);
      break;
    }
  }
  free_bytes_ -= block->second;
  by_offset_.erase(block);
}

std::optional<std::uint64_t> RangeHeap::take(std::uint64_t bytes, std::uint64_t alignment,
                                             std::uintptr_t base) {
  if (bytes == 0 || alignment == 0 || (alignment & (alignment - 1)) != 0) return std::nullopt;
  for (auto it = by_size_.lower_bound(bytes); it != by_size_.end(); ++it) {
    const auto [block_bytes, block_offset] = *it;
    const std::uint64_t pad = (alignment - (base + block_offset) % alignment) % alignment;
    if (pad > block_bytes || block_bytes - pad < bytes) continue;
    erase(by_offset_.find(block_offset));
    if (pad > 0) insert(block_offset, pad);
    const std::uint64_t offset = block_offset + pad;
    if (const std::uint64_t rest = block_bytes - pad - bytes; rest > 0) insert(offset + bytes, rest);
    taken_.emplace(offset, bytes);
    return offset;
  }
  return std::nullopt;
}

bool RangeHeap::give_back(std::uint64_t offset, std::uint64_t bytes) {
  auto taken = taken_.find(offset);
  if (taken == taken_.end() || taken->second != bytes) return false;
  taken_.erase(taken);
  std::uint64_t begin = offset, end = offset + bytes;
  auto next = by_offset_.lower_bound(offset);
  if (next != by_offset_.end() && next->first == end) {  // join the free block after it
    end += next->second;
    erase(next);
  }
  auto after = by_offset_.lower_bound(begin);
  if (after != by_offset_.begin()) {
    auto before = std::prev(after);
    if (before->first + before->second == begin) {  // and the one before it
      begin = before->first;
      erase(before);
    }
  }
  insert(begin, end - begin);
  return true;
}

std::uint64_t RangeHeap::largest_free_bytes() const {
  return by_size_.empty() ? 0 : by_size_.rbegin()->first;
}

}  // namespace tensortier
