// The ids every module names things by: objects (ids, and the keys plans use), groups of small
// objects, tiers, arenas; and the sizes that go with them (small objects' chunks, segments).
//
// Thread safety: types and constants only.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tensortier {

using ObjectId = std::uint64_t;   // unique per allocator, never reused; 0 is never an id
using GroupId = std::uint32_t;    // caller-chosen lifetime class that small objects share pages by
using TierIndex = std::uint32_t;  // position in the tier list, 0 = fastest
// What a plan names an object by, the same in every step of one kind: an object allocated in a
// step by its allocation ordinal there (kStepKeyFlag set), any other by its id.
using ObjectKey = std::uint64_t;
using ArenaId = std::uint32_t;  // an arena of ObjectAllocator::create_arena; 0 is never one
// A planned place: `offset` bytes into arena `arena` (ready memory: a plan's fast slot or home).
struct Place {
  ArenaId arena = 0;
  std::uint64_t offset = 0;
};
inline constexpr ObjectKey kStepKeyFlag = ObjectKey{1} << 63;
constexpr ObjectKey step_key(std::uint64_t ordinal) {
  return kStepKeyFlag | ordinal;
}
constexpr bool is_step_key(ObjectKey key) {
  return (key & kStepKeyFlag) != 0;
}

inline constexpr GroupId kDefaultGroup = 0;              // small objects given no group
inline constexpr std::size_t kSmallAlignmentBytes = 64;  // small objects: cache-line aligned
inline constexpr std::size_t kGroupChunkBytes = std::size_t{64}
                                                << 10;  // shared pages of one group, per chunk

// A large object's pages move in segments of this size where a move asks for one segment
// (MoveOptions::segment): a transparent huge page, the unit of page-granular tiering.
inline constexpr std::size_t kSegmentBytes = std::size_t{2} << 20;
inline constexpr std::uint32_t kWholeObject = ~std::uint32_t{0};

}  // namespace tensortier
