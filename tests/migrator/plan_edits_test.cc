// Plan edits: late moves left out, and judged one by one by layer times.
#include "plan_test_util.h"

namespace tensortier::migrator {
namespace {

// Moves the simulator predicts late (the layer would wait, or find the object still slow) are
// marked; the plan without them is valid and leaves out only those, and the moves out that would
// find their objects already slow. A plan by hand over rotating_inputs (object k used by layers
// 2k-2 and 2k-1, 5 ms each; 4 MiB moves of 4.2 ms): object 3 moved in after layer 1 for layer 4
// (in time behind a move out), object 4 after layer 5 for layer 6 behind a move out (late).
TEST(Plan, LateMovesAreMarkedAndThePlanWithoutThemIsValid) {
  HandPlan hand;
  const PlanInputs& in = hand.in;
  Plan& plan = hand.plan;
  auto move = [&](ObjectKey key, TierIndex to, std::uint32_t after, std::uint32_t needed_by) {
    hand.move(key, to, after, needed_by);
  };
  move(1, 1, 1, 2);
  move(3, 0, 1, 4);
  move(2, 1, 3, 4);
  move(3, 1, 5, 6);
  move(4, 0, 5, 6);
  move(4, 1, 7, 8);
  move(1, 0, 7, 8);
  move(2, 0, 7, 8);
  ASSERT_EQ(simulate(plan, in), "");
  std::vector<ObjectKey> late;
  for (const PlannedMove& m : plan.moves)
    if (m.predicted_late) late.push_back(m.key);
  EXPECT_EQ(late, std::vector<ObjectKey>{4}) << "object 3's move in is in time, object 4's late";

  const std::optional<Plan> left_out = without_late_moves(plan, in);
  ASSERT_TRUE(left_out) << "a late move to leave out";
  const Plan& timely = *left_out;
  Plan check = timely;
  EXPECT_EQ(simulate(check, in), "");
  ASSERT_EQ(timely.moves.size(), plan.moves.size() - 2) << "object 4's move in, and its move out";
  for (const PlannedMove& m : timely.moves) EXPECT_NE(m.key, 4U);
  EXPECT_EQ(timely.bytes_in, plan.bytes_in - 4 * kMiB);
  EXPECT_GT(timely.slow_access_bytes, plan.slow_access_bytes - 1) << "object 4 is read where it is";
  // Where nothing is late there is nothing to leave out.
  EXPECT_FALSE(without_late_moves(timely, in));
}

// The trial's verdicts move by move: each late move in judged by the time of the layers it can
// change (from the one after it is handed out to the last it helps), with the late moves and
// without them; the plan that leaves out only those judged not worth it is valid. The plan by
// hand above with object 3's move in handed out after layer 3 (behind object 2's move out: late
// too).
TEST(Plan, LateMovesAreJudgedOneByOneByTheLayersTheyServe) {
  HandPlan hand;
  const PlanInputs& in = hand.in;
  Plan plan = judged_hand_plan(hand);
  ASSERT_EQ(simulate(plan, in), "");
  ASSERT_TRUE(plan.moves[2].predicted_late && plan.moves[4].predicted_late);

  const std::vector<double> with_ns = {5e6, 5e6, 5e6, 5e6, 6e6, 5e6, 9e6, 5e6};
  const std::vector<double> without_ns = {5e6, 5e6, 5e6, 5e6, 8e6, 6e6, 7e6, 6e6};
  const std::vector<LateMoveVerdict> verdicts = judge_late_moves(plan, in.layers, with_ns, without_ns);
  ASSERT_EQ(verdicts.size(), 2U) << "one verdict for each late move in, none for the others";
  EXPECT_EQ(verdicts[0].move, 2U);
  EXPECT_EQ(verdicts[0].first_layer, 4U);
  EXPECT_EQ(verdicts[0].last_layer, 5U);
  EXPECT_DOUBLE_EQ(verdicts[0].with_ns, 11e6);
  EXPECT_DOUBLE_EQ(verdicts[0].without_ns, 14e6);
  EXPECT_TRUE(verdicts[0].keep()) << "its layers were faster with it";
  EXPECT_EQ(verdicts[1].move, 4U);
  EXPECT_EQ(verdicts[1].first_layer, 6U);
  EXPECT_EQ(verdicts[1].last_layer, 7U);
  EXPECT_FALSE(verdicts[1].keep()) << "its layers were faster without it (14 ms against 13 ms)";
  EXPECT_TRUE(judge_late_moves(plan, in.layers, std::span(with_ns).first(7), without_ns).empty())
      << "times for fewer layers than the step has judge nothing";

  const std::vector<std::size_t> leave = {verdicts[1].move};
  const std::optional<Plan> mixed = without_moves_in(plan, in, leave);
  ASSERT_TRUE(mixed);
  Plan check = *mixed;
  EXPECT_EQ(simulate(check, in), "");
  EXPECT_EQ(mixed->moves.size(), plan.moves.size() - 2) << "object 4's move in, and its move out";
  EXPECT_EQ(std::ranges::count_if(mixed->moves, [](const PlannedMove& m) { return m.key == 3; }), 2)
      << "object 3's moves stay";
  EXPECT_EQ(std::ranges::count_if(mixed->moves, [](const PlannedMove& m) { return m.key == 4; }), 0);
  // Leaving out a move out, or nothing, gives no plan.
  EXPECT_FALSE(without_moves_in(plan, in, std::vector<std::size_t>{0}));
  EXPECT_FALSE(without_moves_in(plan, in, std::vector<std::size_t>{}));
}

}  // namespace
}  // namespace tensortier::migrator
