// The oneDNN backend's layers (layers.h): the factory by kind, and what the layers share
// (onednn_layer.h); each layer in a file of its own beside this one.
#include "layers/onednn_layer.h"

#include <cmath>
#include <functional>
#include <random>
#include <variant>

#include <fmt/format.h>

namespace tensortier::dnn {

using memory = dnnl::memory;

std::unique_ptr<Layer> make_onednn_layer(const LayerSpec& spec) {
  struct Make {
    const std::string& name;
    std::unique_ptr<Layer> operator()(const ConvSpec& c) const { return onednn::make_conv(name, c); }
    std::unique_ptr<Layer> operator()(const BatchNormSpec& b) const {
      return onednn::make_batch_norm(name, b);
    }
    std::unique_ptr<Layer> operator()(const ReluSpec&) const { return onednn::make_relu(name); }
    std::unique_ptr<Layer> operator()(const PoolSpec& p) const { return onednn::make_pool(name, p); }
    std::unique_ptr<Layer> operator()(const LinearSpec& l) const { return onednn::make_linear(name, l); }
    std::unique_ptr<Layer> operator()(const AddSpec&) const { return onednn::make_add(name); }
  };
  return std::visit(Make{spec.name}, spec.kind);
}

dnnl::memory::desc plain_desc(const dnnl::memory::dims& dims) {
  using tag = dnnl::memory::format_tag;
  const tag t = dims.size() == 4 ? tag::nchw : dims.size() == 2 ? tag::nc : tag::x;
  return {dims, dnnl::memory::data_type::f32, t};
}

Status make_param(Engine& e, const std::string& name, const memory::desc& desc, const memory::desc& plain,
                  Param& p, bool decay) {
  auto value = e.allocate(name, desc, kParams);
  if (!value) return value.status();
  auto momentum = e.allocate(name + ".momentum", desc, kOptimizerState);
  if (!momentum) return momentum.status();
  p.value = std::move(value).value();
  p.momentum = std::move(momentum).value();
  p.plain = plain;
  p.decay = decay;
  return Status::ok();
}

Status need_inputs(const std::string& layer, const std::vector<memory::desc>& inputs, std::size_t n) {
  if (inputs.size() != n) {
    return invalid_argument(fmt::format("layer '{}' takes {} input(s), got {}", layer, n, inputs.size()));
  }
  return Status::ok();
}

std::vector<float> uniform_init_values(std::size_t count, std::size_t fan_in, std::uint64_t seed,
                                       const std::string& name) {
  std::mt19937_64 rng(seed ^ std::hash<std::string>{}(name));
  const float bound = 1.0F / std::sqrt(static_cast<float>(fan_in));
  std::uniform_real_distribution<float> dist(-bound, bound);
  std::vector<float> values(count);
  for (float& v : values) v = dist(rng);
  return values;
}

}  // namespace tensortier::dnn