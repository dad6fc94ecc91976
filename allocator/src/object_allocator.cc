// ObjectAllocator (object_allocator.h): objects allocated, placed by group and budget (falling
// back to a slower tier), freed, looked up, pinned, and kept across fork; the shadows a move out
// leaves. Its other jobs are files of their own: arenas (object_arenas.cc), the range cache
// (range_cache.cc), moves (object_moves.cc, object_segment_moves.cc).
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

#include "object_allocator_internal.h"
#include "os_pages.h"
#include "tensortier/enum_names.h"

namespace tensortier {
namespace {

// The calling thread as a chunk's maker: a number of its own, from 1, never reused.
std::uint32_t this_thread_maker() {
  static std::atomic<std::uint32_t> next{1};
  thread_local const std::uint32_t mine = next.fetch_add(1, std::memory_order_relaxed);
  return mine;
}

}  // namespace

using object_allocator_internal::as_uint;

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

void ObjectAllocator::set_release_observer(ReleaseObserver observer) {
  std::lock_guard lock(mutex_);
  release_observer_ = std::move(observer);
}

void ObjectAllocator::set_move_failure_hook(MoveFailureHook hook) {
  std::lock_guard lock(mutex_);
  move_failure_hook_ = std::move(hook);
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
      // Moves out of the preferred tier would make room: wait for them (set_room_wait). Those
      // handed to a mover held by a pin (a layer's, maybe this thread's) do not count.
      TierUsage& usage = tier_state_[t].usage;
      const bool mover_held = moves_pin_waiting_.load(std::memory_order_acquire) != 0;
      const std::uint64_t pending = pending_out_ && !mover_held ? pending_out_(t) : 0;
      const std::uint64_t leaving =
          t == preferred && room_wait_.count() > 0 ? usage.leaving_bytes + pending : 0;
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
    // Freed while a layer pinned it (PyTorch frees a layer's inputs inside it): its pins on the
    // chunk go with it, or the chunk's other objects would stay pinned, unmovable, for good.
    chunk.range.pins -= std::min(chunk.range.pins, live.chunk_pins);
    if (live.chunk_pins > 0) moved_or_unpinned_.notify_all();
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
        if (p != live_.end()) unpin_locked(p->second);
      }
      return not_found(fmt::format("object {} was freed while its layer waited; nothing was pinned", ids[i]));
    }
    Live& l = it->second;
    ++l.unit().pins;
    if (l.chunk != nullptr) ++l.chunk_pins;
    l.unit().last_pin = pin_sequence_.fetch_add(1, std::memory_order_acq_rel) + 1;
    out[i] = PinnedObject{l.info.address, l.unit().tier, l.info.bytes, l.info.key, bytes_by_tier(l)};
  }
  return result;
}

void ObjectAllocator::unpin(std::span<const ObjectId> ids) {
  std::lock_guard lock(mutex_);
  for (ObjectId id : ids) {
    auto it = live_.find(id);
    if (it != live_.end()) unpin_locked(it->second);
  }
  moved_or_unpinned_.notify_all();
}

void ObjectAllocator::unpin_locked(Live& live) {
  if (live.unit().pins == 0) return;
  --live.unit().pins;
  if (live.chunk_pins > 0) --live.chunk_pins;
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
