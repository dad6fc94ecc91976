// The argument table (arg_table.h).
#include "tensortier/interpose/arg_table.h"

#include <fmt/format.h>

namespace tensortier::interpose {
namespace {

bool forward(dnnl_prop_kind_t prop) {
  return prop == dnnl_forward_training || prop == dnnl_forward_inference;
}

bool backward(dnnl_prop_kind_t prop) {
  return prop == dnnl_backward || prop == dnnl_backward_data || prop == dnnl_backward_weights ||
         prop == dnnl_backward_bias;
}

bool in(int arg, int first, int last) {
  return arg >= first && arg <= last;
}

// The attributes' arguments: output scales, zero points, input scales, a depthwise post-op's
// and the binary post-ops' operands. All read.
bool attribute(int arg) {
  return arg == DNNL_ARG_ATTR_OUTPUT_SCALES || arg >= DNNL_ARG_ATTR_ZERO_POINTS;
}

}  // namespace

ArgUse classify(const PrimitiveTraits& t, int arg, bool* known) {
  if (known != nullptr) *known = true;
  const bool normalization = t.kind == dnnl_batch_normalization || t.kind == dnnl_layer_normalization;
  if (attribute(arg) || in(arg, DNNL_ARG_MULTIPLE_SRC, DNNL_ARG_MULTIPLE_DST - 1)) return ArgUse::kRead;
  if (in(arg, DNNL_ARG_MULTIPLE_DST, DNNL_ARG_ATTR_ZERO_POINTS - 1)) return ArgUse::kWrite;
  if (in(arg, DNNL_ARG_SRC_0, DNNL_ARG_DST_0 - 1) || in(arg, DNNL_ARG_WEIGHTS_0, DNNL_ARG_BIAS) ||
      arg == DNNL_ARG_SCALE || arg == DNNL_ARG_SHIFT ||
      in(arg, DNNL_ARG_DIFF_DST_0, DNNL_ARG_DIFF_WEIGHTS_0 - 1)) {
    return ArgUse::kRead;
  }
  if (in(arg, DNNL_ARG_DST_0, DNNL_ARG_WEIGHTS_0 - 1)) {
    if (backward(t.prop)) return ArgUse::kRead;  // eltwise (use_dst_for_bwd) and softmax backward
    return arg == DNNL_ARG_DST && t.dst_summed ? ArgUse::kReadWrite : ArgUse::kWrite;
  }
  if (in(arg, DNNL_ARG_DIFF_WEIGHTS_0, DNNL_ARG_DIFF_BIAS)) {
    return t.kind == dnnl_rnn ? ArgUse::kReadWrite : ArgUse::kWrite;
  }
  if (in(arg, DNNL_ARG_DIFF_SRC_0, DNNL_ARG_DIFF_DST_0 - 1) || arg == DNNL_ARG_DIFF_SCALE ||
      arg == DNNL_ARG_DIFF_SHIFT || arg == DNNL_ARG_SCRATCHPAD) {
    return ArgUse::kWrite;
  }
  if (arg == DNNL_ARG_MEAN || arg == DNNL_ARG_VARIANCE) {
    if (!normalization) {
      if (known != nullptr) *known = false;
      return ArgUse::kReadWrite;
    }
    return t.prop == dnnl_forward_training && !t.global_stats ? ArgUse::kWrite : ArgUse::kRead;
  }
  if (arg == DNNL_ARG_WORKSPACE) {
    if (t.prop == dnnl_prop_kind_undef) {
      if (known != nullptr) *known = false;
      return ArgUse::kReadWrite;
    }
    return forward(t.prop) ? ArgUse::kWrite : ArgUse::kRead;
  }
  if (known != nullptr) *known = false;
  return ArgUse::kReadWrite;
}

bool uses(const PrimitiveTraits& t, int arg) {
  if (t.kind != dnnl_batch_normalization && t.kind != dnnl_layer_normalization) return true;
  const unsigned f = t.normalization_flags;
  const bool gradients = t.prop == dnnl_backward;  // backward_data computes no scale/shift gradient
  switch (arg) {
    case DNNL_ARG_SCALE_SHIFT:
      return (f & dnnl_use_scaleshift) != 0;
    case DNNL_ARG_SCALE:
      return (f & dnnl_use_scale) != 0;
    case DNNL_ARG_SHIFT:
      return (f & dnnl_use_shift) != 0;
    case DNNL_ARG_DIFF_SCALE_SHIFT:
      return gradients && (f & dnnl_use_scaleshift) != 0;
    case DNNL_ARG_DIFF_SCALE:
      return gradients && (f & dnnl_use_scale) != 0;
    case DNNL_ARG_DIFF_SHIFT:
      return gradients && (f & dnnl_use_shift) != 0;
    case DNNL_ARG_MEAN:
    case DNNL_ARG_VARIANCE:
      return t.prop != dnnl_forward_inference || (f & dnnl_use_global_stats) != 0;
    default:
      return true;
  }
}

bool counted(int arg) {
  return arg != DNNL_ARG_SCRATCHPAD && !attribute(arg);
}

std::string check_counts(const PrimitiveTraits& t, std::span<const int> used, int inputs, int outputs) {
  int table_inputs = 0, table_outputs = 0;
  std::string listed;
  for (const int arg : used) {
    if (!counted(arg)) continue;
    bool known = true;
    const ArgUse use = classify(t, arg, &known);
    listed += fmt::format("{}{}", listed.empty() ? "" : ",", arg);
    if (!known) return fmt::format("argument {} is not in the table", arg);
    // An argument both read and written (dst under a sum post-op, an RNN's accumulated gradients)
    // is one of oneDNN's outputs.
    if (writes(use)) {
      ++table_outputs;
    } else {
      ++table_inputs;
    }
  }
  if (table_inputs == inputs && table_outputs == outputs) return {};
  return fmt::format("the table finds {} inputs and {} outputs among arguments [{}], oneDNN counts {} and {}",
                     table_inputs, table_outputs, listed, inputs, outputs);
}

}  // namespace tensortier::interpose
