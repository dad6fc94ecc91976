// GpuArena (see arena.h).
#include "tensortier/gpu/arena.h"

#include <fmt/format.h>

#include "tensortier/allocator/tier.h"

namespace tensortier::gpu {

Result<std::unique_ptr<GpuArena>> GpuArena::open(Device& device, const TierConfig& config) {
  const CudaApi& api = device.api();
  if (!is_gpu_kind(config.kind)) {
    return invalid_argument(fmt::format("tier '{}' is a {} tier: a GPU arena is a cuda or pinned tier",
                                        config.name, to_string(config.kind)));
  }
  if (config.kind == TierKind::kCuda && config.cuda_device != device.index()) {
    return invalid_argument(fmt::format("tier '{}' is on cuda:{}, and this device is cuda:{}", config.name,
                                        config.cuda_device, device.index()));
  }
  std::uint64_t bytes = config.budget_bytes;
  if (config.kind == TierKind::kPinned && bytes == 0) {
    return invalid_argument(fmt::format(
        "tier '{}': pinned needs a size (pinned:SIZE, e.g. pinned:16GiB): page-locking all of the host's "
        "memory would starve it",
        config.name));
  }
  if (config.kind == TierKind::kCuda) {
    std::uint64_t free_bytes = 0, total_bytes = 0;
    TENSORTIER_RETURN_IF_ERROR(cuda_status(api, api.mem_info(&free_bytes, &total_bytes), "cudaMemGetInfo"));
    if (bytes == 0) bytes = free_bytes / 10 * 9;
    if (bytes > free_bytes) {
      return out_of_memory(fmt::format(
          "tier '{}': {} asked of {}, which has {} free of {}: give a smaller size", config.name,
          format_bytes(bytes), device.describe(), format_bytes(free_bytes), format_bytes(total_bytes)));
    }
  }
  std::unique_ptr<GpuArena> arena(new GpuArena(device, config.name, config.kind));
  void* base = nullptr;
  const CudaStatus status =
      config.kind == TierKind::kCuda ? api.malloc_device(&base, bytes) : api.malloc_pinned(&base, bytes);
  if (status != 0) {
    return out_of_memory(
        fmt::format("tier '{}': {} of {} memory could not be had: {}", config.name, format_bytes(bytes),
                    config.kind == TierKind::kCuda ? "device" : "pinned host", api.error_string(status)));
  }
  arena->base_ = static_cast<std::byte*>(base);
  arena->bytes_ = bytes;
  return arena;
}

GpuArena::~GpuArena() {
  if (base_ == nullptr) return;
  const CudaApi& api = device_.api();
  (void)(kind_ == TierKind::kCuda ? api.free_device(base_) : api.free_pinned(base_));
}

void* GpuArena::at(std::uint64_t offset, std::uint64_t length) const {
  if (offset > bytes_ || length > bytes_ - offset) return nullptr;
  return base_ + offset;
}

std::string GpuArena::describe() const {
  return fmt::format("{} ({}) arena {} at {}", name_, to_string(kind_), format_bytes(bytes_),
                     static_cast<const void*>(base_));
}

}  // namespace tensortier::gpu
