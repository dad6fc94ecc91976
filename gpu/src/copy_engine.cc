// CudaCopyEngine (see copy_engine.h).
#include "tensortier/gpu/copy_engine.h"

namespace tensortier::gpu {

StreamHandle CudaCopyEngine::stream_for(CopyKind kind) const {
  return kind == CopyKind::kDeviceToHost ? device_.to_host() : device_.to_device();
}

Result<EventHandle> CudaCopyEngine::copy(void* dst, const void* src, std::size_t bytes, CopyKind kind,
                                         std::span<const EventHandle> after) {
  const CudaApi& api = device_.api();
  const StreamHandle stream = stream_for(kind);
  for (EventHandle e : after) {
    if (e != 0) TENSORTIER_RETURN_IF_ERROR(device_.wait(stream, e));
  }
  TENSORTIER_RETURN_IF_ERROR(
      cuda_status(api, api.memcpy_async(dst, src, bytes, kind, stream), "cudaMemcpyAsync"));
  return device_.record(stream);
}

bool CudaCopyEngine::done(EventHandle event) const {
  return device_.api().event_query(event) == 0;
}

CopyKind CudaMoveEngine::kind_of(CopyRoute route) const {
  const bool from_device = route.from == device_tier_, to_device = route.to == device_tier_;
  if (from_device) return to_device ? CopyKind::kDeviceToDevice : CopyKind::kDeviceToHost;
  return to_device ? CopyKind::kHostToDevice : CopyKind::kHostToHost;
}

unsigned CudaMoveEngine::copy(void* to, const void* from, std::size_t bytes, CopyRoute route) {
  Result<EventHandle> done = engine_.copy(to, from, bytes, kind_of(route));
  if (!done) return 0;
  const Status waited = device_.synchronize(done.value());
  device_.release(done.value());
  return waited.is_ok() ? 1 : 0;
}

}  // namespace tensortier::gpu
