// Ready memory: a plan's fast stays laid out in one arena, its moving objects' homes in another
// (places.h has the time axis).
#include "tensortier/migrator/places.h"

#include <algorithm>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "tensortier/allocator/offset_planner.h"

namespace tensortier::migrator {
namespace {

// Three ticks a boundary b (places.h): deaths let their places go by 3b + 1, births take theirs
// at 3b + 1; moves out let theirs go by 3b + 2, moves in take theirs at 3b + 2.
std::uint64_t birth_tick(std::uint32_t boundary) {
  return 3 * std::uint64_t{boundary} + 1;
}
std::uint64_t boundary_of(const PlannedMove& m) {
  return m.after_layer == kStepStart ? 0 : std::uint64_t{m.after_layer} + 1;
}
std::uint64_t move_tick(const PlannedMove& m, TierIndex fast) {
  return 3 * boundary_of(m) + (m.to == fast ? 2 : 1);
}
std::uint64_t death_tick(std::uint32_t freed) {
  return 3 * std::uint64_t{freed} + 1;
}
std::uint64_t step_end_tick(std::uint32_t layers) {
  return 3 * (std::uint64_t{layers} + 1);
}

// One fast stay of an object: [start, end) ticks; `wrap`: a persistent object's stay across the
// step's end, [start, end of step) and [0, end) in one place. The moves that find it there.
struct Stay {
  ObjectKey key = 0;
  std::uint64_t start = 0, end = 0, bytes = 0;
  bool wrap = false;
  bool first = false;               // the object is here when it is born or the step begins
  std::vector<PlannedMove*> moves;  // the move in that opens it and moves in that find it fast
};

// An object's moves by tick, outs before ins at one tick (the mover's order).
using MovesByKey = std::unordered_map<ObjectKey, std::vector<PlannedMove*>>;
MovesByKey moves_by_key(Plan& plan, TierIndex fast) {
  MovesByKey out;
  for (PlannedMove& m : plan.moves) out[m.key].push_back(&m);
  for (auto& [key, moves] : out) {
    std::stable_sort(moves.begin(), moves.end(), [&](const PlannedMove* a, const PlannedMove* b) {
      return move_tick(*a, fast) < move_tick(*b, fast);
    });
  }
  return out;
}

// Where a move out at boundary b lets its place go (places.h): after b's births (kBoundary), at
// the births of the boundary the plan's last simulate() found its copy done by (kTimed:
// PlannedMove::done_by, where later), or to b's births, which wait for its copy (kEager).
enum class OutClock { kBoundary, kTimed, kEager };

// Walks one placed object's moves (its tier as it comes into the step, then each move): its fast
// stays and its moves out (to its home). Returns whether it ever changes tier.
class StayWalker {
 public:
  StayWalker(const Plan& plan, std::uint64_t end_tick, OutClock clock)
      : plan_(plan), end_tick_(end_tick), clock_(clock) {}

  bool walk(const PlanObject& o, const std::vector<PlannedMove*>& moves, std::vector<Stay>& stays,
            std::vector<PlannedMove*>& outs) {
    const std::uint64_t from = o.persistent ? 0 : birth_tick(o.born);
    const std::uint64_t to = o.persistent ? end_tick_ : death_tick(o.freed);
    TierIndex tier = first_tier(o, moves);
    bool moved = false;
    const std::size_t first_stay = stays.size();
    if (tier == plan_.fast) stays.push_back(Stay{o.key, from, to, o.bytes, false, true, {}});
    for (PlannedMove* m : moves) {
      const std::uint64_t t = move_tick(*m, plan_.fast);
      if (t < from || t >= to) continue;  // not alive then: the simulator says so
      if (m->to == tier) {                // already there: the move finds it in its place
        if (tier == plan_.fast) {
          stays.back().moves.push_back(m);
        } else {
          outs.push_back(m);
        }
        continue;
      }
      moved = true;
      tier = m->to;
      if (tier == plan_.fast) {
        stays.push_back(Stay{o.key, t, to, o.bytes, false, false, {m}});
      } else {
        stays.back().end = out_end(*m, t, to);
        outs.push_back(m);
      }
    }
    close_wrap(o, first_stay, stays);  // (fast at the end where it was fast at the start)
    return moved;
  }

 private:
  // A persistent object comes into a step where the step before left it: after its last move.
  TierIndex first_tier(const PlanObject& o, const std::vector<PlannedMove*>& moves) const {
    if (o.persistent && !moves.empty()) return moves.back()->to;
    const auto& where = o.persistent ? plan_.start : plan_.birth;
    auto it = where.find(o.key);
    return it != where.end() ? it->second : plan_.fast;
  }
  // A persistent object fast at both ends of the step (stays first and last that are not one):
  // one wrap stay, [last.start, end of step) and [0, first.end) in one place.
  static void close_wrap(const PlanObject& o, std::size_t first_stay, std::vector<Stay>& stays) {
    if (!o.persistent || stays.size() < first_stay + 2 || stays[first_stay].start != 0) return;
    Stay& first = stays[first_stay];
    Stay& last = stays.back();
    first.wrap = true;
    first.start = last.start;
    first.moves.insert(first.moves.end(), last.moves.begin(), last.moves.end());
    stays.pop_back();
  }

  // Where the stay that a move out at tick t ends lets its place go (OutClock).
  std::uint64_t out_end(const PlannedMove& m, std::uint64_t t, std::uint64_t to) const {
    switch (clock_) {
      case OutClock::kEager:
        return t;             // b's births may take it, and wait for the copy
      case OutClock::kTimed:  // free for the births of the boundary it is done by
        if (m.done_by > boundary_of(m)) return std::min(to, std::max(t + 1, birth_tick(m.done_by)));
        return t + 1;
      case OutClock::kBoundary:
        break;
    }
    return t + 1;  // free for b's moves in, not for b's births
  }

  const Plan& plan_;
  std::uint64_t end_tick_;
  OutClock clock_;
};

// The stays' offsets in the fast arena: wrap stays stacked at the bottom (all of them are fast at
// the step's end), the others laid out around them.
struct StayLayout {
  std::vector<std::uint64_t> offsets;  // by stay
  std::uint64_t region_bytes = 0;      // the arena
  std::uint64_t max_live_bytes = 0;    // the stays' max-live: no layout needs less
};
Result<StayLayout> lay_out_stays(const std::vector<Stay>& stays, std::uint64_t end_tick) {
  StayLayout out;
  std::vector<std::uint64_t>& offsets = out.offsets;
  offsets.assign(stays.size(), 0);
  std::vector<FixedBuffer> fixed;
  std::vector<PlannedBuffer> buffers;
  std::vector<std::size_t> index;
  std::uint64_t bottom = 0;
  for (std::size_t i = 0; i < stays.size(); ++i) {
    const Stay& s = stays[i];
    if (s.wrap) {
      offsets[i] = bottom;
      fixed.push_back(FixedBuffer{{s.start, end_tick, s.bytes}, bottom});
      fixed.push_back(FixedBuffer{{0, s.end, s.bytes}, bottom});
      bottom += round_up(s.bytes, kPageBytes);
    } else {
      buffers.push_back(PlannedBuffer{s.start, std::max(s.end, s.start + 1), s.bytes});
      index.push_back(i);
    }
  }
  OffsetPlannerOptions options;
  options.alignment_bytes = kPageBytes;
  options.fixed = fixed;
  Result<OffsetPlan> laid = plan_offsets(buffers, options);
  if (!laid) return laid.status();
  for (std::size_t j = 0; j < index.size(); ++j) offsets[index[j]] = laid->offsets[j];
  out.region_bytes = laid->region_bytes;
  for (const FixedBuffer& f : fixed) buffers.push_back(f.buffer);  // every stay's time, wraps in two
  out.max_live_bytes = max_live_bytes(buffers, kPageBytes);
  return out;
}

bool ever_fast(const Plan& plan, const PlanObject& o, const std::vector<PlannedMove*>& moves) {
  auto b = plan.birth.find(o.key);
  if (b == plan.birth.end() || b->second == plan.fast) return true;
  return std::any_of(moves.begin(), moves.end(), [&](const PlannedMove* m) { return m->to == plan.fast; });
}

}  // namespace

namespace {

std::string lay_out(Plan& plan, const PlanInputs& in, OutClock clock);

}  // namespace

std::string lay_out_places(Plan& plan, const PlanInputs& in) {
  return lay_out(plan, in, OutClock::kBoundary);
}

std::string lay_out_places_timed(Plan& plan, const PlanInputs& in) {
  std::string problem = lay_out(plan, in, OutClock::kBoundary);
  if (!problem.empty() || !simulate(plan, in).empty()) {
    Plan eager = plan;  // needs less room than the first: it may fit and be valid where that one is not
    if (lay_out(eager, in, OutClock::kEager).empty() && simulate(eager, in).empty()) {
      plan = std::move(eager);
      return "";
    }
    return problem;  // "" where it fits but is not valid: nothing to time (the caller says why)
  }
  Plan timed = plan;
  if (!lay_out(timed, in, OutClock::kTimed).empty() || !simulate(timed, in).empty()) return "";
  if (timed.predicted_extra_ns < plan.predicted_extra_ns) plan = std::move(timed);
  return "";
}

namespace {

std::string lay_out(Plan& plan, const PlanInputs& in, OutClock clock) {
  plan.places = PlacesPlan{};
  for (PlannedMove& m : plan.moves) m.place = kNoPlace;
  if (plan.segment_bytes != 0 || in.objects.empty()) return {};
  PlacesPlan& places = plan.places;
  places.births_wait_for_outs = clock == OutClock::kEager;
  const std::uint64_t end_tick = step_end_tick(in.layers);
  MovesByKey moves = moves_by_key(plan, plan.fast);
  const std::vector<PlannedMove*> none;
  StayWalker walker(plan, end_tick, clock);
  std::vector<Stay> stays;
  std::vector<PlannedBuffer> homes;
  std::vector<std::pair<const PlanObject*, std::vector<PlannedMove*>>> home_of;  // object, its moves out
  for (const PlanObject& o : in.objects) {
    auto found = moves.find(o.key);
    const std::vector<PlannedMove*>& mine = found != moves.end() ? found->second : none;
    // Of two steps, or persistent and touched unannounced (host code may hold its address): no
    // place, beside the arena.
    if ((!o.persistent && o.freed >= in.layers) || (o.persistent && o.stays())) {
      if (ever_fast(plan, o, mine)) places.unplaced_fast_bytes += o.bytes;
      continue;
    }
    std::vector<PlannedMove*> outs;
    if (walker.walk(o, mine, stays, outs)) {
      homes.push_back(PlannedBuffer{o.persistent ? 0 : birth_tick(o.born),
                                    o.persistent ? end_tick : death_tick(o.freed), o.bytes});
      home_of.emplace_back(&o, std::move(outs));
    }
  }
  Result<StayLayout> fast = lay_out_stays(stays, end_tick);
  OffsetPlannerOptions options;
  options.alignment_bytes = kPageBytes;
  Result<OffsetPlan> home_plan = plan_offsets(homes, options);
  if (!fast || !home_plan)
    return places.problem = fmt::format("places: {}", (!fast ? fast.status() : home_plan.status()).message());
  places.fast_bytes = fast->region_bytes;
  places.fast_max_live_bytes = fast->max_live_bytes;
  places.home_bytes = home_plan->region_bytes;
  places.stays = stays.size();
  places.homes = homes.size();
  for (std::size_t i = 0; i < stays.size(); ++i) {
    const Stay& s = stays[i];
    for (PlannedMove* m : s.moves) m->place = fast->offsets[i];
    if (s.first) places.first[s.key] = fast->offsets[i];
  }
  for (std::size_t h = 0; h < home_of.size(); ++h) {
    const auto& [o, outs] = home_of[h];
    for (PlannedMove* m : outs) m->place = home_plan->offsets[h];
    places.first.try_emplace(o->key, home_plan->offsets[h]);  // born or starting slow: at home
  }
  const std::uint64_t need = places.fast_bytes + places.unplaced_fast_bytes + in.small_reserve_bytes;
  if (need > in.fast_budget_bytes) {
    places.problem = fmt::format(
        "places: the fast arena ({} bytes), objects with no place ({}) and the small objects' reserve ({}) "
        "need {} bytes, over the fast budget of {}",
        places.fast_bytes, places.unplaced_fast_bytes, in.small_reserve_bytes, need, in.fast_budget_bytes);
  }
  return places.problem;
}

}  // namespace

}  // namespace tensortier::migrator
