// Plans: where each object of a training step lives, and which moves run when. A policy is a pure
// function from PlanInputs to a Plan written in object keys, so it holds for every step of the
// profiled kind; the policies are listed in one table (migrator/src/policies/registry.cc) and
// compared in docs/POLICIES.md. A move "after layer i" is handed to the mover when layer i ends
// and is needed by layer `needed_by`; a move after the last layer prepares the next step.
// Small objects (under a page, in group chunks) are not planned: the plan keeps room for them.
//
// Thread safety: pure functions; a Plan is a value.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "tensortier/migrator/plan_inputs.h"
#include "tensortier/status.h"

namespace tensortier::migrator {

// Ready memory (places.h): no place given.
inline constexpr std::uint64_t kNoPlace = ~std::uint64_t{0};

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
  // simulate(), moves out: the first boundary whose births find the move's place left (its copy
  // done); layers + 1 where that is past the step. Ready memory's layout keeps the place for it
  // until then where it can (lay_out_places_timed).
  std::uint32_t done_by = 0;
  // Ready memory (Plan::places): its destination's offset in the arena of tier `to` (the fast
  // arena, or the slow tier's arena of homes); kNoPlace: moved as without places.
  std::uint64_t place = kNoPlace;
};

// Ready memory (lay_out_places, places.h): one fast-tier arena holding every fast stay of the
// placed objects at planned offsets, and one slow-tier arena of homes for the objects that move.
// Empty where the plan was made without (PlanInputs::ready_memory) or is page-granular.
struct PlacesPlan {
  std::uint64_t fast_bytes = 0;  // the fast arena
  std::uint64_t home_bytes = 0;  // the arena of homes
  // Where each placed object is born, or is when a step begins (persistent objects): its offset in
  // the arena of the tier it is on then. Objects born slow that never move have none.
  std::map<ObjectKey, std::uint64_t> first;
  std::uint64_t stays = 0;                // fast stays laid out
  std::uint64_t homes = 0;                // homes laid out
  std::uint64_t fast_max_live_bytes = 0;  // the stays' max-live: no layout needs less
  std::uint64_t unplaced_fast_bytes = 0;  // fast bytes of objects with no place (beside the arena)
  std::uint32_t replans = 0;              // times the policy planned again under a lower budget
  // Births at a boundary may take the places of that boundary's moves out, and wait for their
  // copies (places.h: the eager layout); else a birth never finds its place held.
  bool births_wait_for_outs = false;
  std::string problem;  // "" where it fits the budget
  bool empty() const { return fast_bytes == 0 && home_bytes == 0; }
};

struct Plan {
  std::string policy;
  TierIndex fast = 0, slow = 1;
  std::uint64_t fast_budget_bytes = 0;
  std::map<ObjectKey, TierIndex> start;  // where each persistent object is when a step begins
  std::map<ObjectKey, TierIndex> birth;  // where each object born in the step is allocated
  std::vector<PlannedMove> moves;        // by after_layer; at one, outs before ins (the mover's order)
  std::string variant;  // the oracle: whose plan it chose; sentinel: how it counted its fast sets
  // The plan runs only as made: with its places laid out (ready memory) and no problem; else the
  // runtime refuses the policy (smartpool, which moves nothing: it cannot give up part of itself).
  bool must_fit = false;
  // Objects the policy moved that the plan leaves in place instead (leave_in_place), by key.
  std::vector<ObjectKey> left_in_place;
  // Persistent objects that stay (PlanObject::stays), by key, ascending: each is in `start` at the
  // tier it is on (PlanObject::tier), has no place, and no plan install moves it (the executor's
  // place_persistent, the runtime's ready memory), whatever tier the plan before it had.
  std::vector<ObjectKey> stay_put;
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
  double place_wait_ns = 0;  // ready memory: births waiting for their place's occupant to leave, per step
  std::uint64_t fallback_bytes = 0;   // births planned fast that find no room in time: slow instead
  std::uint64_t failed_in_bytes = 0;  // moves in refused for room births took first (predicted_failed)
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
  // No plan adds less than this a step with the slow tier's channel counted in time (timed_bound.h:
  // the work each window of layers must hold to keep the peak's bytes off the fast tier), and the
  // window that says so. make_plan fills both.
  double timed_bound_ns = 0;
  std::string timed_bound;
  // The oracle: no valid plan for these inputs predicts less than this (residency_model.h's
  // bound; 0 where the solver gave none), and what the solver did.
  double bound_extra_ns = 0;
  std::string solver;
  // simulate()'s verdict: "" where the plan is valid, else what is wrong (make_plan fills it).
  std::string problem;
  PlacesPlan places;
};

const std::vector<std::string>& policy_names();
// The names, comma-separated, for error messages.
std::string known_policies();
// Whether `policy` is a reference (fast-only, slow-only): it runs on the tiers as they are, with
// the fast tier's own budget, whatever budget is asked for.
bool is_reference_policy(std::string_view policy);

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

// The persistent objects that stay (PlanObject::stays) are no policy's to place: a policy plans
// from these inputs without them, under the budget less the bytes of those on the fast tier, and
// put_back() starts each where it is (Plan::stay_put). Errors: kFailedPrecondition where those
// bytes leave the budget no room beside the small objects' reserve, naming them.
class StayPut {
 public:
  explicit StayPut(const PlanInputs& inputs);
  Result<PlanInputs> policy_view(const PlanInputs& inputs) const;
  void put_back(Plan& plan) const;
  std::uint64_t fast_bytes() const { return fast_bytes_; }

 private:
  std::vector<const PlanObject*> objects_;
  std::uint64_t fast_bytes_ = 0, bytes_ = 0;
};

// Plays the plan over one step (and into the next; migrator/src/step_simulator.h): fills its
// predictions and its verdict (Plan::problem), and returns the verdict: "" when it is valid, else what is
// wrong (a move of an object not alive then, a layer boundary where the fast tier would pass its budget,
// naming the boundary and the bytes). In time, as the runtime plays it: one mover takes the moves in order
// from the end of the layer they follow; moves and layers' slow traffic share the slow tier; a layer waits
// for a move of its objects under way; a boundary's births come after its moves are handed out and find the
// room of a move out only when that move ends (they wait for it, or fall back past inputs.room_wait_ns), and
// a move in that has not begun when births take the room it needs fails (the allocator refuses it; the object
// stays slow). With ready memory laid out (Plan::places), a birth also waits for the move out of its place's
// occupant to end (or falls back past room_wait_ns), and a move in does not start its copy before its place
// is left (the mover waits). The budget at a boundary is checked as if its moves were done.
std::string simulate(Plan& plan, const PlanInputs& inputs);

}  // namespace tensortier::migrator
