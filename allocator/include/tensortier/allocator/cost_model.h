// The emulated slow tier's cost model (Quartz-style delay injection; docs/EMULATION.md).
//
// This machine has no slow memory, so an emulated tier keeps its bytes in DRAM and charges the
// time slow memory would have cost. For a layer that reads R bytes and writes W bytes of objects
// placed on the slow tier:
//   extra_ns = R * (1/BW_slow_read - 1/BW_fast_read) + W * (1/BW_slow_write - 1/BW_fast_write)
// with bandwidths in GB/s (1 GB/s = 1 byte/ns). The runtime charges it inside every layer (see
// runtime.h). A move into or out of the slow tier takes its bytes at the slow side's write or read
// bandwidth. BW_fast_read and BW_fast_write are this machine's DRAM read and write stream
// bandwidths with the engine's thread count, measured and cached, and checked against a quick
// probe at every process's start (dram_bandwidth()).
//
// A preset gives the slow tier's bandwidths in one of two forms:
//   - ratio: fractions of this machine's fast bandwidths (optane, cxl, remote-numa);
//   - per core: GB/s per core of a published server, times the threads this process computes
//     with (optane-server), so that slow memory is as slow against this machine's compute as it
//     was against that server's. A ratio understates it on a VM with more DRAM bandwidth per core.
//
// A CostModel is an immutable value: all calls are thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "tensortier/status.h"

namespace tensortier {

enum class PresetForm {
  kRatio,    // read / write are fractions of this machine's fast read / write bandwidth
  kPerCore,  // read / write are GB/s per core of a published machine, times the thread count
};
std::string_view to_string(PresetForm form);

// A kind of slow memory. Figures and their sources: docs/EMULATION.md.
struct SlowMemoryPreset {
  std::string_view name;  // spec word: "optane", "cxl", "remote-numa", "optane-server"
  PresetForm form = PresetForm::kRatio;
  double read = 1;            // see PresetForm
  double write = 1;           // see PresetForm
  double latency_factor = 1;  // slow load latency / DRAM load latency (reported; the charge is
                              // bandwidth-based, DNN layers stream)
  std::string_view source;    // where the figures come from
};

// All presets, in a fixed order.
std::span<const SlowMemoryPreset> slow_memory_presets();
// The preset of that name; an error lists the known names.
Result<SlowMemoryPreset> find_preset(std::string_view name);

enum class MoveDirection { kIntoSlow, kOutOfSlow };

// This machine's fast (DRAM) bandwidth as streams with `threads` threads.
struct FastBandwidth {
  double read_gbps = 0;   // bytes read per ns by `threads` threads summing a large buffer
  double write_gbps = 0;  // bytes written per ns by `threads` threads filling a large buffer
  unsigned threads = 1;
  std::string source;  // where it came from, for people: "TENSORTIER_DRAM_GBPS", "cache <path> ...", ...
};

// What a DRAM reference depends on: a cached one is used only where they are the same.
struct BandwidthConditions {
  std::string cpu_model;
  std::uint64_t memory_bytes = 0;
  unsigned threads = 0;
  std::string kernel;  // uname's release
};
// A cache entry: the figures, the conditions they were measured in, and when (unix seconds).
struct CachedBandwidth {
  FastBandwidth bandwidth;
  BandwidthConditions conditions;
  std::int64_t measured_at_s = 0;
};
inline constexpr std::int64_t kBandwidthCacheMaxAgeS = std::int64_t{24} * 3600;
// A cached reference slower than a quick probe now by more than this share was measured under load.
inline constexpr double kBandwidthProbeMargin = 0.20;

class CostModel {
 public:
  // fast: this machine's measured bandwidths (> 0).
  CostModel(const SlowMemoryPreset& preset, const FastBandwidth& fast);

  const SlowMemoryPreset& preset() const { return preset_; }
  double fast_read_gbps() const { return fast_read_gbps_; }
  double fast_write_gbps() const { return fast_write_gbps_; }
  double slow_read_gbps() const { return slow_read_gbps_; }
  double slow_write_gbps() const { return slow_write_gbps_; }
  unsigned threads() const { return threads_; }
  // "optane-server (per core: 1.6 GB/s read, 0.6 GB/s write a core x 2 threads)": names the
  // preset and its form, for every figure measured on it.
  std::string describe() const;
  // "DRAM reference: read 36.2, write 70.1 GB/s with 2 threads (cache ..., measured ...)": the
  // reference its charges are relative to, and where it came from; every emulated figure says it.
  std::string reference() const;

  // Extra nanoseconds a layer costs for reading and writing these slow-tier bytes.
  std::uint64_t layer_charge_ns(std::uint64_t bytes_read, std::uint64_t bytes_written) const;
  // Nanoseconds the slow tier is busy with a layer's traffic of these bytes.
  std::uint64_t slow_traffic_ns(std::uint64_t bytes_read, std::uint64_t bytes_written) const;
  // Nanoseconds a move of `bytes` takes on the slow side of the copy.
  std::uint64_t move_ns(std::uint64_t bytes, MoveDirection direction) const;

 private:
  SlowMemoryPreset preset_;
  double fast_read_gbps_;
  double fast_write_gbps_;
  double slow_read_gbps_;
  double slow_write_gbps_;
  unsigned threads_;
  std::string reference_source_;  // FastBandwidth::source
};

// steady_clock now, in nanoseconds.
std::uint64_t steady_now_ns();
// Busy-waits `ns` nanoseconds on the calling thread.
void spin_for_ns(std::uint64_t ns);
// Waits until steady_now_ns() >= `deadline_ns`: sleeps, then spins only the last ~100 us, so a
// charge keeps the core it waits on free for other threads most of the time.
void wait_until_ns(std::uint64_t deadline_ns);
// Sleeps until steady_now_ns() >= `deadline_ns`, with no spin: it may wake up to a scheduler
// tick late, and takes no CPU meanwhile (a mover thread's wait for a move's emulated time, which
// would otherwise take ~100 us of a core from the layers at every move).
void sleep_until_ns(std::uint64_t deadline_ns);

// The threads oneDNN computes with: OMP_NUM_THREADS when set to a positive number, else the CPUs
// this process may run on.
unsigned engine_threads();

// The fast bandwidths (the reference every emulated charge is relative to), in this order: the
// TENSORTIER_DRAM_GBPS environment variable (one figure for both); the cache file
// $XDG_CACHE_HOME/tensortier/dram_bandwidth.json (or ~/.cache/...) where bandwidth_cache_stale
// finds nothing wrong with it; else measured now (best of several short probes, ~0.5 s) and
// cached. The source says which, and when it was measured. Computed once per process;
// thread-safe.
FastBandwidth dram_bandwidth();
// TENSORTIER_DRAM_GBPS, where set: the DRAM reference in place of a measurement, from
// kLeastDramGbps to kMostDramGbps (a memory system's range); an error for anything else.
inline constexpr double kLeastDramGbps = 0.1, kMostDramGbps = 10'000;
Result<std::optional<double>> dram_gbps_setting();

// The conditions of this process now (CPU model, memory, engine_threads(), kernel).
BandwidthConditions bandwidth_conditions();

// Why a cached reference must be measured again, or "" to use it: there is none, it was measured
// in other conditions or more than kBandwidthCacheMaxAgeS before `now_s`, or (where `probe`, a
// quick measurement now, is given) it is slower than the probe by more than kBandwidthProbeMargin
// for reads or writes: it was measured while something else loaded the memory. Pure.
std::string bandwidth_cache_stale(const std::optional<CachedBandwidth>& cached,
                                  const BandwidthConditions& now, std::int64_t now_s,
                                  const std::optional<FastBandwidth>& probe);

// A cache file's text as an entry, or nullopt for anything that is not one (malformed JSON, wrong
// types, bandwidths not finite and positive): the cache is only a hint. Never throws.
std::optional<CachedBandwidth> parse_bandwidth_cache(std::string_view json_text);
// The text of a cache file for `entry` (parse_bandwidth_cache reads it back).
std::string bandwidth_cache_text(const CachedBandwidth& entry);

// Measures read and write stream bandwidth with `threads` threads over `buffer_bytes`, best of
// `repetitions` each.
FastBandwidth measure_dram_streams(std::size_t buffer_bytes, unsigned threads, int repetitions);

}  // namespace tensortier
