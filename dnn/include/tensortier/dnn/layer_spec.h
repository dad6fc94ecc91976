// LayerSpec: what a layer is, apart from how a backend computes it. The model builders wire
// specs into a Network; at build the Engine's Backend (backend.h) makes each spec into a layer of
// its own (oneDNN primitives on the CPU, cuDNN and cuBLAS calls on a GPU), so one model
// description serves every backend.
//
//   kind        parameters                          inputs  output (inputs N,C,H,W or N,F)
//   conv        out_channels kernel stride padding  1       N, out, (H+2p-k)/s+1, (W+2p-k)/s+1
//   batch norm  epsilon momentum                    1       the input's
//   relu        -                                   1       the input's
//   pool        max|average kernel stride padding   1       N, C, (H+2p-k)/s+1, (W+2p-k)/s+1
//   global pool average over H x W                  1       N, C, 1, 1
//   linear      out_features bias                   1       N, out (a 4-D input flattened)
//   add         -                                   2       the first input's (both alike)
//
// output_dims() is that table as a function; Network::build checks every backend's layers
// against it. Thread safety: values; the functions are pure.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "tensortier/status.h"

namespace tensortier::dnn {

using Dims = std::vector<std::int64_t>;

struct ConvSpec {
  int out_channels = 0;
  int kernel = 3;
  int stride = 1;
  int padding = 0;
  bool bias = true;
};
using ConvOptions = ConvSpec;  // the name model code used before specs

struct BatchNormSpec {
  float epsilon = 1e-5F;
  float momentum = 0.1F;  // running statistics as PyTorch's: r = (1 - m) r + m * batch
};

struct ReluSpec {};

enum class PoolKind { kMax, kAverage };
// Average pooling counts padding like PyTorch's default (count_include_pad=True). `global`: the
// whole H x W to 1x1 (kernel, stride and padding unused).
struct PoolSpec {
  PoolKind kind = PoolKind::kMax;
  int kernel = 2;
  int stride = 2;
  int padding = 0;
  bool global = false;
};

// Fully connected; a 4-D input is flattened in nchw order (as torch.flatten).
struct LinearSpec {
  int out_features = 0;
  bool bias = true;
};

// Elementwise sum of two inputs of one shape (the residual connection).
struct AddSpec {};

struct LayerSpec {
  std::string name;
  std::variant<ConvSpec, BatchNormSpec, ReluSpec, PoolSpec, LinearSpec, AddSpec> kind;
};

// "conv", "batch_norm", "relu", "pool", "linear", "add".
std::string_view kind_name(const LayerSpec& spec);
// How many inputs the layer takes (2 for add, else 1).
std::size_t input_count(const LayerSpec& spec);
// The output's dims for these inputs' dims (the table above). Errors name the layer: a wrong
// number of inputs, a conv or pool input that is not 4-D or too small for its kernel, an add of
// two shapes, a spec with no output channels or features.
Result<Dims> output_dims(const LayerSpec& spec, std::span<const Dims> inputs);

// The specs the model builders use.
LayerSpec make_conv(std::string name, const ConvSpec& options);
LayerSpec make_batch_norm(std::string name, float epsilon = 1e-5F, float momentum = 0.1F);
LayerSpec make_relu(std::string name);
LayerSpec make_pool(std::string name, PoolKind kind, int kernel, int stride, int padding = 0);
// Global average pooling to 1x1.
LayerSpec make_global_avg_pool(std::string name);
LayerSpec make_linear(std::string name, int out_features, bool bias = true);
// In place where the Network allows (written over its first input).
LayerSpec make_add(std::string name);

}  // namespace tensortier::dnn
