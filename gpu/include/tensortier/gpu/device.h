// Device: one CUDA device as the GPU backend uses it: a compute stream (layers), a copy stream
// each way (moves in and out), and events that order them (the backend's fences).
//
//   compute  ──kernels──●────────────●──▶     ● an event: the work issued on its stream so far
//                       │ wait        ▲ wait
//   to_device ──copy in─┘             │
//   to_host   ──────────────copy out──┘
//
// A stream runs its work in order; work on two streams is ordered only by an event one records
// and the other waits for (wait). Events come from a pool (record) and go back to it (release)
// once nothing will wait for them.
// Ownership: the device owns its streams and events; it borrows the CudaApi table, which must
// outlive it. Thread safety: record, release and wait may be called from any thread (the event
// pool has a lock); streams are the CUDA runtime's (thread-safe).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tensortier/gpu/cuda_api.h"
#include "tensortier/status.h"

namespace tensortier::gpu {

// `status` of `call` as a Status: ok for 0, else kInternal naming the call and the runtime's text
// (kUnavailable for "no device" and "insufficient driver": this machine has no GPU to use).
Status cuda_status(const CudaApi& api, CudaStatus status, const char* call);

class Device {
 public:
  // Device `index` through `api`. Errors: kUnavailable with one line where the machine has no
  // such device (no GPU, no driver); kInternal where a stream or event cannot be made.
  static Result<std::unique_ptr<Device>> open(const CudaApi& api, int index = 0);
  ~Device();  // waits for its streams, then destroys them and its events
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const CudaApi& api() const { return api_; }
  int index() const { return index_; }
  const std::string& name() const { return name_; }
  std::uint64_t memory_bytes() const { return memory_bytes_; }
  int capability() const { return capability_; }  // 90: Hopper (H100, H200)
  // "NVIDIA H200 (cuda:0, 139.8 GiB, compute 9.0; CUDA runtime 13000)".
  std::string describe() const;

  // Makes this the calling thread's current device (CUDA's is per thread, 0 until set): a thread
  // other than the one that opened it (the mover) calls it before it makes events or copies.
  Status make_current() const;

  StreamHandle compute() const { return compute_; }
  StreamHandle to_device() const { return to_device_; }
  StreamHandle to_host() const { return to_host_; }

  // An event recorded on `stream` now: it completes once the work issued there so far has.
  Result<EventHandle> record(StreamHandle stream);
  // Back to the pool (0 is ignored).
  void release(EventHandle event);
  // Work issued on `stream` after this waits for `event` (no host wait).
  Status wait(StreamHandle stream, EventHandle event);
  // The host waits for the event, or for everything issued on the stream.
  Status synchronize(EventHandle event);
  Status synchronize_stream(StreamHandle stream);

 private:
  explicit Device(const CudaApi& api) : api_(api) {}
  const CudaApi& api_;
  int index_ = 0;
  std::string name_;
  std::uint64_t memory_bytes_ = 0;
  int capability_ = 0;
  StreamHandle compute_ = 0, to_device_ = 0, to_host_ = 0;
  std::mutex events_mutex_;  // guards the two lists below
  std::vector<EventHandle> all_events_;
  std::vector<EventHandle> free_events_;
};

}  // namespace tensortier::gpu
