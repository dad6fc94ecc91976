// What runtime/src/*.cc share (internal to the runtime library): the fast budget's parsing and
// the checks of a migration's options, made in runtime_options.cc; the opening of tiers,
// runtime_tiers.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tensortier/allocator/copy_engine.h"
#include "tensortier/allocator/tier.h"
#include "tensortier/allocator/tier_provider.h"
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

// A spec's tiers, open, and the provider that opened its GPU tiers (null: none has one).
struct OpenedTiers {
  std::vector<std::unique_ptr<Tier>> tiers;
  std::shared_ptr<TierProvider> provider;
};
// Opens each tier, logging one line for it: host kinds through open_tier(), cuda and pinned
// through `provider` (null: the GPU backend's, where this build has one). The first error stops it.
Result<OpenedTiers> open_runtime_tiers(const std::vector<TierConfig>& configs,
                                       std::shared_ptr<TierProvider> provider);
// The tier of device memory among them (RangeKind::kDevice); null where none is.
const Tier* device_tier(const OpenedTiers& opened);
// The engine the provider copies between these tiers with (opened.provider must be set).
Result<std::unique_ptr<CopyEngine>> provider_copy_engine(const OpenedTiers& opened);
// `profile` as these tiers allow: where one is device memory, accesses come from the layers'
// declarations (said in one line); asking page protection for it by TENSORTIER_PROFILE_ACCESSES
// is an error naming the tier.
Result<profiler::ProfileOptions> profile_for_tiers(profiler::ProfileOptions profile,
                                                   const OpenedTiers& opened);

}  // namespace tensortier
