// The oracle and its exact model (residency_model.h) against brute force and the other plans.
#include "plan_test_util.h"

namespace tensortier::migrator {
namespace {

// The exact model's solver against brute force: over every residency of small random steps that
// keeps the budget, the least residency_cost_ns is what the solver reports as optimal, its
// residency costs that, and no policy's plan is predicted below it (the bound holds for simulate()).
TEST(ExactModel, TheSolversOptimumIsTheLeastCostOfEveryResidencyAndBoundsEveryPlan) {
  std::mt19937 rng(7);
  for (int instance = 0; instance < 120; ++instance) {
    const PlanInputs in = random_inputs(rng, instance % 2 == 1, instance % 4 >= 2);
    std::vector<std::pair<std::size_t, std::uint32_t>> cells;  // (object, boundary) of each life
    for (std::size_t i = 0; i < in.objects.size(); ++i) {
      const PlanObject& o = in.objects[i];
      for (std::uint32_t b = o.born; b < std::min(o.freed, in.layers); ++b) cells.emplace_back(i, b);
    }
    ASSERT_LE(cells.size(), 20U);
    double least = std::numeric_limits<double>::infinity();
    Residency r(in.objects.size(), std::vector<char>(in.layers, 0));
    for (std::uint64_t mask = 0; mask < (1ULL << cells.size()); ++mask) {
      std::vector<std::uint64_t> held(in.layers, 0);
      for (std::size_t c = 0; c < cells.size(); ++c) {
        const auto [i, b] = cells[c];
        r[i][b] = static_cast<char>((mask >> c) & 1U);
        if (r[i][b]) held[b] += in.objects[i].bytes;
      }
      if (*std::max_element(held.begin(), held.end()) > in.fast_budget_bytes) continue;
      least = std::min(least, residency_cost_ns(in, r));
    }
    const ResidencySolution sol = solve_residency(in, 10);
    ASSERT_TRUE(sol.solved && sol.optimal) << instance << ": " << sol.status;
    const double tolerance = 1e-5 * least + 10;  // the solver works in ms and MiB
    EXPECT_NEAR(sol.bound_ns, least, tolerance) << instance;
    EXPECT_NEAR(sol.cost_ns, least, tolerance) << instance;
    // The mover's CPU share of the cost: its copies' CPU, which a mover on a core of its own
    // (mover_steals_compute 0) would not add.
    EXPECT_NEAR(sol.parts.mover_cpu_ns, (sol.parts.in_bytes + sol.parts.out_bytes) * in.mover_cpu_ns_per_byte,
                1)
        << instance;
    PlanInputs own_core = in;
    own_core.mover_steals_compute = 0;
    EXPECT_NEAR(residency_cost(own_core, sol.fast).extra_ns, sol.cost_ns - sol.parts.mover_cpu_ns, 1)
        << instance;
    // A page-granular plan may keep part of an object fast, which no residency of whole objects
    // does: its bound is the model's over the segments (where moving a segment out is never clean).
    const ResidencySolution by_segment = solve_residency(in_segments(in), 10);
    ASSERT_TRUE(by_segment.solved) << instance << ": " << by_segment.status;
    for (const std::string& policy : policy_names()) {
      auto plan = make_plan(policy, in);
      ASSERT_TRUE(plan);
      if (!simulate(*plan, in).empty()) continue;
      const double bound = plan->segment_bytes != 0 ? by_segment.bound_ns : sol.bound_ns;
      EXPECT_GE(plan->predicted_extra_ns, bound - tolerance) << instance << " " << policy;
    }
  }
}

// The oracle weighs every candidate as make_plan plays it (dead moves free): no plan of a policy it
// runs is predicted cheaper than its choice, at mover costs from free to dear. predicted_extra_ns is
// what the simulator computes from each instance's given rates and layer times, not a clock. Before
// 2026-12-07 it weighed every move as a copy and some instances had a cheaper plan by the played account.
TEST(ExactModel, TheOracleIsNeverPredictedWorseThanAPolicyItRuns) {
  std::mt19937 rng(11);
  int dead_moves = 0;
  for (int instance = 0; instance < 80; ++instance) {
    PlanInputs in = random_inputs(rng, instance % 2 == 1, true);
    in.mover_cpu_ns_per_byte = 0.5 * (instance % 4);  // copies from free to dear
    auto oracle = make_plan("oracle", in);
    ASSERT_TRUE(oracle);
    if (!simulate(*oracle, in).empty()) continue;
    for (const char* policy : {"first-touch", "reactive", "autoswap", "sentinel", "channel"}) {
      auto other = make_plan(policy, in);
      ASSERT_TRUE(other);
      if (!simulate(*other, in).empty()) continue;
      dead_moves += static_cast<int>(
          std::ranges::count_if(other->moves, [](const PlannedMove& m) { return m.discard; }));
      EXPECT_LE(oracle->predicted_extra_ns, other->predicted_extra_ns + 1) << instance << " " << policy;
    }
  }
  EXPECT_GT(dead_moves, 0) << "no plan moves dead bytes: the two accounts are never told apart";
}

// With ready memory, a heuristic whose layout overshoots the room is planned again under less
// (make_plan); the oracle weighs that plan too, so it is never predicted worse than reactive's,
// autoswap's or sentinel's as they run.
TEST(ExactModel, WithReadyMemoryTheOracleWeighsTheHeuristicsAsPlannedAgainUnderLess) {
  std::mt19937 rng(23);
  int replanned = 0;
  for (int instance = 0; instance < 130; ++instance) {  // without it, instance 117 fails
    PlanInputs in = random_inputs(rng, instance % 2 == 1, instance % 3 == 0);
    in.ready_memory = true;
    in.oracle_time_limit_s = 2;
    if (std::ranges::any_of(in.objects, [](const PlanObject& o) { return o.stays(); })) continue;
    auto oracle = make_plan("oracle", in);
    ASSERT_TRUE(oracle);
    if (!oracle->places.problem.empty() || !simulate(*oracle, in).empty()) continue;
    for (const char* policy : {"reactive", "autoswap", "sentinel"}) {
      auto other = make_plan(policy, in);
      ASSERT_TRUE(other);
      if (!other->places.problem.empty() || !simulate(*other, in).empty()) continue;
      if (other->places.replans > 0) ++replanned;
      EXPECT_LE(oracle->predicted_extra_ns, other->predicted_extra_ns + 1) << instance << " " << policy;
    }
  }
  EXPECT_GT(replanned, 0) << "no heuristic's layout overshot the room";
}

// The oracle carries the bound and takes the exact model's plan where it is predicted cheapest;
// a solver given no time still leaves a valid plan.
TEST(ExactModel, TheOracleReportsTheBoundAndStaysValidWithoutTheSolver) {
  PlanInputs in = rotating_inputs();
  in.move_in_gbps = 1.6;
  in.move_out_gbps = 0.6;
  auto oracle = make_plan("oracle", in);
  ASSERT_TRUE(oracle);
  EXPECT_EQ(simulate(*oracle, in), "");
  EXPECT_GT(oracle->bound_extra_ns, 0.0);
  EXPECT_LE(oracle->bound_extra_ns, oracle->predicted_extra_ns + 10);
  EXPECT_NE(oracle->solver.find("optimal"), std::string::npos) << oracle->solver;
  for (const std::string& policy : policy_names()) {
    auto plan = make_plan(policy, in);
    ASSERT_TRUE(plan);
    if (!simulate(*plan, in).empty()) continue;
    EXPECT_GE(plan->predicted_extra_ns + 10, oracle->bound_extra_ns) << policy;
  }
}

}  // namespace
}  // namespace tensortier::migrator
