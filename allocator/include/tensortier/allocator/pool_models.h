// How much device memory a step's buffers need under three ways of serving them, as pure
// functions of the buffers' lifetimes and sizes (PlannedBuffer, offset_planner.h), in the order a
// step allocates and frees them (by `lower`, then by `upper`; frees at a time come before
// allocations at it). SmartPool (plan_offsets: every offset known ahead) is the GPU backend's;
// the two below are the peers it is weighed against (issue 37, docs/RESULTS.md "GPU"):
//
//   best_fit_pool        a CnMem-like pool: one region grown as needed; a request takes the
//                        smallest free block that fits (the lowest address among equals), split
//                        off its head; a free coalesces with its free neighbours. Its cost: the
//                        region's high-water mark.
//   caching_allocator    a model of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator):
//                        sizes rounded up to 512 B; requests of 1 MiB or less from a small pool
//                        of 2 MiB segments, larger ones from a large pool whose segments are 20 MiB
//                        for requests under 10 MiB and the request rounded up to 2 MiB otherwise;
//                        a request takes the best-fitting free block of its pool (smallest, then
//                        lowest address; max_split_size unset, as by default) and splits it where
//                        what remains is
//                        more than 512 B (small) or 1 MiB (large); a free coalesces with free
//                        neighbours in its segment; segments are never given back. Its costs: the
//                        most bytes reserved (segments) and the most allocated (rounded requests):
//                        torch.cuda.max_memory_reserved and max_memory_allocated.
//
// What the models leave out: CnMem's and PyTorch's per-stream pools (one stream here), PyTorch's
// garbage collection and expandable segments (off by default), alignment beyond 512 B.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <span>

#include "tensortier/allocator/offset_planner.h"

namespace tensortier {

struct PoolFootprint {
  std::uint64_t reserved_bytes = 0;   // the most the pool held from the device at once
  std::uint64_t allocated_bytes = 0;  // the most its live requests took at once (after rounding)
};

PoolFootprint best_fit_pool(std::span<const PlannedBuffer> buffers);
PoolFootprint caching_allocator(std::span<const PlannedBuffer> buffers);

}  // namespace tensortier
