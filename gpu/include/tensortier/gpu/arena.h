// GpuArena: a GPU tier's memory as one allocation, in which objects live at offsets: device memory
// (a `cuda:N[:SIZE]` tier, one cudaMalloc) or page-locked host memory (`pinned:SIZE`, one
// cudaHostAlloc). Where objects go in it is the caller's: SmartPool's offsets from the offset
// planner (allocator/offset_planner.h), AutoSwap's homes.
//
//   base ┌──────────┬─────┬───────────────┬──────────────┐ base + bytes
//        │ object a │     │   object b    │    free      │
//        └──────────┴─────┴───────────────┴──────────────┘
//          offset 0         offset 1 MiB
//
// Ownership: the arena owns its allocation (freed by its destructor) and borrows the Device.
// Thread safety: immutable after open; at() is pure.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "tensortier/allocator/tier_spec.h"
#include "tensortier/gpu/device.h"

namespace tensortier::gpu {

class GpuArena {
 public:
  // The arena for `config` (kind cuda or pinned) on `device`. A cuda tier with no size takes 90%
  // of the device's free memory; a pinned tier needs a size (page-locking all of the host's
  // memory would starve it). Errors: another kind, another device than `device`'s, a size of 0 or
  // one the device or host cannot give (kOutOfMemory, naming what is free).
  static Result<std::unique_ptr<GpuArena>> open(Device& device, const TierConfig& config);
  ~GpuArena();
  GpuArena(const GpuArena&) = delete;
  GpuArena& operator=(const GpuArena&) = delete;

  const std::string& name() const { return name_; }
  TierKind kind() const { return kind_; }
  std::byte* base() const { return base_; }
  std::uint64_t bytes() const { return bytes_; }
  // The address of [offset, offset + length) in the arena; nullptr where it passes the end.
  void* at(std::uint64_t offset, std::uint64_t length) const;
  // "cuda:0 arena 16.0 GiB at 0x7f..." for people.
  std::string describe() const;

 private:
  GpuArena(Device& device, std::string name, TierKind kind)
      : device_(device), name_(std::move(name)), kind_(kind) {}
  Device& device_;
  std::string name_;
  TierKind kind_;
  std::byte* base_ = nullptr;
  std::uint64_t bytes_ = 0;
};

}  // namespace tensortier::gpu
