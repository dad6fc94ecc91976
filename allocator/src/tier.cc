// Tier base class: budget accounting shared by every backend, and open_tier().
#include "tensortier/allocator/tier.h"

#include <unistd.h>

#include <algorithm>
#include <bit>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "tier_backends.h"

namespace tensortier {

Tier::Tier(std::string name, TierKind kind, std::uint64_t budget_bytes)
    : name_(std::move(name)), kind_(kind), budget_bytes_(budget_bytes) {}

std::uint64_t Tier::free_bytes() const {
  const std::uint64_t used = used_bytes();
  const std::uint64_t budget = budget_bytes();
  return used >= budget ? 0 : budget - used;
}

Status Tier::reserve(std::size_t bytes) {
  // Reserve budget first, so concurrent allocations never overshoot it together.
  std::uint64_t used = used_bytes_.load(std::memory_order_relaxed);
  const std::uint64_t budget = budget_bytes();
  do {
    if (used + bytes > budget) {
      return out_of_memory(fmt::format("tier '{}' has {} of its {} budget free; {} asked", name_,
                                       format_bytes(budget - std::min(used, budget)), format_bytes(budget),
                                       format_bytes(bytes)));
    }
  } while (!used_bytes_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
  const std::uint64_t now = used + bytes;
  std::uint64_t peak = peak_bytes_.load(std::memory_order_relaxed);
  while (now > peak && !peak_bytes_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
  return Status::ok();
}

void Tier::unreserve(std::size_t bytes) {
  used_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
}

Result<void*> Tier::map_reserved(std::size_t bytes, std::size_t alignment) {
  if (bytes >= kHugePageBytes && alignment < kHugePageBytes) alignment = kHugePageBytes;
  Result<void*> mapped = map(bytes, alignment);
  if (!mapped)
    return Status(mapped.status().code(), fmt::format("tier '{}': {}", name_, mapped.status().message()));
  return mapped;
}

Result<void*> Tier::allocate(std::size_t bytes, std::size_t alignment) {
  if (bytes == 0 || bytes % kPageBytes != 0) {
    return invalid_argument(fmt::format("tier '{}': {} bytes is not a positive multiple of the {}-byte page",
                                        name_, bytes, kPageBytes));
  }
  if (!std::has_single_bit(alignment) || alignment < kPageBytes) {
    return invalid_argument(
        fmt::format("tier '{}': alignment {} is not a power of two >= {}", name_, alignment, kPageBytes));
  }
  TENSORTIER_RETURN_IF_ERROR(reserve(bytes));
  Result<void*> mapped = map_reserved(bytes, alignment);
  if (!mapped) unreserve(bytes);
  return mapped;
}

void Tier::deallocate(void* address, std::size_t bytes) {
  if (address == nullptr) return;
  unmap(address, bytes);
  unreserve(bytes);
}

std::uint64_t BandwidthTimeline::reserve(std::uint64_t earliest_start_ns, std::uint64_t duration_ns) {
  std::uint64_t busy = busy_until_ns_.load(std::memory_order_relaxed);
  std::uint64_t end = 0;
  do {
    end = std::max(busy, earliest_start_ns) + duration_ns;
  } while (!busy_until_ns_.compare_exchange_weak(busy, end, std::memory_order_relaxed));
  return end;
}

std::string Tier::describe() const {
  return fmt::format("{}: {} ({}), budget {}", name_, to_string(kind_), backend(),
                     format_bytes(budget_bytes()));
}

std::string format_bytes(std::uint64_t bytes) {
  constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  auto value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  if (unit == 0) return fmt::format("{} B", bytes);
  return fmt::format("{:.{}f} {}", value, value < 10 ? 2 : (value < 100 ? 1 : 0), kUnits[unit]);
}

Result<std::unique_ptr<Tier>> open_tier(const TierConfig& config) {
  switch (config.kind) {
    case TierKind::kDram:
      return detail::open_dram_tier(config);
    case TierKind::kDaxKmem:
    case TierKind::kPmem:
      return detail::open_memkind_tier(config);
    case TierKind::kNuma:
      return detail::open_numa_tier(config);
    case TierKind::kEmulated:
      return detail::open_emulated_tier(config);
    case TierKind::kCuda:
    case TierKind::kPinned:
      return unavailable(fmt::format(
          "tier '{}': a {} tier holds memory for a CUDA device: the GPU backend (gpu/) opens it, for a "
          "runtime through its tier provider (RuntimeOptions::tier_provider), not open_tier; give host tiers "
          "here (dram, numa, daxkmem, pmem, emulated)",
          config.name, to_string(config.kind)));
  }
  return invalid_argument("unknown tier kind");
}

namespace detail {
std::uint64_t budget_for(const TierConfig& config, std::uint64_t capacity_bytes,
                         std::string_view capacity_what) {
  if (config.budget_bytes == 0) return capacity_bytes;
  if (capacity_bytes != 0 && config.budget_bytes > capacity_bytes) {
    spdlog::warn(
        "tier '{}': its budget of {} is more than {} ({}); the OS may refuse memory before the "
        "budget is reached",
        config.name, format_bytes(config.budget_bytes), capacity_what, format_bytes(capacity_bytes));
  }
  return config.budget_bytes;
}

std::uint64_t physical_memory_bytes() {
  return static_cast<std::uint64_t>(sysconf(_SC_PHYS_PAGES)) *
         static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
}
}  // namespace detail

}  // namespace tensortier
