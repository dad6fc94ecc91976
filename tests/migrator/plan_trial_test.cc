// PlanTrial: the phases and the verdict from step and layer times given.
#include "plan_test_util.h"

namespace tensortier::migrator {
namespace {

// Feeds `steps` steps of `step_ns` (each layer `layer_ns`, or 1 ms) to the trial under `running`;
// returns the plan it switched to, if it did (after the last step).
std::optional<Plan> feed(PlanTrial& trial, Plan& running, int steps, std::uint64_t step_ns,
                         std::vector<std::uint64_t> layer_ns = std::vector<std::uint64_t>(8, 1'000'000)) {
  std::optional<Plan> switched;
  for (int s = 0; s < steps; ++s) {
    switched = trial.step(step_ns, layer_ns, running);
    if (switched) running = *switched;
  }
  return switched;
}

TEST(PlanTrial, TheFastestPhaseByTheStepTimesGivenGoesOn) {
  // Three phases (as made, without its late moves, none), two measured steps each after an
  // unmeasured one; the times are given, so the verdict is the code's alone.
  for (int fastest = 0; fastest < 3; ++fastest) {
    HandPlan hand;
    Plan running = judged_hand_plan(hand);
    auto trial = PlanTrial::begin(running, hand.in, 2, "by hand");
    ASSERT_TRUE(trial);
    ASSERT_EQ(trial->phases().size(), 3u) << "made, without its late moves, none";
    // Equal layer times in the first two phases: no late move is judged worth keeping alone, so
    // no judged phase comes in between.
    for (int phase = 0; phase < 3; ++phase) {
      const std::uint64_t ns = phase == fastest ? 10'000'000 : 20'000'000;
      const std::optional<Plan> next = feed(*trial, running, 3, ns);
      if (phase < 2) {
        ASSERT_TRUE(next) << "phase " << phase << " ended: the next one's plan runs";
        EXPECT_EQ(trial->running_phase(), static_cast<std::size_t>(phase + 1));
      }
    }
    ASSERT_TRUE(trial->done());
    EXPECT_EQ(trial->running_phase(), static_cast<std::size_t>(fastest)) << trial->result();
    const std::vector<std::string> verdicts = {
        "its plan runs as made", "its plan runs without its late moves", "moving does not pay here"};
    EXPECT_NE(trial->result().find(verdicts[static_cast<std::size_t>(fastest)]), std::string::npos)
        << trial->result();
    EXPECT_EQ(running.moves.empty(), fastest == 2) << "the plan running at the end is the fastest phase's";
    EXPECT_FALSE(trial->step(1, {}, running)) << "a trial that is done switches no more";
  }
  // Ties keep the first of equals (the plan as made); a plan that moves nothing has no trial.
  HandPlan hand;
  Plan running = judged_hand_plan(hand);
  auto trial = PlanTrial::begin(running, hand.in, 1, "by hand");
  ASSERT_TRUE(trial);
  (void)feed(*trial, running, 6, 5'000'000);
  ASSERT_TRUE(trial->done());
  EXPECT_EQ(trial->running_phase(), 0u) << trial->result();
  Plan still;
  EXPECT_FALSE(PlanTrial::begin(still, hand.in, 3, "none"));
  EXPECT_FALSE(PlanTrial::begin(running, hand.in, 0, "off"));
}

TEST(PlanTrial, LateMovesAreJudgedOneByOneFromTheLayerTimesGiven) {
  // Layers 4-5 (object 3's late move) faster with the late moves, layers 6-7 (object 4's) faster
  // without: the judged phase keeps 3's and leaves out 4's; given as fastest, it goes on.
  HandPlan hand;
  Plan running = judged_hand_plan(hand);
  auto trial = PlanTrial::begin(running, hand.in, 2, "by hand");
  ASSERT_TRUE(trial);
  const std::vector<std::uint64_t> with = {5, 5, 5, 5, 6, 5, 9, 5}, without = {5, 5, 5, 5, 8, 6, 7, 6};
  auto ms = [](std::vector<std::uint64_t> v) {
    for (std::uint64_t& x : v) x *= 1'000'000;
    return v;
  };
  ASSERT_TRUE(feed(*trial, running, 3, 45'000'000, ms(with)));
  ASSERT_TRUE(feed(*trial, running, 3, 48'000'000, ms(without)));
  ASSERT_EQ(trial->phases().size(), 4u);
  EXPECT_EQ(trial->phases()[2], "with 1 of its 2 late moves (judged one by one)");
  EXPECT_EQ(trial->running_phase(), 2u);
  const auto moves_of = [&](ObjectKey key) {
    return std::ranges::count_if(running.moves, [&](const PlannedMove& m) { return m.key == key; });
  };
  EXPECT_EQ(moves_of(3), 2) << "object 3's late move in kept (and its move out)";
  EXPECT_EQ(moves_of(4), 0) << "object 4's late move in left out (and its move out)";
  ASSERT_TRUE(feed(*trial, running, 3, 40'000'000));  // judged: the fastest
  (void)feed(*trial, running, 3, 50'000'000);         // none
  ASSERT_TRUE(trial->done());
  EXPECT_EQ(trial->running_phase(), 2u) << trial->result();
  EXPECT_NE(trial->result().find("its plan runs with the 1 late moves its layers were faster with"),
            std::string::npos)
      << trial->result();
  EXPECT_EQ(moves_of(4), 0);
}

}  // namespace
}  // namespace tensortier::migrator
