// What runtime/src/*.cc share (internal to the runtime library): the fast budget's parsing and
// the checks of a migration's options, made in runtime_options.cc.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tensortier/allocator/tier.h"
#include "tensortier/profiler/step_profiler.h"
#include "tensortier/status.h"

namespace tensortier {

// The fast budget of a migration: a share of the profiled peak ("20%") or a size; empty: none.
struct FastBudget {
  double share = 0;         // of the profiled peak, when > 0
  std::uint64_t bytes = 0;  // else this, when > 0
};

// Errors name `what` and the text.
Result<FastBudget> parse_fast_budget(std::string_view text, std::string_view what);

// What a policy needs that the tiers and the profile options can say before any step (see the .cc).
Status check_migration(const std::string& policy, const std::string& fast_budget, const Tier& fast,
                       const profiler::ProfileOptions& profile);

}  // namespace tensortier
