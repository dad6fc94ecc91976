// Edits of a made plan that the runtime's trial weighs by measured time: the plan without the
// moves in it predicts late, or without chosen ones, and a verdict on each late move from the
// layer times measured with and without it (PlanTrial uses them).
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "tensortier/migrator/plan.h"

namespace tensortier::migrator {

// The plan with the moves in that simulate() predicts late left out: their objects stay where they
// are (the slow tier) until their next planned move, and the moves out that would then find an
// object already slow go too, so the mover and the slow tier are free for the moves that arrive in
// time. Moves that prepare the next step (needed_by >= layers) stay. Its predictions are filled.
// None where no move is late (or leaving them out would not give a valid plan). The runtime's
// trial weighs the two by measured step time (RuntimeOptions::trial_steps).
std::optional<Plan> without_late_moves(const Plan& plan, const PlanInputs& inputs);

// The plan with the moves in at `left_out` (indices into plan.moves; other indices are ignored)
// left out, as without_late_moves leaves out the late ones. None where nothing is left out or the
// result would not be valid.
std::optional<Plan> without_moves_in(const Plan& plan, const PlanInputs& inputs,
                                     std::span<const std::size_t> left_out);

// One late move in (PlannedMove::predicted_late) judged by measured time, as sentinel's trial
// judges "wait for it, or leave the object slow" move by move: the layers it can change (from the
// one after it is handed out to the last it helps: the copy, the wait and the accesses it saves
// fall there) timed under the plan as made and under the plan without its late moves.
struct LateMoveVerdict {
  std::size_t move = 0;           // index in plan.moves
  std::uint32_t first_layer = 0;  // the layers it was judged on, inclusive
  std::uint32_t last_layer = 0;
  double with_ns = 0;                                 // their time with the late moves
  double without_ns = 0;                              // and without them
  bool keep() const { return with_ns < without_ns; }  // ties leave it out: no copy, no CPU
};

// Judges each late move in of `plan` (needed within the step) by `with_layer_ns` and
// `without_layer_ns`: each layer's time, from the end of the layer before it (so the waits for
// moves before a layer begins are counted) to its end, under the plan as made and without its late
// moves (medians over the trial's steps). Layers where late moves' windows overlap count for each
// of them. Empty where either span has fewer entries than the step has layers.
std::vector<LateMoveVerdict> judge_late_moves(const Plan& plan, std::uint32_t layers,
                                              std::span<const double> with_layer_ns,
                                              std::span<const double> without_layer_ns);

}  // namespace tensortier::migrator
