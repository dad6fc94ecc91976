// Tiers over the real libraries: memkind (DRAM, pmem on a directory, DAX_KMEM), libnuma, and
// the emulated tier. No mocks: every test allocates real memory through the backend.
#include "tensortier/allocator/tier.h"

#include <numa.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include <gtest/gtest.h>

#include "os_pages.h"  // allocator/src: the OS layer
#include "test_util.h"

namespace tensortier {
namespace {

std::unique_ptr<Tier> open_or_die(const std::string& spec) {
  auto configs = parse_tier_spec(spec);
  EXPECT_TRUE(configs) << configs.status().to_string();
  auto tier = open_tier(configs.value().at(0));
  EXPECT_TRUE(tier) << tier.status().to_string();
  return tier ? std::move(tier).value() : nullptr;
}

bool aligned(const void* p, std::size_t alignment) {
  return reinterpret_cast<std::uintptr_t>(p) % alignment == 0;
}

TEST(EmulatedTier, AllocatesPageAlignedWithinItsBudget) {
  auto tier = open_or_die("slow=emulated:optane:8MiB");
  ASSERT_NE(tier, nullptr);
  ASSERT_NE(tier->cost_model(), nullptr);
  EXPECT_EQ(tier->cost_model()->preset().name, "optane");
  EXPECT_NE(tier->describe().find("emulated optane"), std::string::npos) << tier->describe();
  auto a = tier->allocate(4 << 20);
  ASSERT_TRUE(a) << a.status().to_string();
  EXPECT_TRUE(aligned(a.value(), kHugePageBytes));  // >= 2 MiB: huge-page aligned
  std::memset(a.value(), 0xab, 4 << 20);
  EXPECT_EQ(tier->used_bytes(), 4u << 20);
  auto b = tier->allocate(4 << 20);
  ASSERT_TRUE(b);
  auto c = tier->allocate(kPageBytes);  // budget exhausted: 8 MiB used
  ASSERT_FALSE(c);
  EXPECT_EQ(c.status().code(), StatusCode::kOutOfMemory);
  EXPECT_NE(c.status().message().find("tier 'slow'"), std::string::npos) << c.status().message();
  EXPECT_EQ(tier->used_bytes(), 8u << 20);  // the refusal changed nothing
  tier->deallocate(a.value(), 4 << 20);
  tier->deallocate(b.value(), 4 << 20);
  EXPECT_EQ(tier->used_bytes(), 0u);
  EXPECT_EQ(tier->peak_bytes(), 8u << 20);
}

TEST(EmulatedTier, RejectsSizesThatAreNotWholePages) {
  auto tier = open_or_die("slow=emulated:cxl:8MiB");
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->allocate(0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tier->allocate(100).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tier->allocate(kPageBytes, 3).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(tier->used_bytes(), 0u);
}

TEST(EmulatedTier, UnknownPresetIsAClearError) {
  auto configs = parse_tier_spec("slow=emulated:hbm:1GiB");
  ASSERT_TRUE(configs);
  auto tier = open_tier(configs.value()[0]);
  ASSERT_FALSE(tier);
  EXPECT_NE(tier.status().message().find("unknown emulation preset 'hbm'"), std::string::npos);
}

TEST(NumaTier, PutsEveryPageOnItsNode) {
  auto tier = open_or_die("local=numa:0:64MiB");
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->numa_node(), 0);
  for (std::size_t bytes : {std::size_t{kPageBytes}, std::size_t{6} << 20}) {
    auto range = tier->allocate(bytes);
    ASSERT_TRUE(range) << range.status().to_string();
    auto nodes = os::page_nodes(range.value(), bytes);
    ASSERT_TRUE(nodes) << nodes.status().to_string();
    for (int node : nodes.value()) EXPECT_EQ(node, 0);
    tier->deallocate(range.value(), bytes);
  }
}

TEST(NumaTier, MissingNodeSaysWhichNodesExist) {
  auto configs = parse_tier_spec("far=numa:99");
  ASSERT_TRUE(configs);
  auto tier = open_tier(configs.value()[0]);
  ASSERT_FALSE(tier);
  EXPECT_EQ(tier.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(tier.status().message().find("NUMA node 99 does not exist"), std::string::npos)
      << tier.status().message();
  EXPECT_NE(tier.status().message().find("nodes with memory: 0"), std::string::npos);
}

TEST(NumaTier, MoveToNodeKeepsAddressAndBytes) {
  auto tier = open_or_die("local=numa:0:16MiB");
  ASSERT_NE(tier, nullptr);
  auto range = tier->allocate(1 << 20);
  ASSERT_TRUE(range);
  auto* bytes = static_cast<unsigned char*>(range.value());
  for (std::size_t i = 0; i < (1 << 20); ++i) bytes[i] = static_cast<unsigned char>(i * 7);
  ASSERT_TRUE(os::move_to_node(range.value(), 1 << 20, 0).is_ok());  // one node here: a no-op move
  for (std::size_t i = 0; i < (1 << 20); ++i) ASSERT_EQ(bytes[i], static_cast<unsigned char>(i * 7));
  tier->deallocate(range.value(), 1 << 20);
}

TEST(DramTier, AllocatesAndFreesAnonymousRanges) {
  auto tier = open_or_die("fast=dram:64MiB");
  ASSERT_NE(tier, nullptr);
  EXPECT_NE(tier->describe().find("anonymous mappings"), std::string::npos);
  EXPECT_EQ(tier->range_kind(), RangeKind::kAnonymous);
  auto small = tier->allocate(kPageBytes);
  auto large = tier->allocate(8 << 20);
  ASSERT_TRUE(small && large);
  EXPECT_TRUE(aligned(small.value(), kPageBytes));
  EXPECT_TRUE(aligned(large.value(), kHugePageBytes));
  std::memset(large.value(), 1, 8 << 20);
  EXPECT_EQ(tier->used_bytes(), (8u << 20) + kPageBytes);
  tier->deallocate(small.value(), kPageBytes);
  tier->deallocate(large.value(), 8 << 20);
  EXPECT_EQ(tier->used_bytes(), 0u);
}

TEST(MemkindTier, PmemKindOnADirectory) {
  testing::TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  auto tier = open_or_die("pm=pmem:" + dir.path() + ":64MiB");
  ASSERT_NE(tier, nullptr);
  auto range = tier->allocate(4 << 20);
  ASSERT_TRUE(range) << range.status().to_string();
  std::memset(range.value(), 0x5a, 4 << 20);
  EXPECT_EQ(static_cast<unsigned char*>(range.value())[(4 << 20) - 1], 0x5a);
  tier->deallocate(range.value(), 4 << 20);
}

TEST(MemkindTier, MissingPmemDirectoryIsAClearError) {
  auto configs = parse_tier_spec("pm=pmem:/nonexistent/tensortier/pmem:1GiB");
  ASSERT_TRUE(configs);
  auto tier = open_tier(configs.value()[0]);
  ASSERT_FALSE(tier);
  EXPECT_EQ(tier.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(tier.status().message().find("'/nonexistent/tensortier/pmem' does not exist"), std::string::npos)
      << tier.status().message();
}

bool machine_has_cpu_less_node() {
  if (numa_available() < 0) return false;
  for (int n = 0; n <= numa_max_node(); ++n) {
    bitmask* cpus = numa_allocate_cpumask();
    const bool cpu_less = numa_node_to_cpus(n, cpus) == 0 && numa_bitmask_weight(cpus) == 0;
    numa_free_cpumask(cpus);
    if (cpu_less) return true;
  }
  return false;
}

TEST(DaxKmemTier, UnavailableWithoutAKmemNodeSaysWhatToDo) {
  if (std::getenv("MEMKIND_DAX_KMEM_NODES") != nullptr) GTEST_SKIP() << "stand-in node set";
  if (machine_has_cpu_less_node()) GTEST_SKIP() << "this machine has a CPU-less (maybe KMEM) node";
  auto configs = parse_tier_spec("slow=daxkmem:1GiB");
  ASSERT_TRUE(configs);
  auto tier = open_tier(configs.value()[0]);
  ASSERT_FALSE(tier);
  EXPECT_EQ(tier.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(tier.status().message().find("no KMEM DAX NUMA node"), std::string::npos);
  EXPECT_NE(tier.status().message().find("MEMKIND_DAX_KMEM_NODES"), std::string::npos);
}

// Run by ctest with MEMKIND_DAX_KMEM_NODES=0: memkind's documented way to treat node 0 as the
// KMEM DAX node, a stand-in for the real thing (tested for real in the NUMA virtual machine).
TEST(DaxKmemStandIn, AllocatesOnTheStandInNode) {
  const char* nodes = std::getenv("MEMKIND_DAX_KMEM_NODES");
  if (nodes == nullptr) GTEST_SKIP() << "needs MEMKIND_DAX_KMEM_NODES=0 (its own ctest entry sets it)";
  auto tier = open_or_die("slow=daxkmem:64MiB");
  ASSERT_NE(tier, nullptr);
  auto range = tier->allocate(4 << 20);
  ASSERT_TRUE(range) << range.status().to_string();
  auto on = os::page_nodes(range.value(), 4 << 20);
  ASSERT_TRUE(on);
  for (int node : on.value()) EXPECT_EQ(node, std::atoi(nodes));
  tier->deallocate(range.value(), 4 << 20);
}

TEST(FormatBytes, ReadsWell) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(64ULL << 20), "64.0 MiB");
  EXPECT_EQ(format_bytes(3ULL << 29), "1.50 GiB");
}

}  // namespace
}  // namespace tensortier
