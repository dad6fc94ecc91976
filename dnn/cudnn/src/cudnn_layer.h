// What the cuDNN backend's layers share (internal to dnn/cudnn): the handles they call through,
// plain layouts, a layer's device work as one runtime layer, workspaces as runtime objects, and
// the factory of each layer kind (one file each: conv_layer.cc, batch_norm_layer.cc, ...).
//
//   Network ─ LayerSpec ─▶ CudnnBackend::make_layer ─▶ make_conv / make_batch_norm / ... (this table)
//   Layer::forward ─▶ device_layer(engine, name, reads, writes, body): the layer marked, its
//                     objects pinned at their current addresses, body queues cuDNN/cuBLAS calls on
//                     the runtime's device stream; layer_end orders later copies after them.
//
// Ownership: the backend owns the Context; layers borrow it (the backend outlives its engines).
// Thread safety: none; one training thread.
#pragma once

#include <cublas_v2.h>
#include <cudnn.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tensortier/dnn/backend.h"
#include "tensortier/dnn/cudnn/descriptors.h"
#include "tensortier/dnn/engine.h"

namespace tensortier::dnn::cudnn {

struct Context {
  cudnnHandle_t cudnn = nullptr;
  cublasHandle_t cublas = nullptr;
  std::uintptr_t stream = 0;  // the runtime's device stream (a cudaStream_t)
  bool deterministic = true;  // algorithms that give the same bits every run
  MathMode math = MathMode::kFma;
  std::size_t workspace_limit_bytes = 0;  // a convolution's workspace at most (0: none)
};

// cuBLAS's status as a Status naming the call.
Status cublas_status(cublasStatus_t status, const char* call);
// Returns from the enclosing function with the call's error (cudnn_status, cublas_status).
#define TT_CUDNN(call) TENSORTIER_RETURN_IF_ERROR(::tensortier::dnn::cudnn::cudnn_status((call), #call))
#define TT_CUBLAS(call) TENSORTIER_RETURN_IF_ERROR(::tensortier::dnn::cudnn::cublas_status((call), #call))
// A launch's or the runtime's cudaError_t (as an int) as a Status naming the call.
Status cuda_call_status(int error, const char* call);

// Tensors here are laid out plain (plain_desc, layers.h), as cuDNN's NCHW descriptors describe them.

// The layer's device work as runtime layer `name`: marks it with these tensors (null entries
// skipped), then runs `body`, which queues its calls on the device stream; an error from body is
// returned after the layer ends.
Status device_layer(Engine& engine, std::string_view name, const std::vector<const Tensor*>& reads,
                    const std::vector<const Tensor*>& writes, const std::function<Status()>& body);

// A workspace of `bytes` (none for 0) as a runtime object: every device byte but the CUDA
// context's is counted. Released by the caller after its layer.
Result<Tensor> workspace(Engine& engine, const std::string& name, std::size_t bytes);

// A parameter (value and momentum, zero) of `dims` in the plain layout (make_param, layers.h).
Status plain_param(Engine& engine, const std::string& name, const Dims& dims, Param& p);
// Its values from the host (PyTorch's init drawn on the host, copied in).
Status set_param(Engine& engine, Param& p, const std::vector<float>& values);
// Conv and linear: the weight and the bias (null: none) of `layer` drawn as the CPU backend draws
// them (uniform_init_values).
Status init_weight_and_bias(Engine& engine, const std::string& layer, Param& weight, Param* bias,
                            std::size_t fan_in, std::uint64_t seed);

// The layers (each file's one factory).
std::unique_ptr<Layer> make_conv(const LayerSpec& spec, const ConvSpec& conv, Context& context);
std::unique_ptr<Layer> make_batch_norm(const LayerSpec& spec, const BatchNormSpec& bn, Context& context);
std::unique_ptr<Layer> make_relu(const LayerSpec& spec, Context& context);
std::unique_ptr<Layer> make_pool(const LayerSpec& spec, const PoolSpec& pool, Context& context);
std::unique_ptr<Layer> make_linear(const LayerSpec& spec, const LinearSpec& linear, Context& context);
std::unique_ptr<Layer> make_add(const LayerSpec& spec, Context& context);

}  // namespace tensortier::dnn::cudnn
