// Placement on a real second NUMA node. These tests run inside the two-node virtual machine that
// tests/numa_vm/run.sh boots (node 0: CPUs + DRAM; node 1: CPU-less, slower by its ACPI HMAT
// figures), in two layouts: "plain" (node 1 is boot RAM) and "kmem" (node 1 is a KMEM DAX device
// onlined as system RAM, as CXL and Optane are). The runner sets TENSORTIER_NUMA_VM_LAYOUT;
// anywhere else every test skips and says why.
#include <cstdlib>
#include <cstring>
#include <string>

#include <gtest/gtest.h>

#include "../allocator/src/os_pages.h"
#include "tensortier/allocator/topology.h"
#include "tensortier/runtime.h"

namespace tensortier {
namespace {

std::string layout() {
  const char* value = std::getenv("TENSORTIER_NUMA_VM_LAYOUT");
  return value != nullptr ? value : "";
}

#define REQUIRE_NUMA_VM()                                                                    \
  if (layout().empty()) {                                                                    \
    GTEST_SKIP() << "runs inside the two-node NUMA VM only (tests/numa_vm/run.sh boots it)"; \
  }

// Every page of [address, address + bytes) is on `node`; names the first one that is not.
::testing::AssertionResult all_pages_on(const void* address, std::size_t bytes, int node) {
  auto nodes = os::page_nodes(address, bytes);
  if (!nodes) return ::testing::AssertionFailure() << nodes.status().to_string();
  for (std::size_t i = 0; i < nodes->size(); ++i) {
    if ((*nodes)[i] != node) {
      return ::testing::AssertionFailure() << "page " << i << " of " << nodes->size() << " is on node "
                                           << (*nodes)[i] << ", not node " << node;
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(NumaVm, HwlocRanksNode0FastAndNode1SlowFromHmat) {
  REQUIRE_NUMA_VM();
  auto topology = discover_topology();
  ASSERT_TRUE(topology) << topology.status().to_string();
  ASSERT_EQ(topology->nodes.size(), 2u);
  EXPECT_EQ(topology->ranking_basis, "HMAT bandwidth (then latency)");
  EXPECT_EQ(topology->nodes[0].os_index, 0);
  EXPECT_EQ(topology->nodes[1].os_index, 1);
  EXPECT_FALSE(topology->nodes[0].cpu_less);
  EXPECT_TRUE(topology->nodes[1].cpu_less);
  ASSERT_TRUE(topology->nodes[0].bandwidth_mibps && topology->nodes[1].bandwidth_mibps);
  EXPECT_GT(*topology->nodes[0].bandwidth_mibps, *topology->nodes[1].bandwidth_mibps);
  ASSERT_TRUE(topology->nodes[0].latency_ns && topology->nodes[1].latency_ns);
  EXPECT_LT(*topology->nodes[0].latency_ns, *topology->nodes[1].latency_ns);
}

TEST(NumaVm, RuntimeWithoutSpecDiscoversFastNode0AndSlowNode1) {
  REQUIRE_NUMA_VM();
  unsetenv("TENSORTIER_TIERS");
  auto rt = Runtime::create();
  ASSERT_TRUE(rt) << rt.status().to_string();
  ASSERT_EQ(rt.value()->tier_count(), 2u);
  EXPECT_EQ(rt.value()->tier(0).numa_node(), 0);
  EXPECT_EQ(rt.value()->tier(1).numa_node(), 1);
  EXPECT_NE(rt.value()->spec_source().find("HMAT"), std::string::npos) << rt.value()->spec_source();
}

TEST(NumaVm, NumaTiersPutEveryPageOnTheirNode) {
  REQUIRE_NUMA_VM();
  auto rt = Runtime::create({"fast=numa:0:64MiB,slow=numa:1:256MiB"});
  ASSERT_TRUE(rt) << rt.status().to_string();
  for (TierIndex tier : {0u, 1u}) {
    for (std::size_t bytes : {std::size_t{kPageBytes}, std::size_t{3} << 20, std::size_t{9000}}) {
      auto object = rt.value()->allocate("t", bytes, kDefaultGroup, tier);
      ASSERT_TRUE(object) << object.status().to_string();
      EXPECT_EQ(object->tier, tier);
      EXPECT_TRUE(all_pages_on(object->address, object->reserved_bytes, static_cast<int>(tier)))
          << bytes << " bytes on tier " << tier;
    }
  }
}

TEST(NumaVm, ObjectOverTheFastBudgetLandsOnNode1) {
  REQUIRE_NUMA_VM();
  auto rt = Runtime::create({"fast=numa:0:4MiB,slow=numa:1:256MiB"});
  ASSERT_TRUE(rt) << rt.status().to_string();
  auto small = rt.value()->allocate("fits", 2 << 20);
  auto big = rt.value()->allocate("does-not-fit", 8 << 20);
  ASSERT_TRUE(small && big);
  EXPECT_EQ(small->tier, 0u);
  EXPECT_EQ(big->tier, 1u);
  EXPECT_TRUE(all_pages_on(small->address, small->reserved_bytes, 0));
  EXPECT_TRUE(all_pages_on(big->address, big->reserved_bytes, 1));
}

TEST(NumaVm, MovingAnObjectBetweenNodesKeepsItsAddressAndBytes) {
  REQUIRE_NUMA_VM();
  auto rt = Runtime::create({"fast=numa:0:64MiB,slow=numa:1:256MiB"});
  ASSERT_TRUE(rt) << rt.status().to_string();
  constexpr std::size_t kBytes = 6 << 20;
  auto object = rt.value()->allocate("moved", kBytes, kDefaultGroup, /*preferred=*/1);
  ASSERT_TRUE(object);
  auto* bytes = static_cast<unsigned char*>(object->address);
  for (std::size_t i = 0; i < kBytes; ++i) bytes[i] = static_cast<unsigned char>(i * 31 + 7);
  ASSERT_TRUE(all_pages_on(bytes, kBytes, 1));
  for (int target : {0, 1}) {
    const Status moved = os::move_to_node(bytes, kBytes, target);
    ASSERT_TRUE(moved.is_ok()) << moved.to_string();
    EXPECT_TRUE(all_pages_on(bytes, kBytes, target));
    EXPECT_EQ(static_cast<void*>(bytes), object->address);
    for (std::size_t i = 0; i < kBytes; ++i) {
      ASSERT_EQ(bytes[i], static_cast<unsigned char>(i * 31 + 7))
          << "byte " << i << " after move to " << target;
    }
  }
}

TEST(NumaVm, DaxKmemTierAllocatesOnTheKmemNode) {
  REQUIRE_NUMA_VM();
  if (layout() != "kmem") GTEST_SKIP() << "layout '" << layout() << "': node 1 is boot RAM, not KMEM DAX";
  auto rt = Runtime::create({"fast=numa:0:64MiB,slow=daxkmem:256MiB"});
  ASSERT_TRUE(rt) << rt.status().to_string();
  auto object = rt.value()->allocate("kmem", 4 << 20, kDefaultGroup, /*preferred=*/1);
  ASSERT_TRUE(object) << object.status().to_string();
  EXPECT_TRUE(all_pages_on(object->address, object->reserved_bytes, 1));
}

}  // namespace
}  // namespace tensortier
