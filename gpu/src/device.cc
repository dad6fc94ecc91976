// Device (see device.h).
#include "tensortier/gpu/device.h"

#include <fmt/format.h>

namespace tensortier::gpu {

Status cuda_status(const CudaApi& api, CudaStatus status, const char* call) {
  if (status == 0) return Status::ok();
  const std::string text = fmt::format("{}: {} (CUDA error {})", call, api.error_string(status), status);
  if (status == api.no_device || status == api.insufficient_driver) return unavailable(text);
  return internal_error(text);
}

Result<std::unique_ptr<Device>> Device::open(const CudaApi& api, int index) {
  int count = 0;
  if (Status s = cuda_status(api, api.device_count(&count), "cudaGetDeviceCount"); !s.is_ok()) {
    if (s.code() == StatusCode::kUnavailable)
      return unavailable(fmt::format("no CUDA device to use on this machine ({})", s.message()));
    return s;
  }
  if (index < 0 || index >= count) {
    return unavailable(
        fmt::format("no CUDA device {} on this machine ({} device{})", index, count, count == 1 ? "" : "s"));
  }
  std::unique_ptr<Device> d(new Device(api));
  d->index_ = index;
  TENSORTIER_RETURN_IF_ERROR(cuda_status(api, api.set_device(index), "cudaSetDevice"));
  TENSORTIER_RETURN_IF_ERROR(cuda_status(
      api, api.device_info(index, &d->name_, &d->memory_bytes_, &d->capability_), "cudaGetDeviceProperties"));
  for (StreamHandle* s : {&d->compute_, &d->to_device_, &d->to_host_})
    TENSORTIER_RETURN_IF_ERROR(cuda_status(api, api.stream_create(s), "cudaStreamCreate"));
  return d;
}

Device::~Device() {
  for (StreamHandle s : {compute_, to_device_, to_host_}) {
    if (s == 0) continue;
    (void)api_.stream_synchronize(s);
    (void)api_.stream_destroy(s);
  }
  for (EventHandle e : all_events_) (void)api_.event_destroy(e);
}

std::string Device::describe() const {
  return fmt::format("{} (cuda:{}, {:.1f} GiB, compute {}.{}; {})", name_, index_,
                     static_cast<double>(memory_bytes_) / (1 << 30), capability_ / 10, capability_ % 10,
                     api_.name);
}

Status Device::make_current() const {
  return cuda_status(api_, api_.set_device(index_), "cudaSetDevice");
}

Result<EventHandle> Device::record(StreamHandle stream) {
  EventHandle event = 0;
  {
    std::lock_guard lock(events_mutex_);
    if (!free_events_.empty()) {
      event = free_events_.back();
      free_events_.pop_back();
    }
  }
  if (event == 0) {  // an event is its creating thread's current device's: this one's
    TENSORTIER_RETURN_IF_ERROR(make_current());
    TENSORTIER_RETURN_IF_ERROR(cuda_status(api_, api_.event_create(&event), "cudaEventCreate"));
    std::lock_guard lock(events_mutex_);
    all_events_.push_back(event);
  }
  if (Status s = cuda_status(api_, api_.event_record(event, stream), "cudaEventRecord"); !s.is_ok()) {
    release(event);
    return s;
  }
  return event;
}

void Device::release(EventHandle event) {
  if (event == 0) return;
  std::lock_guard lock(events_mutex_);
  free_events_.push_back(event);
}

Status Device::wait(StreamHandle stream, EventHandle event) {
  return cuda_status(api_, api_.stream_wait_event(stream, event), "cudaStreamWaitEvent");
}

Status Device::synchronize(EventHandle event) {
  return cuda_status(api_, api_.event_synchronize(event), "cudaEventSynchronize");
}

Status Device::synchronize_stream(StreamHandle stream) {
  return cuda_status(api_, api_.stream_synchronize(stream), "cudaStreamSynchronize");
}

}  // namespace tensortier::gpu
