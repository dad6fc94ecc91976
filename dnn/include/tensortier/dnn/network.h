// Network: layers wired as a directed acyclic graph (chains and residual branches), trained with
// softmax cross-entropy and SGD, every tensor a runtime object. The graph holds LayerSpecs; the
// Engine's Backend makes them layers and computes the loss, gradient sums and SGD, so one Network
// serves every backend.
//
// Per training step, tensors live as autograd's do:
//   forward   each node's output allocated (kActivations) before it runs; a forward tensor no
//             backward reads (Layer::backward_reads_input/_output) freed after its last forward
//             reader (the loss reads the logits)
//   loss      writes the gradient of the logits
//   backward  nodes in reverse: each input's gradient allocated (kGradients; summed where an
//             output feeds several nodes), each parameter's .grad allocated (kParamGrads) before
//             its layer's backward; the node's output and gradient freed after it; in
//             train_step each of its parameters updated by SGD at once and its .grad freed
// With MemoryOptions::in_place (the default), a ReLU or residual add whose first input no other node
// reads (and whose producer's backward does not read it) writes over that input's object. With
// MemoryOptions::fuse_batch_norm_relu (the default), a batch norm applies the ReLU that alone reads it,
// and that ReLU's node passes its input through (no layer of its own). With
// MemoryOptions::recompute_batch_norm (the default), a batch norm's output that only later backwards
// read, and that no layer writes over, is freed after its last forward reader and computed again
// (Layer::recompute) before the first backward that reads it, until the batch norm's backward.
// Updating a layer's parameters right after its backward gives the same bits as updating all
// after the whole backward: no earlier layer's backward reads them.
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

#include "tensortier/dnn/backend.h"
#include "tensortier/dnn/layers.h"

namespace tensortier::dnn {

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

  // Adds a layer that reads the given nodes' outputs; returns its node id. build() makes it a
  // layer of the engine's backend.
  int add(LayerSpec spec, std::vector<int> inputs);
  // Adds a layer that reads the last node added (or the input, for the first).
  int add(LayerSpec spec) { return add(std::move(spec), {last()}); }
  int last() const {
    return static_cast<int>(nodes_.size()) - 1 >= 0 ? static_cast<int>(nodes_.size()) - 1 : kInput;
  }

  // Makes every spec a layer of engine.backend(), builds it for this input shape (N, C, H, W)
  // (each layer's output shape checked against output_dims of its spec) and initializes
  // parameters from `seed`.
  // A batch of another size N' (same C, H, W: an epoch's last partial batch) may be trained or
  // evaluated later: the first such step builds the layers' primitives for N' (cached, kept for
  // the next batch of that size); parameters are shared.
  Status build(Engine& engine, const dnnl::memory::dims& input_dims, std::uint64_t seed);
  // The shape the network was built for.
  const dnnl::memory::dims& input_dims() const { return input_dims_; }

  // Forward, loss, backward and the SGD update (each layer's parameters right after its
  // backward). Parameters' .grad are freed as they are used, unless set_keep_gradients(true).
  Result<StepResult> train_step(Engine& engine, const Batch& batch, const SgdOptions& sgd);
  // Forward, loss and backward only: parameters' .grad hold the gradients afterwards (until a
  // train_step frees them).
  Result<StepResult> compute_gradients(Engine& engine, const Batch& batch);
  // train_step keeps each .grad after its update until the next step (off by default: the
  // parameters' gradients then never all live at once).
  void set_keep_gradients(bool on) { keep_gradients_ = on; }
  // Off: every forward tensor lives until its node's backward, as before forward tensors were
  // freed after their last reader (for comparisons; on by default).
  void set_free_after_last_reader(bool on) { free_after_last_reader_ = on; }
  // Forward in inference mode (batch norm uses running statistics); no gradients.
  Result<StepResult> evaluate(Engine& engine, const Batch& batch);

  // The graph as added: each node's spec and the nodes it reads (kInput: the batch), in order.
  struct NodeSpec {
    const LayerSpec* spec;
    std::vector<int> inputs;
  };
  std::vector<NodeSpec> graph() const;
  // The layers in the order they run forward (after build()).
  std::vector<const Layer*> layers() const;

  // Parameters in a fixed order (layer order, then each layer's own), with their names.
  std::vector<std::pair<std::string, Param*>> params();
  std::size_t parameter_count();

 private:
  struct Node {
    LayerSpec spec;
    std::unique_ptr<Layer> layer;  // made by build()
    std::vector<int> inputs;
    dnnl::memory::desc output_desc;  // for current_dims_
    Tensor output;                   // empty for a node in place: its output is in_place_of's
    Tensor diff;
    int in_place_of = -1;       // the node whose output this one overwrites (or passes through)
    bool pass_through = false;  // a ReLU its producer applies (Layer::fuse_relu)
    bool recomputed = false;    // a root whose output backward computes again (Layer::recompute)
  };
  // A node's output tensor (the input batch for kInput; an in-place node's is its input's).
  const Tensor& output_of(int node) const;
  // The node that owns node's object (itself unless it runs in place).
  int root_of(int node) const;
  std::vector<int> readers() const;
  // Chooses the ReLUs their producers apply (MemoryOptions::fuse_batch_norm_relu).
  void fuse_relus();
  // Chooses the nodes that run in place (MemoryOptions::in_place).
  void choose_in_place();
  // Fills last_read_at_, kept_for_backward_ and Node::recomputed from the graph and the layers'
  // declarations (for the shape use_shape last chose).
  void plan_lifetimes();
  // Before node i's backward: computes again each recomputed input that is not alive.
  Status recompute_inputs(Engine& engine, const Node& node);
  // Frees the objects whose last forward reader is at `position` (nodes_.size(): the loss); in
  // training only those no backward reads.
  void release_read_by(Engine& engine, std::size_t position, bool training);
  Result<StepResult> run_step(Engine& engine, const Batch& batch, const SgdOptions* sgd);
  // Makes every layer run its primitives for inputs of these dims (building them the first time).
  Status use_shape(Engine& engine, const dnnl::memory::dims& input_dims);
  Status forward(Engine& engine, const Tensor& images, bool training);
  Result<StepResult> loss(Engine& engine, const Batch& batch, bool with_gradient);
  // Backward; with `sgd`, each node's parameters updated right after its backward.
  Status backward(Engine& engine, const SgdOptions* sgd);
  void release_outputs(Engine& engine);

  std::string name_;
  std::vector<Node> nodes_;
  dnnl::memory::dims input_dims_;    // built for
  dnnl::memory::dims current_dims_;  // the layers' current primitives are for
  const Tensor* images_ = nullptr;   // the batch being processed (borrowed)
  // By forward position (a node's index; nodes_.size() is the loss): the root nodes whose
  // object that position reads last in forward.
  std::vector<std::vector<int>> last_read_at_;
  std::vector<bool> kept_for_backward_;  // by root node: some backward reads its object
  bool keep_gradients_ = false;
  bool free_after_last_reader_ = true;
  bool recompute_ = false;  // MemoryOptions::recompute_batch_norm when built
  bool built_ = false;
};

}  // namespace tensortier::dnn
