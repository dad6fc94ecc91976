// Fixed placements, no moves: the references fast-only and slow-only (every object on one tier),
// first-touch (the OS default: each object fast if it fits when it is born, persistent objects
// first in key order, else slow) and interleave (objects spread over the tiers in the ratio of the
// fast budget to the step's peak, as numactl --interleave or memkind's memtier would).
#include "policies/policy_kit.h"

#include <algorithm>
#include <map>
#include <string>

namespace tensortier::migrator::policies {

namespace {

Plan everything_on(const PlanInputs& in, std::string policy, TierIndex tier) {
  Plan plan;
  plan.policy = std::move(policy);
  for (const PlanObject& o : in.objects) place(plan, o, tier);
  return plan;
}

// first-touch and interleave: births in allocation order; `decide(bytes, fits)` says whether an
// object goes fast, told whether the budget has room for it at that moment (deaths at a boundary
// come before its births); no moves.
template <typename Decide>
Plan by_birth(const PlanInputs& in, std::string policy, Decide decide) {
  Plan plan;
  plan.policy = std::move(policy);
  const std::uint64_t room = plannable_room(in);
  std::multimap<std::uint32_t, std::uint64_t> deaths;  // boundary -> fast bytes freed there
  std::uint64_t fast = 0;
  for (std::size_t i : birth_order(in)) {
    const PlanObject& o = in.objects[i];
    const std::uint32_t t = o.persistent ? 0 : o.born;
    while (!deaths.empty() && deaths.begin()->first <= t) {
      fast -= deaths.begin()->second;
      deaths.erase(deaths.begin());
    }
    const bool to_fast = decide(o.bytes, fast + o.bytes <= room);
    place(plan, o, to_fast ? in.fast : in.slow);
    if (to_fast) {
      fast += o.bytes;
      if (!o.persistent) deaths.emplace(o.freed, o.bytes);
    }
  }
  return plan;
}

}  // namespace

Plan first_touch(const PlanInputs& in) {
  return by_birth(in, "first-touch", [](std::uint64_t, bool fits) { return fits; });
}

Plan interleave(const PlanInputs& in) {
  const std::uint64_t room = plannable_room(in);
  const double ratio = in.peak_bytes == 0
                           ? 1.0
                           : std::min(1.0, static_cast<double>(room) / static_cast<double>(in.peak_bytes));
  double fast_assigned = 0, assigned = 0;
  return by_birth(in, "interleave", [&](std::uint64_t bytes, bool fits) {
    const double b = static_cast<double>(bytes);
    assigned += b;
    const bool fast = fits && fast_assigned + b <= ratio * assigned;
    if (fast) fast_assigned += b;
    return fast;
  });
}

Plan fast_only(const PlanInputs& in) {
  return everything_on(in, "fast-only", in.fast);
}

Plan slow_only(const PlanInputs& in) {
  return everything_on(in, "slow-only", in.slow);
}

}  // namespace tensortier::migrator::policies
