// Runtime: tier resolution (options, environment, discovery), marks and stats; and the C API.
#include "tensortier/runtime.h"

#include <cstdlib>
#include <cstring>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "tensortier/tensortier.h"
#include "test_util.h"

namespace tensortier {
namespace {

using testing::ScopedEnv;

std::unique_ptr<Runtime> make(const std::string& spec) {
  auto rt = Runtime::create({spec});
  EXPECT_TRUE(rt) << rt.status().to_string();
  return rt ? std::move(rt).value() : nullptr;
}

TEST(Runtime, SpecFromOptionsWinsOverEnvironment) {
  ScopedEnv env("TENSORTIER_TIERS", "a=dram:1GiB");
  auto rt = make("fast=dram:64MiB,slow=emulated:optane:1GiB");
  ASSERT_NE(rt, nullptr);
  EXPECT_EQ(rt->spec_source(), "options");
  ASSERT_EQ(rt->tier_count(), 2u);
  EXPECT_EQ(rt->tier(0).name(), "fast");
  EXPECT_EQ(rt->tier(1).budget_bytes(), 1ULL << 30);
}

TEST(Runtime, SpecFromEnvironment) {
  ScopedEnv env("TENSORTIER_TIERS", "f=dram:32MiB,s=emulated:cxl:64MiB");
  auto rt = Runtime::create();
  ASSERT_TRUE(rt) << rt.status().to_string();
  EXPECT_EQ(rt.value()->spec_source(), "TENSORTIER_TIERS");
  EXPECT_EQ(rt.value()->tier(1).name(), "s");
}

TEST(Runtime, MalformedEnvironmentSpecQuotesTheBadPart) {
  ScopedEnv env("TENSORTIER_TIERS", "fast=dram:8GiB,slow=emulatd:optane");
  auto rt = Runtime::create();
  ASSERT_FALSE(rt);
  EXPECT_NE(rt.status().message().find("TENSORTIER_TIERS: tier spec entry \"slow=emulatd:optane\""),
            std::string::npos)
      << rt.status().message();
}

TEST(Runtime, DiscoveryWithoutSpecGivesOneTierPerNode) {
  ScopedEnv env("TENSORTIER_TIERS", nullptr);
  auto rt = Runtime::create();
  ASSERT_TRUE(rt) << rt.status().to_string();
  EXPECT_NE(rt.value()->spec_source().find("hwloc discovery"), std::string::npos);
  EXPECT_GE(rt.value()->tier_count(), 1u);
  EXPECT_EQ(rt.value()->tier(0).name(), "fast");
  EXPECT_EQ(rt.value()->tier(0).kind(), TierKind::kNuma);
}

TEST(Runtime, MissingPmemDirectoryFailsCreate) {
  auto rt = Runtime::create({"fast=dram:64MiB,slow=pmem:/no/such/dir:1GiB"});
  ASSERT_FALSE(rt);
  EXPECT_NE(rt.status().message().find("'/no/such/dir' does not exist"), std::string::npos);
}

// Copy threads: the cores the layers leave spare, the mover's among them, where two or more are;
// else the mover alone. The layers' threads are OMP_NUM_THREADS's first number where valid, else
// every CPU the process may run on. RuntimeOptions::copy_threads overrides, and the runtime's
// note says which it is; a move through the runtime copies over that many threads.
TEST(Runtime, CopyThreadsAreTheCoresTheLayersLeaveSpare) {
  EXPECT_EQ(copy_threads_for(2, 2), 1u);
  EXPECT_EQ(copy_threads_for(4, 3), 1u) << "one spare core: the mover's";
  EXPECT_EQ(copy_threads_for(4, 2), 2u);
  EXPECT_EQ(copy_threads_for(16, 4), 12u);
  EXPECT_EQ(copy_threads_for(2, 8), 1u) << "more threads than CPUs: none spare";
  std::uint32_t cpus = 0;
  {
    ScopedEnv env("OMP_NUM_THREADS", nullptr);
    const CpuShare share = cpu_share();
    cpus = share.cpus;
    EXPECT_GE(cpus, 1u);
    EXPECT_EQ(share.training_threads, cpus) << "oneDNN's default: every CPU";
  }
  for (const auto& [value, threads] :
       {std::pair{"1", 1u}, {"3,2", 3u}, {"0", cpus}, {"many", cpus}, {"2x", cpus}}) {
    ScopedEnv env("OMP_NUM_THREADS", value);
    EXPECT_EQ(cpu_share().training_threads, threads) << "OMP_NUM_THREADS=" << value;
  }
  RuntimeOptions options("fast=dram:64MiB,slow=emulated:cxl:256MiB");
  options.profile.enabled = false;
  options.copy_threads = 2;  // at most one a CPU: 2 where the machine has two or more
  const unsigned two = std::min(2u, cpus);
  auto rt = Runtime::create(options);
  ASSERT_TRUE(rt) << rt.status().to_string();
  EXPECT_NE(rt.value()->copy_threads_note().find(two == 2 ? "split over 2 threads (copy_threads"
                                                          : "copies on the mover alone (copy_threads 1;"),
            std::string::npos)
      << rt.value()->copy_threads_note();
  constexpr std::size_t kBytes = std::size_t{8} << 20;
  auto object = rt.value()->allocate("object", kBytes);
  ASSERT_TRUE(object);
  std::memset(object->address, 7, kBytes);
  auto moved = rt.value()->move(object->id, 1);
  ASSERT_TRUE(moved) << moved.status().to_string();
  EXPECT_EQ(moved->copy_threads, two);
  EXPECT_EQ(static_cast<const unsigned char*>(object->address)[kBytes - 1], 7);
  ASSERT_TRUE(rt.value()->free(object->address).is_ok());
  options.copy_threads = 1'000'000;  // no million threads: one a CPU at most
  rt = Runtime::create(options);
  ASSERT_TRUE(rt) << rt.status().to_string();
  EXPECT_NE(rt.value()->copy_threads_note().find("1000000 asked, at most one a CPU"), std::string::npos)
      << rt.value()->copy_threads_note();
  ScopedEnv env("OMP_NUM_THREADS", nullptr);
  options.copy_threads = 0;
  rt = Runtime::create(options);
  ASSERT_TRUE(rt) << rt.status().to_string();
  const std::string& note = rt.value()->copy_threads_note();
  if (cpus >= 2) {
    EXPECT_NE(note.find("copies on the mover alone: fewer than two cores spare"), std::string::npos) << note;
  }
  EXPECT_NE(note.find(fmt::format("{} CPUs, {} for the layers", cpus, cpus)), std::string::npos) << note;
}

TEST(Runtime, LayerMarksRecordDeclaredObjects) {
  auto rt = make("fast=dram:64MiB,slow=emulated:optane:1GiB");
  ASSERT_NE(rt, nullptr);
  auto w = rt->allocate("fc.weights", 1 << 20, 1).value();
  auto x = rt->allocate("input", 4096, 2).value();
  auto y = rt->allocate("fc.output", 8192, 2).value();
  ASSERT_TRUE(rt->step_begin().is_ok());
  const void* reads[] = {w.address, x.address};
  const void* writes[] = {y.address};
  ASSERT_TRUE(rt->layer_begin("fc", reads, writes).is_ok());
  ASSERT_TRUE(rt->layer_end().is_ok());
  ASSERT_TRUE(rt->layer_begin("loss", std::span<const void* const>(writes, 1), {}).is_ok());
  ASSERT_TRUE(rt->layer_end().is_ok());
  ASSERT_TRUE(rt->step_end().is_ok());
  const auto& layers = rt->last_step_layers();
  ASSERT_EQ(layers.size(), 2u);
  EXPECT_EQ(layers[0].name, "fc");
  EXPECT_EQ(layers[0].reads, (std::vector<ObjectId>{w.id, x.id}));
  EXPECT_EQ(layers[0].writes, (std::vector<ObjectId>{y.id}));
  EXPECT_EQ(layers[1].index, 1u);
  EXPECT_EQ(layers[1].reads, (std::vector<ObjectId>{y.id}));
  EXPECT_EQ(rt->stats().steps_completed, 1u);
  EXPECT_EQ(rt->stats().live_objects, 3u);
}

// A profiled step that is a one-off (one birth more before its first layer, as PyTorch's DDP
// allocates its buckets in the step profiled): the steps after it are of another kind, so its plan
// never runs. That kind is profiled next, and the plan is made again from it and runs.
TEST(Runtime, APlanNoStepMatchedFollowsTheKindProfiledNext) {
  for (const bool one_off : {false, true}) {
    SCOPED_TRACE(one_off ? "the profiled step has one birth more" : "every step alike");
    RuntimeOptions options("fast=dram:64MiB,slow=emulated:optane:256MiB");
    options.policy = "sentinel";
    options.fast_budget = "30%";
    options.trial_steps = 0;
    auto created = Runtime::create(options);
    ASSERT_TRUE(created) << created.status().to_string();
    Runtime& rt = *created.value();
    constexpr std::size_t kLayers = 12, kBytes = 1 << 20;
    std::vector<void*> weights;
    for (std::size_t i = 0; i < kLayers; ++i) {
      weights.push_back(rt.allocate(fmt::format("w{}", i), kBytes).value().address);
      std::memset(weights.back(), static_cast<int>(i + 1), kBytes);
    }
    std::uint64_t off_plan_before_last_steps = 0;
    for (int step = 0; step < 12; ++step) {
      if (step == 8) off_plan_before_last_steps = rt.stats().migration.off_plan_steps;
      ASSERT_TRUE(rt.step_begin().is_ok());
      std::vector<void*> born;
      if (one_off && step == 1) born.push_back(rt.allocate("extra", kBytes).value().address);
      const void* before = nullptr;
      for (std::size_t i = 0; i < kLayers; ++i) {  // forward: each layer reads its weights
        void* out = rt.allocate(fmt::format("a{}", i), kBytes).value().address;
        born.push_back(out);
        std::vector<const void*> reads{weights[i]};
        if (before != nullptr) reads.push_back(before);
        const void* writes[] = {out};
        ASSERT_TRUE(rt.layer_begin(fmt::format("l{}", i), reads, writes).is_ok());
        std::memset(out, static_cast<int>(i), kBytes);
        ASSERT_TRUE(rt.layer_end().is_ok());
        before = out;
      }
      for (std::size_t i = kLayers; i-- > 0;) {  // backward: each layer reads its activation again
        const void* reads[] = {born[born.size() - kLayers + i], weights[i]};
        ASSERT_TRUE(rt.layer_begin(fmt::format("b{}", i), reads, {}).is_ok());
        ASSERT_TRUE(rt.layer_end().is_ok());
      }
      ASSERT_TRUE(rt.step_end().is_ok());
      for (void* b : born) ASSERT_TRUE(rt.free(b).is_ok());
    }
    EXPECT_EQ(rt.profiled_steps(), one_off ? 2u : 1u);
    const RuntimeStats stats = rt.stats();
    EXPECT_EQ(stats.migration.off_plan_steps > 0, one_off);
    EXPECT_EQ(stats.policy, "sentinel");
    EXPECT_EQ(stats.migration.off_plan_steps, off_plan_before_last_steps) << "the last steps ran unplanned";
    for (std::size_t i = 0; i < kLayers; ++i) {  // results never depend on where a tensor lives
      const auto* bytes = static_cast<const unsigned char*>(rt.address_of(rt.object(weights[i])->id).value());
      EXPECT_EQ(bytes[0], i + 1);
      EXPECT_EQ(bytes[kBytes - 1], i + 1);
    }
  }
}

// What a layer touches without declaring it (PyTorch's functional code, autograd's saved tensors)
// costs on an emulated tier all the same: the profiled step sees it (page protection), and the
// steps of its kind charge it where the object is then. Here a layer writes 1 MiB it does not
// declare, on the slow tier; the same run without that write charges none.
TEST(Runtime, UndeclaredAccessesTheProfileSawAreCharged) {
  constexpr std::size_t kBytes = 1 << 20;
  for (const bool undeclared_write : {true, false}) {
    SCOPED_TRACE(undeclared_write ? "the layer writes an object it does not declare" : "it does not");
    RuntimeOptions options("fast=dram:64MiB,slow=emulated:optane:256MiB");
    options.policy = "slow-only";
    options.trial_steps = 0;
    auto created = Runtime::create(options);
    ASSERT_TRUE(created) << created.status().to_string();
    Runtime& rt = *created.value();
    const ObjectInfo w = rt.allocate("w", kBytes).value();
    const ObjectInfo u = rt.allocate("u", kBytes, kDefaultGroup, /*preferred=*/1).value();
    ASSERT_EQ(u.tier, 1u);
    for (int step = 0; step < 5; ++step) {
      ASSERT_TRUE(rt.step_begin().is_ok());
      const void* reads[] = {w.address};
      ASSERT_TRUE(rt.layer_begin("l0", reads, {}).is_ok());
      if (undeclared_write) std::memset(u.address, step, kBytes);
      ASSERT_TRUE(rt.layer_end().is_ok());
      ASSERT_TRUE(rt.step_end().is_ok());
    }
    const RuntimeStats stats = rt.stats();
    ASSERT_EQ(stats.policy, "slow-only");
    EXPECT_EQ(rt.object(u.address)->tier, 1u);
    EXPECT_EQ(rt.object(w.address)->tier, 1u);
    EXPECT_EQ(stats.last_step_undeclared_slow_bytes, undeclared_write ? kBytes : 0u);
    EXPECT_EQ(stats.last_step_slow_bytes, kBytes + (undeclared_write ? kBytes : 0u));
  }
}

// An object born inside a layer (PyTorch allocates a layer's outputs there) is written by it: on an
// emulated tier its bytes are charged as the layer's writes, with no policy and no profile needed.
// One born before the layer begins is charged where a layer declares it, as any.
TEST(Runtime, AnObjectBornInsideALayerIsChargedAsItsWrite) {
  constexpr std::size_t kBytes = 1 << 20;
  auto rt = make("fast=dram:64MiB,slow=emulated:optane:256MiB");
  ASSERT_NE(rt, nullptr);
  ASSERT_TRUE(rt->step_begin().is_ok());
  const ObjectInfo before = rt->allocate("before", kBytes, kDefaultGroup, /*preferred=*/1).value();
  ASSERT_TRUE(rt->layer_begin("l0", {}, {}).is_ok());
  const ObjectInfo inside = rt->allocate("inside", kBytes, kDefaultGroup, /*preferred=*/1).value();
  const ObjectInfo fast = rt->allocate("fast", kBytes).value();  // on the fast tier: no charge
  ASSERT_TRUE(rt->layer_end().is_ok());
  ASSERT_TRUE(rt->step_end().is_ok());
  ASSERT_EQ(inside.tier, 1u);
  ASSERT_EQ(fast.tier, 0u);
  const RuntimeStats stats = rt->stats();
  EXPECT_EQ(stats.last_step_undeclared_slow_bytes, kBytes);
  EXPECT_EQ(stats.last_step_slow_bytes, kBytes);
  // What the cost model booked for the layer (computed from the bytes, not a clock): one write.
  ASSERT_EQ(stats.tier_emulated_charge_ns.size(), 2u);
  EXPECT_EQ(stats.tier_emulated_charge_ns[0], 0u);
  EXPECT_EQ(stats.tier_emulated_charge_ns[1], rt->tier(1).cost_model()->layer_charge_ns(0, kBytes));
  EXPECT_GT(stats.tier_emulated_charge_ns[1], 0u);
  for (const ObjectInfo& o : {before, inside, fast}) ASSERT_TRUE(rt->free(o.address).is_ok());
}

TEST(Runtime, MarksOutOfOrderAreErrors) {
  auto rt = make("fast=dram:64MiB");
  ASSERT_NE(rt, nullptr);
  EXPECT_EQ(rt->layer_begin("l", {}, {}).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(rt->layer_end().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(rt->step_end().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(rt->step_begin().is_ok());
  EXPECT_EQ(rt->step_begin().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(rt->layer_begin("outer", {}, {}).is_ok());
  EXPECT_EQ(rt->layer_begin("inner", {}, {}).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(rt->step_end().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(rt->layer_end().is_ok());
  int not_an_object = 0;
  const void* bad[] = {&not_an_object};
  const Status s = rt->layer_begin("conv", bad, {});
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("layer 'conv' reads"), std::string::npos) << s.message();
  EXPECT_TRUE(rt->step_end().is_ok());
}

TEST(Runtime, StatsShowBudgetUseAndFallbacks) {
  auto rt = make("fast=dram:2MiB,slow=emulated:optane:64MiB");
  ASSERT_NE(rt, nullptr);
  ASSERT_TRUE(rt->allocate("a", 1 << 20));
  ASSERT_TRUE(rt->allocate("b", 2 << 20));  // does not fit beside a: falls back
  const auto stats = rt->stats();
  EXPECT_EQ(stats.tiers[0].live_bytes, 1u << 20);
  EXPECT_EQ(stats.tiers[0].budget_bytes, 2u << 20);
  EXPECT_EQ(stats.tiers[0].fallbacks_out, 1u);
  EXPECT_EQ(stats.tiers[1].live_bytes, 2u << 20);
  EXPECT_EQ(stats.tiers[1].fallbacks_in, 1u);
}

TEST(CApi, AllocatesMarksAndReportsErrors) {
  tt_runtime* rt = nullptr;
  ASSERT_EQ(tt_runtime_create("fast=dram:1MiB,slow=emulated:optane:16MiB", &rt), TT_OK) << tt_last_error();
  ASSERT_EQ(tt_tier_count(rt), 2u);
  EXPECT_EQ(tt_device_stream(rt), 0u) << "host tiers: no device stream";
  EXPECT_EQ(tt_device_stream(nullptr), 0u);
  void* a = nullptr;
  ASSERT_EQ(tt_alloc(rt, "a", 2 << 20, 0, &a), TT_OK);
  ASSERT_NE(a, nullptr);
  std::memset(a, 3, 2 << 20);
  tt_tier_stats stats;
  ASSERT_EQ(tt_tier_stats_get(rt, 1, &stats), TT_OK);
  EXPECT_STREQ(stats.name, "slow");
  EXPECT_EQ(stats.live_bytes, 2u << 20);
  EXPECT_EQ(stats.fallbacks_in, 1u);
  std::size_t needed = 0;
  EXPECT_EQ(tt_profile_json(rt, nullptr, 0, &needed), TT_NOT_FOUND);
  for (int step = 0; step < 2; ++step) {  // the second step is profiled
    EXPECT_EQ(tt_step_begin(rt), TT_OK);
    const void* reads[] = {a};
    EXPECT_EQ(tt_layer_begin(rt, "l", reads, 1, nullptr, 0), TT_OK);
    volatile char sink = static_cast<const volatile char*>(a)[100];
    (void)sink;
    EXPECT_EQ(tt_layer_end(rt), TT_OK);
    EXPECT_EQ(tt_step_end(rt), TT_OK);
  }
  EXPECT_EQ(tt_profile_json(rt, nullptr, 0, &needed), TT_OUT_OF_MEMORY);
  std::string json(needed, '\0');
  ASSERT_EQ(tt_profile_json(rt, json.data(), json.size(), nullptr), TT_OK) << tt_last_error();
  EXPECT_NE(json.find("\"schema\": \"tensortier.step_profile/1\""), std::string::npos);
  EXPECT_NE(json.find("\"pages_read\": 1"), std::string::npos);  // the layer's one read
  EXPECT_EQ(tt_free(rt, a), TT_OK);
  EXPECT_EQ(tt_free(rt, a), TT_NOT_FOUND);
  EXPECT_NE(std::strstr(tt_last_error(), "already freed"), nullptr);
  void* z = nullptr;
  EXPECT_EQ(tt_alloc(rt, "z", 0, 0, &z), TT_INVALID_ARGUMENT);
  EXPECT_EQ(tt_tier_stats_get(rt, 9, &stats), TT_INVALID_ARGUMENT);
  tt_runtime_destroy(rt);
  tt_runtime* bad = nullptr;
  EXPECT_EQ(tt_runtime_create("fast=ram", &bad), TT_INVALID_ARGUMENT);
  EXPECT_EQ(bad, nullptr);
  EXPECT_NE(std::strstr(tt_last_error(), "unknown tier kind 'ram'"), nullptr);
  EXPECT_EQ(tt_runtime_create("x", nullptr), TT_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace tensortier
