// The oracle: full knowledge of the step's accesses. The plan the simulator predicts cheapest
// among an exact model's (residency_model.h: a mixed-integer program over which objects are fast
// at each boundary, solved by COIN-OR CBC within a time limit, its moves in then handed out as
// early as the budget allows), its own heuristics (Belady's rule with prefetch: at each boundary
// the objects used within a lookahead moved in, nearest use first, room made by moving out those
// used furthest away, or clean ones first) and every other whole-object policy's plan, each weighed
// as make_plan plays it (moves of dead bytes free), with ready memory in its places as laid out, so
// it is never predicted worse than a plan it weighs. The exact model leaves out
// time, so its optimum is a lower bound on every whole-object plan's prediction (Plan::bound_extra_ns), not a
// plan that reaches it.
#include "policies/policy_kit.h"
#include "tensortier/migrator/places.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace tensortier::migrator::policies {

namespace {

// The oracle's heuristic with lookahead `horizon`: at each layer boundary, objects whose next
// use is within the horizon are brought into fast memory, nearest next use first, making room by
// moving out the fast objects whose next use is furthest (and later than the newcomer's: Belady's
// rule); an object is born fast when room can be made that way. Persistent objects end the step
// where they began it (moves after the last layer restore them). Phases:
//
//   start()                                  persistent objects fast by first use, while they fit
//   for t in layers: mark_dirty(t)  free_deaths(t)  place_births(t)  prefetch(t)
//   restore_persistent()  set_useful_until()  sort_in_mover_order
class NextUsePlanner {
 public:
  NextUsePlanner(const PlanInputs& in, std::uint32_t horizon, bool clean_first);
  Plan make();

 private:
  static constexpr std::uint64_t kNever = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t next_use(const PlanObject& o, std::uint32_t t) const;
  void start();
  void mark_dirty(std::uint32_t t);
  void free_deaths(std::uint32_t t);
  void place_births(std::uint32_t t);
  void prefetch(std::uint32_t t);
  void restore_persistent();
  void set_useful_until();
  bool make_room(std::uint64_t bytes, std::uint64_t use, std::uint32_t t);
  void add_move(std::size_t i, TierIndex to, std::uint32_t t, std::uint64_t needed);
  void set_fast(std::size_t i, bool fast);

  const PlanInputs& in_;
  const std::uint32_t horizon_;
  const bool clean_first_;
  const std::uint32_t layers_;
  const std::size_t n_;
  const std::uint64_t room_;
  Plan plan_;
  std::vector<char> alive_, fast_;
  std::vector<char> clean_;  // fast, moved in and unwritten since: its slow copy is current
  std::uint64_t fast_bytes_ = 0;
  std::multimap<std::uint32_t, std::size_t> births_, deaths_;
  std::vector<PlannedMove> moves_;
  std::vector<std::size_t> move_owner_;
};

NextUsePlanner::NextUsePlanner(const PlanInputs& in, std::uint32_t horizon, bool clean_first)
    : in_(in),
      horizon_(horizon),
      clean_first_(clean_first),
      layers_(in.layers),
      n_(in.objects.size()),
      room_(plannable_room(in)),
      alive_(n_, 0),
      fast_(n_, 0),
      clean_(n_, 0) {
  plan_.policy = "oracle";
  plan_.interval_layers = horizon;
  for (std::size_t i = 0; i < n_; ++i) {
    const PlanObject& o = in.objects[i];
    if (o.persistent) {
      alive_[i] = 1;
    } else {
      births_.emplace(o.born, i);
      deaths_.emplace(o.freed, i);
    }
  }
  moves_.reserve(4 * n_);
}

Plan NextUsePlanner::make() {
  start();
  for (std::uint32_t t = 0; t < layers_; ++t) {
    mark_dirty(t);
    free_deaths(t);
    place_births(t);
    prefetch(t);
  }
  restore_persistent();
  set_useful_until();
  sort_in_mover_order(moves_, in_.fast);
  plan_.moves = std::move(moves_);
  return std::move(plan_);
}

std::uint64_t NextUsePlanner::next_use(const PlanObject& o, std::uint32_t t) const {
  auto it = std::lower_bound(o.uses.begin(), o.uses.end(), t);
  if (it != o.uses.end()) return *it;
  if (o.persistent && !o.uses.empty()) return std::uint64_t{layers_} + o.uses.front();  // the next step's
  return kNever;
}

void NextUsePlanner::set_fast(std::size_t i, bool fast) {
  fast_[i] = fast ? 1 : 0;
  if (fast) {
    fast_bytes_ += in_.objects[i].bytes;
  } else {
    fast_bytes_ -= in_.objects[i].bytes;
  }
}

// The start: persistent objects by first use, while they fit.
void NextUsePlanner::start() {
  std::vector<std::size_t> persistent;
  for (std::size_t i = 0; i < n_; ++i)
    if (in_.objects[i].persistent) persistent.push_back(i);
  std::sort(persistent.begin(), persistent.end(), [&](std::size_t a, std::size_t b) {
    return std::tuple(next_use(in_.objects[a], 0), a) < std::tuple(next_use(in_.objects[b], 0), b);
  });
  for (std::size_t i : persistent) {
    const PlanObject& o = in_.objects[i];
    const bool fits = fast_bytes_ + o.bytes <= room_ && next_use(o, 0) < horizon_;
    plan_.start[o.key] = fits ? in_.fast : in_.slow;
    if (fits) set_fast(i, true);
  }
}

// What layer t - 1 wrote is dirty now.
void NextUsePlanner::mark_dirty(std::uint32_t t) {
  if (t == 0) return;
  for (std::size_t i = 0; i < n_; ++i) {
    const auto& w = in_.objects[i].writes;
    if (clean_[i] && std::binary_search(w.begin(), w.end(), t - 1)) clean_[i] = 0;
  }
}

void NextUsePlanner::free_deaths(std::uint32_t t) {
  for (auto [it, end] = deaths_.equal_range(t); it != end; ++it) {
    const std::size_t i = it->second;
    if (fast_[i]) fast_bytes_ -= in_.objects[i].bytes;
    alive_[i] = fast_[i] = clean_[i] = 0;
  }
}

void NextUsePlanner::place_births(std::uint32_t t) {
  for (auto [it, end] = births_.equal_range(t); it != end; ++it) {
    const std::size_t i = it->second;
    const PlanObject& o = in_.objects[i];
    alive_[i] = 1;
    const std::uint64_t use = next_use(o, t);
    const bool to_fast = use < std::uint64_t{t} + horizon_ && make_room(o.bytes, use, t);
    plan_.birth[o.key] = to_fast ? in_.fast : in_.slow;
    if (to_fast) set_fast(i, true);
  }
}

// Slow objects used within the horizon, nearest use first.
void NextUsePlanner::prefetch(std::uint32_t t) {
  std::vector<std::pair<std::uint64_t, std::size_t>> wanted;
  for (std::size_t i = 0; i < n_; ++i) {
    if (!alive_[i] || fast_[i]) continue;
    const std::uint64_t use = next_use(in_.objects[i], t);
    if (use < std::uint64_t{t} + horizon_) wanted.emplace_back(use, i);
  }
  std::sort(wanted.begin(), wanted.end());
  for (const auto& [use, i] : wanted) {
    if (!make_room(in_.objects[i].bytes, use, t)) break;
    set_fast(i, true);
    clean_[i] = in_.clean_moves_out_free ? 1 : 0;
    add_move(i, in_.fast, t, use);
  }
}

// After the last layer: persistent objects back where the step starts them (outs, then ins).
void NextUsePlanner::restore_persistent() {
  for (int pass = 0; pass < 2; ++pass) {
    for (std::size_t i = 0; i < n_; ++i) {
      const PlanObject& o = in_.objects[i];
      if (!o.persistent) continue;
      const bool want_fast = plan_.start[o.key] == in_.fast;
      if (want_fast == static_cast<bool>(fast_[i]) || want_fast != (pass == 1)) continue;
      fast_[i] = want_fast ? 1 : 0;
      add_move(i, want_fast ? in_.fast : in_.slow, layers_,
               std::uint64_t{layers_} + next_use(o, 0) % std::max(1U, layers_));
    }
  }
}

// A move in helps until the object's next move out (or its death, or the step's end).
void NextUsePlanner::set_useful_until() {
  std::vector<std::uint32_t> stay_end(n_, kStepStart);
  for (std::size_t m = moves_.size(); m-- > 0;) {
    const std::size_t i = move_owner_[m];
    PlannedMove& mv = moves_[m];
    if (mv.to == in_.slow) {
      stay_end[i] = mv.after_layer == kStepStart ? 0 : mv.after_layer;
      continue;
    }
    if (mv.needed_by >= layers_) continue;
    const PlanObject& o = in_.objects[i];
    const std::uint32_t until =
        std::min<std::uint32_t>(stay_end[i] == kStepStart ? layers_ - 1 : stay_end[i],
                                o.persistent ? layers_ - 1 : (o.freed > 0 ? o.freed - 1 : 0));
    auto last = std::upper_bound(o.uses.begin(), o.uses.end(), until);
    mv.useful_until = last != o.uses.begin() && *(last - 1) >= mv.needed_by ? *(last - 1) : mv.needed_by;
    stay_end[i] = kStepStart;
  }
}

// Makes `bytes` of room at boundary t for an object next used at `use`, moving out the fast
// objects used furthest away (all later than `use`). False, changing nothing, if it cannot.
bool NextUsePlanner::make_room(std::uint64_t bytes, std::uint64_t use, std::uint32_t t) {
  if (fast_bytes_ + bytes <= room_) return true;
  std::vector<std::tuple<int, std::uint64_t, std::size_t>> victims;  // (clean first?, next use, object)
  for (std::size_t j = 0; j < n_; ++j) {
    if (!alive_[j] || !fast_[j]) continue;
    const std::uint64_t u = next_use(in_.objects[j], t);
    // One with no use left that dies within two layers frees its room soon: moving it out would
    // only spend slow-tier bandwidth on bytes nobody reads.
    if (u == kNever && !in_.objects[j].persistent && in_.objects[j].freed <= t + 2) continue;
    // clean_first: an object whose slow copy is current goes out for free, so all of those
    // (furthest use first) go before any that would have to be written.
    if (u > use) victims.emplace_back(clean_first_ && clean_[j] ? 1 : 0, u, j);
  }
  std::sort(victims.rbegin(), victims.rend());
  std::uint64_t freed = 0;
  std::size_t count = 0;
  while (fast_bytes_ - freed + bytes > room_ && count < victims.size())
    freed += in_.objects[std::get<2>(victims[count++])].bytes;
  if (fast_bytes_ - freed + bytes > room_) return false;
  for (std::size_t v = 0; v < count; ++v) {
    const std::size_t j = std::get<2>(victims[v]);
    set_fast(j, false);
    clean_[j] = 0;
    add_move(j, in_.slow, t, t);
  }
  return true;
}

void NextUsePlanner::add_move(std::size_t i, TierIndex to, std::uint32_t t, std::uint64_t needed) {
  PlannedMove m;
  m.key = in_.objects[i].key;
  m.to = to;
  m.bytes = in_.objects[i].bytes;
  m.after_layer = t == 0 ? kStepStart : t - 1;
  m.needed_by = static_cast<std::uint32_t>(std::min<std::uint64_t>(needed, 2ULL * layers_));
  m.useful_until = to == in_.fast ? m.needed_by : kStepStart;
  moves_.push_back(m);
  move_owner_.push_back(i);
}

Plan next_use_plan(const PlanInputs& in, std::uint32_t horizon, bool clean_first) {
  return NextUsePlanner(in, horizon, clean_first).make();
}

// The exact model's plans: its residency with moves in led by 0, 1, 2, 3, 5, 8, ... boundaries, the
// one the simulator predicts cheapest.
// `within`: the inputs the residency was solved for (a share of the room); the plans are weighed
// over `in`, in their places where it runs in ready memory.
Plan exact_residency_plan(const PlanInputs& in, const PlanInputs& within, const ResidencySolution& sol) {
  std::vector<std::uint32_t> leads{0};
  for (std::uint32_t h = 1; h < in.layers; h = h * 3 / 2 + 1) leads.push_back(h);
  Plan best;
  bool have = false;
  for (std::uint32_t lead : leads) {
    Plan plan = from_residency(in, "oracle", lead_moves_in(within, sol.fast, lead), true);
    plan.interval_layers = lead;
    if (in.ready_memory && !lay_out_places_timed(plan, in).empty()) continue;
    if (!simulate(plan, in).empty()) continue;
    if (!have || plan.predicted_extra_ns < best.predicted_extra_ns) {
      best = std::move(plan);
      have = true;
    }
  }
  if (!have) {
    best = from_residency(in, "oracle", sol.fast, true);
    (void)simulate(best, in);
  }
  return best;
}

}  // namespace

// The oracle's own heuristic: every lookahead, evicting by next use or clean objects first.
Plan belady_oracle(const PlanInputs& in) {
  std::vector<std::pair<std::uint32_t, bool>> variants;  // (lookahead, clean objects out first)
  for (std::uint32_t h = 1; h < in.layers; h = h * 3 / 2 + 1) {
    variants.emplace_back(h, false);
    if (in.clean_moves_out_free) variants.emplace_back(h, true);
  }
  variants.emplace_back(std::max(1U, 2 * in.layers), false);
  if (in.clean_moves_out_free) variants.emplace_back(std::max(1U, 2 * in.layers), true);
  variants.emplace_back(1, false);  // the fallback where no lookahead gives a valid plan
  return cheapest_of(in, variants.size() - 1, variants.size() - 1,
                     [&](std::size_t i) { return next_use_plan(in, variants[i].first, variants[i].second); });
}

// A heuristic's plan as make_plan would run it where its layout overshoots the room: planned again
// under less (at most kMostReplans times, as make_plan); nothing where it fits as made (the oracle
// has that plan already) or where none fits. At small budgets the oracle's shares of the room
// (down to 90%) are not enough for some heuristics' layouts (sentinel's at 10% of ResNet-18's
// peak fits after two such cuts).
std::optional<Plan> fitted(const PlanInputs& in, Result<Plan> (*make)(const PlanInputs&)) {
  PlanInputs within = in;
  for (std::uint32_t attempt = 0; attempt <= kMostReplans; ++attempt) {
    Result<Plan> plan = make(within);
    if (!plan) return std::nullopt;
    if (lay_out_places_timed(*plan, in).empty()) {
      return attempt > 0 ? std::optional<Plan>(std::move(plan).value()) : std::nullopt;
    }
    const std::uint64_t lowered = lowered_budget(*plan, in, within.fast_budget_bytes, attempt);
    if (lowered <= in.small_reserve_bytes) return std::nullopt;
    within.fast_budget_bytes = lowered;
  }
  return std::nullopt;
}

// The oracle: with full knowledge of the step, the plan the simulator predicts cheapest among
// the exact model's (residency_model.h, solved within PlanInputs::oracle_time_limit_s), its own
// heuristics (Belady's rule with prefetch over every lookahead, evicting by next use or clean
// objects first) and every other policy's plan (first-touch, reactive, autoswap, sentinel, channel).
// Plan::variant says which one it is; Plan::bound_extra_ns is the exact model's bound.
Plan oracle(const PlanInputs& in) {
  std::vector<std::pair<std::string, Plan>> candidates;
  const ResidencySolution exact = solve_residency(in, in.oracle_time_limit_s);
  // With ready memory a plan's layout needs more than its bytes at a boundary: each candidate is
  // also made within 97, 94 and 90% of the room (make_plan would otherwise plan again under less,
  // after the choice; at 10% of ResNet-18's peak only a plan with no moves fitted within 94%), and
  // weighed in its places below.
  for (const double share :
       in.ready_memory ? std::vector<double>{1.0, 0.97, 0.94, 0.90} : std::vector<double>{1.0}) {
    PlanInputs within = in;
    within.fast_budget_bytes -=
        static_cast<std::uint64_t>((1 - share) * static_cast<double>(plannable_room(in)));
    const std::string of = share < 1 ? fmt::format(" within {:.0f}% of the room", 100 * share) : "";
    const ResidencySolution sol = share < 1 ? solve_residency(within, in.oracle_time_limit_s) : exact;
    if (sol.solved) {
      candidates.emplace_back(fmt::format("exact model's residency ({}){}",
                                          sol.optimal ? "optimal" : "the best within the time limit", of),
                              exact_residency_plan(in, within, sol));
    }
    candidates.emplace_back("Belady with prefetch" + of, belady_oracle(within));
    candidates.emplace_back("first-touch's plan" + of, first_touch(within));
    candidates.emplace_back("reactive's plan" + of, reactive(within));
    candidates.emplace_back("autoswap's plan" + of, autoswap(within));
    if (auto s = sentinel(within)) candidates.emplace_back("sentinel's plan" + of, std::move(s).value());
  }
  candidates.emplace_back("the channel program's solution rounded (the channel policy's plan)", channel(in));
  if (in.ready_memory) {
    using Heuristic = Result<Plan> (*)(const PlanInputs&);
    const std::pair<const char*, Heuristic> heuristics[] = {
        {"reactive's plan", [](const PlanInputs& i) -> Result<Plan> { return reactive(i); }},
        {"autoswap's plan", [](const PlanInputs& i) -> Result<Plan> { return autoswap(i); }},
        {"sentinel's plan", sentinel}};
    for (const auto& [name, make] : heuristics) {
      if (auto plan = fitted(in, make))
        candidates.emplace_back(fmt::format("{}, planned again under less until its layout fits", name),
                                std::move(*plan));
    }
  }
  // Each variant is weighed as make_plan will play it (its dead moves marked and free), so the
  // oracle is never predicted worse than a plan it weighs. Until 2026-12-07 it weighed every move
  // as a copy (moves failed for room the simulator did not see then; it now refuses a move in that
  // finds no room, and with ready memory lays out every birth's place).
  const PlanInputs& weigh = in;
  Plan best;
  bool have = false;
  for (auto& [variant, plan] : candidates) {
    // With ready memory, each as it will run: laid out (a layout over the budget is no candidate:
    // make_plan would plan again under less), then played in its places.
    if (in.ready_memory && !lay_out_places_timed(plan, weigh).empty()) continue;
    if (!simulate(plan, weigh).empty()) continue;
    if (!have || plan.predicted_extra_ns < best.predicted_extra_ns) {
      best = std::move(plan);
      best.variant = variant;
      have = true;
    }
  }
  if (!have) {
    best = std::move(candidates.front().second);
    best.variant = candidates.front().first;
  }
  best.policy = "oracle";  // make_plan plays it over `in`, dead moves marked
  best.bound_extra_ns = exact.bound_ns;
  best.solver = fmt::format("CBC: {}; {} binaries, {} rows, {:.2f} s", exact.status, exact.binaries,
                            exact.rows, exact.seconds);
  return best;
}

}  // namespace tensortier::migrator::policies
