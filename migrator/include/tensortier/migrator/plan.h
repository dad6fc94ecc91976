// Plans: where each object of a training step lives, and which moves run when. A policy is a pure
// function from PlanInputs (one profiled step, two tiers, a fast-tier budget, move and slow-access
// rates) to a Plan written in object keys, so it holds for every step of the profiled kind.
//
// Time is counted in layer boundaries: boundary i is just before layer i begins; an object alive
// over layers [born, freed) exists from boundary `born` to boundary `freed`. A move "after layer
// i" is handed to the mover when layer i ends and is needed by layer `needed_by`; a move after
// the last layer prepares the next step (the step repeats).
//
// Policies (policy_names()):
//   fast-only, slow-only  references: every object on one tier, no moves;
//   first-touch           the OS default: each object on the fast tier if it fits when it is
//                         born (persistent objects first, in key order), else slow; no moves;
//   interleave            objects spread over the tiers in the ratio of the fast budget to the
//                         step's peak, as numactl --interleave or memkind's memtier would, within
//                         the budget; no moves;
//   reactive              no knowledge of the future (Linux NUMA-balancing tiering / TPP at object
//                         granularity): access scores that decay per layer, a slow object promoted
//                         after a layer that used it once its score reaches a threshold, room made
//                         by demoting the least recently used; born fast while there is room. Played
//                         online over a few repeats of the step; the last one (its steady state) is
//                         the plan. Decay and threshold: the pair the simulator predicts cheapest;
//   reactive-2m           reactive at 2 MiB page granularity (Linux tiering moves pages, not
//                         objects): the same policy played over each object's 2 MiB segments
//                         (in_segments), so part of an object can be fast; an object is born
//                         whole on one tier (fast if all of it fits), its segments promoted and
//                         demoted apart. Tuned the same way;
//   autoswap              AutoSwap (arXiv 1903.06631): objects of 1 MiB or more idle across the
//                         step's peak, ranked by absence time, absence time x size or their vote
//                         (the one predicted cheapest), swapped out after their use before the peak
//                         and back in early enough for their use after it, until the peak fits;
//                         what still does not fit stays slow;
//   sentinel              short-lived objects (profile class kShort) fast for their whole life in
//                         a region at the offsets the offset planner gives (region_offsets; the
//                         runtime makes it one arena); the others managed per migration
//                         interval: an object used in interval k is fast during k and, prefetched,
//                         during k-1, moved in when k-1 starts and out after its last use in the
//                         last interval that needs it; what does not fit stays slow (hottest kept
//                         fast; an interval's set held to the budget over the whole interval or at
//                         each layer: SentinelCount). The interval length and count are those
//                         whose predicted cost (move time the intervals' compute cannot hide, plus
//                         slow accesses) is least; where the budget cannot hold the region, the
//                         short-lived objects are managed too;
//   oracle                full knowledge of the step's accesses: the plan the simulator predicts
//                         cheapest among an exact model's (residency_model.h: a mixed-integer
//                         program over which objects are fast at each boundary, solved by
//                         COIN-OR CBC within a time limit, its moves in then handed out as early
//                         as the budget allows), its own heuristics (at each boundary the objects
//                         used within a lookahead are moved in, nearest use first, making room by
//                         moving out those used furthest away, or clean ones first: Belady's rule
//                         with prefetch, over every lookahead) and every other whole-object
//                         policy's plan (Plan::variant names the one it chose; reactive-2m's
//                         page-granular plan is not among them; all weighed as if every move
//                         copied, dead bytes or not). The exact model leaves out time
//                         (late moves, waits), so its optimum is a lower bound on every
//                         whole-object plan's prediction (Plan::bound_extra_ns), not a plan that
//                         reaches it; over in_segments() inputs it bounds page-granular plans.
// Small objects (under a page, sharing group chunks) are not planned: they stay where the runtime
// puts them (the fast tier first) and the plan keeps room for them (small_reserve_bytes).
//
// Thread safety: pure functions; a Plan is a value.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tensortier/allocator/object_allocator.h"
#include "tensortier/profiler/step_profile.h"
#include "tensortier/status.h"

namespace tensortier::migrator {

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
  // Touched where no pin announces it: a move could race that code (a write lost to the copy, a
  // read of the old address). Every plan leaves it where it is born (leave_in_place).
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
  // The oracle's exact solver (residency_model.h) stops after this long with the best it found.
  double oracle_time_limit_s = 10;

  // What one byte of a layer's slow-tier traffic holds the slow tier for (a read or a write, at
  // the mean of the two rates): simulate() and the exact model both count it so.
  double slow_traffic_ns_per_byte() const { return (1.0 / move_in_gbps + 1.0 / move_out_gbps) / 2.0; }
};

// Inputs from a step profile: objects of a page or more with their lifetimes and the layers that
// declare them; layer times (the unprofiled time where the profile has it); the small-object
// reserve (each group's peak of small bytes in whole 64 KiB chunks, plus one chunk). Rates and
// the budget are the caller's. Errors: kInvalidArgument for a profile with no layers, a fast
// tier equal to the slow one, or a budget of 0.
Result<PlanInputs> inputs_from_profile(const profiler::StepProfile& profile, TierIndex fast, TierIndex slow,
                                       std::uint64_t fast_budget_bytes);

struct PlannedMove {
  ObjectKey key = 0;
  TierIndex to = 0;
  std::uint32_t after_layer = kStepStart;  // handed to the mover when this layer ends
  std::uint32_t needed_by = 0;             // the layer that needs it there (layers: the next step)
  // The last layer it helps: a move in still helps the later uses of its stay in fast memory
  // when it misses the first; kStepStart: always useful (moves out make room).
  std::uint32_t useful_until = kStepStart;
  std::uint64_t bytes = 0;
  // simulate(): a move in that the layer needing it would find under way (the layer waits) or not
  // begun (the layer finds the object slow).
  bool predicted_late = false;
  // simulate(): the object's bytes are dead where the move is handed out (bytes_dead_at) and the
  // inputs' dead_moves_free is set: the executor asks for a move that does not copy.
  bool discard = false;
  // simulate(): a move in not begun when births took the room it needs: the allocator refuses it
  // (no room on the fast tier) and the object stays on the slow tier until its next move.
  bool predicted_failed = false;
};

struct Plan {
  std::string policy;
  TierIndex fast = 0, slow = 1;
  std::uint64_t fast_budget_bytes = 0;
  std::map<ObjectKey, TierIndex> start;  // where each persistent object is when a step begins
  std::map<ObjectKey, TierIndex> birth;  // where each object born in the step is allocated
  std::vector<PlannedMove> moves;        // by after_layer; at one, outs before ins (the mover's order)
  std::string variant;  // the oracle: whose plan it chose; sentinel: how it counted its fast sets
  // Objects the policy moved that the plan leaves in place instead (leave_in_place), by key.
  std::vector<ObjectKey> left_in_place;
  // Page-granular: objects larger than kSegmentBytes are planned segment by segment, under part
  // keys (in start, birth and moves; every segment of an object is born on one tier), and the
  // executor moves their segments apart (MoveOptions::segment). 0: whole objects.
  std::uint64_t segment_bytes = 0;
  std::uint32_t interval_layers =
      0;                           // sentinel's migration interval, the oracle's lookahead or lead (0: none)
  std::uint64_t region_bytes = 0;  // sentinel's short-lived region (offset planner)
  // Each short-lived object's offset in that region (the offset planner's): the runtime places
  // them there, in one arena of region_bytes on the fast tier, and they never move.
  std::map<ObjectKey, std::uint64_t> region_offsets;
  // Predictions (simulate()).
  std::uint64_t peak_fast_bytes = 0;
  std::uint64_t bytes_in = 0, bytes_out = 0;  // moved into / out of fast memory per step
  std::uint64_t clean_out_bytes = 0;          // of bytes_out, moved out clean (no copy)
  std::uint64_t discard_bytes = 0;      // of bytes_in and bytes_out, moved with their bytes dead (no copy)
  std::uint64_t slow_access_bytes = 0;  // declared bytes the layers find on the slow tier
  double predicted_extra_ns = 0;        // unhidden move time + slow accesses + mover CPU, per step
  double mover_cpu_ns = 0;              // the copies' CPU time per step (clean moves take none)
  double mover_busy_ns = 0;             // the mover's time in copies per step, slow-tier waits included
  double room_wait_ns = 0;              // births waiting for moves out to make their room, per step
  std::uint64_t fallback_bytes = 0;     // births planned fast that find no room in time: slow instead
  std::uint64_t failed_in_bytes = 0;    // moves in refused for room births took first (predicted_failed)
  // Planned bytes on the fast tier at each boundary 0..layers, once that boundary's moves are
  // handed out (as if each were done at once), and the room kept for small objects beside them.
  std::vector<std::uint64_t> fast_bytes_by_boundary;
  std::uint64_t small_reserve_bytes = 0;
  // A floor no plan can beat: the bytes that cannot be in fast memory at the step's peak must be
  // written to the slow tier and read back every step (training rewrites every byte it keeps), so
  // the slow tier is busy at least (peak - budget) x (1/write + 1/read bandwidth) per step; a step
  // takes at least that or its compute, whichever is longer (emulated tiers charge layer accesses
  // with no overlap, so only moves can hide behind compute).
  double floor_slow_ns = 0;
  double compute_ns = 0;  // the step's layers on fast memory
  // The oracle: no valid plan for these inputs predicts less than this (residency_model.h's
  // bound; 0 where the solver gave none), and what the solver did.
  double bound_extra_ns = 0;
  std::string solver;
};

// Whether an object's bytes are dead at boundary b (just before layer b): no layer reads them
// again before one overwrites them. Its next use at or after b in this step overwrites it; or,
// for an object freed within the step, no layer uses it again. Never across the step's end (an
// object alive after the step keeps its bytes from its last use on: code between steps may read
// them, as a program that logs a gradient's norm now and then does, unseen by the profile), and
// never for an object accessed_undeclared.
bool bytes_dead_at(const PlanInputs& inputs, const PlanObject& object, std::uint32_t boundary);

const std::vector<std::string>& policy_names();
// The names, comma-separated, for error messages.
std::string known_policies();

// The inputs with each object larger than kSegmentBytes made one object per segment (part keys,
// the segment's bytes, the object's lifetime and uses): what a page-granular plan is made and
// played over. Moving out a segment is never clean (a segment keeps no shadow).
PlanInputs in_segments(const PlanInputs& inputs);

// The plan `policy` makes. Errors: kInvalidArgument naming an unknown policy and the known ones.
Result<Plan> make_plan(std::string_view policy, const PlanInputs& inputs);

// How sentinel holds an interval's fast set to the budget, and ranks the objects it offers it.
enum class SentinelCount {
  // An object in the set of interval k holds its bytes for the whole of k (Sentinel's paper).
  kPerInterval,
  // At each layer: an object holds its bytes over the layers it is alive in and fast, from its
  // birth or its move in to its death or, where the next interval does not need it, its move out
  // after its last use; objects that are not fast at the same layers share the room.
  kPerLayer,
  // kPerLayer, with candidates ranked by uses per byte per layer held instead of per byte, so
  // short stays come first.
  kPerLayerByHeld,
  // kPerLayer, ranked by uses per layer held: a use reads or writes all of an object, so its uses
  // are each of its pages' accesses (Sentinel's hotness, per page), over the layers it holds them.
  kPerLayerByHotHeld,
};
// Every count, in the order the "sentinel" policy tries them.
inline constexpr std::array<SentinelCount, 4> kSentinelCounts{
    SentinelCount::kPerInterval, SentinelCount::kPerLayer, SentinelCount::kPerLayerByHeld,
    SentinelCount::kPerLayerByHotHeld};

// Sentinel's plan with migration intervals of `interval_layers` layers (at least 1), its
// predictions not filled: objects marked short_lived fast for their whole life in a region of
// `region_bytes` kept out of the budget; the others fast in the intervals that use them (hottest
// first) and, prefetched, in the interval before, while they fit as `count` counts. The
// "sentinel" policy tries every interval length and count, with and without the region, and keeps
// the valid plan simulate() predicts cheapest.
Plan sentinel_with(const PlanInputs& inputs, std::uint32_t interval_layers, std::uint64_t region_bytes,
                   SentinelCount count);

// Makes the plan move none of the objects that stay (PlanObject::stays): each keeps one tier for
// its whole life, the fast one where it fits beside the rest of the plan at every boundary it is
// alive at (largest first), else the slow one. Objects in the short-lived region never move and
// are left as they are. make_plan applies it to every policy's plan; its predictions are not
// filled. Returns how many objects it changed (their keys added to Plan::left_in_place).
std::size_t leave_in_place(Plan& plan, const PlanInputs& inputs);

// Plays the plan over one step (and into the next): fills its predictions and returns "" when it
// is valid, else what is wrong (a move of an object not alive then, a layer boundary where the
// fast tier would pass its budget, naming the boundary and the bytes). In time, as the runtime
// plays it: one mover takes the moves in order from the end of the layer they follow; moves and
// layers' slow traffic share the slow tier; a layer waits for a move of its objects under way; a
// boundary's births come after its moves are handed out and find the room of a move out only
// when that move ends (they wait for it, or fall back past inputs.room_wait_ns), and a move in
// that has not begun when births take the room it needs fails (the allocator refuses it; the
// object stays slow). The budget at a boundary is checked as if its moves were done.
std::string simulate(Plan& plan, const PlanInputs& inputs);

// The plan with the moves in that simulate() predicts late left out: their objects stay where they
// are (the slow tier) until their next planned move, and the moves out that would then find an
// object already slow go too, so the mover and the slow tier are free for the moves that arrive in
// time. Moves that prepare the next step (needed_by >= layers) stay. Its predictions are filled.
// None where no move is late (or leaving them out would not give a valid plan). The runtime's
// trial weighs the two by measured step time (RuntimeOptions::trial_steps).
std::optional<Plan> without_late_moves(const Plan& plan, const PlanInputs& inputs);

// The plan with the moves in at `left_out` (indices into plan.moves; other indices are ignored)
// left out, as without_late_moves leaves out the late ones. None where nothing is left out or the
// result would not be valid.
std::optional<Plan> without_moves_in(const Plan& plan, const PlanInputs& inputs,
                                     std::span<const std::size_t> left_out);

// One late move in (PlannedMove::predicted_late) judged by measured time, as sentinel's trial
// judges "wait for it, or leave the object slow" move by move: the layers it can change (from the
// one after it is handed out to the last it helps: the copy, the wait and the accesses it saves
// fall there) timed under the plan as made and under the plan without its late moves.
struct LateMoveVerdict {
  std::size_t move = 0;           // index in plan.moves
  std::uint32_t first_layer = 0;  // the layers it was judged on, inclusive
  std::uint32_t last_layer = 0;
  double with_ns = 0;                                 // their time with the late moves
  double without_ns = 0;                              // and without them
  bool keep() const { return with_ns < without_ns; }  // ties leave it out: no copy, no CPU
};

// Judges each late move in of `plan` (needed within the step) by `with_layer_ns` and
// `without_layer_ns`: each layer's time, from the end of the layer before it (so the waits for
// moves before a layer begins are counted) to its end, under the plan as made and without its late
// moves (medians over the trial's steps). Layers where late moves' windows overlap count for each
// of them. Empty where either span has fewer entries than the step has layers.
std::vector<LateMoveVerdict> judge_late_moves(const Plan& plan, std::uint32_t layers,
                                              std::span<const double> with_layer_ns,
                                              std::span<const double> without_layer_ns);

}  // namespace tensortier::migrator
