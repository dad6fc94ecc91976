// Fixed placements: first-touch.
#include "plan_test_util.h"

namespace tensortier::migrator {
namespace {

TEST(Plan, FirstTouchFillsFastInBirthOrderAndNeverMoves) {
  const PlanInputs in = chain_inputs(5 * kMiB);
  auto plan = make_plan("first-touch", in);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->start.at(1), 0u);  // the first persistent object fits
  EXPECT_EQ(plan->start.at(2), 1u);  // the second does not
  EXPECT_TRUE(plan->moves.empty());
}

}  // namespace
}  // namespace tensortier::migrator
