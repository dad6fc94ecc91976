// Moves into planned places (MoveOptions::place): a copy between two mapped ranges, then the new
// address published. The same three phases as move() (object_moves.cc): under the lock, take
// the place (start_place_move_locked); without it, copy (transfer); under it again, commit or let
// the place go (finish_place_move).
#include <fmt/format.h>

#include "tensortier/allocator/object_allocator.h"

namespace tensortier {

Result<MoveResult> ObjectAllocator::move_to_place(std::unique_lock<std::mutex>& lock, ObjectId id,
                                                  TierIndex to, const Place& place,
                                                  const MoveOptions& options) {
  Live& live = live_.at(id);
  MoveResult result;
  result.id = id;
  result.to = to;
  result.from = live.unit().tier;
  result.address = live.info.address;
  MoveTicket ticket;
  if (Status s = start_place_move_locked(live, to, place, options, result, ticket); !s.is_ok()) return s;
  if (ticket.base == nullptr) return result;  // in its place already
  lock.unlock();
  result.bytes = ticket.bytes;
  void* destination = nullptr;
  bool injected = false;
  Status status = transfer(id, to, ticket.base, ticket.bytes, ticket.cached_destination,
                           result.discarded || result.clean, destination, result, injected);
  return finish_place_move(id, ticket, place, status, injected, destination, result);
}

// Before a move into a place: the place's occupant, where it has one, is given
// options.occupant_wait to leave (the plan's previous occupant, not yet freed or moved out).
// Returns at once where there is nothing to wait for; start_place_move_locked checks the place.
void ObjectAllocator::wait_for_occupant_locked(std::unique_lock<std::mutex>& lock, ObjectId id,
                                               const MoveOptions& options) {
  const auto deadline = std::chrono::steady_clock::now() + options.occupant_wait;
  while (options.place && options.occupant_wait.count() > 0) {
    auto object = live_.find(id);
    auto found = arenas_.find(options.place->arena);
    if (object == live_.end() || found == arenas_.end()) return;
    const Occupant* o = occupant_locked(found->second, options.place->offset, object->second.range.bytes);
    if (o == nullptr || o->id == id) return;
    if (moved_or_unpinned_.wait_until(lock, deadline) == std::cv_status::timeout) return;
  }
}

// Phase 1: the place must be on `to`, fit the object and be free; it is taken (as an occupant of
// its arena) for the copy. mutex_ held.
Status ObjectAllocator::start_place_move_locked(Live& live, TierIndex to, const Place& place,
                                                const MoveOptions& options, MoveResult& result,
                                                MoveTicket& ticket) {
  Range& r = live.range;
  if (live.chunk != nullptr || !r.segments.empty()) {
    return failed_precondition(
        fmt::format("move of '{}' into a place: only a large object that was never moved in segments has one",
                    live.info.name));
  }
  auto found = arenas_.find(place.arena);
  if (found == arenas_.end() || found->second.range.tier != to) {
    return invalid_argument(fmt::format("move of '{}': arena {} is not an arena of tier '{}'", live.info.name,
                                        place.arena, tiers_[to]->name()));
  }
  if (found->second.closing) {
    return unavailable(fmt::format("move of '{}': arena {} is closing", live.info.name, place.arena));
  }
  Arena& arena = found->second;
  std::byte* const destination = arena.range.base + place.offset;
  if (r.base == destination) return Status::ok();  // nothing to move
  if (place.offset % kPageBytes != 0 || place.offset + r.bytes > arena.range.bytes) {
    return invalid_argument(fmt::format("move of '{}' ({}): offset {} of arena {} ({}) is no place for it",
                                        live.info.name, format_bytes(r.bytes), place.offset, place.arena,
                                        format_bytes(arena.range.bytes)));
  }
  // Back to the home it keeps a copy in (unwritten since it left): nothing to copy.
  if (r.home_copy && r.home_copy->arena == place.arena && r.home_copy->offset == place.offset) {
    r.home_copy.reset();  // its entry there is the object's again
    result.method = MoveMethod::kCopy;
    result.clean = true;
    ++tier_state_[to].usage.clean_moves;
    mark_moving_locked(r, r.tier, to, r.bytes, result.method);
    ticket.base = r.base;
    ticket.bytes = r.bytes;
    ticket.cached_destination = CachedRange{destination, arena.range.owner};
    return Status::ok();
  }
  if (const Occupant* o = occupant_locked(arena, place.offset, r.bytes); o != nullptr) {
    ++tier_state_[to].usage.place_misses;
    ++tier_state_[to].usage.failed_moves;
    return unavailable(
        fmt::format("move of '{}' to tier '{}': its place (offset {}) still holds object {}; "
                    "it stays on '{}'",
                    live.info.name, tiers_[to]->name(), place.offset, o->id, tiers_[r.tier]->name()));
  }
  arena.live.emplace(place.offset, Occupant{place.offset + r.bytes, live.info.id});
  drop_shadow_locked(r);
  result.method = MoveMethod::kCopy;
  result.discarded =
      options.discard_unless_pinned_after != 0 && r.last_pin <= options.discard_unless_pinned_after;
  mark_moving_locked(r, r.tier, to, r.bytes, result.method);
  ticket.base = r.base;
  ticket.bytes = r.bytes;
  ticket.cached_destination = CachedRange{destination, arena.range.owner};
  return Status::ok();
}

// Phase 3, under the lock: commit (the object at its place, its old place or range let go), or let
// the place go and leave the object where it was.
Result<MoveResult> ObjectAllocator::finish_place_move(ObjectId id, const MoveTicket& ticket,
                                                      const Place& place, Status status, bool injected,
                                                      void* destination, MoveResult result) {
  std::lock_guard lock(mutex_);
  Live* live = &live_.at(id);  // kept while moving, even if freed meanwhile
  Range& r = live->range;
  const bool aborted = end_moving_locked(r, result.from, result.to, ticket.bytes);
  std::optional<ObjectTable::Slot> new_slot;
  if (status.is_ok() && !injected && !aborted) {
    Result<ObjectTable::Slot> slot =
        table_.insert(SpanView{id, reinterpret_cast<std::uintptr_t>(destination), ticket.bytes, result.to,
                               /*is_group=*/false});
    status = slot.status();
    if (slot) new_slot = slot.value();
  }
  if (!status.is_ok() || injected || aborted) {
    leave_place_locked(place.arena, static_cast<std::byte*>(ticket.cached_destination->address));
    ++tier_state_[result.to].usage.failed_moves;
    return move_failed_locked(id, live, r, result.to, status, injected, aborted);
  }
  commit_move(id, live, nullptr, MoveMethod::kCopy, destination, new_slot, result, &place);
  return result;
}

}  // namespace tensortier
