// Finds a program's training steps in its stream of primitive executions, for a program that
// marks none: a step is the sequence of executions its loop repeats. Each execution is named by a
// key (the interposer's: the primitive's kind and propagation, and its arguments' ids and sizes,
// so memories and primitives made anew each iteration give the same keys).
//
//   searching ──(the last 3P keys repeat with period P)──> verifying ──(P more keys follow the
//       ^                                                      │        period)──> tracking
//       └──────(a key breaks the period; P must then grow)─────┘
//
// Searching and verifying mark nothing. Tracking opens a step where an iteration begins and keeps
// one open until the next begins, so what the program does between iterations (making the next
// iteration's memories, filling its batch) falls in a step. A step whose keys leave the sequence
// (an evaluation pass, a smaller last batch) is a step of another kind: it ends where the
// sequence's first key comes again, or after 4P executions; after kLostSteps such steps in a row
// the detector searches again. A hint (period and offset) replaces the search: steps every
// `period` executions from execution `offset` on.
//
// Not thread-safe: one training thread feeds it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace tensortier::interpose {

// What to do around one execution, in this order: end the open step, begin one, run the
// execution (as a layer of the open step where `marked`), end the step, begin the next.
struct StepDecision {
  bool end_before = false;
  bool begin_before = false;
  bool marked = false;
  bool end_after = false;
  bool begin_after = false;
};

struct StepHint {
  std::uint64_t period = 0;  // executions a step
  std::uint64_t offset = 0;  // executions before the first step
};

class StepDetector {
 public:
  static constexpr std::size_t kHistory = 8192;  // executions searched for a period, at most
  static constexpr int kLostSteps = 8;

  explicit StepDetector(std::optional<StepHint> hint = std::nullopt);

  StepDecision next(std::uint64_t key);

  enum class State { kSearching, kVerifying, kTracking, kGaveUp };
  State state() const { return state_; }
  // The step's executions, once found (0 before).
  std::uint64_t period() const { return period_; }
  // Executions seen so far, and where tracking began (the first step's first execution).
  std::uint64_t executions() const { return executions_; }
  std::uint64_t tracking_from() const { return tracking_from_; }
  // Steps the detector opened that left the sequence (another kind), and times it searched again.
  std::uint64_t other_steps() const { return other_steps_; }
  std::uint64_t searches() const { return searches_; }

 private:
  StepDecision search(std::uint64_t key);
  StepDecision verify(std::uint64_t key);
  StepDecision track(std::uint64_t key);
  StepDecision hinted();
  void restart_search(std::uint64_t min_period);

  std::optional<StepHint> hint_;
  State state_ = State::kSearching;
  std::vector<std::uint64_t> history_;
  std::vector<std::uint32_t> run_;  // run_[P]: trailing keys equal to the key P before them
  std::uint64_t min_period_ = 1;
  std::uint64_t period_ = 0;
  std::vector<std::uint64_t> sequence_;  // one step's keys, from its first execution
  std::uint64_t position_ = 0;           // in sequence_ (verifying: of the next key)
  bool open_ = false;                    // a step is open
  bool deviated_ = false;                // the open step has left the sequence
  std::uint64_t in_step_ = 0;            // executions in the open step
  int lost_in_row_ = 0;
  std::uint64_t executions_ = 0;
  std::uint64_t tracking_from_ = 0;
  std::uint64_t other_steps_ = 0;
  std::uint64_t searches_ = 0;
};

}  // namespace tensortier::interpose
