// What the policies share (internal to migrator/): the room a plan may fill, births in an
// allocator's order, placing an object, the cheapest of several plans, plans from a residency,
// and every policy's entry point (registry.cc lists them by name).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "tensortier/migrator/plan.h"
#include "tensortier/migrator/residency_model.h"

namespace tensortier::migrator::policies {

// The fast budget less the room kept for small objects: what planned objects may fill.
std::uint64_t plannable_room(const PlanInputs& in);

// Objects in the order an allocator would place them: persistent ones first (key order), then
// by birth boundary (key order within one).
std::vector<std::size_t> birth_order(const PlanInputs& in);

// How many times make_plan (and the oracle, weighing a heuristic as make_plan runs it) plans again
// under a lower budget where a plan's layout overshoots the room.
inline constexpr std::uint32_t kMostReplans = 4;

// The budget to plan again under where `plan`, made under `planned_bytes`, was laid out over
// `in`'s budget: less by the overshoot and 1% more of the budget each attempt (a policy's layout
// need not shrink by what its budget does); 0 where nothing would be left.
std::uint64_t lowered_budget(const Plan& plan, const PlanInputs& in, std::uint64_t planned_bytes,
                             std::uint32_t attempt);

// Puts the object on `tier` where the step starts it (persistent) or where it is born.
void place(Plan& plan, const PlanObject& o, TierIndex tier);

// Sorts moves in the order the mover takes them: by boundary (moves before the step's first
// layer first), and at one boundary moves out before moves in.
void sort_in_mover_order(std::vector<PlannedMove>& moves, TierIndex fast);

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

// Residency (residency_model.h): per object, whether it is on the fast tier at each boundary b in
// [0, layers) of its life (the state the layer at b finds, after the moves at b). Persistent
// objects' boundaries are cyclic: boundary `layers` is the next step's boundary 0. Turns a
// residency into births, starts and moves: a change at boundary b is a move handed to the mover
// after layer b - 1 (a persistent object's change at boundary 0: after the last layer, for the
// next step); a move in is needed by the next use at or after b, and (with `know_uses`) useful
// until the last use of its stay in fast memory.
Plan from_residency(const PlanInputs& in, std::string policy, const Residency& fast, bool know_uses);

// The residency with each move in handed out up to `lead` boundaries earlier, where the budget has
// room at every boundary it then holds the object, earliest moves first; a move reaching back to
// the object's previous stay joins it, one reaching its birth makes it born fast.
Residency lead_moves_in(const PlanInputs& in, Residency r, std::uint32_t lead);

// Where a whole-object plan has each object at each boundary of its life (its start or birth, then
// its moves, each done at the boundary after the layer it is handed out at): the residency
// from_residency would turn back into such a plan.
Residency residency_of(const Plan& plan, const PlanInputs& in);

// A residency's room (residency_room.cc): the fast bytes it holds at each boundary's busiest
// moment (its births' or its moves in's, on ready memory's clock: places.h), and whether that is
// within `room` everywhere.
std::vector<std::uint64_t> held_bytes(const PlanInputs& in, const Residency& r);
bool fits_room(const PlanInputs& in, const Residency& r, std::uint64_t room);

// Makes room where the residency passes `room`: at the first such boundary, the object fast there
// whose next use is furthest (not `keep`) leaves until that use; up to `most_evictions` times.
// Where every object fast there is used there, it fails, or (most_evictions >= kEvictUses) leaves
// the largest of them slow at that boundary. False where it still does not fit.
inline constexpr int kEvictUses = 1000;
bool make_room(const PlanInputs& in, Residency& r, std::size_t keep, int most_evictions, std::uint64_t room);

// A residency's plan as a search weighs it: laid out where the inputs run in ready memory, played
// by the simulator, and costed at its predicted added time plus its moves in predicted refused
// (room births took first) charged again as slow accesses, so that no plan wins on moves that will
// not happen. cost_ns is infinite where the plan is not valid or its layout is over the budget.
struct ScoredPlan {
  Residency residency;
  Plan plan;
  double cost_ns = std::numeric_limits<double>::infinity();
};
ScoredPlan score_residency(const PlanInputs& in, std::string policy, Residency r);

// Phases 1 and 2 of the channel policy's rounding (channel.cc) for one object: from its slow share
// at each boundary (-1 where the program has none), whether it is fast there.
std::vector<char> round_channel_shares(const PlanInputs& in, const PlanObject& o,
                                       const std::vector<double>& share, double between);

// The channel program's solutions (timed_program.h) rounded into residencies (channel.cc), each
// with what it is: at the room and at 95% of it, rounded two ways between uses, room made two
// ways, with moves in led 0, 1, 2 and 4 boundaries.
std::vector<std::pair<Residency, std::string>> channel_residencies(const PlanInputs& in);

// The policies (one file each in this folder); their plans' predictions are not filled.
Plan fast_only(const PlanInputs& in);
Plan slow_only(const PlanInputs& in);
Plan first_touch(const PlanInputs& in);
Plan interleave(const PlanInputs& in);
Plan reactive(const PlanInputs& in);
Plan reactive_2m(const PlanInputs& in);
Plan autoswap(const PlanInputs& in);
Result<Plan> sentinel(const PlanInputs& in);
Plan oracle(const PlanInputs& in);
Plan smartpool(const PlanInputs& in);
Plan search(const PlanInputs& in);
Plan channel(const PlanInputs& in);
// The oracle's own heuristic (Belady's rule with prefetch, every lookahead): the cheapest of its plans.
Plan belady_oracle(const PlanInputs& in);

}  // namespace tensortier::migrator::policies
