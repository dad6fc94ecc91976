// Object placement, group packing, budget fallback and range reuse (see object_allocator.h).
#include "tensortier/allocator/object_allocator.h"

#include <algorithm>
#include <exception>

#include <fmt/format.h>

namespace tensortier {

ObjectAllocator::ObjectAllocator(std::vector<std::unique_ptr<Tier>> tiers)
    : tiers_(std::move(tiers)), tier_state_(tiers_.size()) {
  for (std::size_t t = 0; t < tiers_.size(); ++t) tier_state_[t].usage.name = tiers_[t]->name();
}

ObjectAllocator::~ObjectAllocator() {
  for (auto& [address, live] : live_) {
    if (!live.info.small) tiers_[live.info.tier]->deallocate(live.info.address, live.info.reserved_bytes);
  }
  for (auto& [key, group] : groups_) {
    for (auto& chunk : group.chunks) tiers_[key.second]->deallocate(chunk->base, kGroupChunkBytes);
  }
  for (std::size_t t = 0; t < tiers_.size(); ++t) {
    for (auto& [bytes, address] : tier_state_[t].cache) tiers_[t]->deallocate(address, bytes);
  }
}

Result<void*> ObjectAllocator::take_range(TierIndex t, std::size_t bytes) {
  TierState& state = tier_state_[t];
  if (auto it = state.cache.find(bytes); it != state.cache.end()) {
    void* address = it->second;
    state.cache.erase(it);
    state.usage.cached_bytes -= bytes;
    ++state.usage.reused_ranges;
    return address;
  }
  Result<void*> range = tiers_[t]->allocate(bytes);
  if (!range && range.status().code() == StatusCode::kOutOfMemory) {
    release_cache_locked(t);
    range = tiers_[t]->allocate(bytes);
  }
  if (range) ++state.usage.new_ranges;
  return range;
}

void ObjectAllocator::give_back_range(TierIndex t, void* address, std::size_t bytes) {
  tier_state_[t].cache.emplace(bytes, address);
  tier_state_[t].usage.cached_bytes += bytes;
}

void ObjectAllocator::release_cache_locked(TierIndex t) {
  TierState& state = tier_state_[t];
  for (auto& [bytes, address] : state.cache) {
    if (release_observer_)
      release_observer_(SpanView{0, reinterpret_cast<std::uintptr_t>(address), bytes, t, false});
    tiers_[t]->deallocate(address, bytes);
  }
  state.cache.clear();
  state.usage.cached_bytes = 0;
  // Empty group chunks on this tier are cache too.
  for (auto& [key, group] : groups_) {
    if (key.second != t) continue;
    const GroupId group_id = key.first;  // lambdas cannot capture structured bindings before clang 16
    std::erase_if(group.chunks, [&](const std::unique_ptr<Chunk>& chunk) {
      if (chunk->live != 0) return false;
      if (release_observer_) {
        release_observer_(
            SpanView{group_id, reinterpret_cast<std::uintptr_t>(chunk->base), kGroupChunkBytes, t, true});
      }
      table_.erase(chunk->slot);
      tiers_[t]->deallocate(chunk->base, kGroupChunkBytes);
      return true;
    });
  }
}

void ObjectAllocator::set_release_observer(ReleaseObserver observer) {
  std::lock_guard lock(mutex_);
  release_observer_ = std::move(observer);
}

void ObjectAllocator::release_cache() {
  std::lock_guard lock(mutex_);
  for (TierIndex t = 0; t < tiers_.size(); ++t) release_cache_locked(t);
}

Result<void*> ObjectAllocator::place_small(Live& live, TierIndex t) {
  const std::size_t bytes = round_up(live.info.bytes, kSmallAlignmentBytes);
  auto fits = [&](const Chunk& c) { return c.used_bytes + bytes <= kGroupChunkBytes; };
  GroupState* group = &groups_[{live.info.group, t}];
  auto it = std::find_if(group->chunks.begin(), group->chunks.end(),
                         [&](const std::unique_ptr<Chunk>& c) { return fits(*c); });
  Chunk* chunk = it != group->chunks.end() ? it->get() : nullptr;
  if (chunk == nullptr) {
    Result<void*> range = take_range(t, kGroupChunkBytes);  // may drop empty chunks of groups_
    if (!range) return range.status();
    group = &groups_[{live.info.group, t}];
    auto fresh = std::make_unique<Chunk>();
    fresh->base = static_cast<std::byte*>(range.value());
    fresh->slot = table_.insert(SpanView{live.info.group, reinterpret_cast<std::uintptr_t>(fresh->base),
                                         kGroupChunkBytes, t, /*is_group=*/true});
    chunk = fresh.get();
    group->chunks.push_back(std::move(fresh));
  }
  void* address = chunk->base + chunk->used_bytes;
  chunk->used_bytes += bytes;
  ++chunk->live;
  live.chunk = chunk;
  return address;
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

Result<ObjectInfo> ObjectAllocator::allocate(std::string_view name, std::size_t bytes, GroupId group,
                                             TierIndex preferred) {
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
  std::lock_guard lock(mutex_);
  Live live;
  live.info.name = std::string(name);
  live.info.bytes = bytes;
  live.info.group = group;
  live.info.small = bytes < kPageBytes;
  live.info.reserved_bytes = live.info.small ? 0 : round_up(bytes, kPageBytes);
  std::string os_errors;
  for (TierIndex t = preferred; t < tiers_.size(); ++t) {
    Result<void*> placed = [&]() -> Result<void*> {
      try {
        return live.info.small ? place_small(live, t) : take_range(t, live.info.reserved_bytes);
      } catch (const std::exception& e) {  // the object table could not grow
        return internal_error(fmt::format("object table: {}", e.what()));
      }
    }();
    if (!placed) {
      if (placed.status().code() != StatusCode::kOutOfMemory) return placed.status();
      continue;  // no room on this tier: try the next slower one
    }
    live.info.id = next_id_++;
    live.info.tier = t;
    live.info.address = placed.value();
    if (!live.info.small) {
      live.slot = table_.insert(SpanView{live.info.id, reinterpret_cast<std::uintptr_t>(live.info.address),
                                         live.info.reserved_bytes, t, /*is_group=*/false});
    }
    TierUsage& usage = tier_state_[t].usage;
    usage.live_bytes += bytes;
    live_bytes_ += bytes;
    peak_live_bytes_ = std::max(peak_live_bytes_, live_bytes_);
    ++usage.live_objects;
    ++usage.allocations;
    if (t != preferred) {
      ++tier_state_[preferred].usage.fallbacks_out;
      ++usage.fallbacks_in;
    }
    ObjectInfo info = live.info;
    live_.emplace(live.info.address, std::move(live));
    return info;
  }
  return no_room_error(name, bytes, preferred);
}

Status ObjectAllocator::free(const void* address) {
  std::lock_guard lock(mutex_);
  auto it = live_.find(address);
  if (it == live_.end()) {
    return not_found(
        fmt::format("free of {}: not the start of a live object (never allocated by this runtime, or already "
                    "freed); nothing was changed",
                    address));
  }
  Live& live = it->second;
  const TierIndex t = live.info.tier;
  TierUsage& usage = tier_state_[t].usage;
  usage.live_bytes -= live.info.bytes;
  live_bytes_ -= live.info.bytes;
  --usage.live_objects;
  if (live.info.small) {
    if (--live.chunk->live == 0) live.chunk->used_bytes = 0;  // the whole chunk is free again
  } else {
    table_.erase(live.slot);
    give_back_range(t, live.info.address, live.info.reserved_bytes);
  }
  live_.erase(it);
  return Status::ok();
}

Result<ObjectInfo> ObjectAllocator::info(const void* address) const {
  std::lock_guard lock(mutex_);
  auto it = live_.find(address);
  if (it == live_.end()) return not_found(fmt::format("{} is not the start of a live object", address));
  return it->second.info;
}

Result<ObjectId> ObjectAllocator::id_of(const void* address) const {
  std::lock_guard lock(mutex_);
  auto it = live_.find(address);
  if (it == live_.end()) return not_found(fmt::format("{} is not the start of a live object", address));
  return it->second.info.id;
}

std::size_t ObjectAllocator::ids_of(std::span<const void* const> addresses, std::vector<ObjectId>* ids,
                                    std::vector<std::size_t>* bytes) const {
  std::lock_guard lock(mutex_);
  for (std::size_t i = 0; i < addresses.size(); ++i) {
    auto it = live_.find(addresses[i]);
    if (it == live_.end()) return i;
    ids->push_back(it->second.info.id);
    bytes->push_back(it->second.info.bytes);
  }
  return addresses.size();
}

std::vector<ObjectInfo> ObjectAllocator::objects() const {
  std::lock_guard lock(mutex_);
  std::vector<ObjectInfo> out;
  out.reserve(live_.size());
  for (const auto& [address, live] : live_) out.push_back(live.info);
  return out;
}

std::uint64_t ObjectAllocator::live_bytes() const {
  std::lock_guard lock(mutex_);
  return live_bytes_;
}

std::uint64_t ObjectAllocator::peak_live_bytes() const {
  std::lock_guard lock(mutex_);
  return peak_live_bytes_;
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
  return live_.size();
}

}  // namespace tensortier
