// The training engine: gradients against finite differences, results independent of tiers,
// layer marks that name the right objects, bad input, and LeNet-5 on Fashion-MNIST.
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <string_view>

#include <gtest/gtest.h>

#include "tensortier/dnn/data.h"
#include "tensortier/dnn/models.h"
#include "tensortier/profiler/step_profile.h"
#include "test_util.h"

namespace tensortier::dnn {
namespace {

struct Fixture {
  std::unique_ptr<Runtime> rt;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<Network> net;
  Dataset data;
  Batch batch;
};

// A built model, its data set and one loaded batch.
Fixture make(std::unique_ptr<Network> net, const std::string& spec, dnnl::memory::dims input, int classes,
             std::size_t samples = 0, const MemoryOptions& memory = {}, bool junk_fill = false) {
  Fixture f;
  auto rt = Runtime::create({spec});
  EXPECT_TRUE(rt) << rt.status().to_string();
  f.rt = std::move(rt).value();
  f.engine = std::make_unique<Engine>(*f.rt);
  f.engine->set_memory_options(memory);
  f.engine->set_junk_fill(junk_fill);
  f.net = std::move(net);
  const Status built = f.net->build(*f.engine, input, /*seed=*/42);
  EXPECT_TRUE(built.is_ok()) << built.to_string();
  f.data = synthetic_dataset(samples > 0 ? samples : static_cast<std::size_t>(input[0]),
                             static_cast<int>(input[1]), static_cast<int>(input[2]),
                             static_cast<int>(input[3]), classes, 7);
  BatchIterator it(f.data, static_cast<std::size_t>(input[0]), 1, /*shuffle=*/false);
  EXPECT_TRUE(it.next(*f.engine, f.batch).is_ok());
  return f;
}

Fixture make(const std::string& model, const std::string& spec, dnnl::memory::dims input, int classes,
             int width, std::size_t samples = 0, const MemoryOptions& memory = {}, bool junk_fill = false) {
  auto net = make_model(model, {classes, width});
  EXPECT_TRUE(net) << net.status().to_string();
  return make(std::move(net).value(), spec, input, classes, samples, memory, junk_fill);
}

// conv (with and without bias), batch norm, residual add, average pooling (padded), global
// average pooling, linear: every layer without a kink, so finite differences are exact to
// float rounding.
std::unique_ptr<Network> smooth_residual() {
  auto n = std::make_unique<Network>("smooth_residual");
  int a = n->add(make_conv("stem", {4, 3, 1, 1, false}), {Network::kInput});
  a = n->add(make_batch_norm("stem.bn"), {a});
  int b = n->add(make_conv("branch", {4, 3, 1, 1, false}), {a});  // a bias before BN has no gradient
  b = n->add(make_batch_norm("branch.bn"), {b});
  const int sum = n->add(make_add("add"), {b, a});
  const int c = n->add(make_conv("head", {5, 3, 2, 1, true}), {sum});
  n->add(make_pool("pool", PoolKind::kAverage, 3, 2, 1), {c});
  const int g = n->add(make_global_avg_pool("gap"));
  n->add(make_linear("fc", 3), {g});
  return n;
}

Result<StepResult> gradients(Fixture& f) {
  EXPECT_TRUE(f.rt->step_begin().is_ok());
  auto r = f.net->compute_gradients(*f.engine, f.batch);
  EXPECT_TRUE(f.rt->step_end().is_ok());
  return r;
}

// Central finite differences of the loss against the analytic gradient, for a spread of
// elements of every parameter. Every parameter's gradient flows through the backward of every
// layer after it, so a wrong backward (data or weights) of any layer shows here.
//
// `kinked`: the network has ReLU or max pooling. An input of theirs that sits within the step of
// its kink makes that element's difference quotient straddle the kink (an error of ~1e-3 at any
// step size), so those networks are compared per parameter as a relative L2 error over the
// samples (a wrong backward is off by O(1)); smooth networks element by element.
void check_gradients(Fixture f, bool kinked) {
  ASSERT_TRUE(gradients(f));
  constexpr float kEps = 5e-4F;
  int checked = 0;
  for (auto& [name, p] : f.net->params()) {
    const std::vector<float> analytic(p->grad.data(), p->grad.data() + p->grad.elements());
    const std::size_t n = p->value.elements();
    double error_sq = 0, norm_sq = 0;
    for (std::size_t k = 0; k < std::min<std::size_t>(n, 8); ++k) {
      const std::size_t i = (k * 7919 + 13) % n;
      float& w = p->value.data()[i];
      const float saved = w;
      w = saved + kEps;
      const double up = gradients(f).value().loss;
      w = saved - kEps;
      const double down = gradients(f).value().loss;
      w = saved;
      const double numeric = (up - down) / (2.0 * kEps);
      error_sq += (numeric - analytic[i]) * (numeric - analytic[i]);
      norm_sq += numeric * numeric;
      if (!kinked) {
        EXPECT_NEAR(analytic[i], numeric, 3e-4 + 3e-3 * std::abs(numeric)) << name << "[" << i << "]";
      }
    }
    const double relative = std::sqrt(error_sq) / std::max(std::sqrt(norm_sq), 1e-3);
    EXPECT_LT(relative, kinked ? 0.05 : 0.005)
        << f.net->name() << ": gradient of " << name << " is off by " << relative * 100 << "% (L2)";
    ++checked;
  }
  EXPECT_GE(checked, 3);
}

TEST(GradientCheck, ConvBatchNormResidualAddAveragePoolLinear) {
  check_gradients(make(smooth_residual(), "fast=dram:1GiB", {4, 2, 6, 6}, 3), /*kinked=*/false);
}
TEST(GradientCheck, ReluAndMaxPool) {
  check_gradients(make("small_cnn", "fast=dram:1GiB", {4, 2, 8, 8}, 3, 4, 0, {.in_place = false}), true);
}
TEST(GradientCheck, InPlaceRelu) {  // each ReLU writes over its convolution's output
  check_gradients(make("small_cnn", "fast=dram:1GiB", {4, 2, 8, 8}, 3, 4, 0, {.in_place = true}), true);
}
TEST(GradientCheck, InPlaceResidualAdd) {  // the add writes over the branch's batch-norm output
  check_gradients(make(smooth_residual(), "fast=dram:1GiB", {4, 2, 6, 6}, 3, 0, {.in_place = true}), false);
}
// conv -> batch norm -> ReLU twice, the batch norms applying their ReLUs (fuse_norm_relu).
TEST(GradientCheck, BatchNormFusedWithRelu) {
  auto n = std::make_unique<Network>("bn_relu");
  n->add(make_conv("conv1", {4, 3, 1, 1, false}), {Network::kInput});
  n->add(make_batch_norm("conv1.bn"));
  n->add(make_relu("conv1.relu"));
  n->add(make_conv("conv2", {6, 3, 2, 1, false}));
  n->add(make_batch_norm("conv2.bn"));
  n->add(make_relu("conv2.relu"));
  n->add(make_global_avg_pool("gap"));
  n->add(make_linear("fc", 3));
  Fixture f = make(std::move(n), "fast=dram:1GiB", {4, 2, 8, 8}, 3, 0, {.fuse_batch_norm_relu = true});
  ASSERT_TRUE(gradients(f));
  std::size_t relu_layers = 0;
  for (const LayerRecord& l : f.rt->last_step_layers())
    relu_layers += l.name.find("relu") != std::string::npos;
  EXPECT_EQ(relu_layers, 0u) << "the ReLUs run inside their batch norms";
  check_gradients(std::move(f), true);
}
TEST(GradientCheck, MlpOnImages) {
  check_gradients(make("mlp", "fast=dram:1GiB", {4, 1, 4, 4}, 3, 4), true);
}

// What train_steps() returns: every loss, and every parameter after the last step (in
// Network::params() order).
struct Trained {
  std::vector<double> losses;
  std::vector<float> params;
};

// Trains `steps` steps of f's data set in batches of `batch` (the runtime profiling step
// `profile_step`, if any).
Trained train_steps(Fixture& f, std::size_t batch, int steps, const SgdOptions& sgd, int profile_step = -1) {
  BatchIterator it(f.data, batch, 3);
  Trained out;
  for (int step = 0; step < steps; ++step) {
    EXPECT_TRUE(it.next(*f.engine, f.batch).is_ok());
    if (step == profile_step) f.rt->request_profile();
    EXPECT_TRUE(f.rt->step_begin().is_ok());
    auto r = f.net->train_step(*f.engine, f.batch, sgd);
    EXPECT_TRUE(r) << r.status().to_string();
    EXPECT_TRUE(f.rt->step_end().is_ok());
    out.losses.push_back(r ? r->loss : -1);
  }
  for (auto& [name, p] : f.net->params())
    out.params.insert(out.params.end(), p->value.data(), p->value.data() + p->value.elements());
  return out;
}

std::pair<std::vector<double>, std::vector<float>> train(const std::string& spec) {
  Fixture f = make("resblock", spec, {8, 3, 8, 8}, 4, 8, 64);
  Trained t = train_steps(f, 8, 4, {0.1F, 0.9F, 1e-4F});
  return {t.losses, t.params};
}

// `a` is `b` to float rounding: every loss within 1e-6 relative, every parameter within 1e-5
// relative (over a floor of 1e-3 for parameters near 0).
void expect_agree_to_rounding(const Trained& a, const Trained& b) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (std::size_t i = 0; i < b.losses.size(); ++i)
    EXPECT_NEAR(a.losses[i], b.losses[i], 1e-6 * std::abs(b.losses[i])) << "loss " << i;
  ASSERT_EQ(a.params.size(), b.params.size());
  double worst = 0;
  for (std::size_t i = 0; i < b.params.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(a.params[i]) - b.params[i]) /
                                (1e-3 + std::abs(static_cast<double>(b.params[i]))));
  }
  EXPECT_LT(worst, 1e-5) << "parameters after " << b.losses.size() << " steps";
}

TEST(Training, ResultsDoNotDependOnWhereTensorsLive) {
  const auto fast_only = train("fast=dram:1GiB");
  const auto mixed = train("fast=dram:64KiB,slow=emulated:optane:1GiB");  // most objects fall back
  const auto numa = train("fast=numa:0:1GiB");
  EXPECT_EQ(fast_only.first, mixed.first);  // bit-identical
  EXPECT_EQ(fast_only.second, mixed.second);
  EXPECT_EQ(fast_only.first, numa.first);
  EXPECT_LT(fast_only.first.back(), fast_only.first.front());  // and it learns
}

// Every tensor the engine does not zero (forward outputs, parameter gradients, scratchpads,
// workspaces) filled with NaN bytes first (Engine::set_junk_fill): the same losses and parameters
// to the bit, with every memory option on and with none, so no layer reads bytes it did not write.
TEST(Training, NoLayerReadsBytesItDidNotWrite) {
  struct Case {
    const char* model;
    dnnl::memory::dims input;
  };
  for (const Case& c : {Case{"resnet18", {4, 3, 16, 16}}, Case{"vgg11_bn", {4, 3, 32, 32}},
                        Case{"lenet5", {4, 1, 28, 28}}, Case{"mlp", {4, 1, 4, 4}}}) {
    for (const MemoryOptions& memory : {MemoryOptions{}, MemoryOptions::none()}) {
      SCOPED_TRACE(std::string(c.model) + (memory.in_place ? ", memory options on" : ", memory options off"));
      auto run = [&](bool junk) {
        Fixture f = make(c.model, "fast=dram:1GiB", c.input, 3, 8, 8, memory, junk);
        return train_steps(f, 4, 2, {0.05F, 0.9F, 1e-4F});
      };
      const Trained plain = run(false);
      const Trained junk = run(true);
      EXPECT_EQ(junk.losses, plain.losses);
      EXPECT_EQ(junk.params, plain.params);
      EXPECT_TRUE(std::ranges::all_of(plain.losses, [](double l) { return std::isfinite(l); }));
    }
  }
}

// ReLUs and residual adds in place (MemoryOptions::in_place): the same losses and parameters to the
// bit, with their outputs written over their first inputs' objects, so the step holds less.
TEST(Training, InPlaceLayersChangeNoResultAndHoldLess) {
  struct Run {
    std::vector<double> losses;
    std::vector<float> params;
    std::uint64_t peak_bytes = 0;
    std::uint64_t loss_live_bytes = 0;          // live at the loss layer of the profiled step
    std::size_t relus = 0, relus_in_place = 0;  // in the last step; in place: writes what it reads
    std::size_t adds = 0, adds_in_place = 0;
  };
  auto run = [](bool in_place) {
    Fixture f = make("resnet18", "fast=dram:1GiB", {6, 3, 16, 16}, 4, 8, 18,
                     {.in_place = in_place, .fuse_batch_norm_relu = false});
    Run r;
    Trained t = train_steps(f, 6, 3, {0.05F, 0.9F, 1e-4F});
    r.losses = t.losses;
    r.params = t.params;
    r.peak_bytes = f.rt->stats().peak_live_bytes;
    if (f.rt->profile() != nullptr) {
      for (const profiler::LayerProfile& l : f.rt->profile()->layers) {
        if (l.name == "loss") r.loss_live_bytes = l.live_bytes;
      }
    }
    for (const LayerRecord& l : f.rt->last_step_layers()) {
      if (l.name.ends_with("relu.fwd")) {
        ++r.relus;
        if (l.reads.size() == 1 && l.writes.size() == 1 && l.reads[0] == l.writes[0]) ++r.relus_in_place;
      } else if (l.name.ends_with("add.fwd")) {
        ++r.adds;
        if (l.reads.size() == 2 && l.writes.size() == 1 && l.reads[0] == l.writes[0]) ++r.adds_in_place;
      }
    }
    return r;
  };
  const Run apart = run(false), in_place = run(true);
  EXPECT_EQ(apart.losses, in_place.losses);  // bit-identical
  EXPECT_EQ(apart.params, in_place.params);
  EXPECT_LT(apart.losses.back(), apart.losses.front());
  EXPECT_EQ(apart.relus, 17u);  // the stem's and two in each of 8 blocks
  EXPECT_EQ(apart.relus_in_place, 0u);
  EXPECT_EQ(in_place.relus, 17u);
  EXPECT_EQ(in_place.relus_in_place, 17u);  // each reads the only output of a batch norm or an add
  EXPECT_EQ(apart.adds, 8u);
  EXPECT_EQ(apart.adds_in_place, 0u);
  EXPECT_EQ(in_place.adds_in_place, 8u);  // each over its branch's batch-norm output
  // At the loss every forward output kept for the backward pass is alive, and in place the ReLUs'
  // and adds' outputs are their inputs' objects: less is held there. The step's peak may be
  // elsewhere and is no higher (on an AVX-512 host oneDNN's backward convolutions set it, the
  // same both ways; on an AVX2 host it is at the loss).
  EXPECT_GT(in_place.loss_live_bytes, 0u) << "no profiled loss layer";
  EXPECT_LT(in_place.loss_live_bytes, apart.loss_live_bytes);
  EXPECT_LE(in_place.peak_bytes, apart.peak_bytes);
}

// One profiled training step of `model` (the second step: the first allocates what persists).
std::shared_ptr<const profiler::StepProfile> profiled_step(Fixture& f) {
  for (int step = 0; step < 2; ++step) {
    if (step == 1) f.rt->request_profile();
    EXPECT_TRUE(f.rt->step_begin().is_ok());
    EXPECT_TRUE(f.net->train_step(*f.engine, f.batch, {0.05F, 0.9F, 1e-4F}));
    EXPECT_TRUE(f.rt->step_end().is_ok());
  }
  return f.rt->profile();
}

// The position of the loss in a profiled step: forward layers come before it, backward after.
std::uint32_t loss_layer(const profiler::StepProfile& p) {
  for (const auto& l : p.layers) {
    if (l.name == "loss") return l.index;
  }
  ADD_FAILURE() << "no loss layer in the profiled step";
  return static_cast<std::uint32_t>(p.layers.size());
}

// Activations that no backward layer reads but that outlive the node of their last forward
// reader (a node's layers share its name: "add.src1_reorder", "add.fwd"; the loss reads the
// logits), in one profiled step.
std::vector<std::string> outliving_activations(const profiler::StepProfile& p) {
  const std::size_t loss = loss_layer(p);
  auto node_of = [&](std::size_t layer) {
    const std::string& name = p.layers[layer].name;
    return name.substr(0, name.rfind('.'));
  };
  std::vector<std::string> outliving;
  for (const auto& o : p.objects) {
    if (o.group != kActivations || !o.freed_at_layer) continue;
    std::optional<std::size_t> last_forward;
    bool backward_reads = false;
    for (const auto& l : p.layers) {
      if (std::find(l.declared_reads.begin(), l.declared_reads.end(), o.id) == l.declared_reads.end())
        continue;
      if (l.index <= loss) last_forward = l.index;
      backward_reads = backward_reads || l.index > loss;
    }
    if (backward_reads || !last_forward) continue;
    std::size_t next_node = *last_forward + 1;  // the first layer of the node after the reader's
    while (next_node < loss && node_of(next_node) == node_of(*last_forward)) ++next_node;
    if (*o.freed_at_layer > next_node) outliving.push_back(o.name);
  }
  return outliving;
}

// Autograd's lifetimes: a forward tensor no backward reads (a batch norm's output that only the
// residual add reads, the logits) dies after its last forward reader. Kept until its node's
// backward (as before), the same tensors are found outliving their readers: the check can fail.
TEST(Lifetimes, ForwardTensorsNoBackwardReadsDieAfterTheirLastReader) {
  auto check = [](const char* model, bool free_early) {
    Fixture f = make(model, "fast=dram:1GiB", {4, 3, 16, 16}, 4, 4, 8);
    f.net->set_free_after_last_reader(free_early);
    const auto profile = profiled_step(f);  // f's profiler is gone before the next one starts
    EXPECT_NE(profile, nullptr);
    return profile == nullptr ? std::pair<std::vector<std::string>, std::uint64_t>{{"no profile"}, 0}
                              : std::pair{outliving_activations(*profile), profile->peak_live_bytes};
  };
  for (const char* model : {"resnet18", "resnet50", "vgg11_bn"}) {
    SCOPED_TRACE(model);
    const auto [outliving, peak_bytes] = check(model, true);
    EXPECT_TRUE(outliving.empty()) << outliving.size() << " outlive their readers, e.g. "
                                   << outliving.front();
    const auto [kept, kept_peak_bytes] = check(model, false);
    EXPECT_FALSE(kept.empty());
    EXPECT_LT(peak_bytes, kept_peak_bytes);
  }
}

// In train_step a parameter's gradient is born for its layer's backward and dies with its SGD
// update right after it, so the gradients never all live at once.
TEST(Lifetimes, ParameterGradientsLiveFromTheirBackwardToTheirUpdate) {
  Fixture f = make("resnet18", "fast=dram:1GiB", {4, 3, 16, 16}, 4, 4, 8);
  const auto profile = profiled_step(f);
  ASSERT_NE(profile, nullptr);
  const std::uint32_t loss = loss_layer(*profile);
  std::size_t grads = 0;
  for (const auto& o : profile->objects) {
    if (o.group != kParamGrads) continue;
    ++grads;
    ASSERT_TRUE(o.born_at_layer && o.freed_at_layer) << o.name << " lives across steps";
    const std::string param = o.name.substr(0, o.name.size() - std::string_view(".grad").size());
    EXPECT_EQ(profile->layers.at(*o.freed_at_layer - 1).name, "sgd." + param);
    EXPECT_GT(*o.born_at_layer, loss) << o.name << " is born before backward";
  }
  EXPECT_EQ(grads, f.net->params().size());
  for (const auto& [name, p] : f.net->params()) EXPECT_TRUE(p->grad.empty()) << name;
}

// Batch norms fused with their ReLUs (the stem's and the first of each block in ResNet-18; VGG's
// with batch norm: every one) against apart: the same losses and parameters to float rounding,
// fewer layers, and no ReLU layer after a batch norm.
TEST(Training, FusedBatchNormReluAgreesWithApart) {
  for (const char* model : {"resnet18", "vgg11_bn"}) {
    SCOPED_TRACE(model);
    auto run = [&](bool fuse) {
      Fixture f = make(model, "fast=dram:1GiB", {4, 3, 16, 16}, 4, 4, 20, {.fuse_batch_norm_relu = fuse});
      Trained trained = train_steps(f, 4, 5, {0.05F, 0.9F, 1e-4F});
      std::size_t relus = 0;
      for (const LayerRecord& l : f.rt->last_step_layers())
        relus += l.name.find("relu") != std::string::npos && l.name.ends_with(".fwd");
      return std::tuple{trained, relus, f.rt->last_step_layers().size()};
    };
    const auto [fused, fused_relus, fused_layers] = run(true);
    const auto [apart, relus, layers] = run(false);
    expect_agree_to_rounding(fused, apart);
    const bool resnet = std::string(model) == "resnet18";
    EXPECT_EQ(relus - fused_relus, resnet ? 9u : 8u);  // ResNet: the stem's and each block's first
    EXPECT_EQ(fused_relus, resnet ? 8u : 0u);          // after the residual adds
    EXPECT_LT(fused_layers, layers);
  }
}

// Batch-norm outputs that only the next layer's backward reads (its convolution's input) are
// freed after forward and computed again for that backward: the profile shows each such output
// born twice (in forward, and again after the loss, by a ".recompute" layer), the step holds
// less, and losses and parameters agree with keeping them (to float rounding; bit-identical on
// the hosts measured).
TEST(Lifetimes, BatchNormOutputsAreComputedAgainForBackward) {
  auto run = [](bool recompute) {
    Fixture f =
        make("resnet18", "fast=dram:1GiB", {4, 3, 16, 16}, 4, 4, 20, {.recompute_batch_norm = recompute});
    Trained trained = train_steps(f, 4, 5, {0.05F, 0.9F, 1e-4F}, /*profile_step=*/1);
    std::map<std::string, int> births;  // of batch-norm outputs in the profiled step
    std::vector<std::string> recompute_layers;
    const auto profile = f.rt->profile();
    EXPECT_NE(profile, nullptr);
    if (profile != nullptr) {
      const std::uint32_t loss = loss_layer(*profile);
      for (const auto& l : profile->layers) {
        if (l.name.ends_with(".recompute")) recompute_layers.push_back(l.name);
      }
      for (const auto& o : profile->objects) {
        if (o.name.ends_with("bn.out") && o.born_at_layer)
          ++births[o.name + (*o.born_at_layer > loss ? "@bwd" : "")];
      }
    }
    return std::tuple{trained, births, recompute_layers, profile ? profile->peak_live_bytes : 0};
  };
  const auto [recomputed, births, recomputes, peak_bytes] = run(true);
  const auto [kept, kept_births, kept_recomputes, kept_peak_bytes] = run(false);
  // Candidates: the stem's and each block's first batch norm (the ReLU after it fused), where the
  // convolution after it reads it in backward (one that reorders its input keeps its own copy).
  EXPECT_GE(recomputes.size(), 1u);
  EXPECT_LE(recomputes.size(), 9u);
  EXPECT_TRUE(kept_recomputes.empty());
  std::size_t born_in_backward = 0;
  for (const auto& [name, count] : births) born_in_backward += name.ends_with("@bwd") ? count : 0;
  EXPECT_EQ(born_in_backward, recomputes.size());
  for (const std::string& layer : recomputes) {  // "layer1.0.conv1.bn.recompute"
    const std::string out = layer.substr(0, layer.size() - std::string_view("recompute").size()) + "out";
    EXPECT_EQ(births.count(out), 1u) << out << " was not born in forward";
    EXPECT_EQ(births.count(out + "@bwd"), 1u) << out << " was not born again in backward";
    EXPECT_EQ(out.find("conv2"), std::string::npos) << out << ": the residual add writes over it";
  }
  for (const auto& [name, count] : kept_births) EXPECT_FALSE(name.ends_with("@bwd")) << name;
  EXPECT_LT(peak_bytes, kept_peak_bytes);
  expect_agree_to_rounding(recomputed, kept);
}

// Every lifetime change of issue 38 but the fusion and recomputation (ReLUs and adds in place, forward
// tensors freed after their last reader, each layer's SGD update right after its backward, gradients freed)
// against none of them (every tensor kept to its backward, gradients of the whole step first, then SGD over
// every parameter, written out here): the same losses and parameters, to the bit.
TEST(Lifetimes, AutogradLifetimesAndFusedUpdatesChangeNoBit) {
  constexpr SgdOptions kSgd{0.05F, 0.9F, 1e-3F};
  auto run = [&](bool new_lifetimes) {
    Fixture f =
        make("resnet18", "fast=dram:1GiB", {4, 3, 16, 16}, 4, 4, 20,
             {.in_place = new_lifetimes, .fuse_batch_norm_relu = false, .recompute_batch_norm = false});
    f.net->set_free_after_last_reader(new_lifetimes);
    BatchIterator it(f.data, 4, 3);
    std::vector<double> losses;
    for (int step = 0; step < 5; ++step) {
      EXPECT_TRUE(it.next(*f.engine, f.batch).is_ok());
      EXPECT_TRUE(f.rt->step_begin().is_ok());
      auto r = new_lifetimes ? f.net->train_step(*f.engine, f.batch, kSgd)
                             : f.net->compute_gradients(*f.engine, f.batch);
      EXPECT_TRUE(r) << r.status().to_string();
      losses.push_back(r ? r->loss : -1);
      for (auto& [name, p] : f.net->params()) {
        if (new_lifetimes) break;
        float* w = p->value.data();
        float* v = p->momentum.data();
        const float* g = p->grad.data();
        const float wd = p->decay ? kSgd.weight_decay : 0.0F;
        for (std::size_t e = 0; e < p->value.elements(); ++e) {
          v[e] = kSgd.momentum * v[e] + (g[e] + wd * w[e]);
          w[e] -= kSgd.learning_rate * v[e];
        }
      }
      EXPECT_TRUE(f.rt->step_end().is_ok());
    }
    std::vector<float> params;
    for (auto& [name, p] : f.net->params())
      params.insert(params.end(), p->value.data(), p->value.data() + p->value.elements());
    return std::pair{losses, params};
  };
  const auto before = run(false), after = run(true);
  EXPECT_EQ(before.first, after.first);
  EXPECT_EQ(before.second, after.second);
  EXPECT_LT(after.first.back(), after.first.front());
}

TEST(Training, LayerMarksNameTheObjectsEachPrimitiveTouches) {
  Fixture f = make("small_cnn", "fast=dram:1GiB", {4, 2, 8, 8}, 3, 4);
  ASSERT_TRUE(gradients(f));
  const auto& layers = f.rt->last_step_layers();
  auto find = [&](const std::string& name) -> const LayerRecord* {
    for (const auto& l : layers) {
      if (l.name == name) return &l;
    }
    return nullptr;
  };
  const LayerRecord* fwd = find("conv1.fwd");
  ASSERT_NE(fwd, nullptr);
  auto id_of = [&](const Tensor& t) { return f.rt->object(t.address()).value().id; };
  const auto params = f.net->params();
  EXPECT_EQ(fwd->reads.size(), 3u);  // input, weight, bias
  EXPECT_EQ(fwd->reads[0], id_of(f.batch.images));
  EXPECT_EQ(fwd->reads[1], id_of(params[0].second->value));
  ASSERT_GE(fwd->writes.size(), 1u);  // its output, and its scratchpad where it has one
  // The output was a fresh activation: born after the parameters, freed by the end of the step.
  EXPECT_GT(fwd->writes[0], id_of(params.back().second->momentum));
  const LayerRecord* bwd = find("conv1.bwd_weights");
  ASSERT_NE(bwd, nullptr);
  EXPECT_NE(std::find(bwd->writes.begin(), bwd->writes.end(), id_of(params[0].second->grad)),
            bwd->writes.end());
  EXPECT_EQ(find("conv1.bwd_data"), nullptr);    // the input batch needs no gradient
  EXPECT_EQ(find("sgd.conv1.weight"), nullptr);  // compute_gradients does no update
  EXPECT_NE(find("loss"), nullptr);
  // Every activation and gradient of the step was freed; parameters and the batch remain.
  const std::size_t params_objects = 3 * params.size();
  EXPECT_GE(f.rt->stats().live_objects, params_objects + 2);
  EXPECT_LE(f.rt->stats().live_objects, params_objects + 2 + 16);  // + running stats
  // Scratchpads live only while their primitive runs (Engine::run frees them after the layer).
  for (const ObjectInfo& o : f.rt->objects())
    EXPECT_NE(o.group, kScratchpads) << o.name << " outlived its layer";
}

TEST(Training, BadInputIsAClearError) {
  auto unknown = make_model("resnet19", {});
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.status().message().find("unknown model 'resnet19' (known: mlp, lenet5"),
            std::string::npos);
  EXPECT_FALSE(make_model("mlp", {1, 8}));  // one class
  Fixture f = make("mlp", "fast=dram:1GiB", {4, 1, 4, 4}, 3, 4);
  static_cast<std::int32_t*>(f.batch.labels.address())[2] = 7;
  auto r = gradients(f);
  ASSERT_FALSE(r);
  EXPECT_NE(r.status().message().find("label 7 of sample 2 is outside 0..2"), std::string::npos);
  Engine& e = *f.engine;
  Network other("tiny");
  other.add(make_conv("c", {4, 5, 1, 0, true}));
  const Status too_small = other.build(e, {1, 1, 3, 3}, 1);
  EXPECT_FALSE(too_small.is_ok());
  EXPECT_NE(too_small.message().find("input too small"), std::string::npos);
}

// An epoch's last batch holds the samples left. Network builds primitives for that batch size
// once, keeping its parameters (and their layouts); its results are those of a network built for
// that size from the same weights.
TEST(Training, APartialBatchTrainsOnTheSameParameters) {
  const dnnl::memory::dims full{8, 3, 16, 16}, partial{5, 3, 16, 16};
  // resnet18 at width 16: blocked layouts, Winograd convolutions, batch norm, residual adds.
  Fixture f = make("resnet18", "fast=dram:1GiB", full, 4, 16, 21);  // batches of 8, 8, 5
  std::vector<dnnl::memory::desc> layouts;
  for (auto& [name, p] : f.net->params()) layouts.push_back(p->value.desc());
  BatchIterator it(f.data, 8, 3, /*shuffle=*/false);
  EXPECT_EQ(it.batches_per_epoch(), 3u);
  EXPECT_EQ(BatchIterator(f.data, 8, 3, false, /*drop_last=*/true).batches_per_epoch(), 2u);
  std::vector<std::size_t> counts;
  Result<StepResult> last = invalid_argument("not run");
  for (int step = 0; step < 4; ++step) {  // 8, 8, 5, then 8 again (the next epoch)
    ASSERT_TRUE(it.next(*f.engine, f.batch).is_ok());
    if (step == 2) {
      // The same step on a network built for 5 samples, from the same weights and momentum.
      auto other = make_model("resnet18", {4, 16}).value();
      ASSERT_TRUE(other->build(*f.engine, partial, 42).is_ok());
      auto mine = f.net->params();
      auto theirs = other->params();
      ASSERT_EQ(mine.size(), theirs.size());
      for (std::size_t i = 0; i < mine.size(); ++i) {
        for (auto [from, to] : {std::pair{&mine[i].second->value, &theirs[i].second->value},
                                std::pair{&mine[i].second->momentum, &theirs[i].second->momentum}}) {
          ASSERT_TRUE(
              f.engine->reorder_now(from->desc(), from->address(), to->desc(), to->address()).is_ok());
        }
      }
      ASSERT_TRUE(f.rt->step_begin().is_ok());
      auto reference = other->train_step(*f.engine, f.batch, {0.05F, 0.9F, 1e-4F});
      ASSERT_TRUE(f.rt->step_end().is_ok());
      ASSERT_TRUE(reference) << reference.status().to_string();
      ASSERT_TRUE(f.rt->step_begin().is_ok());
      last = f.net->train_step(*f.engine, f.batch, {0.05F, 0.9F, 1e-4F});
      ASSERT_TRUE(f.rt->step_end().is_ok());
      ASSERT_TRUE(last) << last.status().to_string();
      EXPECT_NEAR(last->loss, reference->loss, 1e-5 * std::abs(reference->loss));
      for (std::size_t i = 0; i < mine.size(); ++i) {
        std::vector<float> a(mine[i].second->plain.get_size() / sizeof(float)), b(a.size());
        ASSERT_TRUE(f.engine
                        ->reorder_now(mine[i].second->value.desc(), mine[i].second->value.address(),
                                      mine[i].second->plain, a.data())
                        .is_ok());
        ASSERT_TRUE(f.engine
                        ->reorder_now(theirs[i].second->value.desc(), theirs[i].second->value.address(),
                                      theirs[i].second->plain, b.data())
                        .is_ok());
        for (std::size_t e = 0; e < a.size(); ++e)
          ASSERT_NEAR(a[e], b[e], 1e-5F * (1.0F + std::abs(b[e]))) << mine[i].first << " [" << e << "]";
      }
    } else {
      ASSERT_TRUE(f.rt->step_begin().is_ok());
      last = f.net->train_step(*f.engine, f.batch, {0.05F, 0.9F, 1e-4F});
      ASSERT_TRUE(f.rt->step_end().is_ok());
      ASSERT_TRUE(last) << last.status().to_string();
    }
    counts.push_back(last->count);
    EXPECT_TRUE(std::isfinite(last->loss));
  }
  EXPECT_EQ(counts, (std::vector<std::size_t>{8, 8, 5, 8}));
  std::size_t i = 0;
  for (auto& [name, p] : f.net->params()) EXPECT_EQ(p->value.desc(), layouts[i++]) << name;
  ASSERT_TRUE(f.rt->step_begin().is_ok());
  auto eval = f.net->evaluate(*f.engine, f.batch);
  ASSERT_TRUE(f.rt->step_end().is_ok());
  ASSERT_TRUE(eval) << eval.status().to_string();
  EXPECT_EQ(eval->count, 8u);
  // Only the batch size may change.
  Fixture g = make("lenet5", "fast=dram:1GiB", {4, 1, 28, 28}, 3, 4);
  Dataset wrong = synthetic_dataset(4, 1, 32, 32, 3, 1);
  BatchIterator wrong_it(wrong, 4, 1);
  Batch other;
  ASSERT_TRUE(wrong_it.next(*g.engine, other).is_ok());
  auto refused = g.net->train_step(*g.engine, other, {});
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.status().message().find("built for inputs of 1x28x28 (C x H x W) and got a batch of "
                                            "4x1x32x32: only the batch size may change"),
            std::string::npos)
      << refused.status().message();
}

TEST(FashionMnist, MissingOrCorruptFilesAreNamed) {
  testing::TempDir dir;
  auto missing = load_fashion_mnist(dir.path(), true);
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.status().message().find("train-images-idx3-ubyte.gz' does not exist"), std::string::npos);
  // A valid gzip whose IDX content is truncated.
  for (const char* name : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"}) {
    gzFile g = gzopen((dir.path() + "/" + name).c_str(), "wb");
    const unsigned char header[] = {0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 28, 0, 0, 0, 28, 1, 2, 3};
    gzwrite(g, header, sizeof header);
    gzclose(g);
  }
  auto corrupt = load_fashion_mnist(dir.path(), true);
  ASSERT_FALSE(corrupt);
  EXPECT_NE(corrupt.status().message().find("train-images-idx3-ubyte.gz' is truncated or corrupt"),
            std::string::npos)
      << corrupt.status().message();
  std::ofstream(dir.path() + "/train-images-idx3-ubyte.gz") << "not gzip at all, and not IDX";
  EXPECT_FALSE(load_fashion_mnist(dir.path(), true));
}

TEST(FashionMnist, LeNet5ReachesAtLeast88PercentIn2Epochs) {
  auto train_set = load_fashion_mnist(kFashionMnistDir, true);
  ASSERT_TRUE(train_set) << train_set.status().to_string() << " (tools/setup.sh test installs it)";
  auto test_set = load_fashion_mnist(kFashionMnistDir, false);
  ASSERT_TRUE(test_set);
  auto rt = Runtime::create({"fast=dram:1GiB"});
  ASSERT_TRUE(rt);
  Engine e(*rt.value());
  auto net = make_model("lenet5", {10, 64}).value();
  ASSERT_TRUE(net->build(e, {64, 1, 28, 28}, 1).is_ok());
  BatchIterator it(train_set.value(), 64, 1);
  const std::size_t total = 2 * it.batches_per_epoch();
  Batch batch;
  for (std::size_t step = 0; step < total; ++step) {  // the trainer's defaults: lr 0.05, cosine
    const float lr =
        0.05F * 0.5F * (1.0F + std::cos(3.14159265F * static_cast<float>(step) / static_cast<float>(total)));
    ASSERT_TRUE(it.next(e, batch).is_ok());
    ASSERT_TRUE(rt.value()->step_begin().is_ok());
    ASSERT_TRUE(net->train_step(e, batch, {lr, 0.9F, 0.0F}));
    ASSERT_TRUE(rt.value()->step_end().is_ok());
  }
  BatchIterator test_it(test_set.value(), 64, 1, false);
  std::size_t correct = 0, seen = 0;
  for (std::size_t b = 0; b < test_it.batches_per_epoch(); ++b) {
    ASSERT_TRUE(test_it.next(e, batch).is_ok());
    ASSERT_TRUE(rt.value()->step_begin().is_ok());
    auto r = net->evaluate(e, batch);
    ASSERT_TRUE(rt.value()->step_end().is_ok());
    ASSERT_TRUE(r);
    correct += r->correct;
    seen += r->count;
  }
  EXPECT_EQ(seen, test_set->count());  // every test sample: the last batch holds 16
  const double accuracy = static_cast<double>(correct) / static_cast<double>(seen);
  RecordProperty("test_accuracy", std::to_string(accuracy));
  EXPECT_GE(accuracy, 0.88) << correct << " / " << seen;
}

}  // namespace
}  // namespace tensortier::dnn
