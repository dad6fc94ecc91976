// What a policy plans from: one profiled step's objects (lifetimes, the layers that use them),
// its layer times, two tiers, a fast-tier budget and the rates of moves and slow accesses; built
// from a StepProfile in one place (plan_inputs.cc). Time is counted in layer boundaries: boundary
// i is just before layer i; an object alive over layers [born, freed) exists from boundary `born`
// to boundary `freed`.
//
// Thread safety: pure functions; PlanInputs is a value.
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>
#include <vector>

#include "tensortier/allocator/object_allocator.h"
#include "tensortier/profiler/step_profile.h"
#include "tensortier/status.h"

namespace tensortier::migrator {

// A move "after layer kStepStart" is handed out before the step's first layer.
inline constexpr std::uint32_t kStepStart = std::numeric_limits<std::uint32_t>::max();

// How long an object born with no room on the fast tier waits, by default, for moves out to make
// it (RuntimeOptions::room_wait, and PlanInputs::room_wait_ns for plans made without a runtime).
inline constexpr std::chrono::milliseconds kDefaultRoomWait{50};

// Page-granular plans (Plan::segment_bytes, the policy reactive-2m) name each kSegmentBytes
// segment of an object larger than one apart, by a part key: the object's key with the segment's
// index + 1 in bits 48..62. Keys with anything there already (no allocation ordinal or object id
// comes near 2^48) and objects of more than kMostSegments segments are not split.
inline constexpr unsigned kPartShift = 48;
inline constexpr ObjectKey kPartMask = ObjectKey{0x7fff} << kPartShift;
inline constexpr std::uint32_t kMostSegments = 0x7ffe;
constexpr ObjectKey part_key(ObjectKey whole, std::uint32_t segment) {
  return whole | ((ObjectKey{segment} + 1) << kPartShift);
}
constexpr ObjectKey whole_key(ObjectKey key) {
  return key & ~kPartMask;
}
// The segment a part key names; kWholeObject for a key that names a whole object.
constexpr std::uint32_t segment_of(ObjectKey key) {
  const auto part = static_cast<std::uint32_t>((key & kPartMask) >> kPartShift);
  return part == 0 ? kWholeObject : part - 1;
}

// One planned object as the policies see it.
struct PlanObject {
  ObjectKey key = 0;
  std::uint64_t bytes = 0;            // whole pages it owns (what it takes of a tier's budget)
  std::uint32_t born = 0;             // first boundary it exists at (0: before the step)
  std::uint32_t freed = 0;            // boundary it is gone at (`layers`: alive after the step)
  bool persistent = false;            // alive before and after the step
  bool short_lived = false;           // profile class kShort
  std::vector<std::uint32_t> uses;    // layers that declare it (read or written), ascending
  std::vector<std::uint32_t> writes;  // layers that declare it written, ascending (a subset of uses)
  // Layers that overwrite it, ascending (a subset of writes): they declare it written and not read,
  // and the profile saw them write every page of it with no page read first. Its bytes are dead
  // before such a layer (bytes_dead_at).
  std::vector<std::uint32_t> overwrites;
  // Code the profile saw touch it outside the layers that declare it (host code between layers,
  // before the first one from the end of the step before, after the last one, or a layer that did
  // not declare it): its bytes are never taken for dead.
  bool accessed_undeclared = false;
  // Host code pinned it (Runtime::pin_objects) in the profiled step: its accesses outside the
  // layers wait for moves and stop them.
  bool host_pinned = false;
  // The tier it is on: as the profile saw it, and where the runtime plans, as it is then. A
  // persistent object that stays (below) is where this says in every plan (Plan::stay_put).
  TierIndex tier = 0;
  // Touched where no pin announces it: a move could race that code (a write lost to the copy, a
  // read of the old address). Every plan leaves it where it is born (leave_in_place), and a
  // persistent one where it is (`tier`: no policy weighs it, no plan install moves it).
  bool stays() const { return accessed_undeclared && !host_pinned; }
};

struct PlanInputs {
  std::uint32_t layers = 0;
  std::vector<PlanObject> objects;      // objects of a page or more
  std::vector<std::uint64_t> layer_ns;  // each layer's time on fast memory (no emulated charge)
  TierIndex fast = 0;
  TierIndex slow = 1;
  std::uint64_t fast_budget_bytes = 0;    // the most bytes the fast tier may hold
  std::uint64_t small_reserve_bytes = 0;  // kept for small objects' chunks (not planned)
  std::uint64_t peak_bytes = 0;           // the step's peak of planned bytes alive at once
  double move_in_gbps = 10;               // moves into fast memory (GB/s = bytes/ns)
  double move_out_gbps = 10;              // moves out of it
  double slow_access_ns_per_byte = 0.1;   // what one byte declared on the slow tier adds to a layer
  // The runtime keeps an object's slow pages when it moves in (ObjectAllocator's shadow copies):
  // moving it out again before any layer writes it costs no copy.
  bool clean_moves_out_free = false;
  // The runtime moves an object whose bytes are dead (bytes_dead_at) without copying them
  // (MoveOptions::discard_unless_pinned_after): such a move takes no slow-tier time and no mover CPU.
  bool dead_moves_free = false;
  // The mover's CPU: what copying one byte costs it, and the share of that time the layers lose
  // (1 when the training threads use every core, as oneDNN's do by default: the mover then takes
  // a core from a parallel region that waits for its slowest thread). Counted in the prediction,
  // so a policy that weighs variants weighs their moves' CPU too.
  double mover_cpu_ns_per_byte = 0;
  double mover_steals_compute = 0;
  // The longest an object born with no room on the fast tier waits for moves out to make it before
  // it falls back to the slow tier (RuntimeOptions::room_wait).
  double room_wait_ns = std::chrono::duration<double, std::nano>(kDefaultRoomWait).count();
  // The runtime runs plans in ready memory (places.h): make_plan lays each plan out in arenas
  // and has the policy plan again where the layout does not fit the budget.
  bool ready_memory = false;
  // The oracle's exact solver (residency_model.h) stops after this long with the best it found.
  double oracle_time_limit_s = 10;
  // The changes the search policy draws after its seeds (policies/search.cc; each played where it
  // applies and fits): its planning time, the same for the same profile.
  std::uint32_t search_evaluations = 400;
  // The timed bound's channel program (timed_bound.h) is solved within this long; 0: not solved
  // (a linear program of ~90,000 columns on ResNet-18, seconds each time a plan is made).
  double timed_program_s = 0;
  // The tightened program (integral at uses, timed_bound.h) is searched within this long; 0: not.
  double tightened_program_s = 0;

  // What one byte of a layer's slow-tier traffic holds the slow tier for (a read or a write, at
  // the mean of the two rates): simulate() and the exact model both count it so.
  double slow_traffic_ns_per_byte() const { return (1.0 / move_in_gbps + 1.0 / move_out_gbps) / 2.0; }
  // The rates of a link that moves and slow accesses both cross (a GPU's: its kernels read and
  // write pinned memory over the link its copies take): moves in at `to_fast_gbps`, out at
  // `to_slow_gbps`, and a byte declared on the slow tier costs one crossing at their mean, as
  // slow_traffic_ns_per_byte counts it. Copies take no CPU (the GPU's copy engines make them).
  // Rates of 0 or below (not measured) change nothing.
  void set_link_rates(double to_fast_gbps, double to_slow_gbps) {
    if (!(to_fast_gbps > 0) || !(to_slow_gbps > 0)) return;
    move_in_gbps = to_fast_gbps;
    move_out_gbps = to_slow_gbps;
    slow_access_ns_per_byte = slow_traffic_ns_per_byte();
    mover_cpu_ns_per_byte = 0;
  }
};

// What a runtime's tiers and settings price a plan with, as plain numbers read off its tiers' cost
// models and its options; set_rates puts them into PlanInputs, the one place that knows how. A
// rate of 0 is not known: the inputs keep theirs.
struct TierRates {
  double slow_read_gbps = 0;           // the slow tier's channel: moves in read it,
  double slow_write_gbps = 0;          // moves out write it
  double slow_access_ns_per_byte = 0;  // a byte a layer reads or writes there, on average
  double fast_read_gbps = 0;           // DRAM as all of the machine's threads read it,
  double fast_write_gbps = 0;          // and write it
  unsigned cpu_threads = 1;            // the mover copies at one thread's share of those
  double mover_steals_compute = 0;     // PlanInputs::mover_steals_compute
  double link_to_fast_gbps = 0;        // a GPU's link, which its copies and kernels cross
  double link_to_slow_gbps = 0;        // (PlanInputs::set_link_rates)
  bool clean_moves_out_free = false;
  bool dead_moves_free = false;
  bool ready_memory = false;
  double room_wait_ns = std::chrono::duration<double, std::nano>(kDefaultRoomWait).count();
  double timed_program_s = 0;
  double tightened_program_s = 0;
};

// `rates` into `inputs`: moves and slow accesses at the slow tier's rates, the mover's CPU per
// byte as one thread's share of DRAM's bandwidths (a byte read and written), a GPU's link where
// given (over the slow tier's), the settings as they are.
void set_rates(PlanInputs& inputs, const TierRates& rates);

// The key a plan names an object by: its own, or its id where it was made in an earlier step than
// the profiled one (then its key, the allocation's ordinal in that step, is also the key of an
// object of the profiled step). At the plan's start, the objects in Plan::start (alive before and
// after the profiled step) are all made before it.
constexpr ObjectKey plan_key(ObjectKey key, ObjectId id, bool made_before_step) {
  return is_step_key(key) && made_before_step ? ObjectKey{id} : key;
}

// Inputs from a step profile: objects of a page or more with their lifetimes and the layers that
// declare them; layer times (the unprofiled time where the profile has it); the small-object
// reserve (each group's peak of small bytes in whole 64 KiB chunks, plus one chunk). Rates and
// the budget are the caller's. Errors: kInvalidArgument for a profile with no layers, a fast
// tier equal to the slow one, or a budget of 0.
Result<PlanInputs> inputs_from_profile(const profiler::StepProfile& profile, TierIndex fast, TierIndex slow,
                                       std::uint64_t fast_budget_bytes);

// Whether an object's bytes are dead at boundary b (just before layer b): no layer reads them
// again before one overwrites them. Its next use at or after b in this step overwrites it; or,
// for an object freed within the step, no layer uses it again. Never across the step's end (an
// object alive after the step keeps its bytes from its last use on: code between steps may read
// them, as a program that logs a gradient's norm now and then does, unseen by the profile), and
// never for an object accessed_undeclared.
bool bytes_dead_at(const PlanInputs& inputs, const PlanObject& object, std::uint32_t boundary);

// The inputs with each object larger than kSegmentBytes made one object per segment (part keys,
// the segment's bytes, the object's lifetime and uses): what a page-granular plan is made and
// played over. Moving out a segment is never clean (a segment keeps no shadow).
PlanInputs in_segments(const PlanInputs& inputs);

}  // namespace tensortier::migrator
