#include "tensortier/timeline.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tensortier/allocator/object_allocator.h"
#include "tensortier/write_file.h"

namespace tensortier {

TimelineRecorder::TimelineRecorder(std::uint64_t first_step, std::uint64_t steps, std::string label)
    : first_step_(first_step), steps_(steps), label_(std::move(label)) {}

std::uint64_t TimelineRecorder::now_ns() const {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

void TimelineRecorder::on_step_begin(std::uint64_t step) {
  const std::uint64_t t = now_ns();
  std::lock_guard lock(mutex_);
  recording_ = step >= first_step_ && step < first_step_ + steps_;
  step_ = step;
  if (!recording_) return;
  if (origin_ns_ == 0) origin_ns_ = t;
  step_begin_ns_ = t;
}

void TimelineRecorder::on_step_end(const StepEndEvent& event) {
  const std::uint64_t t = now_ns();
  std::lock_guard lock(mutex_);
  if (!recording_) return;
  spans_.push_back(
      {fmt::format("runtime step {} (from 0)", event.step), 0, step_begin_ns_, t, "step", 0, event.step});
  ++recorded_;
  recording_ = false;
}

void TimelineRecorder::on_layer_begin(const LayerEvent& event) {
  const std::uint64_t t = now_ns();
  std::lock_guard lock(mutex_);
  if (!recording_) return;
  layer_begin_ns_ = t;
  layer_name_ = std::string(event.name);
  if (event.move_wait_ns > 0) {
    spans_.push_back(
        {"wait for moves: " + layer_name_, 1, t - std::min(t, event.move_wait_ns), t, "wait", 0, step_});
  }
}

void TimelineRecorder::on_layer_end(const LayerEndEvent& event) {
  const std::uint64_t t = now_ns();
  std::lock_guard lock(mutex_);
  if (!recording_) return;
  spans_.push_back(
      {layer_name_, 1, layer_begin_ns_, t, "layer", event.slow_bytes_read + event.slow_bytes_written, step_});
  if (event.emulated_charge_ns > 0) {
    spans_.push_back({"emulated slow-tier charge", 1,
                      t - std::min(t - layer_begin_ns_, event.emulated_charge_ns), t, "emulated",
                      event.slow_bytes_read + event.slow_bytes_written, step_});
  }
}

void TimelineRecorder::on_allocate(const ObjectInfo& object, const SpanView&) {
  if (object.room_wait_ns == 0) return;
  const std::uint64_t t = now_ns();
  std::lock_guard lock(mutex_);
  if (!recording_) return;
  spans_.push_back({"wait for room: " + object.name, 1, t - std::min(t, object.room_wait_ns), t, "wait",
                    object.bytes, step_});
}

void TimelineRecorder::on_move(const MoveResult& move) {
  const std::uint64_t t = now_ns();
  std::lock_guard lock(mutex_);
  if (!recording_) return;
  const bool in = move.to < move.from;  // tiers are ranked fastest first
  spans_.push_back({fmt::format("{} object {} ({} KiB)", in ? "in" : "out", move.id, move.bytes >> 10), 2,
                    t - std::min(t, move.copy_ns + move.charge_ns), t, in ? "move-in" : "move-out",
                    move.bytes, step_});
}

std::uint64_t TimelineRecorder::steps_recorded() const {
  std::lock_guard lock(mutex_);
  return recorded_;
}

std::string TimelineRecorder::json() const {
  std::lock_guard lock(mutex_);
  nlohmann::json events = nlohmann::json::array();
  const char* lanes[] = {"steps", "layers (training thread)", "moves"};
  for (int lane = 0; lane < 3; ++lane) {
    events.push_back(
        {{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", lane}, {"args", {{"name", lanes[lane]}}}});
  }
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"args", {{"name", label_}}}});
  for (const Span& s : spans_) {
    const std::uint64_t begin = s.begin_ns > origin_ns_ ? s.begin_ns - origin_ns_ : 0;
    const std::uint64_t end = s.end_ns > origin_ns_ ? s.end_ns - origin_ns_ : 0;
    events.push_back({{"name", s.name},
                      {"cat", s.category},
                      {"ph", "X"},
                      {"pid", 1},
                      {"tid", s.lane},
                      {"ts", static_cast<double>(begin) / 1e3},
                      {"dur", static_cast<double>(end - std::min(end, begin)) / 1e3},
                      {"args", {{"bytes", s.bytes}, {"step", s.step}}}});
  }
  return nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump();
}

Status TimelineRecorder::write(const std::string& path) const {
  return write_file_replacing(path, json() + '\n', "the trace");
}

}  // namespace tensortier
