// StepProfiler: records one training step into a StepProfile, attached by the runtime as a
// StepObserver for the step it chose to profile (from the end of the step before). At every layer
// boundary it collects what the interval touched and re-protects it; a sampler thread estimates
// re-touches; counters are read at layer begin and end. In full: profiler/README.md.
//
// With AccessSource::kDeclared it has neither a FaultTracker nor a sampler: a layer's accesses
// are what it declared, and the memory is never protected.
//
// Ownership: it owns its FaultTracker (so at most one exists, process-wide) and its sampler
// thread; it borrows the Counters, which must outlive it. Destroying it (or finish()) unprotects
// everything. Thread safety: on_allocate and on_free from any thread; the layer events and
// finish() from the one thread that drives training.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tensortier/profiler/counters.h"
#include "tensortier/profiler/fault_tracker.h"
#include "tensortier/profiler/step_profile.h"
#include "tensortier/step_observer.h"

namespace tensortier::profiler {

// Where a profile's accesses come from.
enum class AccessSource {
  // Page protection: what each layer and the host code between layers really touched, page by
  // page (the FaultTracker; one profile at a time in a process).
  kPageProtection,
  // The layers' declarations alone (what layer_begin was told it reads and writes): every page
  // of a declared object counted read or written, written-only as an overwrite, nothing
  // protected, no fault taken. For memory page protection cannot see (a GPU's), and for a
  // profile without the faults' cost. It trusts the declarations: a layer that
  // writes part of an object must declare it read too, and host code must pin what it touches.
  kDeclared,
};
// "protection" or "declared"; anything else is an error naming both.
Result<AccessSource> parse_access_source(std::string_view name);
std::string_view to_string(AccessSource source);

struct ProfileOptions {
  bool enabled = true;
  AccessSource accesses = AccessSource::kPageProtection;
  // Which step of a run of like steps to profile, from 0: the default 1 is the second, after a
  // warm-up step. A step whose layers differ from the profiled one's is profiled anew.
  std::uint64_t step = 1;
  // Protection unit for objects this large or larger (smaller ones are one unit):
  // kHugePageBytes (default, cheap with transparent huge pages) or kSmallPageBytes (exact pages).
  std::size_t granularity_bytes = kHugePageBytes;
  std::uint32_t sample_interval_us = 1000;  // re-protection sampling period in a layer; 0: off
  double sample_fraction = 0.25;            // share of granted pages re-protected per period
  std::size_t sample_max_units = 256;       // at most this many per period
  bool counters = true;                     // read Counters at every layer boundary
  // Writes told by userfaultfd WP_ASYNC where the kernel has it (fewer faults, but slower on
  // training steps: docs/RESULTS.md); false: page protection only. FaultTracker::Options.
  bool async_writes = false;
  std::string
      json_path;  // when not empty, the runtime writes the first profile there (later: <name>.step<N>.<ext>)
};

// Checks the options a profile can run with: granularity 4 KiB or 2 MiB, sample fraction in
// [0, 1]. Errors (kInvalidArgument) name the bad value.
Status validate(const ProfileOptions& options);

class StepProfiler final : public StepObserver {
 public:
  // Installs the fault tracker and protects every span of the live objects (object, span of it).
  // `step`: the number the profiled step will have. Errors: another profile is in progress
  // (kFailedPrecondition), a bad option (kInvalidArgument), a thread that could not be given an
  // alternate signal stack, or a sampler thread that could not be started (kUnavailable).
  static Result<std::unique_ptr<StepProfiler>> start(const ProfileOptions& options,
                                                     FaultTracker::Lookup lookup, const void* context,
                                                     std::uint64_t step,
                                                     const std::vector<std::pair<ObjectInfo, SpanView>>& live,
                                                     Counters* counters);
  ~StepProfiler() override;
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  // StepObserver. `span`: the object's own span, or its group chunk for a small object.
  void on_allocate(const ObjectInfo& object, const SpanView& span) override;
  // Before the object's memory is freed: its own span is unprotected first.
  void on_free(ObjectId id, const SpanView& span) override;
  // Before memory goes back to its tier (ObjectAllocator's release observer): unprotects it.
  void on_release(const SpanView& span) override;
  void on_step_begin(std::uint64_t step) override;
  void on_host_pin(std::span<const ObjectId> ids) override;
  void on_layer_begin(const LayerEvent& event) override;
  void on_layer_end(const LayerEndEvent& event) override;
  // The layers' times as a device measured them (their work ran beside the host: a GPU's), in
  // the order they began, replacing the host's from on_layer_end; a count other than the layers'
  // changes nothing. Before finish().
  void set_layer_durations(std::span<const std::uint64_t> durations_ns);
  // Ends the profile: unprotects everything and returns it.
  StepProfile finish(std::uint64_t signature, std::uint64_t duration_ns,
                     std::uint64_t allocator_peak_live_bytes);

 private:
  StepProfiler(const ProfileOptions& options, std::unique_ptr<FaultTracker> tracker, Counters* counters);
  void sampler_loop();
  void stop_sampler();                       // ends and joins the sampler thread; idempotent
  std::vector<SpanAccessProfile> collect();  // none without a tracker
  // AccessSource::kDeclared: `layer`'s declarations as accesses.
  std::vector<SpanAccessProfile> declared_accesses(const LayerProfile& layer);

  ProfileOptions options_;
  std::unique_ptr<FaultTracker> tracker_;  // null with AccessSource::kDeclared
  std::string declared_why_;               // why a protection profile went by declaration ("": it did not)
  Counters* counters_;
  StepProfile profile_;
  std::vector<double> counters_at_begin_;
  std::vector<std::string> watch_errors_;

  std::mutex mutex_;  // guards the members below (allocations and frees come from any thread)
  std::unordered_map<ObjectId, ObjectProfile> objects_;
  std::vector<SpanView> pending_;  // spans to protect when the next layer begins
  std::uint32_t layers_begun_ = 0;
  // Objects the training thread allocates while a layer runs (PyTorch makes a layer's outputs
  // inside it): born at that layer and written by it, as if declared (on_layer_end adds them).
  bool layer_open_ = false;
  std::vector<ObjectId> born_in_layer_;
  std::uint64_t live_bytes_ = 0;
  bool step_begun_ = false;  // false between the step before and the profiled one

  std::mutex sampler_mutex_;  // held while sampling; guards in_layer_ and stop_
  std::condition_variable sampler_wake_;
  bool in_layer_ = false;
  bool stop_ = false;
  std::thread sampler_;
};

}  // namespace tensortier::profiler
