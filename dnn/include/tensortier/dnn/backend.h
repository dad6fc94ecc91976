// Backend: how a Network's layers and its loss and optimizer are computed. The Network, the model
// builders and the runtime's view (objects, layer marks) are the same for every backend; a backend
// makes each LayerSpec into a Layer of its own and computes the few operations the Network does
// between layers.
//
//   backend  layers                          loss, gradient sums, SGD     tensors live on
//   cpu      oneDNN 2.6 primitives           loops over floats (host)     the runtime's host tiers
//   cuda     cuDNN and cuBLAS calls          kernels, cublasSaxpy         a cuda tier (and pinned)
//
// The cuda backend is dnn/cudnn/cudnn_backend.h (built with the GPU backend; not yet run on a GPU).
//
// Ownership: a Backend outlives every Engine that uses it (cpu_backend() is a static one).
// Thread safety: a backend's calls run on the training thread of the Engine they are given; the
// cpu backend holds no state of its own.
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>

#include "tensortier/dnn/layer_spec.h"
#include "tensortier/dnn/layers.h"

namespace tensortier::dnn {

// SGD as torch.optim.SGD (dampening 0, no Nesterov).
struct SgdOptions {
  float learning_rate = 0.01F;
  float momentum = 0.9F;
  float weight_decay = 0.0F;
};

struct StepResult {
  double loss = 0;          // mean cross-entropy over the batch
  std::size_t correct = 0;  // samples whose top logit is their label
  std::size_t count = 0;    // samples in the batch
};

class Backend {
 public:
  virtual ~Backend() = default;
  // "cpu (oneDNN 2.6)".
  virtual std::string_view name() const = 0;
  // Whether its layers run where device memory is theirs to read and write (a GPU's). The CPU
  // backend's do not: the Engine refuses its tensors a runtime's device tier.
  virtual bool uses_device_memory() const { return false; }
  // A layer for `spec`, not built yet (Layer::build sizes it).
  virtual Result<std::unique_ptr<Layer>> make_layer(const LayerSpec& spec) = 0;
  // Softmax cross-entropy of `logits` (N x classes, plain) against `labels` (N int32) as one
  // marked layer "loss": the mean loss and the top-1 count; with `diff`, the loss's gradient with
  // respect to the logits. Errors: labels of another count or outside 0..classes-1, naming the
  // first such label and its sample (the gradient's bytes are then unspecified).
  virtual Result<StepResult> softmax_cross_entropy(Engine& engine, const Tensor& logits, const Tensor& labels,
                                                   const Tensor* diff) = 0;
  // sum += more, elementwise over tensors of one layout, as one marked layer `layer`.
  virtual Status accumulate(Engine& engine, std::string_view layer, const Tensor& sum,
                            const Tensor& more) = 0;
  // One SGD step of `param` from its .grad (SgdOptions; weight decay where param.decay), as one
  // marked layer "sgd.<name>".
  virtual Status sgd_update(Engine& engine, Param& param, const SgdOptions& sgd) = 0;
};

// The CPU backend: the oneDNN layers of src/layers/ (one file each), the loss and SGD as loops over floats.
Backend& cpu_backend();

}  // namespace tensortier::dnn
