// The executor: runs a Plan step after step. A step observer of the runtime (layer ends,
// allocations, frees) and its placement advisor (an object is born where the plan wants it), with
// one mover thread that carries out the plan's moves through the runtime's move function; a move
// that fails or would come too late leaves the object where it was, so results never depend on
// it, only speed does. States: stopped, running, paused (while a step is profiled). In full:
// migrator/README.md, "The executor".
//
// Ownership: the executor owns its thread and its copy of the plan; the move and layer functions
// must stay valid until stop() (the destructor stops). Thread safety: the observer and advisor
// calls come from the runtime's threads as StepObserver documents; start/stop/set_paused from
// the thread that owns the executor; stats() and state() from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "tensortier/migrator/plan.h"
#include "tensortier/step_observer.h"

namespace tensortier::migrator {

enum class ExecutorState { kStopped, kRunning, kPaused };

// How long a move into a place waits for the place's previous occupant to leave (ready memory).
inline constexpr std::chrono::milliseconds kOccupantWait{5};

struct ExecutorStats {
  std::uint64_t steps = 0;          // steps begun while running
  std::uint64_t moves = 0;          // moves done (the object changed tier)
  std::uint64_t segment_moves = 0;  // of those, moves of one 2 MiB segment (page-granular plans)
  std::uint64_t discarded_moves =
      0;                             // of those, moves that copied nothing (dead bytes, PlannedMove::discard)
  std::uint64_t bytes_in = 0;        // moved into the fast tier
  std::uint64_t bytes_out = 0;       // moved out of it
  std::uint64_t copied_bytes = 0;    // of bytes_in and bytes_out, copied (not discarded, not clean)
  std::uint64_t failed_moves = 0;    // the move function refused or failed (the object stayed)
  std::uint64_t late_moves = 0;      // done after the layer that first needed it had begun
  std::uint64_t late_dropped = 0;    // dropped: every layer it would have helped had begun
  std::uint64_t stale_dropped = 0;   // dropped: its step was over
  std::uint64_t missing = 0;         // the planned key named no live object (or it was freed before its move)
  std::uint64_t off_plan_steps = 0;  // steps found to be of another kind than the plan's (set_off_plan)
  std::uint64_t off_plan_dropped = 0;  // queued moves of such a step, dropped
  std::uint64_t mover_cpu_ns = 0;      // CPU time of the mover thread
  std::uint64_t mover_busy_ns = 0;     // wall time the mover spent in moves (copies, charges, waits)
  std::string last_failure;            // why the latest failed move failed
  // The last completed step's share of the above.
  std::uint64_t last_step_bytes_in = 0, last_step_bytes_out = 0, last_step_failed = 0, last_step_late = 0;
};

// Adds `part`'s counts to `total` (the runtime's stats over the executors of a run); the last
// failure and the last step's share are `part`'s where it has them.
void accumulate(ExecutorStats& total, const ExecutorStats& part);

// The counts from the snapshot `before` to the later snapshot `now` of one executor (what a
// step, or a run of steps, added); the last failure and the last step's share are `now`'s.
ExecutorStats since(const ExecutorStats& now, const ExecutorStats& before);

class Executor final : public StepObserver, public PlacementAdvisor {
 public:
  // Moves an object, or one segment of it (options.segment), to a tier; options may ask it not to
  // copy dead bytes (MoveOptions::discard_unless_pinned_after).
  using MoveFn = std::function<Result<MoveResult>(ObjectId, TierIndex, const MoveOptions&)>;
  using LayersBegunFn = std::function<std::uint32_t()>;  // layers begun in the current step
  // The allocator's pin_sequence(), read when a move the plan marks `discard` is handed out: the
  // move then copies nothing unless a layer pinned the object in between. Empty: every move copies.
  using PinSequenceFn = std::function<std::uint64_t()>;

  Executor(Plan plan, std::uint32_t layers, MoveFn move, LayersBegunFn layers_begun,
           PinSequenceFn pin_sequence = {});
  ~Executor() override;
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // The CPU the mover thread runs on (its affinity; set before start()): a core of its own, the
  // layers' threads kept off it by the caller. -1 (the default): wherever the OS puts it.
  // Where the OS refuses it, the mover runs unbound and mover_cpu_problem() says why.
  void set_mover_cpu(int cpu) { mover_cpu_ = cpu; }
  std::string mover_cpu_problem() const;
  // Starts the mover thread. Errors: kUnavailable where no thread can be started (nothing runs).
  Status start();
  void stop();
  void set_paused(bool paused);
  // The step in progress is not of the kind the plan was made for (its layers differ from the
  // profiled step's: an evaluation pass, a partial batch): for the rest of it nothing more is
  // handed out, queued moves for it are dropped and placement is not advised, since the plan's
  // keys (allocation ordinals) would name other objects. The next step is planned again.
  // Thread-safe.
  void set_off_plan();
  // The same for step `step` as a whole, before it begins (its step-start moves are not handed
  // out): the step after one of another kind, whose objects made before it are not the plan's.
  void set_off_plan(std::uint64_t step);
  ExecutorState state() const { return state_.load(std::memory_order_acquire); }
  ExecutorStats stats() const;
  const Plan& plan() const { return plan_; }
  // The live object a plan's key names now (an allocation ordinal of this step, or an id for one
  // made outside steps); nullopt where none. Thread-safe.
  std::optional<ObjectId> id_of(ObjectKey key);
  // Bytes of the plan's moves out of `tier` handed to the mover and not yet ended (queued, or
  // under way): the room they will leave there. The allocator's room wait asks it
  // (ObjectAllocator::set_room_wait). Thread-safe, lock-free.
  std::uint64_t queued_out_bytes(TierIndex tier) const {
    return tier == plan_.fast ? queued_out_bytes_.load(std::memory_order_acquire) : 0;
  }

  // Ready memory: the arenas of the plan's places (Plan::places) on the fast and the slow tier.
  // Set before start(); with both set, moves and births with a place go to it.
  void set_places(ArenaId fast, ArenaId home) {
    fast_arena_ = fast;
    home_arena_ = home;
  }

  // Moves each persistent object (given by id and key; a page-granular plan: each of its
  // segments) to where the plan starts it, now, on the calling thread: outs first, then ins.
  // Objects the plan names in stay_put are left where they are.
  // Returns how many moves failed (what they would have moved stays where it is).
  std::uint64_t place_persistent(const std::vector<ObjectInfo>& objects);

  // StepObserver
  void on_step_begin(std::uint64_t step) override;
  void on_step_end(const StepEndEvent& event) override;
  void on_layer_end(const LayerEndEvent& event) override;
  void on_allocate(const ObjectInfo& object, const SpanView& span) override;
  void on_free(ObjectId id, const SpanView& span) override;
  // PlacementAdvisor
  std::optional<TierIndex> placement(ObjectKey key, std::size_t bytes) override;
  std::optional<std::uint64_t> arena_offset(ObjectKey key, std::size_t bytes) override;
  std::optional<Place> place(ObjectKey key, std::size_t bytes) override;

 private:
  struct Job {
    bool stop = false;
    ObjectId id = 0;
    TierIndex to = 0;
    std::uint32_t segment = kWholeObject;           // a page-granular plan's segment of the object
    std::uint64_t step = 0;                         // the step whose layer needs it
    std::uint32_t needed_by = 0;                    // that layer
    std::uint32_t useful_until = kStepStart;        // dropped once this layer has begun
    std::uint64_t discard_unless_pinned_after = 0;  // MoveOptions: the plan found its bytes dead
    std::uint64_t out_bytes = 0;                    // a move out of the fast tier: its bytes
    std::uint64_t place = kNoPlace;                 // PlannedMove::place
  };
  // The place of `offset` in the arena of `tier`; nullopt without places.
  std::optional<Place> place_on(TierIndex tier, std::uint64_t offset) const;
  struct Queue;  // TBB's queue, kept out of this header
  void enqueue(std::uint32_t after_layer);
  void run();

  Plan plan_;
  std::uint32_t layers_;
  MoveFn move_;
  LayersBegunFn layers_begun_;
  PinSequenceFn pin_sequence_;
  std::multimap<std::uint32_t, const PlannedMove*> by_layer_;  // after_layer -> moves (immutable)
  std::unique_ptr<Queue> queue_;
  ArenaId fast_arena_ = 0, home_arena_ = 0;  // set_places
  void bind_mover();
  std::thread mover_;
  int mover_cpu_ = -1;
  mutable std::mutex mover_cpu_mutex_;
  std::string mover_cpu_problem_;  // under mover_cpu_mutex_
  std::atomic<ExecutorState> state_{ExecutorState::kStopped};
  std::atomic<std::uint64_t> step_{0};              // the step in progress
  std::atomic<std::uint64_t> queued_out_bytes_{0};  // queued_out_bytes()
  static constexpr std::uint64_t kNoStep = ~std::uint64_t{0};
  std::atomic<std::uint64_t> off_plan_step_{kNoStep};  // the step set_off_plan() named
  bool off_plan() const {
    return off_plan_step_.load(std::memory_order_acquire) == step_.load(std::memory_order_acquire);
  }
  std::mutex ids_mutex_;
  std::unordered_map<ObjectKey, ObjectId> ids_;   // step keys of live objects -> their ids
  std::unordered_map<ObjectId, ObjectKey> keys_;  // the reverse
  mutable std::mutex stats_mutex_;
  ExecutorStats stats_;
  ExecutorStats step_start_;  // stats_ when the current step began
};

}  // namespace tensortier::migrator
