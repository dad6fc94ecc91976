// tensortier's public C++ API: the one header a oneDNN-based training program includes. A Runtime
// owns the memory tiers and every object (tensor) on them; the program allocates through it, marks
// each step and layer (with the objects the layer reads and writes), and reads stats; the runtime
// profiles a step from the marks and, with a policy, moves objects ahead of the layers. Where tiers
// come from, profiling, moves and pins, emulated charges and fork() in full: runtime/README.md.
//
// Ownership: the Runtime owns all object memory; free() or destroying the Runtime releases it.
// Thread safety: allocate, free, move, object, address_of, stats, tiers and describe from any
// thread; lookup() lock-free and async-signal-safe; step and layer marks and observers from the
// one training thread.
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tensortier/allocator/object_allocator.h"
#include "tensortier/allocator/tier.h"
#include "tensortier/allocator/tier_provider.h"
#include "tensortier/migrator/executor.h"
#include "tensortier/migrator/plan.h"
#include "tensortier/migrator/plan_trial.h"
#include "tensortier/profiler/counters.h"
#include "tensortier/profiler/step_profiler.h"
#include "tensortier/status.h"
#include "tensortier/step_observer.h"

namespace tensortier {

struct RuntimeOptions {
  RuntimeOptions() = default;
  // Implicit on purpose: Runtime::create({"fast=dram:1GiB"}) reads as the spec it is.
  RuntimeOptions(std::string spec) : tier_spec(std::move(spec)) {}  // NOLINT(google-explicit-constructor)

  std::string tier_spec;  // empty: TENSORTIER_TIERS, else hwloc discovery
  // Opens the spec's GPU tiers (cuda:N[:SIZE], pinned:SIZE) and gives the copy engine that moves
  // objects to and from them (allocator/tier_provider.h). Null: the GPU backend's
  // (gpu::CudaTierProvider on the CUDA runtime) where this build has one; a build without one
  // refuses GPU tiers, saying so. Tests give one on a fake CUDA runtime. With a device tier, steps
  // are profiled from declared accesses, layer times are the device's (its LayerClock: the step's
  // records and profile; observers see the host's at layer_end), and copy_threads does not apply
  // (the CUDA engine copies).
  std::shared_ptr<TierProvider> tier_provider;
  profiler::ProfileOptions profile;
  // Longest a layer waits at layer_begin for a copying move of one of its objects already in
  // flight; past it the move fails and the object stays where it was. (A move_pages migration
  // cannot be stopped half-way: the layer waits for it to complete.)
  std::chrono::nanoseconds layer_move_wait{std::chrono::milliseconds(100)};
  // Migration (migrator/): the policy that runs from the step after the profiled one (empty:
  // none; migrator::policy_names() lists them), between the fastest and the slowest tier, and
  // the fast tier's budget for it: empty (the tier's own), a size ("512MiB") or a share of the
  // profiled step's peak footprint as a tier holds it ("20%": whole pages of the objects alive
  // together at the peak, plus the small objects' chunks); a number with no unit ("20") is
  // refused, not read as bytes. fast-only and slow-only keep the
  // tier's own budget (they are the references). Where they are empty, TENSORTIER_POLICY and
  // TENSORTIER_FAST_BUDGET give them (so a linked program can be run under a policy unchanged).
  std::string policy;
  std::string fast_budget;
  // Under a policy, an object moved into a faster tier keeps its slow pages (a shadow copy) until
  // something writes it, so moving it back out before then copies nothing
  // (ObjectAllocator::set_keep_shadows). Writes must go through layer marks or pin_objects, as
  // for moves. false: every move out copies.
  bool clean_moves = true;
  // Under a policy, a move of an object whose bytes are dead where the plan moves it (the next
  // layer of the step that uses it overwrites every page, or none uses it again before it is
  // freed: migrator::bytes_dead_at, from the profile) copies nothing and is not charged; plans
  // count it free (only between tiers that move in place by remap, dram and emulated: move_pages
  // between NUMA nodes carries every page). Where a layer pins the object between the move's
  // hand-out and its start, it copies all the same (MoveOptions::discard_unless_pinned_after).
  // Code that reads an object inside a step, outside a layer that declares it, must do so in
  // every step (the profile then sees it and keeps its bytes), or turn this off. false: every
  // move copies.
  bool dead_moves = true;
  // The share of the mover thread's CPU time that the layers lose, as plans weigh it: 1 when the
  // training threads use every core (oneDNN's default: a parallel region waits for the thread the
  // mover displaced), 0 when a core is left spare for the mover. Plans then move only where a
  // move saves more than its copy costs.
  double mover_steals_compute = 1.0;
  // Under a policy, an object born where the fast tier has no room while moves out of it are
  // copying waits for them (up to this long) before it falls back to the slow tier
  // (ObjectAllocator::set_room_wait): a plan frees room with moves out that take milliseconds,
  // and an object that falls back is slow at every use. 0: it falls back at once.
  std::chrono::nanoseconds room_wait{migrator::kDefaultRoomWait};
  // A trial of a plan that moves: after it starts, this many steps of the planned kind run under
  // it; then as many under the same plan with the moves it predicts late left out (their objects
  // stay slow: migrator::without_late_moves), where it has any; then, where those two phases'
  // layer times judge some late moves worth their wait and others not (migrator::judge_late_moves:
  // each move by the layers it can change), as many with only the ones worth it; then as many with
  // no moves (first-touch placement within the same budget); each phase after one unmeasured step.
  // The fastest by median step time runs from then on (mover CPU and waits are in the step time).
  // Once per run. 0: no trial, the plan runs as made.
  std::uint32_t trial_steps = 3;
  // Plans weigh a copy by the mover's CPU per byte, estimated from the slow tier's cost model
  // (PlanInputs::mover_cpu_ns_per_byte); the real copy costs more (page faults, TLB shootdowns,
  // remaps). Where this is above 0 and the plan copies, after this many steps of the planned kind
  // under it the plan is made again from the same profile with the mover's CPU per byte copied as
  // measured over them (ExecutorStats::mover_cpu_ns over copied_bytes), and runs from then on
  // (replan_result() says so); the trial, where one is set, then tries the plan made again. Once
  // per run. 0: plans keep the estimate.
  std::uint32_t measured_mover_steps = 0;
  // A plan's short-lived region (sentinel's) is one arena of the fast tier in which those objects
  // are placed at the offsets the offset planner gave (no range taken or faulted per object).
  // false: they are allocated one by one, as any object (for comparison).
  bool short_lived_arena = true;
  // Ready memory (migrator/include/tensortier/migrator/places.h): a plan's fast stays get places
  // in one pre-faulted arena of the fast tier, the objects it moves homes in one arena of the slow
  // tier; births go to their place, and a move is a copy between places that publishes the new
  // address (MoveOptions::place): nothing is mapped or remapped in a steady-state step. Objects
  // change address when they move: layers resolve them at layer_begin, host code through
  // pin_objects or address queries (objects touched unannounced never move). Page-granular plans
  // (reactive-2m) move in place all the same. The C API turns it off (its callers hold raw
  // pointers); TENSORTIER_READY_MEMORY=0 or 1 overrides either. false: moves in place (copy +
  // mremap, move_pages).
  bool ready_memory = true;
  // Threads a move's copy is split over (ObjectAllocator::set_copy_threads): the mover and helpers
  // on the cores the training threads leave spare. 0: from this machine (cpu_share and
  // copy_threads_for), and where no core is spare beyond the mover's own, 1, said in one line
  // when a policy is set. n: n threads, at most one a CPU of the process's affinity mask.
  std::uint32_t copy_threads = 0;
  // The CPU the mover thread runs on (Executor::set_mover_cpu): a core of its own, where the
  // caller keeps the layers' threads off it (tensortier-bench --mover-core: the process's
  // affinity and OMP_NUM_THREADS leave it out). -1: wherever the OS puts it. A CPU the process
  // may not use leaves the mover unbound, said in one line.
  int mover_cpu = -1;
  // How long the timed bound's channel program may take each time a plan is made
  // (PlanInputs::timed_program_s; seconds on ResNet-18). 0: plans carry the window argument's
  // bound only (Plan::timed_bound). The benches set it.
  double timed_bound_s = 0;
  // How long the tightened program (integral at uses, timed_bound.h) may search each time a plan
  // is made (PlanInputs::tightened_program_s; tens of seconds on ResNet-18). 0: not searched.
  double tightened_bound_s = 0;
};

// One layer's execution as marked by the program.
struct LayerRecord {
  std::string name;
  std::uint32_t index = 0;               // position in its step, from 0
  std::vector<ObjectId> reads;           // objects the layer declared it reads
  std::vector<ObjectId> writes;          // objects the layer declared it writes
  std::uint64_t duration_ns = 0;         // wall time between layer_begin and layer_end, charge included
  std::uint64_t emulated_charge_ns = 0;  // time charged for emulated slow memory in it
};

struct RuntimeStats {
  std::vector<TierUsage> tiers;                        // fastest first
  std::vector<std::uint64_t> tier_emulated_charge_ns;  // by tier: layer time charged for it (0: real memory)
  std::uint64_t steps_completed = 0;
  std::uint64_t live_objects = 0;
  std::uint64_t live_bytes = 0;       // bytes of live objects as asked for, over all tiers
  std::uint64_t peak_live_bytes = 0;  // their high-water mark since the last profiled step began (or start)
  std::uint64_t emulated_charge_ns = 0;            // all layers, all steps
  std::uint64_t last_step_emulated_charge_ns = 0;  // the last completed step's
  std::uint64_t last_step_slow_bytes = 0;          // its layers' bytes on emulated tiers (charged)
  // Of those, bytes layers touched undeclared: objects born inside a layer (written by it), and, in
  // the steps of the plan's kind, what the profiled step saw a layer (or the host code before it)
  // touch undeclared (page protection).
  std::uint64_t last_step_undeclared_slow_bytes = 0;
  std::uint64_t last_step_move_wait_ns = 0;  // its layers' waits for moves
  std::uint64_t last_step_late_moves = 0;    // moves its layers found in flight
  std::uint64_t arena_misses = 0;   // objects planned in the short-lived region that found their place taken
  std::uint64_t late_moves = 0;     // moves a layer found in flight and waited for
  std::uint64_t aborted_moves = 0;  // of those, moves still running after the wait (they failed)
  std::uint64_t move_wait_ns = 0;   // layers' time waiting for moves
  std::uint64_t moves = 0;          // moves done through move() (the object changed tier)
  std::uint64_t failed_moves = 0;   // moves through move() that failed (the object stayed)
  std::string policy;               // the migration policy running ("" when none)
  migrator::ExecutorStats migration;  // its executor's counts (zero when none)
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
  // Frees by address, or by id: where a mover may copy the object elsewhere meanwhile (ready
  // memory), an address read before the call may already be another object's; an id never is.
  Status free(const void* address);
  Status free(ObjectId id);
  Result<ObjectInfo> object(const void* address) const { return allocator_.info(address); }
  Result<ObjectInfo> object(ObjectId id) const { return allocator_.info_by_id(id); }
  // Every live object, in no particular order.
  std::vector<ObjectInfo> objects() const { return allocator_.objects(); }
  // The object's current address (a move to a memkind heap tier gives it a new one).
  Result<void*> address_of(ObjectId id) const;
  // Moves an object (a small one: its chunk) to tier `to`; see ObjectAllocator::move. Also
  // kUnavailable while a step is being profiled. On any error the object is where it was, intact.
  // segment: only that 2 MiB segment of a large object (ObjectAllocator::move, MoveOptions).
  Result<MoveResult> move(ObjectId id, TierIndex to, std::uint32_t segment = kWholeObject);
  Result<MoveResult> move(ObjectId id, TierIndex to, const MoveOptions& options);
  Result<MoveResult> move(const void* address, TierIndex to);
  // Chaos, for checks of the promise that results never depend on placement: `count` objects
  // drawn from `among` (with replacement), each moved to another tier drawn at random. An object
  // pinned now is not waited for, and moves are refused during a profiled step: both counted as
  // refused, as is one freed since it was named. The tensortier-run interposer
  // (TENSORTIER_RANDOM_MOVES) and tensortier.torch (chaos_moves) use it. Thread-safe.
  struct RandomMoves {
    std::uint32_t moved = 0;    // moved to another tier
    std::uint32_t refused = 0;  // pinned, profiled, freed, or failed
  };
  RandomMoves move_at_random(std::span<const ObjectId> among, std::uint32_t count, std::mt19937_64& rng);
  // How an object on `from` moves to `to` (in place, or to a new address).
  MoveMethod move_method(TierIndex from, TierIndex to) const { return allocator_.move_method(from, to); }
  // Changes at every move that gives an object a new address; lock-free.
  std::uint64_t relocations() const { return allocator_.relocations(); }
  // Test hook: see ObjectAllocator::set_move_failure_hook.
  void set_move_failure_hook(ObjectAllocator::MoveFailureHook hook) {
    allocator_.set_move_failure_hook(std::move(hook));
  }
  bool lookup(const void* address, SpanView* out) const noexcept { return allocator_.lookup(address, out); }

  // Step and layer marks. Errors (kFailedPrecondition) for marks out of order: a layer outside a
  // step, a layer inside a layer, an end without a begin. layer_begin fails with kNotFound,
  // naming the pointer, if a read or write is not the start of a live object.
  Status step_begin();
  Status step_end();
  // The layer's objects are pinned until layer_end.
  Status layer_begin(std::string_view name, std::span<const void* const> reads,
                     std::span<const void* const> writes);
  // The same by object ids; writes each argument's current address to `addresses` (reads, then
  // writes; reads.size() + writes.size() long).
  Status layer_begin(std::string_view name, std::span<const ObjectId> reads, std::span<const ObjectId> writes,
                     std::span<void*> addresses);
  // Charges the layer's emulated slow-memory time, then unpins its objects.
  Status layer_end();
  // For host code that reads or writes object bytes outside the layer marks (a data loader
  // filling a batch between steps): pins the objects, waiting for a move of one of them already
  // in flight (a copy at most RuntimeOptions::layer_move_wait, past which it fails; a move_pages
  // migration until it completes), and gives their current addresses; they do not move until
  // unpin_objects(); with a device tier, after the work queued on device_stream() (a kernel may
  // still use them). Any thread. Errors: kNotFound for an object that is not live (nothing is
  // pinned then); the device's.
  Status pin_objects(std::span<const ObjectId> ids, std::span<void*> addresses);
  // For a thread of the program's own that runs oneDNN primitives beside the training thread: call
  // it first in that thread. It takes its alternate signal stack now, so a profile never signals it
  // (profiler/alt_stacks.h). Any thread. Errors: kOutOfMemory where no stack could be mapped.
  static Status prepare_thread();
  // With GPU tiers, the objects' bytes count as used now (queued work on device_stream() that
  // touched them comes before any later copy of them), as at layer_end.
  void unpin_objects(std::span<const ObjectId> ids);
  // Host bytes into or out of an object wherever it lives (in a device tier's memory through the
  // tier provider's copies, waited for), the object pinned meanwhile: how host code reaches a
  // tensor the CPU cannot address (a batch, an export). [offset, offset + bytes) must lie within
  // the object. Any thread. Errors: kNotFound (not live), kInvalidArgument (past its end:
  // nothing copied), the copy's (the object's bytes are then unchanged or partly written).
  Status write_object(ObjectId id, std::size_t offset, const void* from, std::size_t bytes);
  Status read_object(ObjectId id, std::size_t offset, void* to, std::size_t bytes);
  // Every byte of the object zero, wherever it lives (in device memory: queued on device_stream(),
  // not waited for; what is queued after it there, and every later copy of it, sees the zeros).
  Status zero_object(ObjectId id);
  // With a device tier: the stream (a cudaStream_t as a number) that the program queues each
  // layer's kernels on, and host code's on pinned objects, so that moves are ordered after them and
  // layer times measured on it; 0 without one. Any thread.
  std::uintptr_t device_stream() const {
    return layer_clock_ != nullptr ? tier_provider_->layer_stream() : 0;
  }
  bool in_step() const { return in_step_.load(std::memory_order_acquire); }
  // Layers begun in the current step (the index of the running layer + 1 while one runs).
  std::uint32_t layers_begun() const { return layers_begun_.load(std::memory_order_acquire); }
  std::uint64_t steps_completed() const { return steps_completed_.load(std::memory_order_acquire); }

  // Attaches an observer of steps, layers, allocations, frees and moves (the runtime does not own
  // it; remove it before destroying it). Training thread, between steps. An observer may call
  // the runtime from its callbacks, except on_release (under the allocator's lock). Errors:
  // kMaxObservers attached already (kFailedPrecondition).
  static constexpr std::size_t kMaxObservers = 8;
  Status add_observer(StepObserver* observer);
  void remove_observer(StepObserver* observer);
  // Layers of the last completed step, in order.
  const std::vector<LayerRecord>& last_step_layers() const { return last_step_; }

  // The newest completed step profile (null before the first), and the one of the steps with
  // this signature (layer names, argument sizes and births before each layer; see StepProfile::signature).
  std::shared_ptr<const profiler::StepProfile> profile() const { return last_profile_; }
  std::shared_ptr<const profiler::StepProfile> profile_of(std::uint64_t signature) const;
  // The newest profile's JSON (ProfileOptions::json_path): the path it was written to, or an
  // error naming the path and the cause when writing failed (an existing file there is then left
  // as it was). Empty path and ok before a profile was asked to be written. Training thread.
  const std::string& profile_json_path() const { return profile_json_path_; }
  const Status& profile_json_status() const { return profile_json_status_; }
  // The signature of the last completed step.
  std::uint64_t last_step_signature() const { return last_signature_; }
  // Steps profiled so far, the dropped ones (of a kind already profiled) among them.
  std::uint64_t profiled_steps() const { return profiled_steps_; }
  // Profiles the next step whatever ProfileOptions::step says (even when profiling is off).
  void request_profile() { profile_requested_ = true; }
  const profiler::ProfileOptions& profile_options() const { return profile_options_; }
  // Changes how later steps are profiled (training thread, between steps). Errors: a
  // granularity other than 4 KiB or 2 MiB.
  Status set_profile_options(const profiler::ProfileOptions& options);

  RuntimeStats stats() const;
  // RuntimeStats::live_bytes alone (any thread; cheaper than stats()).
  std::uint64_t live_bytes() const;
  // What the policy plans from, for `profile` on this runtime's tiers: the objects (each on the
  // tier it is on now), the fast budget (RuntimeOptions::fast_budget against the profile's peak),
  // the slow tier's rates and the mover's. start_migration plans from it; a tool can plan offline
  // from a saved profile the same way. Errors: a profile with no layers; a budget under what the
  // small objects need.
  Result<migrator::PlanInputs> plan_inputs(const profiler::StepProfile& profile) const;
  // The plan the migration executor runs; null before it starts (or with no policy).
  const migrator::Plan* plan() const { return executor_ ? &executor_->plan() : nullptr; }
  // Why the policy asked for (RuntimeOptions::policy) does not run, one line naming it (also
  // logged as a warning when it happens); empty while it runs or has not been planned yet, and
  // with no policy. Training thread.
  const std::string& policy_failure() const { return policy_failure_; }
  // What the trial of the plan found (RuntimeOptions::trial_steps), one line; empty while none
  // has ended. Training thread.
  const std::string& trial_result() const { return trial_result_; }
  // Whether the policy's plan runs as it will go on: a plan runs, and no trial or remaking of it
  // is under way or due. Training thread.
  bool plan_settled() const { return executor_ != nullptr && !trial_ && replan_left_ == 0; }
  // What making the plan again with the mover's measured CPU per byte did
  // (RuntimeOptions::measured_mover_steps), one line; empty before. Training thread.
  const std::string& replan_result() const { return replan_result_; }
  // Threads a move's copy is split over (RuntimeOptions::copy_threads) and why, one line: "copies
  // on the mover alone: fewer than two cores spare ..." or "copies of 4 MiB or more split over N
  // threads ...".
  // Set by create(); thread-safe.
  const std::string& copy_threads_note() const { return copy_threads_note_; }
  // The mover's CPU per byte copied that the plan was made again with; 0 before (or never).
  double measured_mover_cpu_ns_per_byte() const { return measured_mover_cpu_ns_per_byte_; }

 private:
  Runtime(std::vector<std::unique_ptr<Tier>> tiers, std::shared_ptr<TierProvider> provider, std::string spec,
          std::string source, profiler::ProfileOptions profile_options);
  bool profile_due() const;
  // Starts the profile of the coming step: at the end of the step before it, or at its begin
  // (where it was asked for since, or another runtime's profile held the fault tracker then).
  void begin_profile_window(bool at_step_begin);
  void start_profile(bool at_step_begin);
  void finish_profile(std::uint64_t step_duration_ns);
  // Plans `policy_` from the profile and starts its executor; on failure, says why and runs on
  // without migration.
  void start_migration(std::shared_ptr<const profiler::StepProfile> profile);
  // Its phases (runtime_migration.cc): the fast budget (none: the policy failed), the plan's
  // rates, the allocator made ready for the plan, the plan's summary logged.
  Result<std::uint64_t> fast_budget_for(const migrator::PlanInputs& inputs) const;
  migrator::TierRates plan_rates(TierIndex fast, TierIndex slow) const;
  // pin_objects without its wait for the device's queued work.
  Status pin_unwaited(std::span<const ObjectId> ids, std::span<void*> addresses);
  // write_object, read_object, zero_object: pins the object, checks the range, and runs `copy` at
  // its bytes (device: they are in device memory, reached by the provider's copies in stream
  // order; else after the device's queued work, by the host).
  Status host_bytes(ObjectId id, std::size_t offset, std::size_t bytes, const char* what,
                    const std::function<Status(std::byte* at, bool device)>& copy);
  void prepare_allocator(std::uint64_t budget);
  void log_plan(std::uint64_t budget, std::uint64_t footprint, std::uint64_t failed) const;
  // At step_end, with a device tier: the layers' times on the device into the records and profile.
  void take_device_layer_times();
  // Records and logs why the policy does not run (policy_failure()).
  void fail_policy(std::string_view why);
  std::string policy_failure_;
  template <typename Event>
  void notify(Event&& event);

  // Before the allocator: its tiers and copy engine may borrow what the provider holds (a device).
  std::shared_ptr<TierProvider> tier_provider_;
  ObjectAllocator allocator_;
  std::string spec_;
  std::string spec_source_;
  std::chrono::nanoseconds layer_move_wait_;
  // Training-thread state (see thread safety above).
  std::atomic<bool> in_step_{false};
  bool in_layer_ = false;
  std::atomic<std::uint64_t> steps_completed_{0};  // read by stats() from any thread
  std::atomic<std::uint32_t> layers_begun_{0};
  std::atomic<std::uintptr_t> training_thread_{0};  // pthread_self() of the step_begin caller
  std::atomic<std::uint64_t> step_ordinal_{0};      // allocations by it in the current step
  std::uint64_t layer_start_ns_ = 0;
  std::vector<ObjectId> pinned_;                   // the running layer's objects
  std::vector<PinnedObject> pinned_objects_;       // what pin() found of them
  std::vector<UsedRange> used_ranges_;             // layer_end's, for the copy engine (GPU tiers only)
  std::unique_ptr<LayerClock> layer_clock_;        // with a device tier: the layers' times on the device
  std::vector<std::uint64_t> slow_read_bytes_;     // by tier, the running layer's declared reads
  std::vector<std::uint64_t> slow_written_bytes_;  // by tier
  std::vector<ObjectKey> read_keys_, write_keys_;
  std::uint64_t step_charge_ns_ = 0;
  std::uint64_t step_slow_bytes_ = 0, step_move_wait_ns_ = 0, step_late_moves_ = 0;
  std::uint64_t step_undeclared_bytes_ = 0;
  // What each layer of the plan's profiled step (and the host code before it) touched undeclared:
  // charged as the layer's own accesses where those objects are on an emulated tier now. Made with
  // the plan (runtime_migration.cc); the training thread's.
  struct UndeclaredAccess {
    ObjectKey key = 0;  // as the executor names it (Executor::id_of)
    std::uint64_t read_bytes = 0, written_bytes = 0;
  };
  std::vector<std::vector<UndeclaredAccess>> plan_undeclared_;
  static std::vector<std::vector<UndeclaredAccess>> undeclared_accesses(const profiler::StepProfile& profile);
  void charge_undeclared(std::uint32_t layer);
  void charge_birth(const ObjectInfo& born);
  std::vector<LayerRecord> current_step_;
  std::vector<LayerRecord> last_step_;
  std::uint64_t step_start_ns_ = 0;
  // Each layer of the step in progress: the time from the end of the one before (the step's
  // start for the first) to its end, so the waits before a layer begins count in it.
  std::vector<std::uint64_t> step_layer_ns_;
  std::uint64_t last_layer_end_ns_ = 0;
  std::uint64_t signature_ = 0;                  // of the step in progress, built at each layer_begin
  std::uint64_t last_signature_ = 0;             // of the last completed step
  std::uint64_t run_length_ = 0;                 // completed steps in a row with last_signature_
  std::vector<std::uint64_t> layer_signatures_;  // signature_ after each layer_begin of this step
  std::vector<std::uint64_t> plan_signatures_;   // ... of the step the running plan was made from
  // What each layer_begin mixed into the signature (its name aside), kept to say where a step left
  // the plan's kind.
  struct LayerShape {
    std::uint64_t births = 0;  // objects the training thread had allocated in the step before it
    std::size_t reads = 0, objects = 0;
    std::uint64_t bytes = 0;
  };
  std::vector<LayerShape> layer_shapes_;  // of this step
  std::vector<LayerShape> plan_shapes_;   // ... of the step the running plan was made from
  std::uint64_t off_plan_said_ = 0;       // steps off the plan's kind told at info (the rest at debug)
  void leave_plan_kind(std::string_view name, const LayerShape& shape);
  bool on_plan_ = true;       // this step's layers so far are the planned step's (else the executor is told)
  bool matches_plan_ = true;  // this step's layers so far are the planned step's (on plan or not)
  bool last_step_on_plan_ = true;  // the step before was the planned step's kind, whole (or none ran)
  // The process that created it: a child after fork() is refused step and layer marks
  // (not_forked), and its destructor leaves the parent's threads alone.
  const pid_t pid_ = getpid();
  Status not_forked(std::string_view call) const;
  // fork() (fork_guard.cc): prepare_fork takes alloc_events_mutex_, the allocator's lock (its
  // copies under way done first) and observers_mutex_, in that order; after_fork lets them go. In
  // the child, allocations and frees send no events from then on (forked_child_).
  friend struct ForkHandlers;
  void prepare_fork();
  void after_fork(bool child);
  std::atomic<bool> forked_child_{false};

  // Observers. observers_mutex_ guards the list only (events go to a copy); it is taken last.
  std::mutex observers_mutex_;
  std::vector<StepObserver*> observers_;
  // Held across an allocation or free and its event, a host pin's event, and while a profile
  // starts or ends, so the profiler sees each object exactly once and no event reaches it gone.
  std::mutex alloc_events_mutex_;
  // No move runs while a step is profiled: moves_blocked_ turns them away, and a profile starts
  // only when the moves in flight have ended.
  std::mutex move_gate_mutex_;
  std::condition_variable moves_done_;
  bool moves_blocked_ = false;
  std::uint32_t moves_in_flight_ = 0;
  // Stats that other threads read.
  mutable std::mutex stats_mutex_;
  std::vector<std::uint64_t> tier_charge_ns_;
  std::uint64_t charge_ns_ = 0, last_step_charge_ns_ = 0, late_moves_ = 0, aborted_moves_ = 0,
                move_wait_ns_ = 0, moves_ = 0, failed_moves_ = 0;
  std::uint64_t last_step_slow_bytes_ = 0, last_step_move_wait_ns_ = 0, last_step_late_moves_ = 0;
  std::uint64_t last_step_undeclared_bytes_ = 0;

  // Migration: the executor runs from the step after the profile (start_migration).
  std::string policy_;
  std::string fast_budget_;
  bool clean_moves_ = true;
  bool dead_moves_ = true;
  double mover_steals_compute_ = 1.0;
  double timed_bound_s_ = 0, tightened_bound_s_ = 0;
  int mover_cpu_ = -1;
  bool mover_cpu_warned_ = false;  // said once a run
  std::chrono::nanoseconds room_wait_{0};
  // The plan trial (RuntimeOptions::trial_steps, migrator::PlanTrial); training thread. Once a
  // run: trial_started_ stays set after it ends.
  std::uint32_t trial_steps_ = 3;
  std::optional<migrator::PlanTrial> trial_;
  bool trial_started_ = false;
  std::uint32_t plan_layers_ = 0;
  std::string trial_result_;
  // Puts a plan that moves on trial (trial_steps_ > 0), made from `inputs`; the plan runs already.
  void begin_trial(const migrator::Plan& plan, const migrator::PlanInputs& inputs);
  // The plan made again with the mover's measured CPU (RuntimeOptions::measured_mover_steps).
  std::uint32_t measured_mover_steps_ = 0;
  std::uint32_t replan_left_ = 0;                    // measured steps left before it; 0: none due
  std::uint32_t replan_skip_ = 0;                    // unmeasured steps left before those
  std::optional<migrator::PlanInputs> plan_inputs_;  // what the running plan was made from, while due
  migrator::ExecutorStats replan_start_;             // the executor's counts when the measured steps began
  std::string replan_result_;
  std::string copy_threads_note_;  // copy_threads_note(); set by create()
  double measured_mover_cpu_ns_per_byte_ = 0;
  void replan_step();
  bool step_profiled_ = false;
  // Makes the executor for `plan`, moves the persistent objects to its start tiers and opens its
  // short-lived region; returns how many persistent objects failed to get there.
  std::uint64_t make_executor(migrator::Plan plan);
  // Attaches the executor make_executor made and starts its mover; where it cannot attach, warns
  // ("policy NAME `otherwise`: why") and drops it.
  void start_executor(std::string_view otherwise);
  // Retires the running executor (its queued moves done first) and runs `next` from the next step.
  void install_plan(migrator::Plan next);
  // The running executor stopped (its queued moves done first), its arenas closed, kept for stats().
  void retire_executor();
  // A plan no step has matched since its profile (the profiled step was a one-off kind: PyTorch's
  // DDP allocates its buckets in the step profiled first) gives way to one made from the profile of
  // the kind that ran since; its trial and the plan made again start over with it.
  void follow_steady_kind(std::shared_ptr<const profiler::StepProfile> profile);
  std::uint64_t plan_kind_steps_ = 0;  // steps of the running plan's kind whole, since it was made
  std::shared_ptr<const profiler::StepProfile> plan_profile_;  // the profile it was made from
  // The plan's short-lived region as an allocator arena (none where the plan has none or the
  // tier has no room); closing gives it back now, or once the objects still in it are freed.
  void open_arena(const migrator::Plan& plan);
  void close_arena();
  // Ready memory: the plan's two arenas made (and given to the executor), or let go (their
  // objects copied out to ranges of the slow tier first). runtime_migration.cc.
  bool open_places(const migrator::Plan& plan);
  void close_places();
  template <typename Leaves>
  void move_all(Leaves leaves, TierIndex to);
  bool ready_memory_ = true;
  ArenaId fast_places_ = 0, home_places_ = 0;  // the training thread's (install_plan)
  std::atomic<ArenaId> arena_{0};              // read by allocating threads
  bool short_lived_arena_ = true;
  std::atomic<std::uint64_t> arena_misses_{0};
  void trial_step(std::uint64_t duration_ns);
  // Executors a trial replaced: stopped, kept (stats() may hold a pointer to one) and counted in
  // stats(). Guarded by retired_mutex_.
  mutable std::mutex retired_mutex_;
  std::vector<std::unique_ptr<migrator::Executor>> retired_;
  std::unique_ptr<migrator::Executor> executor_;             // the training thread's
  std::atomic<const migrator::Executor*> running_{nullptr};  // the same, for stats() on any thread
  std::atomic<PlacementAdvisor*> advisor_{nullptr};

  // Profiling: the profiler is an observer while it records a step.
  profiler::ProfileOptions profile_options_;
  std::unique_ptr<profiler::StepProfiler> profiler_;
  std::unique_ptr<profiler::Counters> counters_;  // opened at the first profile
  bool profile_requested_ = false;
  std::set<std::uint64_t> profile_failed_;  // signatures whose profile could not start
  // Signatures whose runs predicted a profiled step that was of another kind, and how often.
  std::map<std::uint64_t, std::uint64_t> profile_misses_;
  std::optional<std::uint64_t> profiling_for_;  // the kind the profiled step was predicted to be
  std::uint64_t profiled_steps_ = 0;
  std::map<std::uint64_t, std::shared_ptr<const profiler::StepProfile>> profiles_;  // by signature
  std::shared_ptr<const profiler::StepProfile> last_profile_;
  std::string profile_json_path_;
  Status profile_json_status_;
};

// RuntimeOptions::profile with the TENSORTIER_PROFILE* variables applied. Errors name the
// variable and its bad value.
Result<profiler::ProfileOptions> resolve_profile_options(const RuntimeOptions& options);

// The migration policy and fast budget Runtime::create would use (options with TENSORTIER_POLICY
// and TENSORTIER_FAST_BUDGET applied), checked: an unknown policy or a malformed budget is an
// error naming where it came from. (policy, fast budget); empty strings when none.
Result<std::pair<std::string, std::string>> resolve_migration(const RuntimeOptions& options);

// Resolves the tier spec the way Runtime::create does, without opening tiers: (configs, source).
Result<std::pair<std::vector<TierConfig>, std::string>> resolve_tier_spec(const RuntimeOptions& options);

// The CPUs this process may run on (its affinity mask) and the threads its layers run on:
// OMP_NUM_THREADS's first number where it is set and valid (oneDNN's OpenMP runtime reads it),
// else all of those CPUs (oneDNN's default).
struct CpuShare {
  std::uint32_t cpus = 1;
  std::uint32_t training_threads = 1;
};
CpuShare cpu_share();

// Threads a move's copy takes on `cpus` CPUs of which `training_threads` run the layers: every
// spare core, the mover's own among them, where two or more are spare; else 1 (the mover alone,
// on a spare core or beside the layers). Never a core the layers run on.
std::uint32_t copy_threads_for(std::uint32_t cpus, std::uint32_t training_threads);

}  // namespace tensortier
