// TierProvider: opens the tiers of kinds that open_tier() leaves to a backend (the GPU's: cuda,
// pinned) and gives the copy engine that moves objects between them and the host's tiers, the
// link's rates and the layers' clock. The runtime asks it for every tier of those kinds in a spec,
// then sets its engine on the allocator.
//
//   spec "fast=cuda:0:8GiB,slow=pinned:32GiB"
//     ├─ fast ─▶ provider.open ─▶ Tier (device memory, RangeKind::kDevice)
//     ├─ slow ─▶ provider.open ─▶ Tier (page-locked host memory)
//     └─ provider.copy_engine(tiers) ─▶ ObjectAllocator::set_copy_engine
//
// Ownership: the tiers and the engine it makes may borrow what the provider holds (a device, its
// streams): whoever holds them keeps the provider alive longer (the runtime destroys its allocator
// first). Thread safety: one caller at a time (the runtime calls it while it is being made).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tensortier/allocator/copy_engine.h"
#include "tensortier/allocator/tier.h"
#include "tensortier/allocator/tier_spec.h"

namespace tensortier {

// What the link between a provider's device tier and the host moves, measured when its copy
// engine was made; 0: not measured.
struct LinkGbps {
  double to_device = 0;
  double to_host = 0;
};

// LayerClock: the times of layers whose work runs beside the host (a GPU's kernels, queued on its
// compute stream), which the host's clock cannot see. The runtime marks each layer's begin and end
// as the program issues them, and at the step's end reads each layer's time on the device.
// Thread safety: the training thread's (the runtime calls it from step and layer marks).
class LayerClock {
 public:
  virtual ~LayerClock() = default;
  virtual void layer_begin() = 0;
  virtual void layer_end() = 0;
  // Each layer's time (ns) between its marks, in marking order, for every layer marked since the
  // last call; waits for the last mark's work to end. Empty where they cannot be read (the runtime
  // then keeps its host times).
  virtual std::vector<std::uint64_t> layer_ns() = 0;
};

class TierProvider {
 public:
  virtual ~TierProvider() = default;
  // "cuda (CUDA runtime 13000)", for people.
  virtual std::string name() const = 0;
  virtual bool opens(TierKind kind) const = 0;
  // The tier `config` describes. Errors say what the machine lacks (no GPU: kUnavailable) or what
  // in the config is wrong, and what to do.
  virtual Result<std::unique_ptr<Tier>> open(const TierConfig& config) = 0;
  // The engine that copies between `tiers` (all of a runtime's, fastest first, host ones too).
  virtual Result<std::unique_ptr<CopyEngine>> copy_engine(std::span<const Tier* const> tiers) = 0;
  // The link's rates, for plans (PlanInputs::set_link_rates); zeros where not measured.
  virtual LinkGbps link_gbps() const { return {}; }
  // The clock of the layers on the device its tiers are on; null: the host's clock is right.
  virtual std::unique_ptr<LayerClock> layer_clock() { return nullptr; }
  // The stream the layers' work must be queued on for the clock and the copy engine's ordering to
  // see it (a cudaStream_t as a number); 0: none (no device opened).
  virtual std::uintptr_t layer_stream() const { return 0; }
  // Host code's bytes into or out of memory of a tier it opened (`to_device`: host -> tier), for
  // the runtime's write_object and read_object: queued on layer_stream() after the layers' work
  // and waited for. host_zero: `bytes` zero bytes at `to`, queued there and not waited for (what
  // runs after it on the stream, and copies ordered after the object's use, see the zeros).
  virtual Status host_copy(void* /*to*/, const void* /*from*/, std::size_t /*bytes*/, bool /*to_device*/) {
    return failed_precondition(name() + " copies no host bytes");
  }
  virtual Status host_zero(void* /*to*/, std::size_t /*bytes*/) {
    return failed_precondition(name() + " zeroes no memory");
  }
  // Waits for the work queued on layer_stream() (before host code reads or writes host memory a
  // layer's kernels may still use).
  virtual Status host_wait() { return Status::ok(); }
};

}  // namespace tensortier
