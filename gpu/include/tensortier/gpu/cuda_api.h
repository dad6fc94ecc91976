// CudaApi: the CUDA runtime calls the GPU backend makes, as one table of functions. The backend
// never calls the CUDA runtime directly: real_cuda_api() binds the table to it (libcudart), and
// tests bind a fake that runs on the CPU and records what is ordered after what
// (tests/gpu/fake_cuda.h), so the ordering of copies and kernels is tested without a GPU.
//
// Handles are opaque numbers (a cudaStream_t or cudaEvent_t cast to one); 0 is the default stream
// and never an event. Every call returns a CudaStatus: 0 is success, anything else is the
// runtime's error code with its text from error_string.
// Thread safety: that of the CUDA runtime (every call from any thread); the table is immutable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tensortier/status.h"

namespace tensortier::gpu {

using CudaStatus = int;
using StreamHandle = std::uintptr_t;
using EventHandle = std::uintptr_t;

enum class CopyKind { kHostToDevice, kDeviceToHost, kDeviceToDevice, kHostToHost };

struct CudaApi {
  CudaStatus (*device_count)(int* count) = nullptr;
  CudaStatus (*set_device)(int device) = nullptr;
  // The device's name, memory bytes and compute capability (major * 10 + minor).
  CudaStatus (*device_info)(int device, std::string* name, std::uint64_t* memory_bytes,
                            int* capability) = nullptr;
  CudaStatus (*mem_info)(std::uint64_t* free_bytes, std::uint64_t* total_bytes) = nullptr;
  CudaStatus (*malloc_device)(void** ptr, std::size_t bytes) = nullptr;
  CudaStatus (*free_device)(void* ptr) = nullptr;
  CudaStatus (*malloc_pinned)(void** ptr, std::size_t bytes) = nullptr;  // page-locked host memory
  CudaStatus (*free_pinned)(void* ptr) = nullptr;
  CudaStatus (*memcpy_async)(void* dst, const void* src, std::size_t bytes, CopyKind kind,
                             StreamHandle stream) = nullptr;
  CudaStatus (*memset_async)(void* dst, int value, std::size_t bytes, StreamHandle stream) = nullptr;
  CudaStatus (*stream_create)(StreamHandle* stream) = nullptr;  // non-blocking against stream 0
  CudaStatus (*stream_destroy)(StreamHandle stream) = nullptr;
  CudaStatus (*stream_synchronize)(StreamHandle stream) = nullptr;
  CudaStatus (*stream_wait_event)(StreamHandle stream, EventHandle event) = nullptr;
  CudaStatus (*event_create)(EventHandle* event) = nullptr;  // with timing
  CudaStatus (*event_destroy)(EventHandle event) = nullptr;
  CudaStatus (*event_record)(EventHandle event, StreamHandle stream) = nullptr;
  CudaStatus (*event_synchronize)(EventHandle event) = nullptr;
  // 0 where the event's work is done, kNotReady where not yet, else an error.
  CudaStatus (*event_query)(EventHandle event) = nullptr;
  CudaStatus (*event_elapsed_ms)(float* ms, EventHandle start, EventHandle end) = nullptr;
  const char* (*error_string)(CudaStatus status) = nullptr;
  CudaStatus not_ready = 600;           // cudaErrorNotReady: what event_query says of work not done
  CudaStatus no_device = 100;           // cudaErrorNoDevice
  CudaStatus insufficient_driver = 35;  // cudaErrorInsufficientDriver (no driver, or too old)
  const char* name = "";                // "CUDA runtime 13000", "fake (CPU)"
};

// The table bound to the CUDA runtime this library was built with.
const CudaApi& real_cuda_api();

// `status` of `call` as a Status: ok for 0, else kInternal naming the call and the runtime's text
// (kUnavailable for "no device" and "insufficient driver", which say the machine has no GPU to use).
Status cuda_status(const CudaApi& api, CudaStatus status, const char* call);

}  // namespace tensortier::gpu
