// ObjectAllocator: places objects (tensors) on tiers, page-aligned, within the tiers' budgets,
// and keeps their memory for reuse across training steps.
//
// Placement rules:
// - An object of kPageBytes or more gets its own pages (size rounded up to whole pages; 2 MiB
//   aligned with transparent huge pages from 2 MiB up), so protecting or moving it touches no
//   other object.
// - A smaller object is packed with others of the same group (a caller-given lifetime class) in
//   that group's shared chunks of kGroupChunkBytes. The chunk, not the small object, is the unit
//   of placement: lookup() of an address inside one returns the group span. A chunk's space is
//   reused once all its objects are freed (objects of one lifetime class die together).
// - An object goes to the preferred tier; where that tier's budget has no room, to the next
//   slower tier, and the fallback is counted on both. Where no tier has room: kOutOfMemory, never
//   an abort.
// - Freed ranges stay mapped in a per-tier cache and serve the next allocation of the same size,
//   so a training step that repeats the last one's allocations takes no page fault. A tier's
//   budget counts its cached ranges too (they hold physical memory); when a new range does not
//   fit, the cache of that tier is released first.
//
// Ownership: the allocator owns its tiers and all object memory; an object's memory is the
// caller's to use from allocate() until free(). Destroying the allocator releases everything.
// Thread safety: every call is thread-safe (one internal mutex); lookup() is in addition
// lock-free and async-signal-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tensortier/allocator/object_table.h"
#include "tensortier/allocator/tier.h"
#include "tensortier/status.h"

namespace tensortier {

using ObjectId = std::uint64_t;   // unique per allocator, never reused; 0 is never an id
using GroupId = std::uint32_t;    // caller-chosen lifetime class that small objects share pages by
using TierIndex = std::uint32_t;  // position in the tier list, 0 = fastest

inline constexpr GroupId kDefaultGroup = 0;              // small objects given no group
inline constexpr std::size_t kSmallAlignmentBytes = 64;  // small objects: cache-line aligned
inline constexpr std::size_t kGroupChunkBytes = std::size_t{64}
                                                << 10;  // shared pages of one group, per chunk

// What the allocator knows of one live object.
struct ObjectInfo {
  ObjectId id = 0;
  std::string name;
  std::size_t bytes = 0;           // as asked
  std::size_t reserved_bytes = 0;  // whole pages it owns; 0 for a small object in a group chunk
  TierIndex tier = 0;              // where it lives
  GroupId group = kDefaultGroup;
  void* address = nullptr;
  bool small = false;  // packed into its group's shared pages
};

// Per-tier accounting.
struct TierUsage {
  std::string name;
  std::uint64_t budget_bytes = 0;
  std::uint64_t mapped_bytes = 0;       // held from the tier: live objects, chunks and cache
  std::uint64_t peak_mapped_bytes = 0;  // high-water mark of mapped_bytes
  std::uint64_t live_bytes = 0;         // bytes of live objects, as asked
  std::uint64_t live_objects = 0;
  std::uint64_t cached_bytes = 0;   // freed ranges kept for reuse
  std::uint64_t allocations = 0;    // objects placed here
  std::uint64_t fallbacks_out = 0;  // objects that preferred this tier and did not fit
  std::uint64_t fallbacks_in = 0;   // objects placed here because a faster tier was full
  std::uint64_t new_ranges = 0;     // ranges taken from the tier (each first touch faults)
  std::uint64_t reused_ranges = 0;  // ranges served from the cache
};

class ObjectAllocator {
 public:
  // tiers: fastest first; at least one.
  explicit ObjectAllocator(std::vector<std::unique_ptr<Tier>> tiers);
  ~ObjectAllocator();
  ObjectAllocator(const ObjectAllocator&) = delete;
  ObjectAllocator& operator=(const ObjectAllocator&) = delete;

  // Places a new object. Errors: bytes == 0 or preferred out of range (kInvalidArgument); no tier
  // from `preferred` down has room (kOutOfMemory, naming every tier's free bytes).
  Result<ObjectInfo> allocate(std::string_view name, std::size_t bytes, GroupId group = kDefaultGroup,
                              TierIndex preferred = 0);
  // Frees the object starting at `address`. A pointer it never gave, or one already freed, is a
  // kNotFound error and changes nothing.
  Status free(const void* address);
  // The live object starting at `address`.
  Result<ObjectInfo> info(const void* address) const;
  // Its id alone (no copy of the name).
  Result<ObjectId> id_of(const void* address) const;
  // Ids and sizes of the live objects starting at `addresses`, under one lock: what a layer mark
  // needs. Appends to `ids` and `bytes`; returns the index of the first address that is not the
  // start of a live object (nothing appended for it or after it), or addresses.size().
  std::size_t ids_of(std::span<const void* const> addresses, std::vector<ObjectId>* ids,
                     std::vector<std::size_t>* bytes) const;
  // Every live object, in no particular order.
  std::vector<ObjectInfo> objects() const;
  // The span (object, or group chunk) holding any address. Lock-free, async-signal-safe.
  bool lookup(const void* address, SpanView* out) const noexcept { return table_.lookup(address, out); }

  std::size_t tier_count() const { return tiers_.size(); }
  const Tier& tier(TierIndex index) const { return *tiers_.at(index); }
  std::vector<TierUsage> usage() const;
  std::size_t live_objects() const;
  // Bytes of live objects (as asked) over all tiers, and their high-water mark since the last
  // reset_peak_live_bytes() (or construction).
  std::uint64_t live_bytes() const;
  std::uint64_t peak_live_bytes() const;
  void reset_peak_live_bytes();
  // Returns every cached range to its tier (for a caller about to change budgets or shut down).
  void release_cache();
  // Called, under the allocator's lock, with the span of each range about to go back to its tier
  // (a released cache entry, a dropped empty group chunk): the profiler unprotects it there, as
  // the tier may hand the memory out again at once. Must not call the allocator. Set it before
  // other threads use the allocator; an empty function clears it. Not called on destruction.
  using ReleaseObserver = std::function<void(const SpanView&)>;
  void set_release_observer(ReleaseObserver observer);

 private:
  struct Chunk {  // shared pages of one group on one tier
    std::byte* base = nullptr;
    std::size_t used_bytes = 0;  // bump offset
    std::size_t live = 0;        // live small objects in it
    ObjectTable::Slot slot = 0;
  };
  struct GroupState {
    std::vector<std::unique_ptr<Chunk>> chunks;
  };
  struct Live {
    ObjectInfo info;
    ObjectTable::Slot slot = 0;  // large objects: their own span
    Chunk* chunk = nullptr;      // small objects: their chunk
  };
  struct TierState {
    std::multimap<std::size_t, void*> cache;  // reserved bytes -> range, freed for reuse
    TierUsage usage;
  };

  // Takes `bytes` (whole pages) from tier `t`: a cached range of the same size, else a new one,
  // releasing the tier's cache first if the budget demands. Caller holds mutex_.
  Result<void*> take_range(TierIndex t, std::size_t bytes);
  void give_back_range(TierIndex t, void* address, std::size_t bytes);
  void release_cache_locked(TierIndex t);
  Result<void*> place_small(Live& live, TierIndex t);
  Status no_room_error(std::string_view name, std::size_t bytes, TierIndex preferred) const;

  std::vector<std::unique_ptr<Tier>> tiers_;
  ObjectTable table_;
  mutable std::mutex mutex_;
  std::vector<TierState> tier_state_;                           // by TierIndex
  std::unordered_map<const void*, Live> live_;                  // by start address
  std::map<std::pair<GroupId, TierIndex>, GroupState> groups_;  // small-object chunks
  ObjectId next_id_ = 1;
  std::uint64_t live_bytes_ = 0;
  std::uint64_t peak_live_bytes_ = 0;
  ReleaseObserver release_observer_;
};

}  // namespace tensortier
