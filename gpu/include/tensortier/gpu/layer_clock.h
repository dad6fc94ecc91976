// EventLayerClock: layer times on a GPU (allocator/tier_provider.h's LayerClock), from events
// recorded on the device's compute stream at each layer's begin and end and read at the step's
// end. A layer's kernels are queued on that stream between its two events, so the time between
// them is the layer's time on the device, not the host's time to issue it.
//
//   compute  ─●b0─ layer 0 kernels ─●e0─●b1─ layer 1 kernels ─●e1─▶   layer i: elapsed(bi, ei)
//
// Ownership: borrows the Device (events from its pool, given back when read).
// Thread safety: the training thread's.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tensortier/allocator/tier_provider.h"
#include "tensortier/gpu/device.h"

namespace tensortier::gpu {

class EventLayerClock final : public LayerClock {
 public:
  explicit EventLayerClock(std::shared_ptr<Device> device) : device_(std::move(device)) {}
  ~EventLayerClock() override;
  EventLayerClock(const EventLayerClock&) = delete;
  EventLayerClock& operator=(const EventLayerClock&) = delete;
  void layer_begin() override;
  void layer_end() override;
  // Empty where an event could not be recorded or read (the runtime keeps the host's times).
  std::vector<std::uint64_t> layer_ns() override;

 private:
  void release_all();
  std::shared_ptr<Device> device_;
  std::vector<EventHandle> marks_;  // begin, end, begin, end, ... (0: not recorded)
};

}  // namespace tensortier::gpu
