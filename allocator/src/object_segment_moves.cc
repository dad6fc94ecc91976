// ObjectAllocator's moves of one 2 MiB segment of a split object (object_allocator.h): the same
// transaction as a whole move (object_moves.cc), per segment. Every *_locked function assumes mu_
// held.
#include "tensortier/allocator/object_allocator.h"

#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "os_pages.h"

namespace tensortier {

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

}  // namespace tensortier
