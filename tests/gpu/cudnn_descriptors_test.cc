// The cuDNN backend's layer descriptions, checked without a GPU (cuDNN's descriptor calls run on
// the host): every layer's output shape as cuDNN computes it against output_dims() (which
// Network::build holds the CPU backend's layers to), over odd shapes and every model's graph, and
// the windows cuDNN cannot run refused saying why; batch norm's parameter shape; the linear
// layer's cuBLAS GEMMs against PyTorch's formulas on a reference GEMM; cuDNN's statuses as ours.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cmath>
#include <random>
#include <vector>

#include "tensortier/dnn/cudnn/algorithm_choice.h"
#include "tensortier/dnn/cudnn/descriptors.h"
#include "tensortier/dnn/models.h"

namespace tensortier::dnn::cudnn {
namespace {

TEST(CudnnShapes, ConvAndPoolOverOddShapesAsTheSpecSays) {
  int checked = 0, refused = 0;
  for (const std::int64_t size : {1, 2, 3, 5, 8, 13}) {
    for (int kernel = 1; kernel <= 5; ++kernel) {
      for (int stride = 1; stride <= 3; ++stride) {
        for (int padding = 0; padding <= 2; ++padding) {
          const std::vector<Dims> in{{3, 5, size, size + 2}};
          const std::vector<LayerSpec> specs{make_conv("c", {7, kernel, stride, padding, true}),
                                             make_pool("m", PoolKind::kMax, kernel, stride, padding),
                                             make_pool("a", PoolKind::kAverage, kernel, stride, padding)};
          for (const LayerSpec& spec : specs) {
            SCOPED_TRACE(::testing::Message() << spec.name << " size " << size << " k" << kernel << " s"
                                              << stride << " p" << padding);
            const Result<Dims> expected = output_dims(spec, in);
            const Result<Dims> got = cudnn_output_dims(spec, in);
            if (expected && size + 2 * padding < kernel) {  // a window past the input's end
              ASSERT_FALSE(got);
              EXPECT_NE(got.status().message().find("passes the end"), std::string::npos);
              ++refused;
              continue;
            }
            ASSERT_EQ(bool(got), bool(expected)) << (got ? expected.status() : got.status()).to_string();
            if (!expected) continue;
            EXPECT_EQ(got.value(), expected.value());
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 500);
  EXPECT_GT(refused, 0);
}

// A 2x2 window one past a 1x1 map (VGG's last pool at small inputs): oneDNN pools the one element,
// cuDNN refuses it (as PyTorch does); the cuDNN backend says which layer and why.
TEST(CudnnShapes, AWindowPastTheInputIsRefusedSayingWhy) {
  const std::vector<Dims> in{{4, 32, 1, 1}};
  const LayerSpec pool = make_pool("pool5", PoolKind::kMax, 2, 2);
  ASSERT_TRUE(output_dims(pool, in));
  const Result<Dims> got = cudnn_output_dims(pool, in);
  ASSERT_FALSE(got);
  EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(
      got.status().message().find("layer 'pool5': pool: a 2x2 window passes the end of a 1x1 input padded "
                                  "by 0: cuDNN (as PyTorch) cannot run it"),
      std::string::npos)
      << got.status().to_string();
}

TEST(CudnnShapes, EveryLayerOfEveryModelAsTheSpecSays) {
  for (const std::string& name : model_names()) {
    SCOPED_TRACE(name);
    auto net = make_model(name, {7, 8});
    ASSERT_TRUE(net);
    // Odd sizes at which no window passes a map's end (VGG's five pools reach 1x1 exactly).
    const Dims input{3, 3, 33, 35};
    std::vector<Dims> dims;
    for (const auto& node : net.value()->graph()) {
      std::vector<Dims> in;
      for (int j : node.inputs)
        in.push_back(j == Network::kInput ? input : dims[static_cast<std::size_t>(j)]);
      const Result<Dims> expected = output_dims(*node.spec, in);
      ASSERT_TRUE(expected) << expected.status().to_string();
      const Result<Dims> got = cudnn_output_dims(*node.spec, in);
      ASSERT_TRUE(got) << node.spec->name << ": " << got.status().to_string();
      EXPECT_EQ(got.value(), expected.value()) << node.spec->name;
      dims.push_back(expected.value());
    }
    EXPECT_EQ(dims.back(), (Dims{3, 7}));
  }
}

TEST(CudnnShapes, BatchNormParametersAreOnePerChannel) {
  auto d = batch_norm_descriptors({3, 5, 9, 7});
  ASSERT_TRUE(d) << d.status().to_string();
  auto params = dims_of(d.value().scale_bias);
  ASSERT_TRUE(params);
  EXPECT_EQ(params.value(), (Dims{1, 5, 1, 1}));
}

TEST(CudnnShapes, BadShapesAreErrorsNamingTheLayer) {
  const std::vector<Dims> small{{1, 3, 2, 2}};
  const Result<Dims> conv = cudnn_output_dims(make_conv("c9", {4, 5, 1, 0, true}), small);
  ASSERT_FALSE(conv);
  EXPECT_NE(conv.status().message().find("'c9': input too small"), std::string::npos);
  const Result<TensorDescriptor> five = tensor_descriptor({1, 2, 3, 4, 5});
  ASSERT_FALSE(five);
  EXPECT_NE(five.status().message().find("cuDNN's layers take 1, 2 or 4"), std::string::npos);
  EXPECT_FALSE(linear_gemms(0, 3, 4));
  EXPECT_FALSE(linear_gemms(2, std::int64_t{1} << 32, 4));
}

// A column-major GEMM as cuBLAS computes it, on host arrays.
void reference_gemm(const Gemm& g, const std::vector<float>& a, const std::vector<float>& b,
                    std::vector<float>& c) {
  for (int i = 0; i < g.m; ++i) {
    for (int j = 0; j < g.n; ++j) {
      double sum = 0;
      for (int p = 0; p < g.k; ++p) {
        const float av = g.transpose_a ? a[static_cast<std::size_t>(p + i * g.lda)]
                                       : a[static_cast<std::size_t>(i + p * g.lda)];
        const float bv = g.transpose_b ? b[static_cast<std::size_t>(j + p * g.ldb)]
                                       : b[static_cast<std::size_t>(p + j * g.ldb)];
        sum += static_cast<double>(av) * bv;
      }
      c[static_cast<std::size_t>(i + j * g.ldc)] = static_cast<float>(sum);
    }
  }
}

// The linear layer's GEMMs compute PyTorch's y = x W^T, dx = dy W, dW = dy^T x, db = sum_n dy on
// row-major N x F inputs and O x F weights (odd sizes, so a swapped dimension shows).
TEST(CudnnLinear, GemmsComputePyTorchsFormulas) {
  const int n = 3, f = 7, o = 5;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  auto random = [&](int count) {
    std::vector<float> v(static_cast<std::size_t>(count));
    for (float& x : v) x = u(rng);
    return v;
  };
  std::map<Operand, std::vector<float>> mem{{Operand::kInput, random(n * f)},
                                            {Operand::kWeights, random(o * f)},
                                            {Operand::kDiffOutput, random(n * o)},
                                            {Operand::kOnes, std::vector<float>(n, 1.0F)},
                                            {Operand::kOutput, std::vector<float>(n * o)},
                                            {Operand::kDiffInput, std::vector<float>(n * f)},
                                            {Operand::kDiffWeights, std::vector<float>(o * f)},
                                            {Operand::kDiffBias, std::vector<float>(o)}};
  auto gemms = linear_gemms(n, f, o);
  ASSERT_TRUE(gemms) << gemms.status().to_string();
  for (const Gemm* g : {&gemms.value().forward, &gemms.value().backward_data, &gemms.value().backward_weights,
                        &gemms.value().backward_bias}) {
    reference_gemm(*g, mem[g->a], mem[g->b], mem[g->c]);
  }
  const auto& x = mem[Operand::kInput];
  const auto& w = mem[Operand::kWeights];
  const auto& dy = mem[Operand::kDiffOutput];
  auto at = [](const std::vector<float>& m, int row, int col, int cols) {
    return static_cast<double>(m[static_cast<std::size_t>(row * cols + col)]);
  };
  for (int s = 0; s < n; ++s) {
    for (int j = 0; j < o; ++j) {
      double y = 0;
      for (int i = 0; i < f; ++i) y += at(x, s, i, f) * at(w, j, i, f);
      EXPECT_NEAR(at(mem[Operand::kOutput], s, j, o), y, 1e-5) << "y " << s << "," << j;
    }
    for (int i = 0; i < f; ++i) {
      double dx = 0;
      for (int j = 0; j < o; ++j) dx += at(dy, s, j, o) * at(w, j, i, f);
      EXPECT_NEAR(at(mem[Operand::kDiffInput], s, i, f), dx, 1e-5) << "dx " << s << "," << i;
    }
  }
  for (int j = 0; j < o; ++j) {
    double db = 0;
    for (int s = 0; s < n; ++s) db += at(dy, s, j, o);
    EXPECT_NEAR(mem[Operand::kDiffBias][static_cast<std::size_t>(j)], db, 1e-5) << "db " << j;
    for (int i = 0; i < f; ++i) {
      double dw = 0;
      for (int s = 0; s < n; ++s) dw += at(dy, s, j, o) * at(x, s, i, f);
      EXPECT_NEAR(at(mem[Operand::kDiffWeights], j, i, f), dw, 1e-5) << "dW " << j << "," << i;
    }
  }
}

TEST(CudnnStatus, ClassesBecomeOurCodes) {
  EXPECT_TRUE(cudnn_status(CUDNN_STATUS_SUCCESS, "x").is_ok());
  const Status none = cudnn_status(CUDNN_STATUS_NOT_INITIALIZED, "cudnnCreate");
  EXPECT_EQ(none.code(), StatusCode::kUnavailable);
  EXPECT_NE(none.message().find("cudnnCreate: "), std::string::npos);
  EXPECT_NE(none.message().find("no GPU"), std::string::npos);
  EXPECT_EQ(cudnn_status(CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH, "x").code(), StatusCode::kUnavailable);
  EXPECT_EQ(cudnn_status(CUDNN_STATUS_BAD_PARAM, "x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cudnn_status(CUDNN_STATUS_NOT_SUPPORTED_SHAPE, "x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cudnn_status(CUDNN_STATUS_EXECUTION_FAILED, "x").code(), StatusCode::kInternal);
}

// A cuDNN handle needs a device: where there is none, its status says so as kUnavailable.
TEST(CudnnStatus, AHandleWithoutAGpuIsUnavailable) {
  int devices = 0;
  const bool gpu = cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
  cudnnHandle_t handle = nullptr;
  const Status made = cudnn_status(cudnnCreate(&handle), "cudnnCreate");
  if (gpu) {
    EXPECT_TRUE(made.is_ok()) << made.to_string();
  } else {
    EXPECT_EQ(made.code(), StatusCode::kUnavailable) << made.to_string();
  }
  if (handle != nullptr) cudnnDestroy(handle);
}

// The convolution's algorithm: cuDNN's ranking kept, passing over a candidate that failed, does
// not compute in the math mode asked, is not deterministic where asked, or needs more workspace
// than the limit; none left is an error naming what was asked.
TEST(CudnnAlgorithms, TheFirstRankedThatMeetsEveryNeed) {
  auto perf = [](cudnnConvolutionFwdAlgo_t algo, std::size_t memory, bool deterministic,
                 cudnnMathType_t math = CUDNN_DEFAULT_MATH, cudnnStatus_t status = CUDNN_STATUS_SUCCESS) {
    cudnnConvolutionFwdAlgoPerf_t p{};
    p.algo = algo;
    p.status = status;
    p.memory = memory;
    p.determinism = deterministic ? CUDNN_DETERMINISTIC : CUDNN_NON_DETERMINISTIC;
    p.mathType = math;
    return p;
  };
  const std::size_t kMiB = std::size_t{1} << 20;
  const cudnnConvolutionFwdAlgoPerf_t ranked[] = {
      perf(CUDNN_CONVOLUTION_FWD_ALGO_FFT, 0, true, CUDNN_DEFAULT_MATH, CUDNN_STATUS_NOT_SUPPORTED),
      perf(CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED, 0, true, CUDNN_TENSOR_OP_MATH),
      perf(CUDNN_CONVOLUTION_FWD_ALGO_GEMM, 0, false),
      perf(CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING, 900 * kMiB, true),
      perf(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, 4 * kMiB, true),
  };
  auto pick = [&](AlgorithmNeeds needs) { return pick_algorithm(ranked, 5, needs, "forward"); };
  auto limited = pick({true, MathMode::kFma, 64 * kMiB});
  ASSERT_TRUE(limited) << limited.status().to_string();
  EXPECT_EQ(limited->algo, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM) << "FFT tiling needs 900 MiB";
  auto unlimited = pick({true, MathMode::kFma, 0});
  ASSERT_TRUE(unlimited);
  EXPECT_EQ(unlimited->algo, CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING);
  auto tensor_cores = pick({true, MathMode::kTensorCores, 64 * kMiB});
  ASSERT_TRUE(tensor_cores);
  EXPECT_EQ(tensor_cores->algo, CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED);
  auto any = pick({false, MathMode::kFma, 64 * kMiB});
  ASSERT_TRUE(any);
  EXPECT_EQ(any->algo, CUDNN_CONVOLUTION_FWD_ALGO_GEMM) << "non-deterministic allowed";
  auto none = pick({true, MathMode::kFma, kMiB});
  ASSERT_FALSE(none);
  EXPECT_EQ(none.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(none.status().message().find("forward algorithm for this shape that is deterministic within a "
                                         "workspace of 1048576 bytes"),
            std::string::npos)
      << none.status().message();
}

}  // namespace
}  // namespace tensortier::dnn::cudnn
