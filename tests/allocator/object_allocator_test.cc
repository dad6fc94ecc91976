// ObjectAllocator: page ownership, group packing, budgets and fallback, reuse across steps, and
// the bad input it must survive.
#include "tensortier/allocator/object_allocator.h"
#include "tensortier/allocator/slot_bitmap.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <random>

#include <gtest/gtest.h>

#include "test_util.h"

namespace tensortier {
namespace {

std::unique_ptr<ObjectAllocator> make(const std::string& spec) {
  return testing::allocator_for(spec);
}

std::uintptr_t page_of(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) / kPageBytes;
}

TEST(ObjectAllocator, LargeObjectsOwnTheirPages) {
  auto alloc = make("fast=emulated:optane:256MiB");
  std::vector<ObjectInfo> objects;
  for (std::size_t bytes : {std::size_t{4096}, std::size_t{5000}, std::size_t{3} << 20, std::size_t{4097}}) {
    auto info = alloc->allocate("t", bytes);
    ASSERT_TRUE(info) << info.status().to_string();
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(info->address) % kPageBytes, 0u);
    EXPECT_EQ(info->reserved_bytes, round_up(bytes, kPageBytes));
    EXPECT_FALSE(info->small);
    objects.push_back(info.value());
  }
  // No page holds bytes of two objects.
  for (const auto& a : objects) {
    for (const auto& b : objects) {
      if (a.id == b.id) continue;
      const auto a_first = page_of(a.address),
                 a_last = page_of(static_cast<char*>(a.address) + a.reserved_bytes - 1);
      const auto b_first = page_of(b.address),
                 b_last = page_of(static_cast<char*>(b.address) + b.reserved_bytes - 1);
      EXPECT_TRUE(a_last < b_first || b_last < a_first) << a.id << " and " << b.id << " share a page";
    }
  }
  SpanView span;
  ASSERT_TRUE(alloc->lookup(static_cast<char*>(objects[2].address) + 12345, &span));
  EXPECT_EQ(span.id, objects[2].id);
  EXPECT_FALSE(span.is_group);
}

TEST(ObjectAllocator, SmallObjectsShareOnlyTheirGroupsPages) {
  auto alloc = make("fast=emulated:optane:64MiB");
  std::vector<ObjectInfo> g1, g2;
  for (int i = 0; i < 50; ++i) {
    g1.push_back(alloc->allocate("bias", 100, /*group=*/1).value());
    g2.push_back(alloc->allocate("scale", 300, /*group=*/2).value());
  }
  for (const auto& a : g1) {
    EXPECT_TRUE(a.small);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.address) % kSmallAlignmentBytes, 0u);
    for (const auto& b : g2) EXPECT_NE(page_of(a.address), page_of(b.address));
    SpanView span;
    ASSERT_TRUE(alloc->lookup(a.address, &span));
    EXPECT_TRUE(span.is_group);
    EXPECT_EQ(span.id, 1u);
  }
  // 50 objects of 128 bytes fit one 64 KiB chunk: group 1 shares pages.
  SpanView first, last;
  ASSERT_TRUE(alloc->lookup(g1.front().address, &first) && alloc->lookup(g1.back().address, &last));
  EXPECT_EQ(first.base, last.base);  // one chunk (chunks are page-aligned, not 64 KiB-aligned)
  EXPECT_EQ(first.bytes, kGroupChunkBytes);
}

// A small object freed while a layer pins it (PyTorch frees a layer's inputs inside the layer)
// takes its pins on the chunk with it: the chunk's other objects move again, and the layer's
// unpin at its end finds nothing to undo. Before, its chunk stayed pinned for good.
TEST(ObjectAllocator, ASmallObjectFreedWhilePinnedLeavesItsChunkUnpinned) {
  auto alloc = make("fast=dram:64MiB,slow=emulated:optane:64MiB");
  const ObjectInfo a = alloc->allocate("a", 100, /*group=*/1).value();
  const ObjectInfo b = alloc->allocate("b", 100, /*group=*/1).value();
  ASSERT_TRUE(a.small && b.small);
  const std::vector<ObjectId> layer{a.id, a.id};  // read and written: pinned twice
  std::vector<PinnedObject> pinned(layer.size());
  ASSERT_TRUE(alloc->pin(layer, pinned, std::chrono::milliseconds(1)));
  MoveOptions no_wait;
  no_wait.pin_wait = std::chrono::nanoseconds{0};
  EXPECT_FALSE(alloc->move(b.id, 1, no_wait)) << "b shares a's chunk, which the layer pins";
  ASSERT_TRUE(alloc->free(a.id).is_ok());
  auto moved = alloc->move(b.id, 1, no_wait);
  EXPECT_TRUE(moved) << moved.status().to_string();
  alloc->unpin(layer);  // the layer's end
  const std::vector<ObjectId> one{b.id};
  std::vector<PinnedObject> out(1);
  ASSERT_TRUE(alloc->pin(one, out, std::chrono::milliseconds(1)));
  alloc->unpin(one);
  EXPECT_TRUE(alloc->move(b.id, 0, no_wait)) << "b's chunk is pinned again after the layer's end";
}

TEST(ObjectAllocator, HundredThousandSmallObjectsKeepTheirBytesAndAreReused) {
  auto alloc = make("fast=emulated:optane:1GiB");
  std::mt19937 rng(1);
  std::vector<std::size_t> sizes(100'000);
  for (auto& s : sizes) s = 1 + rng() % 512;
  std::vector<ObjectInfo> objects;
  objects.reserve(sizes.size());
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    auto info = alloc->allocate("small", sizes[i], static_cast<GroupId>(i % 4));
    ASSERT_TRUE(info) << i << ": " << info.status().to_string();
    std::memset(info->address, static_cast<int>(i % 251), sizes[i]);
    objects.push_back(info.value());
  }
  for (std::size_t i = 0; i < objects.size(); ++i) {
    const auto* p = static_cast<const unsigned char*>(objects[i].address);
    ASSERT_EQ(p[0], i % 251) << "object " << i << " was overwritten";
    ASSERT_EQ(p[sizes[i] - 1], i % 251) << "object " << i << " was overwritten";
  }
  EXPECT_EQ(alloc->usage()[0].live_objects, 100'000u);
  for (const auto& o : objects) ASSERT_TRUE(alloc->free(o.address).is_ok());
  auto after_free = alloc->usage()[0];
  EXPECT_EQ(after_free.live_objects, 0u);
  EXPECT_EQ(after_free.live_bytes, 0u);
  // The same allocations again take no new memory from the tier.
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    ASSERT_TRUE(alloc->allocate("small", sizes[i], static_cast<GroupId>(i % 4)));
  }
  EXPECT_EQ(alloc->usage()[0].new_ranges, after_free.new_ranges);
  EXPECT_EQ(alloc->usage()[0].mapped_bytes, after_free.mapped_bytes);
}

// First fit over a chunk's slots, against a brute-force search of the same bitmap.
TEST(SlotBitmap, TakesTheFirstFreeRunAndGivesItBack) {
  constexpr std::size_t kSlots = 256;
  SlotBitmap<kSlots> bitmap;
  std::vector<bool> model(kSlots, false);
  auto first_fit = [&](std::size_t count) -> std::optional<std::size_t> {
    for (std::size_t start = 0; start + count <= kSlots; ++start) {
      bool free = true;
      for (std::size_t s = start; s < start + count && free; ++s) free = !model[s];
      if (free) return start;
    }
    return std::nullopt;
  };
  std::mt19937 rng(3);
  std::vector<std::pair<std::size_t, std::size_t>> taken;  // (first, count)
  for (int op = 0; op < 20'000; ++op) {
    if (taken.empty() || rng() % 5 < 3) {
      const std::size_t count = 1 + rng() % 70;  // runs across word boundaries too
      const auto expected = first_fit(count);
      const auto got = bitmap.take(count);
      ASSERT_EQ(got, expected) << "op " << op << ", " << count << " slots";
      if (got) {
        for (std::size_t s = *got; s < *got + count; ++s) model[s] = true;
        taken.emplace_back(*got, count);
      }
    } else {
      const std::size_t pick = rng() % taken.size();
      const auto [first, count] = taken[pick];
      taken.erase(taken.begin() + static_cast<std::ptrdiff_t>(pick));
      bitmap.give_back(first, count);
      for (std::size_t s = first; s < first + count; ++s) model[s] = false;
    }
    ASSERT_EQ(bitmap.free_slots(), static_cast<std::size_t>(std::count(model.begin(), model.end(), false)));
  }
  EXPECT_FALSE(bitmap.take(0));
  EXPECT_FALSE(bitmap.take(kSlots + 1));
}

// Issue 13, defect 8: a chunk's space was reused only once every object in it was freed, so one
// survivor a round kept a whole 64 KiB chunk: memory grew without bound (19 MiB here for 19 KiB
// live), and each allocation searched every chunk, slowing with them.
TEST(ObjectAllocator, SmallObjectsOfMixedLifetimesReuseTheirChunksSpace) {
  auto alloc = make("fast=dram:1GiB");
  constexpr int kRounds = 300;
  constexpr int kPerRound = static_cast<int>(kGroupChunkBytes / kSmallAlignmentBytes);  // a chunk's worth
  std::vector<ObjectInfo> survivors;
  std::vector<ObjectInfo> round;
  for (int r = 0; r < kRounds; ++r) {
    round.clear();
    for (int i = 0; i < kPerRound; ++i) {
      auto o = alloc->allocate("mixed", 48, /*group=*/7);
      ASSERT_TRUE(o) << o.status().to_string();
      std::memset(o->address, r % 251, 48);
      round.push_back(o.value());
    }
    const int keep = (r * 37) % kPerRound;  // one lives on, somewhere in the round
    survivors.push_back(round[static_cast<std::size_t>(keep)]);
    for (int i = 0; i < kPerRound; ++i) {
      if (i == keep) continue;
      ASSERT_TRUE(alloc->free(round[static_cast<std::size_t>(i)].address).is_ok());
    }
  }
  for (std::size_t r = 0; r < survivors.size(); ++r) {
    const auto* p = static_cast<const unsigned char*>(survivors[r].address);
    ASSERT_TRUE(std::all_of(p, p + 48, [&](unsigned char c) { return c == r % 251; })) << "survivor " << r;
  }
  const TierUsage usage = alloc->usage()[0];
  EXPECT_EQ(usage.live_bytes, kRounds * 48u);
  // A round's objects fill one chunk; the survivors (300 x 64 bytes) take part of a second.
  EXPECT_LE(usage.peak_mapped_bytes, 3 * kGroupChunkBytes)
      << "mapped " << usage.mapped_bytes << " bytes for " << usage.live_bytes << " live";
  // That an allocation's cost stays flat as survivors accumulate is a timing: bench_allocator's
  // BM_SmallMixedLifetimes (first and last rounds).
  for (const auto& o : survivors) ASSERT_TRUE(alloc->free(o.address).is_ok());
}

TEST(ObjectAllocator, BudgetSmallerThanOneObjectFallsBackAndCounts) {
  auto alloc = make("fast=dram:64KiB,slow=emulated:optane:64MiB");
  auto info = alloc->allocate("conv1.weights", 1 << 20);
  ASSERT_TRUE(info) << info.status().to_string();
  EXPECT_EQ(info->tier, 1u);
  const auto usage = alloc->usage();
  EXPECT_EQ(usage[0].fallbacks_out, 1u);
  EXPECT_EQ(usage[1].fallbacks_in, 1u);
  EXPECT_EQ(usage[0].live_bytes, 0u);
  EXPECT_EQ(usage[1].live_bytes, 1u << 20);
  // A small one still fits the fast tier.
  EXPECT_EQ(alloc->allocate("bias", 64).value().tier, 0u);
}

TEST(ObjectAllocator, NothingFitsIsAnErrorNamingEveryTier) {
  auto alloc = make("fast=dram:1MiB,slow=emulated:optane:2MiB");
  auto info = alloc->allocate("fc.weights", 3 << 20);
  ASSERT_FALSE(info);
  EXPECT_EQ(info.status().code(), StatusCode::kOutOfMemory);
  const std::string& m = info.status().message();
  EXPECT_NE(m.find("'fc.weights' (3.00 MiB) fits no tier"), std::string::npos) << m;
  EXPECT_NE(m.find("fast has 1.00 MiB of 1.00 MiB free"), std::string::npos) << m;
  EXPECT_NE(m.find("slow has 2.00 MiB of 2.00 MiB free"), std::string::npos) << m;
  for (const auto& u : alloc->usage()) EXPECT_EQ(u.mapped_bytes, 0u);
}

TEST(ObjectAllocator, ZeroBytesIsRejected) {
  auto alloc = make("fast=dram:1MiB");
  auto info = alloc->allocate("empty", 0);
  ASSERT_FALSE(info);
  EXPECT_EQ(info.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(info.status().message().find("'empty': 0 bytes"), std::string::npos);
}

TEST(ObjectAllocator, MoreThanTheMachineHasIsAnErrorNotACrash) {
  // Budgets large enough that only the machine itself can say no.
  auto alloc = make("fast=dram:4TiB,slow=emulated:optane:4TiB");
  for (std::size_t bytes : {std::size_t{1} << 40, std::size_t{3} << 40, ~std::size_t{0} - 4096}) {
    auto info = alloc->allocate("huge", bytes);
    ASSERT_FALSE(info) << bytes;
    EXPECT_EQ(info.status().code(), StatusCode::kOutOfMemory);
  }
  // The budgets had room: the error says it was the machine that refused, not the budget.
  auto refused = alloc->allocate("huge", std::size_t{1} << 40);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.status().message().find("with room left in the budget"), std::string::npos)
      << refused.status().message();
  EXPECT_EQ(refused.status().message().find("raise a tier's budget"), std::string::npos)
      << refused.status().message();
  for (const auto& u : alloc->usage()) EXPECT_EQ(u.mapped_bytes, 0u);
  EXPECT_TRUE(alloc->allocate("after", 1 << 20));  // still usable
}

TEST(ObjectAllocator, FreeOfUnknownOrFreedPointerIsAnErrorThatChangesNothing) {
  auto alloc = make("fast=dram:16MiB");
  auto a = alloc->allocate("a", 1 << 20).value();
  auto b = alloc->allocate("b", 100).value();
  int on_stack = 0;
  EXPECT_EQ(alloc->free(&on_stack).code(), StatusCode::kNotFound);
  EXPECT_EQ(alloc->free(nullptr).code(), StatusCode::kNotFound);
  EXPECT_EQ(alloc->free(static_cast<char*>(a.address) + 8).code(), StatusCode::kNotFound);
  ASSERT_TRUE(alloc->free(a.address).is_ok());
  const auto before = alloc->usage()[0];
  const Status twice = alloc->free(a.address);
  EXPECT_EQ(twice.code(), StatusCode::kNotFound);
  EXPECT_NE(twice.message().find("already freed"), std::string::npos);
  EXPECT_EQ(alloc->usage()[0].live_objects, before.live_objects);
  EXPECT_EQ(alloc->usage()[0].cached_bytes, before.cached_bytes);
  ASSERT_TRUE(alloc->free(b.address).is_ok());
  EXPECT_EQ(alloc->free(b.address).code(), StatusCode::kNotFound);
}

TEST(ObjectAllocator, CacheIsReleasedWhenTheBudgetNeedsIt) {
  auto alloc = make("fast=emulated:optane:8MiB,slow=emulated:optane:64MiB");
  auto a = alloc->allocate("a", 6 << 20).value();
  ASSERT_TRUE(alloc->free(a.address).is_ok());
  EXPECT_EQ(alloc->usage()[0].cached_bytes, 6u << 20);
  const auto before = alloc->usage()[0];
  auto b = alloc->allocate("b", 4 << 20);  // 6 cached + 4 > 8: the cached range is split
  ASSERT_TRUE(b);
  EXPECT_EQ(b->tier, 0u);
  EXPECT_EQ(b->address, a.address) << "the head of the cached range, its pages faulted in already";
  EXPECT_EQ(alloc->usage()[0].new_ranges, before.new_ranges);
  EXPECT_EQ(alloc->usage()[0].cached_bytes, 2u << 20) << "the tail stays cached";
  EXPECT_EQ(alloc->usage()[0].mapped_bytes, 6u << 20);
  auto c = alloc->allocate("c", 4 << 20);  // 6 mapped + 4 > 8 and nothing to split: the cache goes
  ASSERT_TRUE(c);
  EXPECT_EQ(c->tier, 0u);
  EXPECT_EQ(alloc->usage()[0].cached_bytes, 0u);
  EXPECT_EQ(alloc->usage()[0].mapped_bytes, 8u << 20);
  EXPECT_EQ(alloc->usage()[0].fallbacks_out, 0u);
}

// Where the cache and the free room together are less than an object asks, letting the cache go
// would make no room: the object falls back and the cached pages stay, faulted in, for the next
// object of their size.
TEST(ObjectAllocator, TheCacheStaysWhereLettingItGoCouldNotMakeRoom) {
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  auto alloc = make("fast=emulated:optane:8MiB,slow=emulated:optane:64MiB");
  auto a = alloc->allocate("a", 4 * kMiB).value();
  auto b = alloc->allocate("b", 2 * kMiB).value();
  ASSERT_TRUE(alloc->free(b.address).is_ok());  // 4 live + 2 cached of 8: 2 free
  const TierUsage before = alloc->usage()[0];
  ASSERT_EQ(before.cached_bytes, 2 * kMiB);
  auto c = alloc->allocate("c", 6 * kMiB);  // 2 free + 2 cached < 6: no room either way
  ASSERT_TRUE(c);
  EXPECT_EQ(c->tier, 1u);
  TierUsage after = alloc->usage()[0];
  EXPECT_EQ(after.cached_bytes, 2 * kMiB) << "the cache was let go for nothing";
  EXPECT_EQ(after.mapped_bytes, 6 * kMiB);
  EXPECT_EQ(after.fallbacks_out, before.fallbacks_out + 1);
  auto d = alloc->allocate("d", 2 * kMiB);  // the cached range serves it
  ASSERT_TRUE(d);
  EXPECT_EQ(d->tier, 0u);
  EXPECT_EQ(d->address, b.address);
  EXPECT_EQ(alloc->usage()[0].new_ranges, before.new_ranges);
  auto e = alloc->allocate("e", 2 * kMiB);  // 2 free, nothing cached: a new range
  ASSERT_TRUE(e);
  EXPECT_EQ(e->tier, 0u);
  EXPECT_EQ(alloc->usage()[0].new_ranges, before.new_ranges + 1);
  for (const void* p : {a.address, c->address, d->address, e->address}) ASSERT_TRUE(alloc->free(p).is_ok());
  alloc->release_cache();
  EXPECT_EQ(alloc->usage()[0].mapped_bytes, 0u);
  EXPECT_EQ(alloc->usage()[1].mapped_bytes, 0u);
}

// With no room in the budget and no cached range as large, smaller cached ranges give their
// pages to the new object (mremap): nothing is released, no page faults in, and what they lack
// comes from the budget's room.
TEST(ObjectAllocator, SmallerCachedRangesAreJoinedWhereTheBudgetHasNoRoom) {
  // Ranges under 2 MiB: 4 KiB pages, so a new range would fault once a page (256 for 1 MiB).
  auto alloc = make("fast=emulated:optane:2MiB,slow=emulated:optane:64MiB");
  constexpr std::size_t kPart = std::size_t{512} << 10;
  std::vector<ObjectInfo> four;
  for (int i = 0; i < 4; ++i) {
    four.push_back(alloc->allocate("part", kPart).value());
    std::memset(four.back().address, 'a' + i, kPart);
  }
  ASSERT_TRUE(alloc->free(four[0].address).is_ok());
  ASSERT_TRUE(alloc->free(four[2].address).is_ok());  // two cached ranges, not adjacent
  const TierUsage before = alloc->usage()[0];
  ASSERT_EQ(before.cached_bytes, 2 * kPart);
  [[maybe_unused]] const long faults_before = testing::thread_page_faults();
  auto joined = alloc->allocate("joined", 2 * kPart);
  ASSERT_TRUE(joined);
  ASSERT_EQ(joined->tier, 0u) << "the cache held its pages: no fallback to the slow tier";
  std::memset(joined->address, 'z', 2 * kPart);
  [[maybe_unused]] const long faults = testing::thread_page_faults() - faults_before;
  TierUsage after = alloc->usage()[0];
  EXPECT_EQ(after.assembled_ranges, before.assembled_ranges + 1);
  EXPECT_EQ(after.new_ranges, before.new_ranges);
  EXPECT_EQ(after.cached_bytes, 0u);
  EXPECT_EQ(after.mapped_bytes, 4 * kPart);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  EXPECT_LT(faults, 16) << "the joined range's 256 pages were faulted in already (a few faults are "
                           "the allocator's own bookkeeping)";
#endif
  for (int i : {1, 3}) {
    const auto* bytes = static_cast<const unsigned char*>(four[i].address);
    EXPECT_TRUE(std::all_of(bytes, bytes + kPart, [&](unsigned char c) { return c == 'a' + i; }))
        << "a live neighbour's bytes changed";
  }
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  alloc = make("fast=emulated:optane:8MiB,slow=emulated:optane:64MiB");
  // A cached range smaller than the object, and room for the rest: the rest is new pages.
  auto a = alloc->allocate("a", 3 * kMiB).value();
  auto b = alloc->allocate("b", 2 * kMiB).value();
  ASSERT_TRUE(alloc->free(b.address).is_ok());  // 3 live + 2 cached of 8: 3 free
  const TierUsage mid = alloc->usage()[0];
  auto c = alloc->allocate("c", 4 * kMiB);  // 4 > 3 free: 2 cached + 2 new
  ASSERT_TRUE(c);
  EXPECT_EQ(c->tier, 0u);
  std::memset(c->address, 'c', 4 * kMiB);
  after = alloc->usage()[0];
  EXPECT_EQ(after.assembled_ranges, mid.assembled_ranges + 1);
  EXPECT_EQ(after.cached_bytes, 0u);
  EXPECT_EQ(after.mapped_bytes, 7 * kMiB);
  ASSERT_TRUE(alloc->free(c->address).is_ok());
  ASSERT_TRUE(alloc->free(a.address).is_ok());
  alloc->release_cache();
  EXPECT_EQ(alloc->usage()[0].mapped_bytes, 0u) << "every page accounted for";
}

// An arena: objects at the offsets the caller gives, inside one range taken once; a place that
// is taken or outside is refused with nothing changed; its objects leave it only by a copy.
TEST(ObjectAllocator, ArenaObjectsLiveAtTheirOffsetsAndNeverOverlap) {
  auto alloc = make("fast=emulated:optane:8MiB,slow=emulated:optane:64MiB");
  constexpr std::size_t kKiB = 1024;
  auto arena = alloc->create_arena(0, 1024 * kKiB);
  ASSERT_TRUE(arena) << arena.status().to_string();
  EXPECT_EQ(alloc->usage()[0].mapped_bytes, 1024 * kKiB) << "the arena takes its bytes of the budget once";
  auto* base = static_cast<std::byte*>(nullptr);
  auto a = alloc->allocate_in_arena("a", 300 * kKiB, kDefaultGroup, 0, arena.value(), 0);
  ASSERT_TRUE(a) << a.status().to_string();
  base = static_cast<std::byte*>(a->address);
  auto b = alloc->allocate_in_arena("b", 200 * kKiB, kDefaultGroup, 0, arena.value(), 512 * kKiB);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->address, base + 512 * kKiB);
  EXPECT_EQ(b->tier, 0u);
  std::memset(a->address, 'a', 300 * kKiB);
  std::memset(b->address, 'b', 200 * kKiB);
  const TierUsage before = alloc->usage()[0];
  // Refused, nothing changed: overlapping a (ends at 300 KiB), overlapping b, past the end,
  // unaligned, no such arena, a small object.
  for (auto [offset, bytes] :
       {std::pair{std::uint64_t{296} * kKiB, 8 * kKiB}, std::pair{std::uint64_t{256} * kKiB, 300 * kKiB},
        std::pair{std::uint64_t{1020} * kKiB, 8 * kKiB}, std::pair{std::uint64_t{100}, 8 * kKiB},
        std::pair{std::uint64_t{0}, std::size_t{100}}}) {
    auto refused = alloc->allocate_in_arena("x", bytes, kDefaultGroup, 0, arena.value(), offset);
    EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable) << offset << " " << bytes;
  }
  EXPECT_EQ(alloc->allocate_in_arena("x", 8 * kKiB, kDefaultGroup, 0, arena.value() + 7, 0).status().code(),
            StatusCode::kUnavailable);
  EXPECT_EQ(alloc->usage()[0].live_objects, before.live_objects);
  EXPECT_EQ(alloc->usage()[0].mapped_bytes, before.mapped_bytes);
  // Between them fits; so does a's place once a is freed, and it takes no new page.
  auto c = alloc->allocate_in_arena("c", 212 * kKiB, kDefaultGroup, 0, arena.value(), 300 * kKiB);
  ASSERT_TRUE(c) << c.status().to_string();
  EXPECT_EQ(alloc->destroy_arena(arena.value()).code(), StatusCode::kFailedPrecondition)
      << "objects live in it";
  // An arena's object moves by a copy to a range of its own, its bytes with it; its place is free.
  auto moved = alloc->move(a->id, 1);
  ASSERT_TRUE(moved) << moved.status().to_string();
  EXPECT_EQ(moved->method, MoveMethod::kNewAddress);
  EXPECT_NE(moved->address, a->address);
  EXPECT_EQ(alloc->info_by_id(a->id)->arena, 0u);
  const auto* ab = static_cast<const unsigned char*>(moved->address);
  EXPECT_TRUE(std::all_of(ab, ab + 300 * kKiB, [](unsigned char ch) { return ch == 'a'; }));
  ASSERT_TRUE(alloc->free(moved->address).is_ok());
  [[maybe_unused]] const long faults_before = testing::thread_page_faults();
  auto d = alloc->allocate_in_arena("d", 300 * kKiB, kDefaultGroup, 0, arena.value(), 0);
  ASSERT_TRUE(d);
  std::memset(d->address, 'd', 300 * kKiB);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  EXPECT_LT(testing::thread_page_faults() - faults_before, 8) << "the arena's pages were in already";
#endif
  const auto* bb = static_cast<const unsigned char*>(b->address);
  EXPECT_TRUE(std::all_of(bb, bb + 200 * kKiB, [](unsigned char ch) { return ch == 'b'; }));
  EXPECT_EQ(alloc->usage()[0].arena_allocations, 4u);
  EXPECT_EQ(alloc->usage()[0].mapped_bytes, 1024 * kKiB) << "objects in the arena take no more of the budget";
  for (const ObjectInfo* o : {&b.value(), &c.value(), &d.value()})
    ASSERT_TRUE(alloc->free(o->address).is_ok());
  ASSERT_TRUE(alloc->destroy_arena(arena.value()).is_ok());
  EXPECT_EQ(alloc->destroy_arena(arena.value()).code(), StatusCode::kNotFound);
  EXPECT_EQ(alloc->usage()[0].cached_bytes, 1024 * kKiB) << "its range went to the cache";
  alloc->release_cache();
  EXPECT_EQ(alloc->usage()[0].mapped_bytes, 0u);
}

TEST(ObjectAllocator, SteadyStateStepsTakeNoPageFault) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "sanitizer runtimes fault on their own (quarantine, shadow memory); the plain "
                  "build checks this";
#endif
  auto alloc = make("fast=emulated:optane:256MiB,slow=emulated:optane:256MiB");
  const std::vector<std::size_t> sizes{64 << 20, 5 << 20, 3 << 20, 1 << 20, 40000, 4096, 100, 700, 2000};
  auto step = [&] {
    std::vector<void*> live;
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      auto info = alloc->allocate("act", sizes[i], /*group=*/7);
      ASSERT_TRUE(info);
      std::memset(info->address, 1, sizes[i]);  // the layer writes its whole output
      live.push_back(info->address);
    }
    for (void* p : live) ASSERT_TRUE(alloc->free(p).is_ok());
  };
  step();  // warm-up: first touch of every range
  const long faults_before = testing::thread_page_faults();
  for (int i = 0; i < 5; ++i) step();
  const long faults = testing::thread_page_faults() - faults_before;
  EXPECT_EQ(faults, 0) << "steady-state steps page-faulted";
  EXPECT_GT(alloc->usage()[0].reused_ranges, 0u);
}

TEST(ObjectAllocator, InfoReportsWhatWasAsked) {
  auto alloc = make("fast=dram:16MiB");
  auto a = alloc->allocate("conv2.weights", 10000, 3).value();
  auto info = alloc->info(a.address);
  ASSERT_TRUE(info);
  EXPECT_EQ(info->name, "conv2.weights");
  EXPECT_EQ(info->bytes, 10000u);
  EXPECT_EQ(info->group, 3u);
  EXPECT_EQ(info->id, a.id);
  EXPECT_FALSE(alloc->info(static_cast<char*>(a.address) + 1));
  EXPECT_EQ(alloc->allocate("x", 1, 0, /*preferred=*/5).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tensortier
