// The timed bound (timed_bound.cc): exact on a step worked by hand, zero where everything fits,
// and never above what the simulator predicts for any policy's valid plan.
#include "tensortier/migrator/timed_bound.h"
#include "plan_test_util.h"
#include "tensortier/migrator/residency_model.h"

namespace tensortier::migrator {
namespace {

// Three 1 ms layers, moves at 1 ns a byte, slow accesses charged 0.5 ns a byte. A (10 MiB) is
// written by layer 0 and read by layer 2; B (10 MiB) is born for layer 1 and read there. With
// 10 MiB of room, 10 MiB are slow at boundary 1. The window argument: layers 0-1 (or 1-2) must
// carry them out (or in) by moves, x bytes in 2 ms of layers, or by slow accesses, y bytes
// charged: added >= max(x ns - 2 ms, 0.5 y ns) with x + y = 10 MiB; at alpha = 5/16 (the grid's
// best) 5/16 (10 MiB - 2 ms). The channel program finds the cheapest way: B on the slow tier, its
// 10 MiB of traffic holding the channel 10 MiB ns against 3 ms of layers.
TEST(TimedBound, AStepWorkedByHand) {
  PlanInputs in = plain_inputs(3, 10 * kMiB);
  in.move_in_gbps = in.move_out_gbps = 1;
  in.objects.push_back({1, 10 * kMiB, 0, 3, false, false, {0, 2}, {0}, {}, false});
  in.objects.push_back({2, 10 * kMiB, 1, 2, false, false, {1}, {}, {}, false});
  in.timed_program_s = 5;
  const TimedBound bound = timed_bound(in);
  EXPECT_NEAR(bound.window_ns, (10.0 * kMiB - 2e6) * 5 / 16, 1);
  EXPECT_EQ(bound.peak_boundary, 1u);
  EXPECT_EQ(bound.end_layer - bound.first_layer, 2u);
  EXPECT_NEAR(bound.program_ns, 10.0 * kMiB - 3e6, 10) << bound.program;
  EXPECT_EQ(bound.added_ns, bound.program_ns);
  EXPECT_NE(bound.describe().find("channel program"), std::string::npos) << bound.describe();
  // B overwritten by layer 1 (its bytes dead before it): kept slow, it forces no move.
  in.objects[1].writes = {1};
  in.objects[1].overwrites = {1};
  EXPECT_EQ(timed_bound(in).window_ns, 0) << "B slow at boundary 1 forces nothing";
  in.fast_budget_bytes = 20 * kMiB;
  in.objects[1].overwrites.clear();
  EXPECT_EQ(timed_bound(in).added_ns, 0) << "everything fits";
}

// Where time matters and the exact model sees none: four 1 ms layers, moves at 10 GB/s (10 MiB
// in 1.05 ms). A (10 MiB) is written by layer 0 and read by layer 3; B (10 MiB) lives through
// layers 1 and 2; 10 MiB of room. A must be off the fast tier at boundaries 1 and 2: its copy out
// can only run after layer 0 is over and before layer 1 starts (all of it a wait), its copy back
// within layer 2 (1 ms of it). Any other way costs slow accesses at 0.5 ns a byte, far more. The
// channel's 2.1 ms of copies fit in the step's 4 ms, so the timeless model adds nothing.
TEST(TimedBound, TheChannelProgramCountsWhenACopyCanRun) {
  PlanInputs in = plain_inputs(4, 10 * kMiB);
  in.objects.push_back({1, 10 * kMiB, 0, 4, false, false, {0, 3}, {0}, {}, false});
  in.objects.push_back({2, 10 * kMiB, 1, 3, false, false, {1, 2}, {1}, {}, false});
  in.timed_program_s = 5;
  const double copy_ns = 10.0 * kMiB / 10;
  const TimedBound bound = timed_bound(in);
  EXPECT_NEAR(bound.program_ns, copy_ns + (copy_ns - 1e6), 10) << bound.program;
  const ResidencySolution exact = solve_residency(in, 5);
  ASSERT_TRUE(exact.optimal) << exact.status;
  EXPECT_NEAR(exact.bound_ns, 0, 1) << "the timeless model";
  for (const char* policy : {"sentinel", "oracle", "autoswap", "reactive"}) {
    auto plan = make_plan(policy, in);
    ASSERT_TRUE(plan) << policy;
    EXPECT_GE(plan->predicted_extra_ns + 1, bound.program_ns) << policy;
  }
  in.timed_program_s = 0;
  EXPECT_EQ(timed_bound(in).program_ns, 0) << "not asked for";
}

// Every policy's valid plan is predicted to add at least the bound (the simulator plays the same
// channel): a bound above a prediction would be wrong.
TEST(TimedBound, NoValidPlanIsPredictedBelowIt) {
  std::mt19937 rng(11);
  int binding = 0, program_binds = 0;
  for (int seed = 0; seed < 200; ++seed) {
    PlanInputs in = random_inputs(rng, seed % 2 == 0, seed % 3 == 0);
    in.oracle_time_limit_s = 1;
    in.timed_program_s = 5;
    for (const char* policy :
         {"slow-only", "first-touch", "reactive", "autoswap", "sentinel", "oracle", "channel"}) {
      if (std::string(policy) == "oracle" && seed % 10 != 0) continue;  // the solver is slow
      auto plan = make_plan(policy, in);
      ASSERT_TRUE(plan);
      if (!plan->problem.empty()) continue;
      EXPECT_GE(plan->predicted_extra_ns + 1, plan->timed_bound_ns)
          << policy << " seed " << seed << ": " << plan->timed_bound;
      if (plan->timed_bound_ns > 0) ++binding;
    }
    if (const TimedBound bound = timed_bound(in); bound.program_ns > bound.window_ns) ++program_binds;
  }
  EXPECT_GT(binding, 50) << "plans whose bound is above zero";
  EXPECT_GT(program_binds, 20) << "inputs where the channel program beats the window argument";
}

// Where the linear program splits an object at its use and no plan can: one 1 ms layer uses A and
// B (1.5 MiB each, one segment each) with 2 MiB of room. The linear program keeps 1 MiB of them
// slow (2/3 of each), charged 0.5 ns a byte; a plan keeps one of them, 1.5 MiB, slow. The
// tightened program finds that.
TEST(TimedBound, TheTightenedProgramKeepsAnObjectWholeAtItsUse) {
  PlanInputs in = plain_inputs(1, 2 * kMiB);
  in.objects.push_back({1, 3 * kMiB / 2, 0, 1, false, false, {0}, {0}, {}, false});
  in.objects.push_back({2, 3 * kMiB / 2, 0, 1, false, false, {0}, {0}, {}, false});
  in.timed_program_s = 5;
  in.tightened_program_s = 5;
  const TimedBound bound = timed_bound(in);
  EXPECT_NEAR(bound.program_ns, 0.5 * kMiB, 10) << bound.program;
  EXPECT_NEAR(bound.tightened_ns, 0.5 * 1.5 * kMiB, 10) << bound.tightened;
  EXPECT_EQ(bound.added_ns, bound.tightened_ns);
  EXPECT_NE(bound.describe().find("tightened"), std::string::npos) << bound.describe();
  // Objects of several segments may be split at a segment's edge (a page-granular plan does):
  // 4 MiB each (two segments) in 6 MiB of room, 2 MiB slow, no more than the linear program's.
  in.objects[0].bytes = in.objects[1].bytes = 4 * kMiB;
  in.fast_budget_bytes = 6 * kMiB;
  const TimedBound split = timed_bound(in);
  EXPECT_NEAR(split.tightened_ns, split.program_ns, 10) << split.tightened;
  EXPECT_NEAR(split.program_ns, 0.5 * 2 * kMiB, 10) << split.program;
}

// Never below the other two, never above what the simulator predicts for a valid plan.
TEST(TimedBound, TheTightenedProgramIsNoLooserAndStillBelowEveryPlan) {
  std::mt19937 rng(23);
  int tighter = 0, compared = 0;
  for (int seed = 0; seed < 120; ++seed) {
    PlanInputs in = random_inputs(rng, seed % 2 == 0, seed % 3 == 0);
    in.timed_program_s = 5;
    in.tightened_program_s = 5;
    const TimedBound bound = timed_bound(in);
    if (bound.program_ns <= 0) continue;
    ++compared;
    EXPECT_GE(bound.tightened_ns + 1e3, bound.program_ns) << "seed " << seed << ": " << bound.tightened;
    if (bound.tightened_ns > bound.program_ns * 1.01) ++tighter;
    for (const char* policy : {"slow-only", "first-touch", "reactive", "autoswap", "sentinel"}) {
      auto plan = make_plan(policy, in);
      ASSERT_TRUE(plan);
      if (!plan->problem.empty()) continue;
      EXPECT_GE(plan->predicted_extra_ns + 1, bound.tightened_ns) << policy << " seed " << seed;
    }
  }
  EXPECT_GT(compared, 30);
  EXPECT_GT(tighter, 5) << "inputs where integrality at uses raises the bound";
}

}  // namespace
}  // namespace tensortier::migrator
