// oneDNN's C entry points as the interposer defines them. Each passes the call straight to
// libdnnl where no interposer runs, or where it is a call libdnnl makes from inside another one
// (libdnnl calls its own dnnl_memory_set_data_handle_v2 through its PLT, so a preloaded
// definition sees it): a thread-local depth tells those apart.
#include <cstdio>

#include <oneapi/dnnl/dnnl.h>

#include "dnnl_api.h"
#include "interposer.h"

namespace {

using tensortier::interpose::DnnlApi;
using tensortier::interpose::Interposer;
using tensortier::interpose::real_dnnl;
using tensortier::interpose::ScratchpadAttr;

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

// An entry point: libdnnl's own where the interposer does not act (none runs, or a call from
// inside another), else the interposer's. A real entry point not found cannot be passed on.
template <typename Fn, typename Interposed, typename Real>
dnnl_status_t route(Fn* fn, const char* name, Interposed&& interposed, Real&& real) {
  if (fn == nullptr) {
    std::fprintf(stderr, "tensortier-interpose: %s: %s\n", name, real_dnnl().unusable.c_str());
    return dnnl_runtime_error;
  }
  const Entry entry;
  Interposer* i = entry.interposer();
  return i != nullptr ? interposed(*i) : real();
}

}  // namespace

extern "C" {

dnnl_status_t dnnl_memory_create(dnnl_memory_t* memory, const dnnl_memory_desc_t* md, dnnl_engine_t engine,
                                 void* handle) {
  const DnnlApi& api = real_dnnl();
  return route(
      api.memory_create, __func__, [&](Interposer& i) { return i.memory_create(memory, md, engine, handle); },
      [&] { return api.memory_create(memory, md, engine, handle); });
}

dnnl_status_t dnnl_memory_destroy(dnnl_memory_t memory) {
  const DnnlApi& api = real_dnnl();
  return route(
      api.memory_destroy, __func__, [&](Interposer& i) { return i.memory_destroy(memory); },
      [&] { return api.memory_destroy(memory); });
}

dnnl_status_t dnnl_memory_get_data_handle(const_dnnl_memory_t memory, void** handle) {
  const DnnlApi& api = real_dnnl();
  return route(
      api.memory_get_data_handle, __func__,
      [&](Interposer& i) { return i.host_access(memory, handle, false); },
      [&] { return api.memory_get_data_handle(memory, handle); });
}

dnnl_status_t dnnl_memory_map_data(const_dnnl_memory_t memory, void** mapped) {
  const DnnlApi& api = real_dnnl();
  return route(
      api.memory_map_data, __func__, [&](Interposer& i) { return i.host_access(memory, mapped, true); },
      [&] { return api.memory_map_data(memory, mapped); });
}

// The pin host_access took lasts to the next execution that uses the object.
dnnl_status_t dnnl_memory_unmap_data(const_dnnl_memory_t memory, void* mapped) {
  const DnnlApi& api = real_dnnl();
  const auto real = [&] { return api.memory_unmap_data(memory, mapped); };
  return route(
      api.memory_unmap_data, __func__, [&](Interposer&) { return real(); }, real);
}

dnnl_status_t dnnl_memory_set_data_handle(dnnl_memory_t memory, void* handle) {
  const DnnlApi& api = real_dnnl();
  return route(
      api.memory_set_data_handle, __func__,
      [&](Interposer& i) { return i.set_data_handle(memory, handle, nullptr, false); },
      [&] { return api.memory_set_data_handle(memory, handle); });
}

dnnl_status_t dnnl_memory_set_data_handle_v2(dnnl_memory_t memory, void* handle, dnnl_stream_t stream) {
  const DnnlApi& api = real_dnnl();
  return route(
      api.memory_set_data_handle_v2, __func__,
      [&](Interposer& i) { return i.set_data_handle(memory, handle, stream, true); },
      [&] { return api.memory_set_data_handle_v2(memory, handle, stream); });
}

dnnl_status_t dnnl_primitive_execute(const_dnnl_primitive_t primitive, dnnl_stream_t stream, int nargs,
                                     const dnnl_exec_arg_t* args) {
  const DnnlApi& api = real_dnnl();
  return route(
      api.primitive_execute, __func__,
      [&](Interposer& i) { return i.execute(primitive, stream, nargs, args); },
      [&] { return api.primitive_execute(primitive, stream, nargs, args); });
}

dnnl_status_t dnnl_primitive_destroy(dnnl_primitive_t primitive) {
  const DnnlApi& api = real_dnnl();
  return route(
      api.primitive_destroy, __func__,
      [&](Interposer& i) {
        i.primitive_destroyed(primitive);
        return api.primitive_destroy(primitive);
      },
      [&] { return api.primitive_destroy(primitive); });
}

// Primitive descriptors: in user scratchpad mode where the interposer gives scratchpads.

dnnl_status_t dnnl_primitive_desc_iterator_create(dnnl_primitive_desc_iterator_t* iterator,
                                                  const_dnnl_op_desc_t op_desc,
                                                  const_dnnl_primitive_attr_t attr, dnnl_engine_t engine,
                                                  const_dnnl_primitive_desc_t hint) {
  const DnnlApi& api = real_dnnl();
  return route(
      api.pd_iterator_create, __func__,
      [&](Interposer& i) {
        const ScratchpadAttr a(attr, i.gives_scratchpads(engine));
        return api.pd_iterator_create(iterator, op_desc, a.get(), engine, hint);
      },
      [&] { return api.pd_iterator_create(iterator, op_desc, attr, engine, hint); });
}

dnnl_status_t dnnl_primitive_desc_create(dnnl_primitive_desc_t* pd, const_dnnl_op_desc_t op_desc,
                                         const_dnnl_primitive_attr_t attr, dnnl_engine_t engine,
                                         const_dnnl_primitive_desc_t hint) {
  const DnnlApi& api = real_dnnl();
  return route(
      api.pd_create, __func__,
      [&](Interposer& i) {
        const ScratchpadAttr a(attr, i.gives_scratchpads(engine));
        return api.pd_create(pd, op_desc, a.get(), engine, hint);
      },
      [&] { return api.pd_create(pd, op_desc, attr, engine, hint); });
}

dnnl_status_t dnnl_reorder_primitive_desc_create(dnnl_primitive_desc_t* pd, const dnnl_memory_desc_t* src,
                                                 dnnl_engine_t src_engine, const dnnl_memory_desc_t* dst,
                                                 dnnl_engine_t dst_engine, const_dnnl_primitive_attr_t attr) {
  const DnnlApi& api = real_dnnl();
  return route(
      api.reorder_pd_create, __func__,
      [&](Interposer& i) {
        const ScratchpadAttr a(attr, i.gives_scratchpads(src_engine) && i.gives_scratchpads(dst_engine));
        return api.reorder_pd_create(pd, src, src_engine, dst, dst_engine, a.get());
      },
      [&] { return api.reorder_pd_create(pd, src, src_engine, dst, dst_engine, attr); });
}

dnnl_status_t dnnl_sum_primitive_desc_create(dnnl_primitive_desc_t* pd, const dnnl_memory_desc_t* dst, int n,
                                             const float* scales, const dnnl_memory_desc_t* srcs,
                                             const_dnnl_primitive_attr_t attr, dnnl_engine_t engine) {
  const DnnlApi& api = real_dnnl();
  return route(
      api.sum_pd_create, __func__,
      [&](Interposer& i) {
        const ScratchpadAttr a(attr, i.gives_scratchpads(engine));
        return api.sum_pd_create(pd, dst, n, scales, srcs, a.get(), engine);
      },
      [&] { return api.sum_pd_create(pd, dst, n, scales, srcs, attr, engine); });
}

dnnl_status_t dnnl_concat_primitive_desc_create(dnnl_primitive_desc_t* pd, const dnnl_memory_desc_t* dst,
                                                int n, int dimension, const dnnl_memory_desc_t* srcs,
                                                const_dnnl_primitive_attr_t attr, dnnl_engine_t engine) {
  const DnnlApi& api = real_dnnl();
  return route(
      api.concat_pd_create, __func__,
      [&](Interposer& i) {
        const ScratchpadAttr a(attr, i.gives_scratchpads(engine));
        return api.concat_pd_create(pd, dst, n, dimension, srcs, a.get(), engine);
      },
      [&] { return api.concat_pd_create(pd, dst, n, dimension, srcs, attr, engine); });
}

}  // extern "C"
