// The GPU's links as the CUDA copy engine uses them: how many GB/s copies each way get, timed by
// CUDA events on the copy streams. bench_gpu_link prints them; CudaTierProvider measures the two
// directions once when a runtime opens its tiers, so that plans weigh moves by the real link.
//
// Thread safety: one caller at a time per device (the copies share its streams).
#pragma once

#include <cstddef>
#include <tuple>
#include <vector>

#include "tensortier/gpu/copy_engine.h"
#include "tensortier/gpu/device.h"

namespace tensortier::gpu {

// One copy of a round: destination, source, direction.
using LinkCopy = std::tuple<void*, const void*, CopyKind>;

// GB/s of `reps` rounds of `copies` (`bytes` each), all issued at once in a round; each round is
// timed from an event before them on each stream they use to the last copy's end, and the first
// round (warm-up) is left out. The median of the rest; 0 where the events gave no time (the fake
// runtime) or a copy failed.
double link_gbps(Device& device, CudaCopyEngine& engine, std::size_t bytes, int reps,
                 const std::vector<LinkCopy>& copies);

// Host to device and device to host, each alone: `bytes` copies between temporary device and
// pinned buffers, `reps` rounds. Either is 0 where not measured (no memory for the buffers, no
// time from the events).
struct LinkRates {
  double to_device_gbps = 0;
  double to_host_gbps = 0;
};
LinkRates measure_link(Device& device, std::size_t bytes = std::size_t{16} << 20, int reps = 4);

}  // namespace tensortier::gpu
