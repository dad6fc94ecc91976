// Objects touched unpinned outside the layers stay where they are born.
#include "plan_test_util.h"

namespace tensortier::migrator {
namespace {

TEST(Plan, ObjectsTouchedUnpinnedOutsideTheLayersStayWhereTheyAreBorn) {
  // The weights used by the first and last layer (key 1) are what every moving policy moves at
  // 5 MiB; host code touching them unpinned makes every plan leave them on one tier, and a pin
  // (host_pinned) gives the policy its plan back.
  for (std::uint64_t budget : {12 * kMiB, 8 * kMiB, 5 * kMiB}) {
    PlanInputs free_in = chain_inputs(budget);
    free_in.objects[0].accessed_undeclared = true;
    free_in.objects[0].host_pinned = true;
    PlanInputs stay_in = free_in;
    stay_in.objects[0].host_pinned = false;
    ASSERT_TRUE(stay_in.objects[0].stays());
    ASSERT_FALSE(free_in.objects[0].stays());
    bool some_policy_moved_it = false;
    for (const std::string& policy : policy_names()) {
      auto free_plan = make_plan(policy, free_in);
      auto plan = make_plan(policy, stay_in);
      ASSERT_TRUE(plan && free_plan) << policy;
      const auto moves_of_1 = [](const Plan& p) {
        return std::ranges::count_if(p.moves, [](const PlannedMove& m) { return whole_key(m.key) == 1; });
      };
      EXPECT_EQ(moves_of_1(*plan), 0) << policy << " at " << budget;
      const bool moved = moves_of_1(*free_plan) > 0;
      some_policy_moved_it |= moved;
      EXPECT_EQ(plan->left_in_place, moved ? std::vector<ObjectKey>{1} : std::vector<ObjectKey>{}) << policy;
      if (!moved) {  // nothing to leave: the very plan the policy made
        EXPECT_EQ(plan->moves.size(), free_plan->moves.size()) << policy;
        continue;
      }
      if (policy != "fast-only") {
        EXPECT_EQ(simulate(*plan, stay_in), "") << policy << " at " << budget;
      }
      // On one tier its whole life (every segment of it, in a page-granular plan): fast where the
      // rest of the plan leaves it room at every boundary.
      std::set<TierIndex> tiers;
      for (const auto& [key, t] : plan->start) {
        if (whole_key(key) == 1) tiers.insert(t);
      }
      ASSERT_EQ(tiers.size(), 1u) << policy;
      const TierIndex tier = *tiers.begin();
      std::vector<std::uint64_t> without(plan->fast_bytes_by_boundary);
      if (tier == stay_in.fast) {
        for (std::uint64_t& b : without) b -= 4 * kMiB;
      }
      const bool room = std::ranges::all_of(without, [&](std::uint64_t b) { return b + 4 * kMiB <= budget; });
      EXPECT_EQ(tier, room ? stay_in.fast : stay_in.slow) << policy << " at " << budget;
    }
    EXPECT_TRUE(some_policy_moved_it) << "at " << budget << ": the test needs a plan that moves key 1";
  }
}

}  // namespace
}  // namespace tensortier::migrator
