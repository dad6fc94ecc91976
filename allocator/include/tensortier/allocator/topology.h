// Topology discovery: which memory the machine has and how fast each kind is, through hwloc.
//
// discover_topology() lists the NUMA nodes with their capacity, whether they have CPUs (a
// CPU-less node is how Linux shows KMEM DAX Optane or a CXL expander), hwloc's subtype, and the
// ACPI HMAT bandwidth and latency hwloc reports as memory attributes, measured from the CPUs of
// the first node that has CPUs. rank_fast_to_slow() orders them; tiers_from_topology() turns the
// order into a tier spec (one numa tier per node). An explicit spec (TENSORTIER_TIERS or code)
// overrides all of this: see runtime.h.
// All functions are thread-safe; discover_topology() loads a fresh hwloc topology per call.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tensortier/allocator/tier_spec.h"
#include "tensortier/status.h"

namespace tensortier {

struct MemoryNode {
  int os_index = -1;                      // Linux NUMA node number
  std::uint64_t capacity_bytes = 0;       // hwloc local memory
  bool cpu_less = false;                  // no CPUs attached (KMEM DAX, CXL, far memory)
  std::string subtype;                    // hwloc subtype: "", "NVM", "MCDRAM", "GPUMemory", ...
  std::optional<double> bandwidth_mibps;  // HMAT bandwidth (hwloc: MiB/s) where published
  std::optional<double> latency_ns;       // HMAT latency (hwloc: ns) where published
};

struct Topology {
  std::vector<MemoryNode> nodes;  // fastest first (rank_fast_to_slow)
  std::string ranking_basis;      // how the order was decided, for people
};

// Loads the topology with hwloc and ranks it. Fails only if hwloc cannot load one.
Result<Topology> discover_topology();

// Orders nodes fastest first: by bandwidth when every node has one, else by latency when every
// node has one, else CPU-attached before CPU-less and "NVM" subtype last; ties by node number.
// Returns the basis used ("HMAT bandwidth", "HMAT latency", "no memory attributes: ...").
std::string rank_fast_to_slow(std::vector<MemoryNode>& nodes);

// One numa tier per node, fast to slow, named "fast", "slow", "slow2", ...
std::vector<TierConfig> tiers_from_topology(const Topology& topology);

}  // namespace tensortier
