// The oracle: full knowledge of the step's accesses. The plan the simulator predicts cheapest
// among an exact model's (residency_model.h: a mixed-integer program over which objects are fast
// at each boundary, solved by COIN-OR CBC within a time limit, its moves in then handed out as
// early as the budget allows), its own heuristics (Belady's rule with prefetch: at each boundary
// the objects used within a lookahead moved in, nearest use first, room made by moving out those
// used furthest away, or clean ones first) and every other whole-object policy's plan, all weighed
// as if every move copied. The exact model leaves out time, so its optimum is a lower bound on
// every whole-object plan's prediction (Plan::bound_extra_ns), not a plan that reaches it.
#include "policies/policy_kit.h"

#include <algorithm>
#include <limits>
#include <map>
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
// where they began it (moves after the last layer restore them).
Plan next_use_plan(const PlanInputs& in, std::uint32_t horizon, bool clean_first) {
  Plan plan;
  plan.policy = "oracle";
  plan.interval_layers = horizon;
  const std::uint32_t L = in.layers;
  constexpr std::uint64_t kNever = std::numeric_limits<std::uint64_t>::max();
  const std::uint64_t room = plannable_room(in);
  auto next_use = [&](const PlanObject& o, std::uint32_t t) -> std::uint64_t {
    auto it = std::lower_bound(o.uses.begin(), o.uses.end(), t);
    if (it != o.uses.end()) return *it;
    if (o.persistent && !o.uses.empty()) return std::uint64_t{L} + o.uses.front();  // the next step's
    return kNever;
  };
  const std::size_t n = in.objects.size();
  std::vector<char> alive(n, 0), fast(n, 0);
  std::vector<char> clean(n, 0);  // fast, moved in and unwritten since: its slow copy is current
  std::uint64_t fast_bytes = 0;
  std::multimap<std::uint32_t, std::size_t> births, deaths;
  for (std::size_t i = 0; i < n; ++i) {
    const PlanObject& o = in.objects[i];
    if (o.persistent) {
      alive[i] = 1;
    } else {
      births.emplace(o.born, i);
      deaths.emplace(o.freed, i);
    }
  }
  // The start: persistent objects by first use, while they fit.
  {
    std::vector<std::size_t> persistent;
    for (std::size_t i = 0; i < n; ++i)
      if (in.objects[i].persistent) persistent.push_back(i);
    std::sort(persistent.begin(), persistent.end(), [&](std::size_t a, std::size_t b) {
      return std::tuple(next_use(in.objects[a], 0), a) < std::tuple(next_use(in.objects[b], 0), b);
    });
    for (std::size_t i : persistent) {
      const PlanObject& o = in.objects[i];
      const bool fits = fast_bytes + o.bytes <= room && next_use(o, 0) < horizon;
      plan.start[o.key] = fits ? in.fast : in.slow;
      if (fits) {
        fast[i] = 1;
        fast_bytes += o.bytes;
      }
    }
  }
  std::vector<PlannedMove> moves;
  moves.reserve(4 * n);
  std::vector<std::size_t> move_owner;
  auto add_move = [&](std::size_t i, TierIndex to, std::uint32_t t, std::uint64_t needed) {
    PlannedMove m;
    m.key = in.objects[i].key;
    m.to = to;
    m.bytes = in.objects[i].bytes;
    m.after_layer = t == 0 ? kStepStart : t - 1;
    m.needed_by = static_cast<std::uint32_t>(std::min<std::uint64_t>(needed, 2ULL * L));
    m.useful_until = to == in.fast ? m.needed_by : kStepStart;
    moves.push_back(m);
    move_owner.push_back(i);
  };
  // Makes `bytes` of room at boundary t for an object next used at `use`, moving out the fast
  // objects used furthest away (all later than `use`). False, changing nothing, if it cannot.
  auto make_room = [&](std::uint64_t bytes, std::uint64_t use, std::uint32_t t) {
    if (fast_bytes + bytes <= room) return true;
    std::vector<std::tuple<int, std::uint64_t, std::size_t>> victims;  // (clean first?, next use, object)
    for (std::size_t j = 0; j < n; ++j) {
      if (!alive[j] || !fast[j]) continue;
      const std::uint64_t u = next_use(in.objects[j], t);
      // One with no use left that dies within two layers frees its room soon: moving it out
      // would only spend slow-tier bandwidth on bytes nobody reads.
      if (u == kNever && !in.objects[j].persistent && in.objects[j].freed <= t + 2) continue;
      // clean_first: an object whose slow copy is current goes out for free, so all of those
      // (furthest use first) go before any that would have to be written.
      if (u > use) victims.emplace_back(clean_first && clean[j] ? 1 : 0, u, j);
    }
    std::sort(victims.rbegin(), victims.rend());
    std::uint64_t freed = 0;
    std::size_t count = 0;
    while (fast_bytes - freed + bytes > room && count < victims.size())
      freed += in.objects[std::get<2>(victims[count++])].bytes;
    if (fast_bytes - freed + bytes > room) return false;
    for (std::size_t v = 0; v < count; ++v) {
      const std::size_t j = std::get<2>(victims[v]);
      fast[j] = clean[j] = 0;
      fast_bytes -= in.objects[j].bytes;
      add_move(j, in.slow, t, t);
    }
    return true;
  };
  for (std::uint32_t t = 0; t < L; ++t) {
    if (t > 0) {  // what layer t - 1 wrote is dirty now
      for (std::size_t i = 0; i < n; ++i) {
        const auto& w = in.objects[i].writes;
        if (clean[i] && std::binary_search(w.begin(), w.end(), t - 1)) clean[i] = 0;
      }
    }
    for (auto [it, end] = deaths.equal_range(t); it != end; ++it) {
      const std::size_t i = it->second;
      if (fast[i]) fast_bytes -= in.objects[i].bytes;
      alive[i] = fast[i] = clean[i] = 0;
    }
    for (auto [it, end] = births.equal_range(t); it != end; ++it) {
      const std::size_t i = it->second;
      const PlanObject& o = in.objects[i];
      alive[i] = 1;
      const std::uint64_t use = next_use(o, t);
      const bool to_fast = use < std::uint64_t{t} + horizon && make_room(o.bytes, use, t);
      plan.birth[o.key] = to_fast ? in.fast : in.slow;
      if (to_fast) {
        fast[i] = 1;
        fast_bytes += o.bytes;
      }
    }
    // Prefetch: slow objects used within the horizon, nearest use first.
    std::vector<std::pair<std::uint64_t, std::size_t>> wanted;
    for (std::size_t i = 0; i < n; ++i) {
      if (!alive[i] || fast[i]) continue;
      const std::uint64_t use = next_use(in.objects[i], t);
      if (use < std::uint64_t{t} + horizon) wanted.emplace_back(use, i);
    }
    std::sort(wanted.begin(), wanted.end());
    for (const auto& [use, i] : wanted) {
      if (!make_room(in.objects[i].bytes, use, t)) break;
      fast[i] = 1;
      clean[i] = in.clean_moves_out_free ? 1 : 0;
      fast_bytes += in.objects[i].bytes;
      add_move(i, in.fast, t, use);
    }
  }
  // After the last layer: persistent objects back where the step starts them (outs, then ins).
  for (int pass = 0; pass < 2; ++pass) {
    for (std::size_t i = 0; i < n; ++i) {
      const PlanObject& o = in.objects[i];
      if (!o.persistent) continue;
      const bool want_fast = plan.start[o.key] == in.fast;
      if (want_fast == static_cast<bool>(fast[i]) || want_fast != (pass == 1)) continue;
      fast[i] = want_fast ? 1 : 0;
      add_move(i, want_fast ? in.fast : in.slow, L, std::uint64_t{L} + next_use(o, 0) % std::max(1U, L));
    }
  }
  // A move in helps until the object's next move out (or its death, or the step's end).
  std::vector<std::uint32_t> stay_end(n, kStepStart);
  for (std::size_t m = moves.size(); m-- > 0;) {
    const std::size_t i = move_owner[m];
    PlannedMove& mv = moves[m];
    if (mv.to == in.slow) {
      stay_end[i] = mv.after_layer == kStepStart ? 0 : mv.after_layer;
      continue;
    }
    if (mv.needed_by >= L) continue;
    const PlanObject& o = in.objects[i];
    const std::uint32_t until =
        std::min<std::uint32_t>(stay_end[i] == kStepStart ? L - 1 : stay_end[i],
                                o.persistent ? L - 1 : (o.freed > 0 ? o.freed - 1 : 0));
    auto last = std::upper_bound(o.uses.begin(), o.uses.end(), until);
    mv.useful_until = last != o.uses.begin() && *(last - 1) >= mv.needed_by ? *(last - 1) : mv.needed_by;
    stay_end[i] = kStepStart;
  }
  sort_in_mover_order(moves, in.fast);
  plan.moves = std::move(moves);
  return plan;
}

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

// The exact model's residency moves each object in at the boundary of the use that needs it (the
// model has no time in it); a mover needs the layers before to copy it. Each move in is handed out
// up to `lead` boundaries earlier where the budget has room at every boundary it then holds the
// object, earliest moves first. A move reaching back to the object's previous stay joins it (no
// move out, no move in); one reaching its birth makes it born fast.
Residency lead_moves_in(const PlanInputs& in, Residency r, std::uint32_t lead) {
  const std::uint32_t L = in.layers;
  if (L == 0 || lead == 0) return r;
  const std::uint64_t room = plannable_room(in);
  std::vector<std::uint64_t> held(L, 0);
  struct In {
    std::uint32_t b;
    std::size_t i;
  };
  std::vector<In> ins;
  for (std::size_t i = 0; i < in.objects.size(); ++i) {
    const PlanObject& o = in.objects[i];
    const auto [first, end] = residency_window(in, o);
    for (std::uint32_t b = first; b < end; ++b) {
      if (r[i][b]) held[b] += o.bytes;
      const bool has_prev = o.persistent || b > first;
      if (has_prev && r[i][b] && !r[i][b == 0 ? L - 1 : b - 1]) ins.push_back({b, i});
    }
  }
  std::stable_sort(ins.begin(), ins.end(), [](const In& a, const In& b) { return a.b < b.b; });
  for (const In& m : ins) {
    const PlanObject& o = in.objects[m.i];
    const std::uint32_t first = residency_window(in, o).first;
    std::uint32_t b = m.b;
    for (std::uint32_t s = 0; s < lead; ++s) {
      if (!o.persistent && b == first) break;  // born fast now
      const std::uint32_t p = b == 0 ? L - 1 : b - 1;
      if (r[m.i][p]) break;  // joined its previous stay
      if (held[p] + o.bytes > room) break;
      r[m.i][p] = 1;
      held[p] += o.bytes;
      b = p;
    }
  }
  return r;
}

// The exact model's plans: its residency with moves in led by 0, 1, 2, 3, 5, 8, ... boundaries, the
// one the simulator predicts cheapest.
Plan exact_residency_plan(const PlanInputs& in, const ResidencySolution& sol) {
  std::vector<std::uint32_t> leads{0};
  for (std::uint32_t h = 1; h < in.layers; h = h * 3 / 2 + 1) leads.push_back(h);
  return cheapest_of(in, leads.size(), 0, [&](std::size_t k) {
    Plan plan = from_residency(in, "oracle", lead_moves_in(in, sol.fast, leads[k]), true);
    plan.interval_layers = leads[k];
    return plan;
  });
}

}  // namespace

// The oracle: with full knowledge of the step, the plan the simulator predicts cheapest among
// the exact model's (residency_model.h, solved within PlanInputs::oracle_time_limit_s), its own
// heuristics (Belady's rule with prefetch over every lookahead, evicting by next use or clean
// objects first) and every other policy's plan (first-touch, reactive, autoswap, sentinel).
// Plan::variant says which one it is; Plan::bound_extra_ns is the exact model's bound.
Plan oracle(const PlanInputs& in) {
  std::vector<std::pair<std::string, Plan>> candidates;
  const ResidencySolution exact = solve_residency(in, in.oracle_time_limit_s);
  if (exact.solved) {
    candidates.emplace_back(fmt::format("exact model's residency ({})",
                                        exact.optimal ? "optimal" : "the best within the time limit"),
                            exact_residency_plan(in, exact));
  }
  candidates.emplace_back("Belady with prefetch", belady_oracle(in));
  candidates.emplace_back("first-touch's plan", first_touch(in));
  candidates.emplace_back("reactive's plan", reactive(in));
  candidates.emplace_back("autoswap's plan", autoswap(in));
  if (auto s = sentinel(in)) candidates.emplace_back("sentinel's plan", std::move(s).value());
  // The variants are weighed as if every move copied: a move of dead bytes is free by the
  // simulator's account, but a plan of many moves loses to moves that fail for room the training
  // thread takes first, which the simulator does not see (measured: docs/RESULTS.md, "Moves of
  // dead bytes"). The one chosen is then played with its dead moves marked.
  PlanInputs weigh = in;
  weigh.dead_moves_free = false;
  Plan best;
  bool have = false;
  for (auto& [variant, plan] : candidates) {
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
