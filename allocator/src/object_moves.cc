// ObjectAllocator's whole-object moves (object_allocator.h), each a transaction: start (the
// destination reserved, the object marked moving), transfer (copy, move_pages or remap, outside
// the lock), finish (commit, or undo leaving the source intact). Every *_locked function assumes
// mu_ held.
#include "tensortier/allocator/object_allocator.h"

#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "object_allocator_internal.h"
#include "os_pages.h"

namespace tensortier {
using object_allocator_internal::as_uint;
using object_allocator_internal::put_pages_back;
using object_allocator_internal::range_alignment;

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
    ++moves_pin_waiting_;  // room waits stop counting the moves queued behind this one
    timed_out = moved_or_unpinned_.wait_until(lock, deadline) == std::cv_status::timeout;
    --moves_pin_waiting_;
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

}  // namespace tensortier
