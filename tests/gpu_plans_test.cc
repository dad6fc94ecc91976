// The GPU backend's plans on real step traces (tests/data/gpu_traces, recorded from the engine by
// tools/trace_from_profile.py), no GPU needed: SmartPool's region against max-live, the CnMem-like
// best-fit pool and the model of PyTorch's caching allocator beside it (allocator/pool_models.h),
// and AutoSwap's swaps against the H200's measured link (docs/RESULTS.md "GPU"): within the budget
// at every boundary, every swap-in done before its use. Hand-made cases pin the models' rules.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tensortier/allocator/offset_planner.h"
#include "tensortier/allocator/pool_models.h"
#include "tensortier/migrator/plan.h"
#include "tensortier/migrator/plan_edits.h"

namespace tensortier {
namespace {

constexpr std::uint64_t kMiB = 1 << 20;

TEST(PoolModels, BestFitTakesTheSmallestFreeBlockAndCoalesces) {
  // a [0,2) 4 MiB, b [0,3) 1 MiB, c [1,4) 2 MiB; a freed at 2 leaves a 4 MiB hole at the bottom;
  // d [2,5) 3 MiB goes into it; e [3,5) 1 MiB: b's block coalesced with the hole's remainder.
  const std::vector<PlannedBuffer> buffers = {
      {0, 2, 4 * kMiB}, {0, 3, kMiB}, {1, 4, 2 * kMiB}, {2, 5, 3 * kMiB}, {3, 5, kMiB}};
  const PoolFootprint f = best_fit_pool(buffers);
  EXPECT_EQ(f.reserved_bytes, 7 * kMiB) << "4 + 1 + 2 MiB before any free; nothing new after";
  EXPECT_EQ(f.allocated_bytes, 7 * kMiB);
  EXPECT_EQ(max_live_bytes(buffers), 7 * kMiB);
}

TEST(PoolModels, TheCachingAllocatorRoundsPoolsAndKeepsItsSegments) {
  // A 3 MiB request opens a 20 MiB large segment (under 10 MiB) and splits it; the second 3 MiB
  // and then a 12 MiB request (once the first is freed) are cut from its rest; a 100-byte request
  // takes 512 B of a 2 MiB small segment. Nothing else is asked of the device.
  std::vector<PlannedBuffer> buffers = {{0, 2, 3 * kMiB}, {1, 3, 3 * kMiB}, {2, 4, 12 * kMiB}, {0, 4, 100}};
  PoolFootprint f = caching_allocator(buffers);
  EXPECT_EQ(f.reserved_bytes, (20 + 2) * kMiB);
  EXPECT_EQ(f.allocated_bytes, 3 * kMiB + 12 * kMiB + 512) << "at time 2: one 3 MiB, the 12 MiB, the 512 B";
  // A segment is kept once freed, and its blocks coalesce: a later 16 MiB request fits in it.
  buffers = {{0, 1, 3 * kMiB}, {1, 2, 16 * kMiB}};
  f = caching_allocator(buffers);
  EXPECT_EQ(f.reserved_bytes, 20 * kMiB);
  EXPECT_EQ(f.allocated_bytes, 16 * kMiB);
  // Two 16 MiB requests alive together: the second needs a segment of its own (16 MiB, rounded to
  // 2 MiB at 10 MiB and over).
  buffers = {{0, 2, 16 * kMiB}, {1, 2, 16 * kMiB}};
  EXPECT_EQ(caching_allocator(buffers).reserved_bytes, 32 * kMiB);
  // A block whose rest would be 1 MiB or less is not split: the request takes all of it.
  buffers = {{0, 1, 19 * kMiB + 512}};
  EXPECT_EQ(caching_allocator(buffers).allocated_bytes, 20 * kMiB);
}

struct Trace {
  std::string name;
  nlohmann::json json;
  std::vector<PlannedBuffer> buffers;
};

Trace load(const std::string& name) {
  Trace t{name, {}, {}};
  std::ifstream in(std::string(TENSORTIER_GPU_TRACES_DIR) + "/" + name + ".json");
  EXPECT_TRUE(in) << name;
  if (!in) return t;
  t.json = nlohmann::json::parse(in);
  for (const auto& o : t.json.at("objects")) {
    t.buffers.push_back({o.at("born").get<std::uint64_t>(), o.at("freed").get<std::uint64_t>(),
                         std::max<std::uint64_t>(o.at("bytes").get<std::uint64_t>(), 1)});
  }
  return t;
}

#if defined(__SANITIZE_ADDRESS__)
// Under ASan (CI's time: planning five traces twice took 80 s there) two of them; the plain run
// plans all five.
const std::vector<std::string> kTraces = {"resnet18_b32", "vgg11_bn_b32"};
#else
const std::vector<std::string> kTraces = {"resnet18_b32", "resnet18_b128", "resnet50_b32", "vgg16_b32",
                                          "vgg11_bn_b32"};
#endif

TEST(SmartPool, OnRealStepsItsRegionIsWithinOnePercentOfMaxLive) {
  std::printf("%-14s %8s %10s %10s %10s %10s %10s\n", "trace", "objects", "max-live", "smartpool", "best-fit",
              "caching", "(alloc.)");
  for (const std::string& name : kTraces) {
    const Trace t = load(name);
    ASSERT_FALSE(t.buffers.empty()) << name;
    OffsetPlannerOptions options;
    options.alignment_bytes = 512;
    const auto plan = plan_offsets(t.buffers, options);
    ASSERT_TRUE(plan) << plan.status().to_string();
    ASSERT_EQ(check_offset_plan(t.buffers, plan.value(), 512), "") << name;
    const std::uint64_t live = max_live_bytes(t.buffers, 512);
    EXPECT_LE(static_cast<double>(plan->region_bytes), 1.01 * static_cast<double>(live)) << name;
    const PoolFootprint best = best_fit_pool(t.buffers);
    const PoolFootprint caching = caching_allocator(t.buffers);
    EXPECT_GE(best.reserved_bytes, live) << name;
    EXPECT_GE(caching.reserved_bytes, caching.allocated_bytes) << name;
    EXPECT_GE(caching.allocated_bytes, live) << name;
    auto mib = [](std::uint64_t b) { return static_cast<double>(b) / kMiB; };
    std::printf("%-14s %8zu %10.1f %10.1f %10.1f %10.1f %10.1f\n", name.c_str(), t.buffers.size(), mib(live),
                mib(plan->region_bytes), mib(best.reserved_bytes), mib(caching.reserved_bytes),
                mib(caching.allocated_bytes));
  }
}

// The trace as AutoSwap's inputs on the H200: layer times scaled so that ResNet-18 at batch 128
// takes the step PyTorch took there (9.9 ms; the same CPU-to-GPU ratio for the others), moves at
// the copy engine's measured 55.5 GB/s in and 55.3 out, a layer's bytes on the host read over the
// link at that rate.
migrator::PlanInputs gpu_inputs(const Trace& t, double gpu_over_cpu, double budget_share) {
  migrator::PlanInputs in;
  in.layers = t.json.at("layers").get<std::uint32_t>();
  for (const auto& ns : t.json.at("layer_ns")) {
    in.layer_ns.push_back(static_cast<std::uint64_t>(ns.get<double>() * gpu_over_cpu));
  }
  for (const auto& o : t.json.at("objects")) {
    migrator::PlanObject p;
    p.key = o.at("key").get<ObjectKey>();
    p.bytes = (std::max<std::uint64_t>(o.at("bytes").get<std::uint64_t>(), 1) + 511) / 512 * 512;
    p.born = o.at("born").get<std::uint32_t>();
    p.freed = std::min(o.at("freed").get<std::uint32_t>(), in.layers);
    p.persistent = o.at("persistent").get<bool>();
    p.uses = o.at("uses").get<std::vector<std::uint32_t>>();
    p.writes = o.at("writes").get<std::vector<std::uint32_t>>();
    in.objects.push_back(std::move(p));
  }
  std::vector<PlannedBuffer> lives;
  for (const migrator::PlanObject& o : in.objects)
    lives.push_back({o.born, std::max(o.freed, o.born + 1), o.bytes});
  in.peak_bytes = max_live_bytes(lives);
  in.fast_budget_bytes = static_cast<std::uint64_t>(budget_share * static_cast<double>(in.peak_bytes));
  in.fast = 0;
  in.slow = 1;
  in.move_in_gbps = 55.5;
  in.move_out_gbps = 55.3;
  in.slow_access_ns_per_byte = 1.0 / 55.4;
  return in;
}

double cpu_step_ns(const Trace& t) {
  double ns = 0;
  for (const auto& l : t.json.at("layer_ns")) ns += l.get<double>();
  return ns;
}

// AutoSwap at 70% and 50% of each trace's peak: its plan holds the budget at every boundary, and
// the swaps-in the simulator predicts late (the link cannot bring them before their use) are
// marked; the plan without them, what the runtime's trial runs where they cost more than they
// save, holds the budget too and brings every swap-in before its use. (How many are late, and what
// the swaps add, are figures: docs/RESULTS.md "GPU".)
TEST(AutoSwap, OnRealStepsOverTheH200LinkItsSwapsHoldTheBudgetAndTheTimelyOnesArriveBeforeUse) {
  const double ratio = 9.9e6 / cpu_step_ns(load("resnet18_b128"));  // PyTorch's step on the H200
  for (const std::string& name : kTraces) {
    const Trace t = load(name);
    for (const double share : {0.7, 0.5}) {
      const migrator::PlanInputs in = gpu_inputs(t, ratio, share);
      auto plan = migrator::make_plan("autoswap", in);
      ASSERT_TRUE(plan) << name;
      EXPECT_EQ(migrator::simulate(plan.value(), in), "") << name << " at " << share << ": over the budget";
      const auto late =
          std::ranges::count_if(plan->moves, [](const migrator::PlannedMove& m) { return m.predicted_late; });
      const auto failed = std::ranges::count_if(
          plan->moves, [](const migrator::PlannedMove& m) { return m.predicted_failed; });
      EXPECT_EQ(failed, 0) << name << " at " << share;
      std::printf(
          "%-14s at %2.0f%%: %zu swaps (%.1f MiB out, %.1f MiB in), %.2f ms added, %td predicted late\n",
          name.c_str(), share * 100, plan->moves.size(), static_cast<double>(plan->bytes_out) / kMiB,
          static_cast<double>(plan->bytes_in) / kMiB, plan->predicted_extra_ns / 1e6, late);
      if (late == 0) continue;
      std::optional<migrator::Plan> timely = migrator::without_late_moves(plan.value(), in);
      ASSERT_TRUE(timely) << name << " at " << share;
      migrator::Plan check = *timely;
      EXPECT_EQ(migrator::simulate(check, in), "") << name << " at " << share << ": without its late swaps";
      EXPECT_EQ(
          std::ranges::count_if(check.moves, [](const migrator::PlannedMove& m) { return m.predicted_late; }),
          0)
          << name << " at " << share;
      std::printf("%-14s at %2.0f%%, its late swaps left out: %zu swaps, %.2f ms added\n", name.c_str(),
                  share * 100, check.moves.size(), check.predicted_extra_ns / 1e6);
    }
  }
}

}  // namespace
}  // namespace tensortier
