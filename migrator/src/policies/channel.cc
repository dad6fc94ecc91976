// channel: a plan rounded from the channel program's solution (issue 50). The channel program
// (timed_program.cc) is the timed bound's linear program: every object's share on the slow tier at
// each boundary, with the mover's channel and the room as constraints in time. Its optimum adds
// the least any plan can (fluid copies, fractional room); its solution says which objects to keep
// fast where and when to copy them. Rounded in phases, after Checkmate's (MLSys'20) two-phase
// rounding of its LP:
//
//   1. each use (and a non-persistent object's first and last boundary): fast where its slow share
//      there is under one half
//   2. between two such anchors p < n the object is slow over the hull of the boundaries of
//      [p, n] whose share is at least `between` (1/2, or 1/10: slow wherever the solution holds a
//      tenth of it slow), fast elsewhere; a move out one boundary earlier than the hull (the
//      solution copies it during the layer before):
//
//        share   0   0  .3  .7   1   1  .6  .2   0          (p fast, n fast; between 1/2)
//        fast    1   1   0   0   0   0   0   1   1          out at the hull's start, in after its end
//
//      so each gap has at most one move out and one move in.
//   3. room: the solution keeps large objects partly fast at their uses (a fluid share no plan
//      moving whole objects can have), so the rounding holds more than the room at some
//      boundaries; there the object the solution had most slow leaves over the run its share was
//      slow at all (fit_by_share), and, as a second candidate, room made at each boundary's births
//      too (make_room: the layout's clock).
//   4. moves in led 0, 1, 2 and 4 boundaries where the room allows (lead_moves_in).
//
// Solved at the room and at 95% of it; every candidate is played by the simulator with places
// laid out, and the cheapest (refused moves charged again: score_residency) is the plan. The
// search policy starts from these too. Measured on ResNet-18 (docs/results/migration.md): the
// rounding loses most of the solution's worth in phase 3, where fluid shares become whole objects.
#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "policies/policy_kit.h"
#include "timed_program.h"

namespace tensortier::migrator::policies {
namespace {

constexpr double kHalf = 0.5;
constexpr double kTenth = 0.1;
constexpr double kAnyShare = 0.02;  // a share the solution holds slow at all

// Phase 3: where the residency holds more than `room` fast at a boundary, the
// object fast there whose share the solution had most slow (the largest of equals) is left slow
// over the run of boundaries around it where the solution had any of it slow.
void fit_by_share(const PlanInputs& in, const std::vector<std::vector<double>>& share, Residency& r,
                  std::uint64_t room) {
  const std::uint32_t L = in.layers;
  std::vector<std::uint64_t> fast(L, 0);
  for (std::size_t i = 0; i < in.objects.size(); ++i)
    for (std::uint32_t b = 0; b < L; ++b)
      if (r[i][b]) fast[b] += in.objects[i].bytes;
  for (std::uint32_t b = 0; b < L; ++b) {
    while (fast[b] > room) {
      std::size_t victim = in.objects.size();
      for (std::size_t i = 0; i < in.objects.size(); ++i) {
        if (!r[i][b]) continue;
        if (victim == in.objects.size() || share[i][b] > share[victim][b] ||
            (share[i][b] == share[victim][b] && in.objects[i].bytes > in.objects[victim].bytes))
          victim = i;
      }
      if (victim == in.objects.size()) break;
      const auto [first, end] = residency_window(in, in.objects[victim]);
      std::uint32_t lo = b, hi = b + 1;
      while (lo > first && r[victim][lo - 1] && share[victim][lo - 1] > kAnyShare) --lo;
      while (hi < end && r[victim][hi] && share[victim][hi] > kAnyShare) ++hi;
      for (std::uint32_t t = lo; t < hi; ++t) {
        r[victim][t] = 0;
        fast[t] -= in.objects[victim].bytes;
      }
    }
  }
}

}  // namespace

std::vector<char> round_channel_shares(const PlanInputs& in, const PlanObject& o,
                                       const std::vector<double>& share, double between) {
  const std::uint32_t L = in.layers;
  std::vector<char> fast(L, 0);
  const auto [first, end] = residency_window(in, o);
  if (first >= end || share[first] < 0) return fast;  // no layer finds it: slow costs nothing
  std::vector<std::uint32_t> anchors;
  for (std::uint32_t u : o.uses)
    if (u >= first && u < end) anchors.push_back(u);
  if (!o.persistent) {
    anchors.push_back(first);
    anchors.push_back(end - 1);
  }
  std::ranges::sort(anchors);
  anchors.erase(std::unique(anchors.begin(), anchors.end()), anchors.end());
  for (std::uint32_t a : anchors) fast[a] = share[a] >= kHalf ? 0 : 1;
  auto slow = [&](std::uint64_t t) {
    const bool anchor = std::ranges::binary_search(anchors, static_cast<std::uint32_t>(t % L));
    return anchor ? fast[t % L] == 0 : share[t % L] >= between;
  };
  // Persistent objects: boundaries are cyclic, the last anchor's gap runs to the first's next step.
  const std::size_t gaps = o.persistent ? anchors.size() : anchors.size() - 1;
  for (std::size_t k = 0; k < gaps; ++k) {
    const std::uint64_t p = anchors[k];
    const std::uint64_t n = k + 1 < anchors.size() ? anchors[k + 1] : anchors[0] + std::uint64_t{L};
    std::uint64_t lo = n + 1, hi = 0;  // the hull of the slow boundaries of [p, n]
    for (std::uint64_t t = p; t <= n; ++t) {
      if (!slow(t)) continue;
      lo = std::min(lo, t);
      hi = t;
    }
    if (lo > p && lo <= n) --lo;  // a move out copied during layer lo - 1 is handed out at boundary lo - 1
    for (std::uint64_t t = p + 1; t < n; ++t) fast[t % L] = (lo <= t && t <= hi) ? 0 : 1;
  }
  return fast;
}

std::vector<std::pair<Residency, std::string>> channel_residencies(const PlanInputs& in) {
  std::vector<std::pair<Residency, std::string>> out;
  const std::uint64_t room = plannable_room(in);
  for (const double share : {1.0, 0.95}) {
    PlanInputs less = in;
    less.fast_budget_bytes -= static_cast<std::uint64_t>((1 - share) * static_cast<double>(room));
    const ChannelSolution solved = solve_channel_program(less, UseShares::kFluid, in.oracle_time_limit_s);
    if (!solved.solved) continue;
    for (const double between : {kHalf, kTenth}) {
      Residency r(in.objects.size());
      for (std::size_t i = 0; i < in.objects.size(); ++i)
        r[i] = round_channel_shares(in, in.objects[i], solved.slow_share[i], between);
      fit_by_share(in, solved.slow_share, r, plannable_room(less));
      Residency roomy = r;  // also within the room at each boundary's births (the layout's clock)
      const bool fits = make_room(in, roomy, in.objects.size(), kEvictUses, plannable_room(less));
      for (const std::uint32_t lead : {0U, 1U, 2U, 4U}) {
        const std::string what = fmt::format(
            "the channel program's solution within {:.0f}% of the room, rounded "
            "(between uses at {}), moves in led {}",
            100 * share, between, lead);
        out.emplace_back(lead_moves_in(less, r, lead), what);
        if (fits) out.emplace_back(lead_moves_in(less, roomy, lead), what + ", room made at births");
      }
    }
  }
  return out;
}

Plan channel(const PlanInputs& in) {
  ScoredPlan best;
  std::string from;
  for (auto& [r, what] : channel_residencies(in)) {
    ScoredPlan s = score_residency(in, "channel", std::move(r));
    if (s.cost_ns < best.cost_ns) {
      best = std::move(s);
      from = what;
    }
  }
  if (best.cost_ns == std::numeric_limits<double>::infinity()) {  // sentinel's plan (make_plan says why)
    auto s = sentinel(in);
    Plan plan = s ? std::move(s).value() : first_touch(in);
    plan.policy = "channel";
    plan.variant = "no rounding of the channel program was valid; sentinel's plan";
    return plan;
  }
  best.plan.variant = from;
  return std::move(best.plan);
}

}  // namespace tensortier::migrator::policies
