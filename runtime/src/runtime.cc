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
#include "tensortier/allocator/tier_spec.h"
#include "tensortier/allocator/topology.h"

namespace tensortier {
namespace {

// The profile's names of the objects with these keys, comma-separated, the first few.
std::string object_names(const profiler::StepProfile& profile, std::span<const ObjectKey> keys) {
  std::string names;
  std::size_t shown = 0;
  for (const profiler::ObjectProfile& o : profile.objects) {
    if (std::ranges::find(keys, o.key) == keys.end()) continue;
    if (shown++ == 4) return names + ", ...";
    names += (names.empty() ? "" : ", ") + o.name;
  }
  return names;
}

std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

constexpr std::string_view kEmulatedHint = "TENSORTIER_TIERS=fast=dram:4GiB,slow=emulated:optane:16GiB";

}  // namespace

Result<std::pair<std::vector<TierConfig>, std::string>> resolve_tier_spec(const RuntimeOptions& options) {
  std::string text = options.tier_spec;
  std::string source = "options";
  if (text.empty()) {
    if (const char* env = std::getenv("TENSORTIER_TIERS"); env != nullptr && *env != '\0') {
      text = env;
      source = "TENSORTIER_TIERS";
    }
  }
  if (!text.empty()) {
    auto configs = parse_tier_spec(text);
    if (!configs) return Status(configs.status().code(), source + ": " + configs.status().message());
    return std::pair{std::move(configs).value(), source};
  }
  Result<Topology> topology = discover_topology();
  if (!topology) return topology.status();
  if (topology->nodes.empty()) {
    return unavailable(fmt::format("hwloc found no NUMA node; give a tier spec, e.g. {}", kEmulatedHint));
  }
  if (topology->nodes.size() == 1) {
    spdlog::info("one memory tier found (NUMA node {}, {}); to add an emulated slow tier set {}",
                 topology->nodes[0].os_index, format_bytes(topology->nodes[0].capacity_bytes), kEmulatedHint);
  }
  return std::pair{tiers_from_topology(topology.value()),
                   fmt::format("hwloc discovery (ranked by {})", topology->ranking_basis)};
}

Result<profiler::ProfileOptions> resolve_profile_options(const RuntimeOptions& options) {
  profiler::ProfileOptions p = options.profile;
  if (const char* env = std::getenv("TENSORTIER_PROFILE"); env != nullptr && *env != '\0') {
    const std::string_view value(env);
    std::uint64_t step = 0;
    const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), step);
    if (value == "off") {
      p.enabled = false;
    } else if (error == std::errc() && end == value.data() + value.size()) {
      p.enabled = true;
      p.step = step;
    } else {
      return invalid_argument(fmt::format(
          "TENSORTIER_PROFILE='{}': use 'off' or the step to profile (0-based, e.g. 1 for the second)",
          value));
    }
  }
  if (const char* env = std::getenv("TENSORTIER_PROFILE_GRANULARITY"); env != nullptr && *env != '\0') {
    Result<std::uint64_t> bytes = parse_size_bytes(env);
    if (!bytes || (*bytes != profiler::kSmallPageBytes && *bytes != profiler::kHugePageBytes)) {
      return invalid_argument(fmt::format("TENSORTIER_PROFILE_GRANULARITY='{}': use 4KiB or 2MiB", env));
    }
    p.granularity_bytes = *bytes;
  }
  if (const char* env = std::getenv("TENSORTIER_PROFILE_JSON"); env != nullptr && *env != '\0')
    p.json_path = env;
  TENSORTIER_RETURN_IF_ERROR(profiler::validate(p));
  return p;
}

namespace {

// The fast budget of a migration: a share of the profiled peak ("20%") or a size; empty: none.
struct FastBudget {
  double share = 0;         // of the profiled peak, when > 0
  std::uint64_t bytes = 0;  // else this, when > 0
};

Result<FastBudget> parse_fast_budget(std::string_view text, std::string_view what) {
  FastBudget budget;
  if (text.empty()) return budget;
  if (text.back() == '%') {
    double percent = 0;
    const std::string_view number = text.substr(0, text.size() - 1);
    const auto [end, error] = std::from_chars(number.data(), number.data() + number.size(), percent);
    if (error != std::errc() || end != number.data() + number.size() || !(percent > 0) || percent > 100) {
      return invalid_argument(
          fmt::format("{} '{}': a share of the profiled peak is a number above 0 and at most "
                      "100 followed by %, e.g. 20%",
                      what, text));
    }
    budget.share = percent / 100;
    return budget;
  }
  // A bare number would be a size in bytes, and a budget of 20 bytes is no one's intent: most
  // likely a share without its %. Refused, naming both.
  if (text.find_first_not_of("0123456789.") == std::string_view::npos) {
    return invalid_argument(
        fmt::format("{} '{}': a number needs a unit: a share of the profiled peak ends with % "
                    "(e.g. {}%), a size with B, KiB, MiB or GiB (e.g. 512MiB)",
                    what, text, text));
  }
  Result<std::uint64_t> bytes = parse_size_bytes(text);
  if (!bytes || bytes.value() == 0) {
    return invalid_argument(
        fmt::format("{} '{}': give a size (e.g. 512MiB) or a share of the profiled peak "
                    "(e.g. 20%){}",
                    what, text, bytes ? "" : ": " + bytes.status().message()));
  }
  budget.bytes = bytes.value();
  return budget;
}

// What a policy needs that the tiers and the profile options can say before any step: a profiled
// step to plan from, and a fast budget (a size) that the fast tier holds and that holds one chunk
// of small objects. A share is checked once the profile gives the footprint (start_migration).
Status check_migration(const std::string& policy, const std::string& fast_budget, const Tier& fast,
                       const profiler::ProfileOptions& profile) {
  if (policy.empty()) return Status::ok();
  if (!profile.enabled) {
    return failed_precondition(fmt::format(
        "policy '{}' plans from a profiled step, and profiling is off (TENSORTIER_PROFILE=off, or "
        "RuntimeOptions::profile): turn profiling on, or run without the policy",
        policy));
  }
  if (policy == "fast-only" || policy == "slow-only") return Status::ok();  // keep the tier's own budget
  const FastBudget parsed = parse_fast_budget(fast_budget, "fast budget").value();  // checked before
  if (parsed.bytes > fast.budget_bytes()) {
    return invalid_argument(fmt::format(
        "fast budget {} for policy '{}' is more than the fast tier '{}' holds ({}, its budget in the tier "
        "spec): give at most {}, or raise the tier's budget in the spec",
        format_bytes(parsed.bytes), policy, fast.name(), format_bytes(fast.budget_bytes()),
        format_bytes(fast.budget_bytes())));
  }
  if (parsed.bytes > 0 && parsed.bytes < kGroupChunkBytes) {
    return invalid_argument(fmt::format(
        "fast budget {} for policy '{}' holds not even one {} chunk of small objects: give at least {} "
        "(the profiled step says how much its small objects need)",
        format_bytes(parsed.bytes), policy, format_bytes(kGroupChunkBytes), format_bytes(kGroupChunkBytes)));
  }
  return Status::ok();
}

}  // namespace

Result<std::pair<std::string, std::string>> resolve_migration(const RuntimeOptions& options) {
  std::string policy = options.policy, budget = options.fast_budget;
  std::string policy_from = "RuntimeOptions::policy", budget_from = "RuntimeOptions::fast_budget";
  if (const char* env = std::getenv("TENSORTIER_POLICY"); policy.empty() && env != nullptr && *env != '\0') {
    policy = env;
    policy_from = "TENSORTIER_POLICY";
  }
  if (const char* env = std::getenv("TENSORTIER_FAST_BUDGET");
      budget.empty() && env != nullptr && *env != '\0') {
    budget = env;
    budget_from = "TENSORTIER_FAST_BUDGET";
  }
  if (!policy.empty()) {
    const auto& names = migrator::policy_names();
    if (std::find(names.begin(), names.end(), policy) == names.end()) {
      return invalid_argument(fmt::format("{} '{}' is not a policy (known: {})", policy_from, policy,
                                          migrator::known_policies()));
    }
  }
  TENSORTIER_RETURN_IF_ERROR(parse_fast_budget(budget, budget_from).status());
  return std::pair{policy, budget};
}

CpuShare cpu_share() {
  CpuShare share;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    share.cpus = static_cast<std::uint32_t>(std::max(1, CPU_COUNT(&set)));
  } else {
    share.cpus = std::max(1U, std::thread::hardware_concurrency());
  }
  share.training_threads = share.cpus;
  if (const char* omp = std::getenv("OMP_NUM_THREADS"); omp != nullptr) {
    const std::string_view text(omp);
    std::uint32_t threads = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), threads);
    if (error == std::errc{} && threads > 0 && (end == text.data() + text.size() || *end == ','))
      share.training_threads = threads;
  }
  return share;
}

std::uint32_t copy_threads_for(std::uint32_t cpus, std::uint32_t training_threads) {
  const std::uint32_t spare = cpus > training_threads ? cpus - training_threads : 0;
  return spare >= 2 ? spare : 1;
}

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
  Result<profiler::ProfileOptions> profile = resolve_profile_options(options);
  if (!profile) return profile.status();
  auto migration = resolve_migration(options);
  if (!migration) return migration.status();
  auto& [configs, source] = resolved.value();
  if (!migration->first.empty() && configs.size() < 2) {
    return invalid_argument(
        fmt::format("policy '{}' moves objects between a fast and a slow tier, but the tier "
                    "spec '{}' has {} tier; give two (e.g. fast=dram:2GiB,slow=emulated:optane:8GiB)",
                    migration->first, format_tier_spec(configs), configs.size()));
  }
  std::vector<std::unique_ptr<Tier>> tiers;
  for (const TierConfig& config : configs) {
    Result<std::unique_ptr<Tier>> tier = open_tier(config);
    if (!tier) return tier.status();
    spdlog::info("tier {}", tier.value()->describe());
    tiers.push_back(std::move(tier).value());
  }
  if (tiers.size() == 1 && tiers.front()->cost_model() != nullptr) {
    spdlog::warn(
        "the only tier, '{}', is emulated slow memory: every object is charged as slow (a slow-only "
        "run); name a fast tier first in the spec to tier memory",
        tiers.front()->name());
  }
  TENSORTIER_RETURN_IF_ERROR(
      check_migration(migration->first, migration->second, *tiers.front(), profile.value()));
  auto runtime = std::unique_ptr<Runtime>(
      new Runtime(std::move(tiers), format_tier_spec(configs), source, std::move(profile).value()));
  runtime->layer_move_wait_ = options.layer_move_wait;
  runtime->policy_ = migration->first;
  runtime->fast_budget_ = migration->second;
  runtime->clean_moves_ = options.clean_moves;
  runtime->dead_moves_ = options.dead_moves;
  runtime->mover_steals_compute_ = std::clamp(options.mover_steals_compute, 0.0, 1.0);
  runtime->room_wait_ = std::max(options.room_wait, std::chrono::nanoseconds{0});
  runtime->trial_steps_ = options.trial_steps;
  runtime->measured_mover_steps_ = options.measured_mover_steps;
  runtime->short_lived_arena_ = options.short_lived_arena;
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

Runtime::Runtime(std::vector<std::unique_ptr<Tier>> tiers, std::string spec, std::string source,
                 profiler::ProfileOptions profile_options)
    : allocator_(std::move(tiers)),
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
  ArenaId arena = 0;
  if (in_step_.load(std::memory_order_acquire) && !forked_child_.load(std::memory_order_acquire) &&
      training_thread_.load(std::memory_order_relaxed) == static_cast<std::uintptr_t>(pthread_self())) {
    key = step_key(step_ordinal_.fetch_add(1, std::memory_order_relaxed));
    if (PlacementAdvisor* advisor = advisor_.load(std::memory_order_acquire); advisor != nullptr) {
      arena = arena_.load(std::memory_order_acquire);
      if (arena != 0) arena_offset = advisor->arena_offset(key, bytes);
      if (std::optional<TierIndex> tier = advisor->placement(key, bytes); tier && *tier < tier_count())
        preferred = *tier;
    }
  }
  std::lock_guard lock(alloc_events_mutex_);
  Result<ObjectInfo> info = unavailable("not in the arena");
  if (arena_offset) {
    // At its planned offset in the short-lived region; where that place is not free (a step that
    // strays from the profiled one), where the tier would have put it.
    info = allocator_.allocate_in_arena(name, bytes, group, key, arena, *arena_offset);
    if (!info) arena_misses_.fetch_add(1, std::memory_order_relaxed);
  }
  if (!info) info = allocator_.allocate(name, bytes, group, preferred, key);
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
  // Once: a policy that could not start does not try again on a later kind's profile.
  if (!policy_.empty() && executor_ == nullptr && policy_failure_.empty()) start_migration(*last_profile_);
}

void Runtime::fail_policy(std::string_view why) {
  policy_failure_ = fmt::format("policy '{}' does not run: {}", policy_, why);
  spdlog::warn("{}", policy_failure_);
}

void Runtime::start_migration(const profiler::StepProfile& profile) {
  const TierIndex fast = 0, slow = static_cast<TierIndex>(allocator_.tier_count() - 1);
  const FastBudget parsed = parse_fast_budget(fast_budget_, "fast budget").value();  // checked in create()
  auto inputs = migrator::inputs_from_profile(profile, fast, slow, allocator_.tier(fast).budget_bytes());
  if (!inputs) return fail_policy(inputs.status().message());
  // A share is of the step's peak footprint as a tier holds it: whole pages, small objects' chunks.
  const std::uint64_t footprint = inputs->peak_bytes + inputs->small_reserve_bytes;
  std::uint64_t budget = allocator_.tier(fast).budget_bytes();
  if (parsed.share > 0) {
    budget = static_cast<std::uint64_t>(parsed.share * static_cast<double>(footprint));
  } else if (parsed.bytes > 0) {
    budget = parsed.bytes;
  }
  // The references run on the tiers as they are: fast-only with all of the fast tier (the
  // baseline every other policy is measured against), slow-only with nothing planned fast.
  const std::uint64_t tier_budget = allocator_.tier(fast).budget_bytes();
  if (policy_ == "fast-only" || policy_ == "slow-only") budget = tier_budget;
  if (budget > tier_budget) {
    spdlog::warn(
        "policy {}: a fast budget of {} ({} of the profiled peak footprint {}) is more than the fast "
        "tier holds: it keeps the tier's {}",
        policy_, format_bytes(budget), fast_budget_, format_bytes(footprint), format_bytes(tier_budget));
    budget = tier_budget;
  }
  // Small objects are not planned: their chunks need room on the fast tier whatever the plan.
  const std::uint64_t least = std::max<std::uint64_t>(inputs->small_reserve_bytes, kGroupChunkBytes);
  if (budget < least) {
    fail_policy(fmt::format(
        "a fast budget of {} ({}) is less than the profiled step's small objects need on the fast tier ({} "
        "of chunks): give at least {} ({:.2f}% of the profiled peak footprint {})",
        format_bytes(budget), fast_budget_.empty() ? "the tier's" : fast_budget_, format_bytes(least),
        format_bytes(least),
        100.0 * static_cast<double>(least) / static_cast<double>(std::max<std::uint64_t>(1, footprint)),
        format_bytes(footprint)));
    return;
  }
  inputs->fast_budget_bytes = budget;
  if (const CostModel* model = allocator_.tier(slow).cost_model(); model != nullptr) {
    inputs->move_in_gbps = model->slow_read_gbps();
    inputs->move_out_gbps = model->slow_write_gbps();
    inputs->slow_access_ns_per_byte =
        static_cast<double>(model->layer_charge_ns(1 << 20, 0) + model->layer_charge_ns(0, 1 << 20)) / 2.0 /
        static_cast<double>(1 << 20);
  }
  inputs->clean_moves_out_free = clean_moves_;
  // Dead bytes go uncopied only where moves remap (between anonymous tiers); move_pages carries
  // every page, dead or not, and a move to a new address copies.
  inputs->dead_moves_free = dead_moves_ && allocator_.move_method(fast, slow) == MoveMethod::kRemap &&
                            allocator_.move_method(slow, fast) == MoveMethod::kRemap;
  // The mover copies with one thread: a byte read and written at one thread's share of the
  // measured DRAM bandwidths (the emulated tier's model has them). How much of that the layers
  // lose: RuntimeOptions::mover_steals_compute.
  if (const CostModel* model = allocator_.tier(slow).cost_model(); model != nullptr) {
    const double threads = std::max(1U, std::thread::hardware_concurrency());
    inputs->mover_cpu_ns_per_byte = threads / model->fast_read_gbps() + threads / model->fast_write_gbps();
    inputs->mover_steals_compute = mover_steals_compute_;
  }
  inputs->room_wait_ns = static_cast<double>(room_wait_.count());
  auto plan = migrator::make_plan(policy_, inputs.value());
  if (!plan) return fail_policy(plan.status().message());
  if (!plan->problem.empty()) spdlog::warn("policy '{}': {}", policy_, plan->problem);
  if (!plan->left_in_place.empty()) {
    spdlog::info(
        "policy {}: {} objects stay where they are born ({}): code outside the layers touched them "
        "unpinned in the profiled step (pin_objects, tt_pin let them move)",
        policy_, plan->left_in_place.size(), object_names(profile, plan->left_in_place));
  }
  if (clean_moves_) allocator_.set_keep_shadows(true);
  // Births wait for the plan's moves out of the fast tier (queued or under way) that would make
  // their room; running_ is the executor now handing out moves (a retired one lives on).
  allocator_.set_room_wait(room_wait_, [this](TierIndex t) -> std::uint64_t {
    const migrator::Executor* running = running_.load(std::memory_order_acquire);
    return running != nullptr ? running->queued_out_bytes(t) : 0;
  });
  if (Status s = allocator_.set_budget(fast, budget); !s.is_ok())
    spdlog::warn("policy '{}': {}", policy_, s.message());
  plan_layers_ = inputs->layers;
  plan_signatures_ = layer_signatures_;  // start_migration runs at the end of the profiled step
  // A plan that copies is made again once the mover's CPU per byte is measured
  // (RuntimeOptions::measured_mover_steps); its trial then waits for the plan made again.
  if (measured_mover_steps_ > 0 && replan_result_.empty() && plan->mover_cpu_ns > 0) {
    replan_left_ = measured_mover_steps_;
    replan_skip_ = 1;
    plan_inputs_ = inputs.value();
  } else {
    begin_trial(plan.value(), inputs.value());
  }
  const std::uint64_t failed = make_executor(std::move(plan).value());
  // The fast tier's peak under the policy starts once the persistent objects are where the plan
  // starts them (before, it still held what the profiled step left there).
  allocator_.reset_tier_peak(fast);
  const migrator::Plan& p = executor_->plan();
  spdlog::info(
      "policy {}: fast budget {} ({} of the profiled peak footprint {}){}; predicted per step: {} in, {} "
      "out, {} read or "
      "written on the slow tier, {:.1f} ms added; {} persistent objects failed to reach their start tier",
      policy_, format_bytes(budget),
      fmt::format("{:.0f}%", 100.0 * static_cast<double>(budget) /
                                 static_cast<double>(std::max<std::uint64_t>(1, footprint))),
      format_bytes(footprint),
      p.interval_layers != 0 ? fmt::format(", interval {} layers, short-lived region {}", p.interval_layers,
                                           format_bytes(p.region_bytes))
                             : "",
      format_bytes(p.bytes_in), format_bytes(p.bytes_out), format_bytes(p.slow_access_bytes),
      p.predicted_extra_ns / 1e6, failed);
  if (!p.solver.empty()) {
    spdlog::info("policy {}: {}; no plan is predicted to add under {:.1f} ms a step ({})", policy_, p.variant,
                 p.bound_extra_ns / 1e6, p.solver);
  }
  start_executor("does not run");
}

std::uint64_t Runtime::make_executor(migrator::Plan plan) {
  executor_ = std::make_unique<migrator::Executor>(
      std::move(plan), plan_layers_,
      [this](ObjectId id, TierIndex to, const MoveOptions& options) { return move(id, to, options); },
      [this] { return layers_begun_.load(std::memory_order_acquire); },
      [this] { return allocator_.pin_sequence(); });
  const std::uint64_t failed = executor_->place_persistent(allocator_.objects());
  open_arena(executor_->plan());
  return failed;
}

void Runtime::start_executor(std::string_view otherwise) {
  // Its thread first (it waits for the steps' events): where it cannot start, nothing is undone.
  Status s = executor_->start();
  if (s.is_ok()) s = add_observer(executor_.get());
  if (!s.is_ok()) {
    policy_failure_ = fmt::format("policy '{}' {}: {}", policy_, otherwise, s.message());
    spdlog::warn("{}", policy_failure_);
    executor_.reset();
    return;
  }
  advisor_.store(executor_.get(), std::memory_order_release);
  {  // under the lock stats() reads it with (see switch_plan)
    std::lock_guard lock(retired_mutex_);
    running_.store(executor_.get(), std::memory_order_release);
  }
}

void Runtime::open_arena(const migrator::Plan& plan) {
  if (!short_lived_arena_ || plan.region_bytes == 0 || plan.region_offsets.empty() || arena_.load() != 0)
    return;
  Result<ArenaId> arena = allocator_.create_arena(plan.fast, plan.region_bytes);
  if (!arena) {
    spdlog::warn(
        "policy {}: the short-lived region ({}) could not be made, its objects are placed one by one: {}",
        policy_, format_bytes(plan.region_bytes), arena.status().message());
    return;
  }
  arena_.store(arena.value(), std::memory_order_release);
}

void Runtime::close_arena() {
  const ArenaId arena = arena_.exchange(0, std::memory_order_acq_rel);
  if (arena == 0) return;
  if (Status s = allocator_.destroy_arena(arena); !s.is_ok()) {
    // Objects still live in it (one a step left alive past its end): the arena stays until the
    // runtime ends, no new object goes in it.
    spdlog::warn("policy {}: the short-lived region stays: {}", policy_, s.message());
  }
}

void Runtime::begin_trial(const migrator::Plan& plan, const migrator::PlanInputs& inputs) {
  if (trial_started_) return;  // once a run
  trial_ = migrator::PlanTrial::begin(plan, inputs, trial_steps_, policy_);
  trial_started_ = trial_.has_value();
}

void Runtime::install_plan(migrator::Plan next) {
  advisor_.store(nullptr, std::memory_order_release);
  executor_->stop();  // the moves it had queued are done first
  remove_observer(executor_.get());
  close_arena();
  {  // one step for stats(): no executor counted twice or missed
    std::lock_guard lock(retired_mutex_);
    running_.store(nullptr, std::memory_order_release);
    retired_.push_back(std::move(executor_));
  }
  if (const std::uint64_t failed = make_executor(std::move(next)); failed != 0)
    spdlog::warn("policy {}: {} persistent objects failed to reach their start tier", policy_, failed);
  start_executor("stops");
}

// After a step: counts it toward making the plan again with the mover's measured CPU per byte,
// when it was of the planned kind and ran under a plan; makes it and runs it after the last.
void Runtime::replan_step() {
  if (replan_left_ == 0 || executor_ == nullptr || step_profiled_ || !on_plan_ ||
      layer_signatures_.size() != plan_signatures_.size())
    return;
  const migrator::ExecutorStats now = executor_->stats();
  if (replan_skip_ > 0) {  // the first step under a plan places its persistent objects
    --replan_skip_;
    replan_start_ = now;
    return;
  }
  if (--replan_left_ > 0) return;
  migrator::PlanInputs inputs = std::move(plan_inputs_).value();
  plan_inputs_.reset();
  const migrator::ExecutorStats measured_steps = migrator::since(now, replan_start_);
  const std::uint64_t copied_bytes = measured_steps.copied_bytes;
  const double estimate = inputs.mover_cpu_ns_per_byte;
  const migrator::Plan& running = executor_->plan();
  if (copied_bytes == 0) {
    replan_result_ = fmt::format("{} made again: not, its mover copied nothing in {} steps", policy_,
                                 measured_mover_steps_);
    spdlog::info("policy {}", replan_result_);
    begin_trial(running, inputs);
    return;
  }
  inputs.mover_cpu_ns_per_byte =
      static_cast<double>(measured_steps.mover_cpu_ns) / static_cast<double>(copied_bytes);
  measured_mover_cpu_ns_per_byte_ = inputs.mover_cpu_ns_per_byte;
  const double mib = 1 << 20;
  const std::string measured =
      fmt::format("the mover's CPU measured over {} steps, {:.3f} ms a MiB copied (plans estimated {:.3f})",
                  measured_mover_steps_, inputs.mover_cpu_ns_per_byte * mib / 1e6, estimate * mib / 1e6);
  auto remade = migrator::make_plan(policy_, inputs);
  if (!remade) {
    replan_result_ = fmt::format("{} made again with {}: failed, its plan runs on: {}", policy_, measured,
                                 remade.status().message());
    spdlog::warn("policy {}", replan_result_);
    begin_trial(running, inputs);
    return;
  }
  if (!remade->problem.empty()) spdlog::warn("policy '{}': {}", policy_, remade->problem);
  replan_result_ = fmt::format(
      "{} made again with {}: {} in, {} out a step, {:.1f} ms predicted added (its plan before: {} in, {} "
      "out)",
      policy_, measured, format_bytes(remade->bytes_in), format_bytes(remade->bytes_out),
      remade->predicted_extra_ns / 1e6, format_bytes(running.bytes_in), format_bytes(running.bytes_out));
  spdlog::info("policy {}", replan_result_);
  remade->variant =
      (remade->variant.empty() ? "" : remade->variant + "; ") + "made again with the mover's CPU as measured";
  begin_trial(remade.value(), inputs);
  install_plan(std::move(remade).value());
}

// One step's time for the trial, when the step was of the planned kind and ran under a plan.
void Runtime::trial_step(std::uint64_t duration_ns) {
  if (!trial_ || executor_ == nullptr || step_profiled_ || !on_plan_ ||
      layer_signatures_.size() != plan_signatures_.size())
    return;
  std::optional<migrator::Plan> next = trial_->step(duration_ns, step_layer_ns_, executor_->plan());
  if (trial_->done()) {
    trial_result_ = trial_->result();
    spdlog::info("policy {}", trial_result_);
  }
  if (next) install_plan(std::move(*next));
  if (trial_->done()) trial_.reset();
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
  on_plan_ = true;
  step_charge_ns_ = 0;
  step_slow_bytes_ = step_move_wait_ns_ = step_late_moves_ = 0;
  layers_begun_.store(0, std::memory_order_release);
  step_ordinal_.store(0, std::memory_order_relaxed);
  training_thread_.store(static_cast<std::uintptr_t>(pthread_self()), std::memory_order_relaxed);
  // Started when the step before ended (begin_profile_window), or now where it was asked for since.
  if (profiler_ == nullptr && profile_due()) begin_profile_window(/*at_step_begin=*/true);
  const bool profiled = profiler_ != nullptr;
  step_profiled_ = profiled;
  if (executor_ != nullptr) executor_->set_paused(profiled);  // the profiled step runs unplanned
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
  const std::uint64_t duration_ns = now_ns() - step_start_ns_;
  in_step_.store(false, std::memory_order_release);
  const std::uint64_t step = steps_completed_.load();
  ++steps_completed_;
  run_length_ = (signature_ == last_signature_ && steps_completed_ > 1) ? run_length_ + 1 : 1;
  last_signature_ = signature_;
  if (profiler_ != nullptr) finish_profile(duration_ns);
  trial_step(duration_ns);
  replan_step();
  last_step_.swap(current_step_);
  {
    std::lock_guard lock(stats_mutex_);
    last_step_charge_ns_ = step_charge_ns_;
    last_step_slow_bytes_ = step_slow_bytes_;
    last_step_move_wait_ns_ = step_move_wait_ns_;
    last_step_late_moves_ = step_late_moves_;
  }
  notify([&](StepObserver& o) { o.on_step_end(StepEndEvent{step, signature_, duration_ns}); });
  // A profile due for the next step starts now: the host code between the two steps (a loader
  // filling the batch) is profiled too, and a plan leaves what it touches unpinned in place.
  if (profile_due()) begin_profile_window(/*at_step_begin=*/false);
  return Status::ok();
}

void Runtime::begin_profile_window(bool at_step_begin) {
  const bool requested = profile_requested_;
  start_profile(at_step_begin);
  if (profiler_ == nullptr) return;  // at a step's end: tried again when the step begins
  profiling_for_ = requested ? std::nullopt : std::optional<std::uint64_t>(last_signature_);
  profile_requested_ = false;
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
  for (std::size_t i = 0; i < pinned_.size(); ++i) {
    const PinnedObject& o = pinned_objects_[i];
    addresses[i] = o.address;
    mix(o.bytes);
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
  if (on_plan_ && executor_ != nullptr &&
      (record.index >= plan_signatures_.size() || plan_signatures_[record.index] != signature_)) {
    on_plan_ = false;
    executor_->set_off_plan();
  }
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
  layer_start_ns_ = now_ns();
  return Status::ok();
}

Status Runtime::pin_objects(std::span<const ObjectId> ids, std::span<void*> addresses) {
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
  allocator_.unpin(ids);
}

Status Runtime::layer_end() {
  TENSORTIER_RETURN_IF_ERROR(not_forked("layer_end"));
  if (!in_layer_) return failed_precondition("layer_end without layer_begin");
  // The emulated charge: the layer's slow-tier traffic, placed on each tier's bandwidth timeline
  // so that it ends `charge` after now unless moves hold the tier longer.
  const std::uint64_t charge_start_ns = now_ns();
  std::uint64_t charge_ns = 0, traffic_end_ns = 0, slow_read = 0, slow_written = 0;
  for (TierIndex t = 0; t < allocator_.tier_count(); ++t) {
    if (slow_read_bytes_[t] == 0 && slow_written_bytes_[t] == 0) continue;
    const CostModel& model = *allocator_.tier(t).cost_model();
    const std::uint64_t tier_charge = model.layer_charge_ns(slow_read_bytes_[t], slow_written_bytes_[t]);
    charge_ns += tier_charge;
    slow_read += slow_read_bytes_[t];
    slow_written += slow_written_bytes_[t];
    std::lock_guard lock(stats_mutex_);
    tier_charge_ns_[t] += tier_charge;
  }
  if (charge_ns > 0) {
    for (TierIndex t = 0; t < allocator_.tier_count(); ++t) {
      if (slow_read_bytes_[t] == 0 && slow_written_bytes_[t] == 0) continue;
      const std::uint64_t traffic =
          allocator_.tier(t).cost_model()->slow_traffic_ns(slow_read_bytes_[t], slow_written_bytes_[t]);
      const std::uint64_t want_end = charge_start_ns + charge_ns;
      traffic_end_ns = std::max(traffic_end_ns, allocator_.tier(t).timeline()->reserve(
                                                    want_end > traffic ? want_end - traffic : 0, traffic));
    }
    wait_until_ns(std::max(traffic_end_ns, charge_start_ns + charge_ns));
  }
  const std::uint64_t charged_ns = charge_ns > 0 ? now_ns() - charge_start_ns : 0;
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
  allocator_.unpin(pinned_);
  pinned_.clear();
  in_layer_ = false;
  notify([&](StepObserver& o) {
    o.on_layer_end(LayerEndEvent{record.index, record.duration_ns, charged_ns, slow_read, slow_written});
  });
  return Status::ok();
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
