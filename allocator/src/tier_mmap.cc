// Tiers over plain anonymous mappings: DRAM (the default policy), a NUMA node (mbind) and the
// emulated slow tier. Their ranges are RangeKind::kAnonymous: an object moves between them in place.
#include <numa.h>

#include <fmt/format.h>

#include "os_pages.h"
#include "tier_backends.h"

namespace tensortier::detail {
namespace {

// Shared mapping logic: map aligned, advise huge pages, bind (NUMA), pre-fault.
class MmapTier : public Tier {
 public:
  MmapTier(const TierConfig& config, std::uint64_t budget_bytes, int node)
      : Tier(config.name, config.kind, budget_bytes), node_(node) {}

 protected:
  Result<void*> map(std::size_t bytes, std::size_t alignment) override {
    // Pre-faulting more than the machine has would only summon the OOM killer.
    if (bytes > physical_memory_bytes()) {
      return out_of_memory(fmt::format("{} is more than this machine's {} of memory", format_bytes(bytes),
                                       format_bytes(physical_memory_bytes())));
    }
    Result<void*> mapped = os::map_anonymous(bytes, alignment);
    if (!mapped) return mapped;
    void* address = mapped.value();
    if (bytes >= kHugePageBytes) {
      os::advise_huge_pages(address, bytes);
    } else if (node_ >= 0) {
      // Adjacent ranges with one NUMA policy merge into one mapping, where khugepaged can fold
      // two objects' pages into one huge page; move_pages moves such a page whole, so moving one
      // object would carry its neighbour's pages to the other node (seen in the NUMA VM).
      os::advise_no_huge_pages(address, bytes);
    }
    if (node_ >= 0) {
      if (Status s = os::bind_to_node(address, bytes, node_); !s.is_ok()) {
        os::unmap(address, bytes);
        return s;
      }
    }
    if (Status s = os::populate(address, bytes); !s.is_ok()) {
      os::unmap(address, bytes);
      return s;
    }
    return address;
  }
  void unmap(void* address, std::size_t bytes) override { os::unmap(address, bytes); }
  RangeKind range_kind() const override { return RangeKind::kAnonymous; }

  int node_;  // NUMA node the pages are bound to; -1 for none
};

// DRAM under the process's default memory policy. Plain mappings rather than a memkind heap:
// every range is whole pages that the ObjectAllocator caches itself, so a heap would add nothing,
// and a plain mapping can take another tier's pages by mremap (an in-place move).
class DramTier final : public MmapTier {
 public:
  using MmapTier::MmapTier;

 protected:
  std::string backend() const override { return "anonymous mappings, default NUMA policy"; }
};

class NumaTier final : public MmapTier {
 public:
  using MmapTier::MmapTier;
  std::optional<int> numa_node() const override { return node_; }

 protected:
  std::string backend() const override { return fmt::format("libnuma mbind to node {}", node_); }
};

class EmulatedTier final : public MmapTier {
 public:
  EmulatedTier(const TierConfig& config, std::uint64_t budget_bytes, CostModel model)
      : MmapTier(config, budget_bytes, -1), model_(std::move(model)) {}
  const CostModel* cost_model() const override { return &model_; }
  BandwidthTimeline* timeline() const override { return &timeline_; }

 protected:
  std::string backend() const override {
    return fmt::format("emulated {} on DRAM: read {:.1f} GB/s, write {:.1f} GB/s; {}", model_.describe(),
                       model_.slow_read_gbps(), model_.slow_write_gbps(), model_.reference());
  }

 private:
  CostModel model_;
  mutable BandwidthTimeline timeline_;  // the emulated bandwidth, shared by layers and moves
};

}  // namespace

Result<std::unique_ptr<Tier>> open_dram_tier(const TierConfig& config) {
  const std::uint64_t budget = budget_for(config, physical_memory_bytes(), "this machine's memory");
  return std::unique_ptr<Tier>(new DramTier(config, budget, -1));
}

Result<std::unique_ptr<Tier>> open_numa_tier(const TierConfig& config) {
  if (numa_available() < 0) {
    return unavailable(
        fmt::format("tier '{}': this kernel reports no NUMA support (libnuma numa_available() < 0); use "
                    "'dram' or 'emulated' tiers instead",
                    config.name));
  }
  const int node = config.numa_node;
  if (node < 0 || node > numa_max_node() ||
      numa_bitmask_isbitset(numa_all_nodes_ptr, static_cast<unsigned>(node)) == 0) {
    std::string nodes;
    for (int n = 0; n <= numa_max_node(); ++n) {
      if (numa_bitmask_isbitset(numa_all_nodes_ptr, static_cast<unsigned>(n)) != 0) {
        nodes += (nodes.empty() ? "" : ", ") + std::to_string(n);
      }
    }
    return unavailable(
        fmt::format("tier '{}': NUMA node {} does not exist on this machine (nodes with memory: {}); "
                    "`numactl -H` lists them",
                    config.name, node, nodes));
  }
  long long free_bytes = 0;
  const long long node_bytes = numa_node_size64(node, &free_bytes);
  const std::uint64_t budget = budget_for(config, static_cast<std::uint64_t>(std::max(0LL, node_bytes)),
                                          fmt::format("NUMA node {}'s memory", node));
  return std::unique_ptr<Tier>(new NumaTier(config, budget, node));
}

Result<std::unique_ptr<Tier>> open_emulated_tier(const TierConfig& config) {
  Result<SlowMemoryPreset> preset = find_preset(config.preset);
  if (!preset) {
    return invalid_argument(fmt::format("tier '{}': {}", config.name, preset.status().message()));
  }
  // A reference no memory has (1e-300 GB/s made a move's charge sleep for centuries) is refused
  // here, where the tier that would charge by it opens.
  if (auto given = dram_gbps_setting(); !given) {
    return invalid_argument(fmt::format("tier '{}': {}", config.name, given.status().message()));
  }
  const FastBandwidth bandwidth = dram_bandwidth();
  const std::uint64_t budget = budget_for(config, physical_memory_bytes(), "this machine's memory");
  return std::unique_ptr<Tier>(new EmulatedTier(config, budget, CostModel(preset.value(), bandwidth)));
}

}  // namespace tensortier::detail
