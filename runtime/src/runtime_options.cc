// The runtime's options resolved: tiers, profiling and migration from RuntimeOptions and the
// environment, the fast budget, the CPU share of the mover's copy threads.
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

#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "fork_guard.h"
#include "tensortier/allocator/layer_charge.h"
#include "tensortier/allocator/tier_spec.h"
#include "tensortier/allocator/topology.h"
#include "tensortier/migrator/plan.h"
#include "tensortier/settings.h"

namespace tensortier {
namespace {

constexpr std::uint64_t kMostSteps = 1'000'000'000'000;  // a step to profile: beyond any training run
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
  if (const char* env = std::getenv("TENSORTIER_PROFILE"); env != nullptr) {
    // "off" (any case), or the step to profile; a switch's "0" would read as step 0, so only "off".
    const Result<bool> off = settings::parse_switch("TENSORTIER_PROFILE", env);
    if (off && !*off && std::string_view(env) != "0") {
      p.enabled = false;
    } else if (Result<std::uint64_t> step = settings::parse_whole("TENSORTIER_PROFILE", env, 0, kMostSteps)) {
      p.enabled = true;
      p.step = *step;
    } else {
      return invalid_argument(
          fmt::format("TENSORTIER_PROFILE='{}': give off, or the step to profile (0-based, e.g. 1 for the "
                      "second; at most {})",
                      env, kMostSteps));
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
  if (const char* env = std::getenv("TENSORTIER_PROFILE_ACCESSES"); env != nullptr && *env != '\0') {
    Result<profiler::AccessSource> source = profiler::parse_access_source(env);
    if (!source) return invalid_argument("TENSORTIER_PROFILE_ACCESSES: " + source.status().message());
    p.accesses = source.value();
  }
  TENSORTIER_RETURN_IF_ERROR(profiler::validate(p));
  return p;
}

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
  if (migrator::is_reference_policy(policy)) return Status::ok();  // keep the tier's own budget
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

}  // namespace tensortier
