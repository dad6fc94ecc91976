// PlanTrial: a plan that moves, weighed against its variants by measured step time (the runtime's
// RuntimeOptions::trial_steps). Its phases, each `steps` measured steps after one unmeasured step
// (which places the phase's persistent objects):
//
//   phase            plan                                        where
//   made             the plan as made                            always, first
//   without late     its moves predicted late left out           it has late moves
//   judged           only the late moves whose layers were       the two phases above judge some
//                    faster with them (judge_late_moves)         worth it and some not
//   none             no moves: first-touch in the same budget    always, last
//
// The fastest phase by median step time goes on (the first of equals). The runtime feeds it the
// steps of the planned kind that ran under a plan, and installs what it returns: no clock inside,
// so what it chooses follows from the times given alone.
//
// Ownership: a value; it keeps copies of the plans not running. Thread safety: none (the
// training thread's).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tensortier/migrator/plan.h"
#include "tensortier/migrator/plan_edits.h"

namespace tensortier::migrator {

class PlanTrial {
 public:
  // A trial of `plan` (running already), made from `inputs`, `steps` measured steps a phase;
  // `policy` names it in the result. None where steps is 0 or the plan moves nothing.
  static std::optional<PlanTrial> begin(const Plan& plan, const PlanInputs& inputs, std::uint32_t steps,
                                        std::string policy);

  // One step of the planned kind under the running phase's plan: its time, and each layer's
  // (from the end of the layer before it, the step's start for the first). Returns the plan to
  // run from the next step where the trial switches (`running`, the plan now running, is kept for
  // its phase); nullopt to keep the running one.
  std::optional<Plan> step(std::uint64_t step_ns, std::span<const std::uint64_t> layer_ns,
                           const Plan& running);

  bool done() const { return !result_.empty(); }
  // One line once done: every phase's median and the verdict; empty before.
  const std::string& result() const { return result_; }
  // What each phase is, in order (the judged phase appears once the phase without the late moves
  // has run), and the one running.
  std::vector<std::string> phases() const;
  std::size_t running_phase() const { return phase_; }

 private:
  struct Phase {
    std::string what;                         // "with its moves", ... (result())
    std::string verdict;                      // what result() says where this phase is the fastest
    std::optional<Plan> plan = std::nullopt;  // empty while its plan runs
    std::uint64_t median_ns = 0;
    std::vector<double> layer_median_ns = {};  // each layer's median time over the phase
    bool late_left_out = false;                // the plan as made without its late moves
  };
  PlanTrial(PlanInputs inputs, std::uint32_t steps, std::string policy)
      : inputs_(std::move(inputs)), steps_(steps), policy_(std::move(policy)) {}
  // The phase that just ended: its medians from the steps measured.
  void close_phase();
  // After the phase without the late moves: the judged phase next, where it is some and not all.
  void add_judged_phase();
  // The plan of phase k, to run from the next step; `running` goes to the phase that ran.
  Plan switch_to(std::size_t k, const Plan& running);

  PlanInputs inputs_;
  std::uint32_t steps_ = 0;
  std::string policy_;
  std::vector<Phase> phases_;
  std::size_t phase_ = 0;
  std::uint32_t skip_ = 1;  // unmeasured steps left in this phase
  std::vector<std::uint64_t> step_ns_;
  std::vector<std::vector<std::uint64_t>> layer_ns_;
  std::string result_;
};

}  // namespace tensortier::migrator
