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
// Ownership: borrows the Device. Thread safety: copy() and layer_used() may be called from any
// thread; the device's streams keep each direction's copies in the order they were issued.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "tensortier/allocator/copy_engine.h"
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

// The CUDA copy engine behind the allocator's CopyEngine (copy_engine.h in allocator/): the
// allocator's mover copies between a device tier and host tiers with it as with the CPU's, and
// waits for each copy's event before it publishes the new address, so neither the executor nor
// the policies change. `device_tier` is the allocator's index of the device tier (none: an index
// past the tiers); every other tier is host memory (pinned, for copies at full speed).
//
// A layer's kernels may still run when its layer_end returns, so at each layer's end the runtime
// says which bytes the layer used (layer_used): the engine records an event on the compute stream
// then, and a later copy from or into any of those bytes (the object moving out, or the next
// occupant of its place moving in) starts after that event.
//
//   compute  ─ layer 3 uses x ─●(e3)─ layer 4 ─────
//   to_host  ──────── wait(e3) ─ copy x → home ─●   (x's range last used at e3)
class CudaMoveEngine final : public tensortier::CopyEngine {
 public:
  CudaMoveEngine(Device& device, TierIndex device_tier)
      : engine_(device), device_(device), device_tier_(device_tier) {}
  // The same, holding the device as long as the engine lives (a runtime's engine may outlive the
  // provider that opened the device).
  CudaMoveEngine(std::shared_ptr<Device> device, TierIndex device_tier)
      : CudaMoveEngine(*device, device_tier) {
    owned_ = std::move(device);
  }
  ~CudaMoveEngine() override;
  CudaMoveEngine(const CudaMoveEngine&) = delete;
  CudaMoveEngine& operator=(const CudaMoveEngine&) = delete;
  std::string_view name() const override { return "cuda"; }
  // Returns 1, or 0 where the runtime refused the copy or its wait (the bytes are then not known
  // to be there: the caller's move must fail), or where a layer's use could not be ordered
  // before it (layer_used below), from then on.
  unsigned copy(void* to, const void* from, std::size_t bytes, CopyRoute route) override;
  unsigned threads() const override { return 1; }
  // Records an event after the layer's work for the ranges it used; where the event cannot be
  // recorded, waits for the layer's work on the host instead (no later copy may start before it),
  // and where that fails too, every later copy fails (nothing copied early: a write never lost).
  void layer_used(std::span<const UsedRange> ranges) override;
  // The direction of a copy between these tiers.
  CopyKind kind_of(CopyRoute route) const;
  // Ranges whose last use is known (each layer's bytes, until a later layer's overlap them).
  std::size_t tracked_ranges() const;

 private:
  struct LastUse {
    std::uintptr_t end = 0;
    std::shared_ptr<EventHandle> event;  // released to the device when no range holds it
  };
  using LastUses = std::map<std::uintptr_t, LastUse>;
  // The first known range that overlaps [begin, ...); mutex_ held.
  LastUses::iterator first_overlap_locked(std::uintptr_t begin);
  // The events of the layers that last used bytes overlapping [begin, end); mutex_ held.
  void last_uses_locked(std::uintptr_t begin, std::uintptr_t end,
                        std::vector<std::shared_ptr<EventHandle>>& out);
  std::shared_ptr<Device> owned_;  // first: the events below go back to it
  CudaCopyEngine engine_;
  Device& device_;
  TierIndex device_tier_;
  mutable std::mutex mutex_;  // guards last_use_ and unordered_
  LastUses last_use_;         // begin -> the range's end and its last layer's event
  bool unordered_ = false;    // a layer's use could be neither recorded nor waited for
};

}  // namespace tensortier::gpu
