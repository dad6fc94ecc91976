// Sentinel: intervals, fast sets counted per interval or per layer, ranking, the cheapest plan kept.
#include "plan_test_util.h"

namespace tensortier::migrator {
namespace {

TEST(Plan, SentinelMovesPersistentObjectsInBeforeTheirLayersAndBeatsFirstTouch) {
  const PlanInputs in = chain_inputs(8 * kMiB);
  auto sentinel = make_plan("sentinel", in);
  auto first_touch = make_plan("first-touch", in);
  ASSERT_TRUE(sentinel && first_touch);
  EXPECT_FALSE(sentinel->moves.empty());
  EXPECT_LT(sentinel->slow_access_bytes, first_touch->slow_access_bytes);
  EXPECT_LT(sentinel->predicted_extra_ns, first_touch->predicted_extra_ns);
  for (const PlannedMove& m : sentinel->moves) {
    if (m.to != in.fast || m.needed_by >= in.layers) continue;
    EXPECT_TRUE(m.after_layer == kStepStart || m.after_layer < m.needed_by)
        << "a move in must start before the layer that needs it";
  }
}

// Counted per layer, an interval's fast set holds objects that are not fast at the same time:
// one that dies before the next is born, and one moved out after its last use before another is
// born; counted per interval, the second of each pair stays slow.
TEST(Plan, SentinelCountsAnIntervalsFastSetAtEachLayer) {
  PlanInputs in = plain_inputs(6, 8 * kMiB);
  // Interval 0 (layers 0-1): a dies before b is born. Interval 1 (layers 2-3): d, alive to the
  // step's end, is last used by layer 2; e is born at 3. Interval 2 (layers 4-5): f, last used by
  // layer 4, dies with the step, so it holds its room when g is born at 5 (no move out of it).
  in.objects.push_back({11, 6 * kMiB, 0, 1, false, false, {0}, {0}, {}, false});  // a
  in.objects.push_back({12, 6 * kMiB, 1, 2, false, false, {1}, {1}, {}, false});  // b
  in.objects.push_back({13, 6 * kMiB, 2, 6, false, false, {2}, {2}, {}, false});  // d
  in.objects.push_back({14, 6 * kMiB, 3, 4, false, false, {3}, {3}, {}, false});  // e
  in.objects.push_back({15, 6 * kMiB, 4, 6, false, false, {4}, {4}, {}, false});  // f
  in.objects.push_back({16, 6 * kMiB, 5, 6, false, false, {5}, {5}, {}, false});  // g
  in.peak_bytes = 12 * kMiB;
  Plan per_interval = sentinel_with(in, 2, 0, SentinelCount::kPerInterval);
  Plan per_layer = sentinel_with(in, 2, 0, SentinelCount::kPerLayer);
  ASSERT_EQ(simulate(per_interval, in), "");
  ASSERT_EQ(simulate(per_layer, in), "") << "counted per layer, the plan must still hold the budget";
  EXPECT_EQ(per_interval.birth.at(12), in.slow);
  EXPECT_EQ(per_interval.birth.at(14), in.slow);
  EXPECT_EQ(per_interval.birth.at(16), in.slow);
  EXPECT_EQ(per_interval.slow_access_bytes, 18 * kMiB);
  for (ObjectKey key : {11, 12, 13, 14, 15}) EXPECT_EQ(per_layer.birth.at(key), in.fast) << key;
  EXPECT_EQ(per_layer.birth.at(16), in.slow);
  EXPECT_EQ(per_layer.slow_access_bytes, 6 * kMiB);
  EXPECT_LE(per_layer.peak_fast_bytes, in.fast_budget_bytes);
  // d's count ends at its move out after layer 2, so the plan has that move.
  const bool d_out = std::any_of(per_layer.moves.begin(), per_layer.moves.end(), [&](const PlannedMove& m) {
    return m.key == 13 && m.to == in.slow && m.after_layer == 2;
  });
  EXPECT_TRUE(d_out);
  EXPECT_LT(per_layer.predicted_extra_ns, per_interval.predicted_extra_ns);
}

// Ranked by uses per byte-layer held, four one-layer stays go before one object held over the
// whole interval; ranked per byte, the long stay (more uses per byte) takes the room first.
TEST(Plan, SentinelRankedByHeldBytesPutsShortStaysFirst) {
  PlanInputs in = plain_inputs(4, 8 * kMiB);
  in.objects.push_back({20, 6 * kMiB, 0, 4, false, false, {0, 3}, {0}, {}, false});  // 2 uses in 4 layers
  for (std::uint32_t l = 0; l < 4; ++l)
    in.objects.push_back({21 + l, 5 * kMiB, l, l + 1, false, false, {l}, {l}, {}, false});  // 1 use, 1 layer
  in.peak_bytes = 26 * kMiB;
  Plan per_byte = sentinel_with(in, 4, 0, SentinelCount::kPerLayer);
  Plan per_held = sentinel_with(in, 4, 0, SentinelCount::kPerLayerByHeld);
  ASSERT_EQ(simulate(per_byte, in), "");
  ASSERT_EQ(simulate(per_held, in), "");
  EXPECT_EQ(per_byte.birth.at(20), in.fast);
  EXPECT_EQ(per_byte.slow_access_bytes, 20 * kMiB);  // the four short stays read where they are
  EXPECT_EQ(per_held.birth.at(20), in.slow);
  for (ObjectKey key = 21; key < 25; ++key) EXPECT_EQ(per_held.birth.at(key), in.fast) << key;
  EXPECT_EQ(per_held.slow_access_bytes, 12 * kMiB);  // the long stay read twice where it is
}

// Ranked by uses per layer held (each use touches all of an object's pages), the object used at
// every layer of its stay goes first whatever its size; ranked per byte too, a smaller one used
// less often goes first and leaves the larger slow.
TEST(Plan, SentinelRankedByHotHeldPutsDenseUseFirst) {
  PlanInputs in = plain_inputs(2, 7 * kMiB);
  in.objects.push_back({30, 6 * kMiB, 0, 2, false, false, {0, 1}, {0}, {}, false});  // used at both layers
  in.objects.push_back({31, 2 * kMiB, 0, 2, false, false, {0}, {0}, {}, false});     // used at one
  in.peak_bytes = 8 * kMiB;
  Plan per_byte = sentinel_with(in, 2, 0, SentinelCount::kPerLayerByHeld);
  Plan hot = sentinel_with(in, 2, 0, SentinelCount::kPerLayerByHotHeld);
  ASSERT_EQ(simulate(per_byte, in), "");
  ASSERT_EQ(simulate(hot, in), "");
  EXPECT_EQ(per_byte.birth.at(30), in.slow);
  EXPECT_EQ(per_byte.birth.at(31), in.fast);
  EXPECT_EQ(per_byte.slow_access_bytes, 12 * kMiB);
  EXPECT_EQ(hot.birth.at(30), in.fast);
  EXPECT_EQ(hot.birth.at(31), in.slow);
  EXPECT_EQ(hot.slow_access_bytes, 2 * kMiB);
}

// The policy keeps the cheapest valid plan of every interval length and count.
TEST(Plan, SentinelKeepsTheCheapestIntervalAndCount) {
  for (std::uint64_t budget : {8 * kMiB, 6 * kMiB}) {
    PlanInputs in = chain_inputs(budget);
    auto best = make_plan("sentinel", in);
    ASSERT_TRUE(best);
    ASSERT_EQ(simulate(*best, in), "");
    for (PlanObject& o : in.objects) o.short_lived = false;  // the variant without the region
    int valid = 0;
    for (std::uint32_t n = 1; n <= in.layers; ++n) {
      for (SentinelCount count : kSentinelCounts) {
        Plan plan = sentinel_with(in, n, 0, count);
        if (!simulate(plan, in).empty()) continue;
        ++valid;
        EXPECT_LE(best->predicted_extra_ns, plan.predicted_extra_ns)
            << "interval " << n << ", " << plan.variant;
      }
    }
    EXPECT_GT(valid, 0);
  }
}

}  // namespace
}  // namespace tensortier::migrator

namespace tensortier::migrator {
namespace {

// An object made before the step and freed before its first layer (born and freed at boundary 0:
// a program that frees the last iteration's tensors once the next step has begun, as oneDNN
// programs under the interposer do) lives at no layer. Every policy plans around it; sentinel read
// its last interval as (freed - 1) / n, past the end, and crashed.
TEST(Plan, AnObjectFreedAtTheStepsFirstBoundaryIsPlannedByEveryPolicy) {
  PlanInputs in = plain_inputs(4, 8 * kMiB);
  in.objects.push_back({30, 6 * kMiB, 0, 0, false, false, {}, {}, {}, false});  // gone at boundary 0
  in.objects.push_back({31, 6 * kMiB, 0, 4, true, false, {0, 3}, {3}, {}, false});
  in.objects.push_back({32, 4 * kMiB, 1, 3, false, false, {1, 2}, {1}, {}, false});
  in.peak_bytes = 16 * kMiB;
  for (const std::string& policy : policy_names()) {
    auto plan = make_plan(policy, in);
    ASSERT_TRUE(plan) << policy << ": " << plan.status().message();
    if (policy != "fast-only" && policy != "smartpool") {  // (they keep everything fast)
      EXPECT_EQ(simulate(plan.value(), in), "") << policy;
    }
  }
}

}  // namespace
}  // namespace tensortier::migrator
