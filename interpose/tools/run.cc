// tensortier-run: runs an unmodified oneDNN program on tensortier's tiers, with the interposer
// (libtensortier_interpose.so) preloaded. The flags are the trainer's; they reach the interposer
// in the environment variables the runtime reads (TENSORTIER_TIERS, TENSORTIER_POLICY, ...), and
// are checked here, by starting a runtime with them, before the program runs.
//
//   tensortier-run --tiers fast=dram:2GiB,slow=emulated:optane:8GiB --policy sentinel
//       --fast-budget 20% -- ./my_onednn_training --epochs 3
#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "tensortier/cli/runtime_flags.h"
#include "tensortier/interpose/settings.h"
#include "tensortier/runtime.h"

namespace {

namespace fs = std::filesystem;

struct Options {
  std::string tiers, policy, fast_budget, profile_json, trace, report, library;
  std::size_t trace_from = 4, trace_steps = 1;
  std::uint32_t trial_steps = tensortier::RuntimeOptions{}.trial_steps;
  std::uint64_t step_period = 0, step_offset = 0, random_moves = 0;
  bool scratchpads = false;
  std::vector<std::string> command;
};

// The interposer beside this program (the build tree) or in the library directory (installed).
std::string find_library(const std::string& given) {
  if (!given.empty()) return given;
  const fs::path self = fs::read_symlink("/proc/self/exe").parent_path();
  for (const fs::path& p : {self / "libtensortier_interpose.so",
                            self / ".." / TENSORTIER_LIBDIR / "libtensortier_interpose.so"}) {
    if (fs::exists(p)) return fs::canonical(p).string();
  }
  return {};
}

void set(const char* name, const std::string& value) {
  if (!value.empty()) setenv(name, value.c_str(), 1);  // NOLINT(concurrency-mt-unsafe): one thread
}

void export_options(const Options& o, const std::string& library) {
  set("TENSORTIER_TIERS", o.tiers);
  set("TENSORTIER_POLICY", o.policy);
  set("TENSORTIER_FAST_BUDGET", o.fast_budget);
  set("TENSORTIER_PROFILE_JSON", o.profile_json);
  set("TENSORTIER_TRACE", o.trace);
  set("TENSORTIER_TRACE_FROM", std::to_string(o.trace_from));
  set("TENSORTIER_TRACE_STEPS", std::to_string(o.trace_steps));
  set("TENSORTIER_INTERPOSE_REPORT", o.report);
  set("TENSORTIER_TRIAL_STEPS", std::to_string(o.trial_steps));
  if (o.random_moves != 0) set("TENSORTIER_RANDOM_MOVES", std::to_string(o.random_moves));
  if (o.scratchpads) set("TENSORTIER_SCRATCHPADS", "1");
  if (o.step_period > 0) {
    set("TENSORTIER_STEP_PERIOD", std::to_string(o.step_period));
    set("TENSORTIER_STEP_OFFSET", std::to_string(o.step_offset));
  }
  const char* preload = std::getenv("LD_PRELOAD");  // NOLINT(concurrency-mt-unsafe): one thread
  set("LD_PRELOAD", preload != nullptr && *preload != '\0' ? library + ":" + preload : library);
}

// Why `library` is not tensortier's interposer ("" where it is): a file that is no shared library,
// or one without the interposer's entry points, would run the program untiered.
std::string not_the_interposer(const std::string& library) {
  void* handle = dlopen(library.c_str(), RTLD_LAZY | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return fmt::format("not a shared library this program can load ({})", why != nullptr ? why : "?");
  }
  const bool ours = dlsym(handle, "tensortier_interposer_version") != nullptr;
  dlclose(handle);
  return ours ? "" : "a shared library, but not tensortier's interposer (libtensortier_interpose.so)";
}

// Shared between the program and every process it starts, so that only the first of them to call
// oneDNN is interposed (the others would write the same report, trace and profile): one word, 0
// until a process claims it with its pid. Passed by descriptor, kept open across exec.
std::string claim_the_run() {
  const int fd = memfd_create("tensortier-run-claim", 0);
  if (fd < 0 || ftruncate(fd, sizeof(std::uint64_t)) != 0)
    return fmt::format("the run's claim could not be made: {}",
                       std::error_code(errno, std::generic_category()).message());
  set("TENSORTIER_RUN_CLAIM", std::to_string(fd));
  set("TENSORTIER_RUN_PID", std::to_string(getpid()));  // exec keeps it
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app(
      "Runs an unmodified oneDNN program with every memory oneDNN allocates a tensortier object and "
      "each primitive execution a layer of a training step found in the program's executions "
      "(docs/INTERPOSE.md)",
      "tensortier-run");
  tensortier::cli::add_tiers_flag(app, o.tiers);
  tensortier::cli::add_policy_flag(app, o.policy);
  tensortier::cli::add_fast_budget_flag(app, o.fast_budget);
  tensortier::cli::add_profile_json_flag(app, o.profile_json);
  tensortier::cli::add_trace_flags(app, o.trace, o.trace_from, o.trace_steps);
  tensortier::cli::add_trial_steps_flag(app, o.trial_steps);
  app.add_flag(
      "--scratchpads", o.scratchpads,
      "Make the program's primitives take their scratchpads from the caller, and give each execution one "
      "as an object (tiered and counted like the rest)");
  app.add_option("--random-moves", o.random_moves,
                 "Testing: after each layer, move one of its objects to another tier, chosen by a generator "
                 "with this seed (0: off); the program's results must not change");
  CLI::Option* period =
      app.add_option(
             "--step-period", o.step_period,
             "Executions a training step, for a program whose loop the step detector cannot see (0: detect)")
          ->check(CLI::Range(std::uint64_t{0}, tensortier::interpose::kMostStepPeriod));
  app.add_option("--step-offset", o.step_offset, "With --step-period: executions before the first step")
      ->check(CLI::Range(std::uint64_t{0}, tensortier::interpose::kMostStepOffset))
      ->needs(period);
  app.add_option("--report", o.report,
                 "Write what the interposer saw (memories, objects, steps, moves) as JSON there")
      ->check(tensortier::cli::output_path("the report"));
  app.add_option("--library", o.library,
                 "The interposer library (default: beside this program, or installed)");
  app.add_option("command", o.command, "The program and its arguments, after --")->required();
  CLI11_PARSE(app, argc, argv);

  if (o.step_offset != 0 && o.step_period == 0) {
    fmt::print(stderr, "tensortier-run: --step-offset {} needs a --step-period above 0\n", o.step_offset);
    return 2;
  }
  const std::string library = find_library(o.library);
  if (library.empty() || !fs::exists(library)) {
    fmt::print(stderr,
               "tensortier-run: the interposer library was not found{}; give it with --library PATH\n",
               o.library.empty() ? " beside this program or in the library directory" : " at " + o.library);
    return 2;
  }
  if (const std::string problem = not_the_interposer(library); !problem.empty()) {
    fmt::print(stderr, "tensortier-run: --library {}: {}\n", library, problem);
    return 2;
  }
  export_options(o, library);              // LD_PRELOAD applies to the program exec'd below, not to this one
  spdlog::set_level(spdlog::level::warn);  // the program's runtime says what it opens
  // The settings as the program will read them (the flags, and any TENSORTIER_* already set).
  if (auto settings = tensortier::interpose::InterposeSettings::from_env(); !settings) {
    fmt::print(stderr, "tensortier-run: {}\n", settings.status().message());
    return 2;
  }
  if (auto runtime = tensortier::Runtime::create(); !runtime) {
    fmt::print(stderr, "tensortier-run: {}\n", runtime.status().message());
    return 2;
  }
  if (const std::string problem = claim_the_run(); !problem.empty()) {
    fmt::print(stderr, "tensortier-run: {}\n", problem);
    return 2;
  }
  std::vector<char*> args;
  for (std::string& a : o.command) args.push_back(a.data());
  args.push_back(nullptr);
  execvp(args[0], args.data());
  const int error = errno;
  fmt::print(stderr, "tensortier-run: cannot run '{}': {}\n", o.command[0],
             std::error_code(error, std::generic_category()).message());
  return error == ENOENT ? 127 : 126;  // as shells say: not found, or found and not runnable
}
