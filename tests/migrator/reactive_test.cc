// Reactive and reactive-2m.
#include "plan_test_util.h"

namespace tensortier::migrator {
namespace {

// Reactive knows only the past: every move in follows a layer that used the object (a promotion
// of what was just touched), and with room for the weights it keeps them fast.
TEST(Plan, ReactivePromotesOnlyWhatALayerJustUsed) {
  const PlanInputs in = chain_inputs(8 * kMiB);
  auto plan = make_plan("reactive", in);
  ASSERT_TRUE(plan);
  EXPECT_EQ(simulate(*plan, in), "");
  std::map<ObjectKey, const PlanObject*> by_key;
  for (const PlanObject& o : in.objects) by_key[o.key] = &o;
  std::size_t ins = 0;
  for (const PlannedMove& m : plan->moves) {
    if (m.to != in.fast) continue;
    ++ins;
    const auto& uses = by_key.at(m.key)->uses;
    ASSERT_NE(m.after_layer, kStepStart);
    EXPECT_TRUE(std::binary_search(uses.begin(), uses.end(), m.after_layer))
        << "key " << m.key << " moved in after layer " << m.after_layer << ", which did not use it";
    EXPECT_EQ(m.useful_until, kStepStart) << "reactive cannot know when a move stops helping";
  }
  EXPECT_GT(ins, 0u) << "at 8 MiB of 16 MiB live something must be promoted";
  auto roomy = make_plan("reactive", chain_inputs(64 * kMiB));
  ASSERT_TRUE(roomy);
  EXPECT_TRUE(roomy->moves.empty()) << "with room for everything a reactive policy moves nothing";
  EXPECT_EQ(roomy->slow_access_bytes, 0u);
}

// Reactive at 2 MiB pages: part of an object too large for the budget stays fast (object-level
// reactive keeps all of it slow), an object is born whole on one tier, and promotions and
// demotions move segments, named by part keys.
TEST(Plan, Reactive2mKeepsPartOfAnObjectFastAndMovesSegments) {
  PlanInputs in = plain_inputs(4, 6 * kMiB);
  const std::uint64_t big = 9 * kMiB + 4096;  // segments of 2, 2, 2, 2 and 1 MiB + 4 KiB
  in.objects.push_back({1, big, 0, 4, true, false, {0, 1, 2, 3}, {3}, {}, false});
  in.objects.push_back({step_key(0), 3 * kMiB, 1, 3, false, false, {1, 2}, {1}, {}, false});
  in.peak_bytes = big + 3 * kMiB;
  const PlanInputs segments = in_segments(in);
  ASSERT_EQ(segments.objects.size(), 7u);
  EXPECT_EQ(segments.objects[4].key, part_key(1, 4));
  EXPECT_EQ(segments.objects[4].bytes, kMiB + 4096);
  EXPECT_EQ(whole_key(segments.objects[6].key), step_key(0));
  EXPECT_EQ(segment_of(segments.objects[6].key), 1u);
  EXPECT_EQ(segment_of(step_key(0)), kWholeObject);

  auto whole = make_plan("reactive", in);
  auto paged = make_plan("reactive-2m", in);
  ASSERT_TRUE(whole && paged);
  EXPECT_EQ(simulate(*paged, in), "");
  EXPECT_EQ(paged->segment_bytes, kSegmentBytes);
  EXPECT_EQ(whole->start.at(1), in.slow) << "9 MiB never fits 6 MiB whole";
  int fast_segments = 0;
  for (std::uint32_t k = 0; k < 5; ++k) fast_segments += paged->start.at(part_key(1, k)) == in.fast ? 1 : 0;
  EXPECT_EQ(fast_segments, 3) << "three of its 2 MiB segments fit";
  EXPECT_EQ(paged->birth.at(part_key(step_key(0), 0)), paged->birth.at(part_key(step_key(0), 1)))
      << "an object is born whole on one tier";
  EXPECT_LT(paged->slow_access_bytes, whole->slow_access_bytes);
  EXPECT_LT(paged->predicted_extra_ns, whole->predicted_extra_ns);

  // Two weights of 6 MiB taking turns in 8 MiB: the second's segments are promoted after the layer
  // that uses it, the first's demoted to make room, segment by segment.
  PlanInputs turns;
  turns.layers = 8;
  turns.layer_ns.assign(8, 1'000'000);
  turns.move_in_gbps = turns.move_out_gbps = 10;
  turns.slow_access_ns_per_byte = 0.5;
  turns.fast_budget_bytes = 8 * kMiB;
  turns.objects.push_back({1, 6 * kMiB, 0, 8, true, false, {0, 1, 2, 3}, {3}, {}, false});
  turns.objects.push_back({2, 6 * kMiB, 0, 8, true, false, {4, 5, 6, 7}, {7}, {}, false});
  turns.peak_bytes = 12 * kMiB;
  auto moving = make_plan("reactive-2m", turns);
  ASSERT_TRUE(moving);
  EXPECT_EQ(simulate(*moving, turns), "");
  std::size_t ins = 0;
  for (const PlannedMove& m : moving->moves) {
    EXPECT_NE(segment_of(m.key), kWholeObject) << "key " << m.key;
    EXPECT_EQ(m.bytes, kSegmentBytes);
    ins += m.to == turns.fast ? 1 : 0;
  }
  EXPECT_GT(ins, 0u);
  EXPECT_EQ(moving->peak_fast_bytes, turns.fast_budget_bytes)
      << "pages fill the budget; 6 MiB objects cannot";
  auto objects = make_plan("reactive", turns);
  ASSERT_TRUE(objects);
  EXPECT_EQ(objects->peak_fast_bytes, 6 * kMiB);
  EXPECT_LT(moving->slow_access_bytes, objects->slow_access_bytes);
}

}  // namespace
}  // namespace tensortier::migrator
