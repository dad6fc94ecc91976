// Network: layers wired as a directed acyclic graph (chains and residual branches), trained with
// softmax cross-entropy and SGD, every tensor a runtime object.
//
// Per training step: forward runs every node in order, allocating each output (kActivations);
// the loss layer writes the gradient of the logits; backward runs the nodes in reverse, giving
// each input its gradient (kGradients; summed where an output feeds several nodes) and freeing
// each node's output and gradient as soon as its backward has run, the way a framework's
// autograd frees them. Then SGD updates every parameter (one marked layer per parameter).
// With Engine::in_place_relu, a ReLU whose input no other node reads (and whose producer's
// backward does not read it) writes over that input's object instead of allocating its own.
//
// Ownership: the Network owns its layers and, through them, the parameters. The caller owns the
// batch tensors. Thread safety: one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

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

// One batch, owned by the caller: images (N,C,H,W f32) and labels (N s32), both runtime objects.
struct Batch {
  Tensor images;
  Tensor labels;
};

class Network {
 public:
  static constexpr int kInput = -1;  // node id of the input batch

  explicit Network(std::string name) : name_(std::move(name)) {}
  const std::string& name() const { return name_; }

  // Adds a layer that reads the given nodes' outputs; returns its node id.
  int add(std::unique_ptr<Layer> layer, std::vector<int> inputs);
  // Adds a layer that reads the last node added (or the input, for the first).
  int add(std::unique_ptr<Layer> layer) { return add(std::move(layer), {last()}); }
  int last() const {
    return static_cast<int>(nodes_.size()) - 1 >= 0 ? static_cast<int>(nodes_.size()) - 1 : kInput;
  }

  // Builds every layer for this input shape (N, C, H, W) and initializes parameters from `seed`.
  // A batch of another size N' (same C, H, W: an epoch's last partial batch) may be trained or
  // evaluated later: the first such step builds the layers' primitives for N' (cached, kept for
  // the next batch of that size); parameters are shared.
  Status build(Engine& engine, const dnnl::memory::dims& input_dims, std::uint64_t seed);
  // The shape the network was built for.
  const dnnl::memory::dims& input_dims() const { return input_dims_; }

  // Forward, loss, backward and the SGD update.
  Result<StepResult> train_step(Engine& engine, const Batch& batch, const SgdOptions& sgd);
  // Forward, loss and backward only: parameters' .grad hold the gradients afterwards.
  Result<StepResult> compute_gradients(Engine& engine, const Batch& batch);
  // Forward in inference mode (batch norm uses running statistics); no gradients.
  Result<StepResult> evaluate(Engine& engine, const Batch& batch);

  // The layers in the order they run forward.
  std::vector<const Layer*> layers() const;

  // Parameters in a fixed order (layer order, then each layer's own), with their names.
  std::vector<std::pair<std::string, Param*>> params();
  std::size_t parameter_count();

 private:
  struct Node {
    std::unique_ptr<Layer> layer;
    std::vector<int> inputs;
    dnnl::memory::desc output_desc;  // for current_dims_
    Tensor output;                   // empty for a node in place: its output is in_place_of's
    Tensor diff;
    int in_place_of = -1;  // the node whose output this one overwrites (Engine::in_place_relu)
  };
  // A node's output tensor (the input batch for kInput; an in-place node's is its input's).
  const Tensor& output_of(int node) const;
  // Makes every layer run its primitives for inputs of these dims (building them the first time).
  Status use_shape(Engine& engine, const dnnl::memory::dims& input_dims);
  Status forward(Engine& engine, const Tensor& images, bool training);
  Result<StepResult> loss(Engine& engine, const Batch& batch, bool with_gradient);
  Status backward(Engine& engine);
  Status sgd_update(Engine& engine, const SgdOptions& sgd);
  void release_outputs(Engine& engine);

  std::string name_;
  std::vector<Node> nodes_;
  dnnl::memory::dims input_dims_;    // built for
  dnnl::memory::dims current_dims_;  // the layers' current primitives are for
  const Tensor* images_ = nullptr;   // the batch being processed (borrowed)
  bool built_ = false;
};

}  // namespace tensortier::dnn
