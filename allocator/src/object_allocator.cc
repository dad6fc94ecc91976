// Object placement, group packing, budget fallback, range reuse, moves and pins (see
// object_allocator.h).
#include "tensortier/allocator/object_allocator.h"

#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "os_pages.h"
#include "tensortier/enum_names.h"

namespace tensortier {
namespace {

// The alignment Tier::map_reserved gives a range of `bytes`.
std::size_t range_alignment(std::size_t bytes) {
  return bytes >= kHugePageBytes ? kHugePageBytes : kPageBytes;
}

std::uintptr_t as_uint(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p);
}

// The calling thread as a chunk's maker: a number of its own, from 1, never reused.
std::uint32_t this_thread_maker() {
  static std::atomic<std::uint32_t> next{1};
  thread_local const std::uint32_t mine = next.fetch_add(1, std::memory_order_relaxed);
  return mine;
}

// Rolls a failed move_pages migration back: the pages go back to `node`. The bytes are right
// wherever the pages are; a page that will not go back leaves the object on two nodes, which
// costs only speed, so that is logged (once per failed rollback) rather than failed.
void put_pages_back(void* base, std::size_t bytes, int node, const Status& why) {
  if (Status back = os::rebind_to_node(base, bytes, node); !back.is_ok()) {
    spdlog::warn(
        "a move_pages migration failed ({}) and its rollback to node {} did too ({}); the object's "
        "bytes are intact, but some of its pages stay on the other node",
        why.message(), node, back.message());
  }
}

}  // namespace

std::string_view to_string(MoveMethod method) {
  static constexpr EnumName<MoveMethod> kNames[] = {
      {MoveMethod::kNone, "none"},
      {MoveMethod::kMovePages, "move_pages (in place)"},
      {MoveMethod::kRemap, "copy + mremap (in place)"},
      {MoveMethod::kNewAddress, "copy to a new address"},
      {MoveMethod::kCopy, "copy into a planned place"},
  };
  return name_of(method, kNames, "?");
}

ObjectAllocator::ObjectAllocator(std::vector<std::unique_ptr<Tier>> tiers)
    : tiers_(std::move(tiers)), tier_state_(tiers_.size()), copy_engine_(CpuCopyEngine::create(1).value()) {
  for (std::size_t t = 0; t < tiers_.size(); ++t) tier_state_[t].usage.name = tiers_[t]->name();
}

Status ObjectAllocator::set_copy_threads(unsigned threads) {
  Result<std::unique_ptr<CpuCopyEngine>> engine = CpuCopyEngine::create(threads);
  if (!engine) {
    set_copy_engine(CpuCopyEngine::create(1).value());  // one thread never fails to start
    return engine.status();
  }
  set_copy_engine(std::move(engine).value());
  return Status::ok();
}

void ObjectAllocator::set_copy_engine(std::unique_ptr<CopyEngine> engine) {
  copy_threads_.store(engine->threads(), std::memory_order_release);
  copy_engine_ = std::move(engine);
}

Status ObjectAllocator::copy_with_engine(void* to, const void* from, std::size_t bytes, TierIndex to_tier,
                                         MoveResult& result) {
  result.copy_threads = copy_engine_->copy(to, from, bytes, CopyRoute{result.from, to_tier});
  if (result.copy_threads != 0) return Status::ok();
  return internal_error(
      fmt::format("the {} copy engine failed to copy {}", copy_engine_->name(), format_bytes(bytes)));
}

std::uint64_t ObjectAllocator::mapping_calls() {
  return os::mapping_calls();
}

ObjectAllocator::~ObjectAllocator() {
  for (auto& [id, live] : live_) {
    if (live.chunk != nullptr || live.range.arena != 0) continue;
    const Range& r = live.range;
    for (std::size_t k = 0; k < r.segments.size(); ++k)
      release_range(r.segments[k].tier, r.segments[k].owner, r.base + k * kSegmentBytes, r.segment_bytes(k));
    if (r.segments.empty()) release_range(r.tier, r.owner, r.base, r.bytes);
    if (live.range.shadow != nullptr)
      release_range(live.range.shadow_tier, live.range.shadow_owner, live.range.shadow, live.range.bytes);
  }
  for (auto& [key, group] : groups_) {
    for (auto& chunk : group.chunks)
      release_range(chunk->range.tier, chunk->range.owner, chunk->range.base, chunk->range.bytes);
  }
  for (auto& [id, arena] : arenas_)
    release_range(arena.range.tier, arena.range.owner, arena.range.base, arena.range.bytes);
  for (std::size_t t = 0; t < tiers_.size(); ++t) {
    for (auto& [bytes, range] : tier_state_[t].cache)
      release_range(static_cast<TierIndex>(t), range.owner, range.address, bytes);
  }
}

void ObjectAllocator::retire(ObjectId id, Range& range) {
  drop_shadow_locked(range);
  table_.erase(range.slot);
  if (range.arena != 0) {  // its bytes are the arena's: only the place is free again
    leave_place_locked(range.arena, range.base);
  } else if (!range.segments.empty()) {  // split: each segment's pages to their tier
    for (std::size_t k = 0; k < range.segments.size(); ++k) {
      give_back_range(range.segments[k].tier, range.base + k * kSegmentBytes, range.segment_bytes(k),
                      range.segments[k].owner, /*piece=*/true);
    }
  } else {
    give_back_range(range.tier, range.base, range.bytes, range.owner);
  }
  live_.erase(id);
}

Result<ArenaId> ObjectAllocator::create_arena(TierIndex t, std::size_t bytes) {
  if (t >= tiers_.size())
    return invalid_argument(fmt::format("create_arena: tier {} does not exist ({} tiers)", t, tiers_.size()));
  if (bytes == 0) return invalid_argument("create_arena: an arena of 0 bytes");
  std::lock_guard lock(mutex_);
  Result<Range> range = take_range(t, round_up(bytes, kPageBytes));
  if (!range) {
    return Status(range.status().code(),
                  fmt::format("create_arena of {} on tier '{}': {}", format_bytes(bytes), tiers_[t]->name(),
                              range.status().message()));
  }
  const ArenaId id = next_arena_++;
  arenas_.emplace(id, Arena{range.value(), {}});
  return id;
}

Status ObjectAllocator::destroy_arena(ArenaId id) {
  std::lock_guard lock(mutex_);
  auto it = arenas_.find(id);
  if (it == arenas_.end()) return not_found(fmt::format("destroy_arena: no arena {}", id));
  if (!it->second.live.empty()) {
    return failed_precondition(fmt::format(
        "destroy_arena: {} objects still live in arena {}; free them first", it->second.live.size(), id));
  }
  drop_arena_locked(it);
  return Status::ok();
}

Result<std::size_t> ObjectAllocator::close_arena(ArenaId id) {
  std::lock_guard lock(mutex_);
  auto it = arenas_.find(id);
  if (it == arenas_.end()) return not_found(fmt::format("close_arena: no arena {}", id));
  const std::size_t left = it->second.live.size();
  if (left > 0) {
    it->second.closing = true;  // leave_place_locked gives the range back after the last
    return left;
  }
  drop_arena_locked(it);
  return std::size_t{0};
}

void ObjectAllocator::drop_arena_locked(std::map<ArenaId, Arena>::iterator it) {
  const Range& r = it->second.range;
  give_back_range(r.tier, r.base, r.bytes, r.owner);
  arenas_.erase(it);
}

const ObjectAllocator::Occupant* ObjectAllocator::occupant_locked(const Arena& a, std::uint64_t offset,
                                                                  std::uint64_t bytes) const {
  // The occupant that starts last before this place's end overlaps it if it ends past its start
  // (occupants of an arena never overlap each other).
  auto next = a.live.lower_bound(offset + bytes);
  if (next == a.live.begin() || std::prev(next)->second.end <= offset) return nullptr;
  return &std::prev(next)->second;
}

// A copy out of a place on a slower tier into one on a faster tier leaves the source's bytes
// there; with shadows on they are kept as the object's home copy (its occupant entry stays) until
// something writes the object. Returns whether it keeps them. mutex_ held.
bool ObjectAllocator::keeps_home_copy_locked(Range& r, ArenaId old_arena, const std::byte* old_base,
                                             TierIndex from, TierIndex to) {
  if (!keep_shadows_.load(std::memory_order_relaxed) || r.arena == 0 || to >= from || r.free_pending)
    return false;
  const Arena& home = arenas_.at(old_arena);
  if (home.closing) return false;  // a home copy would keep a closing arena
  r.home_copy = Place{old_arena, static_cast<std::uint64_t>(old_base - home.range.base)};
  return true;
}

void ObjectAllocator::leave_place_locked(ArenaId arena, const std::byte* base) {
  auto it = arenas_.find(arena);
  Arena& a = it->second;
  a.live.erase(static_cast<std::uint64_t>(base - a.range.base));
  if (a.closing && a.live.empty()) drop_arena_locked(it);  // close_arena's: its last object has left
  moved_or_unpinned_.notify_all();                         // a birth may wait for this place
}

Result<ObjectInfo> ObjectAllocator::allocate_in_arena(std::string_view name, std::size_t bytes, GroupId group,
                                                      ObjectKey key, ArenaId arena_id, std::uint64_t offset,
                                                      std::chrono::nanoseconds occupant_wait) {
  if (bytes < kPageBytes || bytes > (std::size_t{1} << 47))
    return unavailable(
        fmt::format("object '{}': {} bytes do not go in an arena (a page or more)", name, bytes));
  std::unique_lock lock(mutex_);
  auto found = arenas_.find(arena_id);
  if (found == arenas_.end() || found->second.closing)
    return unavailable(fmt::format("object '{}': no arena {} (or it is closing)", name, arena_id));
  Arena* a = &found->second;
  const std::uint64_t reserved = round_up(bytes, kPageBytes);
  if (offset % kPageBytes != 0 || offset + reserved > a->range.bytes) {
    return unavailable(fmt::format("object '{}' ({}) at offset {} does not fit arena {} of {}", name,
                                   format_bytes(bytes), offset, arena_id, format_bytes(a->range.bytes)));
  }
  // A previous occupant on its way out (its move under way, or moves out of this tier handed to a
  // mover: set_room_wait's `pending`) is waited for, up to occupant_wait: the plan put this object
  // here after it. One that is not leaving (freed later by this very thread, say) is not.
  const auto wait_start = std::chrono::steady_clock::now();
  const auto deadline = wait_start + occupant_wait;
  bool waited = false;
  while (const Occupant* o = occupant_locked(*a, offset, reserved)) {
    auto it = live_.find(o->id);
    const bool leaving =
        (it != live_.end() && it->second.range.moving) || (pending_out_ && pending_out_(a->range.tier) > 0);
    const bool timed_out = !leaving || occupant_wait.count() <= 0 ||
                           moved_or_unpinned_.wait_until(lock, deadline) == std::cv_status::timeout;
    found = arenas_.find(arena_id);  // looked up again: it may have gone while we waited
    if (found == arenas_.end()) return unavailable(fmt::format("object '{}': no arena {}", name, arena_id));
    a = &found->second;
    if (timed_out && occupant_locked(*a, offset, reserved) != nullptr) {
      ++tier_state_[a->range.tier].usage.place_misses;
      return unavailable(
          fmt::format("object '{}' at offset {} of arena {}: the place is taken", name, offset, arena_id));
    }
    waited = waited || !timed_out;
  }
  Arena& arena = *a;
  if (waited) {
    TierUsage& usage = tier_state_[arena.range.tier].usage;
    ++usage.place_waits;
    usage.place_wait_ns += static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - wait_start)
            .count());
  }
  const TierIndex t = arena.range.tier;
  Live live;
  live.info.name = std::string(name);
  live.info.bytes = bytes;
  live.info.group = group;
  live.info.small = false;
  live.info.reserved_bytes = reserved;
  live.range.base = arena.range.base + offset;
  live.range.bytes = reserved;
  live.range.tier = t;
  live.range.owner = arena.range.owner;
  live.range.arena = arena_id;
  Result<ObjectTable::Slot> slot =
      table_.insert(SpanView{next_id_, as_uint(live.range.base), reserved, t, /*is_group=*/false});
  if (!slot)
    return Status(slot.status().code(), fmt::format("object '{}': {}", name, slot.status().message()));
  live.range.slot = slot.value();
  arena.live.emplace(offset, Occupant{offset + reserved, next_id_});
  live.info.address = live.range.base;
  ++tier_state_[t].usage.arena_allocations;
  return admit_locked(std::move(live), t, key);
}

ObjectInfo ObjectAllocator::admit_locked(Live live, TierIndex t, ObjectKey key) {
  live.info.id = next_id_++;  // the id its table slot was inserted under
  live.info.key = key != 0 ? key : live.info.id;
  TierUsage& usage = tier_state_[t].usage;
  usage.live_bytes += live.info.bytes;
  usage.peak_live_bytes = std::max(usage.peak_live_bytes, usage.live_bytes);
  live_bytes_ += live.info.bytes;
  peak_live_bytes_ = std::max(peak_live_bytes_, live_bytes_);
  ++usage.live_objects;
  ++usage.allocations;
  ObjectInfo info = view(live);
  by_address_.emplace(live.info.address, live.info.id);
  live_.emplace(live.info.id, std::move(live));
  return info;
}

void ObjectAllocator::release_range(TierIndex placement, TierIndex owner, void* address, std::size_t bytes) {
  tiers_[owner]->unmap_range(address, bytes);
  tiers_[placement]->unreserve(bytes);
}

std::optional<ObjectAllocator::CachedRange> ObjectAllocator::take_cached_locked(TierIndex t,
                                                                                std::size_t bytes) {
  TierState& state = tier_state_[t];
  if (auto it = state.cache.find(bytes); it != state.cache.end()) {
    const CachedRange cached = it->second;
    uncache_locked(t, it);
    ++state.usage.reused_ranges;
    return cached;
  }
  // Else, where the budget has no room for a new range, the cache serves: a budget held at the
  // step's peak otherwise churns it (ranges of other sizes let go, new ones faulted in). First
  // the smallest larger cached range of anonymous memory, split: the caller takes its head (its
  // pages are faulted in already) and the tail stays cached, where the tail starts aligned as a
  // range of its size must be. A memkind heap's ranges do not split, nor does a NUMA-node tier's
  // range that may hold huge pages other than at a huge-page boundary (move_pages would move the
  // huge page shared by head and tail whole: one object's move would take the other's pages
  // along). Then smaller ranges joined (assemble_cached_locked). Where the budget has room, a new
  // range is taken instead (measured: serving from the cache then as well left more ranges to
  // fault in, not fewer: split and joined ranges no longer match the sizes a step asks for).
  // Segments' pages (a page-granular policy's split objects) are the exception: a step does not
  // ask for their size again, so where the cache holds enough of them they are joined
  // (assemble_cached_locked) even with room in the budget; left alone they would pile up while
  // every allocation they could serve faults in new pages.
  const bool pieces_serve = state.piece_bytes >= bytes && bytes > kSegmentBytes;
  if (tiers_[t]->free_bytes() >= bytes && !pieces_serve) return std::nullopt;
  const bool numa_bound = tiers_[t]->numa_node().has_value();
  constexpr int kLargerTried = 8;
  int tried = 0;
  for (auto it = state.cache.upper_bound(bytes);
       it != state.cache.end() && tried < kLargerTried && !pieces_serve; ++it, ++tried) {
    const std::size_t size = it->first;
    const CachedRange cached = it->second;
    auto* tail = static_cast<std::byte*>(cached.address) + bytes;
    if (tiers_[cached.owner]->range_kind() != RangeKind::kAnonymous ||
        as_uint(tail) % range_alignment(size - bytes) != 0 ||
        (numa_bound && size >= kHugePageBytes && bytes % kHugePageBytes != 0))
      continue;
    uncache_locked(t, it);
    give_back_range(t, tail, size - bytes, cached.owner, cached.piece);
    ++state.usage.reused_ranges;
    return cached;
  }
  if (numa_bound || tiers_[t]->range_kind() != RangeKind::kAnonymous) return std::nullopt;
  return assemble_cached_locked(t, bytes);
}

std::optional<ObjectAllocator::CachedRange> ObjectAllocator::assemble_cached_locked(TierIndex t,
                                                                                    std::size_t bytes) {
  // Smaller cached ranges give their pages (mremap) to one new mapping, and what they lack is
  // new pages where the budget has room for them: the allocation faults in and zeroes only those,
  // where releasing the cached ranges and mapping a new range would fault in every page again
  // (on a budget held at the step's peak, that churn was about 9% of a ResNet-18 step). Pieces
  // of one owner only (a range is freed to one tier); the largest first, so few mremaps. Not on a
  // NUMA-node tier (take_cached_locked): the new mapping would carry no binding for new pages.
  TierState& state = tier_state_[t];
  constexpr std::size_t kMostPieces = 64;
  struct Piece {
    std::multimap<std::size_t, CachedRange>::iterator at;
    std::size_t take_bytes;
  };
  std::vector<Piece> pieces;
  std::optional<TierIndex> owner;
  std::size_t gathered = 0;
  for (auto it = state.cache.rbegin(); it != state.cache.rend() && gathered < bytes; ++it) {
    const TierIndex o = it->second.owner;
    if (tiers_[o]->range_kind() != RangeKind::kAnonymous || (owner && *owner != o)) continue;
    if (pieces.size() == kMostPieces) break;
    owner = o;
    const std::size_t take = std::min(it->first, bytes - gathered);
    pieces.push_back(Piece{std::prev(it.base()), take});
    gathered += take;
  }
  const std::size_t fresh_bytes = bytes - gathered;
  if (pieces.empty() || (fresh_bytes != 0 && !tiers_[t]->reserve(fresh_bytes).is_ok())) return std::nullopt;
  Result<void*> target = os::map_anonymous(bytes, range_alignment(bytes));
  if (!target) {
    if (fresh_bytes != 0) tiers_[t]->unreserve(fresh_bytes);
    return std::nullopt;
  }
  auto* at = static_cast<std::byte*>(target.value());
  if (bytes >= kHugePageBytes) os::advise_huge_pages(at, bytes);
  // The new pages first: a failure there leaves the cache as it was.
  if (fresh_bytes != 0) {
    if (Status s = os::populate(at + gathered, fresh_bytes); !s.is_ok()) {
      os::unmap(at, bytes);
      tiers_[t]->unreserve(fresh_bytes);
      return std::nullopt;
    }
  }
  std::size_t placed = 0;
  for (const Piece& piece : pieces) {
    const std::size_t size = piece.at->first;
    const CachedRange cached = piece.at->second;
    if (Status s = os::remap_pages(cached.address, piece.take_bytes, at + placed); !s.is_ok()) {
      // What moved already is in the new mapping: let it go with it, as released cache.
      os::unmap(at, bytes);
      tiers_[t]->unreserve(placed + fresh_bytes);
      state.usage.cached_bytes -= placed;
      return std::nullopt;
    }
    // Its old address is gone (the profiler stops tracking it there) ...
    if (release_observer_)
      release_observer_(SpanView{0, as_uint(cached.address), piece.take_bytes, t, false});
    if (cached.piece) state.piece_bytes -= size;
    state.cache.erase(piece.at);
    placed += piece.take_bytes;
    if (piece.take_bytes == size) continue;
    // ... and the part of the last piece not taken stays cached where it can be (aligned as a
    // range of its size must be), else it goes.
    auto* rest = static_cast<std::byte*>(cached.address) + piece.take_bytes;
    const std::size_t rest_bytes = size - piece.take_bytes;
    if (as_uint(rest) % range_alignment(rest_bytes) == 0) {
      state.cache.emplace(rest_bytes, CachedRange{rest, cached.owner, cached.piece});
      if (cached.piece) state.piece_bytes += rest_bytes;
    } else {
      if (release_observer_) release_observer_(SpanView{0, as_uint(rest), rest_bytes, t, false});
      release_range(t, cached.owner, rest, rest_bytes);
      state.usage.cached_bytes -= rest_bytes;
    }
  }
  state.usage.cached_bytes -= gathered;
  ++state.usage.reused_ranges;
  ++state.usage.assembled_ranges;
  return CachedRange{at, *owner};
}

Result<ObjectAllocator::Range> ObjectAllocator::take_range(TierIndex t, std::size_t bytes) {
  TierState& state = tier_state_[t];
  Range range;
  range.bytes = bytes;
  range.tier = t;
  if (std::optional<CachedRange> cached = take_cached_locked(t, bytes)) {
    range.base = static_cast<std::byte*>(cached->address);
    range.owner = cached->owner;
    return range;
  }
  Result<void*> mapped = tiers_[t]->allocate(bytes);
  if (!mapped && mapped.status().code() == StatusCode::kOutOfMemory) {
    release_cache_locked(t, bytes);
    mapped = tiers_[t]->allocate(bytes);
  }
  if (!mapped) return mapped.status();
  ++state.usage.new_ranges;
  range.base = static_cast<std::byte*>(mapped.value());
  range.owner = t;
  return range;
}

void ObjectAllocator::uncache_locked(TierIndex t, std::multimap<std::size_t, CachedRange>::iterator it) {
  TierState& state = tier_state_[t];
  state.usage.cached_bytes -= it->first;
  if (it->second.piece) state.piece_bytes -= it->first;
  state.cache.erase(it);
}

void ObjectAllocator::give_back_range(TierIndex t, void* address, std::size_t bytes, TierIndex owner,
                                      bool piece) {
  if (tiers_[t]->used_bytes() > tiers_[t]->budget_bytes()) {  // over a lowered budget: no caching
    if (release_observer_) release_observer_(SpanView{0, as_uint(address), bytes, t, false});
    release_range(t, owner, address, bytes);
    return;
  }
  tier_state_[t].cache.emplace(bytes, CachedRange{address, owner, piece});
  tier_state_[t].usage.cached_bytes += bytes;
  if (piece) tier_state_[t].piece_bytes += bytes;
}

void ObjectAllocator::drop_shadow_locked(Range& r) {
  if (r.home_copy) {  // its home goes back to the arena
    const Arena& home = arenas_.at(r.home_copy->arena);
    leave_place_locked(r.home_copy->arena, home.range.base + r.home_copy->offset);
    r.home_copy.reset();
  }
  if (r.shadow == nullptr) return;
  tier_state_[r.shadow_tier].usage.shadow_bytes -= r.bytes;
  give_back_range(r.shadow_tier, r.shadow, r.bytes, r.shadow_owner);
  r.shadow = nullptr;
}

void ObjectAllocator::drop_shadows_on_locked(TierIndex t) {
  if (tier_state_[t].usage.shadow_bytes == 0) return;
  for (auto& [id, live] : live_) {
    if (live.chunk == nullptr && live.range.shadow != nullptr && live.range.shadow_tier == t)
      drop_shadow_locked(live.range);
  }
}

void ObjectAllocator::set_keep_shadows(bool keep) {
  std::lock_guard lock(mutex_);
  keep_shadows_.store(keep, std::memory_order_release);
  if (!keep) {
    for (TierIndex t = 0; t < tiers_.size(); ++t) drop_shadows_on_locked(t);
  }
}

void ObjectAllocator::set_room_wait(std::chrono::nanoseconds limit, PendingOutFn pending) {
  std::lock_guard lock(mutex_);
  room_wait_ = std::max(limit, std::chrono::nanoseconds{0});
  pending_out_ = std::move(pending);
}

void ObjectAllocator::drop_shadows(std::span<const ObjectId> ids) {
  // Off, there are none (set_keep_shadows(false) dropped them): no lock taken on a layer's way in.
  if (!keep_shadows_.load(std::memory_order_acquire)) return;
  std::lock_guard lock(mutex_);
  for (ObjectId id : ids) {
    auto it = live_.find(id);
    if (it != live_.end() && it->second.chunk == nullptr) drop_shadow_locked(it->second.range);
  }
}

std::uint64_t ObjectAllocator::releasable_bytes_locked(TierIndex t) const {
  const TierState& state = tier_state_[t];
  std::uint64_t bytes = state.usage.cached_bytes + state.usage.shadow_bytes;
  for (const auto& [key, group] : groups_) {
    if (key.tier != t) continue;
    for (const std::unique_ptr<Chunk>& chunk : group.chunks) {
      if (chunk->releasable()) bytes += chunk->range.bytes;
    }
  }
  return bytes;
}

void ObjectAllocator::release_cache_locked(TierIndex t, std::uint64_t need_bytes) {
  // Only as much as the room asked: a cached range let go now is a range of new pages (faults)
  // for the next allocation of its size. Smallest first: a large range can still serve smaller
  // objects (take_range splits it).
  auto enough = [&] { return need_bytes != kReleaseAll && tiers_[t]->free_bytes() >= need_bytes; };
  TierState& state = tier_state_[t];
  // Where letting every cached range, shadow and empty chunk go would still leave too little
  // room, none goes: the caller fails all the same (and may wait for moves out, or take a slower
  // tier), and what was let go would be pages to fault in again.
  if (need_bytes != kReleaseAll && tiers_[t]->free_bytes() + releasable_bytes_locked(t) < need_bytes) return;
  auto release_cached = [&] {
    while (!state.cache.empty() && !enough()) {
      auto it = state.cache.begin();
      const auto [bytes, range] = *it;
      if (release_observer_) release_observer_(SpanView{0, as_uint(range.address), bytes, t, false});
      release_range(t, range.owner, range.address, bytes);
      uncache_locked(t, it);
    }
  };
  release_cached();
  if (enough()) return;
  drop_shadows_on_locked(t);  // shadows next: they go to the cache, released below
  release_cached();
  if (enough()) return;
  // Empty group chunks on this tier are cache too (not while they move or are pinned).
  for (auto& [key, group] : groups_) {
    if (key.tier != t) continue;
    const GroupId group_id = key.group;  // lambdas cannot capture structured bindings before clang 16
    std::erase_if(group.chunks, [&](const std::unique_ptr<Chunk>& chunk) {
      if (!chunk->releasable()) return false;
      const Range& r = chunk->range;
      if (release_observer_) release_observer_(SpanView{group_id, as_uint(r.base), r.bytes, t, true});
      table_.erase(r.slot);
      release_range(t, r.owner, r.base, r.bytes);
      return true;
    });
  }
}

void ObjectAllocator::set_release_observer(ReleaseObserver observer) {
  std::lock_guard lock(mutex_);
  release_observer_ = std::move(observer);
}

void ObjectAllocator::set_move_failure_hook(MoveFailureHook hook) {
  std::lock_guard lock(mutex_);
  move_failure_hook_ = std::move(hook);
}

void ObjectAllocator::release_cache() {
  std::lock_guard lock(mutex_);
  for (TierIndex t = 0; t < tiers_.size(); ++t) release_cache_locked(t);
}

Status ObjectAllocator::set_budget(TierIndex t, std::uint64_t bytes) {
  if (t >= tiers_.size())
    return invalid_argument(fmt::format("set_budget: tier {} does not exist ({} tiers)", t, tiers_.size()));
  if (bytes == 0)
    return invalid_argument(fmt::format("set_budget: a budget of 0 bytes for tier '{}'", tiers_[t]->name()));
  std::lock_guard lock(mutex_);
  if (tiers_[t]->used_bytes() > bytes) {
    tiers_[t]->set_budget_bytes(bytes);
    release_cache_locked(t);
  }
  tiers_[t]->set_budget_bytes(bytes);  // again: the peak starts after the cache went
  return Status::ok();
}

// Places a small object in a chunk of its group on tier t with room (not one that is moving: its
// bytes are being copied), trying the chunks next fit from the last one used, else in a new
// chunk. Returns the object's own range (base, bytes).
Result<ObjectAllocator::Range> ObjectAllocator::place_small(Live& live, TierIndex t) {
  const std::size_t bytes = round_up(live.info.bytes, kSmallAlignmentBytes);
  const std::size_t count = bytes / kSmallAlignmentBytes;
  const std::uint32_t maker = this_thread_maker();
  GroupState* group = &groups_[{live.info.group, t, maker}];
  Chunk* chunk = nullptr;
  std::optional<std::size_t> first;
  const std::size_t chunks = group->chunks.size();
  for (std::size_t i = 0; i < chunks && !first; ++i) {
    const std::size_t at = (group->cursor + i) % chunks;
    Chunk& c = *group->chunks[at];
    if (c.range.moving || c.slots.free_slots() < count) continue;
    first = c.slots.take(count);
    if (first) {
      chunk = &c;
      group->cursor = at;
    }
  }
  if (chunk == nullptr) {
    Result<Range> range = take_range(t, kGroupChunkBytes);  // may drop empty chunks of groups_
    if (!range) return range.status();
    Result<ObjectTable::Slot> slot = table_.insert(
        SpanView{live.info.group, as_uint(range->base), kGroupChunkBytes, t, /*is_group=*/true});
    if (!slot) {  // the range goes back: nothing leaks
      give_back_range(t, range->base, range->bytes, range->owner);
      return slot.status();
    }
    group = &groups_[{live.info.group, t, maker}];
    auto fresh = std::make_unique<Chunk>();
    fresh->range = range.value();
    fresh->range.slot = slot.value();
    fresh->group = live.info.group;
    fresh->maker = maker;
    first = fresh->slots.take(count);
    chunk = fresh.get();
    group->chunks.push_back(std::move(fresh));
    group->cursor = group->chunks.size() - 1;
  }
  Range placed;
  placed.base = chunk->range.base + *first * kSmallAlignmentBytes;
  placed.bytes = bytes;
  ++chunk->live;
  chunk->live_bytes += live.info.bytes;
  live.chunk = chunk;
  return placed;
}

Status ObjectAllocator::no_room_error(std::string_view name, std::size_t bytes, TierIndex preferred) const {
  std::string tiers;
  for (TierIndex t = preferred; t < tiers_.size(); ++t) {
    tiers += fmt::format("{}{} has {} of {} free", tiers.empty() ? "" : "; ", tiers_[t]->name(),
                         format_bytes(tiers_[t]->free_bytes()), format_bytes(tiers_[t]->budget_bytes()));
  }
  return out_of_memory(
      fmt::format("object '{}' ({}) fits no tier ({}); raise a tier's budget in the tier spec "
                  "(TENSORTIER_TIERS, docs/TIERS.md) or free objects first",
                  name, format_bytes(bytes), tiers));
}

ObjectInfo ObjectAllocator::view(const Live& live) const {
  ObjectInfo info = live.info;
  info.tier = live.unit().tier;
  info.owner = live.unit().owner;
  info.bytes_by_tier = bytes_by_tier(live);
  info.arena = live.chunk == nullptr ? live.range.arena : 0;
  if (live.chunk == nullptr) {
    for (const Range::Segment& s : live.range.segments) info.segment_tiers.push_back(s.tier);
  }
  return info;
}

Result<ObjectInfo> ObjectAllocator::allocate(std::string_view name, std::size_t bytes, GroupId group,
                                             TierIndex preferred, ObjectKey key) {
  if (bytes == 0) {
    return invalid_argument(fmt::format(
        "object '{}': 0 bytes asked; an object needs at least 1 byte (skip empty tensors)", name));
  }
  if (preferred >= tiers_.size()) {
    return invalid_argument(fmt::format("object '{}': preferred tier {} does not exist ({} tiers)", name,
                                        preferred, tiers_.size()));
  }
  if (bytes > (std::size_t{1} << 47)) {
    return out_of_memory(fmt::format("object '{}': {} bytes is beyond any machine's memory", name, bytes));
  }
  std::unique_lock lock(mutex_);
  std::string refusal;  // the first refusal that was not the budget's
  Live live;
  live.info.name = std::string(name);
  live.info.bytes = bytes;
  live.info.group = group;
  live.info.small = bytes < kPageBytes;
  live.info.reserved_bytes = live.info.small ? 0 : round_up(bytes, kPageBytes);
  std::optional<std::chrono::steady_clock::time_point> room_deadline;  // of the preferred tier's wait
  std::uint64_t room_waited_ns = 0;
  for (TierIndex t = preferred; t < tiers_.size(); ++t) {
    Result<Range> placed = live.info.small ? place_small(live, t) : take_range(t, live.info.reserved_bytes);
    if (!placed) {
      if (placed.status().code() != StatusCode::kOutOfMemory) return placed.status();
      // The budget had room, so the OS (or the object table) refused: said as such at the end.
      const std::size_t needed = live.info.small ? kGroupChunkBytes : live.info.reserved_bytes;
      if (tiers_[t]->free_bytes() >= needed && refusal.empty()) refusal = placed.status().message();
      // Moves out of the preferred tier would make room: wait for them (set_room_wait).
      TierUsage& usage = tier_state_[t].usage;
      const std::uint64_t leaving = t == preferred && room_wait_.count() > 0
                                        ? usage.leaving_bytes + (pending_out_ ? pending_out_(t) : 0)
                                        : 0;
      if (leaving > 0 && tiers_[t]->free_bytes() + releasable_bytes_locked(t) + leaving >= needed) {
        const auto now = std::chrono::steady_clock::now();
        if (!room_deadline) {
          room_deadline = now + room_wait_;
          ++usage.room_waits;
        }
        if (now < *room_deadline) {
          moved_or_unpinned_.wait_until(lock, *room_deadline);
          const auto waited_ns = static_cast<std::uint64_t>(
              std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - now)
                  .count());
          usage.room_wait_ns += waited_ns;
          room_waited_ns += waited_ns;
          --t;  // the same tier again
          continue;
        }
      }
      continue;  // no room on this tier: try the next slower one
    }
    if (!live.info.small) {
      Result<ObjectTable::Slot> slot =
          table_.insert(SpanView{next_id_, as_uint(placed->base), placed->bytes, t, /*is_group=*/false});
      if (!slot) {  // the range goes back: nothing leaks
        give_back_range(t, placed->base, placed->bytes, placed->owner);
        return Status(slot.status().code(), fmt::format("object '{}': {}", name, slot.status().message()));
      }
      live.range = placed.value();
      live.range.slot = slot.value();
    }
    live.info.address = placed->base;
    if (t != preferred) {
      ++tier_state_[preferred].usage.fallbacks_out;
      ++tier_state_[t].usage.fallbacks_in;
    }
    ObjectInfo admitted = admit_locked(std::move(live), t, key);
    admitted.room_wait_ns = room_waited_ns;
    return admitted;
  }
  if (!refusal.empty()) {
    return out_of_memory(
        fmt::format("object '{}' ({}): {}, with room left in the budget; the budget is more "
                    "than the machine can give: lower it in the tier spec, or free memory",
                    name, format_bytes(bytes), refusal));
  }
  return no_room_error(name, bytes, preferred);
}

Status ObjectAllocator::free(const void* address) {
  std::lock_guard lock(mutex_);
  auto found = by_address_.find(address);
  if (found == by_address_.end()) {
    return not_found(
        fmt::format("free of {}: not the start of a live object (never allocated by this runtime, or already "
                    "freed); nothing was changed",
                    address));
  }
  const ObjectId id = found->second;
  by_address_.erase(found);
  free_locked(live_.find(id));
  return Status::ok();
}

Status ObjectAllocator::free(ObjectId id) {
  std::lock_guard lock(mutex_);
  auto it = live_.find(id);
  if (it == live_.end() || it->second.range.free_pending)
    return not_found(fmt::format(
        "free of object {}: not live (never allocated, or already freed); nothing was changed", id));
  by_address_.erase(it->second.info.address);
  free_locked(it);
  return Status::ok();
}

void ObjectAllocator::free_locked(std::unordered_map<ObjectId, Live>::iterator it) {
  const ObjectId id = it->first;
  Live& live = it->second;
  const TierIndex t = live.unit().tier;
  TierUsage& usage = tier_state_[t].usage;
  if (const std::vector<std::uint64_t> split = bytes_by_tier(live); !split.empty()) {
    for (TierIndex k = 0; k < split.size(); ++k) tier_state_[k].usage.live_bytes -= split[k];
  } else {
    usage.live_bytes -= live.info.bytes;
  }
  live_bytes_ -= live.info.bytes;
  --usage.live_objects;
  if (live.chunk != nullptr) {
    Chunk& chunk = *live.chunk;
    chunk.live_bytes -= live.info.bytes;
    --chunk.live;
    const auto offset =
        static_cast<std::size_t>(static_cast<const std::byte*>(live.info.address) - chunk.range.base);
    chunk.slots.give_back(offset / kSmallAlignmentBytes,
                          round_up(live.info.bytes, kSmallAlignmentBytes) / kSmallAlignmentBytes);
    live_.erase(it);
  } else if (live.range.moving) {
    live.range.free_pending = true;  // the mover releases it when its copy ends
    live.range.abort_move = true;
  } else {
    retire(id, live.range);
  }
}

Result<ObjectInfo> ObjectAllocator::info(const void* address) const {
  std::lock_guard lock(mutex_);
  auto it = by_address_.find(address);
  if (it == by_address_.end()) return not_found(fmt::format("{} is not the start of a live object", address));
  return view(live_.at(it->second));
}

Result<ObjectInfo> ObjectAllocator::info_by_id(ObjectId id) const {
  std::lock_guard lock(mutex_);
  auto it = live_.find(id);
  if (it == live_.end() || it->second.range.free_pending)
    return not_found(fmt::format("object {} is not live", id));
  return view(it->second);
}

Result<ObjectId> ObjectAllocator::id_of(const void* address) const {
  std::lock_guard lock(mutex_);
  auto it = by_address_.find(address);
  if (it == by_address_.end()) return not_found(fmt::format("{} is not the start of a live object", address));
  return it->second;
}

std::size_t ObjectAllocator::ids_of(std::span<const void* const> addresses,
                                    std::vector<ObjectId>* ids) const {
  std::lock_guard lock(mutex_);
  for (std::size_t i = 0; i < addresses.size(); ++i) {
    auto it = by_address_.find(addresses[i]);
    if (it == by_address_.end()) return i;
    ids->push_back(it->second);
  }
  return addresses.size();
}

std::vector<ObjectInfo> ObjectAllocator::objects() const {
  std::lock_guard lock(mutex_);
  std::vector<ObjectInfo> out;
  out.reserve(live_.size());
  for (const auto& [id, live] : live_) {
    if (!live.range.free_pending) out.push_back(view(live));
  }
  return out;
}

MoveMethod ObjectAllocator::move_method(TierIndex from, TierIndex to) const {
  if (from == to) return MoveMethod::kNone;
  const Tier& a = *tiers_.at(from);
  const Tier& b = *tiers_.at(to);
  if (a.numa_node() && b.numa_node() && a.range_kind() == RangeKind::kAnonymous &&
      b.range_kind() == RangeKind::kAnonymous)
    return MoveMethod::kMovePages;
  if (a.range_kind() == RangeKind::kAnonymous && b.range_kind() == RangeKind::kAnonymous)
    return MoveMethod::kRemap;
  return MoveMethod::kNewAddress;
}

Status ObjectAllocator::reserve_for_move(TierIndex t, std::size_t bytes) {
  Status s = tiers_[t]->reserve(bytes);
  if (s.code() == StatusCode::kOutOfMemory) {
    release_cache_locked(t, bytes);
    s = tiers_[t]->reserve(bytes);
  }
  return s;
}

// Phase 2 of a move, no lock held: migrate the pages, or copy into a new range on the destination
// (a cached one where given; no copy and no emulated charge where `clean`: the object's shadow
// there, or bytes the caller found dead). An emulated side reserves the move's time on its
// bandwidth timeline and waits for it. Then the failure hook; an injected failure of a page
// migration puts the pages back. Fills result's times.
Status ObjectAllocator::transfer(ObjectId id, TierIndex to, std::byte* base, std::size_t bytes,
                                 const std::optional<CachedRange>& cached, bool clean, void*& destination,
                                 MoveResult& result, bool& injected) {
  const std::uint64_t start_ns = steady_now_ns();
  Status status = Status::ok();
  if (result.method == MoveMethod::kMovePages) {
    status = os::rebind_to_node(base, bytes, *tiers_[to]->numa_node());
    if (!status.is_ok()) put_pages_back(base, bytes, *tiers_[result.from]->numa_node(), status);
  } else if (cached) {
    destination = cached->address;
    if (!clean) status = copy_with_engine(destination, base, bytes, to, result);
  } else {
    Result<void*> mapped = tiers_[to]->map_reserved(bytes);  // populated: the pages are faulted in
    if (mapped) {
      destination = mapped.value();
      if (!clean) status = copy_with_engine(destination, base, bytes, to, result);
    } else {
      status = mapped.status();
    }
  }
  result.copy_ns = steady_now_ns() - start_ns;
  std::uint64_t charged_until = 0;
  for (const auto& [t, direction] :
       {std::pair{to, MoveDirection::kIntoSlow}, std::pair{result.from, MoveDirection::kOutOfSlow}}) {
    if (const CostModel* model = tiers_[t]->cost_model(); model != nullptr && status.is_ok() && !clean) {
      charged_until =
          std::max(charged_until, tiers_[t]->timeline()->reserve(start_ns, model->move_ns(bytes, direction)));
    }
  }
  if (charged_until != 0) {
    // Asleep, no spin: a move's emulated time is waited out by whoever moves (the mover thread
    // most of all), and a spin would take a core from the layers at every move.
    sleep_until_ns(charged_until);
    result.charge_ns = steady_now_ns() - start_ns - result.copy_ns;
  }
  MoveFailureHook hook;
  {
    std::lock_guard lock(mutex_);
    hook = move_failure_hook_;
  }
  injected = status.is_ok() && hook && hook(id, to);
  if (injected && result.method == MoveMethod::kMovePages) {  // the pages go back where they were
    put_pages_back(base, bytes, *tiers_[result.from]->numa_node(), internal_error("injected failure"));
  }
  return status;
}

Status ObjectAllocator::remap_into_place(void*& destination, std::byte* base, std::size_t bytes,
                                         void*& old_pages) {
  Result<void*> replaced = os::replace_mapping(destination, base, bytes, range_alignment(bytes));
  if (!replaced) return replaced.status();
  old_pages = replaced.value();
  destination = nullptr;  // its mapping now lives at base
  return Status::ok();
}

void ObjectAllocator::undo_transfer_locked(TierIndex to, void* destination, std::size_t bytes,
                                           const std::optional<CachedRange>& cached, MoveMethod method) {
  if (destination != nullptr && cached) {
    give_back_range(to, destination, bytes, cached->owner);
  } else if (destination != nullptr) {
    tiers_[to]->deallocate(destination, bytes);
  }
  if (method == MoveMethod::kMovePages) tiers_[to]->unreserve(bytes);
  ++tier_state_[to].usage.failed_moves;
}

bool ObjectAllocator::discards(const Range& r, bool whole_pages, MoveMethod method,
                               const MoveOptions& options) {
  return options.discard_unless_pinned_after != 0 && whole_pages && method == MoveMethod::kRemap &&
         r.last_pin <= options.discard_unless_pinned_after;
}

// The range is moving: `bytes` in flight from tier `from` to `to`. Pages migrated by the kernel
// keep their address and bytes under concurrent use, and a half-undone migration would leave
// pages on the wrong node: such a move always completes (not abortable). mutex_ held.
void ObjectAllocator::mark_moving_locked(Range& r, TierIndex from, TierIndex to, std::size_t bytes,
                                         MoveMethod method) {
  r.moving = true;
  ++moves_copying_;
  r.abort_move = false;
  r.abortable = method != MoveMethod::kMovePages;
  tier_state_[to].usage.in_flight_bytes += bytes;
  tier_state_[from].usage.leaving_bytes += bytes;
}

// The copy is over: the range no longer moving, waiters woken; returns whether a layer asked to
// abort it. prepare_fork waits for moves_copying_ under the lock: the commit after this is done
// before a fork. mutex_ held.
bool ObjectAllocator::end_moving_locked(Range& r, TierIndex from, TierIndex to, std::size_t bytes) {
  tier_state_[to].usage.in_flight_bytes -= bytes;
  tier_state_[from].usage.leaving_bytes -= bytes;
  r.moving = false;
  moved_or_unpinned_.notify_all();
  --moves_copying_;
  const bool aborted = r.abort_move && r.abortable;
  r.abort_move = false;
  return aborted;
}

// A move in three phases: under the lock, wait for pins, check and reserve the destination
// (start_move_locked); without it, copy (transfer); under it again, commit or roll back
// (finish_move). The object keeps its bytes and address for readers throughout.
Result<MoveResult> ObjectAllocator::move(ObjectId id, TierIndex to, const MoveOptions& options) {
  if (to >= tiers_.size()) {
    return invalid_argument(
        fmt::format("move of object {}: tier {} does not exist ({} tiers)", id, to, tiers_.size()));
  }
  MoveResult result;
  result.id = id;
  result.to = to;
  MoveTicket ticket;
  {
    std::unique_lock lock(mutex_);
    wait_for_occupant_locked(lock, id, options);  // (place_moves.cc)
    Result<Live*> waited = wait_for_pins_locked(lock, id, options);
    if (!waited) return waited.status();
    Live& live = *waited.value();
    if (options.place) return move_to_place(lock, id, to, *options.place, options);
    if (options.segment != kWholeObject || (live.chunk == nullptr && !live.range.segments.empty()))
      return move_segments(lock, id, to, options);
    result.from = live.unit().tier;
    result.address = live.info.address;
    if (result.from == to && live.unit().arena == 0)
      return result;  // already there (an arena's object
                      // leaves its place: a new range)
    if (Status s = start_move_locked(live, to, options, result, ticket); !s.is_ok()) return s;
  }
  result.bytes = ticket.bytes;
  void* destination = nullptr;
  bool injected = false;
  Status status = transfer(id, to, ticket.base, ticket.bytes, ticket.cached_destination,
                           result.clean || result.discarded, destination, result, injected);
  return finish_move(id, ticket, status, injected, destination, result);
}

// Waits (up to options.pin_wait) until no layer pins the object; the object looked up afresh after
// every wait, as it may be freed meanwhile. Caller holds `lock`.
Result<ObjectAllocator::Live*> ObjectAllocator::wait_for_pins_locked(std::unique_lock<std::mutex>& lock,
                                                                     ObjectId id,
                                                                     const MoveOptions& options) {
  const auto deadline = std::chrono::steady_clock::now() + options.pin_wait;
  bool timed_out = false;
  while (true) {
    if (fork_hold_) return unavailable(fmt::format("move of object {}: a fork() is under way", id));
    auto it = live_.find(id);
    if (it == live_.end() || it->second.range.free_pending)
      return not_found(fmt::format("move of object {}: no such live object", id));
    Live* live = &it->second;
    const Range& r = live->unit();
    if (r.moving)
      return unavailable(
          fmt::format("move of '{}': it is already moving; wait for that move", live->info.name));
    if (r.pins == 0) return live;
    if (timed_out) {
      return unavailable(fmt::format(
          "move of '{}': a running layer kept it pinned for {} ms; try after the layer", live->info.name,
          std::chrono::duration_cast<std::chrono::milliseconds>(options.pin_wait).count()));
    }
    timed_out = moved_or_unpinned_.wait_until(lock, deadline) == std::cv_status::timeout;
  }
}

// Phase 1 after the pins: checks the move can be made, takes its destination (the object's shadow
// there, a cached range, or a reservation) and marks the range moving. Caller holds mutex_.
Status ObjectAllocator::start_move_locked(Live& live, TierIndex to, const MoveOptions& options,
                                          MoveResult& result, MoveTicket& ticket) {
  Range& r = live.unit();
  ticket.chunk = live.chunk;
  if (r.home_copy) drop_shadow_locked(r);  // leaving ready memory: its home goes back
  // An arena's object leaves its place by a copy to a new range (its pages are the arena's).
  result.method = r.arena != 0 ? MoveMethod::kNewAddress : move_method(r.tier, to);
  result.discarded = discards(r, ticket.chunk == nullptr, result.method, options);
  if (ticket.chunk != nullptr && result.method == MoveMethod::kNewAddress) {
    return failed_precondition(
        fmt::format("move of '{}': a small object moves with its 64 KiB chunk, which moves only between "
                    "tiers that move "
                    "in place ({} to {} needs a new address); use dram, numa or emulated tiers",
                    live.info.name, tiers_[r.tier]->name(), tiers_[to]->name()));
  }
  // A shadow on the destination holds the object's bytes already: the move remaps it (clean).
  // Any other shadow goes.
  if (ticket.chunk == nullptr && r.shadow != nullptr) {
    if (result.method == MoveMethod::kRemap && r.shadow_tier == to) {
      ticket.cached_destination = CachedRange{r.shadow, r.shadow_owner};
      tier_state_[to].usage.shadow_bytes -= r.bytes;
      r.shadow = nullptr;
      result.clean = true;
      result.discarded = false;  // a clean move: the bytes are kept all the same
    } else {
      drop_shadow_locked(r);
    }
  }
  // A copy into an anonymous tier first takes a range of the same size from the destination's
  // cache: its pages are already faulted in (moves back and forth then fault no page).
  if (result.method == MoveMethod::kRemap && !result.clean)
    ticket.cached_destination = take_cached_locked(to, r.bytes);
  if (Status s = ticket.cached_destination ? Status::ok() : reserve_for_move(to, r.bytes); !s.is_ok()) {
    ++tier_state_[to].usage.failed_moves;
    return out_of_memory(fmt::format("move of '{}' ({}) to tier '{}': {}; it stays on '{}'", live.info.name,
                                     format_bytes(r.bytes), tiers_[to]->name(), s.message(),
                                     tiers_[r.tier]->name()));
  }
  mark_moving_locked(r, r.tier, to, r.bytes, result.method);
  ticket.base = r.base;
  ticket.bytes = r.bytes;
  return Status::ok();
}

// Phase 3, under the lock: commit, or roll back and leave the object where it was.
Result<MoveResult> ObjectAllocator::finish_move(ObjectId id, const MoveTicket& ticket, Status status,
                                                bool injected, void* destination, MoveResult result) {
  const TierIndex to = result.to;
  const std::size_t bytes = ticket.bytes;
  std::lock_guard lock(mutex_);
  Live* live = nullptr;
  if (ticket.chunk == nullptr) live = &live_.at(id);  // kept while moving, even if freed meanwhile
  Range& r = ticket.chunk != nullptr ? ticket.chunk->range : live->range;
  const bool aborted = end_moving_locked(r, result.from, to, bytes);
  void* old_pages = nullptr;  // kRemap: where the source's pages went (kept, cached on `from`)
  if (status.is_ok() && !injected && !aborted && result.method == MoveMethod::kRemap)
    status = remap_into_place(destination, ticket.base, bytes, old_pages);
  // kNewAddress: the new address's span goes into the table before the old one leaves it (they
  // do not overlap); a table that cannot take it fails the move like any other error.
  std::optional<ObjectTable::Slot> new_slot;
  if (status.is_ok() && !injected && !aborted && result.method == MoveMethod::kNewAddress) {
    Result<ObjectTable::Slot> slot =
        table_.insert(SpanView{id, as_uint(destination), bytes, to, /*is_group=*/false});
    status = slot.status();
    if (slot) new_slot = slot.value();
  }
  if (!status.is_ok() || injected || aborted) {
    undo_transfer_locked(to, destination, bytes, ticket.cached_destination, result.method);
    return move_failed_locked(id, live, r, to, status, injected, aborted);
  }
  if (result.method == MoveMethod::kRemap) keep_source_pages_locked(r, ticket, old_pages, result);
  commit_move(id, live, ticket.chunk, result.method, destination, new_slot, result);
  return result;
}

// A rolled-back move's error; a free that came during the move completes now.
Status ObjectAllocator::move_failed_locked(ObjectId id, const Live* live, Range& r, TierIndex to,
                                           const Status& status, bool injected, bool aborted) {
  if (r.free_pending) {
    retire(id, r);
    return unavailable(fmt::format("move of object {}: it was freed while moving", id));
  }
  const std::string name = live != nullptr ? live->info.name : fmt::format("chunk of object {}", id);
  if (injected)
    return internal_error(fmt::format("move of '{}' to tier '{}': injected failure; it stays on '{}'", name,
                                      tiers_[to]->name(), tiers_[r.tier]->name()));
  if (aborted) {
    return unavailable(
        fmt::format("move of '{}' to tier '{}': a layer needed it before the copy ended; it stays on '{}'",
                    name, tiers_[to]->name(), tiers_[r.tier]->name()));
  }
  return Status(status.code(), fmt::format("move of '{}' to tier '{}': {}; it stays on '{}'", name,
                                           tiers_[to]->name(), status.message(), tiers_[r.tier]->name()));
}

// After a kRemap move the source's pages stay mapped: kept as the object's shadow when it moved to
// a faster tier (and shadows are on), else cached on their placement for reuse. The mapping at the
// object's address is the destination's range now. Caller holds mutex_.
void ObjectAllocator::keep_source_pages_locked(Range& r, const MoveTicket& ticket, void* old_pages,
                                               const MoveResult& result) {
  const std::size_t bytes = ticket.bytes;
  if (old_pages == nullptr) {  // the kernel dropped them (no MREMAP_DONTUNMAP)
    tiers_[result.from]->unreserve(bytes);
  } else if (keep_shadows_.load(std::memory_order_relaxed) && ticket.chunk == nullptr &&
             result.to < result.from && !r.free_pending &&
             !result.discarded) {  // discarded: the new pages are not its bytes
    r.shadow = static_cast<std::byte*>(old_pages);
    r.shadow_tier = result.from;
    r.shadow_owner = r.owner;
    tier_state_[result.from].usage.shadow_bytes += bytes;
  } else {
    give_back_range(result.from, old_pages, bytes, r.owner);
  }
  r.owner = ticket.cached_destination ? ticket.cached_destination->owner : result.to;
  if (result.clean) ++tier_state_[result.to].usage.clean_moves;
  if (result.discarded) ++tier_state_[result.to].usage.discarded_moves;
}

Result<MoveResult> ObjectAllocator::move_segments(std::unique_lock<std::mutex>& lock, ObjectId id,
                                                  TierIndex to, const MoveOptions& options) {
  if (options.segment != kWholeObject) return move_segment(lock, id, to, options.segment, options);
  // A split object moved whole: segment by segment, each a move of its own. Between them the
  // lock is let go, so a layer may pin the object or a free take it: the rest then stays.
  MoveResult total;
  total.id = id;
  total.to = to;
  const Live& first = live_.at(id);
  total.from = first.range.tier;
  total.address = first.info.address;
  const std::string name = first.info.name;
  const std::size_t segments = first.range.segments.size();
  for (std::size_t k = 0; k < segments; ++k) {
    auto it = live_.find(id);
    const bool gone = it == live_.end() || it->second.range.free_pending;
    if (gone || it->second.range.pins != 0 || it->second.range.moving) {
      return unavailable(fmt::format(
          "move of '{}' segment by segment: {} of its {} segments were moved when {}; "
          "the rest stays where it was",
          name, k, segments, gone ? "it was freed" : "a layer took it (pinned, or another move)"));
    }
    Result<MoveResult> moved = move_segment(lock, id, to, static_cast<std::uint32_t>(k), options);
    if (!moved) {
      return Status(moved.status().code(), fmt::format("{} ({} of its {} segments were moved before)",
                                                       moved.status().message(), k, segments));
    }
    total.method = moved->moved ? moved->method : total.method;
    total.bytes += moved->bytes;
    total.copy_ns += moved->copy_ns;
    total.charge_ns += moved->charge_ns;
    total.moved = total.moved || moved->moved;
    total.discarded = total.discarded || moved->discarded;
  }
  return total;
}

// One segment's move, in move()'s three phases; `lock` is held on entry and on return.
Result<MoveResult> ObjectAllocator::move_segment(std::unique_lock<std::mutex>& lock, ObjectId id,
                                                 TierIndex to, std::uint32_t k, const MoveOptions& options) {
  MoveResult result;
  result.id = id;
  result.to = to;
  MoveTicket ticket;
  if (fork_hold_) return unavailable(fmt::format("move of object {}: a fork() is under way", id));
  {
    Live& live = live_.at(id);
    if (Status s = check_segment_move_locked(live, k, to, result); !s.is_ok()) return s;
    if (result.from == to && live.unit().arena == 0)
      return result;  // already there (an arena's object
                      // leaves its place: a new range)
    if (Status s = start_segment_move_locked(live, k, options, result, ticket); !s.is_ok()) return s;
  }
  result.bytes = ticket.bytes;
  lock.unlock();
  void* destination = nullptr;
  bool injected = false;
  Status status = transfer(id, to, ticket.base, ticket.bytes, ticket.cached_destination, result.discarded,
                           destination, result, injected);
  lock.lock();

  // Phase 3: commit, or roll back and leave the segment where it was.
  Live& live = live_.at(id);  // kept while moving, even if freed meanwhile
  Range& r = live.range;
  const bool aborted = end_moving_locked(r, result.from, to, ticket.bytes);
  void* old_pages = nullptr;
  if (status.is_ok() && !injected && !aborted && result.method == MoveMethod::kRemap)
    status = remap_into_place(destination, ticket.base, ticket.bytes, old_pages);
  if (!status.is_ok() || injected || aborted) {
    undo_transfer_locked(to, destination, ticket.bytes, ticket.cached_destination, result.method);
    const std::string why = injected  ? std::string("injected failure")
                            : aborted ? std::string("a layer needed it before the copy ended")
                                      : status.message();
    if (r.free_pending) {  // the free that came during the move completes now
      retire(id, r);
      return unavailable(fmt::format("move of segment {} of object {}: it was freed while moving", k, id));
    }
    return Status(
        status.is_ok() ? (injected ? StatusCode::kInternal : StatusCode::kUnavailable) : status.code(),
        fmt::format("move of segment {} of '{}' to tier '{}': {}; it stays on '{}'", k, live.info.name,
                    tiers_[to]->name(), why, tiers_[r.segments[k].tier]->name()));
  }
  commit_segment_locked(id, live, k, ticket, old_pages, result);
  return result;
}

// Whether segment k of the object can move to `to`; sets result.from and .address. mutex_ held.
Status ObjectAllocator::check_segment_move_locked(Live& live, std::uint32_t k, TierIndex to,
                                                  MoveResult& result) {
  const Range& r = live.range;
  const std::uint64_t count = segment_count(r.bytes);
  if (live.chunk != nullptr || k >= count) {
    return invalid_argument(fmt::format(
        "move of segment {} of '{}': {}", k, live.info.name,
        live.chunk != nullptr ? "a small object has no segments; move it whole"
                              : fmt::format("it has {} segments of {}", count, format_bytes(kSegmentBytes))));
  }
  if (r.arena != 0) {
    return failed_precondition(
        fmt::format("move of segment {} of '{}': it lives at a planned offset in an arena; it does not move",
                    k, live.info.name));
  }
  result.from = r.segments.empty() ? r.tier : r.segments[k].tier;
  result.address = live.info.address;
  if (result.from == to) return Status::ok();
  result.method = move_method(result.from, to);
  if (result.method == MoveMethod::kNewAddress) {
    return failed_precondition(
        fmt::format("move of segment {} of '{}': a segment moves only in place, and {} to {} needs a new "
                    "address; move the object whole, or use dram, numa or emulated tiers",
                    k, live.info.name, tiers_[result.from]->name(), tiers_[to]->name()));
  }
  return Status::ok();
}

// Phase 1 of a segment's move: splits the object where it is whole, takes the destination and
// marks the range moving. mutex_ held.
Status ObjectAllocator::start_segment_move_locked(Live& live, std::uint32_t k, const MoveOptions& options,
                                                  MoveResult& result, MoveTicket& ticket) {
  Range& r = live.range;
  const TierIndex to = result.to;
  if (r.segments.empty()) {  // it splits: a segment keeps no shadow, so the object keeps none
    drop_shadow_locked(r);
    r.segments.assign(segment_count(r.bytes), Range::Segment{r.tier, r.owner});
  }
  ticket.bytes = r.segment_bytes(k);
  ticket.base = r.base + std::size_t{k} * kSegmentBytes;
  result.discarded = discards(r, true, result.method, options);
  if (result.method == MoveMethod::kRemap) ticket.cached_destination = take_cached_locked(to, ticket.bytes);
  if (Status s = ticket.cached_destination ? Status::ok() : reserve_for_move(to, ticket.bytes); !s.is_ok()) {
    ++tier_state_[to].usage.failed_moves;
    return out_of_memory(fmt::format("move of segment {} of '{}' ({}) to tier '{}': {}; it stays on '{}'", k,
                                     live.info.name, format_bytes(ticket.bytes), tiers_[to]->name(),
                                     s.message(), tiers_[result.from]->name()));
  }
  mark_moving_locked(r, result.from, to, ticket.bytes, result.method);
  return Status::ok();
}

// A segment's move done: its pages, owner and tier, the tiers' counts; a free that came during the
// move completes now. mutex_ held.
void ObjectAllocator::commit_segment_locked(ObjectId id, Live& live, std::uint32_t k,
                                            const MoveTicket& ticket, void* old_pages, MoveResult& result) {
  Range& r = live.range;
  const TierIndex to = result.to;
  const std::size_t bytes = ticket.bytes;
  Range::Segment& segment = r.segments[k];
  if (result.method == MoveMethod::kRemap) {
    if (old_pages == nullptr) {  // the kernel dropped them (no MREMAP_DONTUNMAP)
      tiers_[result.from]->unreserve(bytes);
    } else {
      give_back_range(result.from, old_pages, bytes, segment.owner, /*piece=*/true);
    }
    segment.owner = ticket.cached_destination ? ticket.cached_destination->owner : to;
  } else {  // kMovePages: same mapping, pages on the new node
    tiers_[result.from]->unreserve(bytes);
  }
  segment.tier = to;
  if (!r.free_pending) {
    const std::uint64_t asked = asked_bytes_in_segment(live, k);
    tier_state_[result.from].usage.live_bytes -= asked;
    tier_state_[to].usage.live_bytes += asked;
    tier_state_[to].usage.peak_live_bytes =
        std::max(tier_state_[to].usage.peak_live_bytes, tier_state_[to].usage.live_bytes);
    if (k == 0) {
      --tier_state_[result.from].usage.live_objects;
      ++tier_state_[to].usage.live_objects;
    }
  }
  if (k == 0) {
    r.tier = segment.tier;
    r.owner = segment.owner;
    table_.set_tier(r.slot, to);
  }
  if (result.discarded) ++tier_state_[to].usage.discarded_moves;
  ++tier_state_[result.from].usage.moves_out;
  ++tier_state_[to].usage.moves_in;
  tier_state_[result.from].usage.bytes_moved_out += bytes;
  tier_state_[to].usage.bytes_moved_in += bytes;
  result.moved = true;
  if (r.free_pending) retire(id, r);
}

std::uint64_t ObjectAllocator::asked_bytes_in_segment(const Live& live, std::size_t k) {
  const std::uint64_t begin = std::uint64_t{k} * kSegmentBytes;
  return live.info.bytes > begin ? std::min<std::uint64_t>(kSegmentBytes, live.info.bytes - begin) : 0;
}

std::vector<std::uint64_t> ObjectAllocator::bytes_by_tier(const Live& live) const {
  std::vector<std::uint64_t> bytes;
  if (live.chunk != nullptr || live.range.segments.empty()) return bytes;
  bytes.assign(tiers_.size(), 0);
  for (std::size_t k = 0; k < live.range.segments.size(); ++k)
    bytes[live.range.segments[k].tier] += asked_bytes_in_segment(live, k);
  return bytes;
}

// Records a finished move: budgets, owner and placement, the object table, stats. mutex_ held.
void ObjectAllocator::commit_move(ObjectId id, Live* live, Chunk* chunk, MoveMethod method, void* destination,
                                  std::optional<ObjectTable::Slot> new_slot, MoveResult& result,
                                  const Place* place) {
  Range& r = chunk != nullptr ? chunk->range : live->range;
  const TierIndex from = r.tier, to = result.to;
  std::byte* const old_base = r.base;
  const TierIndex old_owner = r.owner;
  const ArenaId old_arena = r.arena;
  switch (method) {
    case MoveMethod::kMovePages:  // same mapping, pages and policy on the new node
      tiers_[from]->unreserve(r.bytes);
      break;
    case MoveMethod::kRemap:  // the destination's mapping now sits at the old address (move() set
      break;                  // the owner and cached the source's pages)
    case MoveMethod::kNewAddress:
      r.owner = to;
      r.base = static_cast<std::byte*>(destination);
      r.arena = 0;
      break;
    case MoveMethod::kCopy:  // into its place, whose pages are the arena's
      r.owner = arenas_.at(place->arena).range.owner;
      r.base = static_cast<std::byte*>(destination);
      r.arena = place->arena;
      ++tier_state_[to].usage.place_moves;
      break;
    case MoveMethod::kNone:
      break;
  }
  r.tier = to;
  const std::uint64_t object_bytes = chunk != nullptr ? chunk->live_bytes : live->info.bytes;
  const std::uint64_t objects = chunk != nullptr ? chunk->live : 1;
  if (!r.free_pending) {
    tier_state_[from].usage.live_bytes -= object_bytes;
    tier_state_[from].usage.live_objects -= objects;
    tier_state_[to].usage.live_bytes += object_bytes;
    tier_state_[to].usage.peak_live_bytes =
        std::max(tier_state_[to].usage.peak_live_bytes, tier_state_[to].usage.live_bytes);
    tier_state_[to].usage.live_objects += objects;
  }
  TierUsage& out = tier_state_[from].usage;
  TierUsage& in = tier_state_[to].usage;
  ++out.moves_out;
  ++in.moves_in;
  if (result.copy_threads > 1) ++in.split_copies;
  out.bytes_moved_out += r.bytes;
  in.bytes_moved_in += r.bytes;
  if (method == MoveMethod::kNewAddress || method == MoveMethod::kCopy) {
    table_.erase(r.slot);
    r.slot = new_slot.value();
    if (old_arena != 0 && !keeps_home_copy_locked(r, old_arena, old_base, from, to)) {
      leave_place_locked(old_arena, old_base);
    } else if (old_arena == 0) {
      give_back_range(from, old_base, r.bytes, old_owner);
    }
    if (!r.free_pending) {
      by_address_.erase(live->info.address);
      live->info.address = r.base;
      by_address_.emplace(live->info.address, id);
    }
    relocations_.fetch_add(1, std::memory_order_release);
  } else {
    table_.set_tier(r.slot, to);
  }
  if (chunk != nullptr) {  // the chunk joins its group's chunks on the destination
    auto& source = groups_[{chunk->group, from, chunk->maker}].chunks;
    auto it = std::find_if(source.begin(), source.end(),
                           [&](const std::unique_ptr<Chunk>& c) { return c.get() == chunk; });
    if (it != source.end()) {
      groups_[{chunk->group, to, chunk->maker}].chunks.push_back(std::move(*it));
      source.erase(it);
    }
  }
  result.address = chunk != nullptr ? result.address : static_cast<void*>(r.base);
  result.moved = true;
  if (r.free_pending) retire(id, r);  // freed while moving: released now, on its new tier
}

void ObjectAllocator::prepare_fork() {
  std::unique_lock lock(mutex_);
  fork_hold_ = true;
  // A move's copy commits (or rolls back) under the lock: once none is under way, the child sees
  // every object whole, where the table says.
  moved_or_unpinned_.wait(lock, [this] { return moves_copying_ == 0; });
  lock.release();  // held across fork(); after_fork lets it go
}

void ObjectAllocator::after_fork() {
  fork_hold_ = false;
  mutex_.unlock();
}

Result<PinResult> ObjectAllocator::pin(std::span<const ObjectId> ids, std::span<PinnedObject> out,
                                       std::chrono::nanoseconds wait) {
  PinResult result;
  std::unique_lock lock(mutex_);
  // Looked up afresh after every wait: another thread may free objects meanwhile.
  auto unit_of = [&](ObjectId id) -> Range* {
    auto it = live_.find(id);
    return it == live_.end() || it->second.range.free_pending ? nullptr : &it->second.unit();
  };
  std::uint32_t moving = 0;
  for (ObjectId id : ids) {
    const Range* r = unit_of(id);
    if (r == nullptr) return not_found(fmt::format("object {} is not live; nothing was pinned", id));
    moving += r->moving ? 1 : 0;
  }
  if (moving != 0) {
    result.late_moves = moving;
    pins_waiting_.fetch_add(1, std::memory_order_acq_rel);
    auto any_moving = [&] {
      return std::any_of(ids.begin(), ids.end(), [&](ObjectId id) {
        const Range* r = unit_of(id);
        return r != nullptr && r->moving;
      });
    };
    const std::uint64_t start = steady_now_ns();
    const auto deadline = std::chrono::steady_clock::now() + wait;
    while (any_moving() && moved_or_unpinned_.wait_until(lock, deadline) != std::cv_status::timeout) {
    }
    // Past the bound a copy fails and the object stays put. A move_pages migration cannot be
    // stopped half-way without leaving pages on both nodes, and a layer that wrote its pages
    // while they migrate could make some of them fail to move: the layer waits for it to finish.
    for (ObjectId id : ids) {
      Range* r = unit_of(id);
      if (r != nullptr && r->moving && r->abortable && !r->abort_move) {
        r->abort_move = true;
        ++result.aborted_moves;
      }
    }
    auto migrating_pages = [&] {
      return std::any_of(ids.begin(), ids.end(), [&](ObjectId id) {
        const Range* r = unit_of(id);
        return r != nullptr && r->moving && !r->abortable;
      });
    };
    moved_or_unpinned_.wait(lock, [&] { return !migrating_pages(); });
    result.wait_ns = steady_now_ns() - start;
    pins_waiting_.fetch_sub(1, std::memory_order_acq_rel);
  }
  for (std::size_t i = 0; i < ids.size(); ++i) {
    auto it = live_.find(ids[i]);
    if (it == live_.end() || it->second.range.free_pending) {  // freed during the wait: undo the pins so far
      for (std::size_t k = 0; k < i; ++k) {
        auto p = live_.find(ids[k]);
        if (p != live_.end()) --p->second.unit().pins;
      }
      return not_found(fmt::format("object {} was freed while its layer waited; nothing was pinned", ids[i]));
    }
    Live& l = it->second;
    ++l.unit().pins;
    l.unit().last_pin = pin_sequence_.fetch_add(1, std::memory_order_acq_rel) + 1;
    out[i] = PinnedObject{l.info.address, l.unit().tier, l.info.bytes, l.info.key, bytes_by_tier(l)};
  }
  return result;
}

void ObjectAllocator::unpin(std::span<const ObjectId> ids) {
  std::lock_guard lock(mutex_);
  for (ObjectId id : ids) {
    auto it = live_.find(id);
    if (it != live_.end() && it->second.unit().pins > 0) --it->second.unit().pins;
  }
  moved_or_unpinned_.notify_all();
}

std::uint64_t ObjectAllocator::live_bytes() const {
  std::lock_guard lock(mutex_);
  return live_bytes_;
}

std::uint64_t ObjectAllocator::peak_live_bytes() const {
  std::lock_guard lock(mutex_);
  return peak_live_bytes_;
}

void ObjectAllocator::reset_tier_peak(TierIndex index) {
  std::lock_guard lock(mutex_);
  tiers_.at(index)->reset_peak();
  TierUsage& usage = tier_state_.at(index).usage;
  usage.peak_live_bytes = usage.live_bytes;
}

void ObjectAllocator::reset_peak_live_bytes() {
  std::lock_guard lock(mutex_);
  peak_live_bytes_ = live_bytes_;
}

std::vector<TierUsage> ObjectAllocator::usage() const {
  std::lock_guard lock(mutex_);
  std::vector<TierUsage> out;
  for (std::size_t t = 0; t < tiers_.size(); ++t) {
    TierUsage u = tier_state_[t].usage;
    u.budget_bytes = tiers_[t]->budget_bytes();
    u.mapped_bytes = tiers_[t]->used_bytes();
    u.peak_mapped_bytes = tiers_[t]->peak_bytes();
    out.push_back(std::move(u));
  }
  return out;
}

std::size_t ObjectAllocator::live_objects() const {
  std::lock_guard lock(mutex_);
  return by_address_.size();
}

}  // namespace tensortier
