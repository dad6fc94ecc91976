// tensortier-train: trains a model with oneDNN, every tensor a runtime object placed on the
// configured tiers, and reports loss, accuracy, step time and fast-tier use. With --compare, the
// same first steps run under each policy listed first, side by side (the README's main command).
#include <unistd.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "tensortier/allocator/tier_spec.h"
#include "tensortier/cli/runtime_flags.h"
#include "tensortier/dnn/backend_by_name.h"
#include "tensortier/dnn/data.h"
#include "tensortier/dnn/memory_flags.h"
#include "tensortier/dnn/models.h"
#include "tensortier/migrator/plan.h"
#include "tensortier/timeline.h"

namespace {

using namespace tensortier;
using namespace tensortier::dnn;

struct Options {
  std::string model = "lenet5";
  std::string data = "fashion-mnist";
  std::string data_dir = kFashionMnistDir;
  std::size_t batch = 64;
  int epochs = 2;
  std::size_t steps = 0;
  float lr = 0.05F, momentum = 0.9F, weight_decay = 0.0F;
  int width = 64;
  std::string conv = "auto";    // convolution algorithm (ConvAlgorithm)
  std::string backend = "cpu";  // cpu (oneDNN) or cuda (cuDNN, cuBLAS)
  std::string math = "fp32";    // the cuda backend's: fp32 or tf32
  MemoryOptions memory;         // --in-place, --fuse, --recompute
  int image_size = 32, channels = 3, classes = 10;
  std::size_t train_limit = 0, test_limit = 0, synthetic_count = 2048;
  std::string tiers;
  std::uint64_t seed = 1;
  std::size_t log_every = 100;
  std::string schedule = "cosine";
  std::string profile;              // empty: the runtime's default (TENSORTIER_PROFILE, else step 1)
  std::string profile_granularity;  // empty: the runtime's default (2MiB)
  std::string profile_json;
  std::string profile_writes;    // empty: the runtime's default (page protection)
  std::string profile_accesses;  // empty: the runtime's default (page protection)
  std::string policy;            // empty: TENSORTIER_POLICY, else none
  std::string fast_budget;       // empty: TENSORTIER_FAST_BUDGET, else the fast tier's budget
  std::uint32_t trial_steps = RuntimeOptions{}.trial_steps;
  std::uint32_t measured_mover_steps = RuntimeOptions{}.measured_mover_steps;
  std::uint32_t copy_threads = RuntimeOptions{}.copy_threads;
  std::vector<std::string> compare;  // policies run side by side before training (--compare)
  std::size_t compare_steps = 30;
  std::string trace;  // Chrome trace of steps [trace_from, trace_from + trace_steps)
  std::size_t trace_from = 4;
  std::size_t trace_steps = 1;
};

// The migration's line for a step: bytes moved each way in the last step, moves dropped late,
// failed moves, layers' waits, the emulated charge; empty with no policy running.
std::string migration_use(const Runtime& rt) {
  const RuntimeStats s = rt.stats();
  if (s.policy.empty()) return {};
  return fmt::format(" | {} in {} out {} late {} failed {} slow {} wait {:.1f} ms charge {:.1f} ms", s.policy,
                     format_bytes(s.migration.last_step_bytes_in),
                     format_bytes(s.migration.last_step_bytes_out), s.migration.last_step_late,
                     s.migration.last_step_failed, format_bytes(s.last_step_slow_bytes),
                     static_cast<double>(s.last_step_move_wait_ns) / 1e6,
                     static_cast<double>(s.last_step_emulated_charge_ns) / 1e6);
}

// Applies the --profile* flags over the runtime's settings (flags win over the environment).
Status apply_profile_flags(const Options& o, Runtime& rt) {
  profiler::ProfileOptions p = rt.profile_options();
  if (o.profile == "off") {
    p.enabled = false;
  } else if (!o.profile.empty()) {
    p.enabled = true;
    std::uint64_t step = 0;
    const auto [end, ec] = std::from_chars(o.profile.data(), o.profile.data() + o.profile.size(), step);
    if (ec != std::errc() || end != o.profile.data() + o.profile.size() || step > (std::uint64_t{1} << 40))
      return invalid_argument(
          fmt::format("--profile {}: too large; use 'off' or a step number below 2^40", o.profile));
    p.step = step;
  }
  if (!o.profile_granularity.empty()) {
    auto bytes = parse_size_bytes(o.profile_granularity);
    if (!bytes)
      return invalid_argument(
          fmt::format("--profile-granularity '{}': use 4KiB or 2MiB", o.profile_granularity));
    p.granularity_bytes = bytes.value();
  }
  if (!o.profile_json.empty()) p.json_path = o.profile_json;
  if (!o.profile_writes.empty()) p.async_writes = o.profile_writes == "uffd";
  if (!o.profile_accesses.empty()) p.accesses = profiler::parse_access_source(o.profile_accesses).value();
  return rt.set_profile_options(p);
}

// One paragraph on the step profile, for people.
void print_profile(const profiler::StepProfile& p) {
  std::array<std::size_t, 4> counts{};  // by LifetimeClass
  for (const auto& o : p.objects) ++counts.at(static_cast<std::size_t>(o.lifetime));
  std::uint64_t unprofiled_ns = 0;
  for (const auto& l : p.layers) unprofiled_ns += l.unprofiled_duration_ns;
  const std::string peak_layer = p.peak_at_layer < p.layers.size() ? p.layers[p.peak_at_layer].name
                                                                   : std::string("after the last layer");
  fmt::print(
      "profile of step {}: {} layers, {} objects ({} persistent, {} long-lived, {} short-lived), "
      "peak {} before layer '{}'\n",
      p.step, p.layers.size(), p.objects.size(), counts[0], counts[1], counts[2],
      format_bytes(p.peak_live_bytes), peak_layer);
  const std::string before = p.step == 0
                                 ? std::string()
                                 : fmt::format(" (its layers took {:.1f} ms in step {}, the one before)",
                                               static_cast<double>(unprofiled_ns) / 1e6, p.step - 1);
  const bool declared = p.access_source == "declared";
  const std::string accesses = declared ? std::string("accesses as declared (nothing protected)")
                                        : fmt::format("{} protection faults at {} granularity", p.faults,
                                                      format_bytes(p.granularity_bytes));
  fmt::print("  {}; the step took {:.1f} ms profiled{}; writes: {}; counters: {}\n", accesses,
             static_cast<double>(p.duration_ns) / 1e6, before, p.write_tracking, p.counter_source);
  for (const std::string& note : p.notes) fmt::print("  note: {}\n", note);
}

int fail(const Status& s) {
  fmt::print(stderr, "tensortier-train: {}\n", s.to_string());
  return 1;
}

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

std::string fast_tier_use(const Runtime& rt) {
  const auto stats = rt.stats();
  const auto& fast = stats.tiers.front();
  return fmt::format("{} {}/{}", fast.name, format_bytes(fast.mapped_bytes), format_bytes(fast.budget_bytes));
}

}  // namespace

// Training flags: model, data, optimizer, engine.
void add_training_flags(CLI::App& app, Options& o) {
  std::string models;
  for (const auto& m : model_names()) models += (models.empty() ? "" : ", ") + m;
  app.add_option("--model", o.model, "Model: " + models)->capture_default_str();
  app.add_option("--data", o.data, "Data set: fashion-mnist or synthetic")
      ->check(CLI::IsMember({"fashion-mnist", "synthetic"}))
      ->capture_default_str();
  app.add_option("--data-dir", o.data_dir, "Directory of the Fashion-MNIST gzip IDX files")
      ->capture_default_str();
  app.add_option("--batch", o.batch, "Batch size")->check(CLI::Range(1, 65536))->capture_default_str();
  app.add_option("--epochs", o.epochs, "Epochs over the training set")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--steps", o.steps, "Train this many steps instead of whole epochs (0: use --epochs)")
      ->capture_default_str();
  app.add_option("--lr", o.lr, "SGD learning rate")->capture_default_str();
  app.add_option("--schedule", o.schedule,
                 "Learning rate schedule: cosine (decays to 0 over the run) or constant")
      ->check(CLI::IsMember({"cosine", "constant"}))
      ->capture_default_str();
  app.add_option("--momentum", o.momentum, "SGD momentum")->capture_default_str();
  app.add_option("--weight-decay", o.weight_decay, "SGD weight decay")->capture_default_str();
  app.add_option("--width", o.width, "Channels of the first stage (VGG, ResNet), hidden units/4 (MLP)")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  cli::add_backend_flag(app, o.backend);
  cli::add_math_flag(app, o.math);
  app.add_option("--conv", o.conv,
                 "Convolutions: auto (oneDNN's Winograd kernels where they pay, else direct) or direct")
      ->capture_default_str();
  dnn::add_memory_flags(app, o.memory);
  app.add_option("--image-size", o.image_size, "Synthetic data: image height and width")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--channels", o.channels, "Synthetic data: image channels")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--classes", o.classes, "Synthetic data: classes")
      ->check(CLI::Range(2, 1 << 20))
      ->capture_default_str();
  app.add_option("--synthetic-count", o.synthetic_count, "Synthetic data: training samples")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 30))
      ->capture_default_str();
  app.add_option("--train-limit", o.train_limit, "Use only the first N training samples (0: all)")
      ->capture_default_str();
  app.add_option("--test-limit", o.test_limit, "Use only the first N test samples (0: all)")
      ->capture_default_str();
  app.add_option("--seed", o.seed, "Seed of weights and shuffling")->capture_default_str();
  app.add_option("--log-every", o.log_every, "Without a terminal: print a line every N steps")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1'000'000'000}))
      ->capture_default_str();
  app.add_option(
         "--compare", o.compare,
         "Before training, run the same first steps (same weights, same batches) under each of these "
         "policies in turn, comma-separated, and print them side by side: step time, fast memory, bytes "
         "moved, loss")
      ->delimiter(',')
      ->check(CLI::IsMember(migrator::policy_names()));
  app.add_option("--compare-steps", o.compare_steps, "Steps each --compare policy runs")
      ->check(CLI::Range(std::size_t{3}, std::size_t{10'000}))
      ->capture_default_str();
}

// The runtime's flags: tiers, profiling, policy, budget, trial, mover, trace.
void add_runtime_flags(CLI::App& app, Options& o) {
  cli::add_tiers_flag(app, o.tiers);
  app.add_option("--profile", o.profile,
                 "Which step to profile (0-based; 'off': none); default: TENSORTIER_PROFILE, else 1")
      ->check([](const std::string& v) {
        return v == "off" || (!v.empty() && v.find_first_not_of("0123456789") == std::string::npos)
                   ? std::string()
                   : "use 'off' or a step number";
      });
  app.add_option("--profile-granularity", o.profile_granularity,
                 "Protection unit of the profiled step: 4KiB or 2MiB")
      ->check(CLI::IsMember({"4KiB", "2MiB"}));
  app.add_option("--profile-writes", o.profile_writes,
                 "How the profiled step tells writes: protection (default) or uffd (userfaultfd WP_ASYNC, "
                 "Linux 6.7+)")
      ->check(CLI::IsMember({"protection", "uffd"}));
  app.add_option(
         "--profile-accesses", o.profile_accesses,
         "Where the profiled step's accesses come from: protection (default: the pages it touched) or "
         "declared (what its layers declared; nothing protected, no faults)")
      ->check(CLI::IsMember({"protection", "declared"}));
  cli::add_profile_json_flag(app, o.profile_json);
  cli::add_policy_flag(app, o.policy);
  cli::add_fast_budget_flag(app, o.fast_budget);
  cli::add_trial_steps_flag(app, o.trial_steps);
  app.add_option("--measured-mover-steps", o.measured_mover_steps,
                 "Steps after which the policy's plan, where it copies, is made again with the mover's CPU "
                 "per byte as measured in them (0: plans keep the cost model's estimate)")
      ->check(CLI::Range(0, 100))
      ->capture_default_str();
  app.add_option("--copy-threads", o.copy_threads,
                 "Threads a move's copy of 4 MiB or more is split over, at most one a CPU (0: the cores the "
                 "layers leave spare, OMP_NUM_THREADS below the CPUs; 1 where fewer than two are)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  cli::add_trace_flags(app, o.trace, o.trace_from, o.trace_steps);
}

// Flags the parser cannot check: numbers CLI11 reads as nan or inf, a policy with profiling off.
Status check_options(const Options& o) {
  for (const auto& [flag, value] : {std::pair{"--lr", o.lr}, std::pair{"--momentum", o.momentum},
                                    std::pair{"--weight-decay", o.weight_decay}}) {
    if (!std::isfinite(value) || value < 0)
      return invalid_argument(fmt::format("{} {}: use a finite number of 0 or more", flag, value));
  }
  if ((!o.policy.empty() || !o.compare.empty()) && o.profile == "off")
    return invalid_argument("--policy plans from the profiled step: it cannot run with --profile off");
  return Status::ok();
}

struct Data {
  Dataset train, test;
};

Result<Data> load_data(const Options& o) {
  Data d;
  if (o.data == "fashion-mnist") {
    auto tr = load_fashion_mnist(o.data_dir, true, o.train_limit);
    if (!tr) return tr.status();
    auto te = load_fashion_mnist(o.data_dir, false, o.test_limit);
    if (!te) return te.status();
    d.train = std::move(tr).value();
    d.test = std::move(te).value();
    // The network is built for the training images; a test image of another size would not fit
    // its input (and overflow the batch buffer).
    if (d.test.height != d.train.height || d.test.width != d.train.width ||
        d.test.channels != d.train.channels) {
      return invalid_argument(fmt::format(
          "the test images in {} are {}x{}x{} but the training images are {}x{}x{}: use test and training "
          "files of one data set",
          o.data_dir, d.test.channels, d.test.height, d.test.width, d.train.channels, d.train.height,
          d.train.width));
    }
  } else {
    d.train = synthetic_dataset(o.synthetic_count, o.channels, o.image_size, o.image_size, o.classes, o.seed);
    d.test = synthetic_dataset(std::max<std::size_t>(o.batch, o.synthetic_count / 4), o.channels,
                               o.image_size, o.image_size, o.classes, o.seed + 1);
  }
  if (d.train.count() < o.batch || d.test.count() < o.batch) {
    return invalid_argument(fmt::format("batch {} is larger than the data ({} training, {} test samples)",
                                        o.batch, d.train.count(), d.test.count()));
  }
  return d;
}

// One training run under one policy: its runtime, engine, network and batches (the weights and the
// batches are the same in every run of one seed), and the trace recorder where asked.
struct Run {
  std::unique_ptr<Runtime> rt;
  std::unique_ptr<Backend> backend;  // null: the CPU backend
  std::unique_ptr<Engine> engine;
  std::unique_ptr<Network> net;
  std::unique_ptr<BatchIterator> batches;
  std::unique_ptr<TimelineRecorder> timeline;
  std::string policy;
};

Result<Run> make_run(const Options& o, const std::string& policy, const Dataset& train) {
  Run run;
  run.policy = policy;
  RuntimeOptions runtime_options(o.tiers);
  runtime_options.policy = policy;
  runtime_options.fast_budget = o.fast_budget;
  runtime_options.trial_steps = o.trial_steps;
  runtime_options.measured_mover_steps = o.measured_mover_steps;
  runtime_options.copy_threads = o.copy_threads;
  auto created = Runtime::create(runtime_options);
  if (!created) return created.status();
  run.rt = std::move(created).value();
  TENSORTIER_RETURN_IF_ERROR(apply_profile_flags(o, *run.rt));
  auto backend = make_backend(o.backend, *run.rt, o.math);
  if (!backend) return backend.status();
  run.backend = std::move(backend).value();
  run.engine =
      run.backend ? std::make_unique<Engine>(*run.rt, *run.backend) : std::make_unique<Engine>(*run.rt);
  const Result<ConvAlgorithm> conv = parse_conv_algorithm(o.conv);
  if (!conv) return conv.status();
  run.engine->set_conv_algorithm(conv.value());
  run.engine->set_memory_options(o.memory);
  auto model = make_model(o.model, {train.classes, o.width});
  if (!model) return model.status();
  run.net = std::move(model).value();
  const dnnl::memory::dims input{static_cast<dnnl::memory::dim>(o.batch), train.channels, train.height,
                                 train.width};
  TENSORTIER_RETURN_IF_ERROR(run.net->build(*run.engine, input, o.seed));
  run.batches = std::make_unique<BatchIterator>(train, o.batch, o.seed);
  return run;
}

// What the training loop saw: the loss of each step, and each step's time.
struct Steps {
  std::vector<double> loss, ms;
  std::size_t settled_from = 0;  // the first step (1-based) that ran the plan as it goes on; 0: none
};

// Trains `total` steps (of a run of `total` for the learning-rate schedule); `show` prints a
// progress bar on a terminal, else a line every --log-every steps.
Result<Steps> train_steps(Run& run, const Options& o, std::size_t total, bool show) {
  const bool tty = isatty(fileno(stdout)) != 0;
  SgdOptions sgd{o.lr, o.momentum, o.weight_decay};
  Batch batch;
  Steps steps;
  double loss_sum = 0, step_ms_sum = 0;
  std::size_t correct = 0, seen = 0, window = 0;
  for (std::size_t step = 1; step <= total; ++step) {
    TENSORTIER_RETURN_IF_ERROR(run.batches->next(*run.engine, batch));
    const auto t0 = std::chrono::steady_clock::now();
    if (o.schedule == "cosine") {
      sgd.learning_rate =
          o.lr * 0.5F *
          (1.0F + std::cos(3.14159265F * static_cast<float>(step - 1) / static_cast<float>(total)));
    }
    TENSORTIER_RETURN_IF_ERROR(run.rt->step_begin());
    auto r = run.net->train_step(*run.engine, batch, sgd);
    TENSORTIER_RETURN_IF_ERROR(run.rt->step_end());
    if (!r) return r.status();
    steps.ms.push_back(ms_since(t0));
    steps.loss.push_back(r->loss);
    if (steps.settled_from == 0 && run.rt->plan_settled()) steps.settled_from = step + 1;
    if (!show) continue;
    step_ms_sum += steps.ms.back();
    loss_sum += r->loss;
    correct += r->correct;
    seen += r->count;
    ++window;
    const std::size_t epoch = (step - 1) / std::max<std::size_t>(1, run.batches->batches_per_epoch()) + 1;
    const std::string line = fmt::format("step {}/{} epoch {} loss {:.4f} acc {:.1f}% {:.1f} ms/step {}",
                                         step, total, epoch, loss_sum / static_cast<double>(window),
                                         100.0 * static_cast<double>(correct) / static_cast<double>(seen),
                                         step_ms_sum / static_cast<double>(window),
                                         fast_tier_use(*run.rt) + migration_use(*run.rt));
    if (tty) {
      const int width = 24;
      const auto filled = static_cast<int>(static_cast<double>(width) * static_cast<double>(step) /
                                           static_cast<double>(total));
      fmt::print("\r[{}{}] {}   ", std::string(static_cast<std::size_t>(filled), '='),
                 std::string(static_cast<std::size_t>(width - filled), ' '), line);
      std::fflush(stdout);
    } else if (step % o.log_every == 0 || step == total) {
      fmt::print("{}\n", line);
    }
    if (step % o.log_every == 0) loss_sum = step_ms_sum = 0, correct = seen = window = 0;
  }
  if (show && tty) fmt::print("\n");
  return steps;
}

// One --compare policy's row: its first compare_steps steps in a run of its own.
struct CompareRow {
  std::string policy;
  double median_ms = 0;
  std::size_t from_step = 0;  // the steps the median is of: from here to the last (1-based)
  std::uint64_t fast_peak_bytes = 0, fast_budget_bytes = 0;
  std::uint64_t moved_in_bytes = 0, moved_out_bytes = 0;  // in the last step
  double last_loss = 0;
  std::string chosen;  // the trial's finding, where it ran one
  // Its plan's, over the profiled compute: the predicted step, and the largest bound it carries
  // (the exact model's, the timed one); 0 where it has none.
  double predicted_ratio = 0, bound_ratio = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

Result<CompareRow> compare_one(const Options& o, const std::string& policy, const Dataset& train) {
  auto run = make_run(o, policy, train);
  if (!run) return run.status();
  fmt::print("  {:<12} {} steps ...", policy, o.compare_steps);
  std::fflush(stdout);
  auto steps = train_steps(run.value(), o, o.compare_steps, /*show=*/false);
  if (!steps) return steps.status();
  CompareRow row;
  row.policy = policy;
  // The steps after the profiled one and the policy's trial: the plan as it goes on.
  row.from_step = steps->settled_from;
  if (row.from_step == 0 || row.from_step > o.compare_steps) {
    return failed_precondition(
        fmt::format("--compare {}: its plan was still on trial after {} steps (--compare-steps); give more "
                    "steps, or fewer "
                    "--trial-steps",
                    policy, o.compare_steps));
  }
  row.median_ms = median(std::vector<double>(
      steps->ms.begin() + static_cast<std::ptrdiff_t>(row.from_step - 1), steps->ms.end()));
  const RuntimeStats stats = run->rt->stats();
  row.fast_peak_bytes = stats.tiers.front().peak_live_bytes;
  row.fast_budget_bytes = stats.tiers.front().budget_bytes;
  row.moved_in_bytes = stats.migration.last_step_bytes_in;
  row.moved_out_bytes = stats.migration.last_step_bytes_out;
  row.last_loss = steps->loss.back();
  row.chosen = run->rt->trial_result();
  if (const migrator::Plan* plan = run->rt->plan(); plan != nullptr && plan->compute_ns > 0) {
    row.predicted_ratio = 1 + plan->predicted_extra_ns / plan->compute_ns;
    const double bound_ns = std::max(plan->bound_extra_ns, plan->timed_bound_ns);
    if (bound_ns > 0) row.bound_ratio = 1 + bound_ns / plan->compute_ns;
  }
  fmt::print(" {:.1f} ms a step\n", row.median_ms);
  if (!run->rt->policy_failure().empty()) return failed_precondition(run->rt->policy_failure());
  return row;
}

// A policy plans from the profiled step and runs from the one after it: a profile at the last step
// or later leaves it nothing to run.
Status check_policy_steps(const Options& o, const Runtime& rt, std::size_t total) {
  if (o.policy.empty() || rt.profile_options().step + 1 < total) return Status::ok();
  return invalid_argument(fmt::format(
      "--policy {} runs from the step after the profiled one, and step {} is profiled (--profile, "
      "TENSORTIER_PROFILE) of a run of {} training steps: profile an earlier step, or train longer",
      o.policy, rt.profile_options().step, total));
}

// --compare: the same first steps under each policy, side by side.
Status compare_policies(const Options& o, const Dataset& train) {
  fmt::print("the same {} steps (same weights, same batches) under each policy, one run each:\n",
             o.compare_steps);
  std::vector<CompareRow> rows;
  for (const std::string& policy : o.compare) {
    auto row = compare_one(o, policy, train);
    if (!row) return row.status();
    rows.push_back(std::move(row).value());
  }
  const auto reference = std::ranges::find(rows, std::string("fast-only"), &CompareRow::policy);
  fmt::print("\n{:<12} {:>14} {:>12} {:>12} {:>11} {:>22} {:>20} {:>12}\n", "policy", "step (median)",
             "steps timed", "vs fast-only", "predicted", "fast tier live (peak)", "moved a step in/out",
             "loss");
  double bound_ratio = 0;  // the largest any plan carried: no plan is predicted under it
  for (const CompareRow& r : rows) {
    const std::string ratio = reference != rows.end() && reference->median_ms > 0
                                  ? fmt::format("{:.2f}x", r.median_ms / reference->median_ms)
                                  : "-";
    fmt::print("{:<12} {:>11.1f} ms {:>12} {:>12} {:>11} {:>22} {:>20} {:>12.6f}\n", r.policy, r.median_ms,
               fmt::format("{}-{}", r.from_step, o.compare_steps), ratio,
               r.predicted_ratio > 0 ? fmt::format("{:.2f}x", r.predicted_ratio) : "-",
               format_bytes(r.fast_peak_bytes),
               format_bytes(r.moved_in_bytes) + " / " + format_bytes(r.moved_out_bytes), r.last_loss);
    bound_ratio = std::max(bound_ratio, r.bound_ratio);
  }
  if (bound_ratio > 0)
    fmt::print(
        "{:<12} {:>14} {:>12} {:>12} {:>11}   no plan is predicted to run faster (the exact model's bound, "
        "or the "
        "timed one)\n",
        "bound", "", "", "", fmt::format("{:.2f}x", bound_ratio));
  fmt::print(
      "step time: the median of the steps after the profiled one and the policy's trial; predicted: the "
      "plan's "
      "own account of its step over the profiled compute; fast tier live: the "
      "most "
      "bytes of live objects on the fast tier from the policy's start; loss: at step {}, the same in every "
      "row "
      "(placement never changes results)\n",
      o.compare_steps);
  for (const CompareRow& r : rows) {
    if (!r.chosen.empty()) fmt::print("  {}: {}\n", r.policy, r.chosen);
  }
  fmt::print("\n");
  return Status::ok();
}

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Train a model with tensortier placing every tensor on memory tiers"};
  add_training_flags(app, o);
  add_runtime_flags(app, o);
  CLI11_PARSE(app, argc, argv);
  // A line at a time even into a pipe or a file (tee, a log): progress shows as it happens.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (Status s = check_options(o); !s.is_ok()) return fail(s);
  spdlog::set_level(spdlog::level::warn);
  auto data = load_data(o);
  if (!data) return fail(data.status());
  const Dataset& train = data->train;
  const Dataset& test = data->test;
  const std::size_t total = o.steps > 0 ? o.steps
                                        : BatchIterator(train, o.batch, o.seed).batches_per_epoch() *
                                              static_cast<std::size_t>(o.epochs);
  if (!o.compare.empty()) {
    {  // the options checked first with a run of the policy, let go before the compared runs
      auto probe = make_run(o, o.policy, train);
      if (!probe) return fail(probe.status());
      if (Status s = check_policy_steps(o, *probe->rt, total); !s.is_ok()) return fail(s);
    }
    if (Status s = compare_policies(o, train); !s.is_ok()) return fail(s);
  }
  auto made = make_run(o, o.policy, train);
  if (!made) return fail(made.status());
  Run& run = made.value();
  Runtime& rt = *run.rt;
  Engine& engine = *run.engine;
  Network& net = *run.net;
  if (!o.trace.empty()) {
    run.timeline = std::make_unique<TimelineRecorder>(o.trace_from - 1, o.trace_steps,
                                                      fmt::format("tensortier-train {}", o.model));
    if (Status s = rt.add_observer(run.timeline.get()); !s.is_ok()) return fail(s);
  }
  std::unique_ptr<TimelineRecorder>& timeline = run.timeline;
  if (Status s = check_policy_steps(o, rt, total); !s.is_ok()) return fail(s);
  fmt::print("model {} ({} parameters), data {} ({} train / {} test, {}x{}x{}), batch {}, {} steps\n",
             net.name(), net.parameter_count(), o.data, train.count(), test.count(), train.channels,
             train.height, train.width, o.batch, total);
  fmt::print("tiers ({}): {}\n", rt.spec_source(), rt.spec());
  for (TierIndex t = 0; t < rt.tier_count(); ++t) {  // every figure on an emulated tier names it
    if (const CostModel* cost = rt.tier(t).cost_model(); cost != nullptr)
      fmt::print("  tier '{}' is emulated: {}; {}\n", rt.tier(t).name(), cost->describe(), cost->reference());
  }
  const auto start = std::chrono::steady_clock::now();
  if (auto steps = train_steps(run, o, total, /*show=*/true); !steps) return fail(steps.status());
  fmt::print("trained in {:.1f} s\n", ms_since(start) / 1000.0);
  if (const migrator::Plan* plan = rt.plan(); plan != nullptr) {
    const RuntimeStats stats = rt.stats();
    fmt::print(
        "policy {}: fast budget {}{}; over the run {} moves ({} in, {} out), {} dropped late, {} failed, "
        "{} keys not alive, {} steps of another kind run unplanned, mover CPU {:.1f} ms; layers waited "
        "{:.1f} "
        "ms for {} moves\n",
        plan->policy, format_bytes(plan->fast_budget_bytes),
        (plan->interval_layers != 0 ? fmt::format(", interval {} layers", plan->interval_layers) : "") +
            (plan->variant.empty() ? "" : fmt::format(" ({})", plan->variant)),
        stats.migration.moves, format_bytes(stats.migration.bytes_in),
        format_bytes(stats.migration.bytes_out), stats.migration.late_dropped, stats.migration.failed_moves,
        stats.migration.missing, stats.migration.off_plan_steps,
        static_cast<double>(stats.migration.mover_cpu_ns) / 1e6,
        static_cast<double>(stats.move_wait_ns) / 1e6, stats.late_moves);
    fmt::print("  {}\n", rt.copy_threads_note());
    if (!rt.replan_result().empty()) fmt::print("  {}\n", rt.replan_result());
    if (!rt.trial_result().empty()) fmt::print("  {}\n", rt.trial_result());
    if (!stats.migration.last_failure.empty())
      fmt::print("  the last failed move: {}\n", stats.migration.last_failure);
  }
  // Asked for and never run: one line that says why, and the exit status says so.
  const bool policy_never_ran = !o.policy.empty() && rt.plan() == nullptr;
  if (policy_never_ran) {
    fmt::print("{}\n",
               !rt.policy_failure().empty()
                   ? rt.policy_failure()
                   : fmt::format("policy '{}' never ran: no step of the {} was profiled", o.policy, total));
  }
  if (timeline != nullptr) {
    rt.remove_observer(timeline.get());
    if (timeline->steps_recorded() == 0) {
      fmt::print("trace: step {} never ran ({} steps): nothing written to {}\n", o.trace_from, total,
                 o.trace);
    } else if (Status s = timeline->write(o.trace); !s.is_ok()) {
      return fail(s);
    } else {
      fmt::print(
          "trace of {} step(s) from step {} written to {} (open in ui.perfetto.dev, or "
          "tools/plot_timeline.py {} out.png)\n",
          timeline->steps_recorded(), o.trace_from, o.trace, o.trace);
    }
  }
  // The training step's profile (before the test steps, which are another kind of step).
  if (auto profile = rt.profile()) {
    print_profile(*profile);
    if (!o.profile_json.empty() && rt.profile_json_status().is_ok())
      fmt::print("  written to {}\n", rt.profile_json_path());
  }

  BatchIterator test_batches(test, o.batch, o.seed, /*shuffle=*/false);
  Batch batch;
  std::size_t test_correct = 0, test_seen = 0;
  double test_loss = 0;
  for (std::size_t b = 0; b < test_batches.batches_per_epoch(); ++b) {
    if (Status s = test_batches.next(engine, batch); !s.is_ok()) return fail(s);
    if (Status s = rt.step_begin(); !s.is_ok()) return fail(s);  // an inference step
    auto r = net.evaluate(engine, batch);
    if (Status s = rt.step_end(); !s.is_ok()) return fail(s);
    if (!r) return fail(r.status());
    test_correct += r->correct;
    test_seen += r->count;
    test_loss += r->loss * static_cast<double>(r->count);
  }
  fmt::print("test accuracy {:.2f}% ({} / {} samples; loss {:.4f})\n",
             100.0 * static_cast<double>(test_correct) / static_cast<double>(test_seen), test_correct,
             test_seen, test_loss / static_cast<double>(test_seen));
  for (const auto& u : rt.stats().tiers) {
    fmt::print("tier {}: peak {} of {} budget, {} objects fell back to a slower tier\n", u.name,
               format_bytes(u.peak_mapped_bytes), format_bytes(u.budget_bytes), u.fallbacks_out);
  }
  if (policy_never_ran) return 1;
  // Asked for and not written: the run's results are above, and the exit status says it failed.
  if (!o.profile_json.empty() && !rt.profile_json_status().is_ok()) return fail(rt.profile_json_status());
  if (!o.profile_json.empty() && rt.profile_json_path().empty()) {
    return fail(failed_precondition(
        fmt::format("--profile-json {}: no step was profiled, so nothing was written", o.profile_json)));
  }
  return 0;
}
