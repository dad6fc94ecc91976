// GpuTier and CudaTierProvider (see gpu_tier.h).
#include "tensortier/gpu/gpu_tier.h"

#include <algorithm>
#include <new>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "tensortier/gpu/copy_engine.h"
#include "tensortier/gpu/layer_clock.h"
#include "tensortier/gpu/link.h"

namespace tensortier::gpu {

Result<std::unique_ptr<GpuTier>> GpuTier::open(std::shared_ptr<Device> device, const TierConfig& config) {
  Result<std::unique_ptr<GpuArena>> arena = GpuArena::open(*device, config);
  if (!arena) return arena.status();
  return std::unique_ptr<GpuTier>(new GpuTier(config, std::move(device), std::move(arena).value()));
}

GpuTier::GpuTier(const TierConfig& config, std::shared_ptr<Device> device, std::unique_ptr<GpuArena> arena)
    : Tier(config.name, config.kind, arena->bytes()),
      device_(std::move(device)),
      arena_(std::move(arena)),
      heap_(arena_->bytes()) {}

GpuTier::~GpuTier() = default;

Result<void*> GpuTier::map(std::size_t bytes, std::size_t alignment) {
  std::lock_guard lock(mutex_);
  const std::optional<std::uint64_t> offset = heap_.take(bytes, std::min(alignment, kHugePageBytes),
                                                         reinterpret_cast<std::uintptr_t>(arena_->base()));
  if (!offset) {
    return out_of_memory(
        fmt::format("{} of {}'s arena asked, and its largest free range is {} ({} free in {} "
                    "pieces): give the tier more memory",
                    format_bytes(bytes), name(), format_bytes(heap_.largest_free_bytes()),
                    format_bytes(heap_.free_bytes()), heap_.free_blocks()));
  }
  return arena_->at(*offset, bytes);
}

void GpuTier::unmap(void* address, std::size_t bytes) {
  std::lock_guard lock(mutex_);
  const auto offset = static_cast<std::uint64_t>(static_cast<std::byte*>(address) - arena_->base());
  [[maybe_unused]] const bool given = heap_.give_back(offset, bytes);
}

std::size_t GpuTier::ranges() const {
  std::lock_guard lock(mutex_);
  return heap_.taken_ranges();
}

std::string GpuTier::backend() const {
  return fmt::format("{} memory, one arena at {} on {}",
                     kind() == TierKind::kCuda ? "device" : "page-locked host",
                     static_cast<const void*>(arena_->base()), device_->describe());
}

std::string CudaTierProvider::name() const {
  return fmt::format("cuda ({})", api_.name);
}

Result<std::unique_ptr<Tier>> CudaTierProvider::open(const TierConfig& config) {
  if (!opens(config.kind)) {
    return invalid_argument(
        fmt::format("tier '{}' is a {} tier: the cuda provider opens cuda and pinned tiers", config.name,
                    to_string(config.kind)));
  }
  const int index = config.kind == TierKind::kCuda ? config.cuda_device : (device_ ? device_->index() : 0);
  if (device_ && device_->index() != index) {
    return invalid_argument(
        fmt::format("tier '{}' is on cuda:{}, and this runtime's tiers are on cuda:{}: "
                    "one device per runtime",
                    config.name, index, device_->index()));
  }
  if (!device_) {
    Result<std::unique_ptr<Device>> device = Device::open(api_, index);
    if (!device) {
      return Status(device.status().code(), fmt::format("tier '{}' ({}): {}", config.name,
                                                        to_string(config.kind), device.status().message()));
    }
    device_ = std::move(device).value();
  }
  Result<std::unique_ptr<GpuTier>> tier = GpuTier::open(device_, config);
  if (!tier) return tier.status();
  return std::unique_ptr<Tier>(std::move(tier).value());
}

Result<std::unique_ptr<CopyEngine>> CudaTierProvider::copy_engine(std::span<const Tier* const> tiers) {
  if (!device_)
    return failed_precondition("the cuda provider has opened no tier, so it has no device to copy on");
  auto device_tier = static_cast<TierIndex>(tiers.size());  // none: every copy is between host tiers
  for (std::size_t t = 0; t < tiers.size(); ++t) {
    if (tiers[t]->range_kind() != RangeKind::kDevice) continue;
    if (device_tier != tiers.size()) {
      return invalid_argument(
          fmt::format("tiers '{}' and '{}' are both device memory: give one cuda tier, with "
                      "host tiers (pinned, dram) beside it",
                      tiers[device_tier]->name(), tiers[t]->name()));
    }
    device_tier = static_cast<TierIndex>(t);
  }
  if (device_tier != tiers.size()) {
    const LinkRates rates = measure_link(*device_);
    link_ = {rates.to_device_gbps, rates.to_host_gbps};
    if (link_.to_device > 0 && link_.to_host > 0) {
      spdlog::info(
          "{}: the link moves {:.1f} GB/s to the device, {:.1f} GB/s to the host (16 MiB copies); plans "
          "weigh moves and slow accesses by it",
          device_->describe(), link_.to_device, link_.to_host);
    } else {
      spdlog::info("{}: the link's rates could not be measured; plans keep their default rates",
                   device_->describe());
    }
  }
  return std::unique_ptr<CopyEngine>(new CudaMoveEngine(device_, device_tier));
}

std::unique_ptr<LayerClock> CudaTierProvider::layer_clock() {
  if (!device_) return nullptr;
  return std::make_unique<EventLayerClock>(device_);
}

Status CudaTierProvider::host_copy(void* to, const void* from, std::size_t bytes, bool to_device) {
  if (!device_) return failed_precondition("host copy: no device opened (no cuda tier)");
  const CopyKind kind = to_device ? CopyKind::kHostToDevice : CopyKind::kDeviceToHost;
  TENSORTIER_RETURN_IF_ERROR(device_->make_current());
  TENSORTIER_RETURN_IF_ERROR(
      cuda_status(api_, api_.memcpy_async(to, from, bytes, kind, device_->compute()), "cudaMemcpyAsync"));
  return device_->synchronize_stream(device_->compute());
}

Status CudaTierProvider::host_zero(void* to, std::size_t bytes) {
  if (!device_) return failed_precondition("host zero: no device opened (no cuda tier)");
  TENSORTIER_RETURN_IF_ERROR(device_->make_current());
  return cuda_status(api_, api_.memset_async(to, 0, bytes, device_->compute()), "cudaMemsetAsync");
}

Status CudaTierProvider::host_wait() {
  return device_ ? device_->synchronize_stream(device_->compute()) : Status::ok();
}

}  // namespace tensortier::gpu

// The runtime loads the GPU backend as a module when a spec has a GPU tier (load_module.h) and
// makes its provider through this.
extern "C" __attribute__((visibility("default"))) tensortier::TierProvider*
tensortier_gpu_make_tier_provider() {
  return new (std::nothrow) tensortier::gpu::CudaTierProvider();
}
