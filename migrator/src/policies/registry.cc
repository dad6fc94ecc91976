// The policies by name: the one list of them (policy_names(), --policy, TENSORTIER_POLICY) and
// make_plan, which makes a policy's plan, leaves the objects that must stay in place
// (leave_in_place.cc) and plays it over the step (simulate) for its predictions and verdict.
#include <algorithm>
#include <iterator>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "policies/policy_kit.h"
#include "tensortier/migrator/places.h"
#include "tensortier/migrator/timed_bound.h"

namespace tensortier::migrator {
namespace {

struct PolicyEntry {
  const char* name;
  Result<Plan> (*make)(const PlanInputs& inputs);
  // A reference (fast-only, slow-only): run on the tiers as they are, with the fast tier's own
  // budget, and never planned again under less.
  bool reference = false;
};

template <Plan (*Policy)(const PlanInputs&)>
Result<Plan> always(const PlanInputs& inputs) {
  return Policy(inputs);
}

// Every policy, in the order help texts and comparisons list them (docs/POLICIES.md).
constexpr PolicyEntry kPolicies[] = {
    {"fast-only", always<policies::fast_only>, true},
    {"slow-only", always<policies::slow_only>, true},
    {"first-touch", always<policies::first_touch>},
    {"interleave", always<policies::interleave>},
    {"reactive", always<policies::reactive>},
    {"reactive-2m", always<policies::reactive_2m>},
    {"autoswap", always<policies::autoswap>},
    {"sentinel", policies::sentinel},
    {"oracle", always<policies::oracle>},
    {"smartpool", always<policies::smartpool>},
    {"search", always<policies::search>},
    {"channel", always<policies::channel>},
};

}  // namespace

const std::vector<std::string>& policy_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const PolicyEntry& entry : kPolicies) out.emplace_back(entry.name);
    return out;
  }();
  return names;
}

bool is_reference_policy(std::string_view policy) {
  return std::ranges::any_of(kPolicies,
                             [&](const PolicyEntry& e) { return e.reference && policy == e.name; });
}

std::string known_policies() {
  return fmt::format("{}", fmt::join(policy_names(), ", "));
}

Result<Plan> make_plan(std::string_view policy, const PlanInputs& in) {
  const PolicyEntry* entry = nullptr;
  for (const PolicyEntry& e : kPolicies) {
    if (policy == e.name) entry = &e;
  }
  if (entry == nullptr)
    return invalid_argument(fmt::format("unknown policy '{}' (known: {})", policy, known_policies()));
  // Persistent objects that stay are no policy's: it plans the rest (`inputs`, its budget lowered
  // where the layout asks), and the plan is played over the whole step (`played`).
  const StayPut stay_put(in);
  Result<PlanInputs> view = stay_put.policy_view(in);
  if (!view) return view.status();
  PlanInputs inputs = std::move(view).value();
  PlanInputs played = in;
  // With ready memory, a layout over the budget is the policy's to fix: it plans again under a
  // lower budget (the layout's slack over max-live is a few percent).
  const TimedBound bound = timed_bound(in);
  for (std::uint32_t attempt = 0;; ++attempt) {
    Result<Plan> made = entry->make(inputs);
    if (!made) return made.status();
    Plan plan = std::move(made).value();
    plan.fast = in.fast;
    plan.slow = in.slow;
    plan.fast_budget_bytes = inputs.fast_budget_bytes + stay_put.fast_bytes();
    stay_put.put_back(plan);
    played.fast_budget_bytes = plan.fast_budget_bytes;
    (void)leave_in_place(plan, played);
    plan.timed_bound_ns = bound.added_ns;
    plan.timed_bound = bound.describe();
    // Predictions and verdict (fast-only may pass a budget it was never meant to keep), played in
    // the plan's places where it has them: a layout reads none of them.
    if (!in.ready_memory) {
      (void)simulate(plan, played);
      return plan;
    }
    played.fast_budget_bytes = in.fast_budget_bytes;  // the layout must fit the budget asked for
    const bool fits = lay_out_places_timed(plan, played).empty();
    (void)simulate(plan, played);
    // Neither the reference nor a plan that moves nothing (must_fit) needs less under a lower budget.
    if (fits || attempt == policies::kMostReplans || entry->reference || plan.must_fit) {
      plan.places.replans = attempt;
      return plan;
    }
    const std::uint64_t lowered = policies::lowered_budget(plan, in, plan.fast_budget_bytes, attempt);
    if (lowered <= in.small_reserve_bytes + stay_put.fast_bytes()) return plan;
    inputs.fast_budget_bytes = lowered - stay_put.fast_bytes();
  }
}

}  // namespace tensortier::migrator
