// SmartPool (Zhang et al., "Efficient Memory Management for GPU-based Deep Learning Systems",
// arXiv 1903.06631): every object of the step on the fast tier at offsets planned from the
// step's lifetimes, in one arena, and no moves. The layout is ready memory's (places.h: the
// offset planner over the profiled lifetimes, persistent objects at fixed places), so the tier
// holds about the step's max-live bytes, not what a general allocator's fragmentation leaves.
// It moves nothing: a budget that cannot hold its arena, or a runtime without ready memory, means
// it does not run (Plan::must_fit). On a GPU the arena is to be device memory (issue 37).
#include "policies/policy_kit.h"

namespace tensortier::migrator::policies {

Plan smartpool(const PlanInputs& in) {
  Plan plan;
  plan.policy = "smartpool";
  plan.must_fit = true;
  for (const PlanObject& o : in.objects) place(plan, o, in.fast);
  return plan;
}

}  // namespace tensortier::migrator::policies
