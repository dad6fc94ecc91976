// The runtime's profiling: when a step is profiled, its window (from the end of the step before),
// and the profile handed to the policy.
// Runtime: tier resolution, object placement and step/layer marks (see runtime.h).
#include "tensortier/runtime.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <thread>
#include <tuple>

#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "fork_guard.h"
#include "tensortier/allocator/layer_charge.h"
#include "tensortier/allocator/tier_spec.h"
#include "tensortier/allocator/topology.h"

namespace tensortier {

Status Runtime::set_profile_options(const profiler::ProfileOptions& options) {
  TENSORTIER_RETURN_IF_ERROR(profiler::validate(options));
  if (in_step_) return failed_precondition("set_profile_options inside a step (call it between steps)");
  profile_options_ = options;
  // A profile begun at the last step's end ran with the old options: the next step decides anew.
  if (profiler_ != nullptr) {
    {
      std::lock_guard lock(alloc_events_mutex_);
      remove_observer(profiler_.get());
      profiler_.reset();
    }
    std::lock_guard gate(move_gate_mutex_);
    moves_blocked_ = false;
  }
  return Status::ok();
}

std::shared_ptr<const profiler::StepProfile> Runtime::profile_of(std::uint64_t signature) const {
  auto it = profiles_.find(signature);
  return it != profiles_.end() ? it->second : nullptr;
}

// Due when asked for, or when the last ProfileOptions::step steps had one signature that has no
// profile yet (the coming step is predicted to be like them), one step more for each time a run
// of that signature predicted a step of another kind.
bool Runtime::profile_due() const {
  if (profile_requested_) return true;
  const auto misses = profile_misses_.find(last_signature_);
  const std::uint64_t needed = profile_options_.step + (misses != profile_misses_.end() ? misses->second : 0);
  if (!profile_options_.enabled || run_length_ < needed) return false;
  return !profiles_.contains(last_signature_) && !profile_failed_.contains(last_signature_);
}

void Runtime::start_profile(bool at_step_begin) {
  if (!counters_ && profile_options_.counters) counters_ = profiler::Counters::open();
  {  // no move may touch the profiled step: turn new ones away, wait for those in flight
    std::unique_lock gate(move_gate_mutex_);
    moves_blocked_ = true;
    moves_done_.wait(gate, [this] { return moves_in_flight_ == 0; });
  }
  std::vector<std::pair<ObjectInfo, SpanView>> live;
  std::lock_guard lock(alloc_events_mutex_);
  for (ObjectInfo& info : allocator_.objects()) {
    SpanView span;
    if (allocator_.lookup(info.address, &span)) live.emplace_back(std::move(info), span);
  }
  allocator_.reset_peak_live_bytes();
  auto lookup = [](const void* context, const void* address, SpanView* out) {
    return static_cast<const Runtime*>(context)->lookup(address, out);
  };
  auto started = profiler::StepProfiler::start(profile_options_, lookup, this, steps_completed_.load(), live,
                                               counters_.get());
  if (!started) {
    // At a step's end (the window before the profiled step), a profile of another runtime in this
    // process may still hold the fault tracker: the step tries again when it begins.
    if (!at_step_begin) {
      spdlog::debug("the profile of step {} starts when it begins: {}", steps_completed_.load(),
                    started.status().message());
    } else {
      spdlog::warn("step {} is not profiled: {}", steps_completed_.load(), started.status().message());
      profile_failed_.insert(last_signature_);
      if (!policy_.empty() && executor_ == nullptr && last_profile_ == nullptr && policy_failure_.empty())
        fail_policy("the profile it plans from could not be made: " + started.status().message());
    }
    std::lock_guard gate(move_gate_mutex_);
    moves_blocked_ = false;
    return;
  }
  profiler_ = std::move(started).value();
  if (Status s = add_observer(profiler_.get()); !s.is_ok()) spdlog::warn("step profile: {}", s.message());
}

void Runtime::finish_profile(std::uint64_t step_duration_ns) {
  std::shared_ptr<const profiler::StepProfile> profile;
  {
    // Held until every span is unprotected (finish): another thread's free after the observer
    // goes would otherwise return a range that is still PROT_NONE, to be reused so.
    std::lock_guard lock(alloc_events_mutex_);
    remove_observer(profiler_.get());
    std::unique_ptr<profiler::StepProfiler> done = std::move(profiler_);
    profile = std::make_shared<const profiler::StepProfile>(
        done->finish(signature_, step_duration_ns, allocator_.peak_live_bytes()));
  }
  ++profiled_steps_;
  if (profiling_for_ && *profiling_for_ != signature_) {
    ++profile_misses_[*profiling_for_];  // a one-off kind of step predicted this one
    if (profiles_.contains(signature_)) {
      spdlog::info(
          "profiled step {} is of a kind profiled before (the step before it was of another kind): "
          "its profile is dropped",
          profile->step);
      std::lock_guard gate(move_gate_mutex_);
      moves_blocked_ = false;
      return;
    }
  }
  std::uint64_t unprofiled_ns = 0;
  for (const profiler::LayerProfile& l : profile->layers) unprofiled_ns += l.unprofiled_duration_ns;
  spdlog::info(
      "profiled step {}: {} layers, {} objects, {} faults, peak {} at layer {}; {:.1f} ms (unprofiled {:.1f} "
      "ms)",
      profile->step, profile->layers.size(), profile->objects.size(), profile->faults,
      format_bytes(profile->peak_live_bytes), profile->peak_at_layer,
      static_cast<double>(step_duration_ns) / 1e6, static_cast<double>(unprofiled_ns) / 1e6);
  if (!profile_options_.json_path.empty()) {
    // The first profile goes to the path as given; a later one (a new kind of step) beside it.
    std::string path = profile_options_.json_path;
    if (!profiles_.empty()) {
      const std::size_t dot = path.rfind('.');
      const std::string suffix = fmt::format(".step{}", profile->step);
      path = dot != std::string::npos && path.find('/', dot) == std::string::npos
                 ? path.substr(0, dot) + suffix + path.substr(dot)
                 : path + suffix;
    }
    profile_json_path_ = path;
    profile_json_status_ = profiler::write_json(*profile, path);
    if (const Status& s = profile_json_status_; !s.is_ok()) {
      spdlog::warn("{}", s.message());
    } else {
      spdlog::info("profile of step {} written to {}", profile->step, path);
    }
  }
  profiles_[signature_] = profile;
  last_profile_ = std::move(profile);
  {
    std::lock_guard gate(move_gate_mutex_);
    moves_blocked_ = false;
  }
  // Once: a policy that could not start does not try again on a later kind's profile. A plan whose
  // kind never ran again follows the kind profiled now.
  if (policy_.empty() || !policy_failure_.empty()) return;
  if (executor_ == nullptr) {
    start_migration(last_profile_);
  } else if (plan_kind_steps_ == 0) {
    follow_steady_kind(last_profile_);
  }
}

void Runtime::begin_profile_window(bool at_step_begin) {
  const bool requested = profile_requested_;
  start_profile(at_step_begin);
  if (profiler_ == nullptr) return;  // at a step's end: tried again when the step begins
  profiling_for_ = requested ? std::nullopt : std::optional<std::uint64_t>(last_signature_);
  profile_requested_ = false;
}

}  // namespace tensortier
