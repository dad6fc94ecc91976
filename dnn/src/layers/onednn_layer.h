// What the oneDNN backend's layers share (internal to dnn/): oneDNN's names, scratchpads,
// parameters and their init, oneDNN's errors as Status, the primitives built per input shape, and
// the factory of each layer kind, one file each (conv.cc, batch_norm.cc, relu.cc, pool.cc,
// linear.cc, add.cc); make_onednn_layer (onednn_layer.cc) picks one by the spec's kind.
//
// Thread safety: none; one training thread.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "tensortier/dnn/layers.h"

namespace tensortier::dnn::onednn {

using dnnl::algorithm;
using dnnl::prop_kind;
using memory = dnnl::memory;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

// The scratchpads of a layer's forward, backward-data and backward-weights primitives.
template <typename Fwd, typename Data, typename Weights>
void scratchpads(const std::string& layer, const Fwd& fwd, const Data& data, const Weights& weights,
                 Scratchpad& fwd_pad, Scratchpad& data_pad, Scratchpad& weights_pad) {
  fwd_pad = {layer + ".fwd.scratchpad", fwd.scratchpad_desc()};
  data_pad = {layer + ".bwd_data.scratchpad", data.scratchpad_desc()};
  weights_pad = {layer + ".bwd_weights.scratchpad", weights.scratchpad_desc()};
}

// A layer's weight (in oneDNN's layout `w`, PyTorch's `w_plain`) and, where `b` is given, bias.
inline Status weight_and_bias(Engine& e, const std::string& layer, const memory::desc& w,
                              const memory::desc& w_plain, const memory::desc* b, Param& weight,
                              Param& bias) {
  TENSORTIER_RETURN_IF_ERROR(make_param(e, layer + ".weight", w, w_plain, weight));
  return b != nullptr ? make_param(e, layer + ".bias", *b, *b, bias) : Status::ok();
}

// PyTorch's default init of conv and linear layers: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), drawn in
// the plain layout and reordered into the parameter's own.
inline Status uniform_init(Engine& e, Param& p, std::size_t fan_in, std::uint64_t seed,
                           const std::string& name) {
  const std::vector<float> values =
      uniform_init_values(p.plain.get_size() / sizeof(float), fan_in, seed, name);
  return e.reorder_now(p.plain, values.data(), p.value.desc(), p.value.address());
}

inline memory::desc any(const memory::dims& dims) {
  return {dims, dt::f32, tag::any};
}

// Wraps oneDNN's exceptions (from primitive-descriptor creation) as Status.
template <typename F>
Result<memory::desc> guarded(const std::string& layer, F&& body) {
  try {
    return body();
  } catch (const dnnl::error& e) {
    return internal_error(fmt::format("layer '{}': oneDNN cannot build it: {}", layer, e.what()));
  }
}

// The primitives a layer built for each input shape it was given (a batch size and its
// layouts), and which of them the batch in progress runs, so that going back to a shape seen
// before costs a lookup, not oneDNN's primitive creation (milliseconds a layer). An epoch's last
// partial batch is the second shape; there are rarely more, so a list searched in order is
// enough. Entries are never removed, so the current one stays valid.
template <typename Shape>
class Shapes {
 public:
  // Makes the shape built for these inputs the current one; false when none was built yet.
  bool use(const std::vector<memory::desc>& inputs) {
    for (auto& [key, shape] : all_) {
      if (key == inputs) {
        current_ = shape.get();
        return true;
      }
    }
    return false;
  }
  // Keeps a shape built for these inputs and makes it the current one.
  const Shape& add(const std::vector<memory::desc>& inputs, Shape shape) {
    all_.emplace_back(inputs, std::make_unique<Shape>(std::move(shape)));
    current_ = all_.back().second.get();
    return *current_;
  }
  bool empty() const { return current_ == nullptr; }
  // The current shape: valid once use() found one or add() kept one.
  const Shape* operator->() const { return current_; }

 private:
  std::vector<std::pair<std::vector<memory::desc>, std::unique_ptr<Shape>>> all_;
  const Shape* current_ = nullptr;
};

std::unique_ptr<Layer> make_conv(const std::string& name, const ConvSpec& spec);
std::unique_ptr<Layer> make_batch_norm(const std::string& name, const BatchNormSpec& spec);
std::unique_ptr<Layer> make_relu(const std::string& name);
std::unique_ptr<Layer> make_pool(const std::string& name, const PoolSpec& spec);
std::unique_ptr<Layer> make_linear(const std::string& name, const LinearSpec& spec);
std::unique_ptr<Layer> make_add(const std::string& name);

}  // namespace tensortier::dnn::onednn
