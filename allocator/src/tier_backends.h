// Factories of the concrete tier backends, one per file; open_tier() (tier.cc) dispatches here.
#pragma once

#include <memory>

#include "tensortier/allocator/tier.h"

namespace tensortier::detail {

Result<std::unique_ptr<Tier>> open_memkind_tier(const TierConfig& config);   // tier_memkind.cc
Result<std::unique_ptr<Tier>> open_dram_tier(const TierConfig& config);      // tier_mmap.cc
Result<std::unique_ptr<Tier>> open_numa_tier(const TierConfig& config);      // tier_mmap.cc
Result<std::unique_ptr<Tier>> open_emulated_tier(const TierConfig& config);  // tier_mmap.cc

// Physical memory of the machine in bytes (the default budget of DRAM-backed tiers).
std::uint64_t physical_memory_bytes();

}  // namespace tensortier::detail
