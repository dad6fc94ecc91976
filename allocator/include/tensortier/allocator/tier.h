// Tier: one place where bytes live (DRAM, a NUMA node, a memkind kind, an emulated slow tier, a
// GPU's memory or page-locked host memory: gpu/gpu_tier.h), with a capacity budget in bytes.
//
// A Tier hands out page-aligned ranges whose size is a multiple of the page size, so that a
// range owns its pages: protecting or moving it touches nothing else. It counts the bytes it has
// handed out (used) and their high-water mark (peak), and refuses an allocation that would pass
// its budget. Caching and reuse of ranges belong to the ObjectAllocator above it, not here.
//
// Budget and mapping are two steps so that a move can reserve room at its destination before it
// maps anything (reserve, then map_reserved) and release its source's budget without unmapping
// (an in-place move hands the pages at an address to another tier; see ObjectAllocator::move).
//
// Ownership: the caller of allocate() owns the range until it passes it back to deallocate()
// with the same size. A Tier must outlive every range it handed out.
// Thread safety: every call is safe to call concurrently.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "tensortier/allocator/cost_model.h"
#include "tensortier/allocator/tier_spec.h"
#include "tensortier/status.h"

namespace tensortier {

inline constexpr std::size_t kPageBytes = 4096;                      // base page size on x86-64 Linux
inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;  // transparent huge page size

// Rounds bytes up to a multiple of `multiple` (a power of two).
constexpr std::size_t round_up(std::size_t bytes, std::size_t multiple) {
  return (bytes + multiple - 1) & ~(multiple - 1);
}

// How a tier makes its ranges, which decides how an object can move off it.
enum class RangeKind {
  kAnonymous,  // private anonymous mappings (mmap): dram, numa, emulated; freed with munmap, so
               // another tier's pages may be remapped over them (the address stays)
  kHeap,       // memory from a memkind heap (pmem directory, daxkmem), or a GPU tier's page-locked
               // host arena: freed to that heap only; an object moving off it gets a new address
  kDevice,     // a GPU's memory (a cuda tier's arena): the CPU never reads or writes it; its objects
               // move to a new address through the allocator's copy engine (the CUDA one)
};

// A busy-until clock for an emulated tier's bandwidth: layer traffic and moves both reserve
// time on it, so a copy into slow memory delays the layers that use slow memory at that moment.
// Times are steady_clock nanoseconds. Thread-safe (one atomic).
class BandwidthTimeline {
 public:
  // Reserves `duration_ns` that start no earlier than `earliest_start_ns` nor before the end of
  // every earlier reservation; returns the end of the reserved interval.
  std::uint64_t reserve(std::uint64_t earliest_start_ns, std::uint64_t duration_ns);
  std::uint64_t busy_until_ns() const { return busy_until_ns_.load(std::memory_order_relaxed); }

 private:
  std::atomic<std::uint64_t> busy_until_ns_{0};
};

class Tier {
 public:
  Tier(std::string name, TierKind kind, std::uint64_t budget_bytes);
  virtual ~Tier() = default;
  Tier(const Tier&) = delete;
  Tier& operator=(const Tier&) = delete;

  const std::string& name() const { return name_; }
  TierKind kind() const { return kind_; }
  std::uint64_t budget_bytes() const { return budget_bytes_.load(std::memory_order_relaxed); }
  // A new budget (a policy's fast budget, say). Bytes already used stay; if they pass the new
  // budget, later reservations fail until enough is given back.
  // The peak restarts from the bytes used now: it is the peak under the budget in force.
  void set_budget_bytes(std::uint64_t bytes) {
    budget_bytes_.store(bytes, std::memory_order_relaxed);
    peak_bytes_.store(used_bytes(), std::memory_order_relaxed);
  }
  std::uint64_t used_bytes() const { return used_bytes_.load(std::memory_order_relaxed); }
  // The peak restarts from the bytes used now.
  void reset_peak() { peak_bytes_.store(used_bytes(), std::memory_order_relaxed); }
  std::uint64_t peak_bytes() const { return peak_bytes_.load(std::memory_order_relaxed); }
  // Bytes that an allocation of `bytes` could still get within the budget.
  std::uint64_t free_bytes() const;

  // Hands out `bytes` (a multiple of kPageBytes, > 0) aligned to `alignment` (a power of two,
  // at least kPageBytes). Ranges of kHugePageBytes or more are 2 MiB aligned and advised for
  // transparent huge pages where the backend allows it. Fails with kOutOfMemory when the budget
  // would be passed or the backend has no memory; the Tier's counters are then unchanged.
  Result<void*> allocate(std::size_t bytes, std::size_t alignment = kPageBytes);
  // Returns a range from allocate(); `bytes` must be the size it was allocated with.
  void deallocate(void* address, std::size_t bytes);

  // The two halves of allocate() and deallocate(), for moves. reserve() takes `bytes` of budget
  // or fails with kOutOfMemory (counters unchanged); unreserve() gives budget back.
  Status reserve(std::size_t bytes);
  void unreserve(std::size_t bytes);
  // Maps a range for budget already reserved. On failure the reservation stays (unreserve it).
  Result<void*> map_reserved(std::size_t bytes, std::size_t alignment = kPageBytes);
  // Unmaps a range this tier mapped, leaving the budget counters alone.
  void unmap_range(void* address, std::size_t bytes) { unmap(address, bytes); }

  virtual RangeKind range_kind() const = 0;
  // One line for people: "fast: dram (anonymous mappings, default NUMA policy), budget 8.00 GiB".
  virtual std::string describe() const;
  // The NUMA node this tier binds its memory to, where it binds to one.
  virtual std::optional<int> numa_node() const { return std::nullopt; }
  // The slow-memory cost model of an emulated tier; nullptr for real memory.
  virtual const CostModel* cost_model() const { return nullptr; }
  // The bandwidth timeline that charges for an emulated tier; nullptr for real memory.
  virtual BandwidthTimeline* timeline() const { return nullptr; }

 protected:
  // Backend hooks, called with the budget already reserved. Must be thread-safe.
  virtual Result<void*> map(std::size_t bytes, std::size_t alignment) = 0;
  virtual void unmap(void* address, std::size_t bytes) = 0;
  // Backend words for describe(), e.g. "memkind MEMKIND_DAX_KMEM".
  virtual std::string backend() const = 0;

 private:
  std::string name_;
  TierKind kind_;
  std::atomic<std::uint64_t> budget_bytes_;
  std::atomic<std::uint64_t> used_bytes_{0};
  std::atomic<std::uint64_t> peak_bytes_{0};
};

// Opens the tier a spec entry describes. A kind the machine lacks (no KMEM DAX node, no such
// NUMA node, a missing pmem directory) fails with kUnavailable or kInvalidArgument and a message
// that says what is missing and what to do instead.
Result<std::unique_ptr<Tier>> open_tier(const TierConfig& config);

// "1.50 GiB", "64.0 MiB", "512 B": sizes for people.
std::string format_bytes(std::uint64_t bytes);

}  // namespace tensortier
