// Layer specs and backends: output_dims() at odd shapes and on bad input, the CPU backend's layers
// against it, and a Network that computes through whatever backend its Engine holds.
#include <gtest/gtest.h>

#include <array>
#include <map>
#include <string>

#include "tensortier/dnn/data.h"
#include "tensortier/dnn/models.h"
#include "tensortier/dnn/network.h"

namespace tensortier::dnn {
namespace {

Dims dims_of(const LayerSpec& spec, std::vector<Dims> inputs) {
  Result<Dims> out = output_dims(spec, inputs);
  EXPECT_TRUE(out) << out.status().to_string();
  return out ? out.value() : Dims{};
}

TEST(LayerSpec, OutputShapesFollowTheTable) {
  EXPECT_EQ(dims_of(make_conv("c", {7, 3, 2, 1, true}), {{3, 5, 17, 13}}), (Dims{3, 7, 9, 7}));
  EXPECT_EQ(dims_of(make_conv("c", {4, 5, 1, 0, false}), {{2, 3, 5, 9}}), (Dims{2, 4, 1, 5}));
  EXPECT_EQ(dims_of(make_pool("p", PoolKind::kMax, 3, 2, 1), {{3, 5, 17, 13}}), (Dims{3, 5, 9, 7}));
  EXPECT_EQ(dims_of(make_pool("p", PoolKind::kAverage, 2, 2), {{1, 6, 7, 7}}), (Dims{1, 6, 3, 3}));
  // A window one past a 1x1 map pools its one element (C++ division, as oneDNN checks shapes).
  EXPECT_EQ(dims_of(make_pool("p", PoolKind::kMax, 2, 2), {{4, 32, 1, 1}}), (Dims{4, 32, 1, 1}));
  EXPECT_EQ(dims_of(make_global_avg_pool("g"), {{3, 11, 5, 6}}), (Dims{3, 11, 1, 1}));
  EXPECT_EQ(dims_of(make_linear("l", 10), {{3, 11, 5, 6}}), (Dims{3, 10}));
  EXPECT_EQ(dims_of(make_linear("l", 1, false), {{5, 7}}), (Dims{5, 1}));
  EXPECT_EQ(dims_of(make_batch_norm("b"), {{3, 5, 2, 2}}), (Dims{3, 5, 2, 2}));
  EXPECT_EQ(dims_of(make_relu("r"), {{3, 5}}), (Dims{3, 5}));
  EXPECT_EQ(dims_of(make_add("a"), {{3, 5, 2, 2}, {3, 5, 2, 2}}), (Dims{3, 5, 2, 2}));
}

TEST(LayerSpec, BadInputIsAnErrorNamingTheLayer) {
  auto error = [](const LayerSpec& spec, std::vector<Dims> inputs) {
    Result<Dims> out = output_dims(spec, inputs);
    EXPECT_FALSE(out);
    return out ? std::string() : out.status().to_string();
  };
  EXPECT_NE(error(make_conv("c1", {4, 3, 1, 0, true}), {{1, 3, 2, 2}}).find("'c1': input too small"),
            std::string::npos);
  EXPECT_NE(error(make_conv("c2", {4, 3, 1, 0, true}), {{1, 3, 8}}).find("'c2' needs a 4-D input"),
            std::string::npos);
  EXPECT_NE(error(make_conv("c3", {0, 3, 1, 1, true}), {{1, 3, 8, 8}}).find("no output channels"),
            std::string::npos);
  EXPECT_NE(error(make_conv("c4", {4, 3, 0, 1, true}), {{1, 3, 8, 8}}).find("stride must be"),
            std::string::npos);
  EXPECT_NE(error(make_add("a"), {{1, 3, 8, 8}, {1, 3, 8, 7}}).find("differ in shape"), std::string::npos);
  EXPECT_NE(error(make_add("a"), {{1, 3, 8, 8}}).find("takes 2 input(s), got 1"), std::string::npos);
  EXPECT_NE(error(make_relu("r"), {{1, 3}, {1, 3}}).find("takes 1 input(s), got 2"), std::string::npos);
  EXPECT_NE(error(make_linear("l", 3), {{2, 3, 4}}).find("needs an N,F or N,C,H,W input"), std::string::npos);
  EXPECT_NE(error(make_pool("p", PoolKind::kMax, 2, 2), {{2, 3}}).find("needs a 4-D input"),
            std::string::npos);
}

// The CPU backend's layers give their specs' shapes at odd sizes (Network::build also checks this
// for every model; here one layer at a time, with layouts oneDNN chose).
TEST(CpuBackend, EveryLayerGivesItsSpecsShape) {
  Engine engine = Engine::without_runtime();
  const std::vector<std::pair<LayerSpec, std::vector<Dims>>> cases{
      {make_conv("conv", {7, 3, 2, 1, true}), {{3, 5, 17, 13}}},
      {make_conv("conv1x1", {16, 1, 1, 0, false}), {{2, 16, 5, 5}}},
      {make_batch_norm("bn"), {{3, 5, 9, 7}}},
      {make_relu("relu"), {{3, 5, 9, 7}}},
      {make_pool("max", PoolKind::kMax, 3, 2, 1), {{3, 5, 17, 13}}},
      {make_pool("avg", PoolKind::kAverage, 2, 2, 0), {{3, 5, 9, 7}}},
      {make_global_avg_pool("gap"), {{3, 5, 9, 7}}},
      {make_linear("fc4d", 10), {{3, 5, 2, 3}}},
      {make_linear("fc", 3, false), {{3, 30}}},
      {make_add("add"), {{3, 5, 9, 7}, {3, 5, 9, 7}}},
  };
  for (const auto& [spec, inputs] : cases) {
    SCOPED_TRACE(spec.name);
    auto layer = cpu_backend().make_layer(spec);
    ASSERT_TRUE(layer);
    EXPECT_EQ(layer.value()->name(), spec.name);
    std::vector<dnnl::memory::desc> descs;
    for (const Dims& d : inputs) {
      const auto tag = d.size() == 4 ? dnnl::memory::format_tag::nchw : dnnl::memory::format_tag::nc;
      descs.emplace_back(d, dnnl::memory::data_type::f32, tag);
    }
    Result<dnnl::memory::desc> out = layer.value()->build(engine, descs);
    ASSERT_TRUE(out) << out.status().to_string();
    EXPECT_EQ(out.value().dims(), dims_of(spec, inputs));
  }
}

// A layer whose parameters cannot be written (as a device copy may fail): the CPU layer otherwise.
class UnwritableParams final : public Layer {
 public:
  explicit UnwritableParams(std::unique_ptr<Layer> inner) : Layer(inner->name()), inner_(std::move(inner)) {}
  Result<dnnl::memory::desc> build(Engine& engine, const std::vector<dnnl::memory::desc>& inputs) override {
    return inner_->build(engine, inputs);
  }
  Status forward(Engine& engine, const std::vector<const Tensor*>& inputs, const Tensor& output,
                 bool training) override {
    return inner_->forward(engine, inputs, output, training);
  }
  Status backward(Engine& engine, const std::vector<const Tensor*>& inputs, const Tensor& output,
                  const Tensor& diff_out, const std::vector<Tensor*>& diff_in) override {
    return inner_->backward(engine, inputs, output, diff_out, diff_in);
  }
  std::vector<Param*> params() override { return inner_->params(); }
  Status init_params(Engine& /*engine*/, std::uint64_t /*seed*/) override {
    return unavailable("the copy of the initial weights failed");
  }

 private:
  std::unique_ptr<Layer> inner_;
};

// A backend that forwards to the CPU one and counts what the Network asked of it, and can be told
// to make one layer of a wrong shape, or one whose parameters cannot be written.
class CountingBackend final : public Backend {
 public:
  std::string_view name() const override { return "counting"; }
  Result<std::unique_ptr<Layer>> make_layer(const LayerSpec& spec) override {
    ++calls["make_layer"];
    if (spec.name == wrong_shape) return cpu_backend().make_layer(make_conv(spec.name, {3, 1, 1, 0, false}));
    if (spec.name == unwritable) {
      auto layer = cpu_backend().make_layer(spec);
      if (!layer) return layer.status();
      return std::unique_ptr<Layer>(std::make_unique<UnwritableParams>(std::move(layer).value()));
    }
    return cpu_backend().make_layer(spec);
  }
  Result<StepResult> softmax_cross_entropy(Engine& engine, const Tensor& logits, const Tensor& labels,
                                           const Tensor* diff) override {
    ++calls[diff != nullptr ? "loss_with_gradient" : "loss"];
    return cpu_backend().softmax_cross_entropy(engine, logits, labels, diff);
  }
  Status accumulate(Engine& engine, std::string_view layer, const Tensor& sum, const Tensor& more) override {
    ++calls["accumulate"];
    return cpu_backend().accumulate(engine, layer, sum, more);
  }
  Status sgd_update(Engine& engine, Param& param, const SgdOptions& sgd) override {
    ++calls["sgd"];
    return cpu_backend().sgd_update(engine, param, sgd);
  }
  std::map<std::string, int> calls;
  std::string wrong_shape;
  std::string unwritable;
};

struct Trained {
  std::vector<double> losses;
  std::vector<float> weights;  // every parameter's values after the steps, in order
};

Trained train(Backend& backend, int steps) {
  auto runtime = Runtime::create({"fast=dram:1G"});
  EXPECT_TRUE(runtime);
  Engine engine(*runtime.value(), backend);
  auto net = make_model("resblock", {3, 8}).value();
  const dnnl::memory::dims input{4, 3, 8, 8};
  EXPECT_TRUE(net->build(engine, input, 5).is_ok());
  const Dataset data = synthetic_dataset(8, 3, 8, 8, 3, 9);
  BatchIterator batches(data, 4, /*seed=*/11);
  Batch batch;
  Trained out;
  for (int s = 0; s < steps; ++s) {
    EXPECT_TRUE(batches.next(engine, batch).is_ok());
    EXPECT_TRUE(runtime.value()->step_begin().is_ok());
    auto r = net->train_step(engine, batch, {0.05F, 0.9F, 1e-4F});
    EXPECT_TRUE(runtime.value()->step_end().is_ok());
    EXPECT_TRUE(r) << r.status().to_string();
    out.losses.push_back(r ? r.value().loss : 0);
  }
  for (auto& [name, p] : net->params()) {
    out.weights.insert(out.weights.end(), p->value.data(), p->value.data() + p->value.elements());
  }
  return out;
}

TEST(Backends, TheNetworkComputesThroughItsEnginesBackend) {
  CountingBackend counting;
  const Trained through_counting = train(counting, 2);
  const Trained through_cpu = train(cpu_backend(), 2);
  // resblock: 12 layers; each step one loss with its gradient; the stem's output is read by the
  // block's first conv and by the residual add, so its gradient is a sum; 11 parameters (3 convs,
  // 3 batch norms of two each, the linear layer's two) updated each step.
  EXPECT_EQ(counting.calls["make_layer"], 12);
  EXPECT_EQ(counting.calls["loss_with_gradient"], 2);
  EXPECT_EQ(counting.calls["loss"], 0);
  EXPECT_EQ(counting.calls["accumulate"], 2);
  EXPECT_EQ(counting.calls["sgd"], 2 * 11);
  // The same computation either way: bit-identical losses and weights.
  EXPECT_EQ(through_counting.losses, through_cpu.losses);
  EXPECT_EQ(through_counting.weights, through_cpu.weights);
}

// Builds a residual block through `backend`: what its build returned.
Status build_resblock(Backend& backend) {
  auto runtime = Runtime::create({"fast=dram:1G"});
  if (!runtime) return runtime.status();
  Engine engine(*runtime.value(), backend);
  auto net = make_model("resblock", {3, 8}).value();
  return net->build(engine, {4, 3, 8, 8}, 5);
}

TEST(Backends, ALayerOfAnotherShapeThanItsSpecFailsTheBuild) {
  CountingBackend counting;
  counting.wrong_shape = "block.conv1";  // 3 output channels where the spec says 8
  const Status built = build_resblock(counting);
  ASSERT_FALSE(built.is_ok());
  EXPECT_NE(
      built.message().find("layer 'block.conv1' of the counting backend gives an output of 4x3x8x8, its spec "
                           "4x8x8x8"),
      std::string::npos)
      << built.to_string();
}

// A layer's parameters that cannot be written fail the build with the layer's error (the cuDNN
// backend's copies of initial weights to the device can fail): no network trains on garbage.
TEST(Backends, ParametersThatCannotBeWrittenFailTheBuild) {
  CountingBackend counting;
  counting.unwritable = "block.conv1";
  const Status built = build_resblock(counting);
  ASSERT_FALSE(built.is_ok());
  EXPECT_NE(built.message().find("the copy of the initial weights failed"), std::string::npos)
      << built.to_string();
}

}  // namespace
}  // namespace tensortier::dnn
