// Resolving libdnnl's own entry points (dnnl_api.h).
#include "dnnl_api.h"

#include <dlfcn.h>

#include <fmt/format.h>

namespace tensortier::interpose {
namespace {

template <typename Fn>
void resolve(Fn*& slot, const char* name, std::string& missing) {
  slot = reinterpret_cast<Fn*>(dlsym(RTLD_NEXT, name));
  if (slot == nullptr) missing += fmt::format("{}{}", missing.empty() ? "" : ", ", name);
}

DnnlApi load() {
  DnnlApi api;
  std::string missing;
  resolve(api.memory_create, "dnnl_memory_create", missing);
  resolve(api.memory_destroy, "dnnl_memory_destroy", missing);
  resolve(api.memory_get_data_handle, "dnnl_memory_get_data_handle", missing);
  resolve(api.memory_set_data_handle, "dnnl_memory_set_data_handle", missing);
  resolve(api.memory_set_data_handle_v2, "dnnl_memory_set_data_handle_v2", missing);
  resolve(api.memory_map_data, "dnnl_memory_map_data", missing);
  resolve(api.memory_unmap_data, "dnnl_memory_unmap_data", missing);
  resolve(api.primitive_execute, "dnnl_primitive_execute", missing);
  resolve(api.primitive_destroy, "dnnl_primitive_destroy", missing);
  resolve(api.pd_iterator_create, "dnnl_primitive_desc_iterator_create", missing);
  resolve(api.pd_create, "dnnl_primitive_desc_create", missing);
  resolve(api.reorder_pd_create, "dnnl_reorder_primitive_desc_create", missing);
  resolve(api.sum_pd_create, "dnnl_sum_primitive_desc_create", missing);
  resolve(api.concat_pd_create, "dnnl_concat_primitive_desc_create", missing);
  if (!missing.empty()) {
    // Without the real function the call cannot be passed on: nothing sensible remains.
    api.unusable = fmt::format("libdnnl's {} not found after the interposer in the lookup order", missing);
    return api;
  }
  const dnnl_version_t* v = dnnl_version();
  if (v->major != DNNL_VERSION_MAJOR) {
    api.unusable = fmt::format(
        "the program loads oneDNN {}.{}.{}; this interposer was built for oneDNN {}.x: "
        "calls pass through untiered (rebuild tensortier against the program's oneDNN)",
        v->major, v->minor, v->patch, DNNL_VERSION_MAJOR);
  }
  return api;
}

}  // namespace

const DnnlApi& real_dnnl() {
  static const DnnlApi api = load();
  return api;
}

}  // namespace tensortier::interpose
