// cuDNN descriptors and cuBLAS GEMMs of the cuDNN backend's layers (see descriptors.h).
#include "tensortier/dnn/cudnn/descriptors.h"

#include <array>
#include <limits>
#include <string_view>
#include <variant>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tensortier::dnn::cudnn {
namespace {

#define TT_CUDNN(call) TENSORTIER_RETURN_IF_ERROR(cudnn_status((call), #call))

// The NCHW a tensor of these dims is stored as (see tensor_descriptor).
Result<std::array<int, 4>> nchw(const Dims& dims) {
  Dims four;
  if (dims.size() == 4)
    four = dims;
  else if (dims.size() == 2)
    four = {dims[0], dims[1], 1, 1};
  else if (dims.size() == 1)
    four = {1, dims[0], 1, 1};
  else
    return invalid_argument(fmt::format("a tensor of {} dims ({}): cuDNN's layers take 1, 2 or 4",
                                        dims.size(), fmt::join(dims, "x")));
  std::array<int, 4> out{};
  for (std::size_t i = 0; i < 4; ++i) {
    if (four[i] < 1 || four[i] > std::numeric_limits<int>::max()) {
      return invalid_argument(fmt::format("tensor dims {}: each must be 1..2^31-1", fmt::join(dims, "x")));
    }
    out[i] = static_cast<int>(four[i]);
  }
  return out;
}

Result<int> as_int(std::int64_t value, const char* what) {
  if (value < 1 || value > std::numeric_limits<int>::max())
    return invalid_argument(fmt::format("{} {}: must be 1..2^31-1 for cuBLAS", what, value));
  return static_cast<int>(value);
}

// cuDNN (as PyTorch) takes only windows inside the padded input; oneDNN, and so the CPU backend
// and output_dims(), also one that passes its end by less than a stride (it reads the elements the
// window covers: VGG's last 2x2 pool on a 1x1 map). Such a layer is refused here, saying so.
Status window_fits(std::string_view layer, const Dims& input, int kernel, int padding) {
  if (input.size() == 4 &&
      (input[2] + 2 * std::int64_t{padding} < kernel || input[3] + 2 * std::int64_t{padding} < kernel)) {
    return invalid_argument(fmt::format(
        "{}: a {}x{} window passes the end of a {}x{} input padded by {}: cuDNN (as PyTorch) cannot run it, "
        "the "
        "CPU backend's oneDNN reads the elements the window covers; give this layer a larger input",
        layer, kernel, kernel, input[2], input[3], padding));
  }
  return Status::ok();
}

}  // namespace

Status cudnn_status(cudnnStatus_t status, const char* call) {
  if (status == CUDNN_STATUS_SUCCESS) return Status::ok();
  const std::string text =
      fmt::format("{}: {} ({})", call, cudnnGetErrorString(status), static_cast<int>(status));
  // cuDNN 9 numbers its statuses by class: 1xxx not initialized, 2xxx bad parameters, 3xxx not
  // supported (3005-3009: the driver, runtime, architecture or a sublibrary), 4xxx internal, 5xxx
  // execution failed.
  const int code = static_cast<int>(status);
  if (status == CUDNN_STATUS_NOT_INITIALIZED || status == CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED ||
      (code >= CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER &&
       code <= CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE)) {
    return unavailable(text + "; cuDNN has no GPU it can use here");
  }
  if (code >= CUDNN_STATUS_BAD_PARAM && code < CUDNN_STATUS_INTERNAL_ERROR) return invalid_argument(text);
  return internal_error(text);
}

Result<TensorDescriptor> tensor_descriptor(const Dims& dims) {
  auto shape = nchw(dims);
  if (!shape) return shape.status();
  const auto [n, c, h, w] = shape.value();
  cudnnTensorDescriptor_t raw = nullptr;
  TT_CUDNN(cudnnCreateTensorDescriptor(&raw));
  TensorDescriptor desc(raw);
  TT_CUDNN(cudnnSetTensor4dDescriptor(raw, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, h, w));
  return desc;
}

Result<Dims> dims_of(const TensorDescriptor& tensor) {
  cudnnDataType_t type{};
  int n = 0, c = 0, h = 0, w = 0, sn = 0, sc = 0, sh = 0, sw = 0;
  TT_CUDNN(cudnnGetTensor4dDescriptor(tensor.get(), &type, &n, &c, &h, &w, &sn, &sc, &sh, &sw));
  return Dims{n, c, h, w};
}

Result<ConvDescriptors> conv_descriptors(const ConvSpec& spec, const Dims& input, MathMode math) {
  const std::array<Dims, 1> in{input};
  auto out = output_dims(make_conv("conv", spec), in);
  if (!out) return out.status();
  TENSORTIER_RETURN_IF_ERROR(window_fits("conv", input, spec.kernel, spec.padding));
  ConvDescriptors d;
  auto x = tensor_descriptor(input);
  if (!x) return x.status();
  d.x = std::move(x).value();
  auto bias = tensor_descriptor(Dims{spec.out_channels});
  if (!bias) return bias.status();
  d.bias = std::move(bias).value();
  cudnnFilterDescriptor_t w = nullptr;
  TT_CUDNN(cudnnCreateFilterDescriptor(&w));
  d.w = FilterDescriptor(w);
  TT_CUDNN(cudnnSetFilter4dDescriptor(w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, spec.out_channels,
                                      static_cast<int>(input[1]), spec.kernel, spec.kernel));
  cudnnConvolutionDescriptor_t conv = nullptr;
  TT_CUDNN(cudnnCreateConvolutionDescriptor(&conv));
  d.conv = ConvolutionDescriptor(conv);
  TT_CUDNN(cudnnSetConvolution2dDescriptor(conv, spec.padding, spec.padding, spec.stride, spec.stride, 1, 1,
                                           CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  TT_CUDNN(cudnnSetConvolutionMathType(conv, math == MathMode::kFma ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH));
  int n = 0, k = 0, h = 0, wd = 0;
  TT_CUDNN(cudnnGetConvolution2dForwardOutputDim(conv, d.x.get(), w, &n, &k, &h, &wd));
  auto y = tensor_descriptor(Dims{n, k, h, wd});
  if (!y) return y.status();
  d.y = std::move(y).value();
  return d;
}

Result<PoolDescriptors> pool_descriptors(const PoolSpec& spec, const Dims& input) {
  const std::array<Dims, 1> in{input};
  auto out = output_dims(LayerSpec{"pool", spec}, in);
  if (!out) return out.status();
  if (!spec.global) TENSORTIER_RETURN_IF_ERROR(window_fits("pool", input, spec.kernel, spec.padding));
  PoolDescriptors d;
  auto x = tensor_descriptor(input);
  if (!x) return x.status();
  d.x = std::move(x).value();
  const int window_h = spec.global ? static_cast<int>(input[2]) : spec.kernel;
  const int window_w = spec.global ? static_cast<int>(input[3]) : spec.kernel;
  const int pad = spec.global ? 0 : spec.padding;
  const int stride = spec.global ? 1 : spec.stride;
  cudnnPoolingDescriptor_t pool = nullptr;
  TT_CUDNN(cudnnCreatePoolingDescriptor(&pool));
  d.pool = PoolingDescriptor(pool);
  const cudnnPoolingMode_t mode = spec.kind == PoolKind::kMax ? CUDNN_POOLING_MAX_DETERMINISTIC
                                                              : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
  TT_CUDNN(cudnnSetPooling2dDescriptor(pool, mode, CUDNN_NOT_PROPAGATE_NAN, window_h, window_w, pad, pad,
                                       stride, stride));
  int n = 0, c = 0, h = 0, w = 0;
  TT_CUDNN(cudnnGetPooling2dForwardOutputDim(pool, d.x.get(), &n, &c, &h, &w));
  auto y = tensor_descriptor(Dims{n, c, h, w});
  if (!y) return y.status();
  d.y = std::move(y).value();
  return d;
}

Result<BatchNormDescriptors> batch_norm_descriptors(const Dims& input) {
  BatchNormDescriptors d;
  auto x = tensor_descriptor(input);
  if (!x) return x.status();
  d.x = std::move(x).value();
  cudnnTensorDescriptor_t raw = nullptr;
  TT_CUDNN(cudnnCreateTensorDescriptor(&raw));
  d.scale_bias = TensorDescriptor(raw);
  TT_CUDNN(cudnnDeriveBNTensorDescriptor(raw, d.x.get(), CUDNN_BATCHNORM_SPATIAL));
  return d;
}

Result<ReluDescriptors> relu_descriptors(const Dims& input) {
  ReluDescriptors d;
  auto x = tensor_descriptor(input);
  if (!x) return x.status();
  d.x = std::move(x).value();
  cudnnActivationDescriptor_t relu = nullptr;
  TT_CUDNN(cudnnCreateActivationDescriptor(&relu));
  d.relu = ActivationDescriptor(relu);
  TT_CUDNN(cudnnSetActivationDescriptor(relu, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0));
  return d;
}

Result<AddDescriptors> add_descriptors(const Dims& input) {
  AddDescriptors d;
  auto x = tensor_descriptor(input);
  if (!x) return x.status();
  d.x = std::move(x).value();
  cudnnOpTensorDescriptor_t add = nullptr;
  TT_CUDNN(cudnnCreateOpTensorDescriptor(&add));
  d.add = OpTensorDescriptor(add);
  TT_CUDNN(cudnnSetOpTensorDescriptor(add, CUDNN_OP_TENSOR_ADD, CUDNN_DATA_FLOAT, CUDNN_NOT_PROPAGATE_NAN));
  return d;
}

Result<Dims> cudnn_output_dims(const LayerSpec& spec, std::span<const Dims> inputs) {
  auto checked = output_dims(spec, inputs);  // the spec's own checks, errors naming the layer
  if (!checked) return checked;
  const Dims& in = inputs[0];
  auto named = [&](const Status& s) {
    return Result<Dims>(Status(s.code(), fmt::format("layer '{}': {}", spec.name, s.message())));
  };
  if (const auto* c = std::get_if<ConvSpec>(&spec.kind)) {
    auto d = conv_descriptors(*c, in);
    return d ? dims_of(d.value().y) : named(d.status());
  }
  if (const auto* p = std::get_if<PoolSpec>(&spec.kind)) {
    auto d = pool_descriptors(*p, in);
    return d ? dims_of(d.value().y) : named(d.status());
  }
  if (const auto* l = std::get_if<LinearSpec>(&spec.kind)) {
    std::int64_t features = 1;
    for (std::size_t i = 1; i < in.size(); ++i) features *= in[i];
    auto gemms = linear_gemms(in[0], features, l->out_features);
    if (!gemms) return gemms.status();
    return Dims{gemms.value().forward.n, gemms.value().forward.m};  // C: out x N, column-major
  }
  // Batch norm, relu, add: y is described as x.
  Result<TensorDescriptor> x = tensor_descriptor(in);
  if (std::holds_alternative<BatchNormSpec>(spec.kind)) {
    auto d = batch_norm_descriptors(in);
    if (!d) return d.status();
    x = std::move(d.value().x);
  }
  if (!x) return x.status();
  auto dims = dims_of(x.value());
  if (!dims || in.size() == 4) return dims;
  return Dims(dims.value().begin(), dims.value().begin() + static_cast<std::ptrdiff_t>(in.size()));
}

Result<LinearGemms> linear_gemms(std::int64_t batch, std::int64_t features, std::int64_t out) {
  auto n = as_int(batch, "batch");
  if (!n) return n.status();
  auto f = as_int(features, "input features");
  if (!f) return f.status();
  auto o = as_int(out, "output features");
  if (!o) return o.status();
  const int N = n.value(), F = f.value(), O = o.value();
  LinearGemms g;
  // Column-major: input is F x N, weights F x O, output O x N.
  // output (O x N) = weights^T (O x F) input (F x N)
  g.forward = {true, false, O, N, F, Operand::kWeights, Operand::kInput, Operand::kOutput, F, F, O};
  // diff_input (F x N) = weights (F x O) diff_output (O x N)
  g.backward_data = {false, false, F, N, O, Operand::kWeights, Operand::kDiffOutput, Operand::kDiffInput,
                     F,     O,     F};
  // diff_weights (F x O) = input (F x N) diff_output^T (N x O)
  g.backward_weights = {false, true, F, O, N, Operand::kInput, Operand::kDiffOutput, Operand::kDiffWeights,
                        F,     O,    F};
  // diff_bias (O x 1) = diff_output (O x N) ones (N x 1)
  g.backward_bias = {false, false, O, 1, N, Operand::kDiffOutput, Operand::kOnes, Operand::kDiffBias,
                     O,     N,     O};
  return g;
}

}  // namespace tensortier::dnn::cudnn
