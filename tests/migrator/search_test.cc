// The search policy (policies/search.cc): valid plans with their places, the same plan for the
// same inputs, and never predicted worse than the exact model's residency it starts from.
#include "plan_test_util.h"
#include "policies/policy_kit.h"
#include "tensortier/migrator/places.h"

namespace tensortier::migrator {
namespace {

bool same_plan(const Plan& a, const Plan& b) {
  if (a.start != b.start || a.birth != b.birth || a.moves.size() != b.moves.size()) return false;
  for (std::size_t i = 0; i < a.moves.size(); ++i) {
    const PlannedMove& x = a.moves[i];
    const PlannedMove& y = b.moves[i];
    if (x.key != y.key || x.to != y.to || x.after_layer != y.after_layer || x.place != y.place) return false;
  }
  return a.places.first == b.places.first && a.predicted_extra_ns == b.predicted_extra_ns;
}

TEST(Search, PlansAreValidWithTheirPlacesTheSameEachTimeAndNoWorseThanTheExactResidency) {
  std::mt19937 rng(31);
  int valid = 0, improved = 0;
  for (int seed = 0; seed < 40; ++seed) {
    PlanInputs in = random_inputs(rng, seed % 2 == 0, seed % 3 == 0);
    in.ready_memory = seed % 4 != 0;
    in.oracle_time_limit_s = 2;
    in.search_evaluations = 60;
    auto plan = make_plan("search", in);
    auto again = make_plan("search", in);
    ASSERT_TRUE(plan && again);
    EXPECT_TRUE(same_plan(*plan, *again)) << "seed " << seed;
    if (!plan->problem.empty() || !plan->places.problem.empty()) continue;
    ++valid;
    EXPECT_EQ(simulate(*plan, in), "") << "seed " << seed;
    EXPECT_NE(plan->variant.find("evaluations"), std::string::npos) << plan->variant;
    // The exact model's residency as the oracle plays it (moves in not led): a seed of the search,
    // where the search planned the inputs as given (no objects staying put, no replan).
    const bool as_given = std::ranges::none_of(in.objects, [](const PlanObject& o) { return o.stays(); });
    if (!as_given || plan->places.replans != 0) continue;
    const ResidencySolution exact = solve_residency(in, 2);
    if (!exact.solved) continue;
    Plan seed_plan = policies::from_residency(in, "seed", exact.fast, true);
    if (in.ready_memory && !lay_out_places(seed_plan, in).empty()) continue;
    if (!simulate(seed_plan, in).empty()) continue;
    EXPECT_LE(plan->predicted_extra_ns, seed_plan.predicted_extra_ns + 1) << "seed " << seed;
    if (plan->predicted_extra_ns + 1e3 < seed_plan.predicted_extra_ns) ++improved;
  }
  EXPECT_GT(valid, 30);
  EXPECT_GT(improved, 0) << "the search never improved on its seed";
}

}  // namespace
}  // namespace tensortier::migrator
