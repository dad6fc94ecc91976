// bench_profile: what profiling a step costs. One model in one process: normal steps alternate
// with profiled steps at 2 MiB and at 4 KiB granularity, and at 2 MiB with writes told by
// userfaultfd WP_ASYNC (each profiled step asked for with Runtime::request_profile), so machine
// noise hits all alike; medians per kind, the profiled /
// normal ratio, and the faults a profiled step takes. Prints a table, then one JSON line per kind.
#include <algorithm>
#include <chrono>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "stats.h"
#include "tensortier/cli/runtime_flags.h"
#include "tensortier/dnn/data.h"
#include "tensortier/dnn/models.h"

namespace {

using namespace tensortier;
using namespace tensortier::dnn;
using tensortier::bench::median;

struct Kind {
  std::string name;
  std::size_t granularity_bytes = 0;  // 0: not profiled
  bool async_writes = false;          // writes told by userfaultfd WP_ASYNC
  int repetitions = 0;
  std::vector<double> step_ms;
  std::vector<double> faults;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Profiled step time / normal step time, at 2 MiB and 4 KiB granularity"};
  std::string model = "resnet18", tiers = "fast=dram:8GiB";
  int batch = 32, size = 32, width = 64, reps = 5, reps_4k = 3, warmup = 2;
  app.add_option("--model", model, "Model")->capture_default_str();
  app.add_option("--batch", batch, "Batch size")->capture_default_str();
  app.add_option("--image-size", size, "Input height and width (3 channels)")->capture_default_str();
  app.add_option("--width", width, "Channels of the first stage")->capture_default_str();
  app.add_option("--reps", reps, "Normal and 2 MiB-profiled steps measured")->capture_default_str();
  app.add_option("--reps-4k", reps_4k, "4 KiB-profiled steps measured (they are slow)")
      ->capture_default_str();
  app.add_option("--warmup", warmup, "Unmeasured steps first")->capture_default_str();
  cli::add_tiers_flag(app, tiers, "the runtime's tiers")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);

  RuntimeOptions options(tiers);
  options.profile.enabled = false;  // profiled steps are asked for one by one
  auto rt = Runtime::create(options);
  if (!rt) return fmt::print(stderr, "bench_profile: {}\n", rt.status().to_string()), 1;
  Engine engine(*rt.value());
  auto net = make_model(model, {10, width});
  if (!net) return fmt::print(stderr, "{}\n", net.status().to_string()), 1;
  const dnnl::memory::dims input{batch, 3, size, size};
  if (Status s = net.value()->build(engine, input, 1); !s.is_ok())
    return fmt::print(stderr, "{}\n", s.to_string()), 1;
  const Dataset data = synthetic_dataset(static_cast<std::size_t>(batch) * 4, 3, size, size, 10, 1);
  BatchIterator it(data, static_cast<std::size_t>(batch), 1);
  Batch b;
  const SgdOptions sgd{0.01F, 0.9F, 5e-4F};

  auto step = [&](Kind* kind) -> Status {
    TENSORTIER_RETURN_IF_ERROR(it.next(engine, b));
    if (kind != nullptr && kind->granularity_bytes != 0) {
      profiler::ProfileOptions p = rt.value()->profile_options();
      p.granularity_bytes = kind->granularity_bytes;
      p.async_writes = kind->async_writes;
      TENSORTIER_RETURN_IF_ERROR(rt.value()->set_profile_options(p));
      rt.value()->request_profile();
    }
    const auto t0 = std::chrono::steady_clock::now();
    TENSORTIER_RETURN_IF_ERROR(rt.value()->step_begin());
    auto r = net.value()->train_step(engine, b, sgd);
    TENSORTIER_RETURN_IF_ERROR(rt.value()->step_end());
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!r) return r.status();
    if (kind != nullptr) {
      kind->step_ms.push_back(ms);
      kind->faults.push_back(kind->granularity_bytes != 0 ? static_cast<double>(rt.value()->profile()->faults)
                                                          : 0.0);
    }
    return Status::ok();
  };

  std::vector<Kind> kinds{{"normal", 0, false, reps, {}, {}},
                          {"profiled 2MiB", profiler::kHugePageBytes, false, reps, {}, {}},
                          {"profiled 4KiB", profiler::kSmallPageBytes, false, reps_4k, {}, {}},
                          {"2MiB uffd", profiler::kHugePageBytes, true, reps, {}, {}}};
  for (int i = 0; i < warmup; ++i) {
    if (Status s = step(nullptr); !s.is_ok()) return fmt::print(stderr, "{}\n", s.to_string()), 1;
  }
  for (int round = 0; round < reps; ++round) {
    for (std::size_t k = 1; k < kinds.size(); ++k) {
      if (round >= kinds[k].repetitions) continue;
      // A normal step right before each profiled one: the ratio compares neighbours.
      if (Status s = step(&kinds[0]); !s.is_ok()) return fmt::print(stderr, "{}\n", s.to_string()), 1;
      if (Status s = step(&kinds[k]); !s.is_ok()) return fmt::print(stderr, "{}\n", s.to_string()), 1;
    }
  }
  const double normal = median(kinds[0].step_ms);
  fmt::print("{} batch {} input {}x{}x3 width {}; medians; counters: {}; last profile's writes: {}\n", model,
             batch, size, size, width, rt.value()->profile() ? rt.value()->profile()->counter_source : "-",
             rt.value()->profile() ? rt.value()->profile()->write_tracking : "-");
  fmt::print("{:<14} {:>6} {:>12} {:>18} {:>16}\n", "step", "steps", "ms/step", "vs normal step",
             "faults/step");
  for (const Kind& k : kinds) {
    fmt::print("{:<14} {:>6} {:>12.1f} {:>18.2f} {:>16.0f}\n", k.name, k.step_ms.size(), median(k.step_ms),
               median(k.step_ms) / normal, median(k.faults));
  }
  for (const Kind& k : kinds) {
    fmt::print(
        "JSON {{\"model\": \"{}\", \"batch\": {}, \"step\": \"{}\", \"median_ms\": {:.3f}, \"ratio\": "
        "{:.3f}, "
        "\"median_faults\": {:.0f}}}\n",
        model, batch, k.name, median(k.step_ms), median(k.step_ms) / normal, median(k.faults));
  }
  return 0;
}
