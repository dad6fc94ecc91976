// Runtime: tier resolution, object placement and step/layer marks (see runtime.h).
#include "tensortier/runtime.h"

#include "tensortier/profiler/alt_stacks.h"
#include "tensortier/settings.h"

#include "runtime_internal.h"

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
namespace {

std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

}  // namespace

namespace {

// The library logs through spdlog's default logger, which spdlog makes unnamed, on stdout: the
// host program's output. Where it is still that one, it is pointed at stderr (same level); a
// program that installed its own default logger (it has a name) decides where the lines go.
void log_to_stderr_unless_the_program_chose() {
  static std::once_flag once;
  std::call_once(once, [] {
    const std::shared_ptr<spdlog::logger> current = spdlog::default_logger();
    if (current == nullptr || !current->name().empty()) return;
    try {
      auto logger = spdlog::stderr_color_mt("tensortier");
      logger->set_level(current->level());
      spdlog::set_default_logger(std::move(logger));
    } catch (const spdlog::spdlog_ex&) {
      // A logger named "tensortier" exists already: the program's; leave the default as it is.
    }
  });
}

}  // namespace

Result<std::unique_ptr<Runtime>> Runtime::create(const RuntimeOptions& options) {
  log_to_stderr_unless_the_program_chose();
  auto resolved = resolve_tier_spec(options);
  if (!resolved) return resolved.status();
  Result<profiler::ProfileOptions> resolved_profile = resolve_profile_options(options);
  if (!resolved_profile) return resolved_profile.status();
  auto migration = resolve_migration(options);
  if (!migration) return migration.status();
  auto& [configs, source] = resolved.value();
  if (!migration->first.empty() && configs.size() < 2) {
    return invalid_argument(
        fmt::format("policy '{}' moves objects between a fast and a slow tier, but the tier "
                    "spec '{}' has {} tier; give two (e.g. fast=dram:2GiB,slow=emulated:optane:8GiB)",
                    migration->first, format_tier_spec(configs), configs.size()));
  }
  Result<OpenedTiers> opened = open_runtime_tiers(configs, options.tier_provider);
  if (!opened) return opened.status();
  Result<profiler::ProfileOptions> profile = profile_for_tiers(std::move(resolved_profile).value(), *opened);
  if (!profile) return profile.status();
  std::unique_ptr<CopyEngine> provider_engine;
  if (opened->provider != nullptr) {
    Result<std::unique_ptr<CopyEngine>> engine = provider_copy_engine(*opened);
    if (!engine) return engine.status();
    provider_engine = std::move(engine).value();
  }
  const bool has_device_tier = device_tier(*opened) != nullptr;
  std::vector<std::unique_ptr<Tier>>& tiers = opened->tiers;
  if (tiers.size() == 1 && tiers.front()->cost_model() != nullptr) {
    spdlog::warn(
        "the only tier, '{}', is emulated slow memory: every object is charged as slow (a slow-only "
        "run); name a fast tier first in the spec to tier memory",
        tiers.front()->name());
  }
  TENSORTIER_RETURN_IF_ERROR(
      check_migration(migration->first, migration->second, *tiers.front(), profile.value()));
  Result<std::optional<bool>> ready_memory = settings::env_switch("TENSORTIER_READY_MEMORY");
  if (!ready_memory) return ready_memory.status();
  if (options.mover_cpu < -1) {
    return invalid_argument(
        fmt::format("mover_cpu {}: give a CPU's number (0 or more), or -1 to leave the mover unbound",
                    options.mover_cpu));
  }
  auto runtime = std::unique_ptr<Runtime>(new Runtime(
      std::move(tiers), opened->provider, format_tier_spec(configs), source, std::move(profile).value()));
  runtime->layer_move_wait_ = options.layer_move_wait;
  runtime->policy_ = migration->first;
  runtime->fast_budget_ = migration->second;
  runtime->clean_moves_ = options.clean_moves;
  runtime->dead_moves_ = options.dead_moves;
  runtime->mover_steals_compute_ = std::clamp(options.mover_steals_compute, 0.0, 1.0);
  runtime->timed_bound_s_ = std::max(0.0, options.timed_bound_s);
  runtime->tightened_bound_s_ = std::max(0.0, options.tightened_bound_s);
  runtime->mover_cpu_ = options.mover_cpu;
  runtime->room_wait_ = std::max(options.room_wait, std::chrono::nanoseconds{0});
  runtime->trial_steps_ = options.trial_steps;
  runtime->measured_mover_steps_ = options.measured_mover_steps;
  runtime->short_lived_arena_ = options.short_lived_arena;
  runtime->ready_memory_ = ready_memory->value_or(options.ready_memory);
  if (provider_engine != nullptr) {  // GPU tiers: the provider's engine copies, on its own streams
    runtime->copy_threads_note_ = fmt::format("copies through the {} copy engine ({})",
                                              provider_engine->name(), opened->provider->name());
    runtime->allocator_.set_copy_engine(std::move(provider_engine));
    if (has_device_tier) runtime->layer_clock_ = opened->provider->layer_clock();  // layers run on the device
    if (!runtime->policy_.empty()) spdlog::info("{}", runtime->copy_threads_note_);
    return runtime;
  }
  const CpuShare share = cpu_share();
  const std::string machine = fmt::format("{} CPUs, {} for the layers", share.cpus, share.training_threads);
  std::uint32_t copy_threads = 0;
  std::string why;  // follows what the copies take: why that many
  if (options.copy_threads == 0) {
    copy_threads = copy_threads_for(share.cpus, share.training_threads);
    why = copy_threads == 1 ? fmt::format(
                                  ": fewer than two cores spare for copy threads ({}; OMP_NUM_THREADS "
                                  "two or more below the CPUs leaves them)",
                                  machine)
                            : fmt::format(", the cores the layers leave spare ({})", machine);
  } else {
    // More threads than CPUs copy no faster: at most one a CPU (a million asked would be a
    // million threads).
    copy_threads = std::min(options.copy_threads, share.cpus);
    why = fmt::format(" (copy_threads {};{} {})", copy_threads,
                      options.copy_threads > copy_threads
                          ? fmt::format(" {} asked, at most one a CPU;", options.copy_threads)
                          : std::string(),
                      machine);
  }
  runtime->copy_threads_note_ =
      (copy_threads == 1 ? std::string("copies on the mover alone")
                         : fmt::format("copies of {} or more split over {} threads",
                                       format_bytes(ObjectAllocator::kSplitCopyBytes), copy_threads)) +
      why;
  if (Status s = runtime->allocator_.set_copy_threads(copy_threads); !s.is_ok()) {
    runtime->copy_threads_note_ = "copies on the mover alone: " + s.message();
    spdlog::warn("{}", runtime->copy_threads_note_);
  } else if (!runtime->policy_.empty()) {
    spdlog::info("{}", runtime->copy_threads_note_);
  }
  return runtime;
}

Runtime::Runtime(std::vector<std::unique_ptr<Tier>> tiers, std::shared_ptr<TierProvider> provider,
                 std::string spec, std::string source, profiler::ProfileOptions profile_options)
    : tier_provider_(std::move(provider)),
      allocator_(std::move(tiers)),
      spec_(std::move(spec)),
      spec_source_(std::move(source)),
      layer_move_wait_(RuntimeOptions{}.layer_move_wait),
      slow_read_bytes_(allocator_.tier_count(), 0),
      slow_written_bytes_(allocator_.tier_count(), 0),
      tier_charge_ns_(allocator_.tier_count(), 0),
      profile_options_(std::move(profile_options)) {
  // Called under the allocator's lock: observers_mutex_ is the last lock taken anywhere.
  allocator_.set_release_observer(
      [this](const SpanView& span) { notify([&](StepObserver& o) { o.on_release(span); }); });
  fork_guard::enter(this);
}

Runtime::~Runtime() {
  fork_guard::leave(this);
  if (getpid() != pid_) {
    // A child after fork(): the mover and the profiler's sampler are the parent's threads, not
    // here to be stopped or joined (that waited forever). Their objects are left, not destroyed.
    (void)executor_.release();  // NOLINT(bugprone-unused-return-value): leaked on purpose
    (void)profiler_.release();  // NOLINT(bugprone-unused-return-value): leaked on purpose
    return;
  }
  if (executor_ != nullptr) {  // first: its thread moves objects through this runtime
    allocator_.set_room_wait(std::chrono::nanoseconds{0});
    advisor_.store(nullptr, std::memory_order_release);
    running_.store(nullptr, std::memory_order_release);
    executor_->stop();
    remove_observer(executor_.get());
  }
  std::lock_guard lock(alloc_events_mutex_);
  if (profiler_ != nullptr) {
    remove_observer(profiler_.get());
    profiler_.reset();  // unprotects every object before the allocator releases them
  }
}

void Runtime::prepare_fork() {
  alloc_events_mutex_.lock();
  allocator_.prepare_fork();
  observers_mutex_.lock();
}

void Runtime::after_fork(bool child) {
  if (child) forked_child_.store(true, std::memory_order_release);
  observers_mutex_.unlock();
  allocator_.after_fork();
  alloc_events_mutex_.unlock();
}

// Delivers an event to a copy of the observer list taken under observers_mutex_, so an observer
// may call the runtime (move(), allocate()) from its callback. None in a child after fork(): its
// observers (the profiler, the executor) are the parent's, their threads not here.
template <typename Event>
void Runtime::notify(Event&& event) {
  if (forked_child_.load(std::memory_order_acquire)) return;
  std::array<StepObserver*, kMaxObservers> list{};
  std::size_t count = 0;
  {
    std::lock_guard lock(observers_mutex_);
    count = observers_.size();
    std::copy(observers_.begin(), observers_.end(), list.begin());
  }
  for (std::size_t i = 0; i < count; ++i) event(*list[i]);
}

Status Runtime::add_observer(StepObserver* observer) {
  std::lock_guard lock(observers_mutex_);
  if (std::find(observers_.begin(), observers_.end(), observer) != observers_.end()) return Status::ok();
  if (observers_.size() == kMaxObservers) {
    return failed_precondition(
        fmt::format("add_observer: {} observers are attached already, the most there may be", kMaxObservers));
  }
  observers_.push_back(observer);
  return Status::ok();
}

void Runtime::remove_observer(StepObserver* observer) {
  std::lock_guard lock(observers_mutex_);
  std::erase(observers_, observer);
}

std::string Runtime::describe() const {
  std::string out;
  for (TierIndex t = 0; t < tier_count(); ++t) out += tier(t).describe() + '\n';
  return out;
}

Result<ObjectInfo> Runtime::allocate(std::string_view name, std::size_t bytes, GroupId group,
                                     TierIndex preferred) {
  // Objects the training thread allocates inside a step are keyed by their ordinal there: the
  // same in every step of one kind. Others (before steps, other threads) by their id.
  ObjectKey key = 0;
  std::optional<std::uint64_t> arena_offset;
  std::optional<Place> place;
  ArenaId arena = 0;
  bool born_in_layer = false;  // (in_layer_ is the training thread's: read only there)
  if (in_step_.load(std::memory_order_acquire) && !forked_child_.load(std::memory_order_acquire) &&
      training_thread_.load(std::memory_order_relaxed) == static_cast<std::uintptr_t>(pthread_self())) {
    born_in_layer = in_layer_;
    key = step_key(step_ordinal_.fetch_add(1, std::memory_order_relaxed));
    if (PlacementAdvisor* advisor = advisor_.load(std::memory_order_acquire); advisor != nullptr) {
      place = advisor->place(key, bytes);
      arena = arena_.load(std::memory_order_acquire);
      if (arena != 0 && !place) arena_offset = advisor->arena_offset(key, bytes);
      if (std::optional<TierIndex> tier = advisor->placement(key, bytes); tier && *tier < tier_count())
        preferred = *tier;
    }
  }
  std::lock_guard lock(alloc_events_mutex_);
  Result<ObjectInfo> info = unavailable("not in the arena");
  if (place) {
    // At its planned place (ready memory), after its previous occupant has left; where that
    // takes too long (a late move out), where the tier would have put it (the allocator counts
    // the miss: TierUsage::place_misses).
    info = allocator_.allocate_in_arena(name, bytes, group, key, place->arena, place->offset, room_wait_);
  } else if (arena_offset) {
    // At its planned offset in the short-lived region; where that place is not free (a step that
    // strays from the profiled one), where the tier would have put it.
    info = allocator_.allocate_in_arena(name, bytes, group, key, arena, *arena_offset);
    if (!info) arena_misses_.fetch_add(1, std::memory_order_relaxed);
  }
  if (!info) info = allocator_.allocate(name, bytes, group, preferred, key);
  if (info && born_in_layer) charge_birth(info.value());
  if (info) {
    SpanView span;
    if (allocator_.lookup(info->address, &span))
      notify([&](StepObserver& o) { o.on_allocate(info.value(), span); });
  }
  return info;
}

Status Runtime::free(const void* address) {
  std::lock_guard lock(alloc_events_mutex_);
  SpanView span;
  Result<ObjectId> id = allocator_.id_of(address);
  if (id && allocator_.lookup(address, &span)) notify([&](StepObserver& o) { o.on_free(id.value(), span); });
  return allocator_.free(address);
}

Status Runtime::free(ObjectId id) {
  std::lock_guard lock(alloc_events_mutex_);
  // Its span as of now, for the observers; looked up again where a move relocated it meanwhile.
  for (int attempt = 0; attempt < 8; ++attempt) {
    Result<ObjectInfo> info = allocator_.info_by_id(id);
    if (!info) break;
    SpanView span;
    if (allocator_.lookup(info->address, &span) && span.id == (span.is_group ? info->group : id)) {
      notify([&](StepObserver& o) { o.on_free(id, span); });
      break;
    }
  }
  return allocator_.free(id);
}

Result<void*> Runtime::address_of(ObjectId id) const {
  Result<ObjectInfo> info = allocator_.info_by_id(id);
  if (!info) return info.status();
  return info->address;
}

Result<MoveResult> Runtime::move(const void* address, TierIndex to) {
  Result<ObjectId> id = allocator_.id_of(address);
  if (!id) return Status(id.status().code(), "move: " + id.status().message());
  return move(id.value(), to);
}

Runtime::RandomMoves Runtime::move_at_random(std::span<const ObjectId> among, std::uint32_t count,
                                             std::mt19937_64& rng) {
  RandomMoves done;
  if (among.empty() || tier_count() < 2) return done;
  std::uniform_int_distribution<std::size_t> pick(0, among.size() - 1), other(1, tier_count() - 1);
  MoveOptions options;
  options.pin_wait = std::chrono::nanoseconds{0};  // a pinned object (or its chunk) is skipped
  for (std::uint32_t i = 0; i < count; ++i) {
    const ObjectId id = among[pick(rng)];
    const Result<ObjectInfo> info = allocator_.info_by_id(id);
    const auto to = static_cast<TierIndex>(((info ? info->tier : 0) + other(rng)) % tier_count());
    const Result<MoveResult> moved = info ? move(id, to, options) : info.status();
    ++(moved && moved->moved ? done.moved : done.refused);
  }
  return done;
}

Result<MoveResult> Runtime::move(ObjectId id, TierIndex to, std::uint32_t segment) {
  MoveOptions options;
  options.segment = segment;
  return move(id, to, options);
}

Result<MoveResult> Runtime::move(ObjectId id, TierIndex to, const MoveOptions& options) {
  {
    std::lock_guard lock(move_gate_mutex_);
    if (moves_blocked_) {
      return unavailable(
          fmt::format("move of object {}: a step is being profiled (from the end of the step before it); "
                      "moves wait until it ends",
                      id));
    }
    ++moves_in_flight_;
  }
  Result<MoveResult> moved = allocator_.move(id, to, options);
  {
    std::lock_guard lock(move_gate_mutex_);
    --moves_in_flight_;
  }
  moves_done_.notify_all();
  {
    std::lock_guard lock(stats_mutex_);
    if (!moved) {
      ++failed_moves_;
    } else if (moved->moved) {  // not one to the tier the object was on already
      ++moves_;
    }
  }
  if (moved && moved->moved) notify([&](StepObserver& o) { o.on_move(moved.value()); });
  return moved;
}

Status Runtime::not_forked(std::string_view call) const {
  if (getpid() == pid_) return Status::ok();
  return failed_precondition(fmt::format(
      "{}: this runtime belongs to process {}, and this is a child of it after fork(); the "
      "child has none of its threads (mover, profiler): create a new Runtime in the child, or exec",
      call, pid_));
}

Status Runtime::step_begin() {
  TENSORTIER_RETURN_IF_ERROR(not_forked("step_begin"));
  if (in_step_) return failed_precondition("step_begin: the previous step has not ended (call step_end)");
  current_step_.clear();
  signature_ = 0xcbf29ce484222325ull;
  layer_signatures_.clear();
  layer_shapes_.clear();
  on_plan_ = matches_plan_ = true;
  step_charge_ns_ = 0;
  step_slow_bytes_ = step_move_wait_ns_ = step_late_moves_ = step_undeclared_bytes_ = 0;
  layers_begun_.store(0, std::memory_order_release);
  step_ordinal_.store(0, std::memory_order_relaxed);
  training_thread_.store(static_cast<std::uintptr_t>(pthread_self()), std::memory_order_relaxed);
  // Started when the step before ended (begin_profile_window), or now where it was asked for since.
  if (profiler_ == nullptr && profile_due()) begin_profile_window(/*at_step_begin=*/true);
  const bool profiled = profiler_ != nullptr;
  step_profiled_ = profiled;
  if (executor_ != nullptr) executor_->set_paused(profiled);  // the profiled step runs unplanned
  // After a step of another kind, the objects alive from it (named by their allocation ordinals in
  // it) are not the ones the plan names: this step runs unplanned as well.
  if (executor_ != nullptr && !last_step_on_plan_) {
    executor_->set_off_plan(steps_completed_.load());
    on_plan_ = false;
  }
  if (profiled) allocator_.reset_peak_live_bytes();
  in_step_.store(true, std::memory_order_release);
  notify([&](StepObserver& o) { o.on_step_begin(steps_completed_.load()); });
  step_start_ns_ = now_ns();
  step_layer_ns_.clear();
  last_layer_end_ns_ = step_start_ns_;
  return Status::ok();
}

Status Runtime::step_end() {
  TENSORTIER_RETURN_IF_ERROR(not_forked("step_end"));
  if (!in_step_) return failed_precondition("step_end without step_begin");
  if (in_layer_) {
    return failed_precondition(
        fmt::format("step_end inside layer '{}' (call layer_end first)", current_step_.back().name));
  }
  // With a device tier the step ends when the device's queued work does: the layers only queued
  // it (its time was the host's issue time before, and the trial and the profile compared those).
  if (layer_clock_ != nullptr) {
    if (Status waited = tier_provider_->host_wait(); !waited.is_ok())
      spdlog::warn("step_end: waiting for the device's queued work: {}", waited.message());
  }
  const std::uint64_t duration_ns = now_ns() - step_start_ns_;
  in_step_.store(false, std::memory_order_release);
  const std::uint64_t step = steps_completed_.load();
  ++steps_completed_;
  run_length_ = (signature_ == last_signature_ && steps_completed_ > 1) ? run_length_ + 1 : 1;
  // Before finish_profile starts a plan: a step with no plan running counts as on it.
  last_step_on_plan_ = executor_ == nullptr || step_profiled_ ||
                       (matches_plan_ && layer_signatures_.size() == plan_signatures_.size());
  if (executor_ != nullptr && !step_profiled_ && last_step_on_plan_) ++plan_kind_steps_;
  last_signature_ = signature_;
  take_device_layer_times();
  if (profiler_ != nullptr) finish_profile(duration_ns);
  trial_step(duration_ns);
  replan_step();
  last_step_.swap(current_step_);
  {
    std::lock_guard lock(stats_mutex_);
    last_step_charge_ns_ = step_charge_ns_;
    last_step_slow_bytes_ = step_slow_bytes_;
    last_step_undeclared_bytes_ = step_undeclared_bytes_;
    last_step_move_wait_ns_ = step_move_wait_ns_;
    last_step_late_moves_ = step_late_moves_;
  }
  notify([&](StepObserver& o) { o.on_step_end(StepEndEvent{step, signature_, duration_ns}); });
  // A profile due for the next step starts now: the host code between the two steps (a loader
  // filling the batch) is profiled too, and a plan leaves what it touches unpinned in place.
  if (profile_due()) begin_profile_window(/*at_step_begin=*/false);
  return Status::ok();
}

// Layers whose work runs on a device: their times as the device measured them, in the step's records
// and its profile (observers saw the host's at each layer_end).
void Runtime::take_device_layer_times() {
  if (layer_clock_ == nullptr) return;
  const std::vector<std::uint64_t> times = layer_clock_->layer_ns();
  if (times.size() != current_step_.size()) return;
  for (std::size_t i = 0; i < times.size(); ++i) current_step_[i].duration_ns = times[i];
  if (profiler_ != nullptr) profiler_->set_layer_durations(times);
}

Status Runtime::layer_begin(std::string_view name, std::span<const void* const> reads,
                            std::span<const void* const> writes) {
  std::vector<ObjectId> ids;
  ids.reserve(reads.size() + writes.size());
  for (const auto& [pointers, role] : {std::pair{reads, "reads"}, std::pair{writes, "writes"}}) {
    const std::size_t bad = allocator_.ids_of(pointers, &ids);
    if (bad != pointers.size()) {
      return not_found(fmt::format("layer '{}' {} {}, which is not the start of a live object", name, role,
                                   pointers[bad]));
    }
  }
  std::vector<void*> addresses(ids.size());
  return layer_begin(name, std::span<const ObjectId>(ids.data(), reads.size()),
                     std::span<const ObjectId>(ids.data() + reads.size(), writes.size()), addresses);
}

Status Runtime::layer_begin(std::string_view name, std::span<const ObjectId> reads,
                            std::span<const ObjectId> writes, std::span<void*> addresses) {
  TENSORTIER_RETURN_IF_ERROR(not_forked("layer_begin"));
  if (!in_step_)
    return failed_precondition(fmt::format("layer_begin('{}') outside a step (call step_begin)", name));
  if (in_layer_) {
    return failed_precondition(fmt::format("layer_begin('{}') inside layer '{}' (layers do not nest)", name,
                                           current_step_.back().name));
  }
  if (addresses.size() != reads.size() + writes.size()) {
    return invalid_argument(fmt::format("layer_begin('{}'): {} addresses for {} arguments", name,
                                        addresses.size(), reads.size() + writes.size()));
  }
  LayerRecord record;
  record.name = std::string(name);
  record.index = static_cast<std::uint32_t>(current_step_.size());
  record.reads.assign(reads.begin(), reads.end());
  record.writes.assign(writes.begin(), writes.end());
  pinned_.assign(reads.begin(), reads.end());
  pinned_.insert(pinned_.end(), writes.begin(), writes.end());
  pinned_objects_.resize(pinned_.size());
  Result<PinResult> pinned = allocator_.pin(pinned_, pinned_objects_, layer_move_wait_);
  if (!pinned) {
    pinned_.clear();
    return not_found(fmt::format("layer '{}': {}", name, pinned.status().message()));
  }
  if (pinned->late_moves != 0) {
    std::lock_guard lock(stats_mutex_);
    late_moves_ += pinned->late_moves;
    aborted_moves_ += pinned->aborted_moves;
    move_wait_ns_ += pinned->wait_ns;
  }
  // What the layer writes loses its shadow copy (pinned: no move can make a new one meanwhile).
  allocator_.drop_shadows(writes);
  // Sizes, keys and the slow-tier bytes the layer will charge for, from one look at the objects.
  std::fill(slow_read_bytes_.begin(), slow_read_bytes_.end(), 0);
  std::fill(slow_written_bytes_.begin(), slow_written_bytes_.end(), 0);
  read_keys_.clear();
  write_keys_.clear();
  auto mix = [this](std::uint64_t value) { signature_ = (signature_ ^ value) * 0x100000001b3ull; };
  mix(std::hash<std::string_view>{}(name));
  mix(reads.size());
  // The objects born so far in the step: a step with more or fewer births before a layer (PyTorch's
  // DDP allocates its rebuilt buckets in its second step) keys the rest otherwise, so a plan's keys
  // would name other objects in it: it is of another kind.
  LayerShape shape{step_ordinal_.load(std::memory_order_relaxed), reads.size(), pinned_.size(), 0};
  mix(shape.births);
  for (std::size_t i = 0; i < pinned_.size(); ++i) {
    const PinnedObject& o = pinned_objects_[i];
    addresses[i] = o.address;
    mix(o.bytes);
    shape.bytes += o.bytes;
    const bool is_read = i < reads.size();
    (is_read ? read_keys_ : write_keys_).push_back(o.key);
    std::vector<std::uint64_t>& slow_bytes = is_read ? slow_read_bytes_ : slow_written_bytes_;
    if (o.bytes_by_tier.empty()) {
      if (allocator_.tier(o.tier).cost_model() != nullptr) slow_bytes[o.tier] += o.bytes;
    } else {  // split into segments: each tier's share
      for (TierIndex t = 0; t < o.bytes_by_tier.size(); ++t) {
        if (allocator_.tier(t).cost_model() != nullptr) slow_bytes[t] += o.bytes_by_tier[t];
      }
    }
  }
  // A step whose layers stop matching the planned step's is of another kind (evaluation, a
  // partial batch): the plan's keys would name other objects in it, so it runs unplanned.
  layer_signatures_.push_back(signature_);
  if (matches_plan_ && executor_ != nullptr &&
      (record.index >= plan_signatures_.size() || plan_signatures_[record.index] != signature_)) {
    leave_plan_kind(name, shape);
  }
  layer_shapes_.push_back(shape);
  if (matches_plan_ && executor_ != nullptr) charge_undeclared(record.index);
  const std::uint64_t before_ns = record.index < last_step_.size() && last_step_[record.index].name == name
                                      ? last_step_[record.index].duration_ns
                                      : 0;
  LayerEvent event{name,
                   record.index,
                   record.reads,
                   record.writes,
                   read_keys_,
                   write_keys_,
                   allocator_.live_bytes(),
                   before_ns,
                   pinned->wait_ns};
  step_move_wait_ns_ += pinned->wait_ns;
  step_late_moves_ += pinned->late_moves;
  current_step_.push_back(std::move(record));
  layers_begun_.store(static_cast<std::uint32_t>(current_step_.size()), std::memory_order_release);
  in_layer_ = true;
  notify([&](StepObserver& o) { o.on_layer_begin(event); });
  if (layer_clock_ != nullptr) layer_clock_->layer_begin();
  layer_start_ns_ = now_ns();
  return Status::ok();
}

// An object born inside the running layer (PyTorch allocates a layer's outputs there) is written by
// it, undeclared: its bytes count as the layer's writes where it was born on an emulated tier.
void Runtime::charge_birth(const ObjectInfo& born) {
  if (born.tier >= slow_written_bytes_.size() || allocator_.tier(born.tier).cost_model() == nullptr) return;
  slow_written_bytes_[born.tier] += born.bytes;
  step_undeclared_bytes_ += born.bytes;
}

// Adds to the layer's slow bytes what its profiled twin touched undeclared, where those objects are
// on an emulated tier now (plans never move such objects, so their tier is where they were born).
void Runtime::charge_undeclared(std::uint32_t layer) {
  if (layer >= plan_undeclared_.size()) return;
  for (const UndeclaredAccess& a : plan_undeclared_[layer]) {
    const std::optional<ObjectId> id = executor_->id_of(a.key);
    const Result<ObjectInfo> info = id ? allocator_.info_by_id(*id) : not_found("");
    if (!info || info->tier >= slow_read_bytes_.size() || allocator_.tier(info->tier).cost_model() == nullptr)
      continue;
    slow_read_bytes_[info->tier] += a.read_bytes;
    slow_written_bytes_[info->tier] += a.written_bytes;
    step_undeclared_bytes_ += a.read_bytes + a.written_bytes;
  }
}

// The step leaves the plan's kind at this layer: it runs unplanned from here, and a log line says
// what differed from the planned step (at info for the first few such steps, then at debug).
void Runtime::leave_plan_kind(std::string_view name, const LayerShape& shape) {
  matches_plan_ = false;
  if (on_plan_) executor_->set_off_plan();
  on_plan_ = false;
  const std::size_t index = layer_shapes_.size();
  const spdlog::level::level_enum level = ++off_plan_said_ <= 3 ? spdlog::level::info : spdlog::level::debug;
  if (index >= plan_shapes_.size()) {
    spdlog::log(level, "step {} runs unplanned from layer {} '{}': the planned step had {} layers",
                steps_completed_.load(), index, name, plan_shapes_.size());
    return;
  }
  const LayerShape& planned = plan_shapes_[index];
  spdlog::log(
      level,
      "step {} runs unplanned from layer {}: '{}' after {} births, {} objects ({} read), {} bytes; the "
      "planned step had '{}' after {} births, {} objects ({} read), {} bytes",
      steps_completed_.load(), index, name, shape.births, shape.objects, shape.reads, shape.bytes,
      plan_profile_->layers[index].name, planned.births, planned.objects, planned.reads, planned.bytes);
}

Status Runtime::prepare_thread() {
  if (profiler::give_this_thread_alt_stack()) return Status::ok();
  return out_of_memory("no memory for this thread's alternate signal stack");
}

Status Runtime::pin_objects(std::span<const ObjectId> ids, std::span<void*> addresses) {
  TENSORTIER_RETURN_IF_ERROR(pin_unwaited(ids, addresses));
  if (layer_clock_ != nullptr) {  // a device tier: kernels queued on these bytes end before host code
    if (Status waited = tier_provider_->host_wait(); !waited.is_ok()) {
      unpin_objects(ids);
      return waited;
    }
  }
  return Status::ok();
}

Status Runtime::pin_unwaited(std::span<const ObjectId> ids, std::span<void*> addresses) {
  if (addresses.size() != ids.size()) {
    return invalid_argument(
        fmt::format("pin_objects: {} addresses for {} objects", addresses.size(), ids.size()));
  }
  std::vector<PinnedObject> found(ids.size());
  Result<PinResult> pinned = allocator_.pin(ids, found, layer_move_wait_);
  if (!pinned) return not_found(fmt::format("pin_objects: {}", pinned.status().message()));
  if (pinned->late_moves != 0) {
    std::lock_guard lock(stats_mutex_);
    late_moves_ += pinned->late_moves;
    aborted_moves_ += pinned->aborted_moves;
    move_wait_ns_ += pinned->wait_ns;
  }
  for (std::size_t i = 0; i < ids.size(); ++i) addresses[i] = found[i].address;
  allocator_.drop_shadows(ids);  // host code may write any of them
  {
    // As allocations: the profiler (an observer only while it records) is destroyed under this
    // lock, so an event from another thread never reaches one that is gone.
    std::lock_guard lock(alloc_events_mutex_);
    notify([&](StepObserver& o) { o.on_host_pin(ids); });
  }
  return Status::ok();
}

void Runtime::unpin_objects(std::span<const ObjectId> ids) {
  if (tier_provider_ != nullptr) {  // as at layer_end: what was queued on these bytes precedes their copies
    std::vector<UsedRange> used;
    for (ObjectId id : ids) {
      if (Result<ObjectInfo> o = allocator_.info_by_id(id); o) used.push_back({o->address, o->bytes});
    }
    allocator_.layer_used(used);
  }
  allocator_.unpin(ids);
}

Status Runtime::layer_end() {
  TENSORTIER_RETURN_IF_ERROR(not_forked("layer_end"));
  if (!in_layer_) return failed_precondition("layer_end without layer_begin");
  if (layer_clock_ != nullptr) layer_clock_->layer_end();
  // The emulated charge (allocator/layer_charge.h): the thread waits out the layer's slow traffic.
  const LayerCharge charge = charge_layer(allocator_, slow_read_bytes_, slow_written_bytes_);
  const std::uint64_t charged_ns = charge.charged_ns;
  const std::uint64_t slow_read = charge.slow_read_bytes, slow_written = charge.slow_written_bytes;
  if (charge.booked_ns > 0) {
    std::lock_guard lock(stats_mutex_);
    for (TierIndex t = 0; t < allocator_.tier_count(); ++t) tier_charge_ns_[t] += charge.booked_ns_by_tier[t];
  }
  LayerRecord& record = current_step_.back();
  const std::uint64_t end_ns = now_ns();
  record.duration_ns = end_ns - layer_start_ns_;
  step_layer_ns_.push_back(end_ns - last_layer_end_ns_);
  last_layer_end_ns_ = end_ns;
  record.emulated_charge_ns = charged_ns;
  step_charge_ns_ += charged_ns;
  step_slow_bytes_ += slow_read + slow_written;
  if (charged_ns > 0) {
    std::lock_guard lock(stats_mutex_);
    charge_ns_ += charged_ns;
  }
  if (tier_provider_ != nullptr) {  // a GPU's copies: ordered after this layer's kernels on these bytes
    used_ranges_.clear();
    for (const PinnedObject& o : pinned_objects_) used_ranges_.push_back({o.address, o.bytes});
    allocator_.layer_used(used_ranges_);
  }
  allocator_.unpin(pinned_);
  pinned_.clear();
  in_layer_ = false;
  notify([&](StepObserver& o) {
    o.on_layer_end(LayerEndEvent{record.index, record.duration_ns, charged_ns, slow_read, slow_written});
  });
  return Status::ok();
}

std::uint64_t Runtime::live_bytes() const {
  return allocator_.live_bytes();
}

RuntimeStats Runtime::stats() const {
  RuntimeStats s;
  s.tiers = allocator_.usage();
  s.steps_completed = steps_completed_.load();
  s.live_objects = allocator_.live_objects();
  s.live_bytes = allocator_.live_bytes();
  s.peak_live_bytes = allocator_.peak_live_bytes();
  std::lock_guard lock(stats_mutex_);
  s.tier_emulated_charge_ns = tier_charge_ns_;
  s.emulated_charge_ns = charge_ns_;
  s.last_step_emulated_charge_ns = last_step_charge_ns_;
  s.last_step_slow_bytes = last_step_slow_bytes_;
  s.last_step_undeclared_slow_bytes = last_step_undeclared_bytes_;
  s.last_step_move_wait_ns = last_step_move_wait_ns_;
  s.last_step_late_moves = last_step_late_moves_;
  {  // over the run: the executors a trial replaced, then the running one (its last step counts)
    std::lock_guard retired_lock(retired_mutex_);
    for (const auto& retired : retired_) migrator::accumulate(s.migration, retired->stats());
    if (const migrator::Executor* executor = running_.load(std::memory_order_acquire); executor != nullptr) {
      s.policy = executor->plan().policy;
      migrator::accumulate(s.migration, executor->stats());
    }
  }
  s.arena_misses = arena_misses_.load(std::memory_order_relaxed);
  s.late_moves = late_moves_;
  s.aborted_moves = aborted_moves_;
  s.move_wait_ns = move_wait_ns_;
  s.moves = moves_;
  s.failed_moves = failed_moves_;
  return s;
}

}  // namespace tensortier
