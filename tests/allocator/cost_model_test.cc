// The emulated slow tier's cost model: presets, the per-layer charge and move times.
#include "tensortier/allocator/cost_model.h"

#include <chrono>

#include <gtest/gtest.h>

namespace tensortier {
namespace {

TEST(CostModel, PresetsHaveDocumentedRatios) {
  auto optane = find_preset("optane");
  ASSERT_TRUE(optane);
  EXPECT_EQ(optane->form, PresetForm::kRatio);
  EXPECT_NEAR(optane->read, 1.0 / 3.0, 1e-9);
  EXPECT_NEAR(optane->write, 1.0 / 6.0, 1e-9);
  EXPECT_DOUBLE_EQ(optane->latency_factor, 3.0);
  auto cxl = find_preset("cxl");
  ASSERT_TRUE(cxl);
  EXPECT_DOUBLE_EQ(cxl->read, 0.5);
  EXPECT_DOUBLE_EQ(cxl->latency_factor, 2.0);
  EXPECT_TRUE(find_preset("remote-numa"));
  auto server = find_preset("optane-server");
  ASSERT_TRUE(server);
  EXPECT_EQ(server->form, PresetForm::kPerCore);
  EXPECT_DOUBLE_EQ(server->read, 1.6);
  EXPECT_DOUBLE_EQ(server->write, 0.6);
  for (const auto& p : slow_memory_presets()) EXPECT_FALSE(p.source.empty()) << p.name;
}

TEST(CostModel, UnknownPresetListsKnownOnes) {
  auto p = find_preset("dram2");
  ASSERT_FALSE(p);
  EXPECT_NE(p.status().message().find("optane, cxl, remote-numa, optane-server"), std::string::npos);
}

TEST(CostModel, LayerChargeFollowsTheFormula) {
  // DRAM 12 GB/s; optane read 4 GB/s, write 2 GB/s.
  const CostModel model(find_preset("optane").value(), FastBandwidth{12.0, 12.0, 2, "test"});
  EXPECT_DOUBLE_EQ(model.slow_read_gbps(), 4.0);
  EXPECT_DOUBLE_EQ(model.slow_write_gbps(), 2.0);
  // read 1.2e9 B: 1.2e9 * (1/4 - 1/12) ns = 2e8 ns; write 1.2e9 B: 1.2e9 * (1/2 - 1/12) = 5e8 ns.
  EXPECT_EQ(model.layer_charge_ns(1'200'000'000, 0), 200'000'000u);
  EXPECT_EQ(model.layer_charge_ns(0, 1'200'000'000), 500'000'000u);
  EXPECT_EQ(model.layer_charge_ns(1'200'000'000, 1'200'000'000), 700'000'000u);
  EXPECT_EQ(model.layer_charge_ns(0, 0), 0u);
}

TEST(CostModel, ReadAndWriteUseTheirOwnFastBandwidth) {
  // DRAM read 12, write 6 GB/s; cxl: half of each.
  const CostModel model(find_preset("cxl").value(), FastBandwidth{12.0, 6.0, 2, "test"});
  EXPECT_DOUBLE_EQ(model.slow_read_gbps(), 6.0);
  EXPECT_DOUBLE_EQ(model.slow_write_gbps(), 3.0);
  // read 1.2e9 B: 1.2e9 * (1/6 - 1/12) = 1e8 ns; write 1.2e9 B: 1.2e9 * (1/3 - 1/6) = 2e8 ns.
  EXPECT_EQ(model.layer_charge_ns(1'200'000'000, 1'200'000'000), 300'000'000u);
  EXPECT_EQ(model.slow_traffic_ns(1'200'000'000, 0), 200'000'000u);
}

TEST(CostModel, PerCorePresetScalesWithThreadsAndNamesItsForm) {
  const SlowMemoryPreset server = find_preset("optane-server").value();
  const CostModel two(server, FastBandwidth{18.0, 12.0, 2, "test"});
  EXPECT_DOUBLE_EQ(two.slow_read_gbps(), 3.2);
  EXPECT_DOUBLE_EQ(two.slow_write_gbps(), 1.2);
  const CostModel four(server, FastBandwidth{36.0, 24.0, 4, "test"});
  EXPECT_DOUBLE_EQ(four.slow_read_gbps(), 6.4);
  EXPECT_NE(two.describe().find("optane-server (per core"), std::string::npos) << two.describe();
  // Never faster than the fast tier itself.
  const CostModel slow_machine(server, FastBandwidth{2.0, 1.0, 2, "test"});
  EXPECT_DOUBLE_EQ(slow_machine.slow_read_gbps(), 2.0);
  EXPECT_DOUBLE_EQ(slow_machine.slow_write_gbps(), 1.0);
  EXPECT_EQ(slow_machine.layer_charge_ns(1000, 1000), 0u);
}

TEST(CostModel, MovesRunAtTheSlowSidesBandwidth) {
  const CostModel model(find_preset("optane").value(), FastBandwidth{12.0, 12.0, 2, "test"});
  EXPECT_EQ(model.move_ns(4'000'000'000, MoveDirection::kOutOfSlow), 1'000'000'000u);  // 4 GB/s
  EXPECT_EQ(model.move_ns(2'000'000'000, MoveDirection::kIntoSlow), 1'000'000'000u);   // 2 GB/s
}

TEST(CostModel, SpinWaitsAtLeastTheCharge) {
  const auto start = std::chrono::steady_clock::now();
  spin_for_ns(2'000'000);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(2));
}

TEST(CostModel, WaitUntilReachesTheDeadline) {
  const std::uint64_t deadline = steady_now_ns() + 3'000'000;
  wait_until_ns(deadline);
  EXPECT_GE(steady_now_ns(), deadline);
}

TEST(CostModel, DramBandwidthIsMeasuredPositiveAndStable) {
  const FastBandwidth streams = measure_dram_streams(8 << 20, 2, 3);
  EXPECT_GT(streams.read_gbps, 0.1);  // any real machine streams faster than 100 MB/s
  EXPECT_GT(streams.write_gbps, 0.1);
  EXPECT_EQ(streams.threads, 2u);
  const FastBandwidth first = dram_bandwidth();
  EXPECT_GT(first.read_gbps, 0.0);
  EXPECT_EQ(first.threads, engine_threads());
  EXPECT_FALSE(first.source.empty());
  EXPECT_EQ(dram_bandwidth().read_gbps, first.read_gbps);  // computed once per process
}

TEST(DramReference, ACachedOneIsUsedOnlyWhereNothingSaysItIsStale) {
  const BandwidthConditions now{"cpu", 1 << 30, 2, "6.1.0"};
  const std::int64_t t = 1'800'000'000;
  const CachedBandwidth quiet{{30.0, 60.0, 2, ""}, now, t - 3600};
  EXPECT_EQ(bandwidth_cache_stale(quiet, now, t, std::nullopt), "");
  // A probe now at most 20% faster: the cache stands (a loaded probe is slower, never replaces it).
  EXPECT_EQ(bandwidth_cache_stale(quiet, now, t, FastBandwidth{35.9, 71.9, 2, ""}), "");
  EXPECT_EQ(bandwidth_cache_stale(quiet, now, t, FastBandwidth{11.2, 16.8, 2, ""}), "");
  // Measured under load: 11.2 / 16.8 cached against 35.9 / 72.4 quiet (the issue's host).
  const CachedBandwidth loaded{{11.2, 16.8, 2, ""}, now, t - 3600};
  const std::string why = bandwidth_cache_stale(loaded, now, t, FastBandwidth{35.9, 72.4, 2, ""});
  EXPECT_NE(why.find("measured under load: read 11.2 GB/s cached, 35.9 GB/s in a probe now"),
            std::string::npos)
      << why;
  EXPECT_NE(bandwidth_cache_stale(quiet, now, t, FastBandwidth{30.0, 72.1, 2, ""}).find("write"),
            std::string::npos);
  // None, other conditions, a day old (or from the future): measured again.
  EXPECT_EQ(bandwidth_cache_stale(std::nullopt, now, t, std::nullopt), "no cached reference");
  for (const BandwidthConditions& other :
       {BandwidthConditions{"other", 1 << 30, 2, "6.1.0"},
        BandwidthConditions{"cpu", std::uint64_t{2} << 30, 2, "6.1.0"},
        BandwidthConditions{"cpu", 1 << 30, 4, "6.1.0"}, BandwidthConditions{"cpu", 1 << 30, 2, "6.18.0"}}) {
    EXPECT_NE(bandwidth_cache_stale(CachedBandwidth{{30.0, 60.0, 2, ""}, other, t}, now, t, std::nullopt), "")
        << other.cpu_model << " " << other.threads << " " << other.kernel;
  }
  EXPECT_EQ(bandwidth_cache_stale(CachedBandwidth{{30, 60, 2, ""}, now, t - kBandwidthCacheMaxAgeS - 1}, now,
                                  t, std::nullopt),
            "it is more than a day old");
  EXPECT_NE(bandwidth_cache_stale(CachedBandwidth{{30, 60, 2, ""}, now, t + 100}, now, t, std::nullopt), "");
}

TEST(DramReference, CacheEntriesRoundTripAndBadOnesAreNone) {
  const CachedBandwidth entry{{35.9, 72.4, 2, ""}, {"AMD EPYC", 25276203008, 2, "6.18.44"}, 1'800'000'000};
  const auto back = parse_bandwidth_cache(bandwidth_cache_text(entry));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->bandwidth.read_gbps, 35.9);
  EXPECT_EQ(back->bandwidth.write_gbps, 72.4);
  EXPECT_EQ(back->conditions.cpu_model, "AMD EPYC");
  EXPECT_EQ(back->conditions.memory_bytes, 25276203008u);
  EXPECT_EQ(back->conditions.threads, 2u);
  EXPECT_EQ(back->conditions.kernel, "6.18.44");
  EXPECT_EQ(back->measured_at_s, 1'800'000'000);
  // An entry of before the date and kernel were kept: read, and stale (no date).
  const auto old = parse_bandwidth_cache(
      R"({"cpu_model": "AMD EPYC", "memory_bytes": 1, "threads": 2, "read_gbps": 5, "write_gbps": 6})");
  ASSERT_TRUE(old);
  EXPECT_EQ(old->measured_at_s, 0);
  for (const char* bad :
       {"", "[]", "{", R"({"read_gbps": "fast"})",
        R"({"cpu_model": "x", "memory_bytes": 1, "threads": 2, "read_gbps": -5, "write_gbps": 6})",
        R"({"cpu_model": "x", "memory_bytes": 1, "threads": 0, "read_gbps": 5, "write_gbps": 6})"}) {
    EXPECT_FALSE(parse_bandwidth_cache(bad)) << bad;
  }
}

}  // namespace
}  // namespace tensortier
