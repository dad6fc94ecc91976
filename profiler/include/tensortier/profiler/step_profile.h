// StepProfile: what one profiled training step did, object by object and layer by layer — the
// input the migrator plans from, and what `tensortier-profile` prints and plots.
//
// Layer positions: a step's layers are numbered from 0 in the order they began. An object's
// lifetime is the half-open range of layers [born_at_layer, freed_at_layer): born_at_layer is the
// number of layers that had begun when it was allocated (one less where the training thread made
// it inside a running layer: that layer's output, which then counts among its declared writes),
// freed_at_layer the number that had begun when it was freed. std::nullopt means "before the step
// began" and "after the step ended".
// The JSON form (to_json) is documented in docs/PROFILE.md; every figure names its source.
//
// Plain data: no ownership beyond its members, no thread safety of its own.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tensortier/allocator/object_allocator.h"
#include "tensortier/status.h"

namespace tensortier::profiler {

// Lifetime classes, the basis for co-allocating groups.
enum class LifetimeClass {
  kPersistent,  // alive before and after the step (weights, gradients of weights, optimizer state)
  kLong,        // born and freed in the step, alive across more than a tenth of its layers
                // (activations kept for backward)
  kShort,       // born and freed in the step within a tenth of its layers (temporaries,
                // gradients of activations)
  kCrossing,    // alive at only one end of the step (born before it and freed in it, or the reverse)
};
std::string_view to_string(LifetimeClass c);

struct ObjectProfile {
  ObjectId id = 0;
  ObjectKey key = 0;  // the same in every step of this signature: what a plan names it by
  std::string name;
  std::uint64_t bytes = 0;
  std::uint64_t reserved_bytes = 0;  // whole pages it owns; 0 for a small object in a group chunk
  GroupId group = kDefaultGroup;
  TierIndex tier = 0;
  bool small = false;
  std::optional<std::uint32_t> born_at_layer;
  std::optional<std::uint32_t> freed_at_layer;
  LifetimeClass lifetime = LifetimeClass::kPersistent;
  // Host code pinned it (Runtime::pin_objects) while the step was profiled: its accesses outside
  // the layers are announced, and no move runs under them.
  bool host_pinned = false;
};

// What a layer (or the host code before it) did to one span: an object of a page or more, or
// the shared chunk of a group's small objects.
struct SpanAccessProfile {
  std::uint64_t id = 0;  // object id, or group id when is_group
  bool is_group = false;
  std::uint64_t page_bytes = 0;     // protection unit the pages below are counted in
  std::uint64_t pages_read = 0;     // units whose first access was a read
  std::uint64_t pages_written = 0;  // units written
  std::uint64_t faults = 0;
  double touches = 0;  // estimated unit-touches (re-protection sampling); >= pages touched
  bool coarse = false;
  bool read() const { return pages_read > 0; }
  bool written() const { return pages_written > 0; }
};

struct Counter {
  std::string name;    // e.g. "page_faults", "task_clock_ns", "cycles"
  std::string source;  // e.g. "perf_event software", "PAPI", "getrusage"
  double value = 0;
};

struct LayerProfile {
  std::string name;
  std::uint32_t index = 0;
  std::uint64_t duration_ns = 0;             // wall time in the profiled step (with its faults)
  std::uint64_t unprofiled_duration_ns = 0;  // the same layer in the step before (0: unknown)
  std::uint64_t emulated_charge_ns = 0;      // of duration_ns, charged for emulated slow memory
  std::vector<ObjectId> declared_reads;      // what the program said at layer_begin
  std::vector<ObjectId> declared_writes;
  std::vector<SpanAccessProfile> accesses;         // what it touched (page protection)
  std::vector<SpanAccessProfile> accesses_before;  // host code between the previous layer and it
  std::uint64_t live_bytes = 0;                    // objects alive in it (from the lifetimes)
  std::uint64_t allocator_live_bytes = 0;          // the allocator's own count at layer_begin
  std::vector<Counter> counters;
};

struct StepProfile {
  std::uint64_t step = 0;       // index of the profiled step (0-based) in the run
  std::uint64_t signature = 0;  // hash of its layer names, argument sizes and births before each layer
  std::uint64_t granularity_bytes = 0;  // protection unit for spans that large or larger
  std::uint32_t sample_interval_us = 0;
  double sample_fraction = 0;
  std::uint64_t duration_ns = 0;       // the profiled step's wall time
  std::uint64_t faults = 0;            // protection faults taken
  std::vector<ObjectProfile> objects;  // every object alive at some point of the step
  std::vector<LayerProfile> layers;
  std::vector<SpanAccessProfile> accesses_after;  // host code after the last layer
  std::uint64_t peak_live_bytes = 0;              // most bytes of live objects at any moment
  std::uint32_t peak_at_layer = 0;                // layers begun when the peak was reached
  std::uint64_t allocator_peak_live_bytes = 0;    // the allocator's own peak over the step
  std::string counter_source;                     // where the per-layer counters came from
  std::string write_tracking;                     // how writes were told (FaultTracker::write_tracking)
  std::string access_source = "protection";       // where accesses came from: "protection" or "declared"
  std::vector<std::string> notes;                 // what the profile could not do, and why

  const ObjectProfile* object(ObjectId id) const;
  // Keys of the objects in id order (the allocation order): the same for every step of one kind.
  std::vector<ObjectKey> keys() const;
};

// Classifies an object from its lifetime in a step of `layer_count` layers.
LifetimeClass classify(const std::optional<std::uint32_t>& born, const std::optional<std::uint32_t>& freed,
                       std::uint32_t layer_count);

// The profile as JSON (docs/PROFILE.md), indented by `indent` spaces (-1: one line).
std::string to_json(const StepProfile& profile, int indent = 1);
// A profile back from its JSON (what to_json wrote): for planning offline from a profile of a run.
// Errors: kInvalidArgument naming what is missing or of the wrong type.
Result<StepProfile> from_json(std::string_view text);
// Writes to_json(profile) to `path`. Errors name the path.
Status write_json(const StepProfile& profile, const std::string& path);

}  // namespace tensortier::profiler
