// The cuDNN backend (dnn/cudnn/cudnn_backend.h) against the CPU backend: the same models from the
// same seed on the same batches give the same losses and weights to float rounding (the layers
// agree to 1e-4 relative at the first step), and runs under different policies on GPU tiers are
// bit-identical (deterministic mode). These need a GPU and skip, saying why, where there is none;
// what a backend without a device tier does is checked everywhere.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "fake_cuda.h"
#include "tensortier/dnn/cudnn/cudnn_backend.h"
#include "tensortier/dnn/data.h"
#include "tensortier/dnn/models.h"
#include "tensortier/dnn/network.h"
#include "tensortier/gpu/gpu_tier.h"

namespace tensortier::dnn::cudnn {
namespace {

constexpr const char* kGpuTiers = "fast=cuda:0:2GiB,slow=pinned:2GiB";

struct Trained {
  std::vector<double> losses;
  std::vector<std::vector<float>> params;     // each in PyTorch's layout, in the network's order
  std::size_t relus = 0, relus_in_place = 0;  // in the last step; in place: writes what it reads
};

// `steps` steps of `model` (narrow, 16x16 synthetic images, 32x32 for VGG, whose fifth pool
// needs 2x2 maps; LeNet-5 on 28x28) on `tiers`, the cuDNN backend where `cuda`, with `memory`.
Result<Trained> train(const std::string& model, bool cuda, const std::string& tiers,
                      const std::string& policy = "", const std::string& budget = "", int steps = 3,
                      const MemoryOptions& memory = {}) {
  RuntimeOptions options(tiers);
  options.policy = policy;
  options.fast_budget = budget;
  auto rt = Runtime::create(options);
  if (!rt) return rt.status();
  std::unique_ptr<CudnnBackend> backend;
  if (cuda) {
    auto b = CudnnBackend::create(*rt.value());
    if (!b) return b.status();
    backend = std::move(b).value();
  }
  Engine engine = backend ? Engine(*rt.value(), *backend) : Engine(*rt.value());
  engine.set_memory_options(memory);
  const bool lenet = model == "lenet5";
  const int side = model.starts_with("vgg") ? 32 : 16;
  const dnnl::memory::dims input =
      lenet ? dnnl::memory::dims{16, 1, 28, 28} : dnnl::memory::dims{8, 3, side, side};
  auto net = make_model(model, {10, lenet ? 6 : 8});
  if (!net) return net.status();
  TENSORTIER_RETURN_IF_ERROR(net.value()->build(engine, input, 42));
  const Dataset data = synthetic_dataset(static_cast<std::size_t>(input[0]) * 3, static_cast<int>(input[1]),
                                         static_cast<int>(input[2]), static_cast<int>(input[3]), 10, 7);
  BatchIterator it(data, static_cast<std::size_t>(input[0]), 3);
  Batch batch;
  Trained out;
  for (int step = 0; step < steps; ++step) {
    TENSORTIER_RETURN_IF_ERROR(it.next(engine, batch));
    TENSORTIER_RETURN_IF_ERROR(rt.value()->step_begin());
    auto result = net.value()->train_step(engine, batch, {0.05F, 0.9F, 1e-4F});
    if (!result) return result.status();
    TENSORTIER_RETURN_IF_ERROR(rt.value()->step_end());
    out.losses.push_back(result->loss);
  }
  for (const LayerRecord& l : rt.value()->last_step_layers()) {
    if (!l.name.ends_with("relu.fwd")) continue;
    ++out.relus;
    if (l.reads.size() == 1 && l.writes.size() == 1 && l.reads[0] == l.writes[0]) ++out.relus_in_place;
  }
  for (auto& [name, p] : net.value()->params()) {
    std::vector<float> plain(p->plain.get_size() / sizeof(float));
    TENSORTIER_RETURN_IF_ERROR(engine.read_to_host(p->value, [&](const void* bytes) {
      (void)engine.reorder_now(p->value.desc(), bytes, p->plain, plain.data());
    }));
    out.params.push_back(std::move(plain));
  }
  return out;
}

// Whether the CUDA runtime sees a device here.
bool gpu_present() {
  int devices = 0;
  return gpu::real_cuda_api().device_count(&devices) == 0 && devices > 0;
}

// Skips the test only where this machine has no GPU; with one, any failure (a cuDNN sub-library
// that does not load, no deterministic algorithm: kUnavailable too) is the test's failure.
#define SKIP_WITHOUT_GPU(result) \
  if (!gpu_present()) GTEST_SKIP() << "needs a CUDA device: " << ((result) ? "" : (result).status().message())

TEST(CudnnBackend, NeedsARuntimeWithADeviceTier) {
  auto rt = Runtime::create({"fast=dram:1GiB"});
  ASSERT_TRUE(rt) << rt.status().to_string();
  auto backend = CudnnBackend::create(*rt.value());
  ASSERT_FALSE(backend);
  EXPECT_EQ(backend.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(backend.status().message().find("give a cuda tier"), std::string::npos)
      << backend.status().message();
}

// On a runtime with a device tier (the fake's) but no GPU for cuDNN: one line that says so, no
// handle left behind. (On a GPU machine cuDNN finds the real device, and this runtime's tiers are
// the fake's: the check does not apply there.)
TEST(CudnnBackend, SaysSoWhereCudnnFindsNoGpu) {
  int real_devices = 0;
  if (gpu::real_cuda_api().device_count(&real_devices) == 0 && real_devices > 0)
    GTEST_SKIP() << "this machine has a GPU: cuDNN would find it";
  auto provider = std::make_shared<gpu::CudaTierProvider>(gpu::testing::FakeCuda::install());
  RuntimeOptions options("fast=cuda:0:64MiB,slow=pinned:64MiB");
  options.tier_provider = provider;
  auto rt = Runtime::create(options);
  ASSERT_TRUE(rt) << rt.status().to_string();
  ASSERT_NE(rt.value()->device_stream(), 0u);
  auto backend = CudnnBackend::create(*rt.value());
  ASSERT_FALSE(backend);
  EXPECT_EQ(backend.status().code(), StatusCode::kUnavailable) << backend.status().to_string();
  // The first call that needs the GPU says so: the device of the runtime's stream, before the handles.
  EXPECT_NE(backend.status().message().find("cudaStreamGetDevice"), std::string::npos)
      << backend.status().message();
  std::printf("without a GPU: %s\n", backend.status().message().c_str());
  rt.value().reset();  // before the fake it lives on
}

// cuDNN's kernels cannot reach pageable host memory: a dram tier beside the cuda tier is refused
// in one line, before any handle is made (so this holds without a GPU too).
TEST(CudnnBackend, RefusesTiersTheGpuCannotReach) {
  auto provider = std::make_shared<gpu::CudaTierProvider>(gpu::testing::FakeCuda::install());
  RuntimeOptions options("fast=cuda:0:64MiB,slow=dram:64MiB");
  options.tier_provider = provider;
  auto rt = Runtime::create(options);
  ASSERT_TRUE(rt) << rt.status().to_string();
  auto backend = CudnnBackend::create(*rt.value());
  ASSERT_FALSE(backend);
  EXPECT_EQ(backend.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(backend.status().message().find("pageable"), std::string::npos) << backend.status().message();
  EXPECT_NE(backend.status().message().find("'slow'"), std::string::npos) << backend.status().message();
  rt.value().reset();  // before the fake it lives on
}

TEST(CudnnBackend, TrainsAsTheCpuBackendDoes) {
  for (const std::string model : {"lenet5", "resnet18", "vgg11_bn"}) {
    SCOPED_TRACE(model);
    auto gpu = train(model, true, kGpuTiers);
    SKIP_WITHOUT_GPU(gpu);
    ASSERT_TRUE(gpu) << gpu.status().to_string();
    auto cpu = train(model, false, "fast=dram:2GiB");
    ASSERT_TRUE(cpu) << cpu.status().to_string();
    ASSERT_EQ(gpu->losses.size(), cpu->losses.size());
    EXPECT_NEAR(gpu->losses[0], cpu->losses[0], 1e-4 * std::abs(cpu->losses[0])) << "the first step's layers";
    for (std::size_t s = 1; s < cpu->losses.size(); ++s)
      EXPECT_NEAR(gpu->losses[s], cpu->losses[s], 1e-3 * std::abs(cpu->losses[s])) << "step " << s;
    ASSERT_EQ(gpu->params.size(), cpu->params.size());
    for (std::size_t k = 0; k < cpu->params.size(); ++k) {
      ASSERT_EQ(gpu->params[k].size(), cpu->params[k].size()) << "parameter " << k;
      float top = 0, worst = 0;
      for (std::size_t e = 0; e < cpu->params[k].size(); ++e) {
        top = std::max(top, std::abs(cpu->params[k][e]));
        worst = std::max(worst, std::abs(cpu->params[k][e] - gpu->params[k][e]));
      }
      EXPECT_LE(worst, 1e-3F * std::max(top, 1e-3F)) << "parameter " << k;
    }
  }
}

// ReLUs in place on the GPU (MemoryOptions::in_place: each writes over its producer's output and
// its backward gives cuDNN the output as x): the same losses to the bit as apart, every ReLU
// reading and writing one object.
TEST(CudnnBackend, InPlaceRelusChangeNoResult) {
  auto in_place =
      train("resnet18", true, kGpuTiers, "", "", 2, {.in_place = true, .fuse_batch_norm_relu = false});
  SKIP_WITHOUT_GPU(in_place);
  ASSERT_TRUE(in_place) << in_place.status().to_string();
  auto apart =
      train("resnet18", true, kGpuTiers, "", "", 2, {.in_place = false, .fuse_batch_norm_relu = false});
  ASSERT_TRUE(apart) << apart.status().to_string();
  EXPECT_EQ(in_place->losses, apart->losses);
  EXPECT_EQ(in_place->params, apart->params);
  EXPECT_EQ(in_place->relus, 17u);
  EXPECT_EQ(in_place->relus_in_place, 17u);
  EXPECT_EQ(apart->relus_in_place, 0u);
}

// A label outside the model's classes (a 3-class LeNet-5 fed labels 0..9): the kernel flags the
// row and the step fails with the CPU backend's line, naming the label and the sample.
TEST(CudnnBackend, ALabelOutsideTheClassesIsAClearError) {
  auto rt = Runtime::create({kGpuTiers});
  SKIP_WITHOUT_GPU(rt);
  ASSERT_TRUE(rt) << rt.status().to_string();
  auto backend = CudnnBackend::create(*rt.value());
  ASSERT_TRUE(backend) << backend.status().to_string();
  Engine engine(*rt.value(), *backend.value());
  auto net = make_model("lenet5", {3, 6});
  ASSERT_TRUE(net);
  ASSERT_TRUE(net.value()->build(engine, {16, 1, 28, 28}, 42).is_ok());
  const Dataset data = synthetic_dataset(16, 1, 28, 28, 10, 7);
  ASSERT_TRUE(std::ranges::any_of(data.labels, [](std::int32_t l) { return l >= 3; }));
  BatchIterator it(data, 16, 1, /*shuffle=*/false);
  Batch batch;
  ASSERT_TRUE(it.next(engine, batch).is_ok());
  ASSERT_TRUE(rt.value()->step_begin().is_ok());
  auto result = net.value()->train_step(engine, batch, {0.05F, 0.9F, 1e-4F});
  ASSERT_FALSE(result);
  EXPECT_NE(result.status().message().find("is outside 0..2"), std::string::npos)
      << result.status().message();
}

// Deterministic mode: where the objects live (all in device memory, or moved out to pinned
// memory and back under a policy) changes no bit.
TEST(CudnnBackend, RunsUnderPoliciesAreBitIdentical) {
  auto reference = train("resnet18", true, kGpuTiers, "fast-only", "", 6);
  SKIP_WITHOUT_GPU(reference);
  ASSERT_TRUE(reference) << reference.status().to_string();
  for (const auto& [policy, budget] : std::vector<std::pair<std::string, std::string>>{
           {"smartpool", ""}, {"autoswap", "70%"}, {"autoswap", "50%"}, {"sentinel", "50%"}}) {
    SCOPED_TRACE(fmt::format("{} {}", policy, budget));
    auto run = train("resnet18", true, kGpuTiers, policy, budget, 6);
    ASSERT_TRUE(run) << run.status().to_string();
    EXPECT_EQ(run->losses, reference->losses);
    EXPECT_EQ(run->params, reference->params);
  }
}

}  // namespace
}  // namespace tensortier::dnn::cudnn
