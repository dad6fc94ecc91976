// The cuDNN backend's layer descriptions (issue 37): for a LayerSpec and its input shapes, the cuDNN
// descriptors its calls take and, for the linear layer, the cuBLAS GEMMs. cuDNN's descriptor
// calls run on the host and need no device, so all of this is built and checked on a machine with
// no GPU (tests/gpu/cudnn_descriptors_test.cc: every layer's shape as cuDNN computes it against
// output_dims and the CPU backend, the GEMMs against PyTorch's formulas).
//
//   layer       cuDNN calls (forward / backward)                    descriptors here
//   conv        ConvolutionForward, BackwardData, BackwardFilter,   x, y, w (KCRS), conv, bias
//               BackwardBias; AddTensor for the bias
//   batch norm  BatchNormalizationForwardTraining / Backward         x, scale_bias (1,C,1,1)
//   relu        ActivationForward / ActivationBackward              x, relu
//   pool        PoolingForward / PoolingBackward                    x, y, pool
//   add         OpTensor (add) / the gradient copied                x, add
//   linear      cuBLAS sgemm x3 (forward, data, weights), one sgemv  linear_gemms(); y as N,O,1,1
//               for the bias gradient; AddTensor for the bias
//
// Tensors are NCHW float32, packed (a 2-D N x F tensor is N,F,1,1), the layouts the CPU backend's
// plain descriptors name. Math is FMA (no tensor-core TF32) unless asked: the GPU path is checked
// against the CPU path within 1e-4.
//
// Ownership: each Descriptor owns its cuDNN descriptor (destroyed with it). Thread safety: values
// made and used on one thread; the functions hold no state.
#pragma once

#include <cudnn.h>

#include <span>
#include <utility>

#include "tensortier/dnn/layer_spec.h"
#include "tensortier/status.h"

namespace tensortier::dnn::cudnn {

// `status` of `call` as a Status: ok for success; kUnavailable where cuDNN has no device to use
// (NOT_INITIALIZED, ARCH_MISMATCH, the runtime's own failure), kInvalidArgument for a parameter
// it refused (BAD_PARAM and its kinds, NOT_SUPPORTED), else kInternal; each naming the call and
// cuDNN's text.
Status cudnn_status(cudnnStatus_t status, const char* call);

// A cuDNN descriptor, destroyed with its owner.
template <typename T, cudnnStatus_t (*Destroy)(T)>
class Descriptor {
 public:
  Descriptor() = default;
  explicit Descriptor(T handle) : handle_(handle) {}
  ~Descriptor() {
    if (handle_ != nullptr) (void)Destroy(handle_);
  }
  Descriptor(Descriptor&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  Descriptor& operator=(Descriptor&& other) noexcept {
    std::swap(handle_, other.handle_);
    return *this;
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  T get() const { return handle_; }

 private:
  T handle_ = nullptr;
};
using TensorDescriptor = Descriptor<cudnnTensorDescriptor_t, cudnnDestroyTensorDescriptor>;
using FilterDescriptor = Descriptor<cudnnFilterDescriptor_t, cudnnDestroyFilterDescriptor>;
using ConvolutionDescriptor = Descriptor<cudnnConvolutionDescriptor_t, cudnnDestroyConvolutionDescriptor>;
using PoolingDescriptor = Descriptor<cudnnPoolingDescriptor_t, cudnnDestroyPoolingDescriptor>;
using ActivationDescriptor = Descriptor<cudnnActivationDescriptor_t, cudnnDestroyActivationDescriptor>;
using OpTensorDescriptor = Descriptor<cudnnOpTensorDescriptor_t, cudnnDestroyOpTensorDescriptor>;

// A packed NCHW float tensor of these dims (2-D: N,F,1,1; 1-D: 1,C,1,1, a bias).
Result<TensorDescriptor> tensor_descriptor(const Dims& dims);
// The dims a tensor descriptor describes (N, C, H, W).
Result<Dims> dims_of(const TensorDescriptor& tensor);

enum class MathMode { kFma, kTensorCores };

struct ConvDescriptors {
  TensorDescriptor x, y, bias;  // bias: 1,K,1,1 (also without one, for its gradient's shape)
  FilterDescriptor w;           // K, C, R, S
  ConvolutionDescriptor conv;   // cross-correlation, as every framework's "convolution"
};
struct PoolDescriptors {
  TensorDescriptor x, y;
  PoolingDescriptor pool;  // max: deterministic backward; average: padding counted (PyTorch's)
};
struct BatchNormDescriptors {
  TensorDescriptor x;
  TensorDescriptor scale_bias;  // 1,C,1,1 (cuDNN's derived descriptor; also the mean and variance)
};
struct ReluDescriptors {
  TensorDescriptor x;
  ActivationDescriptor relu;
};
struct AddDescriptors {
  TensorDescriptor x;
  OpTensorDescriptor add;
};

// Each layer's descriptors for its input dims (one input; add: the first, both alike). Errors:
// output_dims()'s for the spec and inputs; a conv or pool window that passes the end of the padded
// input, which oneDNN runs and cuDNN (as PyTorch) does not; cuDNN's refusals (cudnn_status).
Result<ConvDescriptors> conv_descriptors(const ConvSpec& spec, const Dims& input,
                                         MathMode math = MathMode::kFma);
Result<PoolDescriptors> pool_descriptors(const PoolSpec& spec, const Dims& input);
Result<BatchNormDescriptors> batch_norm_descriptors(const Dims& input);
Result<ReluDescriptors> relu_descriptors(const Dims& input);
Result<AddDescriptors> add_descriptors(const Dims& input);

// The output dims as cuDNN computes them from the layer's descriptors (conv and pool: cuDNN's
// own output-dimension calls; batch norm, relu, add: their x; linear: N x out). The cuDNN
// backend sizes its outputs with these; Network::build checks them against output_dims().
Result<Dims> cudnn_output_dims(const LayerSpec& spec, std::span<const Dims> inputs);

// One cuBLAS sgemm in column-major terms: C (m x n, ld ldc) = alpha op(A) op(B) + beta C, where
// op transposes when asked. The linear layer's operands are row-major N x F (input), O x F
// (weights, PyTorch's), N x O (output): read column-major they are their transposes, which the
// calls below account for.
enum class Operand { kInput, kWeights, kOutput, kDiffOutput, kDiffInput, kDiffWeights, kOnes, kDiffBias };
struct Gemm {
  bool transpose_a = false, transpose_b = false;
  int m = 0, n = 0, k = 0;
  Operand a{}, b{}, c{};
  int lda = 0, ldb = 0, ldc = 0;
};
struct LinearGemms {
  Gemm forward;           // output = input weights^T             (then + bias, broadcast)
  Gemm backward_data;     // diff_input = diff_output weights
  Gemm backward_weights;  // diff_weights = diff_output^T input
  Gemm backward_bias;     // diff_bias = diff_output^T ones(N)   (a GEMM of n = 1: cuBLAS's sgemv)
};
// For a batch of `batch` samples of `features` inputs and `out` outputs. Errors: a count below 1
// or above cuBLAS's int range.
Result<LinearGemms> linear_gemms(std::int64_t batch, std::int64_t features, std::int64_t out);

}  // namespace tensortier::dnn::cudnn
