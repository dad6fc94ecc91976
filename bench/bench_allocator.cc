// Micro-benchmarks of the allocator (Google Benchmark). docs/RESULTS.md has the figures and the
// command. Every figure on an emulated tier is DRAM plus a model: the allocation costs measured
// here are the real costs of this machine's page faults and mappings.
#include <sys/mman.h>
#include <time.h>

#include <array>
#include <chrono>
#include <cstring>
#include <random>
#include <vector>

#include <benchmark/benchmark.h>

#include "stats.h"
#include "tensortier/allocator/object_allocator.h"
#include "tensortier/runtime.h"

namespace {

using namespace tensortier;

std::unique_ptr<ObjectAllocator> make(const std::string& spec) {
  std::vector<std::unique_ptr<Tier>> tiers;
  const std::vector<TierConfig> configs = parse_tier_spec(spec).value();
  for (const auto& c : configs) tiers.push_back(open_tier(c).value());
  return std::make_unique<ObjectAllocator>(std::move(tiers));
}

constexpr std::size_t k64MiB = 64 << 20;

// Allocates a 64 MiB object, writes one byte per page (as a layer writing its output would), frees it.
void allocate_touch_free(ObjectAllocator& alloc) {
  auto info = alloc.allocate("t", k64MiB);
  auto* p = static_cast<char*>(info->address);
  for (std::size_t off = 0; off < k64MiB; off += kPageBytes) p[off] = 1;
  benchmark::DoNotOptimize(p);
  (void)alloc.free(info->address);
}

// Steady state: the range freed last iteration is reused (no mapping, no page fault).
void BM_Alloc64MiB_SteadyState(benchmark::State& state, const char* spec) {
  auto alloc = make(spec);
  allocate_touch_free(*alloc);  // first touch once, outside the timing
  for (auto _ : state) allocate_touch_free(*alloc);
}

// Cold: the cache is dropped between iterations, so each one maps and first-touches a new range.
void BM_Alloc64MiB_Cold(benchmark::State& state, const char* spec) {
  auto alloc = make(spec);
  for (auto _ : state) {
    allocate_touch_free(*alloc);
    state.PauseTiming();
    alloc->release_cache();
    state.ResumeTiming();
  }
}

// Plain mmap + first touch + munmap of 64 MiB with 4 KiB pages: what a fresh allocation costs
// without huge pages, for comparison.
void BM_Mmap64MiB_4KiBPages(benchmark::State& state) {
  for (auto _ : state) {
    void* p = mmap(nullptr, k64MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    madvise(p, k64MiB, MADV_NOHUGEPAGE);
    for (std::size_t off = 0; off < k64MiB; off += kPageBytes) static_cast<char*>(p)[off] = 1;
    benchmark::DoNotOptimize(p);
    munmap(p, k64MiB);
  }
}

// Address-to-object lookup with 100k live one-page objects, at random addresses inside them.
void BM_Lookup_100kObjects(benchmark::State& state) {
  auto alloc = make("fast=emulated:optane:1GiB");
  std::vector<char*> objects;
  for (int i = 0; i < 100'000; ++i)
    objects.push_back(static_cast<char*>(alloc->allocate("o", kPageBytes).value().address));
  std::mt19937 rng(7);
  std::vector<const void*> probes(4096);
  for (auto& p : probes) p = objects[rng() % objects.size()] + rng() % kPageBytes;
  std::size_t i = 0;
  SpanView span;
  for (auto _ : state) {
    benchmark::DoNotOptimize(alloc->lookup(probes[i++ & 4095], &span));
  }
  state.counters["objects"] = static_cast<double>(alloc->live_objects());
}

double seconds_of(const auto& body) {
  const auto start = std::chrono::steady_clock::now();
  body();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A 64 MiB object moved back and forth between the spec's two tiers, against a plain memcpy of
// 64 MiB between two buffers that are already faulted in, alternating in every iteration so that
// noise hits both alike. Counters: the medians' bandwidths and their ratio (move / memcpy). A
// move maps fresh destination pages (the source's pages go back to the kernel), so it pays their
// first touch too; the memcpy does not.
void BM_Move64MiB_vs_Memcpy(benchmark::State& state, const char* spec) {
  auto alloc = make(spec);
  auto object = alloc->allocate("moved", k64MiB, kDefaultGroup, 0).value();
  std::memset(object.address, 1, k64MiB);
  std::vector<char> from(k64MiB, 1), to(k64MiB, 2);
  std::vector<double> move_s, memcpy_s;
  TierIndex target = 1;
  for (auto _ : state) {
    memcpy_s.push_back(seconds_of([&] {
      std::memcpy(to.data(), from.data(), k64MiB);
      benchmark::ClobberMemory();
    }));
    move_s.push_back(seconds_of([&] {
      auto moved = alloc->move(object.id, target);
      if (!moved || !moved->moved) state.SkipWithError("move failed");
    }));
    target ^= 1U;
  }
  const double gib = static_cast<double>(k64MiB) / 1e9;
  const double memcpy_gbps = gib / bench::median(memcpy_s);
  const double move_gbps = gib / bench::median(move_s);
  state.counters["memcpy_gbps"] = memcpy_gbps;
  state.counters["move_gbps"] = move_gbps;
  state.counters["move_over_memcpy"] = move_gbps / memcpy_gbps;
  state.SetLabel(std::string(to_string(alloc->move_method(0, 1))));
}

// A 64 MiB object moved back and forth between the spec's two tiers, its copy on the moving
// thread alone and split over two threads (ObjectAllocator::set_copy_threads), alternating in
// every iteration. Counters: the medians' bandwidths and their ratio (two threads / one). On a
// machine whose cores are all idle but these, the ratio is what a spare core adds to a move.
void BM_Move64MiB_CopyThreads(benchmark::State& state, const char* spec) {
  auto alloc = make(spec);
  auto object = alloc->allocate("moved", k64MiB, kDefaultGroup, 0).value();
  std::memset(object.address, 1, k64MiB);
  std::vector<double> one_s, two_s;
  TierIndex target = 1;
  for (auto _ : state) {
    for (unsigned threads : {1U, 2U}) {
      if (Status s = alloc->set_copy_threads(threads); !s.is_ok()) {
        state.SkipWithError(s.message().c_str());
        return;
      }
      (threads == 1 ? one_s : two_s).push_back(seconds_of([&] {
        auto moved = alloc->move(object.id, target);
        if (!moved || !moved->moved || moved->copy_threads != threads) state.SkipWithError("move failed");
      }));
      target ^= 1U;
    }
  }
  const double gib = static_cast<double>(k64MiB) / 1e9;
  const double one_gbps = gib / bench::median(one_s);
  const double two_gbps = gib / bench::median(two_s);
  state.counters["one_thread_gbps"] = one_gbps;
  state.counters["two_threads_gbps"] = two_gbps;
  state.counters["two_over_one"] = two_gbps / one_gbps;
}

// An 8 MiB object moved back and forth between the spec's two tiers, each move after a pin (as
// a layer's), alternating a move that copies with one whose bytes are dead
// (MoveOptions::discard_unless_pinned_after): the two medians of the mover's wall and CPU time,
// with the destination ranges cached as in steady training. An emulated tier's charge is in the
// copy's wall time.
void BM_DeadMove8MiB_vs_Copy(benchmark::State& state, const char* spec) {
  constexpr std::size_t k8MiB = 8 << 20;
  auto alloc = make(spec);
  auto object = alloc->allocate("moved", k8MiB, kDefaultGroup, 0).value();
  std::memset(object.address, 1, k8MiB);
  const std::array<ObjectId, 1> ids{object.id};
  std::array<PinnedObject, 1> pinned{};
  std::vector<double> copy_ms, dead_ms, copy_cpu_ms, dead_cpu_ms;
  auto cpu_ms = [] {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) / 1e6;
  };
  TierIndex target = 1;
  for (auto _ : state) {
    for (const bool dead : {false, true}) {
      if (!alloc->pin(ids, pinned, std::chrono::seconds(1))) state.SkipWithError("pin failed");
      alloc->unpin(ids);
      MoveOptions options;
      if (dead) options.discard_unless_pinned_after = alloc->pin_sequence();
      const double cpu0 = cpu_ms();
      const double wall_s = seconds_of([&] {
        auto moved = alloc->move(object.id, target, options);
        if (!moved || !moved->moved || moved->discarded != dead) state.SkipWithError("move failed");
      });
      (dead ? dead_cpu_ms : copy_cpu_ms).push_back(cpu_ms() - cpu0);
      (dead ? dead_ms : copy_ms).push_back(wall_s * 1e3);
      target ^= 1U;
    }
  }
  state.counters["copy_ms"] = bench::median(copy_ms);
  state.counters["copy_cpu_ms"] = bench::median(copy_cpu_ms);
  state.counters["dead_ms"] = bench::median(dead_ms);
  state.counters["dead_cpu_ms"] = bench::median(dead_cpu_ms);
}

// Rounds of a chunk's worth of 48-byte objects in one group, one survivor a round: an allocation's
// cost must not grow with the chunks (each used to be searched). The first and the last rounds'
// median times (the test ObjectAllocator.SmallObjectsOfMixedLifetimesReuseTheirChunksSpace checks
// the memory).
void BM_SmallMixedLifetimes(benchmark::State& state) {
  constexpr int kRounds = 300, kWindow = 50;
  constexpr int kPerRound = static_cast<int>(kGroupChunkBytes / kSmallAlignmentBytes);
  std::vector<double> first_us, last_us;
  for (auto _ : state) {
    auto alloc = make("fast=dram:1GiB");
    std::vector<ObjectInfo> survivors, round;
    for (int r = 0; r < kRounds; ++r) {
      const double s = seconds_of([&] {
        round.clear();
        for (int i = 0; i < kPerRound; ++i) round.push_back(alloc->allocate("mixed", 48, 7).value());
        for (int i = 0; i < kPerRound; ++i) {
          if (i == (r * 37) % kPerRound) {
            survivors.push_back(round[static_cast<std::size_t>(i)]);
          } else if (!alloc->free(round[static_cast<std::size_t>(i)].address).is_ok()) {
            state.SkipWithError("free failed");
          }
        }
      });
      if (r >= 10 && r < 10 + kWindow) first_us.push_back(s * 1e6);
      if (r >= kRounds - kWindow) last_us.push_back(s * 1e6);
    }
  }
  state.counters["first_round_us"] = bench::median(first_us);
  state.counters["last_round_us"] = bench::median(last_us);
  state.counters["last_over_first"] = bench::median(last_us) / bench::median(first_us);
}

// A layer on a host loop that reads and writes 16 MiB, with the object on DRAM and then on the
// emulated optane-server tier (alternating): the measured difference against the charge the model
// predicts (the test Emulation.SlowTierLayersAreChargedWhatTheModelPredicts checks the booking).
void BM_SlowLayerCharge(benchmark::State& state) {
  constexpr std::size_t kBytes = 16 << 20;
  RuntimeOptions options("fast=dram:256MiB,slow=emulated:optane-server:256MiB");
  options.profile.enabled = false;
  auto rt = Runtime::create(options).value();
  const ObjectInfo a = rt->allocate("a", kBytes).value();
  const ObjectId ids[] = {a.id};
  auto layer_s = [&] {
    return seconds_of([&] {
      void* addresses[2] = {};
      (void)rt->step_begin();
      (void)rt->layer_begin("rw", ids, ids, addresses);
      auto* p = static_cast<float*>(addresses[0]);
      for (std::size_t i = 0; i < kBytes / sizeof(float); ++i) p[i] = p[i] * 0.5F + 1.0F;
      (void)rt->layer_end();
      (void)rt->step_end();
    });
  };
  std::vector<double> extra_ms;
  for (auto _ : state) {
    if (!rt->move(a.id, 0)) state.SkipWithError("move to DRAM failed");
    const double fast_s = layer_s();
    if (!rt->move(a.id, 1)) state.SkipWithError("move to the emulated tier failed");
    extra_ms.push_back((layer_s() - fast_s) * 1e3);
  }
  const double predicted_ms =
      static_cast<double>(rt->tier(1).cost_model()->layer_charge_ns(kBytes, kBytes)) / 1e6;
  state.counters["extra_ms"] = bench::median(extra_ms);
  state.counters["predicted_ms"] = predicted_ms;
  state.counters["extra_over_predicted"] = bench::median(extra_ms) / predicted_ms;
}

}  // namespace

BENCHMARK_CAPTURE(BM_Alloc64MiB_SteadyState, dram, "fast=dram:1GiB")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Alloc64MiB_Cold, dram, "fast=dram:1GiB")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Alloc64MiB_SteadyState, emulated, "fast=emulated:optane:1GiB")
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Alloc64MiB_Cold, emulated, "fast=emulated:optane:1GiB")->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Mmap64MiB_4KiBPages)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Lookup_100kObjects);
BENCHMARK_CAPTURE(BM_Move64MiB_vs_Memcpy, dram_dram, "a=dram:1GiB,b=dram:1GiB")
    ->Unit(benchmark::kMillisecond)
    ->Iterations(20);
BENCHMARK_CAPTURE(BM_Move64MiB_CopyThreads, dram_dram, "a=dram:1GiB,b=dram:1GiB")
    ->Unit(benchmark::kMillisecond)
    ->Iterations(20);
BENCHMARK_CAPTURE(BM_Move64MiB_vs_Memcpy, dram_numa0, "a=dram:1GiB,b=numa:0:1GiB")
    ->Unit(benchmark::kMillisecond)
    ->Iterations(20);
BENCHMARK_CAPTURE(BM_DeadMove8MiB_vs_Copy, dram_emulated_optane_server,
                  "a=dram:1GiB,b=emulated:optane-server:1GiB")
    ->Unit(benchmark::kMillisecond)
    ->Iterations(40);
BENCHMARK(BM_SmallMixedLifetimes)->Iterations(3)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SlowLayerCharge)->Iterations(5)->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
