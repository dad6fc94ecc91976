// Primitive descriptions (primitive_info.h).
#include "tensortier/interpose/primitive_info.h"

#include <vector>

#include <fmt/format.h>
#include <oneapi/dnnl/dnnl_debug.h>

namespace tensortier::interpose {
namespace {

// The argument ids a primitive may use: each one asked of its descriptor (exec_arg_md).
std::vector<int> candidate_args() {
  std::vector<int> args;
  for (int a = DNNL_ARG_SRC_0; a <= DNNL_ARG_DIFF_SHIFT; ++a) args.push_back(a);
  for (int i = 0; i < 64; ++i) args.push_back(DNNL_ARG_MULTIPLE_SRC + i);
  for (int i = 0; i < 64; ++i) args.push_back(DNNL_ARG_MULTIPLE_DST + i);
  return args;
}

// A normalization's flags (use_global_stats, use_scaleshift, ...), from its op descriptor.
unsigned normalization_flags(const_dnnl_primitive_desc_t pd, dnnl_primitive_kind_t kind) {
  if (kind == dnnl_batch_normalization) {
    const dnnl_batch_normalization_desc_t* d = nullptr;
    if (dnnl_primitive_desc_query(pd, dnnl_query_batch_normalization_d, 0, &d) == dnnl_success &&
        d != nullptr)
      return d->flags;
  }
  if (kind == dnnl_layer_normalization) {
    const dnnl_layer_normalization_desc_t* d = nullptr;
    if (dnnl_primitive_desc_query(pd, dnnl_query_layer_normalization_d, 0, &d) == dnnl_success &&
        d != nullptr)
      return d->flags;
  }
  return 0;
}

bool has_sum_post_op(const_dnnl_primitive_desc_t pd) {
  const_dnnl_primitive_attr_t attr = nullptr;
  const_dnnl_post_ops_t post_ops = nullptr;
  if (dnnl_primitive_desc_get_attr(pd, &attr) != dnnl_success ||
      dnnl_primitive_attr_get_post_ops(attr, &post_ops) != dnnl_success)
    return false;
  for (int i = 0; i < dnnl_post_ops_len(post_ops); ++i) {
    if (dnnl_post_ops_get_kind(post_ops, i) == dnnl_sum) return true;
  }
  return false;
}

}  // namespace

PrimitiveInfo describe(const_dnnl_primitive_t primitive) {
  PrimitiveInfo info;
  const_dnnl_primitive_desc_t pd = nullptr;
  if (dnnl_primitive_get_primitive_desc(primitive, &pd) != dnnl_success || pd == nullptr) {
    info.name = "primitive";
    info.mismatch = "its primitive descriptor could not be read";
    return info;
  }
  PrimitiveTraits& t = info.traits;
  dnnl_primitive_desc_query(pd, dnnl_query_primitive_kind, 0, &t.kind);
  if (dnnl_primitive_desc_query(pd, dnnl_query_prop_kind, 0, &t.prop) != dnnl_success)
    t.prop = dnnl_prop_kind_undef;
  t.normalization_flags = normalization_flags(pd, t.kind);
  t.global_stats = (t.normalization_flags & dnnl_use_global_stats) != 0;
  t.dst_summed = has_sum_post_op(pd);
  info.name = t.prop == dnnl_prop_kind_undef
                  ? std::string(dnnl_prim_kind2str(t.kind))
                  : fmt::format("{}:{}", dnnl_prim_kind2str(t.kind), dnnl_prop_kind2str(t.prop));
  info.key = (static_cast<std::uint64_t>(t.kind) << 32) ^ static_cast<std::uint64_t>(t.prop) ^
             (t.global_stats ? 1ULL << 62 : 0) ^ (t.dst_summed ? 1ULL << 61 : 0);
  std::vector<int> used;
  for (const int arg : candidate_args()) {
    const dnnl_memory_desc_t* md = dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, arg);
    if (md == nullptr || md->ndims == 0 || !uses(t, arg)) continue;
    used.push_back(arg);
    info.uses[arg] = classify(t, arg);
  }
  int inputs = 0, outputs = 0;
  dnnl_primitive_desc_query(pd, dnnl_query_num_of_inputs_s32, 0, &inputs);
  dnnl_primitive_desc_query(pd, dnnl_query_num_of_outputs_s32, 0, &outputs);
  info.mismatch = check_counts(t, used, inputs, outputs);
  const_dnnl_primitive_attr_t attr = nullptr;
  dnnl_scratchpad_mode_t mode = dnnl_scratchpad_mode_library;
  if (dnnl_primitive_desc_get_attr(pd, &attr) == dnnl_success &&
      dnnl_primitive_attr_get_scratchpad_mode(attr, &mode) == dnnl_success &&
      mode == dnnl_scratchpad_mode_user) {
    if (const dnnl_memory_desc_t* md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        md != nullptr)
      info.user_scratchpad_bytes = dnnl_memory_desc_get_size(md);
  }
  return info;
}

const PrimitiveInfo& PrimitiveCache::get(const_dnnl_primitive_t primitive) {
  std::lock_guard lock(mutex_);
  auto& entry = entries_[primitive];
  if (!entry) entry = std::make_unique<PrimitiveInfo>(describe(primitive));
  return *entry;
}

void PrimitiveCache::erase(const_dnnl_primitive_t primitive) {
  std::lock_guard lock(mutex_);
  entries_.erase(primitive);
}

}  // namespace tensortier::interpose
