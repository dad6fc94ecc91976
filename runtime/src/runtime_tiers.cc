// Opening a runtime's tiers: host kinds through open_tier(), GPU kinds (cuda, pinned) through the
// tier provider (RuntimeOptions::tier_provider; where the GPU backend is built, the CUDA one by
// default), and what GPU tiers change: the provider's copy engine moves objects, and steps are
// profiled from declared accesses where a tier is device memory.
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "runtime_internal.h"
#include "tensortier/allocator/tier_provider.h"
#include "tensortier/runtime.h"

#include "tensortier/load_module.h"

namespace tensortier {
namespace {

// The GPU backend's provider (gpu::CudaTierProvider), from its module, loaded only now that a spec
// has a GPU tier (load_module.h); null where this build has none, with why in `why`.
std::shared_ptr<TierProvider> default_provider(std::string& why) {
#ifdef TENSORTIER_GPU_MODULE
  Result<void*> make = load_module_symbol(TENSORTIER_GPU_MODULE, TENSORTIER_GPU_MODULE_BUILD,
                                          reinterpret_cast<const void*>(&open_runtime_tiers),
                                          "tensortier_gpu_make_tier_provider");
  if (!make) {
    why = make.status().message();
    return nullptr;
  }
  using Make = TierProvider* (*)();
  return std::shared_ptr<TierProvider>(reinterpret_cast<Make>(make.value())());
#else
  why =
      "this build of tensortier has no GPU backend (it was built without the CUDA toolkit and cuDNN: "
      "TENSORTIER_GPU)";
  return nullptr;
#endif
}

}  // namespace

Result<OpenedTiers> open_runtime_tiers(const std::vector<TierConfig>& configs,
                                       std::shared_ptr<TierProvider> provider) {
  OpenedTiers opened;
  for (const TierConfig& config : configs) {
    const bool gpu = is_gpu_kind(config.kind);
    std::string why = "the tier provider given does not open it";
    if (gpu && provider == nullptr) provider = default_provider(why);
    if (gpu && (provider == nullptr || !provider->opens(config.kind))) {
      return unavailable(
          fmt::format("tier '{}' is a {} tier, and {}; give host tiers (dram, numa, daxkmem, pmem, emulated)",
                      config.name, to_string(config.kind), why));
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

// Host code's bytes in and out of an object (runtime.h): a copy by the tier provider where the
// object is in device memory (in stream order after the layers' work: no host wait first), else
// memcpy/memset once the layers' queued work is done.
Status Runtime::host_bytes(ObjectId id, std::size_t offset, std::size_t bytes, const char* what,
                           const std::function<Status(std::byte* at, bool device)>& copy) {
  void* address = nullptr;
  TENSORTIER_RETURN_IF_ERROR(pin_unwaited(std::span<const ObjectId>(&id, 1), std::span<void*>(&address, 1)));
  Status status = [&]() -> Status {
    Result<ObjectInfo> info = allocator_.info_by_id(id);
    if (!info) return info.status();
    if (offset > info->bytes || bytes > info->bytes - offset) {
      return invalid_argument(fmt::format("{} of object {} ('{}'): bytes {}..{} pass its end ({} bytes)",
                                          what, id, info->name, offset, offset + bytes, info->bytes));
    }
    const bool device = allocator_.tier(info->tier).range_kind() == RangeKind::kDevice;
    if (!device && tier_provider_ != nullptr) TENSORTIER_RETURN_IF_ERROR(tier_provider_->host_wait());
    return copy(static_cast<std::byte*>(address) + offset, device);
  }();
  unpin_objects(std::span<const ObjectId>(&id, 1));
  return status;
}

Status Runtime::write_object(ObjectId id, std::size_t offset, const void* from, std::size_t bytes) {
  return host_bytes(id, offset, bytes, "write", [&](std::byte* at, bool device) {
    if (device) return tier_provider_->host_copy(at, from, bytes, /*to_device=*/true);
    std::memcpy(at, from, bytes);
    return Status::ok();
  });
}

Status Runtime::read_object(ObjectId id, std::size_t offset, void* to, std::size_t bytes) {
  return host_bytes(id, offset, bytes, "read", [&](std::byte* at, bool device) {
    if (device) return tier_provider_->host_copy(to, at, bytes, /*to_device=*/false);
    std::memcpy(to, at, bytes);
    return Status::ok();
  });
}

Status Runtime::zero_object(ObjectId id) {
  Result<ObjectInfo> info = allocator_.info_by_id(id);
  if (!info) return info.status();
  return host_bytes(id, 0, info->bytes, "zero", [&](std::byte* at, bool device) {
    if (device) return tier_provider_->host_zero(at, info->bytes);
    std::memset(at, 0, info->bytes);
    return Status::ok();
  });
}

}  // namespace tensortier
