// oneDNN's C entry points as the interposer defines them. Each passes the call straight to
// libdnnl where no interposer runs, or where it is a call libdnnl makes from inside another one
// (libdnnl calls its own dnnl_memory_set_data_handle_v2 through its PLT, so a preloaded
// definition sees it): a thread-local depth tells those apart.
#include <cstdio>

#include <oneapi/dnnl/dnnl.h>

#include "dnnl_api.h"
#include "interposer.h"

namespace {

using tensortier::interpose::Interposer;
using tensortier::interpose::real_dnnl;

thread_local int depth = 0;

// The interposer for an outermost call, else null; holds the depth for the call's duration.
class Entry {
 public:
  Entry() : outermost_(depth++ == 0) {}
  ~Entry() { --depth; }
  Entry(const Entry&) = delete;
  Entry& operator=(const Entry&) = delete;
  Interposer* interposer() const { return outermost_ ? Interposer::instance() : nullptr; }

 private:
  bool outermost_;
};

// A real entry point that could not be found: the call cannot be passed on.
template <typename Fn>
bool missing(Fn* fn, const char* name) {
  if (fn != nullptr) return false;
  std::fprintf(stderr, "tensortier-interpose: %s: %s\n", name, real_dnnl().unusable.c_str());
  return true;
}

}  // namespace

extern "C" {

dnnl_status_t dnnl_memory_create(dnnl_memory_t* memory, const dnnl_memory_desc_t* md, dnnl_engine_t engine,
                                 void* handle) {
  if (missing(real_dnnl().memory_create, __func__)) return dnnl_runtime_error;
  const Entry entry;
  Interposer* i = entry.interposer();
  return i != nullptr ? i->memory_create(memory, md, engine, handle)
                      : real_dnnl().memory_create(memory, md, engine, handle);
}

dnnl_status_t dnnl_memory_destroy(dnnl_memory_t memory) {
  if (missing(real_dnnl().memory_destroy, __func__)) return dnnl_runtime_error;
  const Entry entry;
  Interposer* i = entry.interposer();
  return i != nullptr ? i->memory_destroy(memory) : real_dnnl().memory_destroy(memory);
}

dnnl_status_t dnnl_memory_get_data_handle(const_dnnl_memory_t memory, void** handle) {
  if (missing(real_dnnl().memory_get_data_handle, __func__)) return dnnl_runtime_error;
  const Entry entry;
  Interposer* i = entry.interposer();
  return i != nullptr ? i->host_access(memory, handle, false)
                      : real_dnnl().memory_get_data_handle(memory, handle);
}

dnnl_status_t dnnl_memory_map_data(const_dnnl_memory_t memory, void** mapped) {
  if (missing(real_dnnl().memory_map_data, __func__)) return dnnl_runtime_error;
  const Entry entry;
  Interposer* i = entry.interposer();
  return i != nullptr ? i->host_access(memory, mapped, true) : real_dnnl().memory_map_data(memory, mapped);
}

dnnl_status_t dnnl_memory_unmap_data(const_dnnl_memory_t memory, void* mapped) {
  if (missing(real_dnnl().memory_unmap_data, __func__)) return dnnl_runtime_error;
  return real_dnnl().memory_unmap_data(memory, mapped);  // the pin lasts to the next execution
}

dnnl_status_t dnnl_memory_set_data_handle(dnnl_memory_t memory, void* handle) {
  if (missing(real_dnnl().memory_set_data_handle, __func__)) return dnnl_runtime_error;
  const Entry entry;
  Interposer* i = entry.interposer();
  return i != nullptr ? i->set_data_handle(memory, handle, nullptr, false)
                      : real_dnnl().memory_set_data_handle(memory, handle);
}

dnnl_status_t dnnl_memory_set_data_handle_v2(dnnl_memory_t memory, void* handle, dnnl_stream_t stream) {
  if (missing(real_dnnl().memory_set_data_handle_v2, __func__)) return dnnl_runtime_error;
  const Entry entry;
  Interposer* i = entry.interposer();
  return i != nullptr ? i->set_data_handle(memory, handle, stream, true)
                      : real_dnnl().memory_set_data_handle_v2(memory, handle, stream);
}

dnnl_status_t dnnl_primitive_execute(const_dnnl_primitive_t primitive, dnnl_stream_t stream, int nargs,
                                     const dnnl_exec_arg_t* args) {
  if (missing(real_dnnl().primitive_execute, __func__)) return dnnl_runtime_error;
  const Entry entry;
  Interposer* i = entry.interposer();
  return i != nullptr ? i->execute(primitive, stream, nargs, args)
                      : real_dnnl().primitive_execute(primitive, stream, nargs, args);
}

dnnl_status_t dnnl_primitive_destroy(dnnl_primitive_t primitive) {
  if (missing(real_dnnl().primitive_destroy, __func__)) return dnnl_runtime_error;
  const Entry entry;
  if (Interposer* i = entry.interposer(); i != nullptr) i->primitive_destroyed(primitive);
  return real_dnnl().primitive_destroy(primitive);
}

}  // extern "C"
