// tensortier's public C++ API: the one header a oneDNN-based training program includes.
//
// A Runtime owns the memory tiers of this machine and every object (tensor) placed on them.
// The program allocates its tensors through it, marks each training step and each layer (with
// the objects the layer reads and writes), and reads per-tier stats. Later parts (profiler,
// migrator) use these marks to learn one step and move objects ahead of the layers.
//
// Where the tiers come from, first match wins:
//   1. RuntimeOptions::tier_spec, when not empty;
//   2. the TENSORTIER_TIERS environment variable, when set and not empty;
//   3. hwloc discovery: one tier per NUMA node, ranked fast to slow by HMAT figures.
// The spec grammar is in tensortier/allocator/tier_spec.h and docs/TIERS.md.
//
// Thread safety:
//   - allocate(), free(), object(), stats(), tiers() and describe() may be called from any
//     thread at any time;
//   - lookup() is lock-free and async-signal-safe (for SIGSEGV handlers);
//   - step_begin/step_end/layer_begin/layer_end belong to the one thread that drives training:
//     they must not be called concurrently with each other.
// Ownership: the Runtime owns all object memory; free() or destroying the Runtime releases it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tensortier/allocator/object_allocator.h"
#include "tensortier/allocator/tier.h"
#include "tensortier/status.h"

namespace tensortier {

struct RuntimeOptions {
  std::string tier_spec;  // empty: TENSORTIER_TIERS, else hwloc discovery
};

// One layer's execution as marked by the program.
struct LayerRecord {
  std::string name;
  std::uint32_t index = 0;        // position in its step, from 0
  std::vector<ObjectId> reads;    // objects the layer declared it reads
  std::vector<ObjectId> writes;   // objects the layer declared it writes
  std::uint64_t duration_ns = 0;  // wall time between layer_begin and layer_end
};

struct RuntimeStats {
  std::vector<TierUsage> tiers;  // fastest first
  std::uint64_t steps_completed = 0;
  std::uint64_t live_objects = 0;
};

class Runtime {
 public:
  // Opens the tiers and logs one line per tier. Errors: a malformed spec (quoting the bad part),
  // a tier the machine lacks (saying what to use instead).
  static Result<std::unique_ptr<Runtime>> create(const RuntimeOptions& options = {});
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // The spec the runtime runs with (after discovery), and where it came from:
  // "options", "TENSORTIER_TIERS" or "hwloc discovery (...)".
  const std::string& spec() const { return spec_; }
  const std::string& spec_source() const { return spec_source_; }
  std::size_t tier_count() const { return allocator_.tier_count(); }
  const Tier& tier(TierIndex index) const { return allocator_.tier(index); }
  // One line per tier, for people.
  std::string describe() const;

  // Places a named object; see ObjectAllocator::allocate for placement and errors.
  Result<ObjectInfo> allocate(std::string_view name, std::size_t bytes, GroupId group = kDefaultGroup,
                              TierIndex preferred = 0);
  Status free(const void* address);
  Result<ObjectInfo> object(const void* address) const { return allocator_.info(address); }
  bool lookup(const void* address, SpanView* out) const noexcept { return allocator_.lookup(address, out); }

  // Step and layer marks. Errors (kFailedPrecondition) for marks out of order: a layer outside a
  // step, a layer inside a layer, an end without a begin. layer_begin fails with kNotFound,
  // naming the pointer, if a read or write is not the start of a live object.
  Status step_begin();
  Status step_end();
  Status layer_begin(std::string_view name, std::span<const void* const> reads,
                     std::span<const void* const> writes);
  Status layer_end();
  bool in_step() const { return in_step_; }
  // Layers of the last completed step, in order.
  const std::vector<LayerRecord>& last_step_layers() const { return last_step_; }

  RuntimeStats stats() const;

 private:
  Runtime(std::vector<std::unique_ptr<Tier>> tiers, std::string spec, std::string source);

  ObjectAllocator allocator_;
  std::string spec_;
  std::string spec_source_;
  // Training-thread state (see thread safety above).
  bool in_step_ = false;
  bool in_layer_ = false;
  std::atomic<std::uint64_t> steps_completed_{0};  // read by stats() from any thread
  std::uint64_t layer_start_ns_ = 0;
  std::vector<LayerRecord> current_step_;
  std::vector<LayerRecord> last_step_;
};

// Resolves the tier spec the way Runtime::create does, without opening tiers: (configs, source).
Result<std::pair<std::vector<TierConfig>, std::string>> resolve_tier_spec(const RuntimeOptions& options);

}  // namespace tensortier
