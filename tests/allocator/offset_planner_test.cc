// The offset planner: valid plans (no two buffers alive together overlap), exact on inputs whose
// optimum is known, bad input refused, and on google/minimalloc's eleven hard instances
// (tests/data/minimalloc) a region within a stated factor of max-live.
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "tensortier/allocator/offset_planner.h"
#include "tensortier/allocator/range_heap.h"

namespace tensortier {
namespace {

TEST(OffsetPlanner, BuffersNeverAliveTogetherShareOffsetZero) {
  const std::vector<PlannedBuffer> buffers{{0, 2, 100}, {2, 4, 300}, {4, 9, 200}};
  auto plan = plan_offsets(buffers);
  ASSERT_TRUE(plan) << plan.status().to_string();
  EXPECT_EQ(plan->offsets, (std::vector<std::uint64_t>{0, 0, 0}));
  EXPECT_EQ(plan->region_bytes, 300u);
  EXPECT_EQ(max_live_bytes(buffers), 300u);
}

TEST(OffsetPlanner, BuffersAllAliveTogetherStack) {
  const std::vector<PlannedBuffer> buffers{{0, 5, 100}, {1, 6, 300}, {2, 4, 200}};
  auto plan = plan_offsets(buffers);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->region_bytes, 600u);
  EXPECT_EQ(check_offset_plan(buffers, *plan), "");
}

TEST(OffsetPlanner, AGapLeftByAnEarlierBufferIsReused) {
  // a and c are alive together, b only between them: best fit puts d into b's gap, not on top.
  const std::vector<PlannedBuffer> buffers{{0, 10, 400}, {0, 3, 300}, {0, 10, 200}, {5, 10, 250}};
  auto plan = plan_offsets(buffers);
  ASSERT_TRUE(plan);
  EXPECT_EQ(check_offset_plan(buffers, *plan), "");
  EXPECT_EQ(plan->region_bytes, max_live_bytes(buffers));  // 900: optimal
}

TEST(OffsetPlanner, OffsetsFollowTheAlignment) {
  const std::vector<PlannedBuffer> buffers{{0, 3, 100}, {1, 4, 5000}, {2, 3, 1}};
  auto plan = plan_offsets(buffers, {4096});
  ASSERT_TRUE(plan);
  EXPECT_EQ(check_offset_plan(buffers, *plan, 4096), "");
  EXPECT_EQ(plan->region_bytes, 4u * 4096);  // 4 KiB + 8 KiB + 4 KiB, all alive at time 2
  EXPECT_EQ(max_live_bytes(buffers, 4096), 4u * 4096);
}

TEST(OffsetPlanner, BadInputIsRefusedNamingIt) {
  const std::vector<PlannedBuffer> empty_life{{0, 3, 100}, {4, 4, 10}};
  auto plan = plan_offsets(empty_life);
  ASSERT_FALSE(plan);
  EXPECT_NE(plan.status().message().find("buffer 1"), std::string::npos) << plan.status().to_string();
  const std::vector<PlannedBuffer> no_bytes{{0, 3, 0}};
  EXPECT_FALSE(plan_offsets(no_bytes));
  EXPECT_FALSE(plan_offsets(std::vector<PlannedBuffer>{{0, 1, 8}}, {3}));
  auto none = plan_offsets(std::vector<PlannedBuffer>{});
  ASSERT_TRUE(none);
  EXPECT_EQ(none->region_bytes, 0u);
}

TEST(OffsetPlanner, CheckNamesAnOverlap) {
  const std::vector<PlannedBuffer> buffers{{0, 3, 100}, {1, 4, 100}};
  OffsetPlan bad;
  bad.offsets = {0, 50};
  bad.region_bytes = 150;
  EXPECT_NE(check_offset_plan(buffers, bad).find("buffers 0 and 1"), std::string::npos);
}

TEST(OffsetPlanner, RandomInstancesGiveValidPlansNoSmallerThanMaxLive) {
  std::mt19937 rng(5);
  for (int instance = 0; instance < 50; ++instance) {
    std::vector<PlannedBuffer> buffers(1 + rng() % 200);
    for (auto& b : buffers) {
      b.lower = rng() % 100;
      b.upper = b.lower + 1 + rng() % 30;
      b.bytes = 1 + rng() % 100000;
    }
    auto plan = plan_offsets(buffers, {64});
    ASSERT_TRUE(plan);
    ASSERT_EQ(check_offset_plan(buffers, *plan, 64), "") << "instance " << instance;
    EXPECT_GE(plan->region_bytes, max_live_bytes(buffers, 64));
  }
}

std::vector<PlannedBuffer> read_minimalloc_csv(const std::string& path) {
  std::ifstream in(path);
  std::vector<PlannedBuffer> buffers;
  std::string line;
  std::getline(in, line);  // id,lower,upper,size
  while (std::getline(in, line)) {
    std::stringstream row(line);
    std::string id, lower, upper, size;
    std::getline(row, id, ',');
    std::getline(row, lower, ',');
    std::getline(row, upper, ',');
    std::getline(row, size, ',');
    buffers.push_back({std::stoull(lower), std::stoull(upper), std::stoull(size)});
  }
  return buffers;
}

// The README of tests/data/minimalloc: best fit in one order needs 1.31-1.41x of max-live on
// these instances; the exact solver packs each within 1,048,576 bytes. Four orders and the local
// search must stay valid and do better (seen: 1.08-1.33x, mean 1.21x); the table goes to the log.
TEST(OffsetPlanner, MinimallocChallengingInstances) {
  std::vector<double> ratios;
  for (char name = 'A'; name <= 'K'; ++name) {
    const std::string path = fmt::format("{}/{}.1048576.csv", TENSORTIER_MINIMALLOC_DIR, name);
    const std::vector<PlannedBuffer> buffers = read_minimalloc_csv(path);
    ASSERT_FALSE(buffers.empty()) << path;
    auto plan = plan_offsets(buffers);
    ASSERT_TRUE(plan) << plan.status().to_string();
    ASSERT_EQ(check_offset_plan(buffers, *plan), "") << name;
    const std::uint64_t live = max_live_bytes(buffers);
    const double ratio = static_cast<double>(plan->region_bytes) / static_cast<double>(live);
    ratios.push_back(ratio);
    std::printf(
        "minimalloc %c: %zu buffers, max-live %llu, region %llu (%.3fx max-live, %.3fx the exact "
        "solver's 1048576), order: %s\n",
        name, buffers.size(), static_cast<unsigned long long>(live),
        static_cast<unsigned long long>(plan->region_bytes), ratio,
        static_cast<double>(plan->region_bytes) / 1048576.0, plan->ordering.c_str());
    EXPECT_LE(ratio, 1.35) << name << ": little better than best fit in one order (1.31-1.41)";
  }
  double sum = 0;
  for (double r : ratios) sum += r;
  EXPECT_LE(sum / static_cast<double>(ratios.size()), 1.25) << "mean region over max-live";
}

// RangeHeap (a GPU tier's ranges in its one arena): best fit, alignment, joining neighbours.
TEST(RangeHeap, TakesTheSmallestFreeBlockThatFitsAndJoinsNeighboursWhenGivenBack) {
  RangeHeap heap(100);
  const auto a = heap.take(10, 1), b = heap.take(30, 1), c = heap.take(20, 1);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(*a, 0u);
  EXPECT_EQ(*b, 10u);
  EXPECT_EQ(*c, 40u);
  ASSERT_TRUE(heap.give_back(*a, 10));  // free: [0,10) and [60,100)
  const auto d = heap.take(8, 1);
  ASSERT_TRUE(d);
  EXPECT_EQ(*d, 0u) << "the 10-byte hole fits best, not the 40-byte tail";
  EXPECT_FALSE(heap.give_back(*b, 29)) << "a wrong size changes nothing";
  EXPECT_FALSE(heap.give_back(11, 30)) << "nor a wrong offset";
  ASSERT_TRUE(heap.give_back(*b, 30));
  EXPECT_FALSE(heap.give_back(*b, 30)) << "a double free changes nothing";
  ASSERT_TRUE(heap.give_back(*c, 20));
  ASSERT_TRUE(heap.give_back(*d, 8));
  EXPECT_EQ(heap.free_blocks(), 1u) << "every neighbour joined";
  EXPECT_EQ(heap.largest_free_bytes(), 100u);
  EXPECT_FALSE(heap.take(101, 1));
  EXPECT_FALSE(heap.take(0, 1));
  EXPECT_FALSE(heap.take(8, 3)) << "an alignment that is not a power of two";
}

TEST(RangeHeap, AlignsTheAddressNotTheOffset) {
  RangeHeap heap(1 << 20);
  const auto a = heap.take(4096, 4096, /*base=*/0x1000 + 512);
  ASSERT_TRUE(a);
  EXPECT_EQ((0x1000 + 512 + *a) % 4096, 0u);
  EXPECT_EQ(heap.free_bytes(), (1u << 20) - 4096) << "the padding before it stays free";
  EXPECT_EQ(heap.free_blocks(), 2u);
}

// Random takes and gives against a model of the bytes: no two ranges overlap, every range is in
// the region and aligned, the free count is the region less what is taken, and once all is given
// back the region is one block again.
TEST(RangeHeap, RandomUseNeverOverlapsAndGivesEverythingBack) {
  std::mt19937 rng(7);
  constexpr std::uint64_t kSize = 64 << 20;
  constexpr std::uintptr_t kBase = 0x7f0000001000;
  RangeHeap heap(kSize);
  std::map<std::uint64_t, std::uint64_t> taken;  // offset -> bytes
  std::uint64_t taken_bytes = 0;
  int refused = 0;
  for (int i = 0; i < 20000; ++i) {
    if (taken.empty() || rng() % 3 != 0) {
      const std::uint64_t bytes = 4096 * (1 + rng() % 512);
      const std::uint64_t alignment = std::uint64_t{4096} << (rng() % 10);
      const auto offset = heap.take(bytes, alignment, kBase);
      if (!offset) {
        ++refused;
        EXPECT_LT(heap.largest_free_bytes(), bytes + alignment) << "refused with room to spare";
        continue;
      }
      ASSERT_EQ((kBase + *offset) % alignment, 0u);
      ASSERT_LE(*offset + bytes, kSize);
      auto next = taken.lower_bound(*offset);
      ASSERT_TRUE(next == taken.end() || *offset + bytes <= next->first) << "overlaps the next range";
      if (next != taken.begin()) {
        ASSERT_LE(std::prev(next)->first + std::prev(next)->second, *offset) << "overlaps the one before";
      }
      taken.emplace(*offset, bytes);
      taken_bytes += bytes;
    } else {
      auto it = std::next(taken.begin(), static_cast<long>(rng() % taken.size()));
      ASSERT_TRUE(heap.give_back(it->first, it->second));
      taken_bytes -= it->second;
      taken.erase(it);
    }
    ASSERT_EQ(heap.free_bytes(), kSize - taken_bytes);
  }
  EXPECT_GT(refused, 0) << "the region never filled: the test checks no refusal";
  for (const auto& [offset, bytes] : taken) ASSERT_TRUE(heap.give_back(offset, bytes));
  EXPECT_EQ(heap.free_blocks(), 1u);
  EXPECT_EQ(heap.largest_free_bytes(), kSize);
}

}  // namespace
constexpr std::uint64_t kMiBytes = 1 << 20;

// Fixed buffers (a wrap stay's pieces, places.cc) stay where they are; the others go clear of them.
TEST(Places, FixedBuffersStayAndOthersGoAroundThem) {
  const FixedBuffer fixed[] = {{{0, 4, 2 * kMiBytes}, 0}, {{8, 10, 2 * kMiBytes}, 0}};
  const PlannedBuffer buffers[] = {{2, 6, kMiBytes}, {5, 9, kMiBytes}, {4, 8, 2 * kMiBytes}};
  OffsetPlannerOptions options;
  options.fixed = fixed;
  auto plan = plan_offsets(buffers, options);
  ASSERT_TRUE(plan);
  for (std::size_t i = 0; i < 3; ++i) {
    for (const FixedBuffer& f : fixed) {
      const bool in_time = buffers[i].lower < f.buffer.upper && f.buffer.lower < buffers[i].upper;
      const bool in_space =
          plan->offsets[i] < f.offset + f.buffer.bytes && f.offset < plan->offsets[i] + buffers[i].bytes;
      EXPECT_FALSE(in_time && in_space) << i;
    }
  }
  EXPECT_EQ(plan->offsets[2], 0U);  // [4, 8) overlaps neither fixed piece in time: the bottom
  EXPECT_EQ(check_offset_plan(buffers, plan.value()), "");
}

}  // namespace tensortier
