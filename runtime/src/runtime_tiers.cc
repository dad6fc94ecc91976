// Opening a runtime's tiers: host kinds through open_tier(), GPU kinds (cuda, pinned) through the
// tier provider (RuntimeOptions::tier_provider; where the GPU backend is built, the CUDA one by
// default), and what GPU tiers change: the provider's copy engine moves objects, and steps are
// profiled from declared accesses where a tier is device memory.
#include <cstdlib>
#include <memory>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "runtime_internal.h"
#include "tensortier/allocator/tier_provider.h"

#ifdef TENSORTIER_WITH_GPU
#include "tensortier/gpu/gpu_tier.h"
#endif

namespace tensortier {
namespace {

std::shared_ptr<TierProvider> default_provider() {
#ifdef TENSORTIER_WITH_GPU
  return std::make_shared<gpu::CudaTierProvider>();
#else
  return nullptr;
#endif
}

}  // namespace

Result<OpenedTiers> open_runtime_tiers(const std::vector<TierConfig>& configs,
                                       std::shared_ptr<TierProvider> provider) {
  OpenedTiers opened;
  for (const TierConfig& config : configs) {
    const bool gpu = is_gpu_kind(config.kind);
    if (gpu && provider == nullptr) provider = default_provider();
    if (gpu && (provider == nullptr || !provider->opens(config.kind))) {
      return unavailable(fmt::format(
          "tier '{}' is a {} tier, and this build of tensortier has no GPU backend (it was built without "
          "the CUDA toolkit and cuDNN: TENSORTIER_GPU); give host tiers (dram, numa, daxkmem, pmem, "
          "emulated)",
          config.name, to_string(config.kind)));
    }
    if (gpu) opened.provider = provider;
    Result<std::unique_ptr<Tier>> tier = gpu ? provider->open(config) : open_tier(config);
    if (!tier) return tier.status();
    spdlog::info("tier {}", tier.value()->describe());
    opened.tiers.push_back(std::move(tier).value());
  }
  return opened;
}

const Tier* device_tier(const OpenedTiers& opened) {
  for (const auto& tier : opened.tiers) {
    if (tier->range_kind() == RangeKind::kDevice) return tier.get();
  }
  return nullptr;
}

Result<std::unique_ptr<CopyEngine>> provider_copy_engine(const OpenedTiers& opened) {
  std::vector<const Tier*> tiers;
  for (const auto& tier : opened.tiers) tiers.push_back(tier.get());
  return opened.provider->copy_engine(tiers);
}

Result<profiler::ProfileOptions> profile_for_tiers(profiler::ProfileOptions profile,
                                                   const OpenedTiers& opened) {
  const Tier* device = device_tier(opened);
  if (device == nullptr || profile.accesses == profiler::AccessSource::kDeclared) return profile;
  const char* env = std::getenv("TENSORTIER_PROFILE_ACCESSES");
  if (env != nullptr && *env != '\0') {
    return invalid_argument(fmt::format(
        "TENSORTIER_PROFILE_ACCESSES={}: tier '{}' is device memory, which page protection cannot see; "
        "profile from the layers' declared accesses (declared), or leave it unset",
        env, device->name()));
  }
  spdlog::info(
      "steps are profiled from the layers' declared accesses: tier '{}' is device memory, which page "
      "protection cannot see",
      device->name());
  profile.accesses = profiler::AccessSource::kDeclared;
  return profile;
}

}  // namespace tensortier
