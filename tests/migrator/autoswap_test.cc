// AutoSwap.
#include "plan_test_util.h"

namespace tensortier::migrator {
namespace {

// AutoSwap swaps out the large objects idle across the peak, after their use before it, and back
// in early enough for the move to end before their next use; objects under 1 MiB never move.
TEST(Plan, AutoswapSwapsIdleLargeObjectsAcrossThePeakInTime) {
  PlanInputs in;
  in.layers = 10;
  in.layer_ns.assign(10, 1'000'000);
  in.move_in_gbps = in.move_out_gbps = 4;  // 4 MiB in ~1 ms: one layer back
  in.slow_access_ns_per_byte = 0.5;
  in.objects.push_back({1, 4 * kMiB, 0, 10, true, false, {0, 9}, {9}, {}, false});  // idle across the middle
  in.objects.push_back({2, 4 * kMiB, 0, 10, true, false, {4, 5}, {5}, {}, false});  // used at the peak
  in.objects.push_back({3, kMiB / 2, 0, 10, true, false, {0, 9}, {9}, {}, false});  // idle, but too small
  in.objects.push_back(
      {step_key(0), 6 * kMiB, 3, 7, false, false, {3, 4, 5, 6}, {3}, {}, false});  // the peak's activation
  in.peak_bytes = 4 * kMiB + 4 * kMiB + kMiB / 2 + 6 * kMiB;
  in.fast_budget_bytes = in.peak_bytes - 2 * kMiB;
  auto plan = make_plan("autoswap", in);
  ASSERT_TRUE(plan);
  EXPECT_EQ(simulate(*plan, in), "");
  bool out = false, back = false;
  for (const PlannedMove& m : plan->moves) {
    EXPECT_EQ(m.key, 1u) << "only the large object idle across the peak is swapped";
    if (m.to == in.slow) {
      out = true;
      EXPECT_EQ(m.after_layer, 0u) << "out right after its use before the peak";
    } else {
      back = true;
      EXPECT_EQ(m.needed_by, 9u);
      ASSERT_NE(m.after_layer, kStepStart);
      const double lead_ns = static_cast<double>(m.needed_by - m.after_layer - 1) * 1e6;
      EXPECT_GE(lead_ns, static_cast<double>(m.bytes) / in.move_in_gbps) << "in too late to hide the move";
      EXPECT_LE(m.after_layer, 7u);
    }
  }
  EXPECT_TRUE(out && back);
  EXPECT_EQ(plan->slow_access_bytes, 0u) << "the swap is hidden: no layer finds its object slow";
}

}  // namespace
}  // namespace tensortier::migrator
