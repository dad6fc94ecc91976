// tensortier's public C++ API: the one header a oneDNN-based training program includes.
//
// A Runtime owns the memory tiers of this machine and every object (tensor) placed on them.
// The program allocates its tensors through it, marks each training step and each layer (with
// the objects the layer reads and writes), and reads per-tier stats. Later parts (profiler,
// migrator) use these marks to learn one step and move objects ahead of the layers.
//
// Where the tiers come from, first match wins:
//   1. RuntimeOptions::tier_spec, when not empty;
//   2. the TENSORTIER_TIERS environment variable, when set and not empty;
//   3. hwloc discovery: one tier per NUMA node, ranked fast to slow by HMAT figures.
// The spec grammar is in tensortier/allocator/tier_spec.h and docs/TIERS.md.
//
// Profiling: unless turned off, the runtime profiles one step at object level (profiler/): by
// default the second of a run of steps with the same layers (names and argument sizes), and again
// whenever a new kind of step has run ProfileOptions::step times. The environment overrides
// RuntimeOptions::profile, so a linked program's profiling can change without a rebuild:
//   TENSORTIER_PROFILE=off | <step>      off, or which step of a run to profile (0-based)
//   TENSORTIER_PROFILE_GRANULARITY=4KiB | 2MiB
//   TENSORTIER_PROFILE_JSON=<path>       write each profile there as JSON (docs/PROFILE.md)
// While a step is profiled, object pages are protected between the layers' accesses: a program
// must not hand object memory to the kernel (read(2) into a tensor) during that step.
//
// Thread safety:
//   - allocate(), free(), object(), stats(), tiers() and describe() may be called from any
//     thread at any time;
//   - lookup() is lock-free and async-signal-safe (for SIGSEGV handlers);
//   - step_begin/step_end/layer_begin/layer_end belong to the one thread that drives training:
//     they must not be called concurrently with each other.
// Ownership: the Runtime owns all object memory; free() or destroying the Runtime releases it.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tensortier/allocator/object_allocator.h"
#include "tensortier/allocator/tier.h"
#include "tensortier/profiler/counters.h"
#include "tensortier/profiler/step_profiler.h"
#include "tensortier/status.h"

namespace tensortier {

struct RuntimeOptions {
  RuntimeOptions() = default;
  // Implicit on purpose: Runtime::create({"fast=dram:1GiB"}) reads as the spec it is.
  RuntimeOptions(std::string spec) : tier_spec(std::move(spec)) {}  // NOLINT(google-explicit-constructor)

  std::string tier_spec;  // empty: TENSORTIER_TIERS, else hwloc discovery
  profiler::ProfileOptions profile;
};

// One layer's execution as marked by the program.
struct LayerRecord {
  std::string name;
  std::uint32_t index = 0;        // position in its step, from 0
  std::vector<ObjectId> reads;    // objects the layer declared it reads
  std::vector<ObjectId> writes;   // objects the layer declared it writes
  std::uint64_t duration_ns = 0;  // wall time between layer_begin and layer_end
};

struct RuntimeStats {
  std::vector<TierUsage> tiers;  // fastest first
  std::uint64_t steps_completed = 0;
  std::uint64_t live_objects = 0;
};

class Runtime {
 public:
  // Opens the tiers and logs one line per tier. Errors: a malformed spec (quoting the bad part),
  // a tier the machine lacks (saying what to use instead).
  static Result<std::unique_ptr<Runtime>> create(const RuntimeOptions& options = {});
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // The spec the runtime runs with (after discovery), and where it came from:
  // "options", "TENSORTIER_TIERS" or "hwloc discovery (...)".
  const std::string& spec() const { return spec_; }
  const std::string& spec_source() const { return spec_source_; }
  std::size_t tier_count() const { return allocator_.tier_count(); }
  const Tier& tier(TierIndex index) const { return allocator_.tier(index); }
  // One line per tier, for people.
  std::string describe() const;

  // Places a named object; see ObjectAllocator::allocate for placement and errors.
  Result<ObjectInfo> allocate(std::string_view name, std::size_t bytes, GroupId group = kDefaultGroup,
                              TierIndex preferred = 0);
  Status free(const void* address);
  Result<ObjectInfo> object(const void* address) const { return allocator_.info(address); }
  bool lookup(const void* address, SpanView* out) const noexcept { return allocator_.lookup(address, out); }

  // Step and layer marks. Errors (kFailedPrecondition) for marks out of order: a layer outside a
  // step, a layer inside a layer, an end without a begin. layer_begin fails with kNotFound,
  // naming the pointer, if a read or write is not the start of a live object.
  Status step_begin();
  Status step_end();
  Status layer_begin(std::string_view name, std::span<const void* const> reads,
                     std::span<const void* const> writes);
  Status layer_end();
  bool in_step() const { return in_step_; }
  // Layers of the last completed step, in order.
  const std::vector<LayerRecord>& last_step_layers() const { return last_step_; }

  // The newest completed step profile (null before the first), and the one of the steps with
  // this signature (layer names and argument sizes; see StepProfile::signature).
  std::shared_ptr<const profiler::StepProfile> profile() const { return last_profile_; }
  std::shared_ptr<const profiler::StepProfile> profile_of(std::uint64_t signature) const;
  // The signature of the last completed step.
  std::uint64_t last_step_signature() const { return last_signature_; }
  // Profiles the next step whatever ProfileOptions::step says (even when profiling is off).
  void request_profile() { profile_requested_ = true; }
  const profiler::ProfileOptions& profile_options() const { return profile_options_; }
  // Changes how later steps are profiled (training thread, between steps). Errors: a
  // granularity other than 4 KiB or 2 MiB.
  Status set_profile_options(const profiler::ProfileOptions& options);

  RuntimeStats stats() const;

 private:
  Runtime(std::vector<std::unique_ptr<Tier>> tiers, std::string spec, std::string source,
          profiler::ProfileOptions profile_options);
  bool profile_due() const;
  void start_profile();
  void finish_profile(std::uint64_t step_duration_ns);

  ObjectAllocator allocator_;
  std::string spec_;
  std::string spec_source_;
  // Training-thread state (see thread safety above).
  bool in_step_ = false;
  bool in_layer_ = false;
  std::atomic<std::uint64_t> steps_completed_{0};  // read by stats() from any thread
  std::uint64_t layer_start_ns_ = 0;
  std::vector<LayerRecord> current_step_;
  std::vector<LayerRecord> last_step_;
  std::uint64_t step_start_ns_ = 0;
  std::uint64_t signature_ = 0;       // of the step in progress, built at each layer_begin
  std::uint64_t last_signature_ = 0;  // of the last completed step
  std::uint64_t run_length_ = 0;      // completed steps in a row with last_signature_

  // Profiling. profiler_ is used by allocate()/free() from any thread: profiler_mutex_ guards it.
  profiler::ProfileOptions profile_options_;
  std::mutex profiler_mutex_;
  std::unique_ptr<profiler::StepProfiler> profiler_;
  std::unique_ptr<profiler::Counters> counters_;  // opened at the first profile
  bool profile_requested_ = false;
  std::set<std::uint64_t> profile_failed_;  // signatures whose profile could not start
  std::map<std::uint64_t, std::shared_ptr<const profiler::StepProfile>> profiles_;  // by signature
  std::shared_ptr<const profiler::StepProfile> last_profile_;
};

// RuntimeOptions::profile with the TENSORTIER_PROFILE* variables applied. Errors name the
// variable and its bad value.
Result<profiler::ProfileOptions> resolve_profile_options(const RuntimeOptions& options);

// Resolves the tier spec the way Runtime::create does, without opening tiers: (configs, source).
Result<std::pair<std::vector<TierConfig>, std::string>> resolve_tier_spec(const RuntimeOptions& options);

}  // namespace tensortier
