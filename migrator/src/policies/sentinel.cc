// Sentinel (Ren et al., HPCA'21): short-lived objects (profile class kShort) fast for their whole
// life in a region at the offsets the offset planner gives (the runtime makes it one arena); the
// others managed per migration interval: an object used in interval k is fast during k and,
// prefetched, during k-1, moved in when k-1 starts and out after its last use in the last interval
// that needs it; what does not fit stays slow (hottest kept fast). The interval length and how a
// set is held to the budget (SentinelCount) are those predicted cheapest; where the budget cannot
// hold the region, the short-lived objects are managed too.
#include "policies/policy_kit.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "tensortier/allocator/offset_planner.h"

namespace tensortier::migrator {

using policies::place;
using policies::plannable_room;

Plan sentinel_with(const PlanInputs& in, std::uint32_t n, std::uint64_t region, SentinelCount count) {
  const bool by_layer = count != SentinelCount::kPerInterval;
  const bool by_occupancy =
      count == SentinelCount::kPerLayerByHeld || count == SentinelCount::kPerLayerByHotHeld;
  const bool per_byte = count != SentinelCount::kPerLayerByHotHeld;
  n = std::max(1U, n);
  Plan plan;
  plan.policy = "sentinel";
  plan.interval_layers = n;
  plan.region_bytes = region;
  plan.variant = by_layer ? "fast sets held to the budget at each layer"
                          : "fast sets held to the budget over each interval";
  if (by_occupancy)
    plan.variant += per_byte ? ", ranked by uses per byte-layer held" : ", ranked by uses per layer held";
  const std::uint32_t intervals = (in.layers + n - 1) / n;
  const std::uint64_t reserved = in.small_reserve_bytes + region;
  const std::uint64_t room = in.fast_budget_bytes > reserved ? in.fast_budget_bytes - reserved : 0;
  auto interval_of = [n](std::uint32_t layer) { return layer / n; };

  // Managed objects and, per interval, those used in it with their use counts.
  std::vector<std::size_t> managed;
  std::vector<std::map<std::size_t, std::uint32_t>> used(intervals);  // object -> uses in the interval
  for (std::size_t i = 0; i < in.objects.size(); ++i) {
    const PlanObject& o = in.objects[i];
    if (o.short_lived) {
      place(plan, o, in.fast);
      continue;
    }
    managed.push_back(i);
    for (std::uint32_t layer : o.uses) ++used[interval_of(layer)][i];
  }
  // F_k: what is fast during interval k: first its own objects, hottest (uses per byte) first,
  // then the next interval's (prefetch) while they fit; only objects alive in interval k.
  std::vector<std::set<std::size_t>> fast_in(intervals);
  auto alive_in = [&](const PlanObject& o, std::uint32_t k) {
    if (o.persistent) return true;
    const std::uint32_t first = k * n, last = std::min(in.layers, (k + 1) * n);  // layers [first, last)
    return o.born < last && o.freed > first;
  };
  // Fast bytes held at each layer (by_layer) or in each interval; with by_layer, the layer an
  // object's count in the previous interval's set ends at.
  std::vector<std::uint64_t> held(by_layer ? in.layers : intervals, 0);
  std::vector<std::uint32_t> counted_to(by_layer ? in.objects.size() : 0, 0);
  for (std::uint32_t k = 0; k < intervals; ++k) {
    const std::uint32_t first = k * n, last = std::min(in.layers, (k + 1) * n);
    // What object i takes of `held` in F_k. By layer: the layers of the interval it is alive in,
    // from where its count in F_{k-1} ended if it was there; when it outlives the interval and
    // the next one does not need it, it leaves after its last use here (the move out between the
    // intervals' sets goes then), so its count ends there (a later set that keeps it counts the
    // layers after; one that dies within the interval holds its room until it dies).
    auto span = [&](std::size_t i) {
      if (!by_layer) return std::pair{k, k + 1};
      const PlanObject& o = in.objects[i];
      std::uint32_t lo = o.persistent ? first : std::max(first, o.born);
      if (k > 0 && fast_in[k - 1].contains(i)) lo = std::min(lo, counted_to[i]);
      std::uint32_t hi = o.persistent ? last : std::min(last, o.freed);
      const bool next_needs =
          k + 1 == intervals ? o.persistent && fast_in[0].contains(i) : used[k + 1].contains(i);
      if (!next_needs && (o.persistent || o.freed > last)) {
        auto after = std::lower_bound(o.uses.begin(), o.uses.end(), last);
        if (after != o.uses.begin() && *(after - 1) >= first) hi = *(after - 1) + 1;
      }
      return std::pair{lo, std::max(lo, hi)};
    };
    // Into F_k where it fits at every layer (interval) of its span(i).
    auto take = [&](std::size_t i, std::pair<std::uint32_t, std::uint32_t> taken) {
      const auto [lo, hi] = taken;
      const std::uint64_t bytes = in.objects[i].bytes;
      for (std::uint32_t s = lo; s < hi; ++s) {
        if (held[s] + bytes > room) return;
      }
      for (std::uint32_t s = lo; s < hi; ++s) held[s] += bytes;
      if (by_layer) counted_to[i] = hi;
      fast_in[k].insert(i);
    };
    for (std::uint32_t j : {k, k + 1}) {
      const bool wrap = j == intervals;  // the next step's first interval: persistent objects only
      if (j > intervals) continue;
      // (-score, object, its span): an object's span stays what it is while F_k fills.
      std::vector<std::tuple<double, std::size_t, std::pair<std::uint32_t, std::uint32_t>>> ranked;
      for (const auto& [i, uses] : used[wrap ? 0 : j]) {
        const PlanObject& o = in.objects[i];
        if ((wrap && !o.persistent) || !alive_in(o, k) || fast_in[k].contains(i)) continue;
        const auto taken = span(i);
        double score = static_cast<double>(uses) / (per_byte ? static_cast<double>(o.bytes) : 1.0);
        if (by_occupancy) score /= static_cast<double>(std::max(1U, taken.second - taken.first));
        ranked.emplace_back(-score, i, taken);
      }
      std::sort(ranked.begin(), ranked.end());
      for (const auto& [score, i, taken] : ranked) take(i, taken);
    }
    // Room left over keeps what interval k-1 held and k does not use, soonest next use first:
    // moving it out only to move it back costs two copies for nothing.
    if (k > 0) {
      std::vector<std::pair<std::uint64_t, std::size_t>> stay;
      for (std::size_t i : fast_in[k - 1]) {
        const PlanObject& o = in.objects[i];
        if (!alive_in(o, k) || fast_in[k].contains(i)) continue;
        auto next = std::lower_bound(o.uses.begin(), o.uses.end(), k * n);
        stay.emplace_back(next != o.uses.end() ? *next : std::uint64_t{in.layers} + 1, i);
      }
      std::sort(stay.begin(), stay.end());
      for (const auto& [use, i] : stay) take(i, span(i));
    }
  }
  // Per object: where it is in each interval it lives in, and the moves between.
  for (std::size_t i : managed) {
    const PlanObject& o = in.objects[i];
    const std::uint32_t first_k = o.persistent ? 0 : interval_of(o.born);
    const std::uint32_t last_k = o.persistent ? intervals : interval_of(o.freed - 1);  // inclusive
    auto fast_at = [&](std::uint32_t k) { return fast_in[k == intervals ? 0 : k].contains(i); };
    place(plan, o, fast_at(first_k) ? in.fast : in.slow);
    for (std::uint32_t k = first_k + 1; k <= last_k; ++k) {
      const bool was = fast_at(k - 1), is = fast_at(k);
      if (was == is) continue;
      PlannedMove m;
      m.key = o.key;
      m.bytes = o.bytes;
      const std::uint32_t start = k == intervals ? in.layers : k * n;  // first layer of interval k
      if (is) {  // in when interval k begins... prefetched: F_k holds it because k or k+1 uses it
        m.to = in.fast;
        m.after_layer = start - 1;
        auto next_use = std::lower_bound(o.uses.begin(), o.uses.end(), k == intervals ? 0 : start);
        m.needed_by = k == intervals ? in.layers + (next_use != o.uses.end() ? *next_use : 0)
                                     : (next_use != o.uses.end() ? *next_use : start);
        // Useful until its last use while it stays fast: the run of fast intervals from k.
        std::uint32_t end_k = k;
        while (end_k + 1 <= last_k && fast_at(end_k + 1)) ++end_k;
        if (k == intervals) {
          m.useful_until = m.needed_by;
        } else {
          const std::uint32_t end_layer = std::min(in.layers, (end_k + 1) * n);  // past the run
          auto past = std::lower_bound(o.uses.begin(), o.uses.end(), end_layer);
          m.useful_until = past != o.uses.begin() && *(past - 1) >= m.needed_by ? *(past - 1) : m.needed_by;
        }
      } else {  // out after its last use in interval k-1, else when k-1 ends
        m.to = in.slow;
        auto after = std::lower_bound(o.uses.begin(), o.uses.end(), start);
        const bool used_in_previous = after != o.uses.begin() && *(after - 1) >= (k - 1) * n;
        m.after_layer = used_in_previous ? *(after - 1) : start - 1;
        m.needed_by = start;
        m.useful_until = kStepStart;  // a move out makes room for moves in: never dropped as late
      }
      plan.moves.push_back(m);
    }
  }
  // By boundary; at one boundary, outs first: the mover takes them in this order, and a move in
  // finds room only once the outs before it are done.
  std::stable_sort(plan.moves.begin(), plan.moves.end(), [&](const PlannedMove& a, const PlannedMove& b) {
    return std::tuple(a.after_layer, a.to == in.fast) < std::tuple(b.after_layer, b.to == in.fast);
  });
  return plan;
}

namespace policies {

Result<Plan> sentinel(const PlanInputs& in) {
  // The short-lived region: their lifetimes packed by the offset planner.
  std::vector<PlannedBuffer> short_lived;
  std::vector<ObjectKey> short_lived_keys;
  for (const PlanObject& o : in.objects) {
    if (o.short_lived && o.freed > o.born) {
      short_lived.push_back({o.born, o.freed, o.bytes});
      short_lived_keys.push_back(o.key);
    }
  }
  auto region = plan_offsets(short_lived, {kPageBytes});
  if (!region) return region.status();
  // With the region (Sentinel's way), and, where the budget is too small for it, without (the
  // short-lived objects then managed per interval like the rest); the valid plan predicted
  // cheapest wins, ties to the plan without the region, then to the longer interval (fewer
  // moves), then to the later count: the plans are offered in that order, as cheapest_of keeps
  // the first of equals. Where none is valid: everything managed in one interval, counted as the
  // paper counts (what does not fit stays slow).
  PlanInputs managed = in;
  for (PlanObject& o : managed.objects) o.short_lived = false;
  const std::uint32_t lengths = std::max(1U, in.layers);
  const std::size_t counts = kSentinelCounts.size();
  const std::size_t per_region = std::size_t{lengths} * counts;
  auto make = [&](std::size_t i) {
    const bool with_region = i >= per_region;
    const std::size_t j = i % per_region;
    const auto n = static_cast<std::uint32_t>(lengths - j / counts);
    const SentinelCount count = kSentinelCounts[counts - 1 - j % counts];
    return with_region ? sentinel_with(in, n, region->region_bytes, count)
                       : sentinel_with(managed, n, 0, count);
  };
  const std::size_t fallback = counts - 1;  // no region, one interval, kSentinelCounts[0]
  Plan best = cheapest_of(in, 2 * per_region, fallback, make);
  if (best.region_bytes != 0) {
    for (std::size_t i = 0; i < short_lived_keys.size(); ++i)
      best.region_offsets.emplace(short_lived_keys[i], region->offsets[i]);
  }
  return best;
}

}  // namespace policies
}  // namespace tensortier::migrator
