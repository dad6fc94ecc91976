// Every policy by name (registry.cc): valid plans at every budget, unknown names refused.
#include "plan_test_util.h"

namespace tensortier::migrator {
namespace {

TEST(Plan, EveryPolicyIsValidAtEveryBudgetThatHoldsTheShortLived) {
  for (std::uint64_t budget : {12 * kMiB, 8 * kMiB, 5 * kMiB}) {
    const PlanInputs in = chain_inputs(budget);
    for (const std::string& policy : policy_names()) {
      auto plan = make_plan(policy, in);
      ASSERT_TRUE(plan) << plan.status().to_string();
      const std::string problem = simulate(*plan, in);
      if ((policy == "fast-only" || policy == "smartpool") && budget < 12 * kMiB) {
        EXPECT_NE(problem, "") << policy << " keeps everything fast: the simulator must say it overruns";
        continue;
      }
      EXPECT_EQ(problem, "") << policy << " at " << budget;
      EXPECT_LE(plan->peak_fast_bytes, budget) << policy;
      // The planned occupancy tensortier-bench plots: one figure per boundary, its peak the plan's.
      ASSERT_EQ(plan->fast_bytes_by_boundary.size(), in.layers + 1U) << policy;
      EXPECT_EQ(*std::max_element(plan->fast_bytes_by_boundary.begin(), plan->fast_bytes_by_boundary.end()),
                plan->peak_fast_bytes)
          << policy;
      EXPECT_EQ(plan->small_reserve_bytes, in.small_reserve_bytes);
    }
  }
}

TEST(Plan, UnknownPolicyAndBadInputsAreRefused) {
  auto plan = make_plan("lru", chain_inputs(8 * kMiB));
  ASSERT_FALSE(plan);
  EXPECT_NE(plan.status().message().find("known: fast-only"), std::string::npos);
  profiler::StepProfile empty;
  EXPECT_FALSE(inputs_from_profile(empty, 0, 1, kMiB));
}

}  // namespace
}  // namespace tensortier::migrator
