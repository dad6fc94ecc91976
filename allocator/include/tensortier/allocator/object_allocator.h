// ObjectAllocator: places objects (tensors) on tiers, page-aligned, within the tiers' budgets,
// keeps their memory for reuse across training steps, and moves them between tiers (in place, or
// to a new address) without losing a byte. Placement, caching, moves, segments and pins in full:
// allocator/README.md.
//
// Ownership: the allocator owns its tiers and all object memory; an object's memory is the
// caller's to use from allocate() until free(). Destroying it releases everything; no move may be
// in flight then.
// Thread safety: every call is thread-safe (one mutex; moves copy outside it); lookup() and
// relocations() are lock-free too, and lookup() async-signal-safe.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "tensortier/allocator/copy_engine.h"
#include "tensortier/allocator/object_table.h"
#include "tensortier/allocator/slot_bitmap.h"
#include "tensortier/allocator/tier.h"
#include "tensortier/ids.h"
#include "tensortier/object_info.h"
#include "tensortier/status.h"

namespace tensortier {

// How many segments `bytes` of pages make (the last may be shorter).
constexpr std::uint64_t segment_count(std::uint64_t bytes) {
  return (bytes + kSegmentBytes - 1) / kSegmentBytes;
}

// How an object moves between two tiers (see the placement rules above).
enum class MoveMethod { kNone, kMovePages, kRemap, kNewAddress, kCopy };
std::string_view to_string(MoveMethod method);

// What a finished move did.
struct MoveResult {
  ObjectId id = 0;
  void* address = nullptr;  // the object's address after the move
  TierIndex from = 0;
  TierIndex to = 0;
  std::size_t bytes = 0;  // bytes moved: the object's pages, or its whole chunk
  MoveMethod method = MoveMethod::kNone;
  std::uint64_t copy_ns = 0;    // wall time of the copy (or page migration), no lock held
  std::uint64_t charge_ns = 0;  // time it waited for an emulated tier's bandwidth
  bool moved = false;           // false: it was on `to` already
  bool discarded = false;       // its bytes were not copied (MoveOptions::discard_unless_pinned_after)
  bool clean = false;           // not copied either: its shadow on `to` held its bytes (set_keep_shadows)
  unsigned copy_threads = 0;    // threads its copy was split over (set_copy_threads); 0: not copied
};

struct MoveOptions {
  std::chrono::nanoseconds pin_wait{std::chrono::seconds(10)};  // longest wait for pins to go
  // Only this segment of a large object's pages: bytes [segment x kSegmentBytes, + kSegmentBytes)
  // (the last segment ends with the object's pages). kWholeObject: all of it.
  std::uint32_t segment = kWholeObject;
  // A move whose bytes the caller knows dead (the next use overwrites them, or there is none) may
  // skip the copy: where this is not 0 and nothing has pinned the object since the allocator's
  // pin_sequence() read this value, the move takes destination pages without copying into them
  // (no emulated charge either) and keeps no shadow; the object's bytes are then undefined until
  // written. Any pin since (a layer began using it), a move between NUMA nodes (the kernel
  // migrates the pages anyway) or a small object's chunk: the move copies as usual. The check and
  // the move are one under the allocator's lock, so a layer that pins later waits for the move.
  std::uint64_t discard_unless_pinned_after = 0;
  // Ready memory: copy the object into this place of an arena on tier `to` and publish its new
  // address (kCopy; the kernel maps nothing). The place must be free: a move whose place still
  // holds another object (its previous occupant has not left) fails with kUnavailable, the object
  // where it was. A move to the place it is in moves nothing. Large, unsplit objects only.
  std::optional<Place> place;
  // How long a move into a place waits for the place's occupant to leave (its move out or its
  // free) before it fails.
  std::chrono::nanoseconds occupant_wait{0};
};

// A pinned object as pin() found it.
struct PinnedObject {
  void* address = nullptr;  // current address
  TierIndex tier = 0;       // placement
  std::size_t bytes = 0;    // as asked
  ObjectKey key = 0;
  std::vector<std::uint64_t> bytes_by_tier;  // a split object's bytes on each tier (see ObjectInfo)
};

// What pin() waited for.
struct PinResult {
  std::uint32_t late_moves = 0;     // moves in flight that it waited for
  std::uint32_t aborted_moves = 0;  // moves still in flight after the bound, made to fail
  std::uint64_t wait_ns = 0;
};

// Per-tier accounting.
struct TierUsage {
  std::string name;
  std::uint64_t budget_bytes = 0;
  std::uint64_t mapped_bytes = 0;       // held on the tier: live objects, chunks, cache, moves in flight
  std::uint64_t peak_mapped_bytes = 0;  // high-water mark of mapped_bytes
  std::uint64_t live_bytes = 0;         // bytes of live objects placed here, as asked
  std::uint64_t peak_live_bytes = 0;    // high-water mark of live_bytes (since reset_tier_peak)
  std::uint64_t live_objects = 0;
  std::uint64_t cached_bytes = 0;       // freed ranges kept for reuse
  std::uint64_t allocations = 0;        // objects placed here
  std::uint64_t fallbacks_out = 0;      // objects that preferred this tier and did not fit
  std::uint64_t fallbacks_in = 0;       // objects placed here because a faster tier was full
  std::uint64_t new_ranges = 0;         // ranges taken from the tier (each first touch faults)
  std::uint64_t reused_ranges = 0;      // ranges served from the cache
  std::uint64_t assembled_ranges = 0;   // of those, made of smaller cached ranges' pages (mremap)
  std::uint64_t arena_allocations = 0;  // objects placed at a given offset in an arena here
  std::uint64_t moves_in = 0;           // moves that brought an object (or chunk) here
  std::uint64_t moves_out = 0;          // moves that took one away
  std::uint64_t bytes_moved_in = 0;
  std::uint64_t bytes_moved_out = 0;
  std::uint64_t failed_moves = 0;     // moves to this tier that failed (the object stayed put)
  std::uint64_t in_flight_bytes = 0;  // reserved here by moves still copying
  std::uint64_t shadow_bytes = 0;     // shadow copies kept here (see set_keep_shadows)
  std::uint64_t clean_moves = 0;      // moves here that remapped a shadow instead of copying
  std::uint64_t discarded_moves = 0;  // moves here that copied nothing: the bytes were dead (MoveOptions)
  std::uint64_t leaving_bytes = 0;    // of objects moving out of this tier, still copying
  std::uint64_t room_waits = 0;       // allocations that waited for moves out of here (set_room_wait)
  std::uint64_t room_wait_ns = 0;     // how long they waited
  std::uint64_t split_copies = 0;     // moves here whose copy was split over threads (set_copy_threads)
  std::uint64_t place_moves = 0;      // moves here into a planned place (MoveOptions::place)
  std::uint64_t place_waits = 0;      // births here that waited for their place's occupant to leave
  std::uint64_t place_wait_ns = 0;    // how long they waited
  std::uint64_t place_misses = 0;     // births and moves here whose place was still taken
};

class ObjectAllocator {
 public:
  // tiers: fastest first; at least one.
  explicit ObjectAllocator(std::vector<std::unique_ptr<Tier>> tiers);
  ~ObjectAllocator();
  ObjectAllocator(const ObjectAllocator&) = delete;
  ObjectAllocator& operator=(const ObjectAllocator&) = delete;

  // Places a new object. `key`: what plans call it (0: its id). Errors: bytes == 0 or preferred
  // out of range (kInvalidArgument); no tier from `preferred` down has room (kOutOfMemory, naming
  // every tier's free bytes).
  Result<ObjectInfo> allocate(std::string_view name, std::size_t bytes, GroupId group = kDefaultGroup,
                              TierIndex preferred = 0, ObjectKey key = 0);
  // Frees the object starting at `address`. A pointer it never gave, or one already freed, is a
  // kNotFound error and changes nothing. Where another thread may move the object (a mover), its
  // address can change between reading it and this call: free by id.
  Status free(const void* address);
  // Frees object `id`, wherever it lives now; kNotFound, changing nothing, where it is not live.
  Status free(ObjectId id);
  // The live object starting at `address`, or with this id.
  Result<ObjectInfo> info(const void* address) const;
  Result<ObjectInfo> info_by_id(ObjectId id) const;
  // Its id alone (no copy of the name).
  Result<ObjectId> id_of(const void* address) const;
  // Ids of the live objects starting at `addresses`, under one lock: what a layer mark needs.
  // Appends to `ids`; returns the index of the first address that is not the start of a live
  // object (nothing appended for it or after it), or addresses.size().
  std::size_t ids_of(std::span<const void* const> addresses, std::vector<ObjectId>* ids) const;
  // Every live object, in no particular order.
  std::vector<ObjectInfo> objects() const;
  // The span (object, or group chunk) holding any address. Lock-free, async-signal-safe.
  bool lookup(const void* address, SpanView* out) const noexcept { return table_.lookup(address, out); }

  // How an object on `from` moves to `to`.
  MoveMethod move_method(TierIndex from, TierIndex to) const;
  // Moves object `id` (a small one: its whole chunk) to tier `to`; see the placement rules.
  // Errors: no such object (kNotFound), `to` out of range (kInvalidArgument), a small object
  // between tiers that cannot move in place (kFailedPrecondition), already moving or pinned past
  // options.pin_wait (kUnavailable), no room on `to` (kOutOfMemory), an OS error (kInternal). On
  // any error the object is where it was, bytes intact. With options.segment, only that segment
  // moves (kInvalidArgument where the object is small or has no such segment;
  // kFailedPrecondition where the tiers move only to a new address, or for an arena's object);
  // MoveResult::bytes is then the segment's. A whole move of a split object moves its segments
  // one by one: where one fails, the error says how many moved before it, and the rest stays.
  Result<MoveResult> move(ObjectId id, TierIndex to, const MoveOptions& options = {});
  // How many pins have been taken so far (every pin() of an object counts one). A caller that
  // reads it, then finds an object's bytes dead, passes it as MoveOptions::discard_unless_pinned_after.
  // Thread-safe, lock-free.
  std::uint64_t pin_sequence() const { return pin_sequence_.load(std::memory_order_acquire); }
  // pin() calls waiting for a move of their objects now (a gauge: what a test or a stall report
  // reads to know a pin is waiting). Lock-free.
  std::uint32_t pins_waiting() const { return pins_waiting_.load(std::memory_order_acquire); }
  // move() calls waiting for their objects' pins to go now (a gauge, as pins_waiting). Lock-free.
  std::uint32_t moves_waiting_for_pins() const { return moves_pin_waiting_.load(std::memory_order_acquire); }
  // Pins the live objects `ids` (repeats allowed) and writes what each one is now to out[i]
  // (ids.size() long). Waits up to `wait` for moves of them in flight, then makes those still
  // running fail. kNotFound (nothing pinned) when an id is not live.
  Result<PinResult> pin(std::span<const ObjectId> ids, std::span<PinnedObject> out,
                        std::chrono::nanoseconds wait);
  // Undoes pin() of the same ids. Ids no longer live are skipped.
  void unpin(std::span<const ObjectId> ids);
  // System calls that map, unmap, remap, advise, bind or migrate pages, made by this process's
  // allocators through their mmap-backed tiers so far (memkind heaps map on their own, uncounted).
  // Lock-free.
  static std::uint64_t mapping_calls();
  // How many moves have given an object a new address (kNewAddress, kCopy); lock-free. A caller that
  // caches addresses refreshes them when this changes.
  std::uint64_t relocations() const { return relocations_.load(std::memory_order_acquire); }
  // Test hook: called in every move after the copy, before the commit; returning true makes the
  // move fail as if the OS had refused it. Empty: none. Set it before moves run.
  using MoveFailureHook = std::function<bool(ObjectId id, TierIndex to)>;
  void set_move_failure_hook(MoveFailureHook hook);

  std::size_t tier_count() const { return tiers_.size(); }
  const Tier& tier(TierIndex index) const { return *tiers_.at(index); }
  // Restarts tier `index`'s peaks (mapped and live bytes) from what it holds now.
  void reset_tier_peak(TierIndex index);
  std::vector<TierUsage> usage() const;
  std::size_t live_objects() const;
  // Bytes of live objects (as asked) over all tiers, and their high-water mark since the last
  // reset_peak_live_bytes() (or construction).
  std::uint64_t live_bytes() const;
  std::uint64_t peak_live_bytes() const;
  void reset_peak_live_bytes();
  // Returns every cached range to its tier (for a caller about to change budgets or shut down).
  void release_cache();
  // Sets tier `t`'s budget (a policy's fast budget); when it holds more than that, its cache goes
  // back first. Live objects stay where they are: the tier refuses new bytes until it is under
  // the budget again. The tier's peak restarts under the new budget. Errors: kInvalidArgument
  // for a tier that does not exist or a budget of 0.
  Status set_budget(TierIndex t, std::uint64_t bytes);

  // Arenas: one range of a tier in which the caller places objects at offsets it chose (a plan's
  // offsets for objects whose lifetimes it knows ahead, packed by the offset planner): no range
  // is taken or faulted in per object, and such objects never move. create_arena takes the range
  // like an object's (the tier's budget; from its cache where it can) with every page faulted
  // in. Errors: kInvalidArgument for a tier that does not exist or 0 bytes; kOutOfMemory where
  // the tier has no room.
  Result<ArenaId> create_arena(TierIndex t, std::size_t bytes);
  // Places a large object (a page or more) at `offset` bytes into the arena. kUnavailable, with
  // nothing changed, where the arena does not exist, the offset is not page-aligned, the object
  // would pass the arena's end, or it would overlap a live object there: the caller allocates
  // it elsewhere (allocate()). Where the object there is on its way out (moving, or moves out of
  // the tier are pending: set_room_wait), it waits for it to leave (up to `occupant_wait`) first. Freed with
  // free() like any object. An arena's object moves only by copying: into another place (MoveOptions::place)
  // or, without one, to a new range.
  Result<ObjectInfo> allocate_in_arena(std::string_view name, std::size_t bytes, GroupId group, ObjectKey key,
                                       ArenaId arena, std::uint64_t offset,
                                       std::chrono::nanoseconds occupant_wait = std::chrono::nanoseconds{0});
  // The arena's range goes back to its tier's cache. kFailedPrecondition while an object lives
  // in it; kNotFound for an arena that does not exist.
  Status destroy_arena(ArenaId arena);
  // As destroy_arena, except where objects still live in it: then no object goes in any more
  // (allocate_in_arena and moves into its places refuse) and its range goes back when the last
  // one leaves. Returns how many objects it waits for (0: gone now); kNotFound as destroy_arena.
  Result<std::size_t> close_arena(ArenaId arena);
  // Called, under the allocator's lock, with the span of each range about to go back to its tier
  // (a released cache entry, a dropped empty group chunk): the profiler unprotects it there, as
  // the tier may hand the memory out again at once. Must not call the allocator. Set it before
  // other threads use the allocator; an empty function clears it. Not called on destruction.
  using ReleaseObserver = std::function<void(const SpanView&)>;
  void set_release_observer(ReleaseObserver observer);

  // Shadow copies. With keep_shadows on, a large object that moves in place (kRemap) to a faster
  // tier keeps its pages on the slower tier as a shadow (they stay reserved there, counted in
  // shadow_bytes) instead of caching them; moving it back there before anything drops the shadow
  // remaps those pages and copies nothing ("a clean move", counted in clean_moves; no emulated
  // charge). Whoever writes the object must drop its shadow first, with it pinned: the runtime
  // does so for every object a layer declares written and every object pin_objects pins. A shadow
  // also goes when the object is freed, moves elsewhere, fails a move, or when its tier needs the
  // room (like the cache). Off by default: with it on, a write that bypasses the layer marks and
  // pins would be lost at the next clean move.
  void set_keep_shadows(bool keep);
  // Room waits: an allocation whose preferred tier has no room, where moves out of that tier
  // under way (and, from `pending`, moves out handed to a mover and not begun) would leave room
  // enough when they end, waits for them (up to `limit` in all) and tries that tier again before
  // it falls back to a slower one. A move out takes milliseconds (an emulated one, 8 MiB: 7 ms);
  // an object that falls back is served from the slow tier at every use in its life. Counted in
  // TierUsage::room_waits and room_wait_ns. `pending` is called under the allocator's lock: it
  // must take no lock that a mover holds while it moves (an atomic read). While a move waits for
  // an object's pins, `pending` is not counted: the mover is held until a layer ends, and a birth
  // inside that layer (PyTorch allocates there) would wait the whole limit for it. A limit of 0
  // (the default): allocations never wait. Thread-safe.
  using PendingOutFn = std::function<std::uint64_t(TierIndex)>;
  void set_room_wait(std::chrono::nanoseconds limit, PendingOutFn pending = {});
  // Copies split over threads: a move's copy of kSplitCopyBytes or more is cut into `threads`
  // parts of whole pages, copied at once by the moving thread and threads - 1 helper threads
  // (started here, kept until the next call), so a move ends sooner where the tiers'
  // bandwidth grows with threads (a remote node, Optane, CXL). Meant for cores the training
  // threads leave spare; the runtime sets it (RuntimeOptions::copy_threads). An emulated tier's
  // charge for the move is its cost model's either way. 1 (the default): every copy on the moving
  // thread alone. Counted in TierUsage::split_copies. Call it before other threads use the
  // allocator (not thread-safe against moves under way); copy_threads() is. Errors: kUnavailable
  // where a helper thread cannot be started; copies are then on the moving thread alone.
  static constexpr std::size_t kSplitCopyBytes = CpuCopyEngine::kSplitBytes;
  Status set_copy_threads(unsigned threads);
  // The engine every move copies with (copy_engine.h): the CPU's by default (set_copy_threads
  // makes one). Same rules as set_copy_threads: before other threads use the allocator.
  void set_copy_engine(std::unique_ptr<CopyEngine> engine);
  // Tells the engine the bytes a layer used, at its end (CopyEngine::layer_used). Any thread.
  void layer_used(std::span<const UsedRange> ranges) { copy_engine_->layer_used(ranges); }
  unsigned copy_threads() const { return copy_threads_.load(std::memory_order_acquire); }
  // Drops the shadows of these objects (ids that are not live are skipped); with shadows off it
  // returns at once, taking no lock.
  void drop_shadows(std::span<const ObjectId> ids);

  // fork(): whoever owns the allocator calls these from its pthread_atfork handlers (the Runtime
  // does). prepare_fork turns new moves away (kUnavailable: the object stays), waits for the
  // copies under way to commit or roll back, and returns holding the allocator's lock; after_fork,
  // in the parent and in the child, lets it go and allows moves again. So a child finds every
  // object whole at its address (never between a move's two remaps) and can allocate (no lock
  // held by a thread it does not have). Not from a thread inside an allocator call.
  void prepare_fork();
  void after_fork();

 private:
  // A range that moves as one: a large object's pages, or a group chunk.
  struct Range {
    std::byte* base = nullptr;
    std::size_t bytes = 0;
    TierIndex tier = 0;   // placement
    TierIndex owner = 0;  // whose mapping; freed there
    ObjectTable::Slot slot = 0;
    std::uint32_t pins = 0;
    std::uint64_t last_pin = 0;  // pin_sequence() of its latest pin (0: never pinned)
    bool moving = false;
    bool abort_move = false;    // a pin stopped waiting: the move in flight must fail
    bool abortable = true;      // false for move_pages: it completes (address kept, bytes intact)
    bool free_pending = false;  // freed while moving: released when the move ends
    // Shadow copy (large objects, keep_shadows on): the pages of the slower tier it last moved in
    // from, bytes equal to the object's since no write was declared; moving back there remaps them.
    std::byte* shadow = nullptr;
    TierIndex shadow_tier = 0;   // placement of the shadow's pages (reserved there)
    TierIndex shadow_owner = 0;  // whose mapping they are
    ArenaId arena = 0;           // the arena it lives in (a part of the arena's range), else 0
    // Ready memory's shadow (keep_shadows on): the home place it last moved in from, still holding
    // its bytes and kept as its occupant; moving back there copies nothing (a clean move).
    std::optional<Place> home_copy;
    // Split (moved in segments): where each kSegmentBytes of it is and whose mapping that is;
    // `tier` and `owner` are then its first segment's. Empty: all of it on `tier`, of `owner`.
    struct Segment {
      TierIndex tier = 0;
      TierIndex owner = 0;
    };
    std::vector<Segment> segments;
    std::size_t segment_bytes(std::size_t k) const {
      return std::min(kSegmentBytes, bytes - k * kSegmentBytes);
    }
  };
  struct Chunk {  // shared pages of one group, of the small objects one thread allocated
    Range range;
    GroupId group = kDefaultGroup;
    std::uint32_t maker = 0;                                    // the allocating thread (this_thread_maker())
    SlotBitmap<kGroupChunkBytes / kSmallAlignmentBytes> slots;  // which 64-byte slots are taken
    std::size_t live = 0;                                       // live small objects in it
    std::uint64_t live_bytes = 0;
    // Empty, and neither moving nor pinned: cache that release_cache_locked may let go.
    bool releasable() const { return live == 0 && !range.moving && range.pins == 0; }
  };
  struct GroupState {
    std::vector<std::unique_ptr<Chunk>> chunks;
    std::size_t cursor = 0;  // next fit: the chunk the last small object went to
  };
  struct Live {
    ObjectInfo info;               // tier/owner/address of a small object follow its chunk
    Range range;                   // large objects: their own range
    Chunk* chunk = nullptr;        // small objects: their chunk
    std::uint32_t chunk_pins = 0;  // small objects: the pins on their chunk that are this object's
    Range& unit() { return chunk != nullptr ? chunk->range : range; }
    const Range& unit() const { return chunk != nullptr ? chunk->range : range; }
  };
  struct CachedRange {
    void* address = nullptr;
    TierIndex owner = 0;
    bool piece = false;  // a segment's pages (a split object's, or left by a segment move)
  };
  struct TierState {
    std::multimap<std::size_t, CachedRange> cache;  // reserved bytes -> range, freed for reuse
    std::uint64_t piece_bytes = 0;                  // of the cache, segments' pages (CachedRange::piece)
    TierUsage usage;
  };

  // Takes `bytes` (whole pages) on tier `t`: a cached range of the same size, else a new one,
  // releasing the tier's cache first if the budget demands. Caller holds mutex_.
  Result<Range> take_range(TierIndex t, std::size_t bytes);
  // A cached range of `bytes` on tier t (counted as reused), or the head of a larger one where
  // the budget has no room for a new range; nullopt when neither. Caller holds mutex_.
  std::optional<CachedRange> take_cached_locked(TierIndex t, std::size_t bytes);
  // Else a range of `bytes` made of smaller cached ranges' pages (see the .cc); nullopt when the
  // cache of one owner holds too little or the remap fails. Caller holds mutex_.
  std::optional<CachedRange> assemble_cached_locked(TierIndex t, std::size_t bytes);
  // Makes a placed object live on tier t: its id (the next one), key, the tier's and the
  // allocator's counts, its entries; returns its info. Caller holds mutex_.
  ObjectInfo admit_locked(Live live, TierIndex t, ObjectKey key);
  // Drops a freed large object: its span, its range (to its tier's cache) and its entry.
  void retire(ObjectId id, Range& range);
  // A range to tier t's cache (released instead where the tier is over its budget); `piece`: a
  // segment's pages.
  void give_back_range(TierIndex t, void* address, std::size_t bytes, TierIndex owner, bool piece = false);
  // Takes the cache entry `it` of tier t out of the cache's counts and the cache.
  void uncache_locked(TierIndex t, std::multimap<std::size_t, CachedRange>::iterator it);
  void release_range(TierIndex placement, TierIndex owner, void* address, std::size_t bytes);
  // Lets cached ranges (then shadows, then empty group chunks) of tier t go until it has
  // `need_bytes` of its budget free; kReleaseAll: all of them. Where all of them together with
  // the free room would still be less than `need_bytes`, lets none go.
  static constexpr std::uint64_t kReleaseAll = ~std::uint64_t{0};
  void release_cache_locked(TierIndex t, std::uint64_t need_bytes = kReleaseAll);
  // What release_cache_locked(t) would let go: cached ranges, shadows and empty group chunks of t.
  std::uint64_t releasable_bytes_locked(TierIndex t) const;
  void drop_shadow_locked(Range& r);
  void drop_shadows_on_locked(TierIndex t);  // every shadow kept on tier t
  Status reserve_for_move(TierIndex t, std::size_t bytes);
  Result<Range> place_small(Live& live, TierIndex t);
  Status no_room_error(std::string_view name, std::size_t bytes, TierIndex preferred) const;
  ObjectInfo view(const Live& live) const;
  // A split object's bytes (as asked) on each tier; empty for any other.
  std::vector<std::uint64_t> bytes_by_tier(const Live& live) const;
  // The bytes (as asked) of a large object that lie in its segment k.
  static std::uint64_t asked_bytes_in_segment(const Live& live, std::size_t k);
  // move() of one segment (options.segment), or of a split object's segments one by one;
  // `lock` holds mutex_ and the object is live, unpinned and not moving.
  Result<MoveResult> move_segment(std::unique_lock<std::mutex>& lock, ObjectId id, TierIndex to,
                                  std::uint32_t segment, const MoveOptions& options);
  // Whether a move may skip its copy (MoveOptions::discard_unless_pinned_after): under the lock,
  // for an object's own pages (not a chunk) moving in place by remap.
  static bool discards(const Range& r, bool whole_pages, MoveMethod method, const MoveOptions& options);
  // Phase 3 of a copying move (kRemap), under the lock: the copy at `destination` replaces the
  // pages at `base`; on success `destination` is cleared and `old_pages` is where the replaced
  // pages went (nullptr where the kernel dropped them).
  static Status remap_into_place(void*& destination, std::byte* base, std::size_t bytes, void*& old_pages);
  // A failed move's destination goes back (the cached range to the cache, a new one to its tier;
  // move_pages' reservation released), counted as a failed move on `to`. mutex_ held.
  void undo_transfer_locked(TierIndex to, void* destination, std::size_t bytes,
                            const std::optional<CachedRange>& cached, MoveMethod method);
  Status transfer(ObjectId id, TierIndex to, std::byte* base, std::size_t bytes,
                  const std::optional<CachedRange>& cached, bool clean, void*& destination,
                  MoveResult& result, bool& injected);
  Result<MoveResult> move_segments(std::unique_lock<std::mutex>& lock, ObjectId id, TierIndex to,
                                   const MoveOptions& options);
  void commit_move(ObjectId id, Live* live, Chunk* chunk, MoveMethod method, void* destination,
                   std::optional<ObjectTable::Slot> new_slot, MoveResult& result,
                   const Place* place = nullptr);
  // What phase 1 of a move hands the copy and phase 3: the range's pages and size, the chunk of a
  // small object, and the destination taken from a cache or a shadow (none: reserved).
  struct MoveTicket {
    std::byte* base = nullptr;
    std::size_t bytes = 0;
    Chunk* chunk = nullptr;
    std::optional<CachedRange> cached_destination;
  };
  void mark_moving_locked(Range& r, TierIndex from, TierIndex to, std::size_t bytes, MoveMethod method);
  bool end_moving_locked(Range& r, TierIndex from, TierIndex to, std::size_t bytes);
  Result<Live*> wait_for_pins_locked(std::unique_lock<std::mutex>& lock, ObjectId id,
                                     const MoveOptions& options);
  Status start_move_locked(Live& live, TierIndex to, const MoveOptions& options, MoveResult& result,
                           MoveTicket& ticket);
  Result<MoveResult> finish_move(ObjectId id, const MoveTicket& ticket, Status status, bool injected,
                                 void* destination, MoveResult result);
  Status move_failed_locked(ObjectId id, const Live* live, Range& r, TierIndex to, const Status& status,
                            bool injected, bool aborted);
  void keep_source_pages_locked(Range& r, const MoveTicket& ticket, void* old_pages,
                                const MoveResult& result);
  Status check_segment_move_locked(Live& live, std::uint32_t k, TierIndex to, MoveResult& result);
  Status start_segment_move_locked(Live& live, std::uint32_t k, const MoveOptions& options,
                                   MoveResult& result, MoveTicket& ticket);
  void commit_segment_locked(ObjectId id, Live& live, std::uint32_t k, const MoveTicket& ticket,
                             void* old_pages, MoveResult& result);

  std::vector<std::unique_ptr<Tier>> tiers_;
  ObjectTable table_;
  mutable std::mutex mutex_;
  std::condition_variable moved_or_unpinned_;             // a move ended, or pins were released
  std::vector<TierState> tier_state_;                     // by TierIndex
  std::unordered_map<ObjectId, Live> live_;               // every live object, and any freed while moving
  std::unordered_map<const void*, ObjectId> by_address_;  // live objects by start address
  // free()'s work once the object is found (its by_address_ entry gone). mutex_ held.
  void free_locked(std::unordered_map<ObjectId, Live>::iterator it);
  // One pin of `live` released (its unit's, and for a small object its own share). Caller holds mutex_.
  void unpin_locked(Live& live);
  struct GroupKey {
    GroupId group = kDefaultGroup;
    TierIndex tier = 0;       // placement
    std::uint32_t maker = 0;  // allocating thread
    // (Not `<=> = default`: clang-tidy 14 misreads the comparison it synthesizes.)
    bool operator<(const GroupKey& o) const {
      return std::tie(group, tier, maker) < std::tie(o.group, o.tier, o.maker);
    }
  };
  std::map<GroupKey, GroupState> groups_;  // small-object chunks by group, placement and maker
  struct Occupant {
    std::uint64_t end = 0;  // offset just past it
    ObjectId id = 0;        // the object there, or moving in
  };
  struct Arena {
    Range range;                             // whole, as taken from its tier
    std::map<std::uint64_t, Occupant> live;  // offset -> each live object in it (or moving in)
    bool closing = false;                    // close_arena: goes when `live` empties, takes none
  };
  // The occupant of arena `a` overlapping [offset, offset + bytes), or nullptr. mutex_ held.
  const Occupant* occupant_locked(const Arena& a, std::uint64_t offset, std::uint64_t bytes) const;
  // Lets a range's place in its arena go (its bytes stay the arena's). mutex_ held.
  void leave_place_locked(ArenaId arena, const std::byte* base);
  bool keeps_home_copy_locked(Range& r, ArenaId old_arena, const std::byte* old_base, TierIndex from,
                              TierIndex to);
  // move() into a planned place (place_moves.cc); `lock` holds mutex_, the object live, unpinned
  // and not moving.
  Result<MoveResult> move_to_place(std::unique_lock<std::mutex>& lock, ObjectId id, TierIndex to,
                                   const Place& place, const MoveOptions& options);
  void wait_for_occupant_locked(std::unique_lock<std::mutex>& lock, ObjectId id, const MoveOptions& options);
  Status start_place_move_locked(Live& live, TierIndex to, const Place& place, const MoveOptions& options,
                                 MoveResult& result, MoveTicket& ticket);
  Result<MoveResult> finish_place_move(ObjectId id, const MoveTicket& ticket, const Place& place,
                                       Status status, bool injected, void* destination, MoveResult result);
  std::map<ArenaId, Arena> arenas_;
  // Gives the arena's range back to its tier and forgets it. mutex_ held.
  void drop_arena_locked(std::map<ArenaId, Arena>::iterator it);
  ArenaId next_arena_ = 1;
  ObjectId next_id_ = 1;
  std::uint64_t live_bytes_ = 0;
  std::uint64_t peak_live_bytes_ = 0;
  std::atomic<std::uint64_t> relocations_{0};
  ReleaseObserver release_observer_;
  MoveFailureHook move_failure_hook_;
  std::atomic<std::uint64_t> pin_sequence_{0};       // written under mutex_, read without it
  std::atomic<std::uint32_t> pins_waiting_{0};       // pins_waiting()
  std::atomic<std::uint32_t> moves_pin_waiting_{0};  // moves_waiting_for_pins(); changed under mutex_
  std::atomic<bool> keep_shadows_{false};            // written under mutex_; drop_shadows reads it without
  std::chrono::nanoseconds room_wait_{0};            // set_room_wait; under mutex_
  PendingOutFn pending_out_;                         // set_room_wait; under mutex_
  std::atomic<unsigned> copy_threads_{1};            // set_copy_threads
  std::uint32_t moves_copying_ = 0;                  // moves between their reserve and their commit; mutex_
  bool fork_hold_ = false;                           // prepare_fork: new moves are refused; mutex_
  std::unique_ptr<CopyEngine> copy_engine_;          // set_copy_engine, set_copy_threads
  // A move's copy by the engine: kInternal where the engine says it failed (the move then fails).
  Status copy_with_engine(void* to, const void* from, std::size_t bytes, TierIndex to_tier,
                          MoveResult& result);
};

}  // namespace tensortier
