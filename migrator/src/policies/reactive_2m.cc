// reactive-2m: reactive at 2 MiB page granularity (Linux tiering moves pages, not objects): the
// same policy played over each object's 2 MiB segments (in_segments), so part of an object can
// be fast; an object is born whole on one tier, its segments promoted and demoted apart.
#include "policies/policy_kit.h"

namespace tensortier::migrator::policies {

Plan reactive_2m(const PlanInputs& in) {
  Plan plan = reactive(in_segments(in));
  plan.policy = "reactive-2m";
  plan.segment_bytes = kSegmentBytes;
  return plan;
}

}  // namespace tensortier::migrator::policies
