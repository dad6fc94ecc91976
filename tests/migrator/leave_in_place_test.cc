// Objects touched unpinned outside the layers are never moved by a plan: a persistent one stays
// where it is (StayPut), one born in the step on the tier it is born on (leave_in_place).
#include "plan_test_util.h"

namespace tensortier::migrator {
namespace {

std::ptrdiff_t moves_of(const Plan& plan, ObjectKey key) {
  return std::ranges::count_if(plan.moves, [&](const PlannedMove& m) { return whole_key(m.key) == key; });
}

TEST(Plan, PersistentObjectsTouchedUnpinnedStayWhereTheyAreInEveryPlan) {
  // The weights used by the first and last layer (key 1) are what every moving policy moves at
  // 5 MiB; touched unpinned outside the layers, they stay on the tier they are on, fast or slow,
  // under every policy and budget: in start there, named in stay_put, moved by no move, and the
  // rest of the plan within the budget beside them. A pin (host_pinned) gives the policy its plan
  // back.
  for (const TierIndex tier : {TierIndex{0}, TierIndex{1}}) {
    for (std::uint64_t budget : {12 * kMiB, 8 * kMiB, 5 * kMiB}) {
      PlanInputs free_in = chain_inputs(budget);
      free_in.objects[0].accessed_undeclared = true;
      free_in.objects[0].host_pinned = true;
      free_in.objects[0].tier = tier;
      PlanInputs stay_in = free_in;
      stay_in.objects[0].host_pinned = false;
      ASSERT_TRUE(stay_in.objects[0].stays());
      bool some_policy_moved_it = false;
      for (const std::string& policy : policy_names()) {
        SCOPED_TRACE(fmt::format("{} at {} MiB, on tier {}", policy, budget / kMiB, tier));
        auto free_plan = make_plan(policy, free_in);
        auto plan = make_plan(policy, stay_in);
        ASSERT_TRUE(plan && free_plan);
        some_policy_moved_it |= moves_of(*free_plan, 1) > 0;
        EXPECT_TRUE(free_plan->stay_put.empty());
        EXPECT_EQ(moves_of(*plan, 1), 0);
        EXPECT_EQ(plan->stay_put, std::vector<ObjectKey>{1});
        EXPECT_TRUE(plan->left_in_place.empty());
        for (const auto& [key, t] : plan->start) {
          if (whole_key(key) == 1) {
            EXPECT_EQ(t, tier) << key;  // every segment of a page-granular plan
          }
        }
        EXPECT_EQ(plan->fast_budget_bytes, budget);
        // fast-only keeps every object fast whatever the budget; smartpool moves nothing, so it fits
        // or is refused (must_fit).
        if (policy != "fast-only" && policy != "smartpool") {
          EXPECT_EQ(simulate(*plan, stay_in), "");
        }
        if (plan->problem.empty()) {
          for (std::uint64_t b : plan->fast_bytes_by_boundary) EXPECT_LE(b, budget);
        }
      }
      EXPECT_TRUE(some_policy_moved_it) << "the test needs a plan that moves key 1";
    }
  }
}

TEST(Plan, PersistentObjectsTouchedUnpinnedThatFillTheBudgetAreRefusedSayingWhatToDo) {
  PlanInputs in = chain_inputs(6 * kMiB);
  in.small_reserve_bytes = 2 * kMiB;
  in.objects[0].accessed_undeclared = true;  // 4 MiB, fast: with the reserve, the whole budget
  for (const std::string& policy : policy_names()) {
    auto plan = make_plan(policy, in);
    ASSERT_FALSE(plan) << policy;
    EXPECT_EQ(plan.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(plan.status().message().find("pin them"), std::string::npos) << plan.status().message();
  }
  in.objects[0].tier = in.slow;  // on the slow tier they take nothing of it
  for (const std::string& policy : policy_names()) EXPECT_TRUE(make_plan(policy, in)) << policy;
}

TEST(Plan, ObjectsBornInTheStepAndTouchedUnpinnedStayWhereTheyAreBorn) {
  // An activation kept from layer 1 to layer 8 (key 20, as backward keeps one) is what moving
  // policies move out between; touched unpinned outside the layers, every plan leaves it on one
  // tier for its whole life: fast where the rest of the plan leaves it room at every boundary.
  for (std::uint64_t budget : {14 * kMiB, 10 * kMiB, 7 * kMiB}) {
    PlanInputs free_in = chain_inputs(budget);
    free_in.objects.push_back({20, 4 * kMiB, 1, 9, false, false, {1, 8}, {1}, {}, false});
    free_in.peak_bytes += 4 * kMiB;
    free_in.objects.back().accessed_undeclared = true;
    free_in.objects.back().host_pinned = true;
    PlanInputs stay_in = free_in;
    stay_in.objects.back().host_pinned = false;
    bool some_policy_moved_it = false;
    for (const std::string& policy : policy_names()) {
      SCOPED_TRACE(fmt::format("{} at {} MiB", policy, budget / kMiB));
      auto free_plan = make_plan(policy, free_in);
      auto plan = make_plan(policy, stay_in);
      ASSERT_TRUE(plan && free_plan);
      EXPECT_EQ(moves_of(*plan, 20), 0);
      EXPECT_TRUE(plan->stay_put.empty());
      const bool moved = moves_of(*free_plan, 20) > 0;
      some_policy_moved_it |= moved;
      // Left in place where the policy moved it; a policy that reads PlanObject::stays (the
      // channel program keeps its share constant) plans it staying and leaves nothing.
      if (!plan->left_in_place.empty() || policy != "channel") {
        EXPECT_EQ(plan->left_in_place, moved ? std::vector<ObjectKey>{20} : std::vector<ObjectKey>{});
      }
      if (!moved) {  // nothing to leave: the very plan the policy made
        EXPECT_EQ(plan->moves.size(), free_plan->moves.size());
        continue;
      }
      if (policy != "fast-only") {
        EXPECT_EQ(simulate(*plan, stay_in), "");
      }
      std::set<TierIndex> tiers;
      for (const auto& [key, t] : plan->birth) {
        if (whole_key(key) == 20) tiers.insert(t);
      }
      ASSERT_EQ(tiers.size(), 1u);
      const TierIndex tier = *tiers.begin();
      std::vector<std::uint64_t> without(plan->fast_bytes_by_boundary);
      for (std::uint32_t b = 1; b <= 9 && tier == stay_in.fast; ++b) without[b] -= 4 * kMiB;
      bool room = true;
      for (std::uint32_t b = 1; b <= 9; ++b) room &= without[b] + 4 * kMiB <= budget;
      EXPECT_EQ(tier, room ? stay_in.fast : stay_in.slow);
    }
    EXPECT_TRUE(some_policy_moved_it) << "at " << budget << ": the test needs a plan that moves key 20";
  }
}

}  // namespace
}  // namespace tensortier::migrator
