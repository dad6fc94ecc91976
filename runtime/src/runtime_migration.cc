// The runtime's migration: a plan made from the profile, its executor, the short-lived arena, the
// trial (migrator::PlanTrial) and plans made again with the mover's measured CPU.
// Runtime: tier resolution, object placement and step/layer marks (see runtime.h).
#include "tensortier/runtime.h"

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
#include <unordered_map>

#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "fork_guard.h"
#include "tensortier/allocator/layer_charge.h"
#include "tensortier/allocator/tier_spec.h"
#include "tensortier/allocator/topology.h"
#include "tensortier/migrator/plan.h"

namespace tensortier {
namespace {

// The profile's names of the objects with these keys, comma-separated, the first few.
std::string object_names(const profiler::StepProfile& profile, std::span<const ObjectKey> keys) {
  std::string names;
  std::size_t shown = 0;
  for (const profiler::ObjectProfile& o : profile.objects) {
    if (std::ranges::find(keys, migrator::plan_key(o.key, o.id, !o.born_at_layer)) == keys.end()) continue;
    if (shown++ == 4) return names + ", ...";
    names += (names.empty() ? "" : ", ") + o.name;
  }
  return names;
}

// Each persistent object's tier as it is now (the profile saw where it was born): where a plan
// starts it if it stays.
void set_current_tiers(migrator::PlanInputs& inputs, const std::vector<ObjectInfo>& objects) {
  std::unordered_map<ObjectKey, TierIndex> tiers;
  for (const ObjectInfo& o : objects) tiers.emplace(migrator::plan_key(o.key, o.id, true), o.tier);
  for (migrator::PlanObject& o : inputs.objects) {
    if (auto it = tiers.find(o.key); o.persistent && it != tiers.end()) o.tier = it->second;
  }
}

std::vector<ObjectKey> stay_put_keys(const migrator::PlanInputs& inputs) {
  std::vector<ObjectKey> keys;
  for (const migrator::PlanObject& o : inputs.objects) {
    if (o.persistent && o.stays()) keys.push_back(o.key);
  }
  return keys;
}

// A shadow of an object that stays (a slow copy kept from a move in) would be taken for its bytes
// by a clean move out: writes made unpinned since would be undone. Plans never move such objects;
// their shadows go at each plan install.
void drop_stay_put_shadows(const migrator::Plan& plan, std::span<const ObjectInfo> objects,
                           ObjectAllocator& allocator) {
  std::vector<ObjectId> ids;
  for (const ObjectInfo& o : objects) {
    if (std::ranges::binary_search(plan.stay_put, migrator::plan_key(o.key, o.id, true))) ids.push_back(o.id);
  }
  allocator.drop_shadows(ids);
}

}  // namespace

// Each layer's accesses to objects it did not declare, and the host code's before it, from the
// profile's page protection: whole units read first and units written, at most the object's bytes.
std::vector<std::vector<Runtime::UndeclaredAccess>> Runtime::undeclared_accesses(
    const profiler::StepProfile& profile) {
  std::vector<std::vector<UndeclaredAccess>> out(profile.layers.size());
  for (std::size_t l = 0; l < profile.layers.size(); ++l) {
    const profiler::LayerProfile& layer = profile.layers[l];
    auto add = [&](const profiler::SpanAccessProfile& a, bool host) {
      const profiler::ObjectProfile* o = a.is_group ? nullptr : profile.object(a.id);
      if (o == nullptr) return;
      if (!host && (std::ranges::find(layer.declared_reads, a.id) != layer.declared_reads.end() ||
                    std::ranges::find(layer.declared_writes, a.id) != layer.declared_writes.end()))
        return;
      out[l].push_back({migrator::plan_key(o->key, o->id, !o->born_at_layer.has_value()),
                        std::min(o->bytes, a.pages_read * a.page_bytes),
                        std::min(o->bytes, a.pages_written * a.page_bytes)});
    };
    for (const profiler::SpanAccessProfile& a : layer.accesses) add(a, false);
    for (const profiler::SpanAccessProfile& a : layer.accesses_before) add(a, true);
  }
  return out;
}

void Runtime::fail_policy(std::string_view why) {
  policy_failure_ = fmt::format("policy '{}' does not run: {}", policy_, why);
  spdlog::warn("{}", policy_failure_);
}

// Plans `policy_` from the profile: inputs, budget and rates; the plan; the allocator made ready
// for it (shadows, room wait, budget); its trial or its wait for the mover's measured CPU; the
// executor started.
Result<migrator::PlanInputs> Runtime::plan_inputs(const profiler::StepProfile& profile) const {
  const TierIndex fast = 0, slow = static_cast<TierIndex>(allocator_.tier_count() - 1);
  auto inputs = migrator::inputs_from_profile(profile, fast, slow, allocator_.tier(fast).budget_bytes());
  if (!inputs) return inputs.status();
  set_current_tiers(inputs.value(), allocator_.objects());
  const Result<std::uint64_t> budget = fast_budget_for(inputs.value());
  if (!budget) return budget.status();
  inputs->fast_budget_bytes = *budget;
  migrator::set_rates(inputs.value(), plan_rates(fast, slow));
  return inputs;
}

void Runtime::start_migration(std::shared_ptr<const profiler::StepProfile> made_from) {
  const profiler::StepProfile& profile = *made_from;
  auto inputs = plan_inputs(profile);
  if (!inputs) return fail_policy(inputs.status().message());
  const std::uint64_t budget = inputs->fast_budget_bytes;
  auto plan = migrator::make_plan(policy_, inputs.value());
  if (!plan && plan.status().code() == StatusCode::kFailedPrecondition) {
    const std::vector<ObjectKey> staying = stay_put_keys(inputs.value());
    return fail_policy(fmt::format("{} ({})", plan.status().message(), object_names(profile, staying)));
  }
  if (!plan) return fail_policy(plan.status().message());
  if (plan->must_fit) {  // it runs as made or not at all
    if (!ready_memory_) {
      return fail_policy(
          "it lays every object out in one arena of ready memory, which is off here "
          "(TENSORTIER_READY_MEMORY=0, "
          "or the C API); fast-only places the objects alike without the arena");
    }
    const std::string& problem = !plan->problem.empty() ? plan->problem : plan->places.problem;
    if (!problem.empty())
      return fail_policy("it moves nothing, so all of it must fit the fast budget: " + problem);
  }
  if (!plan->problem.empty()) spdlog::warn("policy '{}': {}", policy_, plan->problem);
  if (!plan->stay_put.empty()) {
    spdlog::info(
        "policy {}: {} persistent objects stay where they are, on no plan's moves ({}): code outside the "
        "layers touched them unpinned in the profiled step (pin_objects, tt_pin let them move)",
        policy_, plan->stay_put.size(), object_names(profile, plan->stay_put));
  }
  if (!plan->left_in_place.empty()) {
    spdlog::info(
        "policy {}: {} objects stay where they are born ({}): code outside the layers touched them "
        "unpinned in the profiled step (pin_objects, tt_pin let them move)",
        policy_, plan->left_in_place.size(), object_names(profile, plan->left_in_place));
  }
  prepare_allocator(budget);
  plan_layers_ = inputs->layers;
  plan_signatures_ = layer_signatures_;  // start_migration runs at the end of the profiled step
  plan_shapes_ = layer_shapes_;
  plan_undeclared_ = undeclared_accesses(profile);
  plan_kind_steps_ = off_plan_said_ = 0;
  plan_profile_ = std::move(made_from);
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
  allocator_.reset_tier_peak(inputs->fast);
  log_plan(budget, inputs->peak_bytes + inputs->small_reserve_bytes, failed);
  start_executor("does not run");
}

// The fast budget: a share of the step's peak footprint as a tier holds it (whole pages, small
// objects' chunks), a size, or the tier's; never more than the tier holds, never less than the
// small objects' chunks need (then the policy fails and none is returned).
Result<std::uint64_t> Runtime::fast_budget_for(const migrator::PlanInputs& inputs) const {
  const FastBudget parsed = parse_fast_budget(fast_budget_, "fast budget").value();  // checked in create()
  const std::uint64_t footprint = inputs.peak_bytes + inputs.small_reserve_bytes;
  const std::uint64_t tier_budget = allocator_.tier(inputs.fast).budget_bytes();
  std::uint64_t budget = tier_budget;
  if (parsed.share > 0) {
    budget = static_cast<std::uint64_t>(parsed.share * static_cast<double>(footprint));
  } else if (parsed.bytes > 0) {
    budget = parsed.bytes;
  }
  // The references run on the tiers as they are: fast-only with all of the fast tier (the
  // baseline every other policy is measured against), slow-only with nothing planned fast.
  if (migrator::is_reference_policy(policy_)) budget = tier_budget;
  if (budget > tier_budget) {
    spdlog::warn(
        "policy {}: a fast budget of {} ({} of the profiled peak footprint {}) is more than the fast "
        "tier holds: it keeps the tier's {}",
        policy_, format_bytes(budget), fast_budget_, format_bytes(footprint), format_bytes(tier_budget));
    budget = tier_budget;
  }
  // Small objects are not planned: their chunks need room on the fast tier whatever the plan.
  const std::uint64_t least = std::max<std::uint64_t>(inputs.small_reserve_bytes, kGroupChunkBytes);
  if (budget >= least) return budget;
  return failed_precondition(fmt::format(
      "a fast budget of {} ({}) is less than the profiled step's small objects need on the fast tier ({} "
      "of chunks): give at least {} ({:.2f}% of the profiled peak footprint {})",
      format_bytes(budget), fast_budget_.empty() ? "the tier's" : fast_budget_, format_bytes(least),
      format_bytes(least),
      100.0 * static_cast<double>(least) / static_cast<double>(std::max<std::uint64_t>(1, footprint)),
      format_bytes(footprint)));
}

// The rates a plan is weighed with, read off the tiers and settings (migrator::set_rates applies
// them): the slow tier's cost model (where it has one) for moves, slow accesses and the DRAM
// bandwidths the mover's copies take; a GPU's link where the fast tier is a device's.
migrator::TierRates Runtime::plan_rates(TierIndex fast, TierIndex slow) const {
  migrator::TierRates rates;
  if (const CostModel* model = allocator_.tier(slow).cost_model(); model != nullptr) {
    rates.slow_read_gbps = model->slow_read_gbps();
    rates.slow_write_gbps = model->slow_write_gbps();
    rates.slow_access_ns_per_byte =
        static_cast<double>(model->layer_charge_ns(1 << 20, 0) + model->layer_charge_ns(0, 1 << 20)) / 2.0 /
        static_cast<double>(1 << 20);
    rates.fast_read_gbps = model->fast_read_gbps();
    rates.fast_write_gbps = model->fast_write_gbps();
    rates.cpu_threads = std::thread::hardware_concurrency();
    rates.mover_steals_compute = mover_steals_compute_;
  }
  rates.clean_moves_out_free = clean_moves_;
  rates.ready_memory = ready_memory_;
  // Dead bytes go uncopied only where moves remap (between anonymous tiers); move_pages carries
  // every page, dead or not, and a move to a new address copies.
  rates.dead_moves_free = dead_moves_ && allocator_.move_method(fast, slow) == MoveMethod::kRemap &&
                          allocator_.move_method(slow, fast) == MoveMethod::kRemap;
  rates.room_wait_ns = static_cast<double>(room_wait_.count());
  rates.timed_program_s = timed_bound_s_;
  rates.tightened_program_s = tightened_bound_s_;
  if (tier_provider_ != nullptr && allocator_.tier(fast).range_kind() == RangeKind::kDevice) {
    const LinkGbps link = tier_provider_->link_gbps();
    rates.link_to_fast_gbps = link.to_device;
    rates.link_to_slow_gbps = link.to_host;
  }
  return rates;
}

// Shadows kept where clean moves are free; births wait for the plan's moves out of the fast tier
// (queued or under way) that would make their room (running_ is the executor now handing out
// moves; a retired one lives on); the fast tier held to the budget.
void Runtime::prepare_allocator(std::uint64_t budget) {
  if (clean_moves_) allocator_.set_keep_shadows(true);
  allocator_.set_room_wait(room_wait_, [this](TierIndex t) -> std::uint64_t {
    const migrator::Executor* running = running_.load(std::memory_order_acquire);
    return running != nullptr ? running->queued_out_bytes(t) : 0;
  });
  if (Status s = allocator_.set_budget(0, budget); !s.is_ok())
    spdlog::warn("policy '{}': {}", policy_, s.message());
}

void Runtime::log_plan(std::uint64_t budget, std::uint64_t footprint, std::uint64_t failed) const {
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
  if (!p.places.empty()) {
    spdlog::info(
        "policy {}: ready memory: fast arena {} for {} stays (their max-live {}), {} beside it, homes {} "
        "for {} objects; planned again under a lower budget {} times",
        policy_, format_bytes(p.places.fast_bytes), p.places.stays,
        format_bytes(p.places.fast_max_live_bytes), format_bytes(p.places.unplaced_fast_bytes),
        format_bytes(p.places.home_bytes), p.places.homes, p.places.replans);
  }
  if (!p.solver.empty()) {
    spdlog::info("policy {}: {}; no plan is predicted to add under {:.1f} ms a step ({})", policy_, p.variant,
                 p.bound_extra_ns / 1e6, p.solver);
  }
}

std::uint64_t Runtime::make_executor(migrator::Plan plan) {
  executor_ = std::make_unique<migrator::Executor>(
      std::move(plan), plan_layers_,
      [this](ObjectId id, TierIndex to, const MoveOptions& options) { return move(id, to, options); },
      [this] { return layers_begun_.load(std::memory_order_acquire); },
      [this] { return allocator_.pin_sequence(); });
  executor_->set_mover_cpu(mover_cpu_);
  const bool placed = open_places(executor_->plan());
  const std::vector<ObjectInfo> objects = allocator_.objects();
  drop_stay_put_shadows(executor_->plan(), objects, allocator_);
  const std::uint64_t failed = executor_->place_persistent(objects);
  if (!placed) open_arena(executor_->plan());  // (with places, the short-lived objects have theirs)
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
  if (const std::string problem = executor_->mover_cpu_problem(); !problem.empty() && !mover_cpu_warned_) {
    spdlog::warn("policy {}: {}", policy_, problem);
    mover_cpu_warned_ = true;
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
  // Objects still live in it (one a step left alive past its end): no new object goes in it, its
  // range goes when the last of them is freed.
  if (Result<std::size_t> left = allocator_.close_arena(arena); left && left.value() > 0)
    spdlog::warn("policy {}: the short-lived region stays until its {} objects left are freed", policy_,
                 left.value());
}

// Moves every large object of the allocator's that `leaves` picks to tier `to`, in up to three
// passes (a move can fail for a while: its object pinned, a copy refused); what still cannot
// leave stays where it is.
template <typename Leaves>
void Runtime::move_all(Leaves leaves, TierIndex to) {
  for (int pass = 0; pass < 3; ++pass) {
    bool stayed = false;
    for (const ObjectInfo& o : allocator_.objects()) {
      if (!o.small && leaves(o) && !allocator_.move(o.id, to)) stayed = true;
    }
    if (!stayed) return;
  }
}

bool Runtime::open_places(const migrator::Plan& plan) {
  const migrator::PlacesPlan& places = plan.places;
  if (!ready_memory_ || places.empty() || !places.problem.empty()) {
    if (ready_memory_ && !places.problem.empty()) {
      // A trial's phase runs an edit of the plan (plan_edits.cc), laid out anew: say which.
      const std::string phase =
          trial_ ? fmt::format(" (its trial's phase {})", trial_->phases()[trial_->running_phase()]) : "";
      spdlog::warn("policy {}{}: no ready memory, its moves go in place: {}", policy_, phase, places.problem);
    }
    return false;
  }
  // The arena needs the fast tier's room: the objects the plan places or starts somewhere leave it
  // first (for the slow tier; place_persistent then brings each where the plan starts it), and
  // the cache goes.
  // Where one cannot leave, the arena may not fit: said below.
  move_all(
      [&](const ObjectInfo& o) {
        // Under either key (migrator::plan_key): whether a live object was made before the
        // profiled step or in it is not known here.
        const ObjectKey earlier = migrator::plan_key(o.key, o.id, true);
        if (std::ranges::binary_search(plan.stay_put, earlier)) return false;  // never moved by a plan
        return o.tier == plan.fast && o.arena == 0 &&
               (places.first.contains(o.key) || plan.start.contains(o.key) ||
                places.first.contains(earlier) || plan.start.contains(earlier));
      },
      plan.slow);
  allocator_.release_cache();
  Result<ArenaId> fast =
      allocator_.create_arena(plan.fast, std::max<std::uint64_t>(places.fast_bytes, kPageBytes));
  Result<ArenaId> home =
      allocator_.create_arena(plan.slow, std::max<std::uint64_t>(places.home_bytes, kPageBytes));
  if (!fast || !home) {
    spdlog::warn("policy {}: no ready memory (fast arena {}, homes {}), its moves go in place: {}", policy_,
                 format_bytes(places.fast_bytes), format_bytes(places.home_bytes),
                 (!fast ? fast.status() : home.status()).message());
    if (fast) (void)allocator_.destroy_arena(fast.value());
    if (home) (void)allocator_.destroy_arena(home.value());
    return false;
  }
  fast_places_ = fast.value();
  home_places_ = home.value();
  executor_->set_places(fast_places_, home_places_);
  return true;
}

void Runtime::close_places() {
  if (fast_places_ == 0) return;
  // To ranges of the slow tier (the next plan places them again). Where one cannot leave, its
  // arena stays, taking no new object, until the last of its objects is freed.
  move_all([&](const ObjectInfo& o) { return o.arena == fast_places_ || o.arena == home_places_; },
           static_cast<TierIndex>(allocator_.tier_count() - 1));
  for (ArenaId* arena : {&fast_places_, &home_places_}) {
    if (Result<std::size_t> left = allocator_.close_arena(*arena); left && left.value() > 0)
      spdlog::warn("policy {}: ready memory ({}) stays until its {} objects left are freed", policy_,
                   arena == &fast_places_ ? "the fast arena" : "homes", left.value());
    *arena = 0;
  }
}

void Runtime::begin_trial(const migrator::Plan& plan, const migrator::PlanInputs& inputs) {
  if (trial_started_) return;  // once a run
  trial_ = migrator::PlanTrial::begin(plan, inputs, trial_steps_, policy_);
  trial_started_ = trial_.has_value();
}

void Runtime::retire_executor() {
  advisor_.store(nullptr, std::memory_order_release);
  executor_->stop();  // the moves it had queued are done first
  remove_observer(executor_.get());
  close_arena();
  close_places();
  {  // one step for stats(): no executor counted twice or missed
    std::lock_guard lock(retired_mutex_);
    running_.store(nullptr, std::memory_order_release);
    retired_.push_back(std::move(executor_));
  }
}

void Runtime::follow_steady_kind(std::shared_ptr<const profiler::StepProfile> profile) {
  spdlog::info(
      "policy {}: no step was of the kind its plan was made from (profiled step {}) since; it is made "
      "again from profiled step {}",
      policy_, plan_profile_->step, profile->step);
  retire_executor();
  trial_.reset();
  trial_started_ = false;
  replan_left_ = replan_skip_ = 0;
  plan_inputs_.reset();
  start_migration(std::move(profile));
}

void Runtime::install_plan(migrator::Plan next) {
  retire_executor();
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

}  // namespace tensortier
