// Layer: the interface every backend's layers implement (forward, backward, what backward reads,
// in place, fusion, recomputation), and the CPU backend's layers, each a set of oneDNN 2.6
// primitives (forward, backward data, backward weights) over runtime tensors. Which layer a
// LayerSpec becomes is the Engine's Backend's choice (backend.h).
//
// A layer is built for its input layouts (build), then run every step; built again for other
// inputs (an epoch's last, smaller batch) it keeps primitives for each shape it was given and
// runs those of the last build, its parameters made once and shared by all. forward() writes
// the output the Network allocated; backward() writes the gradient of each input the Network
// allocated (a null slot: that gradient is not needed, e.g. for the input batch) and overwrites
// its parameters' gradients. Tensors a layer keeps from forward for backward (batch-norm mean
// and variance and a fused ReLU's mask, max-pooling workspace) are its own, released at the end
// of backward. Layouts are oneDNN's choice (format_tag::any): convolutions pick blocked
// activations (nChw16c on AVX-512) and weights, and the layers after them keep their input's
// layout, so no reorder runs between layers; the network input is nchw and the logits nc.
//
// Ownership: a layer owns its parameters (values, momentum; their gradients while the Network
// has them allocated) and scratchpads.
// Thread safety: none; a layer belongs to one Network on one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensortier/dnn/engine.h"
#include "tensortier/dnn/layer_spec.h"

namespace tensortier::dnn {

// A trainable tensor with its gradient and SGD momentum.
// value, grad and momentum share one layout: the one oneDNN chose for speed (blocked for conv
// and linear weights, e.g. OIhw16i16o), so SGD is elementwise; `plain` is PyTorch's layout of
// the same tensor (oihw, oi, x), for initialization and export (Engine::reorder_now).
struct Param {
  Tensor value;
  Tensor grad;  // allocated by the Network for its layer's backward (network.h says until when)
  Tensor momentum;
  dnnl::memory::desc plain;
  bool decay = true;  // weight decay applies (PyTorch applies it to every parameter by default)
};

class Layer {
 public:
  explicit Layer(std::string name) : name_(std::move(name)) {}
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const std::string& name() const { return name_; }
  // Builds primitives for these input layouts and makes them the ones forward() and backward()
  // run; returns the output layout. The first call also makes the parameters. A later call with
  // other inputs (another batch size; channels and image size must not change) builds primitives
  // for them that keep the parameters' layouts; a call with inputs built before switches back to
  // their primitives without rebuilding them.
  virtual Result<dnnl::memory::desc> build(Engine& engine, const std::vector<dnnl::memory::desc>& inputs) = 0;
  virtual Status forward(Engine& engine, const std::vector<const Tensor*>& inputs, const Tensor& output,
                         bool training) = 0;
  virtual Status backward(Engine& engine, const std::vector<const Tensor*>& inputs, const Tensor& output,
                          const Tensor& diff_output, const std::vector<Tensor*>& diff_inputs) = 0;
  // In place: a layer that can write its output over its first input (ReLU, the residual add)
  // says so, and the Network tells it before its first build where the graph allows it; its
  // forward() is then given that input's tensor as the output.
  virtual bool can_run_in_place() const { return false; }
  virtual void set_in_place(bool /*on*/) {}
  // What backward() reads of forward's tensors: its input k, its own output. The Network frees
  // every other forward tensor after its last forward reader, as autograd keeps only what a
  // backward saved; a backward given a freed tensor gets an empty one. An output a backward
  // reads (an in-place ReLU's) must not be overwritten by a layer after it.
  virtual bool backward_reads_input(std::size_t /*k*/) const { return true; }
  virtual bool backward_reads_output() const { return false; }
  // Fusion: a ReLU says it can be applied by the layer before it, and a layer that can apply it
  // (batch norm: oneDNN's fuse_norm_relu) accepts before its first build; the Network then runs
  // the ReLU as a pass-through (its output is the producer's, its gradient passed on).
  virtual bool is_relu() const { return false; }
  virtual bool fuse_relu() { return false; }
  // Recomputation: a layer that can compute its training output again in backward from what its
  // own backward keeps anyway (batch norm: its input and the batch's mean and variance) says so,
  // and recompute() writes that output; the Network may then free the output after its last
  // forward reader and compute it again before the first backward that reads it.
  virtual bool can_recompute() const { return false; }
  virtual Status recompute(Engine& /*engine*/, const std::vector<const Tensor*>& /*inputs*/,
                           const Tensor& /*output*/) {
    return failed_precondition(name_ + " cannot compute its output again");
  }
  virtual std::vector<Param*> params() { return {}; }
  // Initializes parameters from a seeded generator (PyTorch's default schemes). Errors: writing
  // them (a device copy); the network is then not built.
  virtual Status init_params(Engine& /*engine*/, std::uint64_t /*seed*/) { return Status::ok(); }
  // The oneDNN kernels a built layer runs, where it chose among several (convolutions: forward /
  // backward data / backward weights, e.g. "jit_wino_4x3:avx512_core / ..."); empty otherwise.
  virtual std::string implementation() const { return {}; }

 protected:
  std::string name_;
};

// What every backend's layers share:
// The plain layout of `dims` (nchw for 4-D, nc for 2-D, x for 1-D), float32: PyTorch's.
dnnl::memory::desc plain_desc(const dnnl::memory::dims& dims);
// A parameter's value and momentum (zero), laid out as `desc`; `plain`: PyTorch's layout of it.
Status make_param(Engine& engine, const std::string& name, const dnnl::memory::desc& desc,
                  const dnnl::memory::desc& plain, Param& p, bool decay = true);
// Errors where layer `layer` is built with other than `n` inputs, naming it.
Status need_inputs(const std::string& layer, const std::vector<dnnl::memory::desc>& inputs, std::size_t n);

// PyTorch's default init of conv and linear parameters: `count` values U(-1/sqrt(fan_in),
// 1/sqrt(fan_in)) for parameter `name` from `seed`, in the plain layout; every backend draws these.
std::vector<float> uniform_init_values(std::size_t count, std::size_t fan_in, std::uint64_t seed,
                                       const std::string& name);

// The CPU backend's layer for `spec` (oneDNN primitives; cpu_backend() makes its layers with it).
std::unique_ptr<Layer> make_onednn_layer(const LayerSpec& spec);

}  // namespace tensortier::dnn
