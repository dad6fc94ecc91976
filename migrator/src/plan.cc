#include "tensortier/migrator/plan.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>

#include "tensortier/allocator/offset_planner.h"
#include "tensortier/migrator/residency_model.h"

namespace tensortier::migrator {
namespace {

// Objects in the order an allocator would place them: persistent ones first (key order), then
// by birth boundary (key order within one).
std::vector<std::size_t> birth_order(const PlanInputs& in) {
  std::vector<std::size_t> order(in.objects.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const PlanObject& x = in.objects[a];
    const PlanObject& y = in.objects[b];
    return std::tuple(!x.persistent, x.born, x.key) < std::tuple(!y.persistent, y.born, y.key);
  });
  return order;
}

void place(Plan& plan, const PlanObject& o, TierIndex tier) {
  (o.persistent ? plan.start : plan.birth)[o.key] = tier;
}

Plan everything_on(const PlanInputs& in, std::string policy, TierIndex tier) {
  Plan plan;
  plan.policy = std::move(policy);
  for (const PlanObject& o : in.objects) place(plan, o, tier);
  return plan;
}

// first-touch and interleave: births in allocation order; `decide(bytes, fits)` says whether an
// object goes fast, told whether the budget has room for it at that moment (deaths at a boundary
// come before its births); no moves.
template <typename Decide>
Plan by_birth(const PlanInputs& in, std::string policy, Decide decide) {
  Plan plan;
  plan.policy = std::move(policy);
  const std::uint64_t room =
      in.fast_budget_bytes > in.small_reserve_bytes ? in.fast_budget_bytes - in.small_reserve_bytes : 0;
  std::multimap<std::uint32_t, std::uint64_t> deaths;  // boundary -> fast bytes freed there
  std::uint64_t fast = 0;
  for (std::size_t i : birth_order(in)) {
    const PlanObject& o = in.objects[i];
    const std::uint32_t t = o.persistent ? 0 : o.born;
    while (!deaths.empty() && deaths.begin()->first <= t) {
      fast -= deaths.begin()->second;
      deaths.erase(deaths.begin());
    }
    const bool to_fast = decide(o.bytes, fast + o.bytes <= room);
    place(plan, o, to_fast ? in.fast : in.slow);
    if (to_fast) {
      fast += o.bytes;
      if (!o.persistent) deaths.emplace(o.freed, o.bytes);
    }
  }
  return plan;
}

Plan first_touch(const PlanInputs& in) {
  return by_birth(in, "first-touch", [](std::uint64_t, bool fits) { return fits; });
}

Plan interleave(const PlanInputs& in) {
  const std::uint64_t room =
      in.fast_budget_bytes > in.small_reserve_bytes ? in.fast_budget_bytes - in.small_reserve_bytes : 0;
  const double ratio = in.peak_bytes == 0
                           ? 1.0
                           : std::min(1.0, static_cast<double>(room) / static_cast<double>(in.peak_bytes));
  double fast_assigned = 0, assigned = 0;
  return by_birth(in, "interleave", [&](std::uint64_t bytes, bool fits) {
    const double b = static_cast<double>(bytes);
    assigned += b;
    const bool fast = fits && fast_assigned + b <= ratio * assigned;
    if (fast) fast_assigned += b;
    return fast;
  });
}

// Of the plans make(0) .. make(count - 1), the valid one the simulator predicts cheapest (the
// first of equals); where none is valid, make(fallback), its predictions filled in all the same.
template <typename Make>
Plan cheapest_of(const PlanInputs& in, std::size_t count, std::size_t fallback, Make make) {
  Plan best;
  bool have = false;
  for (std::size_t i = 0; i < count; ++i) {
    Plan plan = make(i);
    if (!simulate(plan, in).empty()) continue;
    if (!have || plan.predicted_extra_ns < best.predicted_extra_ns) {
      best = std::move(plan);
      have = true;
    }
  }
  if (!have) {
    best = make(fallback);
    (void)simulate(best, in);
  }
  return best;
}

}  // namespace

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

namespace {

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
  const std::uint64_t room =
      in.fast_budget_bytes > in.small_reserve_bytes ? in.fast_budget_bytes - in.small_reserve_bytes : 0;
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
  // By boundary (the start's own first), outs first at each: the order the mover takes them.
  std::stable_sort(moves.begin(), moves.end(), [&](const PlannedMove& a, const PlannedMove& b) {
    const std::uint64_t x = a.after_layer == kStepStart ? 0 : std::uint64_t{a.after_layer} + 1;
    const std::uint64_t y = b.after_layer == kStepStart ? 0 : std::uint64_t{b.after_layer} + 1;
    return std::tuple(x, a.to == in.fast) < std::tuple(y, b.to == in.fast);
  });
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

// Residency (residency_model.h): per object, whether it is on the fast tier at each boundary b in
// [0, layers) of its life (the state the layer at b finds, after the moves at b). Persistent
// objects' boundaries are cyclic: boundary `layers` is the next step's boundary 0. from_residency() turns
// residency into births, starts and moves: a change at boundary b is a move handed to the mover after layer b
// - 1 (a persistent object's change at boundary 0: after the last layer, for the next step); a move in is
// needed by the next use at or after b, and (with `know_uses`) useful until the last use of its stay in fast
// memory.
Plan from_residency(const PlanInputs& in, std::string policy, const Residency& fast, bool know_uses) {
  Plan plan;
  plan.policy = std::move(policy);
  const std::uint32_t L = in.layers;
  for (std::size_t i = 0; i < in.objects.size(); ++i) {
    const PlanObject& o = in.objects[i];
    const auto window = residency_window(in, o);  // named, not bound: next_use captures `end`
    const std::uint32_t first = window.first, end = window.second;
    if (first >= end) {  // born and freed at one boundary, or born after the last layer
      place(plan, o, in.slow);
      continue;
    }
    place(plan, o, fast[i][first] ? in.fast : in.slow);
    auto next_use = [&](std::uint32_t b) -> std::uint32_t {
      auto it = std::lower_bound(o.uses.begin(), o.uses.end(), b);
      if (it != o.uses.end()) return *it;
      return o.persistent && !o.uses.empty() ? L + o.uses.front() : std::max(b, end);
    };
    for (std::uint32_t b = o.persistent ? 0 : first + 1; b < end; ++b) {
      const char before = fast[i][b == 0 ? L - 1 : b - 1];
      if (before == fast[i][b]) continue;
      PlannedMove m;
      m.key = o.key;
      m.bytes = o.bytes;
      m.after_layer = b == 0 ? L - 1 : b - 1;
      if (fast[i][b]) {
        m.to = in.fast;
        const std::uint32_t use = next_use(b);
        m.needed_by = b == 0 ? L + use : use;
        m.useful_until = kStepStart;
        if (know_uses && b != 0) {
          std::uint32_t stay = b;  // the fast run from b, within the step
          while (stay + 1 < end && fast[i][stay + 1]) ++stay;
          auto past = std::upper_bound(o.uses.begin(), o.uses.end(), stay);
          m.useful_until = past != o.uses.begin() && *(past - 1) >= use ? *(past - 1) : use;
        } else if (know_uses) {
          m.useful_until = m.needed_by;
        }
      } else {
        m.to = in.slow;
        m.needed_by = b == 0 ? L : b;
        m.useful_until = kStepStart;  // a move out makes room for moves in: never dropped as late
      }
      plan.moves.push_back(m);
    }
    if (o.persistent) plan.start[o.key] = fast[i][0] ? in.fast : in.slow;
  }
  // In the order the mover takes them: by boundary (the start's own moves first), outs first.
  std::stable_sort(plan.moves.begin(), plan.moves.end(), [&](const PlannedMove& a, const PlannedMove& b) {
    const std::uint64_t x = a.after_layer == kStepStart ? 0 : std::uint64_t{a.after_layer} + 1;
    const std::uint64_t y = b.after_layer == kStepStart ? 0 : std::uint64_t{b.after_layer} + 1;
    return std::tuple(x, a.to == in.fast) < std::tuple(y, b.to == in.fast);
  });
  return plan;
}

// Reactive (no knowledge of the future), as Linux's NUMA-balancing tiering and TPP work at object
// granularity: each object's access score decays by `decay` per layer and gains 1 per layer that
// uses it; a new object is born fast while there is room, else slow; after a layer, each slow
// object it used whose score reached `threshold` is promoted, making room by demoting the fast
// objects used least recently (not those the layer just used); when there is no such room it
// stays slow. The policy is played online over `kWarmSteps` repeats of the step (its state
// carried from step to step) and the last repeat is the plan: what it does in the steady state.
Plan reactive_with(const PlanInputs& in, double decay, double threshold) {
  constexpr int kWarmSteps = 4;
  const std::uint32_t L = in.layers;
  const std::size_t n = in.objects.size();
  const std::uint64_t room =
      in.fast_budget_bytes > in.small_reserve_bytes ? in.fast_budget_bytes - in.small_reserve_bytes : 0;
  std::vector<std::vector<std::size_t>> users(L), births(L + 1), deaths(L + 1);
  for (std::size_t i = 0; i < n; ++i) {
    const PlanObject& o = in.objects[i];
    for (std::uint32_t l : o.uses) {
      if (l < L) users[l].push_back(i);
    }
    if (!o.persistent && o.born < L && o.freed > o.born) {
      births[o.born].push_back(i);
      deaths[std::min(o.freed, L)].push_back(i);
    }
  }
  std::vector<double> score(n, 0);
  std::vector<std::int64_t> last_access(n, -1), score_at(n, 0);  // in layers since the run began
  std::vector<char> alive(n, 0), fast(n, 0);
  std::uint64_t fast_bytes = 0;
  // Persistent objects start as first touch would leave them: fast while they fit, in key order.
  for (std::size_t i = 0; i < n; ++i) {
    const PlanObject& o = in.objects[i];
    if (!o.persistent) continue;
    alive[i] = 1;
    if (fast_bytes + o.bytes <= room) {
      fast[i] = 1;
      fast_bytes += o.bytes;
    }
  }
  Residency residency(n, std::vector<char>(L, 0));
  std::int64_t now = 0;  // layers run
  for (int step = 0; step < kWarmSteps; ++step) {
    const bool record = step + 1 == kWarmSteps;
    for (std::uint32_t b = 0; b < L; ++b, ++now) {
      for (std::size_t i : deaths[b]) {
        if (fast[i]) fast_bytes -= in.objects[i].bytes;
        alive[i] = fast[i] = 0;
      }
      // Born fast while there is room; an object's segments (in_segments lists them one after
      // the other) all on one tier, as the runtime places an object whole.
      for (std::size_t n_born = births[b].size(), at = 0; at < n_born;) {
        std::size_t end = at + 1;
        std::uint64_t object_bytes = in.objects[births[b][at]].bytes;
        const ObjectKey whole = whole_key(in.objects[births[b][at]].key);
        while (end < n_born && whole_key(in.objects[births[b][end]].key) == whole)
          object_bytes += in.objects[births[b][end++]].bytes;
        const bool fits = fast_bytes + object_bytes <= room;
        for (; at < end; ++at) {
          const std::size_t i = births[b][at];
          alive[i] = 1;
          score[i] = 0;
          score_at[i] = now;
          last_access[i] = now;
          fast[i] = fits ? 1 : 0;
        }
        if (fits) fast_bytes += object_bytes;
      }
      if (record) {
        for (std::size_t i = 0; i < n; ++i) residency[i][b] = fast[i];
      }
      // Layer b runs; then the policy reacts to what it saw.
      for (std::size_t i : users[b]) {
        score[i] = score[i] * std::pow(decay, static_cast<double>(now - score_at[i])) + 1.0;
        score_at[i] = now;
        last_access[i] = now;
      }
      // The least recently used fast objects, oldest first, listed once per layer where some
      // promotion needs room (those the layer used are not among them; one demoted leaves it).
      std::vector<std::pair<std::int64_t, std::size_t>> lru;
      std::size_t lru_next = 0;
      bool lru_listed = false;
      for (std::size_t i : users[b]) {
        const PlanObject& o = in.objects[i];
        if (!alive[i] || fast[i] || score[i] < threshold || o.bytes > room) continue;
        if (fast_bytes + o.bytes > room) {
          if (!lru_listed) {
            for (std::size_t j = 0; j < n; ++j) {
              if (alive[j] && fast[j] && last_access[j] < now) lru.emplace_back(last_access[j], j);
            }
            std::sort(lru.begin(), lru.end());
            lru_listed = true;
          }
          std::uint64_t freed = 0;
          std::size_t count = lru_next;
          while (fast_bytes - freed + o.bytes > room && count < lru.size())
            freed += in.objects[lru[count++].second].bytes;
          if (fast_bytes - freed + o.bytes > room) continue;
          for (std::size_t v = lru_next; v < count; ++v) {
            fast[lru[v].second] = 0;
            fast_bytes -= in.objects[lru[v].second].bytes;
          }
          lru_next = count;
        }
        fast[i] = 1;
        fast_bytes += o.bytes;
      }
    }
    for (std::size_t i : deaths[L]) {
      if (fast[i]) fast_bytes -= in.objects[i].bytes;
      alive[i] = fast[i] = 0;
    }
  }
  // The state the next step starts in: what the policy did after the last layer.
  for (std::size_t i = 0; i < n; ++i) {
    if (in.objects[i].persistent) residency[i][0] = fast[i];
  }
  // A persistent object's state after the last layer is boundary 0 of the next step; the state the
  // recorded step began in was the previous step's: in a steady state they agree, else the plan
  // starts from the new one (residency[0] above) and boundary 0's state holds for layer 0.
  Plan plan = from_residency(in, "reactive", residency, false);
  plan.interval_layers = 0;
  return plan;
}

Plan reactive(const PlanInputs& in) {
  // Tuned as the other policies are: the decay and threshold the simulator predicts cheapest
  // (where none is valid: decay 0.8, threshold 1).
  constexpr double kDecays[] = {0.5, 0.8, 0.95};
  constexpr double kThresholds[] = {1.0, 1.5, 2.5};
  constexpr std::size_t kPairs = std::size(kDecays) * std::size(kThresholds);
  return cheapest_of(in, kPairs, std::size(kThresholds), [&](std::size_t i) {
    return reactive_with(in, kDecays[i / std::size(kThresholds)], kThresholds[i % std::size(kThresholds)]);
  });
}

// Reactive at 2 MiB page granularity: the same policy over each object's segments.
Plan reactive_2m(const PlanInputs& in) {
  Plan plan = reactive(in_segments(in));
  plan.policy = "reactive-2m";
  plan.segment_bytes = kSegmentBytes;
  return plan;
}

// AutoSwap (Zhang et al., arXiv 1903.06631) over the two tiers: with every object fast, find the
// boundary of the step's peak; the candidates are objects of 1 MiB or more alive there whose
// absence (the gap between the use before and the use after, across the step's end for
// persistent objects) spans it; rank them by a priority score and swap them out after the use
// before and back in before the use after (early enough for the move's time at the measured
// bandwidth, counted back over the layers' times), taking candidates until the peak fits the
// budget. Where the budget still cannot hold what is left fast, an object's fast stretches are
// admitted in birth order while they fit, the rest stays slow (on a GPU AutoSwap would fail
// there; here slow memory takes it).
enum class SwapScore { kAbsenceTime, kAbsenceArea, kVote };

Plan autoswap_with(const PlanInputs& in, SwapScore score_kind) {
  constexpr std::uint64_t kMinCandidateBytes = 1 << 20;
  const std::uint32_t L = in.layers;
  const std::size_t n = in.objects.size();
  const std::uint64_t room =
      in.fast_budget_bytes > in.small_reserve_bytes ? in.fast_budget_bytes - in.small_reserve_bytes : 0;
  // Time at boundary b of an unrolled timeline of three steps, b in [-L, 2L].
  std::vector<double> at_ns(3 * static_cast<std::size_t>(L) + 1, 0);
  for (std::size_t b = 0; b + 1 < at_ns.size(); ++b)
    at_ns[b + 1] = at_ns[b] + static_cast<double>(in.layer_ns[b % L]);
  auto time_at = [&](std::int64_t b) { return at_ns[static_cast<std::size_t>(b + L)] - at_ns[L]; };
  auto alive_at = [&](const PlanObject& o, std::uint32_t b) {
    return o.persistent || (o.born <= b && b < o.freed);
  };
  // Everything fast: the peak boundary.
  std::vector<std::uint64_t> live(L, 0);
  for (const PlanObject& o : in.objects) {
    for (std::uint32_t b = 0; b < L; ++b) {
      if (alive_at(o, b)) live[b] += o.bytes;
    }
  }
  const std::uint32_t peak =
      static_cast<std::uint32_t>(std::max_element(live.begin(), live.end()) - live.begin());
  // Candidates: the absence around the peak, [out, in) in boundaries of an unrolled timeline
  // (persistent absences may start in the previous step or end in the next).
  struct Candidate {
    std::size_t object = 0;
    std::int64_t out = 0, in = 0;  // fast again from boundary `in`
    double absence_ns = 0;
    double score = 0;
  };
  std::vector<Candidate> candidates;
  for (std::size_t i = 0; i < n; ++i) {
    const PlanObject& o = in.objects[i];
    if (o.bytes < kMinCandidateBytes || !alive_at(o, peak) || o.uses.empty()) continue;
    auto after = std::lower_bound(o.uses.begin(), o.uses.end(), peak);  // first use at or after the peak
    std::int64_t before_use = 0, after_use = 0;
    if (after != o.uses.begin()) {
      before_use = *(after - 1);
    } else if (o.persistent) {
      before_use = static_cast<std::int64_t>(o.uses.back()) - L;
    } else {
      continue;  // not used before the peak: nothing to swap out
    }
    if (after != o.uses.end()) {
      after_use = *after;
    } else if (o.persistent) {
      after_use = static_cast<std::int64_t>(o.uses.front()) + L;
    } else {
      after_use = o.freed;  // no use left: out until it dies, never back in
    }
    if (after_use <= peak) continue;  // used by the layer at the peak
    const bool comes_back = o.persistent || after != o.uses.end();
    Candidate c;
    c.object = i;
    c.out = before_use + 1;
    c.in = after_use;
    if (comes_back) {  // back in early enough: the move's time counted back over the layers before the use
      const double move_ns = static_cast<double>(o.bytes) / in.move_in_gbps;
      while (c.in > c.out && time_at(after_use) - time_at(c.in) < move_ns) --c.in;
    }
    if (c.in <= peak || c.out > peak) continue;  // the swap would not free the peak
    c.absence_ns = time_at(after_use) - time_at(before_use + 1);
    candidates.push_back(c);
  }
  // Priority: absence time; absence time x size; or their vote (the sum of both ranks).
  std::vector<std::size_t> by_time(candidates.size()), by_area(candidates.size());
  for (std::size_t c = 0; c < candidates.size(); ++c) by_time[c] = by_area[c] = c;
  std::sort(by_time.begin(), by_time.end(), [&](std::size_t a, std::size_t b) {
    return candidates[a].absence_ns > candidates[b].absence_ns;
  });
  auto area = [&](const Candidate& c) {
    return c.absence_ns * static_cast<double>(in.objects[c.object].bytes);
  };
  std::sort(by_area.begin(), by_area.end(),
            [&](std::size_t a, std::size_t b) { return area(candidates[a]) > area(candidates[b]); });
  for (std::size_t r = 0; r < candidates.size(); ++r) {
    switch (score_kind) {
      case SwapScore::kAbsenceTime:
        candidates[by_time[r]].score = static_cast<double>(r);
        break;
      case SwapScore::kAbsenceArea:
        candidates[by_area[r]].score = static_cast<double>(r);
        break;
      case SwapScore::kVote:
        candidates[by_time[r]].score += static_cast<double>(r);
        candidates[by_area[r]].score += static_cast<double>(r);
        break;
    }
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return a.score < b.score; });
  // Wanted residency: fast through each object's life but for the absences chosen.
  Residency want(n, std::vector<char>(L, 0));
  for (std::size_t i = 0; i < n; ++i) {
    for (std::uint32_t b = 0; b < L; ++b) want[i][b] = alive_at(in.objects[i], b) ? 1 : 0;
  }
  std::uint64_t peak_fast = live[peak];
  for (const Candidate& c : candidates) {
    if (peak_fast <= room) break;
    for (std::int64_t b = c.out; b < c.in; ++b) want[c.object][static_cast<std::size_t>((b % L + L) % L)] = 0;
    // Other boundaries may now be the peak: keep taking candidates while any is over.
    std::fill(live.begin(), live.end(), 0);
    for (std::size_t i = 0; i < n; ++i) {
      for (std::uint32_t b = 0; b < L; ++b) live[b] += want[i][b] ? in.objects[i].bytes : 0;
    }
    peak_fast = *std::max_element(live.begin(), live.end());
  }
  // Admission within the budget: persistent objects first, then by birth; a fast stretch of an
  // object stays fast only if the budget holds it at every boundary of the stretch.
  std::vector<std::uint64_t> used(L, 0);
  Residency fast(n, std::vector<char>(L, 0));
  for (std::size_t i : birth_order(in)) {
    const PlanObject& o = in.objects[i];
    std::uint32_t b = 0;
    while (b < L) {
      if (!want[i][b]) {
        ++b;
        continue;
      }
      std::uint32_t e = b;
      while (e < L && want[i][e]) ++e;
      bool fits = true;
      for (std::uint32_t k = b; k < e && fits; ++k) fits = used[k] + o.bytes <= room;
      if (fits) {
        for (std::uint32_t k = b; k < e; ++k) {
          used[k] += o.bytes;
          fast[i][k] = 1;
        }
      }
      b = e;
    }
  }
  Plan plan = from_residency(in, "autoswap", fast, true);
  return plan;
}

Plan autoswap(const PlanInputs& in) {
  constexpr SwapScore kScores[] = {SwapScore::kVote, SwapScore::kAbsenceTime, SwapScore::kAbsenceArea};
  return cheapest_of(in, std::size(kScores), 0, [&](std::size_t i) { return autoswap_with(in, kScores[i]); });
}

// The exact model's residency moves each object in at the boundary of the use that needs it (the
// model has no time in it); a mover needs the layers before to copy it. Each move in is handed out
// up to `lead` boundaries earlier where the budget has room at every boundary it then holds the
// object, earliest moves first. A move reaching back to the object's previous stay joins it (no
// move out, no move in); one reaching its birth makes it born fast.
Residency lead_moves_in(const PlanInputs& in, Residency r, std::uint32_t lead) {
  const std::uint32_t L = in.layers;
  if (L == 0 || lead == 0) return r;
  const std::uint64_t room =
      in.fast_budget_bytes > in.small_reserve_bytes ? in.fast_budget_bytes - in.small_reserve_bytes : 0;
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

}  // namespace

const std::vector<std::string>& policy_names() {
  static const std::vector<std::string> names{"fast-only",  "slow-only", "first-touch",
                                              "interleave", "reactive",  "reactive-2m",
                                              "autoswap",   "sentinel",  "oracle"};
  return names;
}

std::string known_policies() {
  std::string known;
  for (const std::string& name : policy_names()) known += (known.empty() ? "" : ", ") + name;
  return known;
}

Result<PlanInputs> inputs_from_profile(const profiler::StepProfile& profile, TierIndex fast, TierIndex slow,
                                       std::uint64_t fast_budget_bytes) {
  if (profile.layers.empty()) return invalid_argument("plan: the step profile has no layers");
  if (fast == slow)
    return invalid_argument(fmt::format("plan: the fast and the slow tier are both tier {}", fast));
  if (fast_budget_bytes == 0) return invalid_argument("plan: a fast budget of 0 bytes");
  PlanInputs in;
  in.layers = static_cast<std::uint32_t>(profile.layers.size());
  in.fast = fast;
  in.slow = slow;
  in.fast_budget_bytes = fast_budget_bytes;
  std::unordered_map<ObjectId, std::size_t> index;
  std::map<GroupId, std::vector<std::int64_t>> small_delta;  // group -> live small bytes change per boundary
  for (const profiler::ObjectProfile& o : profile.objects) {
    const std::uint32_t born = o.born_at_layer.value_or(0);
    const std::uint32_t freed = std::min(o.freed_at_layer.value_or(in.layers), in.layers);
    if (o.small || o.reserved_bytes == 0) {
      auto& delta = small_delta[o.group];
      delta.resize(in.layers + 2, 0);
      delta[born] += static_cast<std::int64_t>(o.bytes);
      delta[freed + 1] -= static_cast<std::int64_t>(o.bytes);
      continue;
    }
    PlanObject p;
    p.key = o.key;
    p.bytes = o.reserved_bytes;  // whole pages already
    p.born = born;
    p.freed = freed;
    p.persistent = !o.born_at_layer && !o.freed_at_layer;
    p.short_lived = o.lifetime == profiler::LifetimeClass::kShort;
    p.host_pinned = o.host_pinned;
    index.emplace(o.id, in.objects.size());
    in.objects.push_back(std::move(p));
  }
  for (const auto& [group, delta] : small_delta) {
    std::int64_t live = 0, peak = 0;
    for (std::int64_t d : delta) peak = std::max(peak, live += d);
    in.small_reserve_bytes += round_up(static_cast<std::uint64_t>(peak), kGroupChunkBytes);
  }
  in.layer_ns.resize(in.layers);
  for (std::uint32_t l = 0; l < in.layers; ++l) {
    const profiler::LayerProfile& layer = profile.layers[l];
    const std::uint64_t measured =
        layer.unprofiled_duration_ns != 0 ? layer.unprofiled_duration_ns : layer.duration_ns;
    in.layer_ns[l] = measured > layer.emulated_charge_ns ? measured - layer.emulated_charge_ns : 0;
    for (const auto* ids : {&layer.declared_reads, &layer.declared_writes}) {
      for (ObjectId id : *ids) {
        auto it = index.find(id);
        if (it == index.end()) continue;
        auto& uses = in.objects[it->second].uses;
        if (uses.empty() || uses.back() != l) uses.push_back(l);
        auto& writes = in.objects[it->second].writes;
        if (ids == &layer.declared_writes && (writes.empty() || writes.back() != l)) writes.push_back(l);
      }
    }
    // Overwrites: declared written, not declared read, and every page written with none read
    // first (as the profile saw them). Spans touched by a layer that did not declare them are
    // accessed undeclared.
    for (const profiler::SpanAccessProfile& a : layer.accesses) {
      if (a.is_group) continue;
      auto it = index.find(a.id);
      if (it == index.end()) continue;
      PlanObject& o = in.objects[it->second];
      const bool read = std::ranges::find(layer.declared_reads, a.id) != layer.declared_reads.end();
      const bool written = std::ranges::find(layer.declared_writes, a.id) != layer.declared_writes.end();
      if (!read && !written) {
        o.accessed_undeclared = true;
        continue;
      }
      const std::uint64_t units = a.page_bytes == 0 ? 0 : (o.bytes + a.page_bytes - 1) / a.page_bytes;
      if (written && !read && a.pages_read == 0 && units != 0 && a.pages_written >= units &&
          (o.overwrites.empty() || o.overwrites.back() != l))
        o.overwrites.push_back(l);
    }
    for (const profiler::SpanAccessProfile& a : layer.accesses_before) {
      if (auto it = index.find(a.id); !a.is_group && it != index.end())
        in.objects[it->second].accessed_undeclared = true;
    }
  }
  for (const profiler::SpanAccessProfile& a : profile.accesses_after) {
    if (auto it = index.find(a.id); !a.is_group && it != index.end())
      in.objects[it->second].accessed_undeclared = true;
  }
  std::vector<PlannedBuffer> lives;
  for (const PlanObject& o : in.objects) {
    if (o.freed > o.born || o.persistent) lives.push_back({o.born, std::max(o.freed, o.born + 1), o.bytes});
  }
  in.peak_bytes = max_live_bytes(lives);
  return in;
}

bool bytes_dead_at(const PlanInputs& in, const PlanObject& o, std::uint32_t boundary) {
  if (o.accessed_undeclared) return false;
  auto next = std::ranges::lower_bound(o.uses, boundary);
  // No use left in the step: dead for an object freed in it. Not across the step's end: code
  // between steps (a gradient's norm logged now and then) may read what the profile never saw.
  if (next == o.uses.end()) return !o.persistent && o.freed < in.layers;
  return std::ranges::binary_search(o.overwrites, *next);
}

Result<Plan> make_plan(std::string_view policy, const PlanInputs& in) {
  Plan plan;
  if (policy == "fast-only") {
    plan = everything_on(in, "fast-only", in.fast);
  } else if (policy == "slow-only") {
    plan = everything_on(in, "slow-only", in.slow);
  } else if (policy == "first-touch") {
    plan = first_touch(in);
  } else if (policy == "interleave") {
    plan = interleave(in);
  } else if (policy == "reactive") {
    plan = reactive(in);
  } else if (policy == "reactive-2m") {
    plan = reactive_2m(in);
  } else if (policy == "autoswap") {
    plan = autoswap(in);
  } else if (policy == "oracle") {
    plan = oracle(in);
  } else if (policy == "sentinel") {
    auto s = sentinel(in);
    if (!s) return s.status();
    plan = std::move(s).value();
  } else {
    return invalid_argument(fmt::format("unknown policy '{}' (known: {})", policy, known_policies()));
  }
  plan.fast = in.fast;
  plan.slow = in.slow;
  plan.fast_budget_bytes = in.fast_budget_bytes;
  (void)leave_in_place(plan, in);
  (void)simulate(plan, in);  // predictions; fast-only may pass a budget it was never meant to keep
  return plan;
}

PlanInputs in_segments(const PlanInputs& inputs) {
  PlanInputs out = inputs;
  out.objects.clear();
  out.clean_moves_out_free = false;  // a segment keeps no shadow
  for (const PlanObject& o : inputs.objects) {
    const std::uint64_t segments = segment_count(o.bytes);
    if (segments <= 1 || segments > kMostSegments || (o.key & kPartMask) != 0) {
      out.objects.push_back(o);
      continue;
    }
    for (std::uint32_t k = 0; k < segments; ++k) {
      PlanObject part = o;
      part.key = part_key(o.key, k);
      part.bytes = std::min<std::uint64_t>(kSegmentBytes, o.bytes - std::uint64_t{k} * kSegmentBytes);
      out.objects.push_back(std::move(part));
    }
  }
  return out;
}

namespace {

// simulate() over the inputs the plan is written for (a page-granular plan: in_segments').
std::string simulate_over(Plan& plan, const PlanInputs& in);

// The inputs `plan` is played over: `inputs`, or for a page-granular plan their segments, made
// in `segments`.
const PlanInputs& played_over(const Plan& plan, const PlanInputs& inputs, PlanInputs& segments) {
  if (plan.segment_bytes == 0) return inputs;
  segments = in_segments(inputs);
  return segments;
}

}  // namespace

std::string simulate(Plan& plan, const PlanInputs& inputs) {
  PlanInputs segments;
  return simulate_over(plan, played_over(plan, inputs, segments));
}

namespace {

std::string simulate_over(Plan& plan, const PlanInputs& in) {
  std::unordered_map<ObjectKey, const PlanObject*> by_key;
  for (const PlanObject& o : in.objects) by_key.emplace(o.key, &o);
  std::unordered_map<ObjectKey, TierIndex> tier;  // objects that exist now
  std::uint64_t fast = 0;
  plan.peak_fast_bytes = plan.bytes_in = plan.bytes_out = plan.clean_out_bytes = plan.slow_access_bytes = 0;
  plan.discard_bytes = 0;
  plan.mover_cpu_ns = 0;
  plan.mover_busy_ns = 0;
  plan.room_wait_ns = 0;
  plan.fallback_bytes = 0;
  plan.failed_in_bytes = 0;
  plan.fast_bytes_by_boundary.assign(in.layers + 1, 0);
  plan.small_reserve_bytes = in.small_reserve_bytes;
  std::unordered_map<ObjectKey, bool> clean;  // on the fast tier with its slow pages kept, unwritten since
  if (in.clean_moves_out_free) {
    // A persistent object starts a step clean when the previous step's last move of it was a move
    // in that came after its last write.
    std::unordered_map<ObjectKey, std::uint64_t> last_in;  // key -> boundary of its last move in
    std::unordered_map<ObjectKey, std::uint64_t> last_out;
    for (const PlannedMove& m : plan.moves) {
      const std::uint64_t b = m.after_layer == kStepStart ? 0 : std::uint64_t{m.after_layer} + 1;
      auto& last = m.to == in.fast ? last_in[m.key] : last_out[m.key];
      last = std::max(last, b + 1);  // +1: 0 means none
    }
    for (const PlanObject& o : in.objects) {
      if (!o.persistent) continue;
      auto s = plan.start.find(o.key);
      if (s == plan.start.end() || s->second != in.fast || !last_in.contains(o.key)) continue;
      const std::uint64_t b = last_in[o.key] - 1;
      const bool out_after = last_out.contains(o.key) && last_out[o.key] - 1 > b;
      clean[o.key] = !out_after && (o.writes.empty() || b > o.writes.back());
    }
  }
  std::string problem;
  auto note = [&](std::string p) {
    if (problem.empty()) problem = std::move(p);
  };
  auto set_tier = [&](const PlanObject& o, TierIndex t) {
    auto [it, fresh] = tier.try_emplace(o.key, t);
    if (!fresh && it->second == in.fast) fast -= o.bytes;
    it->second = t;
    if (t == in.fast) fast += o.bytes;
  };
  for (const PlanObject& o : in.objects) {
    if (!o.persistent) continue;
    auto s = plan.start.find(o.key);
    set_tier(o, s != plan.start.end() ? s->second : in.fast);
  }
  std::multimap<std::uint32_t, PlannedMove*> moves;  // boundary -> move
  std::unordered_map<std::uint32_t, bool> has_in;    // boundary -> a move in listed so far
  for (PlannedMove& m : plan.moves) {
    m.predicted_late = false;
    m.discard = false;
    m.predicted_failed = false;
    const std::uint32_t b = m.after_layer == kStepStart ? 0 : m.after_layer + 1;
    moves.emplace(b, &m);
    // The mover takes a boundary's moves in the plan's order: a move out listed after a move in
    // leaves that move in without the room it makes.
    if (m.to == in.fast) {
      has_in[b] = true;
    } else if (has_in[b]) {
      note(fmt::format("after layer {}, a move out of key {:#x} is listed after a move in: outs go first",
                       static_cast<std::int64_t>(m.after_layer), m.key));
    }
  }
  std::multimap<std::uint32_t, const PlanObject*> births, deaths;
  for (const PlanObject& o : in.objects) {
    if (o.persistent) continue;
    births.emplace(o.born, &o);
    deaths.emplace(o.freed, &o);
  }
  std::vector<std::vector<const PlanObject*>> users(in.layers);  // layer -> objects it declares
  for (const PlanObject& o : in.objects) {
    for (std::uint32_t l : o.uses) {
      if (l < in.layers) users[l].push_back(&o);
    }
  }
  // Time, as the executor and an emulated slow tier play it: one mover takes moves in order, from
  // the end of the layer they follow; a move and a layer's slow traffic both hold the slow tier
  // (one timeline, as the runtime charges it). A layer waits for a move of its objects that has
  // begun; one not begun yet leaves the object slow for that layer.
  const double traffic_ns_per_byte = in.slow_traffic_ns_per_byte();
  double clock_ns = 0, mover_free_ns = 0, slow_busy_ns = 0, compute_ns = 0;
  struct Pending {
    double start_ns = 0, end_ns = 0;
    PlannedMove* move = nullptr;
  };
  std::unordered_map<ObjectKey, Pending> pending;  // moves in not yet done, by key
  // Moves out handed out so far, by when they end: the room they leave on the fast tier is there
  // only then (the bookkeeping in `fast` counts every move as done at its hand-out).
  std::vector<std::pair<double, std::uint64_t>> outs;  // (end, bytes)
  auto out_ends_at = [&](double end_ns, std::uint64_t bytes) { outs.emplace_back(end_ns, bytes); };
  std::unordered_set<ObjectKey> refused;  // objects whose move in the allocator would refuse
  auto held_at = [&](double at_ns) {      // fast-tier bytes held at that time
    std::uint64_t held = fast;
    for (const auto& [key, p] : pending) {
      if (p.start_ns > at_ns && tier.contains(key) && tier[key] == in.fast) held -= by_key[key]->bytes;
    }
    for (const auto& [end_ns, bytes] : outs) {
      if (end_ns > at_ns) held += bytes;
    }
    return held;
  };
  for (std::uint32_t t = 0; t <= in.layers; ++t) {
    for (auto [it, end] = deaths.equal_range(t); it != end; ++it) {
      auto found = tier.find(it->second->key);
      if (found == tier.end()) continue;
      if (found->second == in.fast) fast -= it->second->bytes;
      tier.erase(found);
      pending.erase(it->second->key);
    }
    std::vector<const PlanObject*> born_fast;  // this boundary's births on the fast tier
    for (auto [it, end] = births.equal_range(t); it != end; ++it) {
      auto b = plan.birth.find(it->second->key);
      const TierIndex where = b != plan.birth.end() ? b->second : in.fast;
      set_tier(*it->second, where);
      if (where == in.fast) born_fast.push_back(it->second);
    }
    for (int pass = 0; pass < 2; ++pass) {  // outs first, then ins
      for (auto [it, end] = moves.equal_range(t); it != end; ++it) {
        const PlannedMove& m = *it->second;
        if ((m.to == in.fast) != (pass == 1)) continue;
        auto o = by_key.find(m.key);
        if (o == by_key.end() || !tier.contains(m.key)) {
          note(fmt::format("a move of key {:#x} after layer {} finds it not alive", m.key,
                           static_cast<std::int64_t>(m.after_layer)));
          continue;
        }
        if (tier[m.key] == m.to) continue;
        set_tier(*o->second, m.to);
        it->second->discard = in.dead_moves_free && bytes_dead_at(in, *o->second, t);
        const bool free_out = !m.discard && m.to != in.fast && in.clean_moves_out_free && clean[m.key];
        clean[m.key] = m.to == in.fast && !m.discard;  // a discarding move keeps no shadow
        if (free_out) {                                // its slow pages come back: no copy, no slow-tier time
          plan.bytes_out += m.bytes;
          plan.clean_out_bytes += m.bytes;
          pending.erase(m.key);
          out_ends_at(std::max(mover_free_ns, clock_ns), m.bytes);  // in the mover's turn
          continue;
        }
        if (m.discard) {  // dead bytes: no copy, no slow-tier time, no CPU; it waits its turn
          (m.to == in.fast ? plan.bytes_in : plan.bytes_out) += m.bytes;
          plan.discard_bytes += m.bytes;
          const double at_ns = std::max(mover_free_ns, clock_ns);
          if (m.to == in.fast) {
            pending[m.key] = Pending{at_ns, at_ns, it->second};
          } else {
            pending.erase(m.key);
            out_ends_at(at_ns, m.bytes);
          }
          continue;
        }
        plan.mover_cpu_ns += static_cast<double>(m.bytes) * in.mover_cpu_ns_per_byte;
        const double ns =
            static_cast<double>(m.bytes) / (m.to == in.fast ? in.move_in_gbps : in.move_out_gbps);
        const double start_ns = std::max(mover_free_ns, clock_ns);
        const double end_ns = std::max(slow_busy_ns, start_ns) + ns;
        mover_free_ns = slow_busy_ns = end_ns;
        plan.mover_busy_ns += end_ns - start_ns;
        (m.to == in.fast ? plan.bytes_in : plan.bytes_out) += m.bytes;
        if (m.to == in.fast) {
          pending[m.key] = Pending{start_ns, end_ns, it->second};
        } else {
          pending.erase(m.key);
          out_ends_at(end_ns, m.bytes);
        }
      }
    }
    // This boundary's births, as the runtime places them: after the moves just handed out, which
    // take time. Where the fast tier has no room for them until moves out end, they wait for those
    // (ObjectAllocator's room wait, up to in.room_wait_ns) and the layer starts later; where the
    // wait would be longer, they fall back to the slow tier.
    std::erase_if(outs, [&](const auto& o) { return o.first <= clock_ns; });
    if (!born_fast.empty() && in.small_reserve_bytes < in.fast_budget_bytes) {
      const std::uint64_t room = in.fast_budget_bytes - in.small_reserve_bytes;
      if (held_at(clock_ns) > room) {
        std::vector<double> ends;
        ends.reserve(outs.size());
        for (const auto& o : outs) ends.push_back(o.first);
        std::ranges::sort(ends);
        std::optional<double> fits;
        for (double e : ends) {
          if (held_at(e) <= room) {
            fits = e;
            break;
          }
        }
        // No end of a move out makes room: the plan itself is over the budget (noted below).
        if (fits && *fits - clock_ns <= in.room_wait_ns) {
          plan.room_wait_ns += *fits - clock_ns;
          clock_ns = *fits;
        } else if (fits) {
          for (const PlanObject* o : born_fast) {
            set_tier(*o, in.slow);
            plan.fallback_bytes += o->bytes;
          }
        }
      }
      // Moves in not begun yet find the room these births took: in the order the mover takes
      // them, one whose object would not fit at its start is refused by the allocator and its
      // object stays slow (its copy time is still counted: a slight overestimate of the mover's).
      std::vector<std::pair<double, ObjectKey>> waiting;
      for (const auto& [key, p] : pending) {
        if (p.start_ns > clock_ns && p.move != nullptr && tier.contains(key) && tier[key] == in.fast)
          waiting.emplace_back(p.start_ns, key);
      }
      std::ranges::sort(waiting);
      for (const auto& [start_ns, key] : waiting) {
        if (held_at(start_ns) <= room) continue;
        const PlanObject& o = *by_key[key];
        PlannedMove& m = *pending[key].move;
        m.predicted_failed = true;
        refused.insert(key);
        plan.failed_in_bytes += o.bytes;
        plan.bytes_in -= std::min(plan.bytes_in, m.bytes);
        if (m.discard) {
          plan.discard_bytes -= std::min(plan.discard_bytes, m.bytes);
        } else {
          plan.mover_cpu_ns -= static_cast<double>(m.bytes) * in.mover_cpu_ns_per_byte;
        }
        set_tier(o, in.slow);
        pending.erase(key);
      }
    }
    plan.peak_fast_bytes = std::max(plan.peak_fast_bytes, fast);
    plan.fast_bytes_by_boundary[t] = fast;
    if (fast + in.small_reserve_bytes > in.fast_budget_bytes) {
      note(fmt::format(
          "at the boundary before layer {} the fast tier would hold {} bytes (+{} for small objects) "
          "over its budget of {}",
          t, fast, in.small_reserve_bytes, in.fast_budget_bytes));
    }
    if (t == in.layers) break;
    // Layer t: waits for moves of its objects under way, finds the others where they are.
    std::uint64_t slow_bytes = 0;
    for (const PlanObject* o : users[t]) {
      auto found = tier.find(o->key);
      if (found == tier.end()) continue;
      bool slow = found->second != in.fast;
      if (auto p = pending.find(o->key); !slow && p != pending.end()) {
        if (p->second.end_ns > clock_ns && p->second.move != nullptr) p->second.move->predicted_late = true;
        if (p->second.end_ns <= clock_ns) {
          pending.erase(p);
        } else if (p->second.start_ns <= clock_ns) {
          clock_ns = p->second.end_ns;  // under way: the layer waits for it
          pending.erase(p);
        } else {
          slow = true;  // not begun: this layer reads it where it still is
        }
      }
      if (slow) slow_bytes += o->bytes;
    }
    plan.slow_access_bytes += slow_bytes;
    for (const PlanObject* o : users[t]) {
      if (std::binary_search(o->writes.begin(), o->writes.end(), t)) clean[o->key] = false;
    }
    const double compute = static_cast<double>(in.layer_ns[t]);
    const double want_end = clock_ns + compute + static_cast<double>(slow_bytes) * in.slow_access_ns_per_byte;
    const double traffic = static_cast<double>(slow_bytes) * traffic_ns_per_byte;
    if (traffic > 0) {
      const double traffic_end = std::max(slow_busy_ns, want_end - traffic) + traffic;
      slow_busy_ns = traffic_end;
      clock_ns = std::max(want_end, traffic_end);
    } else {
      clock_ns = want_end;
    }
    compute_ns += compute;
  }
  // The step repeats: persistent objects must end where the next step starts them.
  for (const PlanObject& o : in.objects) {
    if (!o.persistent) continue;
    auto s = plan.start.find(o.key);
    const TierIndex want = s != plan.start.end() ? s->second : in.fast;
    // An object whose move in was refused ends where the runtime leaves it, not where the plan
    // has it: the plan is not wrong for that.
    if (tier[o.key] != want && !refused.contains(o.key)) {
      note(fmt::format("key {:#x} ends the step on tier {} but the next step starts it on tier {}", o.key,
                       tier[o.key], want));
    }
  }
  // Moves after the last layer prepare the next step: they count when they end past this one.
  plan.predicted_extra_ns =
      std::max(clock_ns, mover_free_ns) - compute_ns + plan.mover_cpu_ns * in.mover_steals_compute;
  plan.compute_ns = compute_ns;
  const std::uint64_t footprint = in.peak_bytes + in.small_reserve_bytes;
  plan.floor_slow_ns = footprint > in.fast_budget_bytes
                           ? static_cast<double>(footprint - in.fast_budget_bytes) *
                                 (1.0 / in.move_in_gbps + 1.0 / in.move_out_gbps)
                           : 0.0;
  return problem;
}

}  // namespace

std::optional<Plan> without_late_moves(const Plan& plan, const PlanInputs& in) {
  std::vector<std::size_t> late;
  for (std::size_t i = 0; i < plan.moves.size(); ++i) {
    const PlannedMove& m = plan.moves[i];
    if (m.to == in.fast && m.predicted_late && m.needed_by < in.layers) late.push_back(i);
  }
  return without_moves_in(plan, in, late);
}

std::optional<Plan> without_moves_in(const Plan& plan, const PlanInputs& inputs,
                                     std::span<const std::size_t> left_out) {
  PlanInputs segments;
  const PlanInputs& in = played_over(plan, inputs, segments);
  std::vector<bool> leave(plan.moves.size(), false);
  bool any = false;
  for (const std::size_t i : left_out) {
    if (i >= plan.moves.size() || plan.moves[i].to != in.fast) continue;
    leave[i] = true;
    any = true;
  }
  if (!any) return std::nullopt;
  Plan out = plan;
  out.moves.clear();
  // Where each object is as the plan's moves are taken in the mover's order.
  std::unordered_map<ObjectKey, TierIndex> at;
  for (const auto& [key, tier] : plan.start) at[key] = tier;
  for (const auto& [key, tier] : plan.birth) at[key] = tier;
  for (std::size_t i = 0; i < plan.moves.size(); ++i) {
    const PlannedMove& m = plan.moves[i];
    if (leave[i]) continue;
    auto it = at.find(m.key);
    if (it != at.end() && it->second == m.to) continue;  // already there: its move in was left out
    if (it != at.end()) it->second = m.to;
    out.moves.push_back(m);
  }
  // A persistent object left slow by a move in left out goes back in after the last layer, where
  // the plan had it fast, so that the next step starts it where the plan does.
  for (const PlanObject& o : in.objects) {
    auto s = plan.start.find(o.key);
    if (!o.persistent || s == plan.start.end() || at[o.key] == s->second) continue;
    PlannedMove m;
    m.key = o.key;
    m.to = s->second;
    m.after_layer = in.layers - 1;
    m.needed_by = in.layers;
    m.bytes = o.bytes;
    out.moves.push_back(m);
  }
  if (!simulate_over(out, in).empty()) return std::nullopt;
  return out;
}

std::vector<LateMoveVerdict> judge_late_moves(const Plan& plan, std::uint32_t layers,
                                              std::span<const double> with_layer_ns,
                                              std::span<const double> without_layer_ns) {
  std::vector<LateMoveVerdict> verdicts;
  if (layers == 0 || with_layer_ns.size() < layers || without_layer_ns.size() < layers) return verdicts;
  for (std::size_t i = 0; i < plan.moves.size(); ++i) {
    const PlannedMove& m = plan.moves[i];
    if (m.to != plan.fast || !m.predicted_late || m.needed_by >= layers) continue;
    LateMoveVerdict v;
    v.move = i;
    // Handed out after layer after_layer (or before the step, or at the end of the step before).
    v.first_layer = m.after_layer == kStepStart || m.after_layer >= m.needed_by ? 0 : m.after_layer + 1;
    v.last_layer = m.useful_until == kStepStart ? m.needed_by : std::min(m.useful_until, layers - 1);
    v.last_layer = std::max(v.last_layer, v.first_layer);
    for (std::uint32_t l = v.first_layer; l <= v.last_layer; ++l) {
      v.with_ns += with_layer_ns[l];
      v.without_ns += without_layer_ns[l];
    }
    verdicts.push_back(v);
  }
  return verdicts;
}

}  // namespace tensortier::migrator
