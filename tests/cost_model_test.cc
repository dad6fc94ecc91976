// The emulated slow tier's cost model: presets, the per-layer charge and move times.
#include "tensortier/allocator/cost_model.h"

#include <chrono>

#include <gtest/gtest.h>

namespace tensortier {
namespace {

TEST(CostModel, PresetsHaveDocumentedRatios) {
  auto optane = find_preset("optane");
  ASSERT_TRUE(optane);
  EXPECT_NEAR(optane->read_bandwidth_fraction, 1.0 / 3.0, 1e-9);
  EXPECT_NEAR(optane->write_bandwidth_fraction, 1.0 / 6.0, 1e-9);
  EXPECT_DOUBLE_EQ(optane->latency_factor, 3.0);
  auto cxl = find_preset("cxl");
  ASSERT_TRUE(cxl);
  EXPECT_DOUBLE_EQ(cxl->read_bandwidth_fraction, 0.5);
  EXPECT_DOUBLE_EQ(cxl->latency_factor, 2.0);
  EXPECT_TRUE(find_preset("remote-numa"));
  for (const auto& p : slow_memory_presets()) EXPECT_FALSE(p.source.empty()) << p.name;
}

TEST(CostModel, UnknownPresetListsKnownOnes) {
  auto p = find_preset("dram2");
  ASSERT_FALSE(p);
  EXPECT_NE(p.status().message().find("optane, cxl, remote-numa"), std::string::npos);
}

TEST(CostModel, LayerChargeFollowsTheFormula) {
  // DRAM 12 GB/s; optane read 4 GB/s, write 2 GB/s.
  const CostModel model(find_preset("optane").value(), 12.0);
  EXPECT_DOUBLE_EQ(model.slow_read_gbps(), 4.0);
  EXPECT_DOUBLE_EQ(model.slow_write_gbps(), 2.0);
  // read 1.2e9 B: 1.2e9 * (1/4 - 1/12) ns = 2e8 ns; write 1.2e9 B: 1.2e9 * (1/2 - 1/12) = 5e8 ns.
  EXPECT_EQ(model.layer_charge_ns(1'200'000'000, 0), 200'000'000u);
  EXPECT_EQ(model.layer_charge_ns(0, 1'200'000'000), 500'000'000u);
  EXPECT_EQ(model.layer_charge_ns(1'200'000'000, 1'200'000'000), 700'000'000u);
  EXPECT_EQ(model.layer_charge_ns(0, 0), 0u);
}

TEST(CostModel, MovesRunAtTheSlowSidesBandwidth) {
  const CostModel model(find_preset("optane").value(), 12.0);
  EXPECT_EQ(model.move_ns(4'000'000'000, MoveDirection::kOutOfSlow), 1'000'000'000u);  // 4 GB/s
  EXPECT_EQ(model.move_ns(2'000'000'000, MoveDirection::kIntoSlow), 1'000'000'000u);   // 2 GB/s
}

TEST(CostModel, SpinWaitsAtLeastTheCharge) {
  const auto start = std::chrono::steady_clock::now();
  spin_for_ns(2'000'000);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(2));
}

TEST(CostModel, DramBandwidthIsMeasuredPositiveAndStable) {
  const double gbps = measure_dram_copy_gbps(8 << 20, 3);
  EXPECT_GT(gbps, 0.1);  // any real machine copies faster than 100 MB/s
  const DramBandwidth first = dram_bandwidth();
  EXPECT_GT(first.gbps, 0.0);
  EXPECT_FALSE(first.source.empty());
  EXPECT_EQ(dram_bandwidth().gbps, first.gbps);  // computed once per process
}

}  // namespace
}  // namespace tensortier
