// The runtime's flags on every program's command line (CLI11), registered in one place so that
// they mean one thing and read alike everywhere: the tier spec, the policy, the fast budget, the
// profile's JSON, the trial, the trace.
// Programs that run a matrix take a flag several times (the vector forms).
//
// Thread safety: call while building the command line, before parsing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "tensortier/migrator/plan.h"
#include "tensortier/write_file.h"

namespace tensortier::cli {

// An empty --tiers would silently mean "no spec" (discovery), unlike a flag left out.
inline std::string non_empty_spec(const std::string& spec) {
  return spec.empty() ? std::string(
                            "empty: give a tier spec, or leave --tiers out for TENSORTIER_TIERS or "
                            "hwloc discovery")
                      : std::string();
}

// An output path write_file_replacing would refuse (a symbolic link, a directory, ...), refused
// when the flag is read rather than when the run ends.
inline CLI::Validator output_path(const std::string& what) {
  return CLI::Validator(
      [what](const std::string& path) {
        const Status s = output_path_refused(path, what);
        return s.is_ok() ? std::string() : s.message();
      },
      "PATH");
}

// --tiers SPEC; `what` says what the spec is for in this program.
inline CLI::Option* add_tiers_flag(
    CLI::App& app, std::string& spec,
    const std::string& what = "default: TENSORTIER_TIERS, else hwloc discovery") {
  return app.add_option("--tiers", spec, "Tier spec, fastest first (docs/TIERS.md); " + what)
      ->check(non_empty_spec, "SPEC");
}

// --tiers SPEC, repeated: one run (or mode) per spec.
inline CLI::Option* add_tiers_flag(CLI::App& app, std::vector<std::string>& specs, const std::string& what) {
  return app.add_option("--tiers", specs, "Tier spec, fastest first (docs/TIERS.md); " + what)
      ->check(non_empty_spec, "SPEC");
}

// --backend NAME: what computes the layers (dnn/backend_by_name.h makes it).
inline CLI::Option* add_backend_flag(CLI::App& app, std::string& backend) {
  return app
      .add_option("--backend", backend,
                  "Layers on: cpu (oneDNN) or cuda (cuDNN and cuBLAS on a GPU; give a cuda tier in --tiers)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
}

// --math fp32|tf32: the cuda backend's arithmetic (the cpu backend has one: fp32).
inline CLI::Option* add_math_flag(CLI::App& app, std::string& math) {
  return app
      .add_option("--math", math,
                  "The cuda backend's math: fp32 (FMA in fp32, the CPU backend's arithmetic) or tf32 (tensor "
                  "cores, PyTorch's default on a GPU); compare with PyTorch in the same mode")
      ->check(CLI::IsMember({"fp32", "tf32"}))
      ->capture_default_str();
}

// --policy NAME: the migration policy from the step after the profiled one.
inline CLI::Option* add_policy_flag(CLI::App& app, std::string& policy) {
  return app.add_option("--policy", policy,
                        "Migration policy from the step after the profiled one: " +
                            migrator::known_policies() + " (default: TENSORTIER_POLICY, else none)");
}

// --fast-budget: a size (512MiB) or a share of the profiled peak footprint (20%).
inline CLI::Option* add_fast_budget_flag(
    CLI::App& app, std::string& budget,
    const std::string& what = "default: TENSORTIER_FAST_BUDGET, else the fast tier's own") {
  return app.add_option(
      "--fast-budget", budget,
      "The fast tier's budget under the policy: a size (512MiB) or a share of the profiled peak "
      "footprint (20%); " +
          what);
}

// --profile-json PATH: where the profiled step's JSON goes.
inline CLI::Option* add_profile_json_flag(CLI::App& app, std::string& path) {
  return app
      .add_option(
          "--profile-json", path,
          "Write the first step profile there as JSON (docs/PROFILE.md; tools/tensortier-profile reads it)")
      ->check(output_path("the profile"));
}

// --trial-steps N: the trial of a plan that moves (RuntimeOptions::trial_steps).
inline CLI::Option* add_trial_steps_flag(CLI::App& app, std::uint32_t& steps) {
  return app
      .add_option("--trial-steps", steps,
                  "Steps the policy's plan runs on trial, then as many without its late moves, as many with "
                  "only the late moves judged worth their wait one by one, and as many with no moves; "
                  "the fastest goes on (0: no trial)")
      ->check(CLI::Range(0, 100))
      ->capture_default_str();
}

// --trace PATH, --trace-from N, --trace-steps N: a Chrome trace of steps [from, from + steps).
inline void add_trace_flags(CLI::App& app, std::string& path, std::size_t& from, std::size_t& steps) {
  app.add_option("--trace", path,
                 "Write a Chrome trace (Perfetto) of layers, moves and waits there (tools/plot_timeline.py "
                 "draws it)")
      ->check(output_path("the trace"));
  app.add_option("--trace-from", from, "The first step the trace records (1-based)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1'000'000'000'000}))
      ->capture_default_str();
  app.add_option("--trace-steps", steps, "Steps the trace records")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
}

}  // namespace tensortier::cli
