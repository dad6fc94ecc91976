// hwloc-based discovery of memory nodes and their HMAT attributes.
#include "tensortier/allocator/topology.h"

#include <hwloc.h>
#include <numa.h>

#include <algorithm>
#include <limits>
#include <tuple>

#include <fmt/format.h>

namespace tensortier {
namespace {

// Owns a loaded hwloc topology.
class HwlocTopology {
 public:
  HwlocTopology() = default;
  ~HwlocTopology() {
    if (loaded_) hwloc_topology_destroy(topology_);
  }
  HwlocTopology(const HwlocTopology&) = delete;
  HwlocTopology& operator=(const HwlocTopology&) = delete;
  Status load() {
    if (hwloc_topology_init(&topology_) != 0) return internal_error("hwloc_topology_init failed");
    loaded_ = true;
    if (hwloc_topology_load(topology_) != 0) return internal_error("hwloc_topology_load failed");
    return Status::ok();
  }
  hwloc_topology_t get() const { return topology_; }

 private:
  hwloc_topology_t topology_ = nullptr;
  bool loaded_ = false;
};

std::optional<double> memattr(hwloc_topology_t topology, hwloc_memattr_id_t id, hwloc_obj_t node,
                              hwloc_obj_t initiator_node) {
  hwloc_uint64_t value = 0;
  hwloc_location location{};
  location.type = HWLOC_LOCATION_TYPE_CPUSET;
  location.location.cpuset = initiator_node != nullptr ? initiator_node->cpuset : nullptr;
  if (location.location.cpuset == nullptr) return std::nullopt;
  if (hwloc_memattr_get_value(topology, id, node, &location, 0, &value) != 0) return std::nullopt;
  return static_cast<double>(value);
}

// hwloc gives a NUMA node the cpuset of its locality (for a CPU-less node attached to the
// machine: every CPU), so whether CPUs are attached comes from the kernel, through libnuma.
bool node_has_no_cpus(int os_index) {
  if (numa_available() < 0) return false;  // no NUMA: the one node has the CPUs
  bitmask* cpus = numa_allocate_cpumask();
  const bool none = numa_node_to_cpus(os_index, cpus) == 0 && numa_bitmask_weight(cpus) == 0;
  numa_free_cpumask(cpus);
  return none;
}

}  // namespace

std::string rank_fast_to_slow(std::vector<MemoryNode>& nodes) {
  const bool all_bandwidth =
      !nodes.empty() && std::all_of(nodes.begin(), nodes.end(),
                                    [](const MemoryNode& n) { return n.bandwidth_mibps.has_value(); });
  const bool all_latency = !nodes.empty() && std::all_of(nodes.begin(), nodes.end(), [](const MemoryNode& n) {
    return n.latency_ns.has_value();
  });
  constexpr double kUnknown = std::numeric_limits<double>::infinity();
  if (all_bandwidth) {
    std::stable_sort(nodes.begin(), nodes.end(), [&](const MemoryNode& a, const MemoryNode& b) {
      return std::tuple(-*a.bandwidth_mibps, a.latency_ns.value_or(kUnknown), a.os_index) <
             std::tuple(-*b.bandwidth_mibps, b.latency_ns.value_or(kUnknown), b.os_index);
    });
    return "HMAT bandwidth (then latency)";
  }
  if (all_latency) {
    std::stable_sort(nodes.begin(), nodes.end(), [](const MemoryNode& a, const MemoryNode& b) {
      return std::tuple(*a.latency_ns, a.os_index) < std::tuple(*b.latency_ns, b.os_index);
    });
    return "HMAT latency";
  }
  std::stable_sort(nodes.begin(), nodes.end(), [](const MemoryNode& a, const MemoryNode& b) {
    return std::tuple(a.cpu_less, a.subtype == "NVM", a.os_index) <
           std::tuple(b.cpu_less, b.subtype == "NVM", b.os_index);
  });
  return "no memory attributes: CPU-attached nodes before CPU-less ones, NVM last";
}

Result<Topology> discover_topology() {
  HwlocTopology topo;
  if (Status s = topo.load(); !s.is_ok()) return s;
  hwloc_topology_t t = topo.get();
  const int count = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE);
  // HMAT values are published relative to initiators: use the CPUs of the first node with CPUs.
  hwloc_obj_t initiator = nullptr;
  for (int i = 0; i < count && initiator == nullptr; ++i) {
    hwloc_obj_t node = hwloc_get_obj_by_type(t, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
    if (!node_has_no_cpus(static_cast<int>(node->os_index))) initiator = node;
  }
  Topology topology;
  for (int i = 0; i < count; ++i) {
    hwloc_obj_t node = hwloc_get_obj_by_type(t, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
    MemoryNode m;
    m.os_index = static_cast<int>(node->os_index);
    m.capacity_bytes = node->attr != nullptr ? node->attr->numanode.local_memory : 0;
    m.cpu_less = node_has_no_cpus(m.os_index);
    m.subtype = node->subtype != nullptr ? node->subtype : "";
    m.bandwidth_mibps = memattr(t, HWLOC_MEMATTR_ID_BANDWIDTH, node, initiator);
    m.latency_ns = memattr(t, HWLOC_MEMATTR_ID_LATENCY, node, initiator);
    topology.nodes.push_back(std::move(m));
  }
  topology.ranking_basis = rank_fast_to_slow(topology.nodes);
  return topology;
}

std::vector<TierConfig> tiers_from_topology(const Topology& topology) {
  std::vector<TierConfig> configs;
  for (std::size_t i = 0; i < topology.nodes.size(); ++i) {
    TierConfig c;
    c.name = i == 0 ? "fast" : (i == 1 ? "slow" : fmt::format("slow{}", i));
    c.kind = TierKind::kNuma;
    c.numa_node = topology.nodes[i].os_index;
    c.budget_bytes = topology.nodes[i].capacity_bytes;
    configs.push_back(std::move(c));
  }
  return configs;
}

}  // namespace tensortier
