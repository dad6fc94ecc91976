// The offset planner: given buffers whose lifetimes are known ahead (from a step profile), give
// each an offset in one region so that no two buffers alive at the same time overlap, and the
// region (the highest end of any buffer) is small. It serves sentinel's reserved fast region for
// short-lived objects on the CPU, and the GPU backend's pool (SmartPool) reuses it.
//
// The heuristic is the field's usual one (SmartPool, TFLite's arena planner): take buffers in an
// order, and put each in the smallest gap left between the buffers already placed that overlap it
// in time (best fit), or on top of them. Several orders are tried and the smallest region kept
// (size descending, size x lifetime descending, lifetime descending, birth ascending): cheap, and
// each wins on some inputs; then a short seeded local search over orders near the best. google/minimalloc
// solves the problem exactly; we do not link it (it is not packaged for Debian and a search can run for
// minutes), and report how far from the lower bound (max-live: the most bytes alive at one time) each plan is
// instead.
//
// Pure functions of their inputs; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tensortier/status.h"

namespace tensortier {

// One buffer: alive over the half-open interval [lower, upper) of a time axis (layer indices,
// or any ordered clock), `bytes` long.
struct PlannedBuffer {
  std::uint64_t lower = 0;
  std::uint64_t upper = 0;
  std::uint64_t bytes = 0;
};

// A buffer whose offset is given (a slot that must stay where it is): the others are placed
// around it.
struct FixedBuffer {
  PlannedBuffer buffer;
  std::uint64_t offset = 0;
};

struct OffsetPlan {
  std::vector<std::uint64_t> offsets;  // by buffer, in the input's order
  std::uint64_t region_bytes = 0;      // highest offset + size over all buffers
  std::string ordering;                // which order won
};

struct OffsetPlannerOptions {
  std::uint64_t alignment_bytes = 1;  // every offset a multiple of it (sizes rounded up to it)
  // After the four orders: this many random changes of the best order (one to three buffers
  // moved), each kept if its region is smaller. Each costs one best-fit pass, O(n^2) in the
  // buffers alive together; 0 for the orders alone.
  std::uint32_t search_steps = 400;
  std::uint64_t seed = 1;
  // Buffers already placed: every plan keeps clear of them, and the region covers them.
  std::span<const FixedBuffer> fixed{};
};

// The most bytes alive at one time (sizes rounded up to `alignment_bytes`): no plan needs less.
std::uint64_t max_live_bytes(std::span<const PlannedBuffer> buffers, std::uint64_t alignment_bytes = 1);

// Errors: kInvalidArgument naming the first buffer with upper <= lower or no bytes, or an
// alignment that is not a power of two.
Result<OffsetPlan> plan_offsets(std::span<const PlannedBuffer> buffers,
                                const OffsetPlannerOptions& options = {});

// Empty when the plan is valid (every buffer aligned, no two overlapping in time and space, the
// region covering all); else what is wrong, naming the buffers. For tests and for plans read back.
std::string check_offset_plan(std::span<const PlannedBuffer> buffers, const OffsetPlan& plan,
                              std::uint64_t alignment_bytes = 1);

}  // namespace tensortier
