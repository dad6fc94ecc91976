// The cuDNN backend (see cudnn_backend.h): its handles, the table of layer kinds, the loss, the
// gradient sums and SGD.
#include "tensortier/dnn/cudnn/cudnn_backend.h"

#include <cuda_runtime_api.h>

#include <fmt/format.h>

#include "cudnn_layer.h"
#include "kernels.h"

namespace tensortier::dnn::cudnn {

Result<std::unique_ptr<CudnnBackend>> CudnnBackend::create(Runtime& runtime, BackendOptions options) {
  if (runtime.device_stream() == 0) {
    return failed_precondition(
        "the cuda backend's layers run on a GPU, and this runtime has no device tier: give a cuda tier "
        "(e.g. --tiers fast=cuda:0,slow=pinned:8GiB)");
  }
  // cuDNN and cuBLAS read and write the tiers' memory from the GPU: pageable host memory (a dram
  // tier's mmap ranges) faults the context there without HMM; only device and pinned memory do.
  for (std::size_t t = 0; t < runtime.tier_count(); ++t) {
    const Tier& tier = runtime.tier(static_cast<TierIndex>(t));
    if (tier.kind() != TierKind::kCuda && tier.kind() != TierKind::kPinned) {
      return failed_precondition(
          fmt::format("the cuda backend's layers run on the GPU, which cannot reach tier '{}' ({}, pageable "
                      "host memory): "
                      "give only cuda and pinned tiers (e.g. --tiers fast=cuda:0:8GiB,slow=pinned:32GiB)",
                      tier.name(), to_string(tier.kind())));
    }
  }
  auto context = std::make_unique<Context>();
  context->stream = runtime.device_stream();
  context->workspace_limit_bytes = options.workspace_limit_bytes;
  for (std::size_t t = 0; t < runtime.tier_count() && context->workspace_limit_bytes == 0; ++t) {
    const Tier& tier = runtime.tier(static_cast<TierIndex>(t));
    if (tier.kind() == TierKind::kCuda) context->workspace_limit_bytes = tier.budget_bytes() / 8;
  }
  context->deterministic = options.deterministic;
  context->math = options.math;
  std::unique_ptr<CudnnBackend> backend(new CudnnBackend(std::move(context)));  // frees the handles on error
  Context& c = *backend->context_;
  // The handles belong to the device current at their creation: the runtime's (its stream's, for
  // cuda:N), whichever device this thread had current before.
  int device = 0;
  TENSORTIER_RETURN_IF_ERROR(cuda_call_status(
      cudaStreamGetDevice(reinterpret_cast<cudaStream_t>(c.stream), &device), "cudaStreamGetDevice"));
  TENSORTIER_RETURN_IF_ERROR(cuda_call_status(cudaSetDevice(device), "cudaSetDevice"));
  TT_CUDNN(cudnnCreate(&c.cudnn));
  TT_CUDNN(cudnnSetStream(c.cudnn, reinterpret_cast<cudaStream_t>(c.stream)));
  TT_CUBLAS(cublasCreate(&c.cublas));
  TT_CUBLAS(cublasSetStream(c.cublas, reinterpret_cast<cudaStream_t>(c.stream)));
  TT_CUBLAS(cublasSetMathMode(
      c.cublas, options.math == MathMode::kFma ? CUBLAS_PEDANTIC_MATH : CUBLAS_TF32_TENSOR_OP_MATH));
  backend->name_ = fmt::format("cuda (cuDNN {}, cuBLAS; {}{})", cudnnGetVersion(),
                               options.math == MathMode::kFma ? "FMA math" : "tensor cores",
                               options.deterministic ? ", deterministic" : "");
  return backend;
}

CudnnBackend::CudnnBackend(std::unique_ptr<Context> context) : context_(std::move(context)) {}

CudnnBackend::~CudnnBackend() {
  if (context_->cublas != nullptr) (void)cublasDestroy(context_->cublas);
  if (context_->cudnn != nullptr) (void)cudnnDestroy(context_->cudnn);
}

Result<std::unique_ptr<Layer>> CudnnBackend::make_layer(const LayerSpec& spec) {
  Context& c = *context_;
  return std::visit(
      [&](const auto& kind) -> std::unique_ptr<Layer> {
        using K = std::decay_t<decltype(kind)>;
        if constexpr (std::is_same_v<K, ConvSpec>) return make_conv(spec, kind, c);
        if constexpr (std::is_same_v<K, BatchNormSpec>) return make_batch_norm(spec, kind, c);
        if constexpr (std::is_same_v<K, ReluSpec>) return make_relu(spec, c);
        if constexpr (std::is_same_v<K, PoolSpec>) return make_pool(spec, kind, c);
        if constexpr (std::is_same_v<K, LinearSpec>) return make_linear(spec, kind, c);
        if constexpr (std::is_same_v<K, AddSpec>) return make_add(spec, c);
      },
      spec.kind);
}

// The rows' losses come back as doubles and are summed on the host in row order. Labels are
// checked by the kernel, which flags a row whose label is outside 0..classes-1 (correct -1, the
// label in its loss, its gradient row zero): the same error as the CPU backend's, from the
// read-back the losses take anyway, with no copy of the labels to the host each step.
Result<StepResult> CudnnBackend::softmax_cross_entropy(Engine& engine, const Tensor& logits,
                                                       const Tensor& labels, const Tensor* diff) {
  const auto n = static_cast<std::size_t>(logits.dims()[0]);
  const auto classes = static_cast<std::size_t>(logits.dims()[1]);
  if (labels.bytes() != n * sizeof(std::int32_t))
    return invalid_argument("labels do not match the batch size");
  // Each row's loss (a double, as two floats) and whether it was right (a float's bits).
  auto rows =
      engine.allocate("loss.rows", plain_desc({static_cast<std::int64_t>(3 * n)}), kWorkspaces, false);
  if (!rows) return rows.status();
  Tensor& r = rows.value();
  Status status = device_layer(engine, "loss", {&logits, &labels}, {diff, &r}, [&]() -> Status {
    auto* losses = static_cast<double*>(r.address());
    auto* correct = reinterpret_cast<std::int32_t*>(losses + n);
    return cuda_call_status(
        launch_softmax_xent(logits.data(), static_cast<const std::int32_t*>(labels.address()),
                            static_cast<int>(n), static_cast<int>(classes), losses, correct,
                            diff != nullptr ? diff->data() : nullptr, context_->stream),
        "softmax cross-entropy kernel");
  });
  StepResult result;
  result.count = n;
  Status bad_label = Status::ok();
  if (status.is_ok()) {
    status = engine.read_to_host(r, [&](const void* b) {
      const auto* losses = static_cast<const double*>(b);
      const auto* correct = reinterpret_cast<const std::int32_t*>(losses + n);
      double total = 0;
      for (std::size_t i = 0; i < n; ++i) {
        if (correct[i] < 0) {  // the kernel's flag: a label outside 0..classes-1
          if (bad_label.is_ok()) {
            bad_label = invalid_argument(fmt::format("label {} of sample {} is outside 0..{}",
                                                     static_cast<std::int64_t>(losses[i]), i, classes - 1));
          }
          continue;
        }
        total += losses[i];
        result.correct += static_cast<std::size_t>(correct[i]);
      }
      result.loss = total / static_cast<double>(n);
    });
  }
  if (status.is_ok()) status = bad_label;
  engine.release(r);
  if (!status.is_ok()) return status;
  return result;
}

Status CudnnBackend::accumulate(Engine& engine, std::string_view layer, const Tensor& sum,
                                const Tensor& more) {
  return device_layer(engine, layer, {&sum, &more}, {&sum}, [&]() -> Status {
    const float one = 1;
    // The 64-bit count: a tensor of 2^31 elements or more (8 GiB of floats) would wrap an int.
    TT_CUBLAS(cublasSaxpy_64(context_->cublas, static_cast<std::int64_t>(sum.elements()), &one, more.data(),
                             1, sum.data(), 1));
    return Status::ok();
  });
}

Status CudnnBackend::sgd_update(Engine& engine, Param& p, const SgdOptions& sgd) {
  return device_layer(
      engine, "sgd." + p.value.name(), {&p.grad, &p.value, &p.momentum}, {&p.value, &p.momentum},
      [&]() -> Status {
        return cuda_call_status(
            launch_sgd(p.value.data(), p.momentum.data(), p.grad.data(), p.value.elements(),
                       sgd.learning_rate, sgd.momentum, p.decay ? sgd.weight_decay : 0.0F, context_->stream),
            "SGD kernel");
      });
}

}  // namespace tensortier::dnn::cudnn

// tensortier-train and tensortier-bench load this backend as a module for --backend cuda
// (dnn/backend_by_name.cc, load_module.h) and make it through this.
extern "C" __attribute__((visibility("default"))) void tensortier_dnn_make_cudnn_backend(
    tensortier::Runtime* runtime, bool tf32,
    tensortier::Result<std::unique_ptr<tensortier::dnn::Backend>>* out) {
  tensortier::dnn::cudnn::BackendOptions options;
  options.math =
      tf32 ? tensortier::dnn::cudnn::MathMode::kTensorCores : tensortier::dnn::cudnn::MathMode::kFma;
  auto made = tensortier::dnn::cudnn::CudnnBackend::create(*runtime, options);
  if (!made) {
    *out = made.status();
    return;
  }
  *out = std::unique_ptr<tensortier::dnn::Backend>(std::move(made).value());
}
