// CudaCopyEngine: moves between device memory and pinned host memory as copies on the device's
// copy streams, ordered by events. A copy starts after every event it is given (the last user of
// its source, the previous occupant of its destination) and returns the event that marks its end;
// the layer that needs the destination makes the compute stream wait for that event (a copy in
// flight is waited for on the GPU, as a CPU layer's pin waits for a move). Nothing is remapped:
// a move is the copy and the new address the caller publishes.
//
//   compute   ─ layer i writes x ─●(e1)──────────────── layer j ──▶ wait(e2) before j reads y
//   to_host   ─────────── wait(e1) ─ copy x → home ─●(e2)
//
// Ownership: borrows the Device. Thread safety: copy() may be called from any thread; the
// device's streams keep each direction's copies in the order they were issued.
#pragma once

#include <cstddef>
#include <span>

#include "tensortier/gpu/device.h"

namespace tensortier::gpu {

class CudaCopyEngine {
 public:
  explicit CudaCopyEngine(Device& device) : device_(device) {}

  // Copies `bytes` from `src` to `dst` (kind: which way) on the copy stream of that direction
  // (device to device on to_device), after every event in `after` (0s are skipped). Returns the
  // event that completes when the copy has; release it to the device once nothing will wait on it.
  // Errors: the runtime's, with nothing issued after the failing call.
  Result<EventHandle> copy(void* dst, const void* src, std::size_t bytes, CopyKind kind,
                           std::span<const EventHandle> after = {});
  // Whether the copy that `event` ends has ended (no wait).
  bool done(EventHandle event) const;

 private:
  StreamHandle stream_for(CopyKind kind) const;
  Device& device_;
};

}  // namespace tensortier::gpu
