// Objects that move: every direction between every tier kind this machine has, failures that
// leave the object intact, frees and pins racing moves, keys, observers, the emulated charge,
// and a mover thread racing the training thread (also under ThreadSanitizer: label "threaded").
#include <sys/mman.h>

#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "stats.h"  // bench/: median
#include "tensortier/runtime.h"
#include "tensortier/tensortier.h"
#include "test_util.h"

namespace tensortier {
namespace {

using testing::TempDir;

using testing::allocator_for;

// Every range back to its tier: nothing mapped on any tier.
void expect_all_released(ObjectAllocator& alloc) {
  alloc.release_cache();
  for (const TierUsage& u : alloc.usage()) EXPECT_EQ(u.mapped_bytes, 0u) << u.name;
}

void fill(void* p, std::size_t bytes, unsigned seed) {
  auto* b = static_cast<unsigned char*>(p);
  for (std::size_t i = 0; i < bytes; ++i) b[i] = static_cast<unsigned char>((i * 131 + seed) >> 3);
}
bool holds(const void* p, std::size_t bytes, unsigned seed) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < bytes; ++i) {
    if (b[i] != static_cast<unsigned char>((i * 131 + seed) >> 3)) return false;
  }
  return true;
}

// The four kinds of tier this machine can open: dram, numa:0, emulated, pmem on a directory.
std::string all_kinds_spec(const TempDir& dir) {
  return fmt::format("d=dram:256MiB,n=numa:0:256MiB,e=emulated:cxl:256MiB,p=pmem:{}:256MiB", dir.path());
}

TEST(Move, EveryDirectionBetweenEveryTierKindKeepsTheBytes) {
  TempDir dir;
  auto alloc = allocator_for(all_kinds_spec(dir));
  ASSERT_NE(alloc, nullptr);
  const std::size_t n = alloc->tier_count();
  for (TierIndex from = 0; from < n; ++from) {
    for (TierIndex to = 0; to < n; ++to) {
      if (from == to) continue;
      for (std::size_t bytes : {std::size_t{5000}, std::size_t{3} << 20}) {
        SCOPED_TRACE(
            fmt::format("{} -> {}, {} bytes", alloc->tier(from).name(), alloc->tier(to).name(), bytes));
        auto obj = alloc->allocate("x", bytes, kDefaultGroup, from);
        ASSERT_TRUE(obj) << obj.status().to_string();
        ASSERT_EQ(obj->tier, from);
        fill(obj->address, bytes, from * 7 + to);
        const auto before = alloc->usage();
        auto moved = alloc->move(obj->id, to);
        ASSERT_TRUE(moved) << moved.status().to_string();
        EXPECT_TRUE(moved->moved);
        const MoveMethod method = alloc->move_method(from, to);
        EXPECT_EQ(moved->method, method);
        if (method == MoveMethod::kNewAddress) {
          EXPECT_NE(moved->address, obj->address);
        } else {
          EXPECT_EQ(moved->address, obj->address);
        }
        EXPECT_TRUE(holds(moved->address, bytes, from * 7 + to));
        auto info = alloc->info_by_id(obj->id);
        ASSERT_TRUE(info);
        EXPECT_EQ(info->tier, to);
        EXPECT_EQ(info->address, moved->address);
        EXPECT_EQ(info->key, obj->key);
        SpanView span;
        ASSERT_TRUE(alloc->lookup(moved->address, &span));
        EXPECT_EQ(span.tier, to);
        EXPECT_EQ(span.id, obj->id);
        const auto after = alloc->usage();
        const std::size_t reserved = round_up(bytes, kPageBytes);
        // Budgets follow placement: the bytes left `from` and arrived on `to` (where a range from
        // `to`'s cache took them, it stops being cache).
        auto held = [](const TierUsage& u) { return u.mapped_bytes - u.cached_bytes; };
        EXPECT_EQ(held(after[to]), held(before[to]) + reserved);
        EXPECT_EQ(after[to].live_bytes, before[to].live_bytes + bytes);
        EXPECT_EQ(after[from].live_bytes, before[from].live_bytes - bytes);
        EXPECT_EQ(held(after[from]), held(before[from]) - reserved);
        if (method == MoveMethod::kMovePages) {
          EXPECT_EQ(after[from].mapped_bytes, before[from].mapped_bytes - reserved);
        } else {  // the source's pages are kept for reuse
          EXPECT_EQ(after[from].cached_bytes, before[from].cached_bytes + reserved);
        }
        EXPECT_EQ(after[to].moves_in, before[to].moves_in + 1);
        EXPECT_EQ(after[from].moves_out, before[from].moves_out + 1);
        EXPECT_EQ(after[to].bytes_moved_in, before[to].bytes_moved_in + reserved);
        // Freed where it is placed now, and its range serves the next object there.
        ASSERT_TRUE(alloc->free(moved->address).is_ok());
        EXPECT_EQ(alloc->usage()[to].cached_bytes, after[to].cached_bytes + reserved);
        auto next = alloc->allocate("y", bytes, kDefaultGroup, to);
        ASSERT_TRUE(next);
        EXPECT_EQ(next->tier, to);
        EXPECT_EQ(alloc->usage()[to].reused_ranges, after[to].reused_ranges + 1);
        fill(next->address, bytes, 3);
        EXPECT_TRUE(holds(next->address, bytes, 3));
        ASSERT_TRUE(alloc->free(next->address).is_ok());
      }
    }
  }
  expect_all_released(*alloc);
}

TEST(Move, MethodsFollowTheTierKinds) {
  TempDir dir;
  auto alloc = allocator_for(all_kinds_spec(dir));
  ASSERT_NE(alloc, nullptr);
  EXPECT_EQ(alloc->move_method(0, 2), MoveMethod::kRemap);       // dram -> emulated: in place
  EXPECT_EQ(alloc->move_method(1, 0), MoveMethod::kRemap);       // numa -> dram
  EXPECT_EQ(alloc->move_method(0, 3), MoveMethod::kNewAddress);  // to a memkind heap
  EXPECT_EQ(alloc->move_method(3, 2), MoveMethod::kNewAddress);
  EXPECT_EQ(alloc->move_method(2, 2), MoveMethod::kNone);
  auto numa = allocator_for("a=numa:0:64MiB,b=numa:0:64MiB");
  ASSERT_NE(numa, nullptr);
  EXPECT_EQ(numa->move_method(0, 1), MoveMethod::kMovePages);
}

TEST(Move, OwnerStaysWithMovePagesAndFollowsTheMappingWithRemap) {
  auto alloc = allocator_for("a=numa:0:64MiB,b=numa:0:64MiB,c=dram:64MiB");
  ASSERT_NE(alloc, nullptr);
  auto obj = alloc->allocate("x", 1 << 20);
  ASSERT_TRUE(obj);
  ASSERT_TRUE(alloc->move(obj->id, 1));
  EXPECT_EQ(alloc->info_by_id(obj->id)->owner, 0u);  // same mapping, pages moved
  EXPECT_EQ(alloc->info_by_id(obj->id)->tier, 1u);
  EXPECT_EQ(alloc->usage()[0].mapped_bytes, 0u);
  EXPECT_EQ(alloc->usage()[1].mapped_bytes, std::uint64_t{1} << 20);
  ASSERT_TRUE(alloc->move(obj->id, 2));
  EXPECT_EQ(alloc->info_by_id(obj->id)->owner, 2u);  // c's mapping now sits at the address
  ASSERT_TRUE(alloc->free(obj->address).is_ok());
  expect_all_released(*alloc);
}

// Moving back and forth between anonymous tiers reuses ranges: the source's pages are cached on
// its tier and serve the next move in, so steady moves map nothing new and take no page fault.
TEST(Move, MovesBackAndForthReuseTheSourcePagesAndFaultNothing) {
  auto alloc = allocator_for("a=dram:64MiB,b=emulated:cxl:64MiB");
  ASSERT_NE(alloc, nullptr);
  constexpr std::size_t kBytes = 4 << 20;
  auto obj = alloc->allocate("x", kBytes);
  ASSERT_TRUE(obj);
  fill(obj->address, kBytes, 4);
  ASSERT_TRUE(alloc->move(obj->id, 1));  // maps b's range; a's pages go to a's cache
  ASSERT_TRUE(alloc->move(obj->id, 0));  // takes them back; b's pages go to b's cache
  const auto before = alloc->usage();
  const long faults_before = testing::thread_page_faults();
  for (int i = 0; i < 4; ++i) {
    auto moved = alloc->move(obj->id, static_cast<TierIndex>(1 - i % 2));
    ASSERT_TRUE(moved) << moved.status().to_string();
    EXPECT_EQ(moved->address, obj->address);
  }
  const long faults = testing::thread_page_faults() - faults_before;
#if !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)  // their shadow memory faults too
  EXPECT_LT(faults, 8) << "a 4 MiB move that maps fresh pages faults hundreds of times";
#else
  (void)faults;
#endif
  const auto after = alloc->usage();
  for (TierIndex t : {0U, 1U}) {
    EXPECT_EQ(after[t].new_ranges, before[t].new_ranges) << "tier " << t;
    EXPECT_EQ(after[t].reused_ranges, before[t].reused_ranges + 2) << "tier " << t;
    EXPECT_EQ(after[t].mapped_bytes, kBytes) << "tier " << t << ": the object or its cached pages";
  }
  EXPECT_TRUE(holds(obj->address, kBytes, 4));
  ASSERT_TRUE(alloc->free(obj->address).is_ok());
  expect_all_released(*alloc);
}

TEST(Move, InjectedFailureLeavesEverythingAsItWas) {
  TempDir dir;
  auto alloc = allocator_for(all_kinds_spec(dir));
  ASSERT_NE(alloc, nullptr);
  alloc->set_move_failure_hook([](ObjectId, TierIndex) { return true; });
  for (TierIndex to : {1U, 2U, 3U}) {
    auto obj = alloc->allocate("x", 1 << 20);
    ASSERT_TRUE(obj);
    fill(obj->address, 1 << 20, 9);
    const auto before = alloc->usage();
    auto moved = alloc->move(obj->id, to);
    ASSERT_FALSE(moved);
    EXPECT_NE(moved.status().message().find("injected failure; it stays on 'd'"), std::string::npos)
        << moved.status().message();
    EXPECT_TRUE(holds(obj->address, 1 << 20, 9));
    EXPECT_EQ(alloc->info_by_id(obj->id)->tier, 0u);
    const auto after = alloc->usage();
    for (std::size_t t = 0; t < after.size(); ++t) {
      EXPECT_EQ(after[t].mapped_bytes, before[t].mapped_bytes) << t;
      EXPECT_EQ(after[t].live_bytes, before[t].live_bytes) << t;
      EXPECT_EQ(after[t].in_flight_bytes, 0u);
    }
    EXPECT_EQ(after[to].failed_moves, before[to].failed_moves + 1);
    ASSERT_TRUE(alloc->free(obj->address).is_ok());
  }
}

TEST(Move, NoRoomAtTheDestinationIsAClearOutOfMemory) {
  auto alloc = allocator_for("fast=dram:4MiB,slow=emulated:optane:64MiB");
  ASSERT_NE(alloc, nullptr);
  auto big = alloc->allocate("big", 8 << 20, kDefaultGroup, 1);
  ASSERT_TRUE(big);
  fill(big->address, 8 << 20, 1);
  auto moved = alloc->move(big->id, 0);
  ASSERT_FALSE(moved);
  EXPECT_EQ(moved.status().code(), StatusCode::kOutOfMemory);
  EXPECT_NE(moved.status().message().find("it stays on 'slow'"), std::string::npos)
      << moved.status().message();
  EXPECT_TRUE(holds(big->address, 8 << 20, 1));
  EXPECT_EQ(alloc->usage()[0].mapped_bytes, 0u);
}

TEST(Move, FreeDuringAMoveIsSafe) {
  for (bool fail : {false, true}) {
    auto alloc = allocator_for("fast=dram:64MiB,slow=emulated:cxl:64MiB");
    ASSERT_NE(alloc, nullptr);
    auto obj = alloc->allocate("x", 2 << 20);
    ASSERT_TRUE(obj);
    ObjectAllocator* raw = alloc.get();
    void* address = obj->address;
    // The hook runs after the copy, with no lock held: the free lands in the middle of the move.
    alloc->set_move_failure_hook([&](ObjectId, TierIndex) {
      EXPECT_TRUE(raw->free(address).is_ok());
      EXPECT_FALSE(raw->free(address).is_ok());  // gone for the program already
      return fail;
    });
    EXPECT_FALSE(alloc->move(obj->id, 1));
    EXPECT_EQ(alloc->live_objects(), 0u);
    EXPECT_FALSE(alloc->info_by_id(obj->id));
    const auto usage = alloc->usage();
    EXPECT_EQ(usage[0].live_bytes + usage[1].live_bytes, 0u);
    expect_all_released(*alloc);
  }
}

TEST(Move, PinnedObjectsDoNotMove) {
  auto alloc = allocator_for("fast=dram:64MiB,slow=emulated:cxl:64MiB");
  ASSERT_NE(alloc, nullptr);
  auto obj = alloc->allocate("x", 1 << 20);
  ASSERT_TRUE(obj);
  const ObjectId ids[] = {obj->id};
  PinnedObject pinned[1];
  auto pin = alloc->pin(ids, pinned, std::chrono::milliseconds(1));
  ASSERT_TRUE(pin);
  EXPECT_EQ(pinned[0].address, obj->address);
  EXPECT_EQ(pinned[0].bytes, std::size_t{1} << 20);
  MoveOptions quick;
  quick.pin_wait = std::chrono::milliseconds(20);
  auto moved = alloc->move(obj->id, 1, quick);
  ASSERT_FALSE(moved);
  EXPECT_EQ(moved.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(alloc->info_by_id(obj->id)->tier, 0u);
  // A move waits for the pin to go.
  std::thread unpinner([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    alloc->unpin(ids);
  });
  auto later = alloc->move(obj->id, 1);
  unpinner.join();
  ASSERT_TRUE(later) << later.status().to_string();
  EXPECT_EQ(alloc->info_by_id(obj->id)->tier, 1u);
}

TEST(Move, ALayerThatWillNotWaitMakesTheMoveFail) {
  auto alloc = allocator_for("fast=dram:64MiB,slow=emulated:cxl:64MiB");
  ASSERT_NE(alloc, nullptr);
  auto obj = alloc->allocate("x", 1 << 20);
  ASSERT_TRUE(obj);
  fill(obj->address, 1 << 20, 4);
  ObjectAllocator* raw = alloc.get();
  const ObjectId ids[] = {obj->id};
  PinResult seen;
  alloc->set_move_failure_hook([&](ObjectId, TierIndex) {
    PinnedObject pinned[1];
    seen = raw->pin(ids, pinned, std::chrono::milliseconds(5)).value();  // the move is in flight
    fill(pinned[0].address, 1 << 20, 5);                                 // the layer writes
    return false;
  });
  auto moved = alloc->move(obj->id, 1);
  ASSERT_FALSE(moved);
  EXPECT_EQ(moved.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(seen.late_moves, 1u);
  EXPECT_EQ(seen.aborted_moves, 1u);
  EXPECT_GE(seen.wait_ns, 5'000'000u);
  EXPECT_EQ(alloc->info_by_id(obj->id)->tier, 0u);
  EXPECT_TRUE(holds(obj->address, 1 << 20, 5));  // the layer's write is not lost
  alloc->unpin(ids);
}

// A move_pages migration cannot be undone half-way, and pages a layer writes while they migrate
// can fail to move: a layer waits for it to complete, past its bound, and sees it committed.
TEST(Move, ALayerWaitsForAMovePagesMigrationPastItsBound) {
  auto alloc = allocator_for("a=numa:0:64MiB,b=numa:0:64MiB");
  ASSERT_NE(alloc, nullptr);
  ASSERT_EQ(alloc->move_method(0, 1), MoveMethod::kMovePages);
  auto obj = alloc->allocate("x", 1 << 20);
  ASSERT_TRUE(obj);
  fill(obj->address, 1 << 20, 6);
  const ObjectId ids[] = {obj->id};
  std::atomic<bool> in_flight{false};
  // The hook runs after the pages migrated, before the commit: it holds the move in flight until
  // the pin waits for it, and then past the pin's 5 ms bound (a sleep lasts at least that long,
  // whatever the load).
  alloc->set_move_failure_hook([&](ObjectId, TierIndex) {
    in_flight = true;
    while (alloc->pins_waiting() == 0) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return false;
  });
  std::thread mover([&] { EXPECT_TRUE(alloc->move(obj->id, 1)); });
  while (!in_flight) std::this_thread::yield();
  PinnedObject pinned[1];
  auto pin = alloc->pin(ids, pinned, std::chrono::milliseconds(5));
  mover.join();
  ASSERT_TRUE(pin) << pin.status().to_string();
  EXPECT_EQ(pin->late_moves, 1u);
  EXPECT_EQ(pin->aborted_moves, 0u);
  EXPECT_EQ(pinned[0].tier, 1u) << "the layer stopped waiting at its 5 ms bound, before the commit";
  EXPECT_GE(pin->wait_ns, 20'000'000u);
  EXPECT_EQ(pinned[0].tier, 1u) << "the layer ran before the migration committed";
  EXPECT_EQ(pinned[0].address, obj->address);
  EXPECT_TRUE(holds(obj->address, 1 << 20, 6));
  alloc->unpin(ids);
}

TEST(Move, SmallObjectsMoveWithTheirChunkInPlaceOnly) {
  TempDir dir;
  auto alloc = allocator_for(fmt::format("d=dram:64MiB,e=emulated:cxl:64MiB,p=pmem:{}:64MiB", dir.path()));
  ASSERT_NE(alloc, nullptr);
  auto a = alloc->allocate("a", 100, 7);
  auto b = alloc->allocate("b", 200, 7);
  ASSERT_TRUE(a && b);
  fill(a->address, 100, 1);
  fill(b->address, 200, 2);
  auto moved = alloc->move(a->id, 1);
  ASSERT_TRUE(moved) << moved.status().to_string();
  EXPECT_EQ(moved->bytes, kGroupChunkBytes);
  EXPECT_EQ(alloc->info_by_id(b->id)->tier, 1u);  // its chunk-mate came along
  EXPECT_TRUE(holds(a->address, 100, 1));
  EXPECT_TRUE(holds(b->address, 200, 2));
  EXPECT_EQ(alloc->usage()[1].live_bytes, 300u);
  auto c = alloc->allocate("c", 64, 7, 1);  // the moved chunk serves new objects on its new tier
  ASSERT_TRUE(c);
  SpanView span_a, span_c;
  ASSERT_TRUE(alloc->lookup(a->address, &span_a) && alloc->lookup(c->address, &span_c));
  EXPECT_EQ(span_a.base, span_c.base);
  auto to_heap = alloc->move(a->id, 2);
  ASSERT_FALSE(to_heap);
  EXPECT_EQ(to_heap.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(holds(a->address, 100, 1));
}

TEST(Move, EmulatedTierChargesTheMoveOnItsTimeline) {
  auto alloc = allocator_for("fast=dram:256MiB,slow=emulated:optane:256MiB");
  ASSERT_NE(alloc, nullptr);
  auto obj = alloc->allocate("x", 32 << 20);
  ASSERT_TRUE(obj);
  const std::uint64_t start = steady_now_ns();
  auto moved = alloc->move(obj->id, 1);
  ASSERT_TRUE(moved);
  const CostModel& model = *alloc->tier(1).cost_model();
  const std::uint64_t expected = model.move_ns(32 << 20, MoveDirection::kIntoSlow);
  EXPECT_GE(steady_now_ns() - start, expected);
  EXPECT_GE(alloc->tier(1).timeline()->busy_until_ns(), start + expected);
}

// A move in place swaps mappings at the object's address; no other mapping may land there
// meanwhile. A thread that asks mmap for exactly that address (a hint, not MAP_FIXED) while
// another moves the object back and forth must never get it: the address is always mapped.
// (The first version left a hole between two mremaps, and a oneDNN or malloc mapping that landed
// in it was then replaced by the object: training crashed when several runtimes shared a process.)
TEST(Move, NoOtherMappingLandsAtAnAddressBeingRemapped) {
  auto alloc = allocator_for("a=dram:64MiB,b=emulated:cxl:64MiB");
  ASSERT_NE(alloc, nullptr);
  constexpr std::size_t kBytes = 2 << 20;
  auto obj = alloc->allocate("x", kBytes);
  ASSERT_TRUE(obj);
  fill(obj->address, kBytes, 9);
  std::atomic<bool> stop{false};
  std::atomic<int> moves{0};
  std::thread mover([&] {
    for (TierIndex to = 1; !stop.load(std::memory_order_relaxed); to ^= 1U) {
      if (auto m = alloc->move(obj->id, to); m && m->moved) moves.fetch_add(1, std::memory_order_relaxed);
    }
  });
  int landed = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (std::chrono::steady_clock::now() < deadline && (moves.load() < 2000 || landed != 0)) {
    void* p = mmap(obj->address, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    if (p == obj->address) {
      ++landed;  // in the hole: the next mremap would replace this mapping; leave it and stop
      break;
    }
    munmap(p, kBytes);
  }
  stop = true;
  mover.join();
  ASSERT_EQ(landed, 0) << "a new mapping was given the object's address while it moved";
  EXPECT_GT(moves.load(), 20) << "too few moves to tell";  // the hole showed within 20 moves
  EXPECT_TRUE(holds(obj->address, kBytes, 9));
  ASSERT_TRUE(alloc->free(obj->address).is_ok());
}

// Shadow copies: an object moved into the fast tier keeps its slow pages; moving it back out
// before anything writes it remaps them (no copy, no emulated charge); a dropped shadow (what a
// write does) makes the next move out copy, and the bytes are the new ones.
TEST(Shadows, AMoveBackOutBeforeAnyWriteCopiesNothing) {
  auto alloc = allocator_for("fast=dram:64MiB,slow=emulated:optane-server:64MiB");
  ASSERT_NE(alloc, nullptr);
  alloc->set_keep_shadows(true);
  constexpr std::size_t kBytes = 8 << 20;
  auto obj = alloc->allocate("w", kBytes, kDefaultGroup, 1);
  ASSERT_TRUE(obj);
  fill(obj->address, kBytes, 5);
  ASSERT_TRUE(alloc->move(obj->id, 0));
  EXPECT_EQ(alloc->usage()[1].shadow_bytes, kBytes) << "the slow pages are kept";
  EXPECT_EQ(alloc->usage()[1].mapped_bytes, kBytes) << "and counted on the slow tier";
  auto out = alloc->move(obj->id, 1);
  ASSERT_TRUE(out);
  EXPECT_EQ(out->charge_ns, 0u) << "a clean move is not charged";
  EXPECT_TRUE(out->clean);
  EXPECT_EQ(alloc->usage()[1].clean_moves, 1u);
  EXPECT_EQ(alloc->usage()[1].shadow_bytes, 0u);
  EXPECT_TRUE(holds(obj->address, kBytes, 5));
  // In again, a write (its shadow dropped first, as the runtime does), out again: a real copy.
  ASSERT_TRUE(alloc->move(obj->id, 0));
  const ObjectId id = obj->id;
  alloc->drop_shadows(std::span<const ObjectId>(&id, 1));
  EXPECT_EQ(alloc->usage()[1].shadow_bytes, 0u);
  fill(obj->address, kBytes, 6);
  auto copied = alloc->move(obj->id, 1);
  ASSERT_TRUE(copied);
  EXPECT_GT(copied->charge_ns, 0u) << "a dirty move out is charged at the slow tier's write bandwidth";
  EXPECT_FALSE(copied->clean);
  EXPECT_EQ(alloc->usage()[1].clean_moves, 1u);
  EXPECT_TRUE(holds(obj->address, kBytes, 6)) << "the bytes written, not the shadow's";
  // A shadow goes with its object, and under budget pressure like the cache.
  ASSERT_TRUE(alloc->move(obj->id, 0));
  EXPECT_EQ(alloc->usage()[1].shadow_bytes, kBytes);
  ASSERT_TRUE(alloc->set_budget(1, kBytes).is_ok());
  auto other = alloc->allocate("other", kBytes, kDefaultGroup, 1);
  ASSERT_TRUE(other) << "the shadow gives its room back: " << other.status().to_string();
  EXPECT_EQ(other->tier, 1u);
  EXPECT_EQ(alloc->usage()[1].shadow_bytes, 0u);
  ASSERT_TRUE(alloc->free(other->address).is_ok());
  ASSERT_TRUE(alloc->move(obj->id, 1));  // no shadow now: a copy
  EXPECT_TRUE(holds(obj->address, kBytes, 6));
  ASSERT_TRUE(alloc->move(obj->id, 0));
  ASSERT_TRUE(alloc->free(obj->address).is_ok());
  EXPECT_EQ(alloc->usage()[1].shadow_bytes, 0u);
  expect_all_released(*alloc);
}

// Dead bytes: a move asked not to copy (MoveOptions::discard_unless_pinned_after) copies nothing
// and is not charged while nothing has pinned the object since the caller read pin_sequence();
// a pin since (a layer used it) makes it an ordinary copy that keeps the bytes. A segment the same.
TEST(DeadBytes, AMoveCopiesNothingUnlessTheObjectWasPinnedSince) {
  auto alloc = allocator_for("fast=dram:64MiB,slow=emulated:optane-server:64MiB");
  ASSERT_NE(alloc, nullptr);
  alloc->set_keep_shadows(true);
  constexpr std::size_t kBytes = 8 << 20;
  auto obj = alloc->allocate("grad", kBytes, kDefaultGroup, 1);
  auto other = alloc->allocate("other", 1 << 20, kDefaultGroup, 0);
  ASSERT_TRUE(obj && other);
  fill(obj->address, kBytes, 5);
  auto pin_unpin = [&](ObjectId id) {
    const std::array<ObjectId, 1> ids{id};
    std::array<PinnedObject, 1> pinned{};
    ASSERT_TRUE(alloc->pin(ids, pinned, std::chrono::seconds(1)));
    alloc->unpin(ids);
  };
  pin_unpin(obj->id);  // a layer used it before the bytes went dead
  const std::uint64_t seen = alloc->pin_sequence();
  ASSERT_NE(seen, 0u);
  pin_unpin(other->id);  // another object's pin does not count
  MoveOptions dead;
  dead.discard_unless_pinned_after = seen;
  auto in = alloc->move(obj->id, 0, dead);
  ASSERT_TRUE(in) << in.status().to_string();
  EXPECT_TRUE(in->discarded);
  EXPECT_EQ(in->charge_ns, 0u) << "no copy out of the slow tier, so no charge";
  EXPECT_EQ(alloc->usage()[0].discarded_moves, 1u);
  EXPECT_EQ(alloc->usage()[1].shadow_bytes, 0u) << "the slow pages are not its bytes' copy: no shadow";
  EXPECT_EQ(alloc->info_by_id(obj->id)->tier, 0u);
  // The layer that overwrites it pins it; a move of the old hand-out now copies its new bytes.
  pin_unpin(obj->id);
  fill(obj->address, kBytes, 7);
  auto out = alloc->move(obj->id, 1, dead);
  ASSERT_TRUE(out);
  EXPECT_FALSE(out->discarded) << "pinned since the hand-out: the bytes may be live";
  EXPECT_GT(out->charge_ns, 0u);
  EXPECT_TRUE(holds(obj->address, kBytes, 7));
  EXPECT_EQ(alloc->usage()[1].discarded_moves, 0u);
  // Off (0) copies; so does a move of one segment with a pin since, and one without copies nothing.
  auto back = alloc->move(obj->id, 0);
  ASSERT_TRUE(back);
  EXPECT_FALSE(back->discarded);
  EXPECT_TRUE(holds(obj->address, kBytes, 7));
  MoveOptions segment = dead;
  segment.segment = 1;
  auto seg = alloc->move(obj->id, 1, segment);
  ASSERT_TRUE(seg);
  EXPECT_FALSE(seg->discarded);
  EXPECT_TRUE(holds(obj->address, kBytes, 7));
  segment.discard_unless_pinned_after = alloc->pin_sequence();
  segment.segment = 2;
  seg = alloc->move(obj->id, 1, segment);
  ASSERT_TRUE(seg);
  EXPECT_TRUE(seg->discarded);
  EXPECT_EQ(alloc->usage()[1].discarded_moves, 1u);
  ASSERT_TRUE(alloc->free(obj->address).is_ok());
  ASSERT_TRUE(alloc->free(other->address).is_ok());
  expect_all_released(*alloc);
}

// Copies split over threads (set_copy_threads): a move's copy of kSplitCopyBytes or more is cut
// into parts of whole pages, one a thread, copied at once; every byte lands where it was, each
// way, and each move says how many threads took part. Smaller copies stay on the moving thread.
TEST(Move, CopiesSplitOverThreadsKeepEveryByteInPlace) {
  auto alloc = allocator_for("fast=dram:64MiB,slow=emulated:cxl:256MiB");
  ASSERT_NE(alloc, nullptr);
  EXPECT_EQ(alloc->copy_threads(), 1u);
  ASSERT_TRUE(alloc->set_copy_threads(3).is_ok());
  EXPECT_EQ(alloc->copy_threads(), 3u);
  // Words that differ at every offset: a part copied to another part's place would show.
  auto fill_words = [](void* p, std::size_t bytes, std::uint64_t seed) {
    auto* w = static_cast<std::uint64_t*>(p);
    for (std::size_t i = 0; i < bytes / 8; ++i) w[i] = i * 0x9E3779B97F4A7C15ULL + seed;
  };
  auto holds_words = [](const void* p, std::size_t bytes, std::uint64_t seed) {
    const auto* w = static_cast<const std::uint64_t*>(p);
    for (std::size_t i = 0; i < bytes / 8; ++i) {
      if (w[i] != i * 0x9E3779B97F4A7C15ULL + seed) return false;
    }
    return true;
  };
  constexpr std::size_t kBytes = (std::size_t{13} << 20) + 5 * kPageBytes;  // 3 parts, the last shorter
  auto big = alloc->allocate("big", kBytes);
  ASSERT_TRUE(big);
  ASSERT_EQ(big->tier, 0u);
  fill_words(big->address, kBytes, 11);
  auto out = alloc->move(big->id, 1);
  ASSERT_TRUE(out) << out.status().to_string();
  EXPECT_EQ(out->copy_threads, 3u);
  EXPECT_EQ(alloc->usage()[1].split_copies, 1u);
  EXPECT_TRUE(holds_words(big->address, kBytes, 11));
  fill_words(big->address, kBytes, 12);
  auto in = alloc->move(big->id, 0);
  ASSERT_TRUE(in) << in.status().to_string();
  EXPECT_EQ(in->copy_threads, 3u);
  EXPECT_EQ(alloc->usage()[0].split_copies, 1u);
  EXPECT_TRUE(holds_words(big->address, kBytes, 12));
  constexpr std::size_t kSmall = ObjectAllocator::kSplitCopyBytes - kPageBytes;
  auto small = alloc->allocate("small", kSmall);
  ASSERT_TRUE(small);
  fill_words(small->address, kSmall, 13);
  auto moved = alloc->move(small->id, 1);
  ASSERT_TRUE(moved);
  EXPECT_EQ(moved->copy_threads, 1u) << "under kSplitCopyBytes: the moving thread alone";
  EXPECT_EQ(alloc->usage()[1].split_copies, 1u);
  EXPECT_TRUE(holds_words(small->address, kSmall, 13));
  ASSERT_TRUE(alloc->set_copy_threads(1).is_ok());
  auto alone = alloc->move(big->id, 1);
  ASSERT_TRUE(alone);
  EXPECT_EQ(alone->copy_threads, 1u);
  EXPECT_EQ(alloc->usage()[1].split_copies, 1u);
  EXPECT_TRUE(holds_words(big->address, kBytes, 12));
  ASSERT_TRUE(alloc->free(big->address).is_ok());
  ASSERT_TRUE(alloc->free(small->address).is_ok());
  expect_all_released(*alloc);
}

// Room waits: an object that finds no room on its preferred tier, while a move out of that tier
// is copying, waits for the move to end and is born there; with the wait off it falls back at
// once; a wait for moves that never end (a mover's queue that does not drain) gives up at its
// limit and falls back.
TEST(RoomWait, ABirthWaitsForAMoveOutToMakeItsRoom) {
  constexpr std::size_t kBytes = 48 << 20;  // out to emulated optane-server: about 40 ms
  for (const bool wait : {true, false}) {
    SCOPED_TRACE(wait ? "room wait on" : "room wait off");
    auto alloc = allocator_for("fast=dram:64MiB,slow=emulated:optane-server:256MiB");
    ASSERT_NE(alloc, nullptr);
    if (wait) alloc->set_room_wait(std::chrono::seconds(5));
    auto old = alloc->allocate("old", kBytes);
    ASSERT_TRUE(old);
    ASSERT_EQ(old->tier, 0u);
    fill(old->address, kBytes, 3);
    std::thread mover([&] { ASSERT_TRUE(alloc->move(old->id, 1)); });
    while (alloc->usage()[0].leaving_bytes == 0) std::this_thread::yield();  // copying now
    auto born = alloc->allocate("born", kBytes);
    ASSERT_TRUE(born) << born.status().to_string();
    const TierUsage fast = alloc->usage()[0];
    mover.join();
    EXPECT_EQ(born->tier, wait ? 0u : 1u);
    EXPECT_EQ(fast.room_waits, wait ? 1u : 0u);
    EXPECT_EQ(fast.fallbacks_out, wait ? 0u : 1u);
    EXPECT_EQ(born->room_wait_ns > 0, wait) << "allocate() says how long it waited";
    if (wait) {
      EXPECT_GE(fast.room_wait_ns, born->room_wait_ns);
    }
    EXPECT_EQ(alloc->usage()[0].leaving_bytes, 0u);
    EXPECT_EQ(alloc->info_by_id(old->id)->tier, 1u);
    EXPECT_TRUE(holds(old->address, kBytes, 3));
    ASSERT_TRUE(alloc->free(old->address).is_ok());
    ASSERT_TRUE(alloc->free(born->address).is_ok());
    expect_all_released(*alloc);
  }
  auto alloc = allocator_for("fast=dram:64MiB,slow=emulated:optane-server:256MiB");
  ASSERT_NE(alloc, nullptr);
  constexpr auto kLimit = std::chrono::milliseconds(30);
  alloc->set_room_wait(kLimit, [](TierIndex t) -> std::uint64_t { return t == 0 ? kBytes : 0; });
  auto old = alloc->allocate("old", kBytes);
  ASSERT_TRUE(old);
  const std::uint64_t start = steady_now_ns();
  auto born = alloc->allocate("born", kBytes);
  ASSERT_TRUE(born);
  EXPECT_EQ(born->tier, 1u) << "no move ended within the limit: it falls back";
  EXPECT_GE(steady_now_ns() - start, static_cast<std::uint64_t>(std::chrono::nanoseconds(kLimit).count()));
  EXPECT_EQ(alloc->usage()[0].room_waits, 1u);
  // Moves pending that would not make room enough: no wait at all.
  alloc->set_room_wait(kLimit, [](TierIndex) -> std::uint64_t { return 4 << 20; });
  auto big = alloc->allocate("big", kBytes);
  ASSERT_TRUE(big);
  EXPECT_EQ(big->tier, 1u);
  EXPECT_EQ(alloc->usage()[0].room_waits, 1u);
  // The cache counts towards the room as well: 8 MiB free, 8 cached and 36 leaving make room
  // for 48. The wait ends at its limit; the cache stays, for it could not have made room alone.
  auto cached = alloc->allocate("cached", 8 << 20);
  ASSERT_TRUE(cached);
  ASSERT_EQ(cached->tier, 0u);
  ASSERT_TRUE(alloc->free(cached->address).is_ok());
  ASSERT_EQ(alloc->usage()[0].cached_bytes, 8u << 20);
  alloc->set_room_wait(kLimit, [](TierIndex) -> std::uint64_t { return 36 << 20; });
  auto waits = alloc->allocate("waits", kBytes);
  ASSERT_TRUE(waits);
  EXPECT_EQ(waits->tier, 1u);
  EXPECT_EQ(alloc->usage()[0].room_waits, 2u);
  EXPECT_EQ(alloc->usage()[0].cached_bytes, 8u << 20);
  for (const auto& o : {old, born, big, waits}) ASSERT_TRUE(alloc->free(o->address).is_ok());
  expect_all_released(*alloc);
}

// A birth inside a layer does not wait for moves queued behind a move held by a pin (PyTorch
// allocates inside layers; the mover waits for the layer's end, so the birth would wait its whole
// limit): it falls back at once. With no move held, the same queued moves make it wait.
TEST(RoomWait, ABirthDoesNotWaitForMovesQueuedBehindAPin) {
  constexpr std::size_t kBytes = 24 << 20;
  for (const bool held : {true, false}) {
    SCOPED_TRACE(held ? "a move waits for a pin" : "no move waits");
    auto alloc = allocator_for("fast=dram:40MiB,slow=emulated:optane-server:256MiB");
    ASSERT_NE(alloc, nullptr);
    // Queued moves would free the room; a short limit, so the wait with no move held ends soon.
    alloc->set_room_wait(std::chrono::milliseconds(20),
                         [](TierIndex t) -> std::uint64_t { return t == 0 ? kBytes : 0; });
    auto pinned = alloc->allocate("pinned", kBytes);
    ASSERT_TRUE(pinned);
    ASSERT_EQ(pinned->tier, 0u);
    const ObjectId ids[] = {pinned->id};
    std::vector<PinnedObject> found(1);
    ASSERT_TRUE(alloc->pin(ids, found, std::chrono::seconds(1)));
    std::thread mover;
    if (held) {
      mover = std::thread([&] { EXPECT_TRUE(alloc->move(pinned->id, 1)); });
      while (alloc->moves_waiting_for_pins() == 0) std::this_thread::yield();
    }
    auto born = alloc->allocate("born", kBytes);  // as if inside the pinning layer
    ASSERT_TRUE(born) << born.status().to_string();
    EXPECT_EQ(born->tier, 1u);
    EXPECT_EQ(alloc->usage()[0].room_waits, held ? 0u : 1u);
    alloc->unpin(ids);  // the layer ends: the held move goes on
    if (mover.joinable()) mover.join();
    EXPECT_EQ(alloc->moves_waiting_for_pins(), 0u);
    EXPECT_EQ(alloc->info_by_id(pinned->id)->tier, held ? 1u : 0u);
    ASSERT_TRUE(alloc->free(pinned->address).is_ok());
    ASSERT_TRUE(alloc->free(born->address).is_ok());
    expect_all_released(*alloc);
  }
}

// Ready memory: a move into a planned place is a copy between two mapped ranges that publishes
// the new address; moves back and forth between a fast place and a home map nothing and fault
// nothing; a place still held refuses the move and the object stays whole where it was.
TEST(Places, AMoveIntoAPlaceCopiesAndPublishesTheNewAddress) {
  constexpr std::size_t kBytes = 3 << 20;
  for (const char* spec : {"fast=dram:16MiB,slow=dram:64MiB", "fast=dram:16MiB,slow=emulated:cxl:64MiB"}) {
    SCOPED_TRACE(spec);
    auto alloc = allocator_for(spec);
    ASSERT_NE(alloc, nullptr);
    auto fast = alloc->create_arena(0, 8 << 20);
    auto home = alloc->create_arena(1, 8 << 20);
    ASSERT_TRUE(fast && home);
    auto o = alloc->allocate("o", kBytes, kDefaultGroup, 1);
    ASSERT_TRUE(o);
    fill(o->address, kBytes, 5);
    const std::uint64_t relocations = alloc->relocations();
    MoveOptions into_fast;
    into_fast.place = Place{fast.value(), 4 << 20};
    auto in = alloc->move(o->id, 0, into_fast);
    ASSERT_TRUE(in) << in.status().to_string();
    EXPECT_EQ(in->method, MoveMethod::kCopy);
    EXPECT_TRUE(in->moved);
    EXPECT_NE(in->address, o->address);
    EXPECT_EQ(alloc->relocations(), relocations + 1);
    Result<ObjectInfo> now = alloc->info_by_id(o->id);
    EXPECT_EQ(now->arena, fast.value());
    EXPECT_EQ(now->tier, 0u);
    EXPECT_EQ(now->address, in->address);
    EXPECT_TRUE(holds(in->address, kBytes, 5));
    SpanView span;
    ASSERT_TRUE(alloc->lookup(static_cast<std::byte*>(in->address) + 100, &span));
    EXPECT_EQ(span.id, o->id);
    EXPECT_FALSE(alloc->lookup(o->address, &span)) << "the old range left the table";
    // Back and forth between the fast place and a home: no mapping call, no page fault.
    MoveOptions to_home;
    to_home.place = Place{home.value(), 0};
    ASSERT_TRUE(alloc->move(o->id, 1, to_home));
    const std::uint64_t calls = ObjectAllocator::mapping_calls();
    [[maybe_unused]] const long faults = testing::thread_page_faults();
    for (int round = 0; round < 4; ++round) {
      ASSERT_TRUE(alloc->move(o->id, 0, into_fast));
      ASSERT_TRUE(alloc->move(o->id, 1, to_home));
    }
    EXPECT_EQ(ObjectAllocator::mapping_calls(), calls);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    EXPECT_LT(testing::thread_page_faults() - faults, 8) << "both places' pages were in already";
#endif
    auto again = alloc->move(o->id, 1, to_home);
    ASSERT_TRUE(again);
    EXPECT_FALSE(again->moved) << "in its place already";
    EXPECT_TRUE(holds(alloc->info_by_id(o->id)->address, kBytes, 5));
    EXPECT_EQ(alloc->usage()[0].place_moves, 5u);
    EXPECT_EQ(alloc->usage()[1].place_moves, 5u);
    ASSERT_TRUE(alloc->free(alloc->info_by_id(o->id)->address).is_ok());
    ASSERT_TRUE(alloc->destroy_arena(fast.value()).is_ok());
    ASSERT_TRUE(alloc->destroy_arena(home.value()).is_ok());
    expect_all_released(*alloc);
  }
}

TEST(Places, APlaceStillHeldOrAFailedCopyLeavesTheObjectWhereItWas) {
  constexpr std::size_t kBytes = 2 << 20;
  auto alloc = allocator_for("fast=dram:16MiB,slow=dram:64MiB");
  ASSERT_NE(alloc, nullptr);
  auto fast = alloc->create_arena(0, 4 << 20);
  ASSERT_TRUE(fast);
  auto held = alloc->allocate_in_arena("held", kBytes, kDefaultGroup, 0, fast.value(), 0);
  auto o = alloc->allocate("o", kBytes, kDefaultGroup, 1);
  ASSERT_TRUE(held && o);
  fill(o->address, kBytes, 9);
  MoveOptions overlapping;
  overlapping.place = Place{fast.value(), 1 << 20};  // [1, 3) MiB: half over `held`
  auto refused = alloc->move(o->id, 0, overlapping);
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable) << refused.status().to_string();
  EXPECT_NE(refused.status().message().find("still holds"), std::string::npos) << refused.status().message();
  EXPECT_EQ(alloc->info_by_id(o->id)->address, o->address);
  EXPECT_TRUE(holds(o->address, kBytes, 9));
  // Wrong tier, past the end: refused as bad arguments.
  MoveOptions past;
  past.place = Place{fast.value(), 3 << 20};
  EXPECT_EQ(alloc->move(o->id, 0, past).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(alloc->move(o->id, 1, overlapping).status().code(), StatusCode::kInvalidArgument);
  // An injected failure after the copy: the object stays, and the place is free again.
  alloc->set_move_failure_hook([](ObjectId, TierIndex) { return true; });
  MoveOptions free_place;
  free_place.place = Place{fast.value(), 2 << 20};
  EXPECT_EQ(alloc->move(o->id, 0, free_place).status().code(), StatusCode::kInternal);
  EXPECT_EQ(alloc->info_by_id(o->id)->address, o->address);
  EXPECT_TRUE(holds(o->address, kBytes, 9));
  alloc->set_move_failure_hook({});
  auto taken = alloc->allocate_in_arena("next", kBytes, kDefaultGroup, 0, fast.value(), 2 << 20);
  ASSERT_TRUE(taken) << "the failed move gave its place back: " << taken.status().to_string();
  EXPECT_GE(alloc->usage()[0].place_misses, 1u);
  for (const void* p : {held->address, o->address, taken->address}) ASSERT_TRUE(alloc->free(p).is_ok());
  ASSERT_TRUE(alloc->destroy_arena(fast.value()).is_ok());
}

// With shadows on, an object moved from its home into a fast place keeps its home (and its bytes
// there) until something writes it: moving it home again copies nothing, and nothing else takes
// the home meanwhile; after a write (drop_shadows) the way home copies.
TEST(Places, AnUnwrittenObjectGoesHomeWithoutACopy) {
  constexpr std::size_t kBytes = 2 << 20;
  auto alloc = allocator_for("fast=dram:16MiB,slow=emulated:cxl:64MiB");
  ASSERT_NE(alloc, nullptr);
  alloc->set_keep_shadows(true);
  auto fast = alloc->create_arena(0, 4 << 20);
  auto home = alloc->create_arena(1, 4 << 20);
  ASSERT_TRUE(fast && home);
  auto o = alloc->allocate_in_arena("o", kBytes, kDefaultGroup, 0, home.value(), 0);
  ASSERT_TRUE(o);
  fill(o->address, kBytes, 6);
  MoveOptions in, out;
  in.place = Place{fast.value(), 0};
  out.place = Place{home.value(), 0};
  auto moved_in = alloc->move(o->id, 0, in);
  ASSERT_TRUE(moved_in) << moved_in.status().to_string();
  EXPECT_FALSE(moved_in->clean);
  EXPECT_EQ(alloc->allocate_in_arena("x", kBytes, kDefaultGroup, 0, home.value(), 0).status().code(),
            StatusCode::kUnavailable)
      << "its home is kept while it holds its bytes";
  auto clean_out = alloc->move(o->id, 1, out);
  ASSERT_TRUE(clean_out) << clean_out.status().to_string();
  EXPECT_TRUE(clean_out->clean) << "unwritten: its home holds its bytes";
  EXPECT_EQ(clean_out->address, o->address);
  EXPECT_TRUE(holds(o->address, kBytes, 6));
  EXPECT_EQ(alloc->usage()[1].clean_moves, 1u);
  // In again, written (its shadow dropped first, as the runtime does for a layer's writes), out.
  ASSERT_TRUE(alloc->move(o->id, 0, in));
  const ObjectId id = o->id;
  alloc->drop_shadows(std::span<const ObjectId>(&id, 1));
  void* at = alloc->info_by_id(id)->address;
  fill(at, kBytes, 8);
  auto copied_out = alloc->move(id, 1, out);
  ASSERT_TRUE(copied_out);
  EXPECT_FALSE(copied_out->clean);
  EXPECT_TRUE(holds(copied_out->address, kBytes, 8)) << "the write went home with it";
  ASSERT_TRUE(alloc->free(copied_out->address).is_ok());
  ASSERT_TRUE(alloc->destroy_arena(fast.value()).is_ok());
  ASSERT_TRUE(alloc->destroy_arena(home.value()).is_ok()) << "the home's entry went with the object";
}

// Moves in place (no place given) remap and unmap pages: the allocator's count of mapping calls
// sees each one, as it sees none for moves between places (above).
TEST(Places, MovesInPlaceMakeMappingCalls) {
  constexpr std::size_t kBytes = 2 << 20;
  auto alloc = allocator_for("fast=dram:16MiB,slow=dram:64MiB");
  ASSERT_NE(alloc, nullptr);
  auto o = alloc->allocate("o", kBytes, kDefaultGroup, 1);
  ASSERT_TRUE(o);
  fill(o->address, kBytes, 2);
  for (TierIndex to : {TierIndex{0}, TierIndex{1}}) {
    const std::uint64_t calls = ObjectAllocator::mapping_calls();
    auto moved = alloc->move(o->id, to);
    ASSERT_TRUE(moved) << moved.status().to_string();
    EXPECT_EQ(moved->method, MoveMethod::kRemap);
    EXPECT_GT(ObjectAllocator::mapping_calls(), calls) << "to tier " << to;
  }
  EXPECT_TRUE(holds(o->address, kBytes, 2));
  ASSERT_TRUE(alloc->free(o->address).is_ok());
}

// A birth planned into the place of an object on its way out waits for it to leave.
// An address read before a move is another object's after it, once a new object is born in the
// place the first left: freeing by id frees the object meant, wherever it is now; the stale
// address frees the newcomer, which is why the DNN engine's tensors free by id.
TEST(Places, FreeingByIdFreesTheObjectWhereverAMoveTookIt) {
  constexpr std::size_t kBytes = 1 << 20;
  auto alloc = allocator_for("fast=dram:16MiB,slow=dram:64MiB");
  ASSERT_NE(alloc, nullptr);
  auto fast = alloc->create_arena(0, 4 << 20);
  auto home = alloc->create_arena(1, 4 << 20);
  ASSERT_TRUE(fast && home);
  auto leaving = alloc->allocate_in_arena("leaving", kBytes, kDefaultGroup, 0, fast.value(), 0);
  ASSERT_TRUE(leaving);
  const void* stale = leaving->address;
  MoveOptions out;
  out.place = Place{home.value(), 0};
  ASSERT_TRUE(alloc->move(leaving->id, 1, out));
  auto newcomer = alloc->allocate_in_arena("newcomer", kBytes, kDefaultGroup, 0, fast.value(), 0);
  ASSERT_TRUE(newcomer);
  ASSERT_EQ(newcomer->address, stale) << "the newcomer takes the place the first left";
  ASSERT_TRUE(alloc->free(leaving->id).is_ok());
  EXPECT_FALSE(alloc->info_by_id(leaving->id)) << "freed where it lives now";
  EXPECT_TRUE(alloc->info_by_id(newcomer->id)) << "the newcomer is untouched";
  EXPECT_EQ(alloc->free(leaving->id).code(), StatusCode::kNotFound) << "freed twice";
  ASSERT_TRUE(alloc->free(newcomer->id).is_ok());
  ASSERT_TRUE(alloc->destroy_arena(fast.value()).is_ok());
  ASSERT_TRUE(alloc->destroy_arena(home.value()).is_ok());
  expect_all_released(*alloc);
}

// close_arena: an empty arena goes at once; one with objects in it takes no new object (births
// and moves into its places refuse) and goes back to its tier when the last one leaves.
TEST(Places, AClosingArenaTakesNoneAndGoesWithItsLastObject) {
  constexpr std::size_t kBytes = 1 << 20;
  auto alloc = allocator_for("fast=dram:16MiB,slow=dram:64MiB");
  ASSERT_NE(alloc, nullptr);
  auto empty = alloc->create_arena(0, 4 << 20);
  ASSERT_TRUE(empty);
  Result<std::size_t> left = alloc->close_arena(empty.value());
  ASSERT_TRUE(left);
  EXPECT_EQ(left.value(), 0u);
  EXPECT_EQ(alloc->close_arena(empty.value()).status().code(), StatusCode::kNotFound) << "gone already";
  auto arena = alloc->create_arena(0, 4 << 20);
  ASSERT_TRUE(arena);
  auto stays = alloc->allocate_in_arena("stays", kBytes, kDefaultGroup, 0, arena.value(), 0);
  ASSERT_TRUE(stays);
  fill(stays->address, kBytes, 9);
  const std::uint64_t cached = alloc->usage()[0].cached_bytes;
  left = alloc->close_arena(arena.value());
  ASSERT_TRUE(left);
  EXPECT_EQ(left.value(), 1u);
  EXPECT_FALSE(alloc->allocate_in_arena("late", kBytes, kDefaultGroup, 0, arena.value(), 2 << 20))
      << "no birth in a closing arena";
  auto other = alloc->allocate("other", kBytes, kDefaultGroup, 1);
  ASSERT_TRUE(other);
  MoveOptions into;
  into.place = Place{arena.value(), 2 << 20};
  EXPECT_FALSE(alloc->move(other->id, 0, into)) << "no move into a closing arena";
  EXPECT_EQ(alloc->info_by_id(other->id)->tier, 1u);
  EXPECT_TRUE(holds(stays->address, kBytes, 9)) << "its object stays whole";
  EXPECT_EQ(alloc->usage()[0].cached_bytes, cached) << "the arena's range is still taken";
  ASSERT_TRUE(alloc->free(stays->id).is_ok());
  EXPECT_EQ(alloc->usage()[0].cached_bytes, cached + (4 << 20)) << "back to the tier with its last object";
  EXPECT_EQ(alloc->destroy_arena(arena.value()).code(), StatusCode::kNotFound);
  ASSERT_TRUE(alloc->free(other->id).is_ok());
  expect_all_released(*alloc);
}

TEST(Places, ABirthWaitsForItsPlacesOccupantToLeave) {
  constexpr std::size_t kBytes = 8 << 20;  // out to emulated optane-server: several ms
  auto alloc = allocator_for("fast=dram:32MiB,slow=emulated:optane-server:64MiB");
  ASSERT_NE(alloc, nullptr);
  auto fast = alloc->create_arena(0, kBytes);
  ASSERT_TRUE(fast);
  auto old = alloc->allocate_in_arena("old", kBytes, kDefaultGroup, 0, fast.value(), 0);
  ASSERT_TRUE(old);
  fill(old->address, kBytes, 4);
  EXPECT_EQ(alloc->allocate_in_arena("now", kBytes, kDefaultGroup, 0, fast.value(), 0).status().code(),
            StatusCode::kUnavailable)
      << "no wait asked: refused at once";
  std::thread mover([&] { ASSERT_TRUE(alloc->move(old->id, 1)); });
  while (alloc->usage()[0].leaving_bytes == 0) std::this_thread::yield();  // copying now
  auto born =
      alloc->allocate_in_arena("born", kBytes, kDefaultGroup, 0, fast.value(), 0, std::chrono::seconds(30));
  mover.join();
  ASSERT_TRUE(born) << born.status().to_string();
  EXPECT_EQ(born->address, old->address) << "the place the old object left";
  EXPECT_EQ(alloc->usage()[0].place_waits, 1u);
  const void* old_now = alloc->info_by_id(old->id)->address;
  EXPECT_TRUE(holds(old_now, kBytes, 4));
  ASSERT_TRUE(alloc->free(old_now).is_ok());
  ASSERT_TRUE(alloc->free(born->address).is_ok());
  ASSERT_TRUE(alloc->destroy_arena(fast.value()).is_ok());
}

std::unique_ptr<Runtime> runtime_for(const std::string& spec) {
  RuntimeOptions options(spec);
  options.profile.enabled = false;
  auto rt = Runtime::create(options);
  EXPECT_TRUE(rt) << rt.status().to_string();
  return rt ? std::move(rt).value() : nullptr;
}

TEST(Keys, StepsOfOneKindGiveTheirObjectsTheSameKeys) {
  auto rt = runtime_for("fast=dram:64MiB");
  ASSERT_NE(rt, nullptr);
  auto weights = rt->allocate("w", 1 << 16);
  ASSERT_TRUE(weights);
  EXPECT_EQ(weights->key, weights->id);  // outside steps: the id
  std::vector<std::vector<ObjectKey>> keys(2);
  for (int step = 0; step < 2; ++step) {
    ASSERT_TRUE(rt->step_begin().is_ok());
    std::vector<void*> made;
    for (std::size_t bytes : {100, 5000, 1 << 20}) {
      auto o = rt->allocate(".out.grad", bytes);  // names repeat; keys do not
      ASSERT_TRUE(o);
      EXPECT_TRUE(is_step_key(o->key));
      keys[static_cast<std::size_t>(step)].push_back(o->key);
      made.push_back(o->address);
    }
    for (void* p : made) ASSERT_TRUE(rt->free(p).is_ok());
    ASSERT_TRUE(rt->step_end().is_ok());
  }
  EXPECT_EQ(keys[0], keys[1]);
  EXPECT_EQ(keys[0], (std::vector<ObjectKey>{step_key(0), step_key(1), step_key(2)}));
  // Another thread's allocation inside a step is not the step's: keyed by its id.
  ASSERT_TRUE(rt->step_begin().is_ok());
  ObjectInfo other;
  std::thread([&] { other = rt->allocate("other", 64).value(); }).join();
  EXPECT_EQ(other.key, other.id);
  ASSERT_TRUE(rt->step_end().is_ok());
}

// Records every event it sees.
struct Recorder : StepObserver {
  std::vector<std::string> events;
  void on_step_begin(std::uint64_t step) override { events.push_back(fmt::format("step {}", step)); }
  void on_step_end(const StepEndEvent& e) override { events.push_back(fmt::format("end {}", e.step)); }
  void on_layer_begin(const LayerEvent& e) override {
    events.push_back(fmt::format("layer {} {} r{} w{}", e.index, e.name, e.reads.size(), e.writes.size()));
  }
  void on_layer_end(const LayerEndEvent& e) override {
    events.push_back(fmt::format("layer_end {}", e.index));
  }
  void on_allocate(const ObjectInfo& o, const SpanView&) override { events.push_back("alloc " + o.name); }
  void on_free(ObjectId, const SpanView&) override { events.push_back("free"); }
  void on_move(const MoveResult& m) override { events.push_back(fmt::format("move {}->{}", m.from, m.to)); }
};

// Host code outside the layer marks (a data loader between steps) writes an object while a mover
// thread keeps moving it: with pin_objects around each write, no write is lost.
TEST(Move, HostWritesUnderPinObjectsAreNeverLostToAMove) {
  // A pin waits for a move in flight at most layer_move_wait and then lets the copy run on beside
  // the writer (the move then fails): a race by design, which ThreadSanitizer would report on a
  // slow run. The bound here is long enough that every pin waits the copy out.
  RuntimeOptions options("fast=dram:64MiB,slow=emulated:cxl:64MiB");
  options.profile.enabled = false;
  options.layer_move_wait = std::chrono::seconds(30);
  auto created = Runtime::create(options);
  ASSERT_TRUE(created) << created.status().to_string();
  auto rt = std::move(created).value();
  constexpr std::size_t kBytes = 4 << 20;
  auto obj = rt->allocate("batch", kBytes);
  ASSERT_TRUE(obj);
  std::atomic<bool> stop{false};
  std::atomic<int> moves{0};
  std::thread mover([&] {
    for (TierIndex to = 1; !stop.load(); to ^= 1U) {
      if (auto m = rt->move(obj->id, to); m && m->moved) moves.fetch_add(1);
    }
  });
  const ObjectId id = obj->id;
  void* address = nullptr;
  int lost = 0;
  for (int round = 1; round <= 200; ++round) {
    ASSERT_TRUE(rt->pin_objects(std::span<const ObjectId>(&id, 1), std::span<void*>(&address, 1)).is_ok());
    // What the last round wrote must still be there, whatever moved since.
    const auto* now = static_cast<const unsigned char*>(address);
    if (round > 1 && (now[0] != static_cast<unsigned char>(round - 1) || now[kBytes - 1] != now[0])) ++lost;
    std::memset(address, round, kBytes);
    rt->unpin_objects(std::span<const ObjectId>(&id, 1));
    std::this_thread::sleep_for(std::chrono::microseconds(200));  // room for a move to commit
  }
  stop = true;
  mover.join();
  EXPECT_GT(moves.load(), 0);
  const auto* bytes = static_cast<const unsigned char*>(rt->address_of(id).value());
  EXPECT_EQ(lost, 0) << "rounds that found the previous round's write lost";
  for (std::size_t i = 0; i < kBytes; i += 4096)
    ASSERT_EQ(bytes[i], 200) << "byte " << i << ": a write was lost";
  std::vector<void*> none(2);
  EXPECT_FALSE(rt->pin_objects(std::span<const ObjectId>(&id, 1), none).is_ok())
      << "two addresses for one object";
}

TEST(Observers, SeeStepsLayersAllocationsFreesAndMoves) {
  auto rt = runtime_for("fast=dram:64MiB,slow=emulated:cxl:64MiB");
  ASSERT_NE(rt, nullptr);
  Recorder rec;
  ASSERT_TRUE(rt->add_observer(&rec).is_ok());
  ASSERT_TRUE(rt->step_begin().is_ok());
  auto a = rt->allocate("a", 8192);
  ASSERT_TRUE(a);
  const void* reads[] = {a->address};
  ASSERT_TRUE(rt->layer_begin("l0", reads, {}).is_ok());
  ASSERT_TRUE(rt->layer_end().is_ok());
  ASSERT_TRUE(rt->move(a->address, 1));
  auto again = rt->move(a->address, 1);  // there already: no move, no event, not counted
  ASSERT_TRUE(again);
  EXPECT_FALSE(again->moved);
  EXPECT_EQ(rt->stats().moves, 1u);
  ASSERT_TRUE(rt->free(a->address).is_ok());
  ASSERT_TRUE(rt->step_end().is_ok());
  rt->remove_observer(&rec);
  ASSERT_TRUE(rt->step_begin().is_ok());
  ASSERT_TRUE(rt->step_end().is_ok());
  EXPECT_EQ(rec.events, (std::vector<std::string>{"step 0", "alloc a", "layer 0 l0 r1 w0", "layer_end 0",
                                                  "move 0->1", "free", "end 0"}));
}

TEST(Pins, ALayerGetsCurrentAddressesAndItsObjectsDoNotMoveUntilItEnds) {
  TempDir dir;
  auto rt = runtime_for(fmt::format("fast=dram:64MiB,heap=pmem:{}:64MiB", dir.path()));
  ASSERT_NE(rt, nullptr);
  auto a = rt->allocate("a", 1 << 20);
  ASSERT_TRUE(a);
  fill(a->address, 1 << 20, 6);
  const std::uint64_t relocations = rt->relocations();
  auto moved = rt->move(a->id, 1);  // to a memkind heap: a new address
  ASSERT_TRUE(moved);
  EXPECT_NE(moved->address, a->address);
  EXPECT_EQ(rt->relocations(), relocations + 1);
  ASSERT_TRUE(rt->step_begin().is_ok());
  const ObjectId reads[] = {a->id};
  void* addresses[1] = {};
  ASSERT_TRUE(rt->layer_begin("use", reads, {}, addresses).is_ok());
  EXPECT_EQ(addresses[0], moved->address);
  EXPECT_TRUE(holds(addresses[0], 1 << 20, 6));
  // Pinned: a move from another thread waits until layer_end.
  std::atomic<bool> done{false};
  std::thread mover([&] {
    EXPECT_TRUE(rt->move(a->id, 0));
    done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_FALSE(done.load());
  EXPECT_EQ(rt->object(a->id)->tier, 1u);
  ASSERT_TRUE(rt->layer_end().is_ok());
  mover.join();
  EXPECT_EQ(rt->object(a->id)->tier, 0u);
  EXPECT_TRUE(holds(rt->address_of(a->id).value(), 1 << 20, 6));
  ASSERT_TRUE(rt->step_end().is_ok());
}

TEST(Pins, NoMoveDuringAProfiledStep) {
  RuntimeOptions options("fast=dram:64MiB,slow=emulated:cxl:64MiB");
  options.profile.step = 0;
  options.profile.counters = false;
  auto rt = Runtime::create(options);
  ASSERT_TRUE(rt);
  auto a = rt.value()->allocate("a", 1 << 20);
  ASSERT_TRUE(a);
  ASSERT_TRUE(rt.value()->step_begin().is_ok());  // profiled (step 0 of its run)
  auto moved = rt.value()->move(a->id, 1);
  ASSERT_FALSE(moved);
  EXPECT_NE(moved.status().message().find("a step is being profiled"), std::string::npos);
  ASSERT_TRUE(rt.value()->step_end().is_ok());
  EXPECT_TRUE(rt.value()->move(a->id, 1));
}

// A layer that reads and writes one object on the emulated tier is charged what the model
// predicts for its declared bytes, on that tier alone, and waits at least that long. (How close
// its measured time comes to the model is a timing: bench_allocator's BM_SlowLayerCharge.)
TEST(Emulation, SlowTierLayersAreChargedWhatTheModelPredicts) {
  auto rt = runtime_for("fast=dram:256MiB,slow=emulated:optane-server:256MiB");
  ASSERT_NE(rt, nullptr);
  const std::size_t bytes = 16 << 20;
  auto a = rt->allocate("a", bytes);
  ASSERT_TRUE(a);
  auto run_layer = [&] {
    ASSERT_TRUE(rt->step_begin().is_ok());
    const ObjectId ids[] = {a->id};
    void* addresses[2] = {};
    ASSERT_TRUE(rt->layer_begin("rw", ids, ids, addresses).is_ok());
    auto* p = static_cast<float*>(addresses[0]);
    for (std::size_t i = 0; i < bytes / sizeof(float); i += 1024) p[i] = p[i] * 0.5F + 1.0F;
    ASSERT_TRUE(rt->layer_end().is_ok());
    ASSERT_TRUE(rt->step_end().is_ok());
  };
  for (int i = 0; i < 3; ++i) run_layer();  // on DRAM: no charge
  EXPECT_EQ(rt->stats().emulated_charge_ns, 0u);
  EXPECT_EQ(rt->stats().last_step_slow_bytes, 0u);
  ASSERT_TRUE(rt->move(a->id, 1));
  for (int i = 0; i < 5; ++i) run_layer();
  const CostModel& model = *rt->tier(1).cost_model();
  const std::uint64_t predicted = model.layer_charge_ns(bytes, bytes);
  ASSERT_GT(predicted, 0u);
  const RuntimeStats stats = rt->stats();
  EXPECT_EQ(stats.tier_emulated_charge_ns[1], 5 * predicted) << "the model's charge, booked on its tier";
  EXPECT_EQ(stats.tier_emulated_charge_ns[0], 0u);
  EXPECT_EQ(stats.last_step_slow_bytes, 2 * bytes) << "a read and a write of the object, declared";
  // A wait lasts at least what it waits for: the layer's charged time is never short of the model's.
  EXPECT_GE(stats.last_step_emulated_charge_ns, predicted);
  EXPECT_EQ(rt->last_step_layers()[0].emulated_charge_ns, stats.last_step_emulated_charge_ns);
}

TEST(CApi, MovesAnObjectAndReportsItsTier) {
  tt_runtime* rt = nullptr;
  ASSERT_EQ(tt_runtime_create("fast=dram:64MiB,slow=emulated:cxl:64MiB", &rt), TT_OK) << tt_last_error();
  void* p = nullptr;
  ASSERT_EQ(tt_alloc(rt, "x", 1 << 20, 0, &p), TT_OK);
  fill(p, 1 << 20, 8);
  void* now = nullptr;
  ASSERT_EQ(tt_move(rt, p, 1, &now), TT_OK) << tt_last_error();
  EXPECT_EQ(now, p);  // in place
  EXPECT_TRUE(holds(now, 1 << 20, 8));
  uint32_t tier = 9;
  ASSERT_EQ(tt_object_tier(rt, now, &tier), TT_OK);
  EXPECT_EQ(tier, 1u);
  EXPECT_EQ(tt_move(rt, p, 7, &now), TT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tt_last_error()).find("tier 7 does not exist"), std::string::npos);
  EXPECT_EQ(tt_free(rt, p), TT_OK);
  tt_runtime_destroy(rt);
}

// A mover thread moves objects between the tiers at random while the training thread runs
// layers that check and rewrite their bytes: no layer ever sees a torn or stale object.
TEST(MoverThread, RacesTheTrainingThreadWithoutLosingAByte) {
  auto rt = runtime_for("fast=dram:64MiB,slow=emulated:cxl:128MiB");
  ASSERT_NE(rt, nullptr);
  constexpr int kObjects = 8;
  const std::size_t bytes = 256 << 10;
  std::vector<ObjectInfo> objects;
  for (int i = 0; i < kObjects; ++i) {
    auto o = rt->allocate(fmt::format("o{}", i), bytes);
    ASSERT_TRUE(o);
    fill(o->address, bytes, static_cast<unsigned>(i));
    objects.push_back(o.value());
  }
  std::atomic<bool> stop{false};
  std::atomic<int> moves{0};
  std::thread mover([&] {
    std::mt19937 rng(1);
    while (!stop.load()) {
      const ObjectInfo& o = objects[rng() % kObjects];
      if (rt->move(o.id, rng() % 2)) ++moves;
    }
  });
  std::vector<unsigned> seeds(kObjects);
  std::iota(seeds.begin(), seeds.end(), 0U);
  bool all_good = true;
  for (int step = 0; step < 30 && all_good; ++step) {
    ASSERT_TRUE(rt->step_begin().is_ok());
    for (int i = 0; i < kObjects; ++i) {
      const ObjectId ids[] = {objects[static_cast<std::size_t>(i)].id};
      void* addresses[2] = {};
      ASSERT_TRUE(rt->layer_begin("touch", ids, ids, addresses).is_ok());
      all_good = all_good && holds(addresses[0], bytes, seeds[static_cast<std::size_t>(i)]);
      seeds[static_cast<std::size_t>(i)] += 1;
      fill(addresses[0], bytes, seeds[static_cast<std::size_t>(i)]);
      ASSERT_TRUE(rt->layer_end().is_ok());
    }
    ASSERT_TRUE(rt->step_end().is_ok());
  }
  stop = true;
  mover.join();
  EXPECT_TRUE(all_good);
  EXPECT_GT(moves.load(), 0);
  const RuntimeStats stats = rt->stats();
  std::uint64_t live = 0;
  for (const TierUsage& u : stats.tiers) live += u.live_bytes;
  EXPECT_EQ(live, kObjects * bytes);
}

// Segments: a large object's 2 MiB segments placed apart (page-granular tiering).
TEST(Segments, MoveOneByOneKeepingTheBytesTheBudgetsAndTheCounts) {
  // Both in-place methods: copy + mremap (dram/emulated) and move_pages (numa/numa).
  for (const char* spec :
       {"fast=dram:64MiB,slow=emulated:cxl:64MiB", "fast=numa:0:64MiB,slow=numa:0:64MiB"}) {
    SCOPED_TRACE(spec);
    auto alloc = allocator_for(spec);
    ASSERT_NE(alloc, nullptr);
    const std::size_t bytes = (5 << 20) + 100;  // segments of 2 MiB, 2 MiB and 1 MiB + 4 KiB
    auto obj = alloc->allocate("x", bytes, kDefaultGroup, 1);
    ASSERT_TRUE(obj) << obj.status().to_string();
    fill(obj->address, bytes, 3);
    MoveOptions second;
    second.segment = 1;
    auto moved = alloc->move(obj->id, 0, second);
    ASSERT_TRUE(moved) << moved.status().to_string();
    EXPECT_TRUE(moved->moved);
    EXPECT_EQ(moved->bytes, kSegmentBytes);
    EXPECT_EQ(moved->address, obj->address);
    EXPECT_TRUE(holds(obj->address, bytes, 3));
    auto info = alloc->info_by_id(obj->id);
    ASSERT_TRUE(info);
    EXPECT_EQ(info->tier, 1u);  // its first segment's
    EXPECT_EQ(info->bytes_by_tier, (std::vector<std::uint64_t>{kSegmentBytes, bytes - kSegmentBytes}));
    EXPECT_EQ(info->segment_tiers, (std::vector<TierIndex>{1, 0, 1}));
    auto usage = alloc->usage();
    EXPECT_EQ(usage[0].live_bytes, kSegmentBytes);
    EXPECT_EQ(usage[1].live_bytes, bytes - kSegmentBytes);
    EXPECT_EQ(usage[0].mapped_bytes, kSegmentBytes);
    EXPECT_EQ(usage[0].live_objects, 0u);
    EXPECT_EQ(usage[0].moves_in, 1u);
    EXPECT_EQ(usage[1].bytes_moved_out, kSegmentBytes);
    // A layer's pin sees where all of it is.
    std::vector<PinnedObject> pinned(1);
    const ObjectId ids[] = {obj->id};
    ASSERT_TRUE(alloc->pin(ids, pinned, std::chrono::seconds(1)));
    EXPECT_EQ(pinned[0].bytes_by_tier, info->bytes_by_tier);
    alloc->unpin(ids);
    // The first and the short last: all of it fast, segment by segment.
    for (std::uint32_t k : {0U, 2U}) {
      MoveOptions one;
      one.segment = k;
      ASSERT_TRUE(alloc->move(obj->id, 0, one));
    }
    info = alloc->info_by_id(obj->id);
    EXPECT_EQ(info->tier, 0u);
    EXPECT_EQ(info->bytes_by_tier, (std::vector<std::uint64_t>{bytes, 0}));
    usage = alloc->usage();
    EXPECT_EQ(usage[0].live_objects, 1u);
    EXPECT_EQ(usage[0].mapped_bytes, round_up(bytes, kPageBytes));
    EXPECT_TRUE(holds(obj->address, bytes, 3));
    // Moved there again: nothing to do.
    MoveOptions first;
    first.segment = 0;
    auto again = alloc->move(obj->id, 0, first);
    ASSERT_TRUE(again);
    EXPECT_FALSE(again->moved);
    // A whole move of a split object: its segments one by one.
    auto back = alloc->move(obj->id, 1);
    ASSERT_TRUE(back) << back.status().to_string();
    EXPECT_TRUE(back->moved);
    EXPECT_EQ(back->bytes, round_up(bytes, kPageBytes));
    EXPECT_TRUE(holds(obj->address, bytes, 3));
    usage = alloc->usage();
    EXPECT_EQ(usage[0].live_bytes, 0u);
    EXPECT_EQ(usage[1].live_bytes, bytes);
    // Freed: each segment's pages go back to their tier; nothing leaks.
    ASSERT_TRUE(alloc->free(obj->address).is_ok());
    usage = alloc->usage();
    EXPECT_EQ(usage[0].live_bytes + usage[1].live_bytes, 0u);
    EXPECT_EQ(usage[0].live_objects + usage[1].live_objects, 0u);
    expect_all_released(*alloc);
  }
}

// A split object's pages go back to their tiers as segments; the next object of its size is
// made of them (mremap, no page faulted in), though the budget has room for a new range.
TEST(Segments, ASplitObjectsPagesServeTheNextObjectOfItsSize) {
  auto alloc = allocator_for("fast=dram:64MiB,slow=emulated:cxl:256MiB");
  ASSERT_NE(alloc, nullptr);
  const std::size_t bytes = 6 << 20;
  auto obj = alloc->allocate("x", bytes, kDefaultGroup, 1);
  ASSERT_TRUE(obj);
  MoveOptions second;
  second.segment = 1;
  ASSERT_TRUE(alloc->move(obj->id, 0, second));  // its old pages: a piece cached on 'slow' ...
  ASSERT_TRUE(alloc->move(obj->id, 1, second));  // ... taken back; its fast pages a piece on 'fast'
  ASSERT_TRUE(alloc->free(obj->address).is_ok());
  const auto before = alloc->usage();
  EXPECT_EQ(before[1].cached_bytes, bytes);  // its three segments
  EXPECT_EQ(before[0].cached_bytes, kSegmentBytes);
  auto next = alloc->allocate("y", bytes, kDefaultGroup, 1);
  ASSERT_TRUE(next);
  const auto after = alloc->usage();
  EXPECT_EQ(after[1].new_ranges, before[1].new_ranges) << "a new range faulted in beside cached segments";
  EXPECT_EQ(after[1].assembled_ranges, before[1].assembled_ranges + 1);
  EXPECT_EQ(after[1].cached_bytes, 0u);
  fill(next->address, bytes, 4);
  EXPECT_TRUE(holds(next->address, bytes, 4));
  ASSERT_TRUE(alloc->free(next->address).is_ok());
  expect_all_released(*alloc);
}

TEST(Segments, RefusalsAndFailuresLeaveTheObjectAsItWas) {
  TempDir dir;
  auto alloc =
      allocator_for(fmt::format("fast=dram:4MiB,slow=emulated:cxl:64MiB,p=pmem:{}:64MiB", dir.path()));
  ASSERT_NE(alloc, nullptr);
  auto big = alloc->allocate("big", 6 << 20, kDefaultGroup, 1);
  auto small = alloc->allocate("small", 100, kDefaultGroup, 1);
  ASSERT_TRUE(big && small);
  fill(big->address, 6 << 20, 5);
  auto attempt = [&](ObjectId id, TierIndex to, std::uint32_t segment) {
    MoveOptions options;
    options.segment = segment;
    return alloc->move(id, to, options);
  };
  auto no_segment = attempt(big->id, 0, 3);
  ASSERT_FALSE(no_segment);
  EXPECT_EQ(no_segment.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(no_segment.status().message().find("3 segments"), std::string::npos)
      << no_segment.status().message();
  auto of_small = attempt(small->id, 0, 0);
  ASSERT_FALSE(of_small);
  EXPECT_EQ(of_small.status().code(), StatusCode::kInvalidArgument);
  auto to_pmem = attempt(big->id, 2, 0);  // a memkind heap: only to a new address
  ASSERT_FALSE(to_pmem);
  EXPECT_EQ(to_pmem.status().code(), StatusCode::kFailedPrecondition);
  // Two segments fit the 4 MiB fast tier, a third does not.
  ASSERT_TRUE(attempt(big->id, 0, 0));
  ASSERT_TRUE(attempt(big->id, 0, 1));
  auto no_room = attempt(big->id, 0, 2);
  ASSERT_FALSE(no_room);
  EXPECT_EQ(no_room.status().code(), StatusCode::kOutOfMemory);
  EXPECT_NE(no_room.status().message().find("it stays on 'slow'"), std::string::npos)
      << no_room.status().message();
  // A whole move that cannot finish says how far it got.
  auto whole = alloc->move(big->id, 0);
  ASSERT_FALSE(whole);
  EXPECT_NE(whole.status().message().find("2 of its 3 segments"), std::string::npos)
      << whole.status().message();
  // An injected failure: the segment stays.
  alloc->set_move_failure_hook([](ObjectId, TierIndex) { return true; });
  const auto before = alloc->usage();
  auto injected = attempt(big->id, 1, 1);
  ASSERT_FALSE(injected);
  EXPECT_NE(injected.status().message().find("injected failure; it stays on 'fast'"), std::string::npos)
      << injected.status().message();
  const auto after = alloc->usage();
  for (std::size_t t = 0; t < after.size(); ++t) {
    EXPECT_EQ(after[t].live_bytes, before[t].live_bytes) << t;
    EXPECT_EQ(after[t].in_flight_bytes, 0u) << t;
  }
  EXPECT_EQ(alloc->info_by_id(big->id)->bytes_by_tier, (std::vector<std::uint64_t>{4 << 20, 2 << 20, 0}));
  EXPECT_TRUE(holds(big->address, 6 << 20, 5));
  // Freed while a segment moves: released when the move ends, on every tier.
  void* address = big->address;
  ObjectAllocator* raw = alloc.get();
  alloc->set_move_failure_hook([&](ObjectId, TierIndex) {
    EXPECT_TRUE(raw->free(address).is_ok());
    return false;
  });
  auto freed = attempt(big->id, 1, 0);
  ASSERT_FALSE(freed);
  EXPECT_NE(freed.status().message().find("freed while moving"), std::string::npos)
      << freed.status().message();
  alloc->set_move_failure_hook({});
  ASSERT_TRUE(alloc->free(small->address).is_ok());
  const auto usage = alloc->usage();
  for (const TierUsage& u : usage) {
    EXPECT_EQ(u.live_bytes, 0u) << u.name;
    EXPECT_EQ(u.live_objects, 0u) << u.name;
  }
  expect_all_released(*alloc);
}

}  // namespace
}  // namespace tensortier
