// The emulated slow tier's cost model (Quartz-style delay injection; docs/EMULATION.md).
//
// This machine has no slow memory, so an emulated tier keeps its bytes in DRAM and charges the
// time slow memory would have cost. For a layer that reads R bytes and writes W bytes of objects
// sitting in the slow tier:
//   extra_ns = R * (1/BW_slow_read - 1/BW_fast) + W * (1/BW_slow_write - 1/BW_fast)
// with bandwidths in GB/s (1 GB/s = 1 byte/ns). Moves into or out of the slow tier run no faster
// than the slow side's write or read bandwidth. BW_fast is this machine's DRAM bandwidth,
// measured once and cached (dram_bandwidth()). Presets scale it by published ratios.
//
// A CostModel is an immutable value: all calls are thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "tensortier/status.h"

namespace tensortier {

// A kind of slow memory, as ratios to DRAM. Figures and their sources: docs/EMULATION.md.
struct SlowMemoryPreset {
  std::string_view name;            // spec word: "optane", "cxl", "remote-numa"
  double read_bandwidth_fraction;   // slow read bandwidth / DRAM bandwidth
  double write_bandwidth_fraction;  // slow write bandwidth / DRAM bandwidth
  double latency_factor;            // slow load latency / DRAM load latency (reported; the
                                    // charge is bandwidth-based, DNN layers stream)
  std::string_view source;          // where the figures come from
};

// All presets, in a fixed order.
std::span<const SlowMemoryPreset> slow_memory_presets();
// The preset of that name; an error lists the known names.
Result<SlowMemoryPreset> find_preset(std::string_view name);

enum class MoveDirection { kIntoSlow, kOutOfSlow };

class CostModel {
 public:
  // fast_gbps: DRAM bandwidth in GB/s (> 0).
  CostModel(const SlowMemoryPreset& preset, double fast_gbps);

  const SlowMemoryPreset& preset() const { return preset_; }
  double fast_gbps() const { return fast_gbps_; }
  double slow_read_gbps() const { return fast_gbps_ * preset_.read_bandwidth_fraction; }
  double slow_write_gbps() const { return fast_gbps_ * preset_.write_bandwidth_fraction; }

  // Extra nanoseconds a layer costs for reading and writing these slow-tier bytes.
  std::uint64_t layer_charge_ns(std::uint64_t bytes_read, std::uint64_t bytes_written) const;
  // Least nanoseconds a move of `bytes` takes across the slow tier's side of the copy.
  std::uint64_t move_ns(std::uint64_t bytes, MoveDirection direction) const;

 private:
  SlowMemoryPreset preset_;
  double fast_gbps_;
};

// Busy-waits `ns` nanoseconds on the calling thread: how a charge is applied.
void spin_for_ns(std::uint64_t ns);

// This machine's DRAM bandwidth and where the figure came from.
struct DramBandwidth {
  double gbps = 0;     // bytes read + written per ns by a large memcpy (STREAM "copy" counting)
  std::string source;  // "TENSORTIER_DRAM_GBPS", "cache <path>" or "measured now"
};

// The DRAM bandwidth, in this order: the TENSORTIER_DRAM_GBPS environment variable; the cache
// file $XDG_CACHE_HOME/tensortier/dram_bandwidth.json (or ~/.cache/...) when it was written on
// a machine with the same CPU model and memory size; else measured now (~0.2 s) and cached.
// Computed once per process; thread-safe.
DramBandwidth dram_bandwidth();

// Measures memcpy bandwidth over a buffer of `buffer_bytes`, best of `repetitions`.
double measure_dram_copy_gbps(std::size_t buffer_bytes, int repetitions);

}  // namespace tensortier
