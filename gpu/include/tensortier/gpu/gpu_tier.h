// GPU tiers for the runtime: a `cuda:N[:SIZE]` tier (device memory) or a `pinned:SIZE` tier
// (page-locked host memory) as a Tier whose ranges come from one GpuArena (one cudaMalloc or
// cudaHostAlloc when the tier opens) through a RangeHeap, and the provider that opens them for
// the runtime (allocator/tier_provider.h) with the CUDA copy engine for moves.
//
//   Runtime ─ spec "fast=cuda:0:8GiB,slow=pinned:32GiB"
//     └─ CudaTierProvider ─┬─ Device (opened at the first GPU tier; streams, events)
//                          ├─ GpuTier fast: GpuArena (device) + RangeHeap    RangeKind::kDevice
//                          ├─ GpuTier slow: GpuArena (pinned) + RangeHeap    RangeKind::kHeap
//                          └─ CudaMoveEngine: every move's copy, on the copy stream of its direction
//
// Nothing of the host reads or writes a device tier's bytes: it maps nothing per range (no page
// to fault in, advise or protect), and its objects move by the copy engine to new addresses.
// Ownership: a GpuTier owns its arena; the tiers and the engine share the provider's Device.
// Thread safety: a GpuTier's calls from any thread (its heap has a lock); the provider's from
// one thread at a time.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "tensortier/allocator/range_heap.h"
#include "tensortier/allocator/tier.h"
#include "tensortier/allocator/tier_provider.h"
#include "tensortier/gpu/arena.h"
#include "tensortier/gpu/cuda_api.h"
#include "tensortier/gpu/device.h"

namespace tensortier::gpu {

class GpuTier final : public Tier {
 public:
  // The tier for `config` (cuda or pinned) on `device`; its budget is its arena's size (a cuda
  // tier without one: 90% of the device's free memory). Errors: GpuArena::open's.
  static Result<std::unique_ptr<GpuTier>> open(std::shared_ptr<Device> device, const TierConfig& config);
  ~GpuTier() override;

  RangeKind range_kind() const override {
    return kind() == TierKind::kCuda ? RangeKind::kDevice : RangeKind::kHeap;
  }
  const GpuArena& arena() const { return *arena_; }
  // Ranges handed out now (each a range of the arena).
  std::size_t ranges() const;

 protected:
  // A range of the arena, best fit; `alignment` as asked up to 2 MiB (huge pages have no meaning
  // here, but a 2 MiB-aligned range is what callers of large ranges expect). kOutOfMemory, naming
  // the largest free range, where the arena is too fragmented for it although within the budget.
  Result<void*> map(std::size_t bytes, std::size_t alignment) override;
  void unmap(void* address, std::size_t bytes) override;
  std::string backend() const override;

 private:
  GpuTier(const TierConfig& config, std::shared_ptr<Device> device, std::unique_ptr<GpuArena> arena);
  std::shared_ptr<Device> device_;  // declared first: the arena is freed through it
  std::unique_ptr<GpuArena> arena_;
  mutable std::mutex mutex_;  // guards heap_
  RangeHeap heap_;
};

// The runtime's provider of GPU tiers through `api` (real_cuda_api() by default; tests give the
// fake). Every cuda tier of one runtime must be on one device, at most one cuda tier per runtime
// (the copy engine knows one device tier); pinned tiers are host memory beside it.
class CudaTierProvider final : public TierProvider {
 public:
  explicit CudaTierProvider(const CudaApi& api = real_cuda_api()) : api_(api) {}
  std::string name() const override;
  bool opens(TierKind kind) const override { return is_gpu_kind(kind); }
  // Opens the device on the first call (a pinned tier uses device 0); kUnavailable with one
  // line where the machine has no GPU to use.
  Result<std::unique_ptr<Tier>> open(const TierConfig& config) override;
  // The CUDA copy engine for these tiers; with a cuda tier among them, the link is measured
  // first (gpu/link.h: 16 MiB each way, a few ms), said in one line. Errors: more than one cuda tier.
  Result<std::unique_ptr<CopyEngine>> copy_engine(std::span<const Tier* const> tiers) override;
  LinkGbps link_gbps() const override { return link_; }
  // Events on the device's compute stream (gpu/layer_clock.h); null before the first open.
  std::unique_ptr<LayerClock> layer_clock() override;
  // The device's compute stream.
  std::uintptr_t layer_stream() const override { return device_ ? device_->compute() : 0; }
  // On the compute stream (host_copy waited for, host_zero not); kFailedPrecondition before the
  // first open.
  Status host_copy(void* to, const void* from, std::size_t bytes, bool to_device) override;
  Status host_zero(void* to, std::size_t bytes) override;
  Status host_wait() override;
  // The device the tiers are on (null before the first open).
  const std::shared_ptr<Device>& device() const { return device_; }

 private:
  const CudaApi& api_;
  std::shared_ptr<Device> device_;
  LinkGbps link_;
};

}  // namespace tensortier::gpu
