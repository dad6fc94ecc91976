// The interposer's settings, as tensortier-run passes them in the environment (TENSORTIER_*), read
// through the one settings parser (tensortier/settings.h). tensortier-run reads them the same way
// before it starts the program, and the interposer as it loads: a bad value is refused, naming the
// variable and what it takes, before the program runs anything.
//
// Thread safety: from_env() reads the environment (not while another thread changes it).
#pragma once

#include <cstdint>
#include <string>

#include "tensortier/status.h"

namespace tensortier::interpose {

struct InterposeSettings {
  bool on = true;                 // TENSORTIER_INTERPOSE (a switch): off passes every call through
  std::uint64_t trial_steps = 3;  // TENSORTIER_TRIAL_STEPS: the plan trial's steps a phase (0: none)
  bool trial_steps_given = false;
  std::uint64_t random_moves = 0;  // TENSORTIER_RANDOM_MOVES: a seed (0: off)
  bool scratchpads = false;        // TENSORTIER_SCRATCHPADS (a switch)
  std::uint64_t step_period = 0;   // TENSORTIER_STEP_PERIOD: executions a step (0: detect)
  std::uint64_t step_offset = 0;   // TENSORTIER_STEP_OFFSET: executions before the first (needs a period)
  std::uint64_t trace_from = 4;    // TENSORTIER_TRACE_FROM: the first traced step (1-based)
  std::uint64_t trace_steps = 1;   // TENSORTIER_TRACE_STEPS
  std::string trace;               // TENSORTIER_TRACE: where the trace goes ("": none)
  std::string report;              // TENSORTIER_INTERPOSE_REPORT: where the report goes ("": none)
  // TENSORTIER_RUN_PID: the process tensortier-run started (0: not started by it).
  std::uint64_t run_pid = 0;
  // TENSORTIER_RUN_CLAIM: a descriptor of a shared page whose first word names the one process of
  // the run that is interposed (-1: none, so every process is).
  int claim_fd = -1;

  static Result<InterposeSettings> from_env();
};

// The ranges, shared with tensortier-run's flags.
inline constexpr std::uint64_t kMostTrialSteps = 10'000;
inline constexpr std::uint64_t kMostStepPeriod = 1'000'000'000;  // executions a step
inline constexpr std::uint64_t kMostStepOffset = 1'000'000'000'000;
inline constexpr std::uint64_t kMostTraceFrom = 1'000'000'000'000;
inline constexpr std::uint64_t kMostTraceSteps = 1'000'000;

}  // namespace tensortier::interpose
