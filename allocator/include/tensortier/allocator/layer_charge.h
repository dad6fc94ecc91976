// The emulated slow tier's charge for one layer. Each tier with a cost model (the emulated kind)
// charges the layer's declared bytes on it (CostModel::layer_charge_ns), and its slow traffic is
// placed on the tier's bandwidth timeline, which moves share, so that the layer ends `charge` after
// the call unless moves hold the tier longer; the calling thread waits until then.
//
// Thread safety: the timelines are thread-safe; call from the thread that ran the layer.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tensortier/allocator/object_allocator.h"

namespace tensortier {

struct LayerCharge {
  std::uint64_t booked_ns = 0;   // what the cost models charge, all tiers together
  std::uint64_t charged_ns = 0;  // how long the call held the thread (0 where nothing was booked)
  std::uint64_t slow_read_bytes = 0, slow_written_bytes = 0;  // on tiers with a cost model
  std::vector<std::uint64_t> booked_ns_by_tier;               // one entry per tier
};

// `read_bytes_by_tier` and `written_bytes_by_tier`: the layer's declared bytes on each tier with a
// cost model (0 elsewhere), one entry per tier of `allocator`.
LayerCharge charge_layer(const ObjectAllocator& allocator, std::span<const std::uint64_t> read_bytes_by_tier,
                         std::span<const std::uint64_t> written_bytes_by_tier);

}  // namespace tensortier
