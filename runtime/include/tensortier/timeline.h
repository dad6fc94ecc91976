// TimelineRecorder: chosen training steps in time (layers with their waits and emulated charges,
// and every move), written as a Chrome trace for ui.perfetto.dev or tools/plot_timeline.py. A
// StepObserver: attach it before the steps it records, remove it before destroying it. What each
// span covers: runtime/README.md, "TimelineRecorder".
//
// Thread safety: observer calls from the training and mover threads at once (a mutex orders
// them); json() and write() from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "tensortier/status.h"
#include "tensortier/step_observer.h"

namespace tensortier {

class TimelineRecorder final : public StepObserver {
 public:
  TimelineRecorder(std::uint64_t first_step, std::uint64_t steps, std::string label = "tensortier");

  // The trace so far, as Chrome trace JSON.
  std::string json() const;
  // Writes json() to `path`. Errors: kInternal naming the path and the OS error.
  Status write(const std::string& path) const;
  // Steps recorded so far (complete ones).
  std::uint64_t steps_recorded() const;

  void on_step_begin(std::uint64_t step) override;
  void on_step_end(const StepEndEvent& event) override;
  void on_layer_begin(const LayerEvent& event) override;
  void on_layer_end(const LayerEndEvent& event) override;
  void on_move(const MoveResult& move) override;
  void on_allocate(const ObjectInfo& object, const SpanView& span) override;

 private:
  struct Span {
    std::string name;
    int lane = 0;  // 0 steps, 1 layers, 2 moves
    std::uint64_t begin_ns = 0, end_ns = 0;
    std::string category;  // "step", "layer", "wait", "emulated", "move-in", "move-out"
    std::uint64_t bytes = 0;
    std::uint64_t step = 0;
  };
  std::uint64_t now_ns() const;

  const std::uint64_t first_step_;
  const std::uint64_t steps_;
  const std::string label_;
  mutable std::mutex mutex_;
  bool recording_ = false;
  std::uint64_t step_ = 0;
  std::uint64_t origin_ns_ = 0;  // the first recorded step's start (0: none yet)
  std::uint64_t step_begin_ns_ = 0;
  std::uint64_t layer_begin_ns_ = 0;
  std::string layer_name_;
  std::uint64_t recorded_ = 0;
  std::vector<Span> spans_;
};

}  // namespace tensortier
