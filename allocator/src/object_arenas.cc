// ObjectAllocator's arenas (object_allocator.h): fast-tier arenas whose places a plan lays out,
// objects allocated at a planned offset, and the occupant waits (a place still held by an object
// moving out). Every *_locked function assumes mu_ held.
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

}  // namespace tensortier
