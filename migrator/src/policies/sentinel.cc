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

namespace {

// One sentinel plan for one interval length, region and count, made in phases:
//
//   collect()            short-lived objects fast for life; the rest per interval: uses counted
//   for k in intervals:  fill(k)  = offer(k's users) -> offer(k+1's users) -> keep_previous(k)
//   emit()               each managed object's tier per interval, the moves between, in mover order
//
// F_k (fast_in_[k]) is what is fast during interval k; held_ is what F sets hold of the room, per
// layer (by_layer_) or per interval.
class SentinelPlanner {
 public:
  SentinelPlanner(const PlanInputs& in, std::uint32_t n, std::uint64_t region, SentinelCount count);
  Plan make();

 private:
  using Span = std::pair<std::uint32_t, std::uint32_t>;
  void collect();
  void fill(std::uint32_t k);
  void offer(std::uint32_t k, std::uint32_t j);
  void keep_previous(std::uint32_t k);
  Span span(std::uint32_t k, std::size_t i) const;
  void take(std::uint32_t k, std::size_t i, Span taken);
  bool alive_in(const PlanObject& o, std::uint32_t k) const;
  void emit();
  PlannedMove move_in(const PlanObject& o, std::size_t i, std::uint32_t k, std::uint32_t last_k) const;
  PlannedMove move_out(const PlanObject& o, std::uint32_t k) const;
  bool fast_at(std::size_t i, std::uint32_t k) const { return fast_in_[k == intervals_ ? 0 : k].contains(i); }
  std::uint32_t first_layer(std::uint32_t k) const { return k * n_; }
  std::uint32_t end_layer(std::uint32_t k) const { return std::min(in_.layers, (k + 1) * n_); }

  const PlanInputs& in_;
  const std::uint32_t n_;  // layers per interval
  const std::uint32_t intervals_;
  const bool by_layer_, by_occupancy_, per_byte_;
  const std::uint64_t room_;
  Plan plan_;
  std::vector<std::size_t> managed_;
  std::vector<std::map<std::size_t, std::uint32_t>> used_;  // per interval: object -> uses in it
  std::vector<std::set<std::size_t>> fast_in_;
  std::vector<std::uint64_t> held_;
  std::vector<std::uint32_t> counted_to_;  // by_layer_: where an object's count in F_{k-1} ends
};

SentinelPlanner::SentinelPlanner(const PlanInputs& in, std::uint32_t n, std::uint64_t region,
                                 SentinelCount count)
    : in_(in),
      n_(std::max(1U, n)),
      intervals_((in.layers + n_ - 1) / n_),
      by_layer_(count != SentinelCount::kPerInterval),
      by_occupancy_(count == SentinelCount::kPerLayerByHeld || count == SentinelCount::kPerLayerByHotHeld),
      per_byte_(count != SentinelCount::kPerLayerByHotHeld),
      room_(in.fast_budget_bytes > in.small_reserve_bytes + region
                ? in.fast_budget_bytes - (in.small_reserve_bytes + region)
                : 0),
      used_(intervals_),
      fast_in_(intervals_),
      held_(by_layer_ ? in.layers : intervals_, 0),
      counted_to_(by_layer_ ? in.objects.size() : 0, 0) {
  plan_.policy = "sentinel";
  plan_.interval_layers = n_;
  plan_.region_bytes = region;
  plan_.variant = by_layer_ ? "fast sets held to the budget at each layer"
                            : "fast sets held to the budget over each interval";
  if (by_occupancy_)
    plan_.variant += per_byte_ ? ", ranked by uses per byte-layer held" : ", ranked by uses per layer held";
}

Plan SentinelPlanner::make() {
  collect();
  for (std::uint32_t k = 0; k < intervals_; ++k) fill(k);
  emit();
  return std::move(plan_);
}

// Short-lived objects fast for their whole life (the region); the others managed, with their uses
// counted per interval.
void SentinelPlanner::collect() {
  for (std::size_t i = 0; i < in_.objects.size(); ++i) {
    const PlanObject& o = in_.objects[i];
    if (o.short_lived) {
      policies::place(plan_, o, in_.fast);
      continue;
    }
    managed_.push_back(i);
    for (std::uint32_t layer : o.uses) ++used_[layer / n_][i];
  }
}

// F_k: first its own objects, hottest first, then the next interval's (prefetch) while they fit;
// only objects alive in interval k; then what k-1 held that room is left for.
void SentinelPlanner::fill(std::uint32_t k) {
  offer(k, k);
  if (k + 1 <= intervals_) offer(k, k + 1);
  if (k > 0) keep_previous(k);
}

// Offers F_k the users of interval j, hottest (uses per byte, or per layer held) first; j ==
// intervals_ is the next step's first interval: persistent objects only.
void SentinelPlanner::offer(std::uint32_t k, std::uint32_t j) {
  const bool wrap = j == intervals_;
  // (-score, object, its span): an object's span stays what it is while F_k fills.
  std::vector<std::tuple<double, std::size_t, Span>> ranked;
  for (const auto& [i, uses] : used_[wrap ? 0 : j]) {
    const PlanObject& o = in_.objects[i];
    if ((wrap && !o.persistent) || !alive_in(o, k) || fast_in_[k].contains(i)) continue;
    const Span taken = span(k, i);
    double score = static_cast<double>(uses) / (per_byte_ ? static_cast<double>(o.bytes) : 1.0);
    if (by_occupancy_) score /= static_cast<double>(std::max(1U, taken.second - taken.first));
    ranked.emplace_back(-score, i, taken);
  }
  std::sort(ranked.begin(), ranked.end());
  for (const auto& [score, i, taken] : ranked) take(k, i, taken);
}

// Room left over keeps what interval k-1 held and k does not use, soonest next use first: moving
// it out only to move it back costs two copies for nothing.
void SentinelPlanner::keep_previous(std::uint32_t k) {
  std::vector<std::pair<std::uint64_t, std::size_t>> stay;
  for (std::size_t i : fast_in_[k - 1]) {
    const PlanObject& o = in_.objects[i];
    if (!alive_in(o, k) || fast_in_[k].contains(i)) continue;
    auto next = std::lower_bound(o.uses.begin(), o.uses.end(), first_layer(k));
    stay.emplace_back(next != o.uses.end() ? *next : std::uint64_t{in_.layers} + 1, i);
  }
  std::sort(stay.begin(), stay.end());
  for (const auto& [use, i] : stay) take(k, i, span(k, i));
}

// What object i takes of held_ in F_k. By layer: the layers of the interval it is alive in, from
// where its count in F_{k-1} ended if it was there; when it outlives the interval and the next one
// does not need it, it leaves after its last use here (the move out between the intervals' sets
// goes then), so its count ends there (a later set that keeps it counts the layers after; one that
// dies within the interval holds its room until it dies).
SentinelPlanner::Span SentinelPlanner::span(std::uint32_t k, std::size_t i) const {
  if (!by_layer_) return {k, k + 1};
  const PlanObject& o = in_.objects[i];
  const std::uint32_t first = first_layer(k), last = end_layer(k);
  std::uint32_t lo = o.persistent ? first : std::max(first, o.born);
  if (k > 0 && fast_in_[k - 1].contains(i)) lo = std::min(lo, counted_to_[i]);
  std::uint32_t hi = o.persistent ? last : std::min(last, o.freed);
  const bool next_needs =
      k + 1 == intervals_ ? o.persistent && fast_in_[0].contains(i) : used_[k + 1].contains(i);
  if (!next_needs && (o.persistent || o.freed > last)) {
    auto after = std::lower_bound(o.uses.begin(), o.uses.end(), last);
    if (after != o.uses.begin() && *(after - 1) >= first) hi = *(after - 1) + 1;
  }
  return {lo, std::max(lo, hi)};
}

// Into F_k where it fits at every layer (interval) of its span.
void SentinelPlanner::take(std::uint32_t k, std::size_t i, Span taken) {
  const auto [lo, hi] = taken;
  const std::uint64_t bytes = in_.objects[i].bytes;
  for (std::uint32_t s = lo; s < hi; ++s) {
    if (held_[s] + bytes > room_) return;
  }
  for (std::uint32_t s = lo; s < hi; ++s) held_[s] += bytes;
  if (by_layer_) counted_to_[i] = hi;
  fast_in_[k].insert(i);
}

bool SentinelPlanner::alive_in(const PlanObject& o, std::uint32_t k) const {
  return o.persistent || (o.born < end_layer(k) && o.freed > first_layer(k));
}

// Per object: where it is in each interval it lives in, and the moves between; by boundary, and
// at one boundary outs first (the mover's order: a move in finds room once the outs before it
// are done).
void SentinelPlanner::emit() {
  for (std::size_t i : managed_) {
    const PlanObject& o = in_.objects[i];
    const std::uint32_t first_k = o.persistent ? 0 : o.born / n_;
    // inclusive; an object freed at boundary 0 (made before the step, freed before its first layer)
    // lives in interval 0 only
    const std::uint32_t last_k = o.persistent ? intervals_ : (o.freed > 0 ? o.freed - 1 : 0) / n_;
    policies::place(plan_, o, fast_at(i, first_k) ? in_.fast : in_.slow);
    for (std::uint32_t k = first_k + 1; k <= last_k; ++k) {
      const bool was = fast_at(i, k - 1), is = fast_at(i, k);
      if (was != is) plan_.moves.push_back(is ? move_in(o, i, k, last_k) : move_out(o, k));
    }
  }
  std::stable_sort(plan_.moves.begin(), plan_.moves.end(), [&](const PlannedMove& a, const PlannedMove& b) {
    return std::tuple(a.after_layer, a.to == in_.fast) < std::tuple(b.after_layer, b.to == in_.fast);
  });
}

// In when interval k begins (prefetched: F_k holds it because k or k+1 uses it), useful until its
// last use while it stays fast: the run of fast intervals from k.
PlannedMove SentinelPlanner::move_in(const PlanObject& o, std::size_t i, std::uint32_t k,
                                     std::uint32_t last_k) const {
  PlannedMove m;
  m.key = o.key;
  m.bytes = o.bytes;
  m.to = in_.fast;
  const bool wrap = k == intervals_;
  const std::uint32_t start = wrap ? in_.layers : first_layer(k);
  m.after_layer = start - 1;
  auto next_use = std::lower_bound(o.uses.begin(), o.uses.end(), wrap ? 0 : start);
  m.needed_by = wrap ? in_.layers + (next_use != o.uses.end() ? *next_use : 0)
                     : (next_use != o.uses.end() ? *next_use : start);
  if (wrap) {
    m.useful_until = m.needed_by;
    return m;
  }
  std::uint32_t end_k = k;
  while (end_k + 1 <= last_k && fast_at(i, end_k + 1)) ++end_k;
  auto past = std::lower_bound(o.uses.begin(), o.uses.end(), end_layer(end_k));
  m.useful_until = past != o.uses.begin() && *(past - 1) >= m.needed_by ? *(past - 1) : m.needed_by;
  return m;
}

// Out after its last use in interval k-1, else when k-1 ends; a move out makes room for moves in,
// so it is never dropped as late.
PlannedMove SentinelPlanner::move_out(const PlanObject& o, std::uint32_t k) const {
  PlannedMove m;
  m.key = o.key;
  m.bytes = o.bytes;
  m.to = in_.slow;
  const std::uint32_t start = k == intervals_ ? in_.layers : first_layer(k);
  auto after = std::lower_bound(o.uses.begin(), o.uses.end(), start);
  const bool used_in_previous = after != o.uses.begin() && *(after - 1) >= first_layer(k - 1);
  m.after_layer = used_in_previous ? *(after - 1) : start - 1;
  m.needed_by = start;
  m.useful_until = kStepStart;
  return m;
}

}  // namespace

Plan sentinel_with(const PlanInputs& in, std::uint32_t n, std::uint64_t region, SentinelCount count) {
  return SentinelPlanner(in, n, region, count).make();
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
