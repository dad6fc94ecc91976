// CudnnBackend: the Backend (dnn/backend.h) whose layers are cuDNN and cuBLAS calls on a GPU, over
// tensors that are runtime objects in the runtime's device tier (a cuda tier; past its budget,
// pinned host memory, which the device reads over the link). The Network, the model builders and
// the runtime's view (objects, layer marks, moves) are the CPU backend's.
//
//   kind        calls (forward / backward)                                  file
//   conv        ConvolutionForward / BackwardData, BackwardFilter, BackwardBias conv_layer.cc
//   batch norm  BatchNormalizationForwardTraining (Inference) / Backward     batch_norm_layer.cc
//   relu, pool, add  ActivationForward, PoolingForward, OpTensor / ...Backward, a copy  elementwise_layers.cc
//   linear      cublasSgemm x3, AddTensor, ConvolutionBackwardBias           linear_layer.cc
//   loss, SGD   kernels of our own; gradient sums: cublasSaxpy               kernels.cu, cudnn_backend.cc
//
// Every layer queues its calls on the runtime's device stream (Runtime::device_stream()) inside
// its layer mark, so the copy engine orders moves after them and the layer clock times them.
// Workspaces are runtime objects for the call that needs them, each at most the backend's limit
// (algorithm_choice.h). ReLUs run in place where the graph allows, as the CPU backend's; labels are
// checked by the loss kernel, not read back. Deterministic (the default):
// convolution algorithms that give the same bits every run, FMA math (no TF32), so runs under
// different policies are bit-identical.
//
// Not yet run on a GPU by this project's checks (none was lent since it was written): the device
// check (tools/device_check_gpu.sh) compares it with the CPU backend; docs/RESULTS.md says what ran.
//
// Ownership: the backend owns its cuDNN and cuBLAS handles; it borrows the runtime, which must
// outlive it, and must outlive the engines that use it. Thread safety: one training thread.
#pragma once

#include <memory>
#include <string>

#include "tensortier/dnn/backend.h"
#include "tensortier/dnn/cudnn/descriptors.h"
#include "tensortier/runtime.h"

namespace tensortier::dnn::cudnn {

struct Context;  // cudnn_layer.h

struct BackendOptions {
  bool deterministic = true;
  MathMode math = MathMode::kFma;
  // The most workspace one convolution call may take (algorithms that need more are passed over);
  // 0: an eighth of the cuda tier's budget, so a workspace never crowds the tensors out of it.
  std::size_t workspace_limit_bytes = 0;
};

class CudnnBackend final : public Backend {
 public:
  // On the runtime's device (its stream's, made current on this thread for the handles). Errors:
  // kFailedPrecondition where the runtime has no device tier (naming the tier spec to give);
  // kUnavailable where CUDA, cuDNN or cuBLAS find no GPU to use.
  static Result<std::unique_ptr<CudnnBackend>> create(Runtime& runtime, BackendOptions options = {});
  ~CudnnBackend() override;
  CudnnBackend(const CudnnBackend&) = delete;
  CudnnBackend& operator=(const CudnnBackend&) = delete;

  std::string_view name() const override { return name_; }
  bool uses_device_memory() const override { return true; }
  Result<std::unique_ptr<Layer>> make_layer(const LayerSpec& spec) override;
  Result<StepResult> softmax_cross_entropy(Engine& engine, const Tensor& logits, const Tensor& labels,
                                           const Tensor* diff) override;
  Status accumulate(Engine& engine, std::string_view layer, const Tensor& sum, const Tensor& more) override;
  Status sgd_update(Engine& engine, Param& param, const SgdOptions& sgd) override;

 private:
  explicit CudnnBackend(std::unique_ptr<Context> context);
  std::unique_ptr<Context> context_;
  std::string name_;
};

}  // namespace tensortier::dnn::cudnn
