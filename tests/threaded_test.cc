// The threaded parts, run under ThreadSanitizer in CI: concurrent allocate/free from several
// threads, lock-free lookups racing writers, tier budgets under contention, the profiler's fault
// tracking with faults on several threads while a sampler re-protects pages, fork, and a stress
// test of helpers allocating, moving and freeing beside profiled steps.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tensortier/allocator/object_allocator.h"
#include "tensortier/profiler/fault_tracker.h"
#include "tensortier/runtime.h"

namespace tensortier {
namespace {

TEST(Threaded, ConcurrentAllocateAndFreeKeepAccountsExact) {
  auto rt = Runtime::create({"fast=emulated:optane:32MiB,slow=emulated:optane:512MiB"});
  ASSERT_TRUE(rt) << rt.status().to_string();
  Runtime& runtime = *rt.value();
  constexpr int kThreads = 4;
  constexpr int kRounds = 300;
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      std::vector<std::pair<void*, std::size_t>> mine;
      for (int i = 0; i < kRounds; ++i) {
        const std::size_t bytes = (rng() % 3 == 0) ? 1 + rng() % 3000 : 4096 * (1 + rng() % 300);
        auto info = runtime.allocate("obj", bytes, static_cast<GroupId>(t));
        if (!info) {
          ++errors;
          continue;
        }
        std::memset(info->address, t + 1, bytes);
        mine.emplace_back(info->address, bytes);
        if (rng() % 2 == 0) {
          auto [p, n] = mine.back();
          mine.pop_back();
          for (std::size_t k = 0; k < n; k += 512) {
            if (static_cast<unsigned char*>(p)[k] != t + 1) ++errors;  // someone wrote our bytes
          }
          if (!runtime.free(p).is_ok()) ++errors;
        }
      }
      for (auto [p, n] : mine) {
        if (!runtime.free(p).is_ok()) ++errors;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
  for (const auto& u : runtime.stats().tiers) {
    EXPECT_EQ(u.live_objects, 0u) << u.name;
    EXPECT_EQ(u.live_bytes, 0u) << u.name;
    EXPECT_LE(u.peak_mapped_bytes, u.budget_bytes) << u.name;
  }
}

TEST(Threaded, LookupsRacingWritersNeverSeeAWrongSpan) {
  ObjectTable table;
  constexpr std::uintptr_t kBase = std::uintptr_t{0x600000000000};
  constexpr int kSpans = 256;
  std::atomic<bool> stop{false};
  std::atomic<long> wrong{0};
  std::atomic<long> found{0};
  std::thread writer([&] {
    std::vector<ObjectTable::Slot> slots(kSpans);
    // At least 200 rounds, and on until the readers have found a span 1000 times (bounded at
    // 10 s): on a loaded machine the readers may run only while the writer sleeps between rounds,
    // when every span is erased.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (int round = 0; round < 200 || (found.load() < 1000 && std::chrono::steady_clock::now() < deadline);
         ++round) {
      for (int i = 0; i < kSpans; ++i) {
        // Span i always covers pages [i*4, i*4+round%4+1) and has id i.
        slots[i] =
            table
                .insert({static_cast<std::uint64_t>(i), kBase + std::uintptr_t(i) * 4 * 4096,
                         std::uint64_t(round % 4 + 1) * 4096, static_cast<std::uint32_t>(round % 2), false})
                .value();
      }
      for (int i = 0; i < kSpans; ++i) table.erase(slots[i]);
    }
    stop = true;
  });
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&, r] {
      std::mt19937 rng(static_cast<unsigned>(r));
      while (!stop.load()) {
        const std::uintptr_t i = rng() % kSpans;
        const std::uintptr_t address = kBase + i * 4 * 4096 + rng() % (4 * 4096);
        SpanView span;
        if (table.lookup(reinterpret_cast<void*>(address), &span)) {
          ++found;
          if (span.id != i || address < span.base || address >= span.base + span.bytes) ++wrong;
        }
      }
    });
  }
  writer.join();
  for (auto& t : readers) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(found.load(), 0);
}

// A span whose record is being rewritten (set_tier, as a move does) is still found: a lookup
// that gave up while the writer was preempted mid-update would turn the profiler's own fault into
// a real SIGSEGV. Two writers rewrite one span's record without pause on a 2-core machine, so they
// are often preempted between the odd and the even sequence number; readers must never miss it.
TEST(Threaded, ALookupNeverMissesASpanWhoseRecordIsBeingRewritten) {
  ObjectTable table;
  constexpr std::uintptr_t kBase = std::uintptr_t{0x610000000000};
  const ObjectTable::Slot slot = table.insert({7, kBase, 16 * 4096, 0, false}).value();
  std::atomic<bool> stop{false};
  std::atomic<long> missed{0}, found{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] {
      for (std::uint32_t i = 0; !stop.load(std::memory_order_relaxed); ++i)
        table.set_tier(slot, (i + static_cast<std::uint32_t>(w)) % 2);
    });
  }
  threads.emplace_back([&] {
    std::mt19937 rng(1);
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(700);
    while (std::chrono::steady_clock::now() < until) {
      SpanView span;
      if (table.lookup(reinterpret_cast<void*>(kBase + rng() % (16 * 4096)), &span) && span.id == 7) {
        ++found;
      } else {
        ++missed;
      }
    }
    stop = true;
  });
  for (auto& t : threads) t.join();
  EXPECT_EQ(missed.load(), 0) << "of " << found.load() + missed.load() << " lookups";
  EXPECT_GT(found.load(), 1000);
}

TEST(Threaded, TierBudgetHoldsUnderContention) {
  auto configs = parse_tier_spec("t=emulated:optane:16MiB");
  ASSERT_TRUE(configs);
  auto tier = open_tier(configs.value()[0]);
  ASSERT_TRUE(tier);
  Tier& t = *tier.value();
  std::vector<std::thread> threads;
  std::atomic<int> refused{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      for (int k = 0; k < 50; ++k) {
        auto r = t.allocate(1 << 20);
        if (!r) {
          ++refused;
          continue;
        }
        if (t.used_bytes() > t.budget_bytes()) ADD_FAILURE() << "budget passed";
        t.deallocate(r.value(), 1 << 20);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(t.used_bytes(), 0u);
  EXPECT_LE(t.peak_bytes(), 16u << 20);
}

TEST(Threaded, FaultTrackingIsExactWithFaultsOnManyThreadsAndASampler) {
  RuntimeOptions options("fast=dram:256MiB");
  options.profile.enabled = false;  // this test drives its own tracker
  auto rt = Runtime::create(options);
  ASSERT_TRUE(rt);
  Runtime& runtime = *rt.value();
  constexpr int kWorkers = 4;
  constexpr std::size_t kBytes = 64 * 4096;
  auto input = runtime.allocate("input", kBytes).value();
  std::memset(input.address, 7, kBytes);
  std::vector<ObjectInfo> outputs;
  for (int w = 0; w < kWorkers; ++w) outputs.push_back(runtime.allocate("output", kBytes).value());
  auto lookup = [](const void* context, const void* address, SpanView* out) {
    return static_cast<const Runtime*>(context)->lookup(address, out);
  };
  profiler::FaultTracker::Options tracker_options;
  tracker_options.unit_bytes = profiler::kSmallPageBytes;
  auto tracker = profiler::FaultTracker::install(lookup, &runtime, tracker_options);
  ASSERT_TRUE(tracker);
  for (const ObjectInfo* o : {&input}) {
    SpanView span;
    ASSERT_TRUE(runtime.lookup(o->address, &span));
    ASSERT_TRUE(tracker.value()->watch(span).is_ok());
  }
  for (const ObjectInfo& o : outputs) {
    SpanView span;
    ASSERT_TRUE(runtime.lookup(o.address, &span));
    ASSERT_TRUE(tracker.value()->watch(span).is_ok());
  }
  for (int round = 0; round < 5; ++round) {
    std::atomic<bool> done{false};
    std::thread sampler([&] {
      while (!done.load()) {
        tracker.value()->sample(0.5, 64);
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    });
    std::vector<std::thread> workers;
    std::atomic<long> sums{0};
    for (int w = 0; w < kWorkers; ++w) {
      workers.emplace_back([&, w] {
        // Each worker reads all of the input and writes, then re-reads, its own output.
        const auto* in = static_cast<const volatile unsigned char*>(input.address);
        auto* out = static_cast<volatile unsigned char*>(outputs[static_cast<std::size_t>(w)].address);
        long sum = 0;
        for (int pass = 0; pass < 20; ++pass) {
          for (std::size_t at = 0; at < kBytes; at += 512) {
            out[at] = static_cast<unsigned char>(in[at] + w);
            sum += out[at];
          }
        }
        sums += sum;
      });
    }
    for (auto& t : workers) t.join();
    done = true;
    sampler.join();
    const auto accesses = tracker.value()->collect();
    ASSERT_EQ(accesses.size(), 1u + kWorkers) << "round " << round;
    for (const auto& a : accesses) {
      if (a.span.id == input.id) {
        EXPECT_EQ(a.units_read, 64u) << "round " << round;
        EXPECT_EQ(a.units_written, 0u) << "round " << round;
      } else {
        // Written first; the re-reads of its own writes, re-protected or not, are not reads.
        EXPECT_EQ(a.units_written, 64u) << "round " << round;
        EXPECT_EQ(a.units_read, 0u) << "round " << round;
      }
      EXPECT_GE(a.touches, 64.0);
    }
    EXPECT_EQ(sums.load(),
              static_cast<long>(kWorkers) * 20 * (kBytes / 512) * 7 + 20L * (kBytes / 512) * (0 + 1 + 2 + 3));
  }
}

TEST(Threaded, StepProfilerWithASamplerAndWorkerThreads) {
  RuntimeOptions options("fast=dram:256MiB");
  options.profile.step = 0;  // profile the first step
  options.profile.granularity_bytes = profiler::kSmallPageBytes;
  options.profile.sample_interval_us = 50;
  options.profile.sample_fraction = 0.5;
  auto rt = Runtime::create(options);
  ASSERT_TRUE(rt);
  Runtime& runtime = *rt.value();
  constexpr std::size_t kBytes = 32 * 4096;
  auto in = runtime.allocate("in", kBytes).value();
  std::memset(in.address, 1, kBytes);
  std::vector<ObjectInfo> outs;
  ASSERT_TRUE(runtime.step_begin().is_ok());
  for (int layer = 0; layer < 4; ++layer) {
    outs.push_back(runtime.allocate("out", kBytes).value());  // allocated between layers, like activations
    const void* reads[] = {layer == 0 ? in.address : outs[outs.size() - 2].address};
    const void* writes[] = {outs.back().address};
    ASSERT_TRUE(runtime.layer_begin("layer", reads, writes).is_ok());
    std::vector<std::thread> workers;
    for (int w = 0; w < 2; ++w) {
      workers.emplace_back([&, w] {
        const auto* src = static_cast<const volatile unsigned char*>(reads[0]);
        auto* dst = static_cast<volatile unsigned char*>(outs.back().address);
        const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(3);
        while (std::chrono::steady_clock::now() < until) {
          for (std::size_t at = static_cast<std::size_t>(w) * 4096; at < kBytes; at += 2 * 4096) {
            dst[at] = static_cast<unsigned char>(src[at] + 1);
          }
        }
      });
    }
    for (auto& t : workers) t.join();
    ASSERT_TRUE(runtime.layer_end().is_ok());
    if (layer >= 2) {
      ASSERT_TRUE(runtime.free(outs[static_cast<std::size_t>(layer) - 2].address).is_ok());
    }
  }
  ASSERT_TRUE(runtime.step_end().is_ok());
  auto profile = runtime.profile();
  ASSERT_NE(profile, nullptr);
  ASSERT_EQ(profile->layers.size(), 4u);
  for (const auto& layer : profile->layers) {
    ASSERT_EQ(layer.accesses.size(), 2u) << layer.index;
    for (const auto& a : layer.accesses) {
      const bool is_read = a.id == layer.declared_reads[0];
      EXPECT_EQ(a.pages_read, is_read ? 32u : 0u) << layer.index;
      EXPECT_EQ(a.pages_written, is_read ? 0u : 32u) << layer.index;
      EXPECT_GE(a.touches, 32.0);
    }
  }
}

// runtime.h: allocate() and free() may be called from any thread at any time. A helper thread
// allocates, writes, reads back and frees objects of its own (a range freed is soon reused) while
// the training thread runs profiled steps, whose layer boundaries protect the objects born since
// the last one. A span freed while a boundary was protecting it, or a range still protected when
// reused, would fault outside the profiler's knowledge: a SIGSEGV that ends this test.
TEST(Threaded, OtherThreadsAllocateWriteAndFreeWhileStepsAreProfiled) {
  RuntimeOptions options("fast=dram:512MiB");
  options.profile.granularity_bytes = profiler::kSmallPageBytes;
  auto rt = Runtime::create(options);
  ASSERT_TRUE(rt) << rt.status().to_string();
  Runtime& runtime = *rt.value();
  std::atomic<bool> done{false};
  std::atomic<std::uint64_t> helper_rounds{0}, helper_errors{0};
  std::thread helper([&] {
    std::mt19937 rng(7);
    std::vector<ObjectInfo> held;
    while (!done.load(std::memory_order_relaxed)) {
      const std::size_t bytes = std::size_t{4096} << (rng() % 6);  // 4 KiB .. 128 KiB
      auto o = runtime.allocate("helper", bytes);
      if (!o) {
        helper_errors.fetch_add(1);
        continue;
      }
      auto* p = static_cast<volatile unsigned char*>(o->address);
      p[0] = 1;  // the first byte of a fresh object: where a stale protection faults
      for (std::size_t at = 0; at < bytes; at += 4096) p[at] = static_cast<unsigned char>(at >> 12);
      for (std::size_t at = 0; at < bytes; at += 4096) {
        if (p[at] != static_cast<unsigned char>(at >> 12)) helper_errors.fetch_add(1);
      }
      held.push_back(*o);
      if (held.size() > 4 || rng() % 2 == 0) {  // free one, not always the newest
        const std::size_t victim = rng() % held.size();
        if (!runtime.free(held[victim].address).is_ok()) helper_errors.fetch_add(1);
        held.erase(held.begin() + static_cast<std::ptrdiff_t>(victim));
      }
      helper_rounds.fetch_add(1, std::memory_order_relaxed);
    }
    for (const ObjectInfo& o : held) {
      if (!runtime.free(o.address).is_ok()) helper_errors.fetch_add(1);
    }
  });
  constexpr std::size_t kBytes = 16 * 4096;
  auto weights = runtime.allocate("w", kBytes).value();
  std::memset(weights.address, 1, kBytes);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  int steps = 0;
  while (steps < 10 || std::chrono::steady_clock::now() < until) {
    runtime.request_profile();
    ASSERT_TRUE(runtime.step_begin().is_ok());
    for (int layer = 0; layer < 6; ++layer) {
      auto act = runtime.allocate("act", kBytes).value();
      const void* reads[] = {weights.address};
      const void* writes[] = {act.address};
      ASSERT_TRUE(runtime.layer_begin("layer", reads, writes).is_ok());
      std::memset(act.address, static_cast<int>(static_cast<const unsigned char*>(weights.address)[layer]),
                  kBytes);
      ASSERT_TRUE(runtime.layer_end().is_ok());
      ASSERT_TRUE(runtime.free(act.address).is_ok());
    }
    ASSERT_TRUE(runtime.step_end().is_ok());
    ++steps;
  }
  done.store(true);
  helper.join();
  EXPECT_EQ(helper_errors.load(), 0u);
  EXPECT_GT(helper_rounds.load(), 100u) << "the helper hardly ran beside the steps";
  ASSERT_NE(runtime.profile(), nullptr);
  EXPECT_EQ(runtime.profile()->layers.size(), 6u);
}

// Stress (issue 13): three helper threads allocate objects small and large, write them, move
// them between the tiers, check them and free them, while the training thread runs profiled and
// unprofiled steps whose layers check what they read. Host code pins what it touches (the
// runtime's rule for code outside layers); a move may be refused (a profiled step, a pin, no
// room: kUnavailable / kOutOfMemory), never lose bytes. Bounded in time; under ASan and TSan in
// CI.
TEST(Threaded, StressHelpersAllocateMoveAndFreeBesideProfiledAndPlainSteps) {
  RuntimeOptions options("fast=dram:64MiB,slow=emulated:cxl:256MiB");
  options.layer_move_wait = std::chrono::seconds(10);  // see object_allocator.h on TSan and short waits
  auto rt = Runtime::create(options);
  ASSERT_TRUE(rt) << rt.status().to_string();
  Runtime& runtime = *rt.value();
  const std::uint64_t live_before = runtime.stats().live_objects;
  std::atomic<bool> done{false};
  std::atomic<std::uint64_t> rounds{0}, moves{0}, refused{0}, errors{0};
  std::string first_error;
  std::mutex error_mutex;
  auto error = [&](const std::string& what) {
    errors.fetch_add(1);
    std::lock_guard lock(error_mutex);
    if (first_error.empty()) first_error = what;
  };
  // Writes (or checks) the object's bytes under a pin: the pattern is its id and the offset.
  auto touch = [&](const ObjectInfo& o, bool write) {
    const ObjectId id = o.id;
    void* address = nullptr;
    if (Status s = runtime.pin_objects(std::span<const ObjectId>(&id, 1), std::span<void*>(&address, 1));
        !s.is_ok()) {
      error("pin: " + s.to_string());
      return;
    }
    auto* p = static_cast<unsigned char*>(address);
    for (std::size_t at = 0; at < o.bytes; at += 61) {
      const auto expected = static_cast<unsigned char>(id * 31 + at);
      if (write) {
        p[at] = expected;
      } else if (p[at] != expected) {
        error("object " + std::to_string(id) + " lost its byte at " + std::to_string(at));
        break;
      }
    }
    runtime.unpin_objects(std::span<const ObjectId>(&id, 1));
  };
  auto helper = [&](unsigned seed) {
    std::mt19937 rng(seed);
    std::vector<ObjectInfo> held;
    while (!done.load(std::memory_order_relaxed)) {
      const bool small = rng() % 2 == 0;
      const std::size_t bytes = small ? 16 + rng() % 2000 : std::size_t{4096} << (rng() % 7);  // to 256 KiB
      auto o = runtime.allocate("helper", bytes, /*group=*/static_cast<GroupId>(1 + rng() % 3));
      if (!o) {
        if (o.status().code() != StatusCode::kOutOfMemory) error("allocate: " + o.status().to_string());
        continue;
      }
      touch(*o, /*write=*/true);
      held.push_back(*o);
      const ObjectInfo& pick = held[rng() % held.size()];
      auto moved = runtime.move(pick.id, static_cast<TierIndex>(rng() % 2));
      if (moved) {
        moves.fetch_add(1);
      } else if (moved.status().code() == StatusCode::kUnavailable ||
                 moved.status().code() == StatusCode::kOutOfMemory) {
        refused.fetch_add(1);
      } else {
        error("move: " + moved.status().to_string());
      }
      touch(held[rng() % held.size()], /*write=*/false);
      if (held.size() > 8 || rng() % 3 == 0) {
        const std::size_t victim = rng() % held.size();
        touch(held[victim], /*write=*/false);
        auto address = runtime.address_of(held[victim].id);
        if (!address || !runtime.free(address.value()).is_ok()) error("free of a held object failed");
        held.erase(held.begin() + static_cast<std::ptrdiff_t>(victim));
      }
      rounds.fetch_add(1, std::memory_order_relaxed);
    }
    for (const ObjectInfo& o : held) {
      touch(o, /*write=*/false);
      auto address = runtime.address_of(o.id);
      if (!address || !runtime.free(address.value()).is_ok()) error("free at the end failed");
    }
  };
  std::vector<std::thread> helpers;
  for (unsigned t = 0; t < 3; ++t) helpers.emplace_back(helper, 100 + t);

  constexpr std::size_t kBytes = 32 * 4096;
  auto weights = runtime.allocate("w", kBytes).value();
  {
    std::vector<void*> address(1);
    const ObjectId id = weights.id;
    ASSERT_TRUE(runtime.pin_objects(std::span<const ObjectId>(&id, 1), address).is_ok());
    std::memset(address[0], 3, kBytes);
    runtime.unpin_objects(std::span<const ObjectId>(&id, 1));
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  int steps = 0;
  while (steps < 8 || std::chrono::steady_clock::now() < until) {
    if (steps % 2 == 0) runtime.request_profile();
    ASSERT_TRUE(runtime.step_begin().is_ok());
    for (int layer = 0; layer < 5; ++layer) {
      auto act = runtime.allocate("act", kBytes).value();
      const ObjectId reads[] = {weights.id};
      const ObjectId writes[] = {act.id};
      std::vector<void*> addresses(2);
      ASSERT_TRUE(runtime.layer_begin("layer", reads, writes, addresses).is_ok());
      const auto* w = static_cast<const unsigned char*>(addresses[0]);
      ASSERT_TRUE(std::all_of(w, w + kBytes, [](unsigned char c) { return c == 3; })) << "step " << steps;
      std::memset(addresses[1], layer, kBytes);
      ASSERT_TRUE(runtime.layer_end().is_ok());
      ASSERT_TRUE(runtime.free(act.id).is_ok());
    }
    ASSERT_TRUE(runtime.step_end().is_ok());
    // Between steps the weights move too, as a policy's mover would move them.
    (void)runtime.move(weights.id, static_cast<TierIndex>(steps % 2));
    ++steps;
  }
  done.store(true);
  for (auto& h : helpers) h.join();
  std::printf("stress: %d steps, %llu helper rounds, %llu moves, %llu refused\n", steps,
              static_cast<unsigned long long>(rounds.load()), static_cast<unsigned long long>(moves.load()),
              static_cast<unsigned long long>(refused.load()));
  EXPECT_EQ(errors.load(), 0u) << first_error;
  EXPECT_GT(rounds.load(), 100u) << "the helpers hardly ran beside the steps";
  EXPECT_GT(moves.load(), 10u) << "hardly any move went through (" << refused.load() << " refused)";
  ASSERT_NE(runtime.profile(), nullptr);
  ASSERT_TRUE(runtime.free(weights.id).is_ok());
  const RuntimeStats after = runtime.stats();
  EXPECT_EQ(after.live_objects, live_before) << "accounts are off after the stress";
  for (const TierUsage& u : after.tiers) EXPECT_EQ(u.live_bytes, 0u) << u.name;
}

// A fork() in the middle of a profiled step (with a sampler thread, and a policy's mover once
// one runs): the child has none of the parent's threads. Its calls into the runtime must fail
// at once naming fork, not hang (step_end used to wait forever for the sampler), and it must be
// able to destroy the runtime and exit (with the copy threads of RuntimeOptions::copy_threads
// too, which it does not have either). The parent carries on.
TEST(Threaded, AChildAfterForkIsRefusedAndDoesNotHang) {
  RuntimeOptions options("fast=dram:256MiB");
  options.copy_threads = 2;
  options.profile.step = 0;
  options.profile.sample_interval_us = 100;
  auto created = Runtime::create(options);
  ASSERT_TRUE(created) << created.status().to_string();
  std::unique_ptr<Runtime> rt = std::move(created).value();
  auto w = rt->allocate("w", 64 * 4096).value();
  std::memset(w.address, 1, 64 * 4096);
  ASSERT_TRUE(rt->step_begin().is_ok());
  const void* reads[] = {w.address};
  ASSERT_TRUE(rt->layer_begin("layer", reads, {}).is_ok());
  const pid_t child = fork();
  ASSERT_NE(child, -1);
  if (child == 0) {
    // The child: no gtest assertions (they belong to the parent); the exit status tells.
    int code = 0;
    if (static_cast<const volatile unsigned char*>(w.address)[4096] != 1) code |= 1;  // still readable
    const Status end = rt->layer_end();
    if (end.is_ok() || end.message().find("fork") == std::string::npos) code |= 2;
    const Status step = rt->step_end();
    if (step.is_ok() || step.message().find("fork") == std::string::npos) code |= 4;
    if (rt->step_begin().is_ok()) code |= 8;
    rt.reset();  // the destructor must not wait for threads the child does not have
    _exit(code);
  }
  int status = 0;
  pid_t done = 0;
  for (int i = 0; i < 1000 && done == 0; ++i) {  // up to 10 s
    done = waitpid(child, &status, WNOHANG);
    if (done == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (done == 0) {
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
    FAIL() << "the child after fork hung";
  }
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal "
                                 << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "bits: 1 unreadable object, 2 layer_end, 4 step_end, 8 step_begin";
  // The parent carries on.
  EXPECT_TRUE(rt->layer_end().is_ok());
  EXPECT_TRUE(rt->step_end().is_ok());
  EXPECT_NE(rt->profile(), nullptr);
}

}  // namespace
}  // namespace tensortier
