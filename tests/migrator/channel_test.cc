// The channel policy (policies/channel.cc): its rounding worked by hand, its residencies within the
// room, and its plans valid, the same each time and never predicted below the bound.
#include "plan_test_util.h"
#include "policies/policy_kit.h"
#include "tensortier/migrator/timed_bound.h"

namespace tensortier::migrator {
namespace {

// One object born before layer 0 and freed after layer 8, used by layers 0 and 8; its slow share
// at each boundary as a solution might have it (out in the middle, back before the last use).
PlanInputs one_object(bool persistent, std::vector<std::uint32_t> uses) {
  PlanInputs in = plain_inputs(9, 8 * kMiB);
  in.objects.push_back({1, kMiB, 0, 9, persistent, false, std::move(uses), {0}, {}, false});
  return in;
}

TEST(Channel, BetweenTwoFastUsesTheObjectIsSlowOverTheHullItsMoveOutOneBoundaryEarlier) {
  const PlanInputs in = one_object(false, {0, 8});
  const std::vector<double> share = {0, 0, .3, .7, 1, 1, .6, .2, 0};
  EXPECT_EQ(policies::round_channel_shares(in, in.objects[0], share, 0.5),
            (std::vector<char>{1, 1, 0, 0, 0, 0, 0, 1, 1}))
      << "slow where the share is at least 1/2 (boundaries 3-6), out handed at 2, in at 7";
  EXPECT_EQ(policies::round_channel_shares(in, in.objects[0], share, 0.1),
            (std::vector<char>{1, 0, 0, 0, 0, 0, 0, 0, 1}))
      << "slow where a tenth is (2-7), out handed at 1, in at 8";
}

TEST(Channel, AUseIsRoundedAtOneHalfAndTheGapsAroundItFollow) {
  const PlanInputs in = one_object(false, {0, 4, 8});
  // Use 4 is 60% slow: slow there, so the object leaves after use 0 and comes back for use 8.
  const std::vector<double> share = {0, 0, 0, .2, .6, .4, .1, 0, 0};
  EXPECT_EQ(policies::round_channel_shares(in, in.objects[0], share, 0.5),
            (std::vector<char>{1, 1, 1, 0, 0, 1, 1, 1, 1}))
      << "gap 0-4: the hull is use 4 alone, out handed at 3; gap 4-8: in handed at 5";
}

TEST(Channel, APersistentObjectsLastGapRunsAroundTheStep) {
  PlanInputs in = one_object(true, {2, 5});
  // Slow from boundary 7 to boundary 0 of the next step, fast at both uses.
  const std::vector<double> share = {1, 0, 0, 0, 0, 0, 0, 1, 1};
  EXPECT_EQ(policies::round_channel_shares(in, in.objects[0], share, 0.5),
            (std::vector<char>{0, 1, 1, 1, 1, 1, 0, 0, 0}))
      << "out handed at 6 (the hull 7-9 less one), in at 1 for use 2";
  const std::vector<double> none(9, -1);
  EXPECT_EQ(policies::round_channel_shares(in, in.objects[0], none, 0.5), std::vector<char>(9, 0))
      << "no share: no layer finds it, slow";
}

// Every candidate holds no more than the room fast at any boundary (fit_by_share), and the policy's
// plans are valid, the same each time, and never predicted below the timed bound.
TEST(Channel, PlansAreValidTheSameEachTimeAndNotBelowTheBound) {
  std::mt19937 rng(53);
  int valid = 0;
  for (int seed = 0; seed < 40; ++seed) {
    PlanInputs in = random_inputs(rng, seed % 2 == 0, seed % 3 == 0);
    in.ready_memory = seed % 4 != 0;
    in.timed_program_s = 5;
    for (const auto& [r, what] : policies::channel_residencies(in)) {
      for (std::uint32_t b = 0; b < in.layers; ++b) {
        std::uint64_t fast = 0;
        for (std::size_t i = 0; i < in.objects.size(); ++i)
          if (r[i][b]) fast += in.objects[i].bytes;
        EXPECT_LE(fast, policies::plannable_room(in)) << "seed " << seed << " boundary " << b << ": " << what;
      }
    }
    auto plan = make_plan("channel", in);
    auto again = make_plan("channel", in);
    ASSERT_TRUE(plan && again);
    EXPECT_EQ(plan->moves.size(), again->moves.size()) << "seed " << seed;
    EXPECT_EQ(plan->predicted_extra_ns, again->predicted_extra_ns) << "seed " << seed;
    EXPECT_EQ(plan->variant, again->variant) << "seed " << seed;
    if (!plan->problem.empty() || !plan->places.problem.empty()) continue;
    ++valid;
    // Both computed from the inputs' given layer times and rates (no clock is read): a bound
    // above a prediction would be a wrong bound or a wrong prediction.
    EXPECT_GE(plan->predicted_extra_ns + 1, plan->timed_bound_ns)
        << "seed " << seed << ": " << plan->timed_bound;
    EXPECT_NE(plan->variant.find("channel program"), std::string::npos) << plan->variant;
  }
  EXPECT_GT(valid, 25);
}

}  // namespace
}  // namespace tensortier::migrator
