// ObjectAllocator's range cache (object_allocator.h): freed ranges kept mapped per tier for reuse,
// taken whole or assembled from neighbours, and given back to the tier where a budget needs the
// room. Every *_locked function assumes mu_ held.
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
using object_allocator_internal::range_alignment;

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

void ObjectAllocator::release_cache() {
  std::lock_guard lock(mutex_);
  for (TierIndex t = 0; t < tiers_.size(); ++t) release_cache_locked(t);
}

}  // namespace tensortier
