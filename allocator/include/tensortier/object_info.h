// ObjectInfo: what the allocator knows of one live object, as every module above it sees it.
//
// Thread safety: a value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tensortier/ids.h"

namespace tensortier {

// What the allocator knows of one live object.
struct ObjectInfo {
  ObjectId id = 0;
  ObjectKey key = 0;  // as given at allocation; the id when none was given
  std::string name;
  std::size_t bytes = 0;           // as asked
  std::size_t reserved_bytes = 0;  // whole pages it owns; 0 for a small object in a group chunk
  TierIndex tier = 0;              // placement: where its bytes are now (a small object: its chunk's)
  TierIndex owner = 0;             // the tier whose mapping holds it, to which it is freed
  GroupId group = kDefaultGroup;
  void* address = nullptr;
  bool small = false;  // packed into its group's shared pages
  ArenaId arena = 0;   // the arena it lives in (ObjectAllocator::create_arena); 0: its own range
  // A split object (moved in segments): its bytes (as asked) on each tier, by TierIndex, and the
  // tier of each of its kSegmentBytes segments; both empty for any other object (all of it is on
  // `tier`).
  std::vector<std::uint64_t> bytes_by_tier;
  std::vector<TierIndex> segment_tiers;
  // As allocate() returns it: how long it waited for room on its preferred tier (set_room_wait);
  // 0 in every other view of the object.
  std::uint64_t room_wait_ns = 0;
};

}  // namespace tensortier
