// Factories of the concrete tier backends, one per file; open_tier() (tier.cc) dispatches here.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "tensortier/allocator/tier.h"

namespace tensortier::detail {

Result<std::unique_ptr<Tier>> open_memkind_tier(const TierConfig& config);   // tier_memkind.cc
Result<std::unique_ptr<Tier>> open_dram_tier(const TierConfig& config);      // tier_mmap.cc
Result<std::unique_ptr<Tier>> open_numa_tier(const TierConfig& config);      // tier_mmap.cc
Result<std::unique_ptr<Tier>> open_emulated_tier(const TierConfig& config);  // tier_mmap.cc

// Physical memory of the machine in bytes (the default budget of DRAM-backed tiers).
std::uint64_t physical_memory_bytes();

// The budget of a tier opened from `config`: its own, else `capacity_bytes` (what the memory
// behind it holds). A budget over that capacity is kept (memory may be added, or overcommitted),
// but said in one warning line naming `capacity_what` ("this machine's memory"): the OS may then
// refuse memory before the budget is reached, and such errors say it was the OS.
std::uint64_t budget_for(const TierConfig& config, std::uint64_t capacity_bytes,
                         std::string_view capacity_what);

}  // namespace tensortier::detail
