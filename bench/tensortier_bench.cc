// tensortier-bench: the whole comparison in one command. Runs a matrix of models x tier specs (or
// emulated presets) x fast budgets x policies with warm-up and repetitions, each task in a child
// process (every policy of a task side by side in it, steps alternating), and writes into --out:
//   results.json  the matrix, the machine, every finished task and the summary (resumable)
//   results.csv   one row per cell
//   table.md      the tables it prints
//   trace.json    one step of the traced policy (Chrome trace; timeline.png drawn from it)
//   *.png         tools/plot_bench.py's plots (slowdown, bytes moved, fast-tier occupancy)
// Running the same command again after an interruption finishes the tasks not yet done.
// On a real machine (no emulated tier in a spec) no cost model runs; numactl baselines run as
// extra rows, and the emulated preset that claims to model the slow node is set beside it.
// matrix.h has the bookkeeping; machine.h the machine record.
#include <fcntl.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "emulated_note.h"
#include "machine.h"
#include "matrix.h"
#include "migration_stats.h"
#include "stats.h"
#include "tensortier/allocator/cost_model.h"
#include "tensortier/allocator/tier_spec.h"
#include "tensortier/allocator/topology.h"
#include "tensortier/cli/runtime_flags.h"
#include "tensortier/dnn/backend_by_name.h"
#include "tensortier/dnn/data.h"
#include "tensortier/dnn/models.h"
#include "tensortier/timeline.h"
#include "tensortier/write_file.h"

#ifndef TENSORTIER_TOOLS_DIR
#define TENSORTIER_TOOLS_DIR "tools"
#endif

namespace {

using namespace tensortier;
using namespace tensortier::dnn;
using nlohmann::json;
using tensortier::bench::emulated_note;
using tensortier::bench::MatrixConfig;
using tensortier::bench::migration_per_step;
using tensortier::bench::MigrationPerStep;
using tensortier::bench::Task;
using tensortier::bench::TaskKind;
namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------
// The child: runs one task and prints "RESULT <json>" on stdout.

// The fast tier's bytes at each layer boundary of one step (held against its budget: live
// objects, small-object chunks, cached ranges, moves in flight), beside what the plan wanted.
class OccupancyRecorder final : public StepObserver {
 public:
  OccupancyRecorder(const Runtime& rt, TierIndex fast) : rt_(rt), fast_(fast) {}
  void on_layer_begin(const LayerEvent& event) override {
    names_.emplace_back(event.name);
    bytes_.push_back(rt_.tier(fast_).used_bytes());
  }
  void on_step_end(const StepEndEvent& /*event*/) override { bytes_.push_back(rt_.tier(fast_).used_bytes()); }
  json to_json() const { return json{{"layers", names_}, {"actual_bytes", bytes_}}; }

 private:
  const Runtime& rt_;
  TierIndex fast_;
  std::vector<std::string> names_;
  std::vector<std::uint64_t> bytes_;
};

struct PolicyRun {
  std::string policy;
  std::unique_ptr<Runtime> runtime;
  std::unique_ptr<Backend> backend;  // null: the CPU backend; outlives the engine
  Engine engine;
  std::unique_ptr<Network> net;
  std::unique_ptr<BatchIterator> batches;
  Batch batch;
  std::vector<double> step_ms, charge_ms, slow_mib, faults, tlb_shootdowns;
  // Its executor's counts before the first measured step: the migration figures are over the
  // measured steps (the first step under a plan, which places the plan's objects, is a warm-up).
  migrator::ExecutorStats before_measured;
};

// The system's 1-minute load average (getloadavg), recorded around each task: a cell measured while
// other work loaded the cores says so in the tables. -1 where the system gives none.
double one_minute_load() {
  double load[1] = {-1};
  return getloadavg(load, 1) == 1 ? load[0] : -1.0;
}

Result<json> run_task(const MatrixConfig& c, const Task& task, const fs::path& out_dir) {
  const dnnl::memory::dims input{c.batch, 3, c.image_size, c.image_size};
  const Dataset data =
      synthetic_dataset(static_cast<std::size_t>(c.batch) * 4, 3, c.image_size, c.image_size, 10, 1);
  std::vector<PolicyRun> runs;
  bool tightened_asked = false;
  for (const std::string& policy : task.policies) {
    RuntimeOptions options(task.spec);
    options.profile.enabled = true;  // a policy plans from the profile of step 1
    // A numactl row has one tier (every tensor on plain mappings under the process's policy):
    // its "fast-only" is the runtime with no policy.
    options.policy = task.kind == TaskKind::kNumactl ? "" : policy;
    options.fast_budget = task.budget;
    if (policy != "fast-only") options.timed_bound_s = c.timed_bound_s;  // the timed bound's channel program
    // The tightened program once a task, on its first planning policy's run (the bound is the
    // profile's, not the policy's; the cells carry it over).
    if (policy != "fast-only" && policy != "slow-only" && !tightened_asked) {
      options.tightened_bound_s = c.tightened_bound_s;
      tightened_asked = true;
    }
    options.trial_steps = 0;  // each policy's plan as made, every measured step (no trial swap)
    if (c.mover_cpu >= 0) {   // a core of its own: its CPU takes nothing from the layers
      options.mover_cpu = c.mover_cpu;
      options.mover_steals_compute = 0;
    }
    auto rt = Runtime::create(options);
    if (!rt)
      return Status(rt.status().code(),
                    fmt::format("--tiers '{}' --policy {}: {}", task.spec, policy, rt.status().message()));
    auto backend = make_backend(c.backend, *rt.value(), c.math);
    if (!backend) return backend.status();
    Engine engine = backend.value() ? Engine(*rt.value(), *backend.value()) : Engine(*rt.value());
    runs.push_back(PolicyRun{policy,
                             std::move(rt).value(),
                             std::move(backend).value(),
                             std::move(engine),
                             nullptr,
                             nullptr,
                             {},
                             {},
                             {},
                             {},
                             {},
                             {},
                             {}});
  }
  for (PolicyRun& r : runs) {
    auto net = make_model(task.model, {10, c.width});
    if (!net) return net.status();
    r.net = std::move(net).value();
    TENSORTIER_RETURN_IF_ERROR(r.net->build(r.engine, input, 1));
    r.batches = std::make_unique<BatchIterator>(data, static_cast<std::size_t>(c.batch), 1);
  }
  const SgdOptions sgd{0.01F, 0.9F, 5e-4F};
  std::unique_ptr<TimelineRecorder> timeline;
  std::unique_ptr<OccupancyRecorder> occupancy;
  PolicyRun* traced = nullptr;
  const int last = c.warmup + c.steps - 1;
  const double load_before = one_minute_load();
  for (int step = 0; step <= last; ++step) {
    for (PolicyRun& r : runs) {
      if (task.trace && step == last && r.policy == c.trace_policy && r.runtime->plan() != nullptr) {
        traced = &r;
        timeline = std::make_unique<TimelineRecorder>(
            r.runtime->steps_completed(), 1, fmt::format("tensortier-bench {} {}", task.model, r.policy));
        occupancy = std::make_unique<OccupancyRecorder>(*r.runtime, r.runtime->plan()->fast);
        TENSORTIER_RETURN_IF_ERROR(r.runtime->add_observer(timeline.get()));
        TENSORTIER_RETURN_IF_ERROR(r.runtime->add_observer(occupancy.get()));
      }
      TENSORTIER_RETURN_IF_ERROR(r.batches->next(r.engine, r.batch));
      if (step == c.warmup) r.before_measured = r.runtime->stats().migration;
      const long faults0 = bench::process_page_faults(), tlb0 = bench::tlb_shootdowns();
      const auto t0 = std::chrono::steady_clock::now();
      TENSORTIER_RETURN_IF_ERROR(r.runtime->step_begin());
      auto result = r.net->train_step(r.engine, r.batch, sgd);
      TENSORTIER_RETURN_IF_ERROR(r.runtime->step_end());
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (!result) return result.status();
      if (step >= c.warmup) {
        const RuntimeStats st = r.runtime->stats();
        r.step_ms.push_back(ms);
        r.charge_ms.push_back(static_cast<double>(st.last_step_emulated_charge_ns) / 1e6);
        r.slow_mib.push_back(static_cast<double>(st.last_step_slow_bytes) / (1 << 20));
        r.faults.push_back(static_cast<double>(bench::process_page_faults() - faults0));
        if (tlb0 >= 0) r.tlb_shootdowns.push_back(static_cast<double>(bench::tlb_shootdowns() - tlb0));
      }
    }
  }
  json out = bench::to_json(task);
  out["load_average"] = {load_before, one_minute_load()};
  out["emulated"] = runs.empty() ? "" : emulated_note(*runs.front().runtime);
  json results = json::object();
  for (PolicyRun& r : runs) {
    const RuntimeStats st = r.runtime->stats();
    const MigrationPerStep m = migration_per_step(
        r.before_measured, st.migration, static_cast<double>(st.migration.steps - r.before_measured.steps));
    const migrator::Plan* plan = r.runtime->plan();
    json j{{"median_ms", bench::median(r.step_ms)},
           {"step_ms", r.step_ms},
           {"charge_ms", bench::median(r.charge_ms)},
           {"slow_mib", bench::median(r.slow_mib)},
           {"faults", bench::median(r.faults)},
           {"tlb_shootdowns", r.tlb_shootdowns.empty() ? -1.0 : bench::median(r.tlb_shootdowns)},
           {"in_mib", m.in_mib},
           {"out_mib", m.out_mib},
           {"copied_mib", m.copied_mib},
           {"late_dropped", m.late_dropped},
           {"failed", m.failed},
           {"mover_cpu_ms", m.mover_cpu_ms},
           {"fast_peak_mib",
            st.tiers.empty() ? 0.0 : static_cast<double>(st.tiers.front().peak_mapped_bytes) / (1 << 20)}};
    if (plan != nullptr) {
      j["floor_slow_ms"] = plan->floor_slow_ns / 1e6;
      j["fast_budget_mib"] = static_cast<double>(plan->fast_budget_bytes) / (1 << 20);
      j["predicted_extra_ms"] = plan->predicted_extra_ns / 1e6;
      j["timed_bound_ms"] = plan->timed_bound_ns / 1e6;
      if (!plan->variant.empty()) j["variant"] = plan->variant;
      j["compute_ms"] = plan->compute_ns / 1e6;
      if (!plan->solver.empty()) {
        j["bound_extra_ms"] = plan->bound_extra_ns / 1e6;
        j["solver"] = plan->solver;
      }
    }
    results[r.policy] = std::move(j);
  }
  out["runs"] = std::move(results);
  if (traced != nullptr) {
    const migrator::Plan& plan = *traced->runtime->plan();
    json occ = occupancy->to_json();
    occ["policy"] = traced->policy;
    occ["budget_bytes"] = plan.fast_budget_bytes;
    occ["planned_bytes"] = plan.fast_bytes_by_boundary;
    occ["small_reserve_bytes"] = plan.small_reserve_bytes;
    occ["tiers"] = bench::tiers_label(task.spec);
    out["occupancy"] = std::move(occ);
    const fs::path trace = out_dir / "trace.json";
    if (Status s = timeline->write(trace.string()); s.is_ok()) {
      out["trace"] = trace.filename().string();
    } else {
      spdlog::warn("tensortier-bench: {}", s.message());
    }
    traced->runtime->remove_observer(timeline.get());
    traced->runtime->remove_observer(occupancy.get());
  }
  return out;
}

int child_main(const std::string& task_file) {
  spdlog::set_level(spdlog::level::warn);
  std::ifstream in(task_file);
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    fmt::print(stderr, "tensortier-bench: task file '{}': {}\n", task_file, e.what());
    return 1;
  }
  auto config = bench::config_from_json(j.at("config"));
  auto task = bench::task_from_json(j.at("task"));
  if (!config || !task) {
    fmt::print(stderr, "tensortier-bench: task file '{}': {}\n", task_file,
               (!config ? config.status() : task.status()).message());
    return 1;
  }
  auto result = run_task(config.value(), task.value(), fs::path(task_file).parent_path().parent_path());
  if (!result) {
    fmt::print(stderr, "tensortier-bench: task {}: {}\n", task.value().id, result.status().to_string());
    return 1;
  }
  fmt::print("RESULT {}\n", result.value().dump());
  return 0;
}

// ---------------------------------------------------------------------------------------------
// The parent: checks the matrix, runs its tasks as child processes, writes the outputs.

std::string iso_now() {
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  return fmt::format("{:%Y-%m-%dT%H:%M:%SZ}", tm);
}

// The CPUs this process may run on (its affinity mask), in order.
std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return cpus;
}

// In a task's process, before it runs anything (--mover-core): its threads kept off the mover's
// CPU (the affinity mask, which oneDNN's threads inherit) and as many oneDNN threads as CPUs left.
void keep_layers_off(int mover_cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  int left = 0;
  for (int cpu : allowed_cpus()) {
    if (cpu == mover_cpu) continue;
    CPU_SET(cpu, &set);
    ++left;
  }
  if (left == 0 || sched_setaffinity(0, sizeof set, &set) != 0) return;  // the task says so (runtime)
  setenv("OMP_NUM_THREADS", std::to_string(left).c_str(), 1);
}

// An executable's path on PATH ("" when none).
std::string which(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream in(path != nullptr ? path : "");
  for (std::string dir; std::getline(in, dir, ':');) {
    const fs::path p = fs::path(dir) / name;
    if (!dir.empty() && access(p.c_str(), X_OK) == 0) return p.string();
  }
  return "";
}

// Runs argv, passing its stderr through; returns (exit status, its stdout). mover_cpu >= 0: the
// child's threads kept off that CPU (keep_layers_off) from its start.
std::pair<int, std::string> run_child(const std::vector<std::string>& argv, int mover_cpu = -1) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return {-1, ""};
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return {-1, ""};
  }
  if (pid == 0) {
    // The task dies with this process (kill -9 included), not left running on its own.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // it died already, before the line above
    dup2(fds[1], STDOUT_FILENO);
    if (mover_cpu >= 0) keep_layers_off(mover_cpu);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    fmt::print(stderr, "tensortier-bench: cannot run '{}': {}\n", argv[0], strerrordesc_np(errno));
    _exit(127);
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    out.append(buf, static_cast<std::size_t>(n));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

// Results, tables and traces are written whole or not at all (an interrupted run leaves the old
// file or the new one, never half of one).
Status write_file(const fs::path& path, const std::string& text) {
  return write_file_replacing(path.string(), text, "the bench's output");
}

std::string format_seconds(double s) {
  const auto total = static_cast<long>(s + 0.5);
  return total >= 3600 ? fmt::format("{}:{:02}:{:02}", total / 3600, total / 60 % 60, total % 60)
                       : fmt::format("{}:{:02}", total / 60, total % 60);
}

std::string task_label(const Task& t) {
  switch (t.kind) {
    case TaskKind::kPolicies:
      return fmt::format("{} {} {} rep {}", t.model, bench::tiers_label(t.spec), t.budget, t.rep + 1);
    case TaskKind::kNumactl:
      return fmt::format("{} numactl {} rep {}", t.model, t.numactl, t.rep + 1);
    case TaskKind::kEmulationCheck:
      return fmt::format("{} emulation check ({}) rep {}", t.model, t.spec, t.rep + 1);
  }
  return t.id;
}

void progress(std::size_t done, std::size_t total, const std::string& label, double elapsed_s,
              double left_s) {
  const bool tty = isatty(STDERR_FILENO) != 0;
  constexpr int kWidth = 24;
  const int filled = total == 0 ? kWidth : static_cast<int>(kWidth * done / total);
  const std::string bar = std::string(static_cast<std::size_t>(filled), '#') +
                          std::string(static_cast<std::size_t>(kWidth - filled), '.');
  const std::string left = done == total ? "finished"
                           : left_s > 0  ? "about " + format_seconds(left_s) + " left"
                                         : "time left unknown";
  const std::string line = fmt::format("[{}] {}/{} tasks, elapsed {}, {} | {}", bar, done, total,
                                       format_seconds(elapsed_s), left, label);
  if (tty) {
    fmt::print(stderr, "\r\033[K{}", line);
    if (done == total) fmt::print(stderr, "\n");
  } else {
    fmt::print(stderr, "{}\n", line);
  }
}

struct Cli {
  std::string mode = "quick";
  std::string models, policies, budgets, presets;
  std::vector<std::string> tiers;
  int batch = 32, image_size = 32, width = 64, steps = 0, warmup = 3, reps = 0;
  std::string out = "bench-out";
  bool fresh = false, no_plots = false;
  std::string numactl = "auto";
  std::string emulate_as = "auto";
  std::string numactl_nodes;
  std::string trace_policy = "sentinel";
  int max_tasks = 0;
  bool mover_core = false;
  std::string backend = "cpu";
  std::string math = "fp32";
  double tightened_bound_s = MatrixConfig{}.tightened_bound_s;
  double timed_bound_s = MatrixConfig{}.timed_bound_s;
};

// A task's policies run side by side in one process, a runtime each: a cuda tier without a size
// (90% of the device's free memory) would leave nothing to the second.
Status cuda_tier_sized(const std::string& spec) {
  auto configs = parse_tier_spec(spec);
  if (!configs) return Status::ok();  // Runtime::create names what is wrong with it
  for (const TierConfig& t : configs.value()) {
    if (t.kind == TierKind::kCuda && t.budget_bytes == 0)
      return invalid_argument(fmt::format(
          "--tiers '{}': give the cuda tier a size (e.g. {}=cuda:{}:12GiB): a task's policies run side by "
          "side in one process, each with its own arena on the device, so all of them must fit it",
          spec, t.name, t.cuda_device));
  }
  return Status::ok();
}

// The tier specs a matrix runs on: --tiers as given, else one per emulated preset (host memory:
// the cpu backend's only). Each must open here, and take the backend: a node the machine lacks, a
// pmem directory that is not there, a cuda backend without a cuda tier are named now, not after an
// hour of other cells.
Result<std::vector<std::string>> tier_specs(const Cli& cli) {
  const bool quick = cli.mode == "quick";
  std::vector<std::string> specs = cli.tiers;
  if (!specs.empty() && !cli.presets.empty()) return invalid_argument("give --tiers or --presets, not both");
  if (specs.empty() && cli.backend != "cpu")
    return invalid_argument(
        fmt::format("--backend {}: give --tiers with the GPU's tiers, e.g. --tiers "
                    "fast=cuda:0:12GiB,slow=pinned:16GiB (the emulated presets are host memory)",
                    cli.backend));
  if (specs.empty()) {
    for (const std::string& preset : bench::split_list(!cli.presets.empty() ? cli.presets
                                                       : quick              ? "optane-server"
                                                                            : "optane-server,optane,cxl")) {
      if (auto p = find_preset(preset); !p)
        return invalid_argument(fmt::format("--presets: {}", p.status().message()));
      specs.push_back(fmt::format("fast=dram,slow=emulated:{}", preset));
    }
  }
  for (const std::string& spec : specs) {
    if (Status sized = cuda_tier_sized(spec); !sized.is_ok()) return sized;
    RuntimeOptions options(spec);
    options.profile.enabled = false;
    auto rt = Runtime::create(options);
    if (!rt) return invalid_argument(fmt::format("--tiers '{}': {}", spec, rt.status().message()));
    if (rt.value()->tier_count() < 2)
      return invalid_argument(fmt::format("--tiers '{}': a matrix needs a fast and a slow tier", spec));
    if (auto backend = make_backend(cli.backend, *rt.value()); !backend)
      return Status(backend.status().code(), fmt::format("--tiers '{}' --backend {}: {}", spec, cli.backend,
                                                         backend.status().message()));
  }
  return specs;
}

// The matrix the command line asks for, with every name checked before anything runs.
Result<MatrixConfig> matrix_from(const Cli& cli) {
  MatrixConfig c;
  const bool quick = cli.mode == "quick";
  c.models = bench::split_list(!cli.models.empty() ? cli.models : "resnet18,vgg11");
  c.backend = cli.backend;
  c.math = cli.math;
  c.budgets = bench::split_list(!cli.budgets.empty() ? cli.budgets
                                : c.backend != "cpu" ? "100%,70%,50%"  // AutoSwap's (arXiv 1903.06631)
                                : quick              ? "100%,20%"
                                                     : "100%,50%,20%,10%");
  c.policies = bench::split_list(
      !cli.policies.empty() ? cli.policies
      : c.backend != "cpu"  ? "fast-only,smartpool,autoswap,sentinel,oracle"  // the GPU's: no page faults
      : quick               ? "fast-only,slow-only,first-touch,reactive,autoswap,sentinel,oracle,search"
              : "fast-only,slow-only,first-touch,interleave,reactive,reactive-2m,autoswap,sentinel,oracle,"
                "search");
  c.batch = cli.batch;
  c.image_size = cli.image_size;
  c.tightened_bound_s = cli.tightened_bound_s;
  c.timed_bound_s = cli.timed_bound_s;
  c.width = cli.width;
  c.steps = cli.steps > 0 ? cli.steps : quick ? 3 : 5;
  c.warmup = cli.warmup;
  c.reps = cli.reps > 0 ? cli.reps : quick ? 1 : 3;
  c.trace_policy = cli.trace_policy;
  if (cli.mover_core) {
    const std::vector<int> cpus = allowed_cpus();
    if (cpus.size() < 2)
      return invalid_argument(fmt::format(
          "--mover-core: needs two CPUs or more (one for the mover, the rest for the layers); this process "
          "may use {}",
          cpus.size()));
    c.mover_cpu = cpus.back();
  }
  if (c.warmup < 3)
    return invalid_argument(
        "--warmup must be at least 3: step 1 is profiled and the policies start at step 2");
  for (const std::string& m : c.models) {
    if (auto net = make_model(m, {}); !net) return net.status();  // names the model and the known ones
  }
  for (const std::string& p : c.policies) {
    if (std::ranges::find(migrator::policy_names(), p) == migrator::policy_names().end())
      return invalid_argument(fmt::format("unknown policy '{}' (known: {})", p, migrator::known_policies()));
  }
  if (std::ranges::find(c.policies, "fast-only") == c.policies.end())
    c.policies.insert(c.policies.begin(), "fast-only");
  for (const std::string& b : c.budgets) {
    RuntimeOptions options;
    options.policy = "sentinel";
    options.fast_budget = b;
    if (auto r = resolve_migration(options); !r) {
      // The runtime's check, its message naming our option instead of RuntimeOptions' field.
      std::string why = r.status().message();
      if (const auto at = why.find("': "); at != std::string::npos) why = why.substr(at + 3);
      return invalid_argument(fmt::format("--budgets '{}': {}", b, why));
    }
  }
  if (c.models.empty() || c.budgets.empty())
    return invalid_argument("--models and --budgets need at least one entry");
  if (c.backend != "cpu" && (cli.numactl == "on" || (cli.emulate_as != "auto" && cli.emulate_as != "none")))
    return invalid_argument(fmt::format(
        "--backend {}: the numactl rows and the emulation check are about host memory; leave --numactl "
        "and --emulate-as out",
        c.backend));
  auto specs = tier_specs(cli);
  if (!specs) return specs.status();
  c.specs = std::move(specs).value();
  // Real-machine extras: numactl rows and the emulation check, where a spec has a real slow tier
  // of host memory (not with a GPU backend, whose tensors live on the GPU's tiers).
  const std::string real = c.backend == "cpu" ? bench::first_real_spec(c.specs) : "";
  if (!cli.numactl_nodes.empty()) {
    const auto nodes = bench::split_list(cli.numactl_nodes);
    if (nodes.size() != 2 || nodes[0].find_first_not_of("0123456789") != std::string::npos ||
        nodes[1].find_first_not_of("0123456789") != std::string::npos)
      return invalid_argument(
          fmt::format("--numactl-nodes '{}': give FAST,SLOW node numbers, e.g. 0,1", cli.numactl_nodes));
    c.fast_node = std::stoi(nodes[0]);
    c.slow_node = std::stoi(nodes[1]);
  } else if (!real.empty()) {
    c.fast_node = bench::spec_fast_node(real);
    c.slow_node = bench::spec_slow_node(real);
    if (auto topo = discover_topology(); topo && (c.fast_node < 0 || c.slow_node < 0)) {
      // Fastest node with CPUs; slowest node (a CPU-less one where there is one).
      for (const MemoryNode& n : topo.value().nodes) {
        if (c.fast_node < 0 && !n.cpu_less) c.fast_node = n.os_index;
      }
      if (c.slow_node < 0 && topo.value().nodes.size() > 1) c.slow_node = topo.value().nodes.back().os_index;
    }
  }
  if (cli.numactl != "off") {
    std::string why;
    if (real.empty()) {
      why = "every spec is emulated (numactl rows need a real slow node)";
    } else if (c.fast_node < 0 || c.slow_node < 0 || c.fast_node == c.slow_node) {
      why = "no two NUMA nodes to bind to (give --numactl-nodes FAST,SLOW)";
    } else if (which("numactl").empty()) {
      why = "numactl is not installed (apt-get install numactl)";
    }
    if (why.empty()) {
      c.numactl.assign(std::begin(bench::kNumactlModes), std::end(bench::kNumactlModes));
    } else if (cli.numactl == "on") {
      return invalid_argument("--numactl on: " + why);
    } else if (!real.empty()) {
      fmt::print(stderr, "tensortier-bench: no numactl rows: {}\n", why);
    }
  }
  if (cli.emulate_as != "none" && !real.empty()) {
    // A real NUMA node stands for remote memory; a KMEM DAX node or a pmem directory for Optane.
    c.emulate_as = cli.emulate_as != "auto"           ? cli.emulate_as
                   : bench::spec_slow_node(real) >= 0 ? "remote-numa"
                                                      : "optane";
    if (auto p = find_preset(c.emulate_as); !p)
      return invalid_argument(fmt::format("--emulate-as: {}", p.status().message()));
    if (std::ranges::find(c.policies, "slow-only") == c.policies.end()) c.policies.push_back("slow-only");
  }
  return c;
}

// Takes the lock of --out (its file .lock, flock: let go by the kernel when this process ends,
// kill -9 included) and writes this process's pid there. Errors name the run that holds it.
Status lock_out_dir(const fs::path& out) {
  const fs::path path = out / ".lock";
  // Never through a link planted there (the pid would overwrite its target), never a FIFO's wait.
  const int fd =
      open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);  // kept open
  if (fd < 0 && errno == ELOOP)
    return invalid_argument(fmt::format(
        "'{}' is a symbolic link; remove it (tensortier-bench makes its lock itself)", path.string()));
  if (fd < 0) return unavailable(fmt::format("cannot open '{}': {}", path.string(), strerrordesc_np(errno)));
  if (struct stat st{}; fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return invalid_argument(fmt::format(
        "'{}' is not a regular file; remove it (tensortier-bench makes its lock itself)", path.string()));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char pid[32] = {};
    const ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
    close(fd);
    return unavailable(
        fmt::format("--out '{}' is in use by another tensortier-bench (pid {}): wait for it to end, or give "
                    "another --out",
                    out.string(), n > 0 ? std::string(pid, static_cast<std::size_t>(n)) : "unknown"));
  }
  const std::string pid = std::to_string(getpid());
  if (ftruncate(fd, 0) != 0 || pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size()))
    spdlog::warn("tensortier-bench: could not write the pid to '{}'", path.string());
  return Status::ok();
}

// What is wrong with the shape of a results file read back (empty: nothing): the fields a run
// reads of it, before it reads them.
std::string results_shape_problem(const json& results) {
  if (!results.is_object()) return fmt::format("it is a JSON {}, not an object", results.type_name());
  for (const char* key : {"config", "tasks"}) {
    if (!results.contains(key)) return fmt::format("it has no \"{}\"", key);
  }
  const json& tasks = results.at("tasks");
  if (!tasks.is_object()) return fmt::format("its \"tasks\" is a JSON {}, not an object", tasks.type_name());
  for (const auto& [id, task] : tasks.items()) {
    if (!task.is_object())
      return fmt::format("its task '{}' is a JSON {}, not an object", id, task.type_name());
  }
  return "";
}

int parent_main(const Cli& cli, const std::vector<std::string>& args) {
  spdlog::set_level(spdlog::level::warn);
  auto matrix = matrix_from(cli);
  if (!matrix) {
    fmt::print(stderr, "tensortier-bench: {}\n", matrix.status().message());
    return 2;
  }
  const MatrixConfig& c = matrix.value();
  const fs::path out(cli.out);
  std::error_code ec;
  fs::create_directories(out / "tasks", ec);
  if (ec || access(out.c_str(), W_OK) != 0) {
    fmt::print(stderr, "tensortier-bench: --out '{}': cannot write there ({})\n", cli.out,
               ec ? ec.message() : strerrordesc_np(errno));
    return 2;
  }
  // One run at a time on a directory: a second one would run the same tasks beside the first,
  // skewing both's timings. The lock goes with the process, however it ends.
  if (Status s = lock_out_dir(out); !s.is_ok()) {
    fmt::print(stderr, "tensortier-bench: {}\n", s.message());
    return 2;
  }
  const fs::path results_path = out / "results.json";
  json results;
  if (fs::exists(results_path) && !cli.fresh) {
    try {
      std::ifstream in(results_path);
      results = json::parse(in);
    } catch (const json::exception& e) {
      fmt::print(
          stderr,
          "tensortier-bench: '{}' is not a results file ({}): give another --out, or --fresh to replace it\n",
          results_path.string(), e.what());
      return 2;
    }
    if (std::string wrong = results_shape_problem(results); !wrong.empty()) {
      fmt::print(
          stderr,
          "tensortier-bench: '{}' is not a results file of tensortier-bench ({}): give another --out, or "
          "--fresh to replace it\n",
          results_path.string(), wrong);
      return 2;
    }
    if (!results.contains("config") || results.at("config") != bench::to_json(c)) {
      fmt::print(stderr,
                 "tensortier-bench: '{}' holds another matrix; give another --out to keep it, or --fresh to "
                 "replace it\n",
                 results_path.string());
      return 2;
    }
  }
  const std::vector<Task> all = bench::expand(c);
  std::string command = "tensortier-bench";
  for (const std::string& a : args) command += " " + a;
  if (results.is_null()) {
    results =
        json{{"format", "tensortier.bench/1"}, {"config", bench::to_json(c)}, {"tasks", json::object()}};
    results["started"] = iso_now();
  }
  results["command"] = command;
  results["machine"] = bench::machine_record();
  std::vector<Task> todo = bench::pending(all, results.at("tasks"));
  fmt::print(stderr, "tensortier-bench: {}\n", bench::machine_line(results["machine"]));
  fmt::print(
      stderr,
      "tensortier-bench: {} models x {} tier specs x {} budgets x {} policies, {} repetition{}: {} tasks{}\n",
      c.models.size(), c.specs.size(), c.budgets.size(), c.policies.size(), c.reps, c.reps == 1 ? "" : "s",
      all.size(),
      todo.size() < all.size()
          ? fmt::format(", {} done already: running the other {}", all.size() - todo.size(), todo.size())
          : "");
  for (const std::string& spec : c.specs) {
    fmt::print(stderr, "tensortier-bench:   tiers {}{}\n", spec,
               bench::spec_is_emulated(spec) ? " (emulated slow tier: every figure on it is emulated)"
                                             : " (real tiers: no cost model)");
  }
  const std::string self = fs::read_symlink("/proc/self/exe", ec).string();
  const auto start = std::chrono::steady_clock::now();
  std::map<std::string, std::string> failures;
  std::size_t ran = 0;
  const std::size_t done_before = all.size() - todo.size();
  for (const Task& task : todo) {
    if (cli.max_tasks > 0 && static_cast<int>(ran) >= cli.max_tasks) {
      fmt::print(
          stderr,
          "tensortier-bench: stopped after {} tasks (--max-tasks); run the same command again to finish\n",
          ran);
      return 3;
    }
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    progress(done_before + ran, all.size(), "running " + task_label(task), elapsed,
             ran == 0 ? 0 : elapsed / static_cast<double>(ran) * static_cast<double>(todo.size() - ran));
    const fs::path task_file = out / "tasks" / fmt::format("task-{}.json", &task - todo.data());
    if (Status s =
            write_file(task_file, json{{"config", bench::to_json(c)}, {"task", bench::to_json(task)}}.dump());
        !s.is_ok()) {
      fmt::print(stderr, "tensortier-bench: {}\n", s.message());
      return 1;
    }
    std::vector<std::string> argv;
    if (task.kind == TaskKind::kNumactl) {
      argv = {which("numactl")};
      if (task.numactl == "membind-slow") argv.push_back(fmt::format("--membind={}", c.slow_node));
      if (task.numactl == "interleave")
        argv.push_back(fmt::format("--interleave={},{}", c.fast_node, c.slow_node));
      if (task.numactl == "preferred-fast") argv.push_back(fmt::format("--preferred={}", c.fast_node));
    }
    argv.insert(argv.end(), {self, "--run-task", task_file.string()});
    const auto t0 = std::chrono::steady_clock::now();
    auto [rc, text] = run_child(argv, c.mover_cpu);
    ++ran;
    const auto pos = text.rfind("RESULT ");
    json result;
    if (rc == 0 && pos != std::string::npos) {
      try {
        result = json::parse(text.substr(pos + 7));
      } catch (const json::exception&) {
        result = nullptr;
      }
    }
    if (result.is_null()) {
      failures[task.id] = fmt::format("exit status {}", rc);
      results["failed"][task.id] = failures[task.id];
      fmt::print(stderr, "\ntensortier-bench: task {} failed (exit status {}); its output is above\n",
                 task_label(task), rc);
    } else {
      result["wall_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      result["finished"] = iso_now();
      results["tasks"][task.id] = std::move(result);
      if (results.contains("failed")) results["failed"].erase(task.id);
    }
    if (Status s = write_file(results_path, results.dump(1)); !s.is_ok()) {
      fmt::print(stderr, "tensortier-bench: {}\n", s.message());
      return 1;
    }
  }
  progress(all.size() - failures.size(), all.size(), "done",
           std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 0);
  results["finished"] = iso_now();
  results["summary"] = bench::summarize(c, results.at("tasks"));
  const std::string tables = bench::markdown_tables(results.at("summary"));
  results["tables"] = tables;  // as printed: tools/bench_results.py puts them in docs/RESULTS.md
  for (const auto& [path, text] : {std::pair{out / "results.json", results.dump(1)},
                                   std::pair{out / "results.csv", bench::csv(results.at("summary"))},
                                   std::pair{out / "table.md", tables}}) {
    if (Status s = write_file(path, text); !s.is_ok()) {
      fmt::print(stderr, "tensortier-bench: {}\n", s.message());
      return 1;
    }
  }
  fmt::print("{}\n", tables);
  for (const std::string& spec : c.specs) {
    if (bench::spec_is_emulated(spec)) {
      fmt::print(
          "Emulated: rows on 'emulated {}' ran on DRAM charged by the cost model (docs/EMULATION.md).\n",
          bench::spec_preset(spec));
    }
  }
  if (!cli.no_plots) {
    const std::string tools = TENSORTIER_TOOLS_DIR;
    const auto [rc, text] =
        run_child({"/usr/bin/python3", tools + "/plot_bench.py", results_path.string(), out.string()});
    fmt::print("{}", text);
    if (rc != 0)
      fmt::print(stderr, "tensortier-bench: plots not drawn (tools/plot_bench.py exit status {})\n", rc);
    if (fs::exists(out / "trace.json")) {
      const auto [trc, ttext] = run_child({"/usr/bin/python3", tools + "/plot_timeline.py",
                                           (out / "trace.json").string(), (out / "timeline.png").string()});
      if (trc != 0) fmt::print(stderr, "tensortier-bench: timeline not drawn (exit status {})\n", trc);
    }
  }
  fmt::print("outputs in {}: results.json, results.csv, table.md{}\n", out.string(),
             fs::exists(out / "trace.json") ? ", trace.json" : "");
  if (!failures.empty()) {
    fmt::print(stderr, "tensortier-bench: {} task(s) failed; run the same command again to retry them\n",
               failures.size());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // The child: one task from a file the parent wrote.
  if (argc == 3 && std::string_view(argv[1]) == "--run-task") return child_main(argv[2]);
  CLI::App app{"tensortier-bench: models x tiers x fast budgets x policies, step time over fast-only"};
  Cli cli;
  app.add_option("--mode", cli.mode, "quick (a few minutes) or full: the defaults of every list below")
      ->check(CLI::IsMember({"quick", "full"}))
      ->capture_default_str();
  app.add_option("--models", cli.models, "Models, comma-separated (default resnet18,vgg11)");
  app.add_option("--policies", cli.policies,
                 "Policies, comma-separated (fast-only is always run: the reference)");
  app.add_option("--budgets", cli.budgets,
                 "Fast budgets: shares of the profiled peak (20%) or sizes (512MiB)");
  app.add_option("--presets", cli.presets,
                 "Emulated slow-tier presets, one tier spec each (default optane-server; full: "
                 "optane-server,optane,cxl)");
  tensortier::cli::add_tiers_flag(app, cli.tiers,
                                  "repeat for more; instead of --presets: real tiers run with no cost model");
  app.add_option("--batch", cli.batch, "Batch size")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--image-size", cli.image_size, "Input height and width")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--width", cli.width, "Model width")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--steps", cli.steps, "Measured steps per policy in a task (default quick 3, full 5)")
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup", cli.warmup, "Unmeasured steps first (at least 3)")->capture_default_str();
  app.add_option("--reps", cli.reps, "Repetitions of every task (default quick 1, full 3)")
      ->check(CLI::PositiveNumber);
  app.add_option("--out", cli.out,
                 "Output directory; a run interrupted there is finished by the same command")
      ->capture_default_str();
  app.add_flag("--fresh", cli.fresh, "Start over, replacing the results in --out");
  app.add_option("--numactl", cli.numactl,
                 "numactl baseline rows: auto (where a spec has a real slow node), on, off")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  app.add_option("--numactl-nodes", cli.numactl_nodes,
                 "FAST,SLOW NUMA nodes for the numactl rows (default: from the spec or hwloc)");
  app.add_option(
         "--emulate-as", cli.emulate_as,
         "On real tiers, the emulated preset checked against the slow node: auto (remote-numa for a numa "
         "node, else optane), a preset, or none")
      ->capture_default_str();
  app.add_option("--trace-policy", cli.trace_policy,
                 "The policy whose step is traced (first model and spec, last budget)")
      ->capture_default_str();
  app.add_flag("--no-plots", cli.no_plots, "Do not draw the PNGs");
  tensortier::cli::add_backend_flag(app, cli.backend);
  tensortier::cli::add_math_flag(app, cli.math);
  app.add_flag(
      "--mover-core", cli.mover_core,
      "The mover on the last CPU of this process's alone, every policy's layers (fast-only's too) on "
      "the others, plans weighing moves without the mover's CPU: a server where migration has a core "
      "of its own");
  app.add_option("--timed-bound-s", cli.timed_bound_s,
                 "Seconds for the timed bound's channel program, on every planning policy's run; 0: none")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  app.add_option("--tightened-bound-s", cli.tightened_bound_s,
                 "Seconds for the tightened bound's search (integral at uses), once a task; 0: none")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  app.add_option("--max-tasks", cli.max_tasks,
                 "Stop after this many tasks, as an interrupted run would (for tests)")
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    return parent_main(cli, std::vector<std::string>(argv + 1, argv + argc));
  } catch (const json::exception& e) {  // a task's record of the wrong shape, past the checks above
    fmt::print(
        stderr,
        "tensortier-bench: '{}/results.json' has a record of the wrong shape ({}): give another --out, or "
        "--fresh to replace it\n",
        cli.out, e.what());
    return 2;
  }
}
