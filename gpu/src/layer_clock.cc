// EventLayerClock (see layer_clock.h).
#include "tensortier/gpu/layer_clock.h"

#include <cmath>

namespace tensortier::gpu {

EventLayerClock::~EventLayerClock() {
  release_all();
}

void EventLayerClock::release_all() {
  for (EventHandle e : marks_) device_->release(e);
  marks_.clear();
}

void EventLayerClock::layer_begin() {
  Result<EventHandle> e = device_->record(device_->compute());
  marks_.push_back(e ? e.value() : 0);
}

void EventLayerClock::layer_end() {
  layer_begin();  // the same: an event after the layer's work
}

std::vector<std::uint64_t> EventLayerClock::layer_ns() {
  std::vector<std::uint64_t> times;
  const CudaApi& api = device_->api();
  bool readable = marks_.size() % 2 == 0 && (marks_.empty() || device_->synchronize(marks_.back()).is_ok());
  for (std::size_t i = 0; readable && i + 1 < marks_.size(); i += 2) {
    float ms = 0;
    readable = marks_[i] != 0 && marks_[i + 1] != 0 &&
               api.event_elapsed_ms(&ms, marks_[i], marks_[i + 1]) == 0 && ms >= 0;
    times.push_back(static_cast<std::uint64_t>(std::llround(static_cast<double>(ms) * 1e6)));
  }
  release_all();
  if (!readable) times.clear();
  return times;
}

}  // namespace tensortier::gpu
