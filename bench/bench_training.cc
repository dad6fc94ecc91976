// bench_training: step time of a model on the dnn engine, through the runtime and, side by side
// in the same process, with plain aligned allocation (the runtime's own cost); page faults per
// steady-state step. Steps of the two alternate so that machine noise hits both alike.
// Prints one JSON line per mode (for bench/compare_pytorch.sh) after a table.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "stats.h"
#include "tensortier/dnn/data.h"
#include "tensortier/dnn/models.h"

namespace {

using namespace tensortier;
using namespace tensortier::dnn;
using tensortier::bench::median;

long page_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt + usage.ru_majflt;
}

struct Run {
  std::string mode;
  Engine engine;
  std::unique_ptr<Network> net;
  Batch batch;
  std::vector<double> step_ms;
  std::vector<double> faults;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Step time of the dnn engine: through the runtime vs plain allocation"};
  std::string model = "resnet18", tiers = "fast=dram:8GiB";
  int batch = 32, steps = 10, warmup = 3, size = 32;
  app.add_option("--model", model, "Model")->capture_default_str();
  app.add_option("--batch", batch, "Batch size")->capture_default_str();
  app.add_option("--image-size", size, "Input height and width (3 channels)")->capture_default_str();
  app.add_option("--steps", steps, "Measured steps per mode")->capture_default_str();
  app.add_option("--warmup", warmup, "Unmeasured steps first")->capture_default_str();
  app.add_option("--tiers", tiers, "Tier spec of the runtime mode")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);

  auto rt = Runtime::create({tiers});
  if (!rt) {
    fmt::print(stderr, "bench_training: {}\n", rt.status().to_string());
    return 1;
  }
  const dnnl::memory::dims input{batch, 3, size, size};
  const Dataset data = synthetic_dataset(static_cast<std::size_t>(batch) * 4, 3, size, size, 10, 1);
  std::vector<Run> runs;
  runs.push_back(Run{"runtime", Engine(*rt.value()), nullptr, {}, {}, {}});
  runs.push_back(Run{"plain", Engine::without_runtime(), nullptr, {}, {}, {}});
  for (Run& r : runs) {
    auto net = make_model(model, {10, 64});
    if (!net) return fmt::print(stderr, "{}\n", net.status().to_string()), 1;
    r.net = std::move(net).value();
    if (Status s = r.net->build(r.engine, input, 1); !s.is_ok())
      return fmt::print(stderr, "{}\n", s.to_string()), 1;
  }
  BatchIterator it_runtime(data, static_cast<std::size_t>(batch), 1),
      it_plain(data, static_cast<std::size_t>(batch), 1);
  const SgdOptions sgd{0.01F, 0.9F, 5e-4F};
  for (int step = 0; step < warmup + steps; ++step) {
    for (Run& r : runs) {
      const bool marked = r.engine.runtime() != nullptr;
      if (!(marked ? it_runtime : it_plain).next(r.engine, r.batch).is_ok()) return 1;
      const long f0 = page_faults();
      const auto t0 = std::chrono::steady_clock::now();
      if (marked) (void)rt.value()->step_begin();
      auto result = r.net->train_step(r.engine, r.batch, sgd);
      if (marked) (void)rt.value()->step_end();
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (!result) return fmt::print(stderr, "{}\n", result.status().to_string()), 1;
      if (step >= warmup) {
        r.step_ms.push_back(ms);
        r.faults.push_back(static_cast<double>(page_faults() - f0));
      }
    }
  }
  fmt::print("{} batch {} input {}x{}x3, {} steps after {} warm-up, modes alternating\n", model, batch, size,
             size, steps, warmup);
  fmt::print("{:<8} {:>16} {:>22}\n", "mode", "median ms/step", "median faults/step");
  for (const Run& r : runs)
    fmt::print("{:<8} {:>16.1f} {:>22.0f}\n", r.mode, median(r.step_ms), median(r.faults));
  fmt::print("runtime / plain step time: {:.3f}\n", median(runs[0].step_ms) / median(runs[1].step_ms));
  for (const Run& r : runs) {
    fmt::print(
        "JSON {{\"model\": \"{}\", \"mode\": \"{}\", \"median_ms\": {:.3f}, \"median_faults\": {:.0f}}}\n",
        model, r.mode, median(r.step_ms), median(r.faults));
  }
  return 0;
}
