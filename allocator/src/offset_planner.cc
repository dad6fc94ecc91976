#include "tensortier/allocator/offset_planner.h"

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <tuple>
#include <utility>

#include <fmt/format.h>

namespace tensortier {
namespace {

std::uint64_t round_up(std::uint64_t bytes, std::uint64_t alignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

bool overlap_in_time(const PlannedBuffer& a, const PlannedBuffer& b) {
  return a.lower < b.upper && b.lower < a.upper;
}

// Best fit in the given order; returns the offsets and the region.
std::pair<std::vector<std::uint64_t>, std::uint64_t> best_fit(std::span<const PlannedBuffer> buffers,
                                                              const std::vector<std::size_t>& order,
                                                              std::uint64_t alignment,
                                                              std::span<const FixedBuffer> fixed) {
  constexpr std::uint64_t kUnplaced = std::numeric_limits<std::uint64_t>::max();
  std::vector<std::uint64_t> offsets(buffers.size(), kUnplaced);
  std::vector<std::size_t> placed;
  placed.reserve(buffers.size());
  std::vector<std::pair<std::uint64_t, std::uint64_t>>
      busy;  // [offset, end) of time-overlapping placed buffers
  std::uint64_t region = 0;
  for (const FixedBuffer& f : fixed)
    region = std::max(region, f.offset + round_up(f.buffer.bytes, alignment));
  for (std::size_t i : order) {
    const PlannedBuffer& b = buffers[i];
    const std::uint64_t size = round_up(b.bytes, alignment);
    busy.clear();
    for (const FixedBuffer& f : fixed) {
      if (overlap_in_time(b, f.buffer))
        busy.emplace_back(f.offset, f.offset + round_up(f.buffer.bytes, alignment));
    }
    for (std::size_t j : placed) {
      if (overlap_in_time(b, buffers[j]))
        busy.emplace_back(offsets[j], offsets[j] + round_up(buffers[j].bytes, alignment));
    }
    std::sort(busy.begin(), busy.end());
    std::uint64_t cursor = 0, best = kUnplaced, best_gap = kUnplaced;
    for (const auto& [start, end] : busy) {
      if (start > cursor && start - cursor >= size && start - cursor < best_gap) {
        best = cursor;
        best_gap = start - cursor;
      }
      cursor = std::max(cursor, end);
    }
    offsets[i] = best != kUnplaced ? best : cursor;  // a gap that fits, else on top
    region = std::max(region, offsets[i] + size);
    placed.push_back(i);
  }
  return {std::move(offsets), region};
}

}  // namespace

std::uint64_t max_live_bytes(std::span<const PlannedBuffer> buffers, std::uint64_t alignment_bytes) {
  std::map<std::uint64_t, std::int64_t> delta;  // time -> change of live bytes
  for (const PlannedBuffer& b : buffers) {
    const auto size = static_cast<std::int64_t>(round_up(b.bytes, alignment_bytes));
    delta[b.lower] += size;
    delta[b.upper] -= size;
  }
  std::int64_t live = 0, peak = 0;
  for (const auto& [time, change] : delta) {
    live += change;
    peak = std::max(peak, live);
  }
  return static_cast<std::uint64_t>(peak);
}

Result<OffsetPlan> plan_offsets(std::span<const PlannedBuffer> buffers, const OffsetPlannerOptions& options) {
  const std::uint64_t alignment = options.alignment_bytes;
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    return invalid_argument(fmt::format("offset planner: alignment {} is not a power of two", alignment));
  }
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    if (buffers[i].upper <= buffers[i].lower || buffers[i].bytes == 0) {
      return invalid_argument(fmt::format(
          "offset planner: buffer {} ([{}, {}), {} bytes) is empty: it needs lower < upper and some bytes", i,
          buffers[i].lower, buffers[i].upper, buffers[i].bytes));
    }
  }
  // Each order breaks ties by the next criterion and finally by index, so plans are reproducible.
  using Less = bool (*)(std::span<const PlannedBuffer>, std::size_t, std::size_t);
  const std::pair<const char*, Less> orders[] = {
      {"size descending",
       [](std::span<const PlannedBuffer> b, std::size_t x, std::size_t y) {
         return std::tuple(b[y].bytes, b[y].upper - b[y].lower, x) <
                std::tuple(b[x].bytes, b[x].upper - b[x].lower, y);
       }},
      {"size x lifetime descending",
       [](std::span<const PlannedBuffer> b, std::size_t x, std::size_t y) {
         const auto area = [&](std::size_t i) {
           return static_cast<double>(b[i].bytes) * static_cast<double>(b[i].upper - b[i].lower);
         };
         return std::tuple(area(y), b[y].bytes, x) < std::tuple(area(x), b[x].bytes, y);
       }},
      {"lifetime descending",
       [](std::span<const PlannedBuffer> b, std::size_t x, std::size_t y) {
         return std::tuple(b[y].upper - b[y].lower, b[y].bytes, x) <
                std::tuple(b[x].upper - b[x].lower, b[x].bytes, y);
       }},
      {"birth ascending",
       [](std::span<const PlannedBuffer> b, std::size_t x, std::size_t y) {
         return std::tuple(b[x].lower, b[y].bytes, x) < std::tuple(b[y].lower, b[x].bytes, y);
       }},
  };
  OffsetPlan best;
  best.region_bytes = std::numeric_limits<std::uint64_t>::max();
  std::vector<std::size_t> order(buffers.size()), best_order;
  auto try_order = [&](const std::string& name) {
    auto [offsets, region] = best_fit(buffers, order, alignment, options.fixed);
    if (region < best.region_bytes) {
      best.offsets = std::move(offsets);
      best.region_bytes = region;
      best.ordering = name;
      best_order = order;
    }
  };
  for (const auto& order_by : orders) {
    const Less less =
        order_by.second;  // not a structured binding: lambdas cannot capture those before clang 16
    const char* const name = order_by.first;
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return less(buffers, x, y); });
    try_order(name);
  }
  // Then small random changes of the best order so far (a buffer moved a few places earlier or
  // later), kept when they shrink the region: a cheap local search, seeded, so reproducible.
  std::mt19937_64 rng(options.seed);
  for (std::uint32_t attempt = 0; attempt < options.search_steps && buffers.size() > 1; ++attempt) {
    order = best_order;
    const std::size_t moves = 1 + rng() % 3;
    for (std::size_t m = 0; m < moves; ++m) {
      const std::size_t from = rng() % order.size();
      const std::size_t to = rng() % order.size();
      const std::size_t item = order[from];
      order.erase(order.begin() + static_cast<std::ptrdiff_t>(from));
      order.insert(order.begin() + static_cast<std::ptrdiff_t>(to), item);
    }
    const std::string base = best.ordering.substr(0, best.ordering.find(','));
    try_order(base + ", then local search");
  }
  if (buffers.empty()) best.region_bytes = best_fit(buffers, order, alignment, options.fixed).second;
  return best;
}

std::string check_offset_plan(std::span<const PlannedBuffer> buffers, const OffsetPlan& plan,
                              std::uint64_t alignment_bytes) {
  if (plan.offsets.size() != buffers.size())
    return fmt::format("{} offsets for {} buffers", plan.offsets.size(), buffers.size());
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    const std::uint64_t end_i = plan.offsets[i] + round_up(buffers[i].bytes, alignment_bytes);
    if (plan.offsets[i] % alignment_bytes != 0)
      return fmt::format("buffer {} at offset {} is not {}-byte aligned", i, plan.offsets[i],
                         alignment_bytes);
    if (end_i > plan.region_bytes)
      return fmt::format("buffer {} ends at {}, past the region's {} bytes", i, end_i, plan.region_bytes);
    for (std::size_t j = i + 1; j < buffers.size(); ++j) {
      if (!overlap_in_time(buffers[i], buffers[j])) continue;
      const std::uint64_t end_j = plan.offsets[j] + round_up(buffers[j].bytes, alignment_bytes);
      if (plan.offsets[i] < end_j && plan.offsets[j] < end_i) {
        return fmt::format("buffers {} and {} are alive together and overlap: [{}, {}) and [{}, {})", i, j,
                           plan.offsets[i], end_i, plan.offsets[j], end_j);
      }
    }
  }
  return {};
}

}  // namespace tensortier
