// real_cuda_api: the CudaApi table bound to the CUDA runtime (libcudart), and cuda_status.
#include <cuda_runtime_api.h>

#include <fmt/format.h>

#include "tensortier/gpu/cuda_api.h"

namespace tensortier::gpu {
namespace {

cudaStream_t stream_of(StreamHandle h) {
  return reinterpret_cast<cudaStream_t>(h);  // NOLINT(performance-no-int-to-ptr): a handle, as given
}
cudaEvent_t event_of(EventHandle h) {
  return reinterpret_cast<cudaEvent_t>(h);  // NOLINT(performance-no-int-to-ptr)
}

cudaMemcpyKind kind_of(CopyKind kind) {
  switch (kind) {
    case CopyKind::kHostToDevice:
      return cudaMemcpyHostToDevice;
    case CopyKind::kDeviceToHost:
      return cudaMemcpyDeviceToHost;
    case CopyKind::kDeviceToDevice:
      return cudaMemcpyDeviceToDevice;
    case CopyKind::kHostToHost:
      return cudaMemcpyHostToHost;
  }
  return cudaMemcpyDefault;
}

CudaApi make_api() {
  CudaApi api;
  api.device_count = [](int* count) -> CudaStatus { return cudaGetDeviceCount(count); };
  api.set_device = [](int device) -> CudaStatus { return cudaSetDevice(device); };
  api.device_info = [](int device, std::string* name, std::uint64_t* memory_bytes,
                       int* capability) -> CudaStatus {
    cudaDeviceProp prop{};
    const cudaError_t e = cudaGetDeviceProperties(&prop, device);
    if (e != cudaSuccess) return e;
    *name = prop.name;
    *memory_bytes = prop.totalGlobalMem;
    *capability = prop.major * 10 + prop.minor;
    return cudaSuccess;
  };
  api.mem_info = [](std::uint64_t* free_bytes, std::uint64_t* total_bytes) -> CudaStatus {
    std::size_t f = 0, t = 0;
    const cudaError_t e = cudaMemGetInfo(&f, &t);
    *free_bytes = f;
    *total_bytes = t;
    return e;
  };
  api.malloc_device = [](void** ptr, std::size_t bytes) -> CudaStatus { return cudaMalloc(ptr, bytes); };
  api.free_device = [](void* ptr) -> CudaStatus { return cudaFree(ptr); };
  api.malloc_pinned = [](void** ptr, std::size_t bytes) -> CudaStatus {
    return cudaHostAlloc(ptr, bytes, cudaHostAllocDefault);
  };
  api.free_pinned = [](void* ptr) -> CudaStatus { return cudaFreeHost(ptr); };
  api.memcpy_async = [](void* dst, const void* src, std::size_t bytes, CopyKind kind,
                        StreamHandle stream) -> CudaStatus {
    return cudaMemcpyAsync(dst, src, bytes, kind_of(kind), stream_of(stream));
  };
  api.memset_async = [](void* dst, int value, std::size_t bytes, StreamHandle stream) -> CudaStatus {
    return cudaMemsetAsync(dst, value, bytes, stream_of(stream));
  };
  api.stream_create = [](StreamHandle* stream) -> CudaStatus {
    cudaStream_t s = nullptr;
    const cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    *stream = reinterpret_cast<StreamHandle>(s);
    return e;
  };
  api.stream_destroy = [](StreamHandle stream) -> CudaStatus { return cudaStreamDestroy(stream_of(stream)); };
  api.stream_synchronize = [](StreamHandle stream) -> CudaStatus {
    return cudaStreamSynchronize(stream_of(stream));
  };
  api.stream_wait_event = [](StreamHandle stream, EventHandle event) -> CudaStatus {
    return cudaStreamWaitEvent(stream_of(stream), event_of(event), 0);
  };
  api.event_create = [](EventHandle* event) -> CudaStatus {
    cudaEvent_t e = nullptr;
    const cudaError_t r = cudaEventCreate(&e);
    *event = reinterpret_cast<EventHandle>(e);
    return r;
  };
  api.event_destroy = [](EventHandle event) -> CudaStatus { return cudaEventDestroy(event_of(event)); };
  api.event_record = [](EventHandle event, StreamHandle stream) -> CudaStatus {
    return cudaEventRecord(event_of(event), stream_of(stream));
  };
  api.event_synchronize = [](EventHandle event) -> CudaStatus {
    return cudaEventSynchronize(event_of(event));
  };
  api.event_query = [](EventHandle event) -> CudaStatus { return cudaEventQuery(event_of(event)); };
  api.event_elapsed_ms = [](float* ms, EventHandle start, EventHandle end) -> CudaStatus {
    return cudaEventElapsedTime(ms, event_of(start), event_of(end));
  };
  api.error_string = [](CudaStatus status) -> const char* {
    return cudaGetErrorString(static_cast<cudaError_t>(status));
  };
  api.not_ready = cudaErrorNotReady;
  api.no_device = cudaErrorNoDevice;
  api.insufficient_driver = cudaErrorInsufficientDriver;
  static const std::string name = fmt::format("CUDA runtime {}", CUDART_VERSION);
  api.name = name.c_str();
  return api;
}

}  // namespace

const CudaApi& real_cuda_api() {
  static const CudaApi api = make_api();
  return api;
}

}  // namespace tensortier::gpu
