// A lower bound on the time any plan adds to a step that counts the slow tier's channel in time
// (issue 36): the exact model (residency_model.h) has no time in it, and Plan::floor_slow_ns
// spreads the channel's work over the whole step. Here every window W of layers [s, e) around a
// boundary p where the live bytes pass the budget is weighed. The plan keeps D_p bytes off the
// fast tier at p; an object so kept whose bytes are needed crosses to the slow tier after the
// start of the layer that last wrote it before p (forced into W where that layer is in it) and
// back by the end of its next reader (forced where that reader is in W), each way by a move (the
// channel's time, M) or by the layer's own slow access (its charge, C). M must fit in W's
// duration, which C lengthens, so
//
//   added >= max(M - layers(W), C) >= alpha (M - layers(W)) + (1 - alpha) C,   0 < alpha < 1;
//
// minimised over the D_p bytes and the ways (a fractional knapsack over four classes of bytes, a
// lower bound of every integral choice), maximised over alpha, p and W. Bytes dead at p
// (bytes_dead_at) and bytes not written before p in the step (their slow copy may be current)
// cost nothing on that side; the mover's CPU is left out (it only adds). The simulator and the
// emulated tier let a layer's slow traffic use idle channel time before the layer: the bound
// counts only that traffic's charge, not its channel time.
//
// A second argument weighs every boundary at once: the channel program (timed_program.cc), a
// linear program CBC solves in which every object's share on the slow tier at each boundary,
// and the moves that change it within each layer's interval, are columns. A third, the tightened
// program, is the same with each object's share integral where a layer uses it (whole 2 MiB
// segments: no plan has an object partly fast at its use), a mixed-integer program whose search's
// bound within its time limit is the bound. The bound is the largest of the three. Thread safety:
// pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "tensortier/migrator/plan_inputs.h"

namespace tensortier::migrator {

struct TimedBound {
  double added_ns = 0;      // no plan adds less: the largest of the three below
  double window_ns = 0;     // the window argument's (0: the windows force nothing past the layers)
  double program_ns = 0;    // the channel program's (0: not solved)
  std::string program;      // what the channel program's solver did
  double tightened_ns = 0;  // the tightened program's (0: not solved)
  std::string tightened;    // what its solver did
  // The window that gives it: layers [first_layer, end_layer), the boundary whose deficit it
  // weighs, and the bytes and channel time forced into it.
  std::uint32_t first_layer = 0, end_layer = 0, peak_boundary = 0;
  std::uint64_t deficit_bytes = 0;
  double alpha = 0, layers_ns = 0;
  std::string describe() const;
};

TimedBound timed_bound(const PlanInputs& inputs);

// The channel program's optimum in ns (0 where it was not solved within the time limit, and
// `status` says so), and what the solver did.
double channel_program_bound(const PlanInputs& inputs, double time_limit_s, std::string& status);
// The tightened program's bound in ns: the best possible objective its search proved within the
// time limit (the optimum where it finished); 0 where it gave none, `status` saying so.
double tightened_program_bound(const PlanInputs& inputs, double time_limit_s, std::string& status);

}  // namespace tensortier::migrator
