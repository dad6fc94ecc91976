// The benchmark matrix of tensortier-bench: what a run measures (models x tier specs x fast
// budgets x policies, repeated), the order its tasks run in, how an interrupted run resumes, and
// how the tasks' measurements become the cells of its table. Pure functions over values (no
// runtime, no processes), so the harness's bookkeeping is tested on its own
// (tests/bench_matrix_test.cc); tensortier_bench.cc runs the tasks.
//
// A *task* is one process: one model on one tier spec at one fast budget, every policy of the
// matrix side by side in it (their steps alternate, so machine noise hits them alike), for one
// repetition. numactl baseline tasks run one model with every tensor on plain DRAM mappings
// under a process-wide numactl policy; an emulation-check task runs fast-only and slow-only on
// the emulated preset that claims to model a real slow node. Tasks are ordered repetition by
// repetition, the groups rotated each time, so that slow drifts of the machine spread over all
// cells instead of landing on one.
//
// Thread safety: values and pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tensortier/status.h"

namespace tensortier::bench {

// The process-wide numactl baselines users run today, as extra rows.
inline constexpr const char* kNumactlModes[] = {"membind-slow", "interleave", "preferred-fast"};

struct MatrixConfig {
  std::vector<std::string> models;
  std::vector<std::string> policies;  // fast-only first (added when missing): the reference
  std::vector<std::string> budgets;   // "20%" (of the profiled peak) or a size ("512MiB")
  std::vector<std::string> specs;     // tier specs, fast tier first
  int batch = 32, image_size = 32, width = 64;
  int steps = 5;   // measured steps per policy in a task (the median is the task's figure)
  int warmup = 3;  // unmeasured steps first (step 1 is profiled; policies start at step 2)
  int reps = 1;    // repetitions of every task
  // numactl rows (kNumactlModes), run where a spec has a real slow node; empty: none.
  std::vector<std::string> numactl;
  int fast_node = -1, slow_node = -1;  // the nodes numactl rows bind to
  // The emulated preset checked against the real slow node ("" none): its slow-only slowdown
  // (the model's prediction) beside the real one (measured).
  std::string emulate_as;
  // The policy whose step the traced task records (timeline and fast-tier occupancy).
  std::string trace_policy;
  // Mover core (--mover-core): the mover bound to this CPU, the layers' threads (every policy's,
  // fast-only's too) on the process's other CPUs, plans weighing moves without the mover's CPU.
  // -1: the default, the mover among the layers' threads on every core.
  int mover_cpu = -1;
  // What computes the layers (dnn/backend_by_name.h): cpu (oneDNN), or cuda (cuDNN on a GPU, with
  // specs that hold a cuda tier; no numactl rows and no emulation check, which are about host memory).
  std::string backend = "cpu";
  std::string math = "fp32";  // the cuda backend's (--math): fp32 or tf32
  // The tightened bound's search (timed_bound.h), on each task's first planning policy; 0: none.
  // A planning knob: not part of the matrix's identity (not in to_json).
  double tightened_bound_s = 30;
  // The timed bound's channel program, on every planning policy's run; 0: not solved. Also a
  // planning knob.
  double timed_bound_s = 60;
};

nlohmann::json to_json(const MatrixConfig& config);
Result<MatrixConfig> config_from_json(const nlohmann::json& j);

// "resnet18,vgg11" -> {"resnet18", "vgg11"}; empty items dropped.
std::vector<std::string> split_list(const std::string& text);

// A spec with no emulated tier is a real machine's (no cost model runs on it).
bool spec_is_emulated(const std::string& spec);
// The preset of a spec's emulated tier ("" when it has none or does not parse).
std::string spec_preset(const std::string& spec);
// The NUMA node of a spec's slowest tier when it is a numa tier (-1 otherwise).
int spec_slow_node(const std::string& spec);
// What tables call a spec: "emulated PRESET", or the spec itself (a real machine's).
std::string tiers_label(const std::string& spec);
// The first spec with no emulated tier ("" when every one is emulated): the real machine's.
std::string first_real_spec(const std::vector<std::string>& specs);
int spec_fast_node(const std::string& spec);

enum class TaskKind { kPolicies, kNumactl, kEmulationCheck };
const char* to_string(TaskKind kind);

struct Task {
  std::string id;  // stable across runs of the same matrix: what resume matches
  TaskKind kind = TaskKind::kPolicies;
  std::string model, spec, budget;
  std::string numactl;  // kNumactl: the mode
  int rep = 0;
  std::vector<std::string> policies;  // run side by side in the task's process
  bool trace = false;                 // records the trace policy's last step
};

nlohmann::json to_json(const Task& task);
Result<Task> task_from_json(const nlohmann::json& j);

// Every task of the matrix in the order they run (see the header comment). The first task of
// the first repetition with trace_policy among its policies is the traced one.
std::vector<Task> expand(const MatrixConfig& config);

// The tasks of `all` whose ids are not among `done`, in order: what a resumed run still runs.
std::vector<Task> pending(const std::vector<Task>& all, const nlohmann::json& done);

// The cells of the table from the finished tasks (results["tasks"], as tensortier_bench.cc writes
// them): per model, spec, budget and policy the median over repetitions of the step time and of
// the ratio to fast-only (each taken within one task, side by side), the penalty share
// (policy - fast-only) / (slow-only - fast-only) where slow-only ran, and the per-step move
// figures; numactl rows against the same repetition's fast-only on the first real spec (another
// process); emulation checks as predicted against measured slow-only slowdown.
// Each cell also carries the highest load average its tasks recorded ("load") and how far its
// repetitions' ratios spread ("spread": the largest departure from their median), flagged
// "disagreeing" past kDisagreement.
inline constexpr double kDisagreement = 0.2;
nlohmann::json summarize(const MatrixConfig& config, const nlohmann::json& tasks);

// The cells as a markdown table (ratios, penalty shares, floors) and a second table of what each
// policy moved; every emulated figure names its preset.
std::string markdown_tables(const nlohmann::json& summary);
// The cells as CSV, one row per cell, header first.
std::string csv(const nlohmann::json& summary);

}  // namespace tensortier::bench
