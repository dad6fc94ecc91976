// tensortier-demo: the README's main command until the training engine lands (issue: dnn/).
//
// Runs a few "training steps" of a CNN-shaped workload through the runtime: weights, gradients
// and optimizer state live across steps; activations are born in the forward pass and die in
// the backward pass; every layer writes its outputs (so pages are really touched) and is marked
// with the objects it reads and writes. It prints where each large object was placed, the use of
// each tier's budget, page faults per step, and what the emulated slow tier would charge for this
// placement. Placement is first-touch (fast tier until its budget is full): the profiler and
// migrator issues add the policies that beat it.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "tensortier/cli/runtime_flags.h"
#include "tensortier/runtime.h"

namespace {

using tensortier::GroupId;
using tensortier::ObjectInfo;

// Lifetime classes: small objects of one class share pages.
constexpr GroupId kWeights = 1, kGradients = 2, kMomentum = 3, kActivations = 4, kScratch = 5;

struct LayerShape {
  std::string name;
  std::size_t weight_bytes;       // 0: no weights (pooling, loss)
  std::size_t param_small_bytes;  // bias / batch-norm scale and shift
  std::size_t output_bytes;       // activation kept for backward
};

// ResNet-18 / VGG-11 convolution stacks on CIFAR-sized input (32x32x3), fp32.
std::vector<LayerShape> workload(const std::string& model, std::size_t batch) {
  struct Conv {
    std::size_t in_c, out_c, hw;
  };
  std::vector<Conv> convs;
  if (model == "resnet18") {
    convs.push_back({3, 64, 32});
    const std::size_t widths[] = {64, 128, 256, 512};
    std::size_t in_c = 64, hw = 32;
    for (std::size_t stage = 0; stage < 4; ++stage) {
      if (stage > 0) hw /= 2;
      for (int i = 0; i < 4; ++i) {
        convs.push_back({in_c, widths[stage], hw});
        in_c = widths[stage];
      }
    }
  } else {  // vgg11
    const std::size_t cfg[][2] = {{64, 32}, {128, 16}, {256, 8}, {256, 8},
                                  {512, 4}, {512, 4},  {512, 2}, {512, 2}};
    std::size_t in_c = 3;
    for (auto& c : cfg) {
      convs.push_back({in_c, c[0], c[1]});
      in_c = c[0];
    }
  }
  std::vector<LayerShape> layers;
  int index = 0;
  for (const Conv& c : convs) {
    layers.push_back({fmt::format("conv{}", ++index), c.out_c * c.in_c * 9 * 4, 2 * c.out_c * 4,
                      batch * c.out_c * c.hw * c.hw * 4});
  }
  layers.push_back({"fc", 512 * 10 * 4, 10 * 4, batch * 10 * 4});
  return layers;
}

long page_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt + usage.ru_majflt;
}

int fail(const tensortier::Status& status) {
  fmt::print(stderr, "tensortier-demo: {}\n", status.to_string());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tensortier demo: place a CNN training workload's tensors across memory tiers"};
  std::string model = "resnet18";
  std::size_t batch = 32;
  int steps = 3;
  double fast_fraction = 0.2;
  std::string tiers;
  std::size_t top = 12;
  app.add_option("--model", model, "Workload shape")
      ->check(CLI::IsMember({"resnet18", "vgg11"}))
      ->capture_default_str();
  app.add_option("--batch", batch, "Batch size")->check(CLI::Range(1, 4096))->capture_default_str();
  app.add_option("--steps", steps, "Training steps to run")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--fast-fraction", fast_fraction,
                 "Without --tiers/TENSORTIER_TIERS: fast-tier budget as a fraction of the peak footprint "
                 "(the slow tier is emulated Optane)")
      ->check(CLI::Range(0.01, 1.0))
      ->capture_default_str();
  tensortier::cli::add_tiers_flag(app, tiers,
                                  "default: TENSORTIER_TIERS, else a DRAM tier and an emulated Optane tier");
  app.add_option("--top", top, "Largest objects to list")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  const std::vector<LayerShape> layers = workload(model, batch);
  std::size_t persistent_bytes = 0, activation_bytes = 0;
  for (const auto& l : layers) {
    persistent_bytes += 3 * (l.weight_bytes + l.param_small_bytes);  // weights, grads, momentum
    activation_bytes += l.output_bytes;
  }
  const std::size_t input_bytes = batch * 3 * 32 * 32 * 4;
  const std::size_t peak_bytes = persistent_bytes + activation_bytes + input_bytes;
  if (tiers.empty() && std::getenv("TENSORTIER_TIERS") == nullptr) {
    const auto fast = static_cast<std::size_t>(static_cast<double>(peak_bytes) * fast_fraction);
    tiers = fmt::format("fast=dram:{}KiB,slow=emulated:optane:{}KiB", std::max<std::size_t>(fast / 1024, 64),
                        2 * peak_bytes / 1024 + 65536);
  }
  fmt::print("tensortier demo: {}-shaped workload, input 32x32x3, batch {}, {} steps\n", model, batch, steps);
  fmt::print("peak footprint (computed): {} ({} persistent, {} activations)\n",
             tensortier::format_bytes(peak_bytes), tensortier::format_bytes(persistent_bytes),
             tensortier::format_bytes(activation_bytes + input_bytes));
  spdlog::set_level(spdlog::level::warn);  // the demo prints its own summary of the tiers
  auto created = tensortier::Runtime::create({tiers});
  if (!created) return fail(created.status());
  tensortier::Runtime& rt = *created.value();
  fmt::print("tiers ({}): {}\n", rt.spec_source(), rt.spec());
  for (tensortier::TierIndex t = 0; t < rt.tier_count(); ++t) fmt::print("  {}\n", rt.tier(t).describe());

  // Persistent state: weights, gradients, momentum per layer.
  struct Params {
    ObjectInfo weight, grad, momentum, small_weight, small_grad, small_momentum;
  };
  std::vector<Params> params;
  std::vector<ObjectInfo> placed;  // every object alive at the peak, for the listing
  auto alloc = [&](const std::string& name, std::size_t bytes,
                   GroupId group) -> tensortier::Result<ObjectInfo> {
    auto info = rt.allocate(name, bytes, group);
    if (info) std::memset(info->address, 0, bytes);  // first use writes it
    return info;
  };
  for (const auto& l : layers) {
    Params p;
    for (auto [slot, suffix, group] :
         {std::tuple{&p.weight, "weight", kWeights}, std::tuple{&p.grad, "grad", kGradients},
          std::tuple{&p.momentum, "momentum", kMomentum}}) {
      auto info = alloc(l.name + "." + suffix, l.weight_bytes, group);
      if (!info) return fail(info.status());
      *slot = info.value();
    }
    for (auto [slot, suffix, group] :
         {std::tuple{&p.small_weight, "bias", kWeights}, std::tuple{&p.small_grad, "bias_grad", kGradients},
          std::tuple{&p.small_momentum, "bias_momentum", kMomentum}}) {
      auto info = alloc(l.name + "." + suffix, l.param_small_bytes, group);
      if (!info) return fail(info.status());
      *slot = info.value();
    }
    params.push_back(p);
  }

  // Bytes each layer reads and writes per tier, for the emulated charge estimate.
  std::vector<std::uint64_t> slow_read(rt.tier_count()), slow_written(rt.tier_count());
  auto account = [&](const ObjectInfo& o, bool write) {
    (write ? slow_written : slow_read)[o.tier] += o.bytes;
  };

  fmt::print("\n{:>5} {:>9} {:>12} {:>12} {:>10}\n", "step", "objects", "peak live", "page faults", "time");
  for (int step = 1; step <= steps; ++step) {
    std::fill(slow_read.begin(), slow_read.end(), 0);
    std::fill(slow_written.begin(), slow_written.end(), 0);
    const long faults_before = page_faults();
    const auto start = std::chrono::steady_clock::now();
    if (auto s = rt.step_begin(); !s.is_ok()) return fail(s);
    auto input = alloc("input", input_bytes, kActivations);
    if (!input) return fail(input.status());
    std::vector<ObjectInfo> acts{input.value()};
    // Forward: each layer reads the previous activation and its weights, writes its output.
    for (std::size_t i = 0; i < layers.size(); ++i) {
      auto out = rt.allocate(layers[i].name + ".out", layers[i].output_bytes, kActivations);
      if (!out) return fail(out.status());
      const void* reads[] = {acts.back().address, params[i].weight.address, params[i].small_weight.address};
      const void* writes[] = {out->address};
      if (auto s = rt.layer_begin(layers[i].name + ".fwd", reads, writes); !s.is_ok()) return fail(s);
      std::memset(out->address, 1, out->bytes);
      if (auto s = rt.layer_end(); !s.is_ok()) return fail(s);
      account(acts.back(), false);
      account(params[i].weight, false);
      account(out.value(), true);
      acts.push_back(out.value());
    }
    if (step == 1) {
      placed = acts;
      for (const auto& p : params) placed.insert(placed.end(), {p.weight, p.grad, p.momentum});
    }
    const std::uint64_t peak_live = [&] {
      std::uint64_t sum = 0;
      for (const auto& u : rt.stats().tiers) sum += u.live_bytes;
      return sum;
    }();
    // Backward: gradients flow back; each layer frees its output once used; SGD updates weights.
    for (std::size_t i = layers.size(); i-- > 0;) {
      auto scratch = rt.allocate(layers[i].name + ".grad_in", acts[i].bytes, kScratch);
      if (!scratch) return fail(scratch.status());
      const void* reads[] = {acts[i + 1].address, acts[i].address, params[i].weight.address};
      const void* writes[] = {scratch->address, params[i].grad.address, params[i].momentum.address};
      if (auto s = rt.layer_begin(layers[i].name + ".bwd", reads, writes); !s.is_ok()) return fail(s);
      std::memset(scratch->address, 2, scratch->bytes);
      std::memset(params[i].grad.address, 3, params[i].grad.bytes);
      std::memset(params[i].momentum.address, 4, params[i].momentum.bytes);
      std::memset(params[i].weight.address, 5, params[i].weight.bytes);
      if (auto s = rt.layer_end(); !s.is_ok()) return fail(s);
      for (const auto* o : {&acts[i + 1], &acts[i], &params[i].weight}) account(*o, false);
      for (const auto* o : {&scratch.value(), &params[i].grad, &params[i].momentum, &params[i].weight})
        account(*o, true);
      if (auto s = rt.free(acts[i + 1].address); !s.is_ok()) return fail(s);
      if (auto s = rt.free(scratch->address); !s.is_ok()) return fail(s);
    }
    if (auto s = rt.free(acts[0].address); !s.is_ok()) return fail(s);
    if (auto s = rt.step_end(); !s.is_ok()) return fail(s);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    fmt::print("{:>5} {:>9} {:>12} {:>12} {:>8.1f}ms\n", step, rt.last_step_layers().size(),
               tensortier::format_bytes(peak_live), page_faults() - faults_before, ms);
  }

  std::sort(placed.begin(), placed.end(),
            [](const ObjectInfo& a, const ObjectInfo& b) { return a.bytes > b.bytes; });
  fmt::print("\nplacement of the {} largest objects (first-touch: fast tier until its budget is full)\n",
             std::min(top, placed.size()));
  fmt::print("  {:<18} {:>10} {:>6}\n", "object", "size", "tier");
  for (std::size_t i = 0; i < std::min(top, placed.size()); ++i) {
    fmt::print("  {:<18} {:>10} {:>6}\n", placed[i].name, tensortier::format_bytes(placed[i].bytes),
               rt.tier(placed[i].tier).name());
  }
  fmt::print("\n  {:<6} {:>10} {:>12} {:>12} {:>10} {:>10}\n", "tier", "budget", "peak mapped", "live now",
             "fell back", "reused");
  for (const auto& u : rt.stats().tiers) {
    fmt::print("  {:<6} {:>10} {:>12} {:>12} {:>10} {:>10}\n", u.name,
               tensortier::format_bytes(u.budget_bytes), tensortier::format_bytes(u.peak_mapped_bytes),
               tensortier::format_bytes(u.live_bytes), u.fallbacks_out, u.reused_ranges);
  }
  fmt::print(
      "  (fell back: objects that preferred the tier and went to a slower one; reused: ranges served "
      "from the tier's cache)\n");
  for (tensortier::TierIndex t = 0; t < rt.tier_count(); ++t) {
    if (const auto* model_cost = rt.tier(t).cost_model()) {
      fmt::print(
          "\nemulated ({} preset): this placement would cost {:.1f} ms more per step on tier '{}' "
          "({} read, {} written there per step)\n",
          model_cost->preset().name,
          static_cast<double>(model_cost->layer_charge_ns(slow_read[t], slow_written[t])) / 1e6,
          rt.tier(t).name(), tensortier::format_bytes(slow_read[t]),
          tensortier::format_bytes(slow_written[t]));
    }
  }
  return 0;
}
