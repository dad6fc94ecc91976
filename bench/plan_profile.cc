// tensortier-plan: every policy's plan and every bound, from a saved step profile, with no training
// run: what each plan predicts it adds to a step (and where: slow accesses, births waiting for
// room or for their place, moves the layers wait for), against the bounds no plan can beat. The
// tiers and budget are the runtime's (the same --tiers and --fast-budget as tensortier-train), so
// the rates are the ones a run would plan with on this machine.
//
//   tensortier-train --model resnet18 --batch 32 --width 64 --image-size 32 --data synthetic
//       --steps 3 --profile-json r18.json
//   tensortier-plan r18.json --tiers fast=dram:4GiB,slow=emulated:optane-server:8GiB --fast-budget 20%
#include <chrono>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "tensortier/cli/runtime_flags.h"
#include "tensortier/migrator/plan.h"
#include "tensortier/migrator/residency_model.h"
#include "tensortier/migrator/timed_bound.h"
#include "tensortier/runtime.h"

namespace {

using namespace tensortier;

Result<profiler::StepProfile> read_profile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return unavailable(fmt::format("cannot read '{}'", path));
  std::stringstream text;
  text << in.rdbuf();
  auto profile = profiler::from_json(text.str());
  if (!profile) return invalid_argument(fmt::format("'{}': {}", path, profile.status().message()));
  return profile;
}

double ms(double ns) {
  return ns / 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Every policy's plan and the bounds, from a saved step profile (no training run)"};
  std::string path, tiers = "fast=dram:4GiB,slow=emulated:optane-server:8GiB", budget = "20%";
  std::vector<std::string> policies;
  double timed_program_s = 60, tightened_program_s = 60;
  bool ready_memory = true;
  app.add_option("profile", path, "A step profile's JSON (--profile-json of tensortier-train)")->required();
  cli::add_tiers_flag(app, tiers, "the tiers a run would have")->capture_default_str();
  cli::add_fast_budget_flag(app, budget, "default 20%")->capture_default_str();
  app.add_option("--policies", policies, "Policies (default: every one)")
      ->check(CLI::IsMember(migrator::policy_names()));
  app.add_option("--timed-program-s", timed_program_s,
                 "Time for the timed bound's channel program (0: not solved)")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  app.add_option("--tightened-s", tightened_program_s,
                 "Time for the tightened program's search (integral at uses; 0: not solved)")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  app.add_flag("!--no-ready-memory", ready_memory,
               "Plan moves in place (as the C API and the interposer do)");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);
  if (policies.empty()) policies = migrator::policy_names();

  auto profile = read_profile(path);
  if (!profile) return fmt::print(stderr, "tensortier-plan: {}\n", profile.status().message()), 2;
  RuntimeOptions options(tiers);
  options.fast_budget = budget;
  options.policy = "sentinel";  // any: the budget is read against the profile as a policy's would be
  options.ready_memory = ready_memory;
  auto rt = Runtime::create(options);
  if (!rt) return fmt::print(stderr, "tensortier-plan: {}\n", rt.status().message()), 2;
  auto inputs = rt.value()->plan_inputs(profile.value());
  if (!inputs) return fmt::print(stderr, "tensortier-plan: {}\n", inputs.status().message()), 2;
  inputs->timed_program_s = timed_program_s;
  inputs->tightened_program_s = tightened_program_s;

  const double compute_ms = [&] {
    double sum = 0;
    for (std::uint64_t ns : inputs->layer_ns) sum += static_cast<double>(ns);
    return ms(sum);
  }();
  fmt::print(
      "{} layers, {} objects, peak {:.1f} MiB + {:.1f} MiB of small objects; budget {:.1f} MiB ({}); "
      "compute {:.1f} ms; moves in {:.2f} GB/s, out {:.2f} GB/s\n",
      inputs->layers, inputs->objects.size(), static_cast<double>(inputs->peak_bytes) / (1 << 20),
      static_cast<double>(inputs->small_reserve_bytes) / (1 << 20),
      static_cast<double>(inputs->fast_budget_bytes) / (1 << 20), budget, compute_ms, inputs->move_in_gbps,
      inputs->move_out_gbps);
  const auto t0 = std::chrono::steady_clock::now();
  const migrator::TimedBound bound = migrator::timed_bound(inputs.value());
  const double bound_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print(
      "timed bound: {:.1f} ms added ({}; {:.1f} s)\n  window {:.1f} ms, channel program {:.1f} ms ({}), "
      "tightened {:.1f} ms ({})\n",
      ms(bound.added_ns), bound.describe(), bound_s, ms(bound.window_ns), ms(bound.program_ns), bound.program,
      ms(bound.tightened_ns), bound.tightened);
  {
    const migrator::ResidencySolution exact =
        migrator::solve_residency(inputs.value(), inputs->oracle_time_limit_s);
    fmt::print(
        "exact model (timeless): bound {:.1f} ms; its best residency {:.1f} ms: {:.0f} MiB slow accesses, "
        "{:.0f} / "
        "{:.0f} MiB copied in / out, {:.1f} ms of the mover's CPU ({}; {:.1f} s)\n",
        ms(exact.bound_ns), ms(exact.cost_ns), exact.parts.slow_access_bytes / (1 << 20),
        exact.parts.in_bytes / (1 << 20), exact.parts.out_bytes / (1 << 20), ms(exact.parts.mover_cpu_ns),
        exact.status, exact.seconds);
  }
  fmt::print(
      "\n| policy | added ms (predicted) | slow accesses MiB | in / out MiB | room wait ms | place wait ms "
      "| failed in MiB | valid | planning s |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  nlohmann::json out = nlohmann::json::array();
  for (const std::string& policy : policies) {
    migrator::PlanInputs in = inputs.value();
    in.timed_program_s = in.tightened_program_s = 0;  // solved once above
    const auto p0 = std::chrono::steady_clock::now();
    auto plan = migrator::make_plan(policy, in);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - p0).count();
    if (!plan) {
      fmt::print("| {} | refused: {} | | | | | | | {:.1f} |\n", policy, plan.status().message(), s);
      continue;
    }
    const migrator::Plan& p = plan.value();
    const std::string problem = !p.problem.empty() ? p.problem : p.places.problem;
    fmt::print("| {} | {:.1f} | {:.0f} | {:.0f} / {:.0f} | {:.1f} | {:.1f} | {:.0f} | {} | {:.1f} |\n",
               policy, ms(p.predicted_extra_ns), static_cast<double>(p.slow_access_bytes) / (1 << 20),
               static_cast<double>(p.bytes_in) / (1 << 20), static_cast<double>(p.bytes_out) / (1 << 20),
               ms(p.room_wait_ns), ms(p.place_wait_ns), static_cast<double>(p.failed_in_bytes) / (1 << 20),
               problem.empty() ? "yes" : "no", s);
    if (!p.variant.empty()) fmt::print("|   | {} |\n", p.variant);
    if (!p.places.empty() || !p.stay_put.empty()) {
      fmt::print(
          "|   | places: fast arena {:.1f} MiB (max-live {:.1f}), {:.1f} MiB beside it; planned again under "
          "less "
          "{} times; {} persistent objects staying put |\n",
          static_cast<double>(p.places.fast_bytes) / (1 << 20),
          static_cast<double>(p.places.fast_max_live_bytes) / (1 << 20),
          static_cast<double>(p.places.unplaced_fast_bytes) / (1 << 20), p.places.replans, p.stay_put.size());
    }
    out.push_back({{"policy", policy},
                   {"predicted_extra_ms", ms(p.predicted_extra_ns)},
                   {"slow_access_mib", static_cast<double>(p.slow_access_bytes) / (1 << 20)},
                   {"room_wait_ms", ms(p.room_wait_ns)},
                   {"place_wait_ms", ms(p.place_wait_ns)},
                   {"bound_extra_ms", ms(p.bound_extra_ns)},
                   {"valid", problem.empty()},
                   {"planning_s", s}});
  }
  fmt::print(
      "\nJSON {}\n",
      nlohmann::json{{"timed_bound_ms", ms(bound.added_ns)}, {"compute_ms", compute_ms}, {"plans", out}}
          .dump());
  return 0;
}
