// Layer specs and their output shapes (see layer_spec.h).
#include "tensortier/dnn/layer_spec.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tensortier::dnn {
namespace {

template <typename... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <typename... F>
Overloaded(F...) -> Overloaded<F...>;  // clang 14 has no deduction for aggregates yet

// One spatial size after a window of `kernel` at `stride` over `size` padded by `padding` each side,
// in C++'s division as oneDNN's shape check: a window one past a map still gives 1 (VGG's last
// 2x2 pool on a 1x1 map, at small inputs, pools the one element).
std::int64_t window_out(std::int64_t size, int kernel, int stride, int padding) {
  return (size + 2 * std::int64_t{padding} - kernel) / stride + 1;
}

Result<Dims> windowed(const LayerSpec& spec, const Dims& in, std::int64_t channels, int kernel, int stride,
                      int padding) {
  if (in.size() != 4) {
    return invalid_argument(fmt::format("{} '{}' needs a 4-D input (N,C,H,W), got {}", kind_name(spec),
                                        spec.name, fmt::join(in, "x")));
  }
  if (kernel < 1 || stride < 1 || padding < 0) {
    return invalid_argument(
        fmt::format("{} '{}': kernel {}, stride {}, padding {}: kernel and stride must be "
                    "at least 1, padding at least 0",
                    kind_name(spec), spec.name, kernel, stride, padding));
  }
  const std::int64_t oh = window_out(in[2], kernel, stride, padding);
  const std::int64_t ow = window_out(in[3], kernel, stride, padding);
  if (oh <= 0 || ow <= 0) {
    return invalid_argument(fmt::format("{} '{}': input too small ({}x{} for a {}x{} kernel, padding {})",
                                        kind_name(spec), spec.name, in[2], in[3], kernel, kernel, padding));
  }
  return Dims{in[0], channels, oh, ow};
}

}  // namespace

std::string_view kind_name(const LayerSpec& spec) {
  return std::visit(
      Overloaded{[](const ConvSpec&) { return "conv"; }, [](const BatchNormSpec&) { return "batch_norm"; },
                 [](const ReluSpec&) { return "relu"; }, [](const PoolSpec&) { return "pool"; },
                 [](const LinearSpec&) { return "linear"; }, [](const AddSpec&) { return "add"; }},
      spec.kind);
}

std::size_t input_count(const LayerSpec& spec) {
  return std::holds_alternative<AddSpec>(spec.kind) ? 2 : 1;
}

Result<Dims> output_dims(const LayerSpec& spec, std::span<const Dims> inputs) {
  if (inputs.size() != input_count(spec)) {
    return invalid_argument(
        fmt::format("layer '{}' takes {} input(s), got {}", spec.name, input_count(spec), inputs.size()));
  }
  const Dims& in = inputs[0];
  if (in.empty() || in[0] < 1)
    return invalid_argument(fmt::format("layer '{}': an input with no samples", spec.name));
  return std::visit(
      Overloaded{
          [&](const ConvSpec& c) -> Result<Dims> {
            if (c.out_channels < 1)
              return invalid_argument(fmt::format("conv '{}' has no output channels", spec.name));
            return windowed(spec, in, c.out_channels, c.kernel, c.stride, c.padding);
          },
          [&](const PoolSpec& p) -> Result<Dims> {
            if (in.size() != 4) return windowed(spec, in, 0, 1, 1, 0);  // its error
            if (p.global) return Dims{in[0], in[1], 1, 1};
            return windowed(spec, in, in[1], p.kernel, p.stride, p.padding);
          },
          [&](const LinearSpec& l) -> Result<Dims> {
            if (l.out_features < 1)
              return invalid_argument(fmt::format("linear '{}' has no output features", spec.name));
            if (in.size() != 2 && in.size() != 4) {
              return invalid_argument(fmt::format("linear '{}' needs an N,F or N,C,H,W input, got {}",
                                                  spec.name, fmt::join(in, "x")));
            }
            return Dims{in[0], l.out_features};
          },
          [&](const AddSpec&) -> Result<Dims> {
            if (inputs[1] != in) {
              return invalid_argument(fmt::format("add '{}': the two inputs differ in shape ({} and {})",
                                                  spec.name, fmt::join(in, "x"), fmt::join(inputs[1], "x")));
            }
            return in;
          },
          [&](const auto&) -> Result<Dims> { return in; },  // batch norm, relu
      },
      spec.kind);
}

LayerSpec make_conv(std::string name, const ConvSpec& options) {
  return {std::move(name), options};
}
LayerSpec make_batch_norm(std::string name, float epsilon, float momentum) {
  return {std::move(name), BatchNormSpec{epsilon, momentum}};
}
LayerSpec make_relu(std::string name) {
  return {std::move(name), ReluSpec{}};
}
LayerSpec make_pool(std::string name, PoolKind kind, int kernel, int stride, int padding) {
  return {std::move(name), PoolSpec{kind, kernel, stride, padding, false}};
}
LayerSpec make_global_avg_pool(std::string name) {
  return {std::move(name), PoolSpec{PoolKind::kAverage, 0, 1, 0, true}};
}
LayerSpec make_linear(std::string name, int out_features, bool bias) {
  return {std::move(name), LinearSpec{out_features, bias}};
}
LayerSpec make_add(std::string name) {
  return {std::move(name), AddSpec{}};
}

}  // namespace tensortier::dnn
