// bench_training: step time of a model on the dnn engine, through the runtime on one or more tier
// specs and, side by side in the same process, with plain aligned allocation (the runtime's own
// cost); page faults and emulated charge per steady-state step. Steps of all modes alternate so
// that machine noise hits them alike. Every mode with an emulated tier is named "emulated" with
// its preset. Prints one JSON line per mode (for bench/compare_*.sh) after a table.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string_view>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "emulated_note.h"
#include "migration_stats.h"
#include "stats.h"
#include "tensortier/cli/runtime_flags.h"
#include "tensortier/dnn/data.h"
#include "tensortier/dnn/memory_flags.h"
#include "tensortier/dnn/models.h"
#include "tensortier/settings.h"

namespace {

using namespace tensortier;
using namespace tensortier::dnn;
using tensortier::bench::emulated_note;
using tensortier::bench::median;
using tensortier::bench::migration_per_step;
using tensortier::bench::MigrationPerStep;

long page_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt + usage.ru_majflt;
}

struct Run {
  std::string mode;  // "runtime" (the first spec), "runtime:<spec>" (others), "plain"
  std::string tiers;
  std::unique_ptr<Runtime> runtime;  // null for plain
  Engine engine;
  std::unique_ptr<Network> net;
  std::unique_ptr<BatchIterator> batches;
  Batch batch;
  std::vector<double> step_ms;
  std::vector<double> faults;
  std::vector<double> charge_ms;
  std::vector<double> slow_mib;  // declared MiB its layers found on an emulated tier, per step
  // Its executors' counts before the first measured step (the warm-up steps under a plan include
  // the first, which places the plan's objects).
  migrator::ExecutorStats before_measured;
};

// Its executors' counts over the measured steps, per step (zero for plain).
MigrationPerStep measured_part(const Run& r, int steps) {
  if (!r.runtime) return {};
  return migration_per_step(r.before_measured, r.runtime->stats().migration, steps);
}

// The plan's floor over fast-only (1 with no plan).
double floor_of(const Run& r) {
  const migrator::Plan* plan = r.runtime ? r.runtime->plan() : nullptr;
  if (plan == nullptr || plan->compute_ns <= 0) return 1.0;
  return std::max(plan->compute_ns, plan->floor_slow_ns) / plan->compute_ns;
}

// What the plan predicted for a step, for beside what happened.
std::string plan_note(const migrator::Plan* plan) {
  if (plan == nullptr) return "";
  return fmt::format(
      "; fast budget {}, floor {:.2f}x of fast-only; planned {} in, {} out, {} on the slow tier, births "
      "waiting {:.1f} ms for room and {:.1f} ms for their places ({} falling back), {} of moves in refused "
      "for room births took, mover CPU "
      "{:.1f} ms, {:.1f} ms added (no plan adds under {:.1f} ms with the slow channel in time: {}){}{}{}",
      format_bytes(plan->fast_budget_bytes),
      plan->compute_ns > 0 ? std::max(plan->compute_ns, plan->floor_slow_ns) / plan->compute_ns : 1.0,
      format_bytes(plan->bytes_in), format_bytes(plan->bytes_out), format_bytes(plan->slow_access_bytes),
      plan->room_wait_ns / 1e6, plan->place_wait_ns / 1e6, format_bytes(plan->fallback_bytes),
      format_bytes(plan->failed_in_bytes), plan->mover_cpu_ns / 1e6, plan->predicted_extra_ns / 1e6,
      plan->timed_bound_ns / 1e6, plan->timed_bound,
      plan->interval_layers != 0 ? fmt::format(", interval {} layers", plan->interval_layers) : "",
      plan->variant.empty() ? "" : fmt::format(", {}", plan->variant),
      plan->solver.empty() ? ""
                           : fmt::format("; no plan predicts under {:.1f} ms added ({})",
                                         plan->bound_extra_ns / 1e6, plan->solver));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Step time of the dnn engine: through the runtime (one or more tier specs) vs plain allocation"};
  std::string model = "resnet18";
  std::vector<std::string> tiers{"fast=dram:8GiB"};
  int batch = 32, steps = 10, warmup = 3, size = 32, width = 64;
  app.add_option("--model", model, "Model")->capture_default_str();
  app.add_option("--batch", batch, "Batch size")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--image-size", size, "Input height and width (3 channels)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--width", width, "Model width (channels of the first stage)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "Measured steps per mode")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "Unmeasured steps first")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  std::vector<std::string> policies;
  std::string fast_budget;
  app.add_option(
      "--policy", policies,
      "Run each tier spec under this migration policy; repeat for more (fast-only is the reference); "
      "NAME+copies runs it with every move out copying (no shadow copies), NAME+copy-dead with moves of "
      "dead bytes copying too, NAME+no-arena with its short-lived objects allocated one by one, "
      "NAME+no-room-wait with objects that find no room falling back at once (no wait for moves out), "
      "NAME+free-mover with plans that count none of the mover's CPU against the layers "
      "(RuntimeOptions::mover_steals_compute 0), NAME+measured-mover with its plan made again after steps "
      "3-4 with the mover's CPU per byte as measured in them (needs --warmup 5 or more; last of the "
      "suffixes), NAME+remap with its moves made in place (copy + mremap) instead of between planned "
      "places in ready memory (before +measured-mover)");
  cli::add_fast_budget_flag(app, fast_budget, "every policy's");
  cli::add_tiers_flag(app, tiers, "one runtime mode each; repeat for more modes (ratios are to the first)")
      ->capture_default_str();
  std::string conv = "auto";
  app.add_option("--conv", conv,
                 "Convolution algorithm of every mode: auto (Winograd where it pays) or direct")
      ->capture_default_str();
  MemoryOptions memory;
  dnn::add_memory_flags(app, memory, "every mode; ");
  bool keep_tensors = false;
  app.add_flag("--keep-tensors", keep_tensors,
               "Every forward tensor kept to its backward and parameters' gradients across steps, as "
               "before autograd's lifetimes (every mode; with --no-in-place --no-fuse: the engine before "
               "issue 38)");
  CLI11_PARSE(app, argc, argv);
  const Result<ConvAlgorithm> conv_algorithm = parse_conv_algorithm(conv);
  if (!conv_algorithm)
    return fmt::print(stderr, "bench_training: --conv: {}\n", conv_algorithm.status().to_string()), 2;
  const Result<std::optional<bool>> log_info = settings::env_switch("TENSORTIER_LOG_INFO");
  if (!log_info) return fmt::print(stderr, "bench_training: {}\n", log_info.status().message()), 2;
  spdlog::set_level(log_info->value_or(false) ? spdlog::level::info : spdlog::level::warn);

  const dnnl::memory::dims input{batch, 3, size, size};
  const Dataset data = synthetic_dataset(static_cast<std::size_t>(batch) * 4, 3, size, size, 10, 1);
  std::vector<Run> runs;
  std::vector<std::pair<std::string, std::string>> modes;  // (tier spec, policy)
  for (const std::string& spec : tiers) {
    if (policies.empty()) modes.emplace_back(spec, "");
    for (const std::string& policy : policies) modes.emplace_back(spec, policy);
  }
  if (!policies.empty() && warmup < 3) {
    fmt::print(stderr,
               "bench_training: with --policy, --warmup must be at least 3 (step 1 is profiled, the policy "
               "starts at step 2)\n");
    return 1;
  }
  for (const auto& [spec, policy] : modes) {
    if (policy.find("+measured-mover") != std::string::npos && warmup < 5) {
      fmt::print(
          stderr,
          "bench_training: --policy {}: --warmup must be at least 5 (the plan is made again after step "
          "4, and places its objects in step 5)\n",
          policy);
      return 1;
    }
    RuntimeOptions options(spec);
    options.profile.enabled = !policy.empty();  // a policy plans from the profile of step 1
    // NAME+copies: the policy with every move out copying (no shadow copies kept); NAME+copy-dead:
    // moves of dead bytes copy as any other (RuntimeOptions::dead_moves off); NAME+no-arena: its
    // short-lived objects allocated one by one, not at their planned offsets in one arena;
    // NAME+no-room-wait: an object born with no room on the fast tier falls back at once
    // (RuntimeOptions::room_wait 0); NAME+free-mover: plans weigh moves without the mover's CPU
    // (RuntimeOptions::mover_steals_compute 0, as if the mover had a core of its own); NAME+remap:
    // its moves in place as before ready memory (RuntimeOptions::ready_memory off: copy + mremap).
    std::string name = policy;
    auto strip = [&name](std::string_view suffix) {  // true where `name` ended with it, now cut off
      if (!name.ends_with(suffix)) return false;
      name.resize(name.size() - suffix.size());
      return true;
    };
    const bool measured_mover = strip("+measured-mover");
    const bool remap_moves = strip("+remap");
    const bool free_mover = strip("+free-mover");
    const bool no_room_wait = strip("+no-room-wait");
    const bool no_arena = strip("+no-arena");
    const bool copy_dead = strip("+copy-dead");
    const bool copies = strip("+copies");
    options.policy = name;
    options.clean_moves = !copies;
    options.dead_moves = !copy_dead;
    options.short_lived_arena = !no_arena;
    options.ready_memory = !remap_moves;
    if (no_room_wait) options.room_wait = std::chrono::nanoseconds{0};
    if (free_mover) options.mover_steals_compute = 0;
    options.fast_budget = fast_budget;
    // The timed bound's channel program, printed beside each plan (fast-only's needs none).
    if (name != "fast-only") options.timed_bound_s = 60;
    options.trial_steps = 0;  // the policy's plan as made, every measured step (no trial swap)
    // Step 1 is profiled, step 2 places the plan's objects, steps 3-4 measure the mover; the plan
    // made again runs from step 5 (placing its objects), so measured steps start at 6.
    if (measured_mover) options.measured_mover_steps = 2;
    auto rt = Runtime::create(options);
    if (!rt) {
      fmt::print(stderr, "bench_training: --tiers '{}'{}: {}\n", spec,
                 policy.empty() ? "" : " --policy " + policy, rt.status().to_string());
      return 1;
    }
    Engine engine(*rt.value());
    const std::string label = policy.empty() ? spec : spec + " " + policy;
    runs.push_back(Run{runs.empty() ? "runtime" : "runtime:" + label,
                       label,
                       std::move(rt).value(),
                       std::move(engine),
                       nullptr,
                       nullptr,
                       {},
                       {},
                       {},
                       {},
                       {},
                       {}});
  }
  runs.push_back(
      Run{"plain", "", nullptr, Engine::without_runtime(), nullptr, nullptr, {}, {}, {}, {}, {}, {}});
  for (Run& r : runs) {
    r.engine.set_conv_algorithm(conv_algorithm.value());
    r.engine.set_memory_options(memory);
    auto net = make_model(model, {10, width});
    if (!net) return fmt::print(stderr, "{}\n", net.status().to_string()), 1;
    r.net = std::move(net).value();
    r.net->set_free_after_last_reader(!keep_tensors);
    r.net->set_keep_gradients(keep_tensors);
    if (Status s = r.net->build(r.engine, input, 1); !s.is_ok())
      return fmt::print(stderr, "{}\n", s.to_string()), 1;
    r.batches = std::make_unique<BatchIterator>(data, static_cast<std::size_t>(batch), 1);
  }
  const SgdOptions sgd{0.01F, 0.9F, 5e-4F};
  for (int step = 0; step < warmup + steps; ++step) {
    for (Run& r : runs) {
      if (!r.batches->next(r.engine, r.batch).is_ok()) return 1;
      if (step == warmup && r.runtime) r.before_measured = r.runtime->stats().migration;
      const long f0 = page_faults();
      const auto t0 = std::chrono::steady_clock::now();
      if (r.runtime) (void)r.runtime->step_begin();
      auto result = r.net->train_step(r.engine, r.batch, sgd);
      if (r.runtime) (void)r.runtime->step_end();
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (!result) return fmt::print(stderr, "{}\n", result.status().to_string()), 1;
      if (step >= warmup) {
        r.step_ms.push_back(ms);
        r.faults.push_back(static_cast<double>(page_faults() - f0));
        const RuntimeStats st = r.runtime ? r.runtime->stats() : RuntimeStats{};
        r.charge_ms.push_back(static_cast<double>(st.last_step_emulated_charge_ns) / 1e6);
        r.slow_mib.push_back(static_cast<double>(st.last_step_slow_bytes) / (1 << 20));
      }
    }
  }
  fmt::print("{} width {} batch {} input {}x{}x3, {} steps after {} warm-up, modes alternating\n", model,
             width, batch, size, size, steps, warmup);
  fmt::print("{:<4} {:>16} {:>12} {:>12} {:>18}  {}\n", "mode", "median ms/step", "/ first", "/ plain",
             "emulated ms/step", "tiers");
  const double first = median(runs.front().step_ms), plain = median(runs.back().step_ms);
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const Run& r = runs[i];
    fmt::print("{:<4} {:>16.1f} {:>12.3f} {:>12.3f} {:>18.1f}  {}\n", i, median(r.step_ms),
               median(r.step_ms) / first, median(r.step_ms) / plain, median(r.charge_ms),
               r.runtime ? r.tiers : "plain aligned_alloc");
  }
  for (const Run& r : runs) {
    if (!r.runtime) continue;
    const RuntimeStats stats = r.runtime->stats();
    if (!stats.policy.empty()) {
      const std::uint64_t steps_run = std::max<std::uint64_t>(1, stats.migration.steps);
      std::uint64_t clean = 0;
      std::string ranges;
      for (const TierUsage& t : stats.tiers) {
        clean += t.clean_moves;
        ranges += fmt::format(" {}: {} new / {} reused ranges ({} assembled), {} in its arena;", t.name,
                              t.new_ranges, t.reused_ranges, t.assembled_ranges, t.arena_allocations);
      }
      fmt::print("  {}:{} {} planned in the arena placed elsewhere\n", r.tiers, ranges, stats.arena_misses);
      // Over the run (the warm-up steps too), per step under the policy.
      const TierUsage& fast = stats.tiers.front();
      fmt::print(
          "  {}: births on the fast tier that waited for room {:.1f} a step, {:.1f} ms a step; fell back "
          "{:.1f} a step; ready memory: {:.1f} copies into places a step, births that waited for their "
          "place {:.1f} ({:.1f} ms a step), births and moves that found it taken {:.1f}\n",
          r.tiers, static_cast<double>(fast.room_waits) / static_cast<double>(steps_run),
          static_cast<double>(fast.room_wait_ns) / 1e6 / static_cast<double>(steps_run),
          static_cast<double>(fast.fallbacks_out) / static_cast<double>(steps_run),
          static_cast<double>(stats.tiers.front().place_moves + stats.tiers.back().place_moves) /
              static_cast<double>(steps_run),
          static_cast<double>(fast.place_waits + stats.tiers.back().place_waits) /
              static_cast<double>(steps_run),
          static_cast<double>(fast.place_wait_ns + stats.tiers.back().place_wait_ns) / 1e6 /
              static_cast<double>(steps_run),
          static_cast<double>(fast.place_misses) / static_cast<double>(steps_run));
      fmt::print(
          "  {}: per step {} in, {} out ({:.1f} moves out clean, {:.1f} moves of dead bytes), {:.1f} dropped "
          "late, {:.1f} failed; mover CPU {:.1f} ms a step for {} copied ({:.3f} ms a MiB){}\n",
          r.tiers, format_bytes(stats.migration.bytes_in / steps_run),
          format_bytes(stats.migration.bytes_out / steps_run),
          static_cast<double>(clean) / static_cast<double>(steps_run),
          static_cast<double>(stats.migration.discarded_moves) / static_cast<double>(steps_run),
          static_cast<double>(stats.migration.late_dropped) / static_cast<double>(steps_run),
          static_cast<double>(stats.migration.failed_moves) / static_cast<double>(steps_run),
          static_cast<double>(stats.migration.mover_cpu_ns) / 1e6 / static_cast<double>(steps_run),
          format_bytes(stats.migration.copied_bytes / steps_run),
          stats.migration.copied_bytes > 0
              ? static_cast<double>(stats.migration.mover_cpu_ns) / 1e6 /
                    (static_cast<double>(stats.migration.copied_bytes) / (1 << 20))
              : 0.0,
          plan_note(r.runtime->plan()));
      fmt::print(
          "  {}: over the run {} moves dropped stale (their step had ended), {} planned keys not alive\n",
          r.tiers, stats.migration.stale_dropped, stats.migration.missing);
      const MigrationPerStep part = measured_part(r, steps);
      fmt::print(
          "  {}: measured steps: mover CPU {:.1f} ms a step for {:.1f} MiB copied ({:.3f} ms a MiB); "
          "mover busy {:.1f} ms a step in moves (planned {:.1f})\n",
          r.tiers, part.mover_cpu_ms, part.copied_mib,
          part.copied_mib > 0 ? part.mover_cpu_ms / part.copied_mib : 0.0, part.mover_busy_ms,
          r.runtime->plan() != nullptr ? r.runtime->plan()->mover_busy_ns / 1e6 : 0.0);
      if (!r.runtime->replan_result().empty()) fmt::print("  {}: {}\n", r.tiers, r.runtime->replan_result());
      if (!stats.migration.last_failure.empty())
        fmt::print("  {}: the last failed move: {}\n", r.tiers, stats.migration.last_failure);
    }
  }
  for (const Run& r : runs) {
    if (r.runtime && !emulated_note(*r.runtime).empty())
      fmt::print("  {}: {}\n", r.tiers, emulated_note(*r.runtime));
  }
  fmt::print("runtime / plain step time: {:.3f}\n", first / plain);
  for (const Run& r : runs) {
    const RuntimeStats st = r.runtime ? r.runtime->stats() : RuntimeStats{};
    // The executors' figures over the run (every step under a plan), and over the measured steps.
    const MigrationPerStep run =
        migration_per_step({}, st.migration, static_cast<double>(st.migration.steps));
    const MigrationPerStep measured = measured_part(r, steps);
    fmt::print(
        "JSON {{\"model\": \"{}\", \"mode\": \"{}\", \"tiers\": \"{}\", \"median_ms\": {:.3f}, "
        "\"median_faults\": {:.0f}, \"median_emulated_ms\": {:.3f}, \"floor\": {:.3f}, \"emulated\": "
        "\"{}\", \"median_slow_mib\": {:.1f}, \"in_mib\": {:.1f}, \"out_mib\": {:.1f}, \"late_dropped\": "
        "{:.1f}, "
        "\"failed\": {:.1f}, \"mover_cpu_ms\": {:.1f}, \"mover_cpu_ms_measured\": {:.1f}, "
        "\"copied_mib_measured\": {:.1f}, \"floor_slow_ms\": {:.1f}, \"conv\": \"{}\", "
        "\"peak_live_mib\": {:.1f}, \"peak_between_primitives_mib\": {:.1f}, \"in_place\": {}, \"fuse\": {}, "
        "\"recompute\": {}, \"keep_tensors\": {}}}\n",
        model, r.mode, r.tiers, median(r.step_ms), median(r.faults), median(r.charge_ms), floor_of(r),
        r.runtime ? emulated_note(*r.runtime) : "", median(r.slow_mib), run.in_mib, run.out_mib,
        run.late_dropped, run.failed, run.mover_cpu_ms, measured.mover_cpu_ms, measured.copied_mib,
        r.runtime && r.runtime->plan() != nullptr ? r.runtime->plan()->floor_slow_ns / 1e6 : 0.0,
        to_string(conv_algorithm.value()), static_cast<double>(st.peak_live_bytes) / (1 << 20),
        static_cast<double>(r.engine.peak_live_bytes_between_primitives()) / (1 << 20), memory.in_place,
        memory.fuse_batch_norm_relu, memory.recompute_batch_norm, keep_tensors);
  }
  return 0;
}
