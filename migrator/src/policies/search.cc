// search: a plan found by searching with the simulator as the objective (issue 50). The exact
// model's residency (residency_model.h) says which objects a timeless plan keeps fast where; the
// timing it leaves out (moves that come late, births waiting for room or for their place in ready
// memory, the layout over the budget) is what simulate() sees, so the search plays each candidate
// there, places laid out, and keeps what it predicts cheaper:
//
//   seeds: the exact residency with its moves in led 0, 1, 2, 4, 8 boundaries; the channel
//          program's solution rounded (channel.cc); sentinel's plan; the oracle's Belady plan
//                                                         (each as a residency)
//     -> best seed
//     -> N times: one object's residency changed        (a stay made longer or shorter at either
//                 (a fixed-seed generator picks which)    end, a slow use made fast, a stay dropped,
//                                                         a gap between stays filled)
//                 -> within the room at every boundary? -> plan, places, simulate -> cheaper? keep
//     -> the best plan
//
// Every candidate is scored by the same account: its predicted added time, plus its moves in that
// the simulator predicts refused (room taken by births first) charged again as their bytes' slow
// accesses, so a plan is not kept for moves that will not happen. The same profile gives the same
// plan (the generator's seed is fixed, the evaluations counted: PlanInputs::search_evaluations).
#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "policies/policy_kit.h"
#include "tensortier/migrator/places.h"

namespace tensortier::migrator::policies {
namespace {

constexpr double kRefused = std::numeric_limits<double>::infinity();

class ResidencySearch {
 public:
  explicit ResidencySearch(const PlanInputs& in) : in_(in), room_(plannable_room(in)), rng_(20261207) {
    for (std::size_t i = 0; i < in.objects.size(); ++i) index_.emplace(in.objects[i].key, i);
  }
  Plan run();

 private:
  struct Spot {
    std::size_t object;
    std::uint32_t boundary;
  };
  void seeds();
  void consider(Residency r, const std::string& variant);
  void find_spots();
  bool mutate(Residency& r);
  bool random_change(Residency& r, std::size_t& i);
  void shrink_seed();
  bool fits(const Residency& r) const { return fits_room(in_, r, room_); }

  const PlanInputs& in_;
  const std::uint64_t room_;
  std::mt19937 rng_;
  ScoredPlan best_;
  std::string variant_;
  double bound_ns_ = 0;   // the exact model's bound at the whole room
  Residency exact_full_;  // its residency there
  std::string solver_;
  std::unordered_map<ObjectKey, std::size_t> index_;  // object key -> index in in_.objects
  std::vector<Spot> slow_uses_, late_ins_;            // find_spots()
  std::uint32_t evaluations_ = 0, kept_ = 0;
};

void ResidencySearch::consider(Residency r, const std::string& variant) {
  ++evaluations_;
  ScoredPlan s = score_residency(in_, "search", std::move(r));
  if (s.cost_ns < best_.cost_ns) {
    best_ = std::move(s);
    variant_ = variant;
  }
}

// The seeds, each planned within the room less a share kept for the layout's slack over max-live
// (ready memory lays the stays out at offsets, and a layout of many small stays needs up to a
// third more than the bytes it holds): 0, 3, 6 and 10% of it. A seed whose moves in, led, hold
// more than the room at a boundary's busiest moment is not played (its layout cannot fit).
void ResidencySearch::seeds() {
  for (const double slack : {0.0, 0.03, 0.06, 0.10}) {
    PlanInputs less = in_;
    less.fast_budget_bytes -= static_cast<std::uint64_t>(slack * static_cast<double>(room_));
    const std::string within = fmt::format("within {:.0f}% of the room", 100 * (1 - slack));
    const ResidencySolution exact = solve_residency(less, in_.oracle_time_limit_s);
    if (slack == 0.0) {  // the model at the whole room bounds every plan (residency_model.h)
      bound_ns_ = exact.bound_ns;
      if (exact.solved) exact_full_ = exact.fast;
      solver_ = fmt::format("CBC: {}; {} binaries, {} rows, {:.2f} s", exact.status, exact.binaries,
                            exact.rows, exact.seconds);
    }
    if (exact.solved) {
      for (std::uint32_t lead : {0U, 1U, 2U, 4U, 8U}) {
        Residency led = lead_moves_in(less, exact.fast, lead);
        if (lead > 0 && !fits(led)) continue;
        consider(std::move(led),
                 fmt::format("the exact model's residency {}, moves in led {}", within, lead));
      }
    }
    if (slack == 0.0) {
      for (auto& [r, what] : channel_residencies(in_)) consider(std::move(r), what);
    }
    if (auto s = sentinel(less)) consider(residency_of(s.value(), less), "sentinel's plan " + within);
    consider(residency_of(belady_oracle(less), less), "Belady with prefetch " + within);
    if (!in_.ready_memory) break;  // no layout: the room is the room
  }
}

// The best plan's spots worth a change: its uses the layers find slow (weighed by bytes), and its
// moves in predicted late (by boundary).
void ResidencySearch::find_spots() {
  slow_uses_.clear();
  late_ins_.clear();
  for (std::size_t i = 0; i < in_.objects.size(); ++i) {
    const PlanObject& o = in_.objects[i];
    const auto [first, end] = residency_window(in_, o);
    for (std::uint32_t u : o.uses)
      if (u >= first && u < end && !best_.residency[i][u]) slow_uses_.push_back({i, u});
  }
  for (const PlannedMove& m : best_.plan.moves) {
    if (m.to != in_.fast || !m.predicted_late) continue;
    auto at = index_.find(m.key);
    if (at != index_.end())
      late_ins_.push_back({at->second, m.after_layer == kStepStart ? 0 : m.after_layer + 1});
  }
}

// Where no seed's layout fit (a small budget, whose layouts need a larger share more than their
// bytes): the exact model's residency at the whole room with room made Belady-style within 85%,
// 80%, 70%, 60% and 50% of it, the first whose layout fits.
void ResidencySearch::shrink_seed() {
  if (exact_full_.empty()) return;
  for (const double share : {0.85, 0.80, 0.70, 0.60, 0.50}) {
    Residency r = exact_full_;
    const auto room = static_cast<std::uint64_t>(share * static_cast<double>(room_));
    if (!make_room(in_, r, in_.objects.size(), kEvictUses, room)) continue;
    consider(std::move(r),
             fmt::format("the exact model's residency, room made within {:.0f}% of the room", 100 * share));
    if (best_.cost_ns != kRefused) return;
  }
}

// One change (see the picture above): a slow use made fast, a late move in led earlier, or, at
// random, a stay's edge moved, a stay dropped or a gap filled; then room made where it passes.
// False where the one drawn does not apply or cannot fit.
bool ResidencySearch::mutate(Residency& r) {
  const int kind = std::uniform_int_distribution<int>(0, 5)(rng_);
  std::size_t i = 0;
  if (kind <= 2 && !slow_uses_.empty()) {  // a slow use made fast, led by 0-3 boundaries
    const auto [obj, use] =
        slow_uses_[std::uniform_int_distribution<std::size_t>(0, slow_uses_.size() - 1)(rng_)];
    i = obj;
    const std::uint32_t first = residency_window(in_, in_.objects[i]).first;
    const std::uint32_t lead = std::uniform_int_distribution<std::uint32_t>(0, 3)(rng_);
    const std::uint32_t from = std::max(first, use >= lead ? use - lead : 0U);
    std::fill(r[i].begin() + from, r[i].begin() + use + 1, 1);
  } else if (kind == 3 && !late_ins_.empty()) {  // a late move in led 1-3 boundaries earlier
    const auto [obj, b] =
        late_ins_[std::uniform_int_distribution<std::size_t>(0, late_ins_.size() - 1)(rng_)];
    i = obj;
    const std::uint32_t first = residency_window(in_, in_.objects[i]).first;
    const std::uint32_t lead = std::uniform_int_distribution<std::uint32_t>(1, 3)(rng_);
    const std::uint32_t from = std::max(first, b >= lead ? b - lead : 0U);
    std::fill(r[i].begin() + from, r[i].begin() + b, 1);
  } else if (!random_change(r, i)) {
    return false;
  }
  return make_room(in_, r, i, 4, room_);
}

// A random object's stay edge moved, or a run of one state through a random boundary flipped (a
// stay dropped, or a gap between stays filled).
bool ResidencySearch::random_change(Residency& r, std::size_t& i) {
  i = std::uniform_int_distribution<std::size_t>(0, in_.objects.size() - 1)(rng_);
  const PlanObject& o = in_.objects[i];
  const auto [first, end] = residency_window(in_, o);
  if (first >= end || o.uses.empty()) return false;
  std::vector<char>& fast = r[i];
  const auto b = std::uniform_int_distribution<std::uint32_t>(first, end - 1)(rng_);
  if (std::uniform_int_distribution<int>(0, 1)(rng_) == 0) {
    const bool edge = (b > first && fast[b - 1] != fast[b]) || (b + 1 < end && fast[b + 1] != fast[b]);
    if (!edge) return false;
    fast[b] = fast[b] != 0 ? 0 : 1;
    return true;
  }
  std::uint32_t lo = b, hi = b;
  while (lo > first && fast[lo - 1] == fast[b]) --lo;
  while (hi + 1 < end && fast[hi + 1] == fast[b]) ++hi;
  if (!fast[b] && (lo == first || hi + 1 == end)) return false;  // fill only between two stays
  std::fill(fast.begin() + lo, fast.begin() + hi + 1, fast[b] ? 0 : 1);
  return true;
}

Plan ResidencySearch::run() {
  seeds();
  if (best_.cost_ns == kRefused && in_.ready_memory) shrink_seed();
  if (best_.cost_ns == kRefused) {  // no seed was valid: sentinel's plan as it is (make_plan says why)
    auto s = sentinel(in_);
    Plan plan = s ? std::move(s).value() : first_touch(in_);
    plan.policy = "search";
    plan.variant = "no valid seed; sentinel's plan";
    return plan;
  }
  find_spots();
  for (std::uint32_t n = 0; n < in_.search_evaluations; ++n) {
    Residency r = best_.residency;
    if (!mutate(r)) continue;
    ++evaluations_;
    ScoredPlan s = score_residency(in_, "search", std::move(r));
    if (s.cost_ns >= best_.cost_ns) continue;
    best_ = std::move(s);
    find_spots();
    ++kept_;
  }
  Plan plan = std::move(best_.plan);
  plan.policy = "search";
  plan.bound_extra_ns = bound_ns_;
  plan.solver = solver_;
  plan.variant = fmt::format("from {}; {} evaluations, {} changes kept", variant_, evaluations_, kept_);
  return plan;
}

}  // namespace

Plan search(const PlanInputs& in) {
  return ResidencySearch(in).run();
}

}  // namespace tensortier::migrator::policies
