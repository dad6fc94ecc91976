// The loaded libdnnl's own entry points behind the ones the interposer replaces (dlsym with
// RTLD_NEXT: the next definition after the interposer in the lookup order), and whether the
// interposer may act on it at all (the major version it was built against).
//
// Resolved once; read-only afterwards: thread-safe.
#pragma once

#include <string>

#include <oneapi/dnnl/dnnl.h>

namespace tensortier::interpose {

struct DnnlApi {
  dnnl_status_t (*memory_create)(dnnl_memory_t*, const dnnl_memory_desc_t*, dnnl_engine_t, void*) = nullptr;
  dnnl_status_t (*memory_destroy)(dnnl_memory_t) = nullptr;
  dnnl_status_t (*memory_get_data_handle)(const_dnnl_memory_t, void**) = nullptr;
  dnnl_status_t (*memory_set_data_handle)(dnnl_memory_t, void*) = nullptr;
  dnnl_status_t (*memory_set_data_handle_v2)(dnnl_memory_t, void*, dnnl_stream_t) = nullptr;
  dnnl_status_t (*memory_map_data)(const_dnnl_memory_t, void**) = nullptr;
  dnnl_status_t (*memory_unmap_data)(const_dnnl_memory_t, void*) = nullptr;
  dnnl_status_t (*primitive_execute)(const_dnnl_primitive_t, dnnl_stream_t, int,
                                     const dnnl_exec_arg_t*) = nullptr;
  dnnl_status_t (*primitive_destroy)(dnnl_primitive_t) = nullptr;
  // Primitive descriptors, made in user scratchpad mode where the interposer gives scratchpads.
  dnnl_status_t (*pd_iterator_create)(dnnl_primitive_desc_iterator_t*, const_dnnl_op_desc_t,
                                      const_dnnl_primitive_attr_t, dnnl_engine_t,
                                      const_dnnl_primitive_desc_t) = nullptr;
  dnnl_status_t (*pd_create)(dnnl_primitive_desc_t*, const_dnnl_op_desc_t, const_dnnl_primitive_attr_t,
                             dnnl_engine_t, const_dnnl_primitive_desc_t) = nullptr;
  dnnl_status_t (*reorder_pd_create)(dnnl_primitive_desc_t*, const dnnl_memory_desc_t*, dnnl_engine_t,
                                     const dnnl_memory_desc_t*, dnnl_engine_t,
                                     const_dnnl_primitive_attr_t) = nullptr;
  dnnl_status_t (*sum_pd_create)(dnnl_primitive_desc_t*, const dnnl_memory_desc_t*, int, const float*,
                                 const dnnl_memory_desc_t*, const_dnnl_primitive_attr_t,
                                 dnnl_engine_t) = nullptr;
  dnnl_status_t (*concat_pd_create)(dnnl_primitive_desc_t*, const dnnl_memory_desc_t*, int, int,
                                    const dnnl_memory_desc_t*, const_dnnl_primitive_attr_t,
                                    dnnl_engine_t) = nullptr;
  // Empty when every entry point was found and the library's major version is the one the
  // interposer was built for; else why it only passes calls through (one line).
  std::string unusable;
};

// The real entry points (resolved at the first call).
const DnnlApi& real_dnnl();

}  // namespace tensortier::interpose
