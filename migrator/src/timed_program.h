// The channel program (timed_program.cc; timed_bound.h says what it bounds) solved, with its
// solution per object: the timed bound reads its objective, the channel policy
// (policies/channel.cc) rounds its solution into a plan. Internal to migrator/.
// Thread safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "tensortier/migrator/plan_inputs.h"

namespace tensortier::migrator {

struct ChannelSolution {
  bool solved = false;  // `slow_share` holds a solution (the LP's optimum, the MILP's best found)
  double bound_ns = 0;  // no plan adds less (the LP's optimum, the MILP's best possible); 0: none
  std::string status;   // what the solver did, for logs
  // Per object of PlanInputs::objects, per boundary in [0, layers): its share on the slow tier
  // there, as the solution has it; -1 where the program has no column (no layer finds it there,
  // or it is not alive).
  std::vector<std::vector<double>> slow_share;
};

// An object's share on the slow tier where a layer uses it: fluid (the channel program) or whole
// 2 MiB segments (the tightened program: no plan has less than a segment partly fast).
enum class UseShares { kFluid, kSegments };

// The channel program over `inputs`, solved within `time_limit_s`. Never fails: where no solution
// was found, `solved` is false and `status` says why.
ChannelSolution solve_channel_program(const PlanInputs& inputs, UseShares uses, double time_limit_s);

}  // namespace tensortier::migrator
