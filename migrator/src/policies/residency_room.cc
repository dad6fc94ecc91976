// A residency's room (policy_kit.h): the fast bytes it holds at each boundary's busiest moment,
// room made where it passes, and its plan scored by the simulator. The search and the channel
// policy share them.
#include <algorithm>

#include "policies/policy_kit.h"
#include "tensortier/migrator/places.h"

namespace tensortier::migrator::policies {

// The larger of a boundary's births' moment (what was fast before b and is still alive, and what
// b's births put there: an object moving out at b holds its place until its move ends, after b's
// births) and its moves in's (what is fast at b). Ready memory lays the stays out on that clock.
std::vector<std::uint64_t> held_bytes(const PlanInputs& in, const Residency& r) {
  const std::uint32_t L = in.layers;
  std::vector<std::uint64_t> after(L, 0), births(L, 0);
  for (std::size_t i = 0; i < in.objects.size(); ++i) {
    const PlanObject& o = in.objects[i];
    const auto [first, end] = residency_window(in, o);
    for (std::uint32_t b = first; b < end; ++b) {
      if (r[i][b]) after[b] += o.bytes;
      const bool born_here = !o.persistent && b == first;
      const std::uint32_t before = b == 0 ? L - 1 : b - 1;
      if (born_here ? r[i][b] : (r[i][before] && (o.persistent || b > first))) births[b] += o.bytes;
    }
  }
  for (std::uint32_t b = 0; b < L; ++b) after[b] = std::max(after[b], births[b]);
  return after;
}

bool fits_room(const PlanInputs& in, const Residency& r, std::uint64_t room) {
  return std::ranges::all_of(held_bytes(in, r), [&](std::uint64_t h) { return h <= room; });
}

namespace {

// Of the objects fast at boundary b (not `keep`), the one whose next use is furthest, and that
// use (b where every one of them is used at b).
std::pair<std::size_t, std::uint32_t> furthest_next_use(const PlanInputs& in, const Residency& r,
                                                        std::uint32_t b, std::size_t keep) {
  std::size_t victim = keep;
  std::uint32_t furthest = 0;
  for (std::size_t i = 0; i < in.objects.size(); ++i) {
    const PlanObject& o = in.objects[i];
    const auto [first, end] = residency_window(in, o);
    if (i == keep || b < first || b >= end || !r[i][b]) continue;
    auto next = std::lower_bound(o.uses.begin(), o.uses.end(), b);
    const std::uint32_t use = next == o.uses.end() ? end : *next;
    if (use > furthest) {
      furthest = use;
      victim = i;
    }
  }
  return {victim, furthest};
}

// The largest object fast at b (not `keep`); keep where none.
std::size_t largest_fast(const PlanInputs& in, const Residency& r, std::uint32_t b, std::size_t keep) {
  std::size_t victim = keep;
  std::uint64_t largest = 0;
  for (std::size_t i = 0; i < in.objects.size(); ++i) {
    const auto [first, end] = residency_window(in, in.objects[i]);
    if (i != keep && b >= first && b < end && r[i][b] && in.objects[i].bytes > largest) {
      largest = in.objects[i].bytes;
      victim = i;
    }
  }
  return victim;
}

}  // namespace

bool make_room(const PlanInputs& in, Residency& r, std::size_t keep, int most_evictions, std::uint64_t room) {
  for (int evictions = 0; evictions < most_evictions; ++evictions) {
    const std::vector<std::uint64_t> held = held_bytes(in, r);
    auto over = std::ranges::find_if(held, [&](std::uint64_t h) { return h > room; });
    if (over == held.end()) return true;
    const auto b = static_cast<std::uint32_t>(over - held.begin());
    auto [victim, furthest] = furthest_next_use(in, r, b, keep);
    if (victim == keep || furthest == b) {            // every one fast there is used there
      if (most_evictions < kEvictUses) return false;  // not at the cost of a use
      victim = largest_fast(in, r, b, keep);          // it is left slow there: its use reads the slow tier
      if (victim == keep) return false;
      r[victim][b] = 0;
      continue;
    }
    const std::uint32_t end = residency_window(in, in.objects[victim]).second;
    std::fill(r[victim].begin() + b, r[victim].begin() + std::min(furthest, end), 0);
  }
  return fits_room(in, r, room);
}

ScoredPlan score_residency(const PlanInputs& in, std::string policy, Residency r) {
  ScoredPlan s;
  s.plan = from_residency(in, std::move(policy), r, true);
  s.residency = std::move(r);
  if (in.ready_memory && !lay_out_places_timed(s.plan, in).empty()) return s;
  if (!simulate(s.plan, in).empty()) return s;
  s.cost_ns = s.plan.predicted_extra_ns + static_cast<double>(s.plan.failed_in_bytes) *
                                              in.slow_access_ns_per_byte;  // refused: charged again
  return s;
}

}  // namespace tensortier::migrator::policies
