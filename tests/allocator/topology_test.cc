// Topology: ranking rules on made-up nodes, and real hwloc discovery on this machine.
#include "tensortier/allocator/topology.h"

#include <numa.h>

#include <gtest/gtest.h>

namespace tensortier {
namespace {

MemoryNode node(int index, bool cpu_less, std::optional<double> bw, std::optional<double> lat,
                std::string subtype = "") {
  MemoryNode n;
  n.os_index = index;
  n.capacity_bytes = 1ULL << 30;
  n.cpu_less = cpu_less;
  n.bandwidth_mibps = bw;
  n.latency_ns = lat;
  n.subtype = std::move(subtype);
  return n;
}

std::vector<int> order(const std::vector<MemoryNode>& nodes) {
  std::vector<int> out;
  for (const auto& n : nodes) out.push_back(n.os_index);
  return out;
}

TEST(Ranking, HmatBandwidthDecides) {
  // The shape of the NUMA VM: node 0 20 GB/s 100 ns, CPU-less node 1 5 GB/s 300 ns.
  std::vector<MemoryNode> nodes{node(1, true, 5000, 300), node(0, false, 20000, 100)};
  EXPECT_EQ(rank_fast_to_slow(nodes), "HMAT bandwidth (then latency)");
  EXPECT_EQ(order(nodes), (std::vector<int>{0, 1}));
}

TEST(Ranking, BandwidthOverridesCpuAttachment) {
  // A CPU-less HBM-like node faster than DDR ranks first.
  std::vector<MemoryNode> nodes{node(0, false, 20000, 100), node(2, true, 80000, 120)};
  rank_fast_to_slow(nodes);
  EXPECT_EQ(order(nodes), (std::vector<int>{2, 0}));
}

TEST(Ranking, LatencyWhenNoBandwidth) {
  std::vector<MemoryNode> nodes{node(0, false, std::nullopt, 250), node(1, false, std::nullopt, 90)};
  EXPECT_EQ(rank_fast_to_slow(nodes), "HMAT latency");
  EXPECT_EQ(order(nodes), (std::vector<int>{1, 0}));
}

TEST(Ranking, WithoutAttributesCpuLessAndNvmGoLast) {
  std::vector<MemoryNode> nodes{node(3, true, std::nullopt, std::nullopt, "NVM"),
                                node(2, true, std::nullopt, std::nullopt), node(1, false, 100, std::nullopt),
                                node(0, false, std::nullopt, std::nullopt)};
  EXPECT_NE(rank_fast_to_slow(nodes).find("no memory attributes"), std::string::npos);
  EXPECT_EQ(order(nodes), (std::vector<int>{0, 1, 2, 3}));
}

TEST(Ranking, TiersAreNamedFastThenSlow) {
  Topology t;
  t.nodes = {node(0, false, 1, 1), node(1, true, 1, 1), node(2, true, 1, 1)};
  auto configs = tiers_from_topology(t);
  ASSERT_EQ(configs.size(), 3u);
  EXPECT_EQ(configs[0].name, "fast");
  EXPECT_EQ(configs[1].name, "slow");
  EXPECT_EQ(configs[2].name, "slow2");
  EXPECT_EQ(configs[1].kind, TierKind::kNuma);
  EXPECT_EQ(configs[1].numa_node, 1);
}

TEST(Discovery, FindsEveryNumaNodeOfThisMachine) {
  auto topology = discover_topology();
  ASSERT_TRUE(topology) << topology.status().to_string();
  const int expected = numa_available() < 0 ? 1 : numa_num_configured_nodes();
  EXPECT_EQ(static_cast<int>(topology->nodes.size()), expected);
  EXPECT_FALSE(topology->ranking_basis.empty());
  for (const auto& n : topology->nodes) {
    EXPECT_GT(n.capacity_bytes, 0u) << "node " << n.os_index;
  }
  // The fastest node has CPUs unless the platform's HMAT says otherwise.
  if (!topology->nodes[0].bandwidth_mibps) {
    EXPECT_FALSE(topology->nodes[0].cpu_less);
  }
}

}  // namespace
}  // namespace tensortier
