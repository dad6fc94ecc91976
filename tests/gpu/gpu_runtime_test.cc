// GPU tiers in the runtime, on the fake CUDA runtime (fake_cuda.h): no GPU needed. A spec of
// `cuda` and `pinned` tiers opens through the CUDA tier provider; objects live in device memory
// that the CPU cannot touch (the fake maps it with no access: a CPU read or write would fault and
// fail the test); moves go through the CUDA copy engine; a policy runs with steps profiled from
// declared accesses; and the fake's happens-before graph finds no copy racing a layer's kernel.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "fake_cuda.h"
#include "tensortier/dnn/backend.h"
#include "tensortier/dnn/data.h"
#include "tensortier/dnn/engine.h"
#include "tensortier/gpu/copy_engine.h"
#include "tensortier/gpu/gpu_tier.h"
#include "tensortier/runtime.h"

namespace tensortier::gpu {
namespace {

using testing::FakeCuda;
constexpr std::size_t kMiB = std::size_t{1} << 20;

struct FakeRuntime {
  std::shared_ptr<CudaTierProvider> provider;
  std::unique_ptr<Runtime> runtime;
};

Result<FakeRuntime> fake_runtime(const std::string& spec, RuntimeOptions options = {}, int devices = 1) {
  FakeRuntime r;
  r.provider = std::make_shared<CudaTierProvider>(FakeCuda::install(devices, std::uint64_t{1} << 30));
  FakeCuda::get().set_copy_gbps(CopyKind::kHostToDevice, 50);  // the fake link, as the provider measures it
  FakeCuda::get().set_copy_gbps(CopyKind::kDeviceToHost, 25);
  options.tier_spec = spec;
  options.tier_provider = r.provider;
  Result<std::unique_ptr<Runtime>> runtime = Runtime::create(options);
  if (!runtime) return runtime.status();
  r.runtime = std::move(runtime).value();
  return r;
}

bool holds(const void* p, std::size_t n, int value) {
  const std::vector<std::byte> bytes = FakeCuda::get().read_device(p, n);
  for (std::byte b : bytes) {
    if (b != static_cast<std::byte>(value)) return false;
  }
  return true;
}

TEST(GpuTiers, AreOpenedByTheProviderAsDeviceAndPageLockedMemory) {
  auto r = fake_runtime("fast=cuda:0:64MiB,slow=pinned:256MiB");
  ASSERT_TRUE(r) << r.status().to_string();
  Runtime& rt = *r->runtime;
  ASSERT_EQ(rt.tier_count(), 2u);
  EXPECT_EQ(rt.tier(0).range_kind(), RangeKind::kDevice);
  EXPECT_EQ(rt.tier(1).range_kind(), RangeKind::kHeap);
  EXPECT_EQ(rt.tier(0).budget_bytes(), 64 * kMiB);
  EXPECT_NE(rt.describe().find("device memory, one arena"), std::string::npos) << rt.describe();
  EXPECT_NE(rt.describe().find("page-locked host memory"), std::string::npos) << rt.describe();
  EXPECT_EQ(rt.profile_options().accesses, profiler::AccessSource::kDeclared)
      << "page protection cannot see device memory";
  EXPECT_NE(rt.copy_threads_note().find("cuda copy engine"), std::string::npos) << rt.copy_threads_note();
  EXPECT_EQ(FakeCuda::get().live_allocations(), 2u) << "one arena a tier (the link's buffers are gone)";
  EXPECT_NEAR(r->provider->link_gbps().to_device, 50, 0.1) << "measured on the fake's link";
  EXPECT_NEAR(r->provider->link_gbps().to_host, 25, 0.1);
}

TEST(GpuTiers, ALinkThatGivesNoTimeIsNotMeasured) {
  auto provider = std::make_shared<CudaTierProvider>(FakeCuda::install());
  RuntimeOptions options("fast=cuda:0:64MiB,slow=pinned:64MiB");
  options.tier_provider = provider;
  auto rt = Runtime::create(options);
  ASSERT_TRUE(rt) << rt.status().to_string();
  EXPECT_EQ(provider->link_gbps().to_device, 0) << "events gave no time: plans keep their defaults";
  rt.value().reset();  // the runtime and the provider's device before the fake they live on goes
  provider.reset();
  options.tier_provider.reset();
  auto pinned_only = std::make_shared<CudaTierProvider>(FakeCuda::install());
  FakeCuda::get().set_copy_gbps(CopyKind::kHostToDevice, 50);
  options.tier_spec = "fast=dram:64MiB,slow=pinned:64MiB";
  options.tier_provider = pinned_only;
  ASSERT_TRUE(Runtime::create(options));
  EXPECT_EQ(pinned_only->link_gbps().to_device, 0) << "no device tier: no link to measure";
  EXPECT_EQ(FakeCuda::get().copies(CopyKind::kHostToDevice), 0);
}

TEST(GpuTiers, ObjectsMoveBetweenDeviceAndPinnedThroughTheCopyEngineWithEveryByte) {
  auto r = fake_runtime("fast=cuda:0:64MiB,slow=pinned:256MiB");
  ASSERT_TRUE(r) << r.status().to_string();
  Runtime& rt = *r->runtime;
  FakeCuda& fake = FakeCuda::get();
  std::vector<ObjectInfo> objects;
  for (const std::size_t bytes : {3 * kMiB + 5, 10 * kMiB, 4096 * std::size_t{3}}) {
    auto o = rt.allocate("x", bytes);
    ASSERT_TRUE(o) << o.status().to_string();
    EXPECT_EQ(o->tier, 0u);
    EXPECT_TRUE(fake.on_device(o->address)) << "born in the device arena";
    fake.write_device(o->address, static_cast<int>(objects.size() + 1), bytes);
    objects.push_back(*o);
  }
  const int outs = fake.copies(CopyKind::kDeviceToHost), ins = fake.copies(CopyKind::kHostToDevice);
  for (std::size_t i = 0; i < objects.size(); ++i) {
    const ObjectInfo& o = objects[i];
    const int value = static_cast<int>(i + 1);
    auto out = rt.move(o.id, 1);
    ASSERT_TRUE(out) << out.status().to_string();
    EXPECT_EQ(out->method, MoveMethod::kNewAddress);
    void* home = rt.address_of(o.id).value();
    EXPECT_FALSE(fake.on_device(home));
    EXPECT_EQ(static_cast<const unsigned char*>(home)[o.bytes - 1], value) << "pinned memory is the host's";
    auto in = rt.move(o.id, 0);
    ASSERT_TRUE(in) << in.status().to_string();
    void* back = rt.address_of(o.id).value();
    EXPECT_TRUE(fake.on_device(back));
    EXPECT_TRUE(holds(back, o.bytes, value)) << "object " << i;
  }
  EXPECT_EQ(fake.copies(CopyKind::kDeviceToHost), outs + 3);
  EXPECT_EQ(fake.copies(CopyKind::kHostToDevice), ins + 3);
  EXPECT_TRUE(fake.races().empty()) << fake.races().front();
  // A small object shares its chunk's range, which cannot move to a new address: refused, intact.
  auto small = rt.allocate("s", 100);
  ASSERT_TRUE(small);
  fake.write_device(small->address, 7, 100);
  EXPECT_EQ(rt.move(small->id, 1).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(holds(rt.address_of(small->id).value(), 100, 7));
  for (const ObjectInfo& o : objects) EXPECT_TRUE(rt.free(o.id).is_ok());
}

// Host code that pins an object and queues a kernel on it (on device_stream()) before unpinning:
// a later move of the object is ordered after that kernel, as after a layer's.
TEST(GpuTiers, WorkQueuedOnPinnedObjectsComesBeforeTheirMoves) {
  auto r = fake_runtime("fast=cuda:0:64MiB,slow=pinned:64MiB");
  ASSERT_TRUE(r) << r.status().to_string();
  Runtime& rt = *r->runtime;
  FakeCuda& fake = FakeCuda::get();
  ASSERT_NE(rt.device_stream(), 0u);
  auto o = rt.allocate("batch", 4 * kMiB);
  ASSERT_TRUE(o);
  const ObjectId ids[] = {o->id};
  void* at[1] = {nullptr};
  ASSERT_TRUE(rt.pin_objects(ids, at).is_ok());
  fake.kernel(rt.device_stream(), {}, {FakeCuda::bytes(at[0], 4 * kMiB)}, "the loader fills the batch");
  rt.unpin_objects(ids);
  ASSERT_TRUE(rt.move(o->id, 1));
  EXPECT_TRUE(fake.races().empty()) << fake.races().front();
}

TEST(GpuTiers, BirthsPastTheDeviceBudgetGoToPinnedMemory) {
  auto r = fake_runtime("fast=cuda:0:8MiB,slow=pinned:64MiB");
  ASSERT_TRUE(r) << r.status().to_string();
  Runtime& rt = *r->runtime;
  std::vector<TierIndex> tiers;
  for (int i = 0; i < 3; ++i) tiers.push_back(rt.allocate("a", 3 * kMiB).value().tier);
  EXPECT_EQ(tiers, (std::vector<TierIndex>{0, 0, 1})) << "the third does not fit in 8 MiB";
}

TEST(GpuTiers, WhatCannotBeOpenedIsOneClearLine) {
  auto none = fake_runtime("fast=cuda:0:64MiB,slow=pinned:256MiB", {}, /*devices=*/0);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(none.status().message().find("tier 'fast' (cuda): no CUDA device to use on this machine"),
            std::string::npos)
      << none.status().message();
  auto second = fake_runtime("fast=cuda:1:64MiB");
  ASSERT_FALSE(second);
  EXPECT_NE(second.status().message().find("no CUDA device 1"), std::string::npos)
      << second.status().message();
  auto two = fake_runtime("fast=cuda:0:64MiB,slow=cuda:0:64MiB");
  ASSERT_FALSE(two);
  EXPECT_EQ(two.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(two.status().message().find("both device memory"), std::string::npos) << two.status().message();
  auto too_big = fake_runtime("fast=cuda:0:4GiB");
  ASSERT_FALSE(too_big);
  EXPECT_EQ(too_big.status().code(), StatusCode::kOutOfMemory) << too_big.status().to_string();
  setenv("TENSORTIER_PROFILE_ACCESSES", "protection", 1);
  auto protect = fake_runtime("fast=cuda:0:64MiB");
  unsetenv("TENSORTIER_PROFILE_ACCESSES");
  ASSERT_FALSE(protect);
  EXPECT_NE(protect.status().message().find("tier 'fast' is device memory, which page protection cannot see"),
            std::string::npos)
      << protect.status().message();
}

// The CPU backend's layers cannot read device memory: the engine refuses it a tensor there, saying
// so, and leaves nothing behind; pinned memory is the host's, and its tensors are made.
TEST(GpuTiers, TheCpuBackendRefusesTensorsInDeviceMemory) {
  const dnnl::memory::desc desc({256, 256}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::ab);
  {  // each fake runtime goes before the next fake is installed
    auto r = fake_runtime("fast=cuda:0:64MiB,slow=pinned:64MiB");
    ASSERT_TRUE(r) << r.status().to_string();
    dnn::Engine engine(*r->runtime);
    auto tensor = engine.allocate("w", desc, dnn::kParams);
    ASSERT_FALSE(tensor);
    EXPECT_EQ(tensor.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(tensor.status().message().find("tier 'fast', device memory"), std::string::npos)
        << tensor.status().message();
    EXPECT_EQ(r->runtime->stats().live_objects, 0u);
  }
  auto host = fake_runtime("fast=pinned:64MiB");
  ASSERT_TRUE(host) << host.status().to_string();
  dnn::Engine on_pinned(*host->runtime);
  EXPECT_EQ(host->runtime->device_stream(), 0u) << "no device tier, no layers on the device";
  auto pinned = on_pinned.allocate("w", desc, dnn::kParams);
  ASSERT_TRUE(pinned) << pinned.status().to_string();
  EXPECT_EQ(pinned->data()[desc.get_size() / 4 - 1], 0.0F) << "zero-filled on the host";
}

// Host code reaches an object wherever it lives: written, read and zeroed through the provider's
// copies in device memory (a CPU touch there would fault), by memcpy in pinned memory; a range
// past the object's end is refused with nothing copied.
TEST(GpuTiers, HostCodeWritesAndReadsObjectsInDeviceMemoryThroughCopies) {
  auto r = fake_runtime("fast=cuda:0:64MiB,slow=pinned:64MiB");
  ASSERT_TRUE(r) << r.status().to_string();
  Runtime& rt = *r->runtime;
  FakeCuda& fake = FakeCuda::get();
  auto o = rt.allocate("batch", 3 * kMiB + 12);
  ASSERT_TRUE(o) << o.status().to_string();
  ASSERT_TRUE(fake.on_device(o->address));
  std::vector<std::uint8_t> bytes(o->bytes);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>(i * 7 + 3);
  const int ins = fake.copies(CopyKind::kHostToDevice), outs = fake.copies(CopyKind::kDeviceToHost);
  ASSERT_TRUE(rt.write_object(o->id, 0, bytes.data(), bytes.size()).is_ok());
  EXPECT_EQ(fake.copies(CopyKind::kHostToDevice), ins + 1);
  const std::vector<std::byte> on_device = fake.read_device(o->address, o->bytes);
  EXPECT_EQ(std::memcmp(on_device.data(), bytes.data(), bytes.size()), 0);
  std::vector<std::uint8_t> back(100);
  ASSERT_TRUE(rt.read_object(o->id, 1000, back.data(), back.size()).is_ok());
  EXPECT_EQ(fake.copies(CopyKind::kDeviceToHost), outs + 1);
  EXPECT_EQ(std::memcmp(back.data(), bytes.data() + 1000, back.size()), 0);
  const Status past = rt.write_object(o->id, o->bytes - 4, bytes.data(), 8);
  EXPECT_EQ(past.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(past.message().find("pass its end"), std::string::npos) << past.message();
  EXPECT_EQ(std::memcmp(fake.read_device(o->address, o->bytes).data(), bytes.data(), bytes.size()), 0)
      << "nothing written";
  // A zero fill is queued after the layers' work, not waited for; host code's pin waits for it.
  const StreamHandle compute = rt.device_stream();
  const int syncs = fake.stream_syncs(compute);
  ASSERT_TRUE(rt.zero_object(o->id).is_ok());
  EXPECT_EQ(fake.stream_syncs(compute), syncs);
  EXPECT_TRUE(holds(o->address, o->bytes, 0));
  void* pinned_at = nullptr;
  ASSERT_TRUE(rt.pin_objects(std::span<const ObjectId>(&o->id, 1), std::span<void*>(&pinned_at, 1)).is_ok());
  EXPECT_EQ(fake.stream_syncs(compute), syncs + 1) << "pin_objects waits for the device's queued work";
  rt.unpin_objects(std::span<const ObjectId>(&o->id, 1));
  // Moved to pinned memory, the same calls copy on the host.
  ASSERT_TRUE(rt.write_object(o->id, 0, bytes.data(), bytes.size()).is_ok());
  ASSERT_TRUE(rt.move(o->id, 1));
  const int copies_before = fake.copies(CopyKind::kDeviceToHost);
  ASSERT_TRUE(rt.read_object(o->id, 0, back.data(), back.size()).is_ok());
  EXPECT_EQ(fake.copies(CopyKind::kDeviceToHost), copies_before) << "host memory: read in place";
  EXPECT_EQ(std::memcmp(back.data(), bytes.data(), back.size()), 0);
  EXPECT_EQ(rt.read_object(ObjectId{987654}, 0, back.data(), 1).code(), StatusCode::kNotFound);
}

// A device backend's engine (a test double: layers are not its part here) zero-fills its tensors
// and fills a batch in device memory, and reads them back, all through copies: the data loader
// and the engine never touch device memory from the CPU.
class DeviceMemoryBackend final : public dnn::Backend {
 public:
  std::string_view name() const override { return "test (device memory, no layers)"; }
  bool uses_device_memory() const override { return true; }
  Result<std::unique_ptr<dnn::Layer>> make_layer(const dnn::LayerSpec& /*spec*/) override {
    return failed_precondition("no layers");
  }
  Result<dnn::StepResult> softmax_cross_entropy(dnn::Engine&, const dnn::Tensor&, const dnn::Tensor&,
                                                const dnn::Tensor*) override {
    return failed_precondition("no loss");
  }
  Status accumulate(dnn::Engine&, std::string_view, const dnn::Tensor&, const dnn::Tensor&) override {
    return failed_precondition("no sums");
  }
  Status sgd_update(dnn::Engine&, dnn::Param&, const dnn::SgdOptions&) override {
    return failed_precondition("no SGD");
  }
};

TEST(GpuTiers, TheEngineAndTheDataLoaderReachDeviceTensorsThroughCopies) {
  auto r = fake_runtime("fast=cuda:0:64MiB,slow=pinned:64MiB");
  ASSERT_TRUE(r) << r.status().to_string();
  FakeCuda& fake = FakeCuda::get();
  DeviceMemoryBackend backend;
  dnn::Engine engine(*r->runtime, backend);
  const dnnl::memory::desc desc({64, 300}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::ab);
  // Dirty device memory first: a zero-filled tensor must be zeroed, not found zero.
  auto dirty = r->runtime->allocate("dirty", desc.get_size());
  ASSERT_TRUE(dirty);
  fake.write_device(dirty->address, 0x5a, dirty->bytes);
  ASSERT_TRUE(r->runtime->free(dirty->id).is_ok());
  auto zeroed = engine.allocate("w", desc, dnn::kParams);
  ASSERT_TRUE(zeroed) << zeroed.status().to_string();
  ASSERT_TRUE(fake.on_device(zeroed->address()));
  EXPECT_TRUE(holds(zeroed->address(), zeroed->bytes(), 0));
  const dnn::Dataset data = dnn::synthetic_dataset(10, 1, 5, 7, 4, 11);
  dnn::BatchIterator it(data, 4, 3, /*shuffle=*/false);
  dnn::Batch batch;
  ASSERT_TRUE(it.next(engine, batch).is_ok());
  ASSERT_TRUE(fake.on_device(batch.images.address()));
  std::vector<float> images;
  std::vector<std::int32_t> labels;
  ASSERT_TRUE(engine
                  .read_to_host(batch.images,
                                [&](const void* b) {
                                  const auto* f = static_cast<const float*>(b);
                                  images.assign(f, f + batch.images.elements());
                                })
                  .is_ok());
  ASSERT_TRUE(engine
                  .read_to_host(batch.labels,
                                [&](const void* b) {
                                  const auto* l = static_cast<const std::int32_t*>(b);
                                  labels.assign(l, l + 4);
                                })
                  .is_ok());
  const std::size_t size = 5 * 7;
  EXPECT_EQ(images, std::vector<float>(data.images.begin(), data.images.begin() + 4 * size));
  EXPECT_EQ(labels, std::vector<std::int32_t>(data.labels.begin(), data.labels.begin() + 4));
}

// The real CUDA runtime through the default provider: on a machine without a GPU, one line that
// names the tier; with one, the tiers open.
TEST(GpuTiers, TheRealRuntimeOpensThemOrSaysThereIsNoGpu) {
  auto rt = Runtime::create({"fast=cuda:0:64MiB,slow=pinned:64MiB"});
  if (rt) {
    EXPECT_EQ(rt.value()->tier(0).range_kind(), RangeKind::kDevice);
    return;
  }
  EXPECT_EQ(rt.status().code(), StatusCode::kUnavailable) << rt.status().to_string();
  EXPECT_NE(rt.status().message().find("tier 'fast' (cuda): no CUDA device"), std::string::npos)
      << rt.status().message();
}

// Layer i's kernel takes this long in the fake's virtual time (the fake advances its streams'
// clocks by it; no clock of this machine is read, so what the runtime records is exact at any load).
double virtual_kernel_ms(int layer) {
  return 0.5 + 0.25 * layer;
}

// A policy on device tiers: weights used in turn (each by three layers in a row, so that a move in
// costs less than three uses over the link), activations born and freed each layer; the plan
// moves weights between the device and pinned memory through the copy engine. Every layer finds
// the bytes the last one wrote, and no copy races a layer's kernel (each layer's kernel is issued
// on the compute stream and the copies on the copy streams, ordered only by the events the
// engine takes from layer_used). Each layer's time in the records and the profile is its kernel's
// on the device.
void train_on_device_tiers(const std::string& policy, const std::string& budget = "40%") {
  SCOPED_TRACE(policy);
  RuntimeOptions options;
  options.policy = policy;
  options.fast_budget = budget;
  options.trial_steps = 0;
  auto r = fake_runtime("fast=cuda:0:64MiB,slow=pinned:256MiB", options);
  ASSERT_TRUE(r) << r.status().to_string();
  Runtime& rt = *r->runtime;
  FakeCuda& fake = FakeCuda::get();
  const StreamHandle compute = rt.device_stream();  // where a program queues its layers' kernels
  ASSERT_EQ(compute, r->provider->device()->compute());
  constexpr int kWeights = 6, kUses = 3;
  constexpr std::size_t kBytes = 4 * kMiB;
  std::vector<ObjectId> weights;
  std::vector<int> value(kWeights);
  for (int i = 0; i < kWeights; ++i) {
    auto w = rt.allocate("w", kBytes);
    ASSERT_TRUE(w);
    value[static_cast<std::size_t>(i)] = i + 1;
    fake.write_device(w->address, i + 1, kBytes);
    weights.push_back(w->id);
  }
  for (int step = 0; step < 6; ++step) {
    ASSERT_TRUE(rt.step_begin().is_ok());
    for (int layer = 0; layer < kUses * kWeights; ++layer) {  // weight i in kUses layers in a row
      const auto i = static_cast<std::size_t>(layer / kUses);
      auto act = rt.allocate("a", kBytes / 2);
      ASSERT_TRUE(act);
      const ObjectId ids[2] = {weights[i], act->id};
      std::vector<void*> at(3);
      ASSERT_TRUE(
          rt.layer_begin("layer", std::span<const ObjectId>(ids, 1), std::span<const ObjectId>(ids, 2), at)
              .is_ok());
      ASSERT_TRUE(holds(at[0], kBytes, value[i])) << "step " << step << " layer " << layer;
      fake.kernel(compute, {FakeCuda::bytes(at[0], kBytes)},
                  {FakeCuda::bytes(at[1], kBytes), FakeCuda::bytes(at[2], kBytes / 2)},
                  fmt::format("step {} layer {}: w {} a {}", step, layer, at[0], at[2]),
                  virtual_kernel_ms(layer));
      value[i] = value[i] % 250 + 1;
      fake.write_device(at[1], value[i], kBytes);
      ASSERT_TRUE(rt.layer_end().is_ok());
      ASSERT_TRUE(rt.free(act->id).is_ok());
    }
    ASSERT_TRUE(rt.step_end().is_ok());
  }
  // Layer times are the device's: each layer's virtual kernel time, computed from the fake's events
  // (to float's rounding), not the host's wall time to issue it.
  for (const LayerRecord& l : rt.last_step_layers())
    EXPECT_NEAR(static_cast<double>(l.duration_ns), virtual_kernel_ms(static_cast<int>(l.index)) * 1e6, 1e3)
        << l.index;
  ASSERT_NE(rt.profile(), nullptr);
  ASSERT_EQ(rt.profile()->layers.size(), static_cast<std::size_t>(kUses * kWeights));
  for (const profiler::LayerProfile& l : rt.profile()->layers)
    EXPECT_NEAR(static_cast<double>(l.duration_ns), virtual_kernel_ms(static_cast<int>(l.index)) * 1e6, 1e3)
        << l.index;
  ASSERT_NE(rt.plan(), nullptr) << rt.policy_failure();
  if (policy == "smartpool") {  // every object at its place in the device arena, none moved
    EXPECT_TRUE(rt.plan()->moves.empty());
    EXPECT_GT(rt.plan()->places.fast_bytes, 0u);
    EXPECT_GT(rt.stats().tiers[0].arena_allocations, 0u) << "births at their places";
    EXPECT_EQ(rt.stats().tiers[0].place_misses, 0u);
    EXPECT_EQ(rt.stats().tiers[1].live_bytes, 0u) << "nothing in pinned memory";
  } else {  // SmartPool and AutoSwap together: the moving plan's device stays laid out as smartpool's
    EXPECT_FALSE(rt.plan()->moves.empty()) << "a budget of 40% must move weights";
    EXPECT_GT(rt.plan()->places.fast_bytes, 0u) << "its stays at planned offsets in the device arena";
    EXPECT_LE(rt.plan()->places.fast_bytes, rt.tier(0).budget_bytes()) << "within the device budget";
    EXPECT_GT(rt.stats().tiers[0].arena_allocations, 0u) << "births at their places";
  }
  // (A move may fail on a loaded machine, its place's occupant not gone in time: the object stays,
  // whole, which every layer's check above sees. So failed moves are not counted here.)
  EXPECT_TRUE(fake.races().empty()) << fake.races().size() << " races, e.g. " << fake.races().front();
}

TEST(GpuTiers, SentinelMovesDeviceObjectsAndNoCopyRacesALayer) {
  train_on_device_tiers("sentinel");
}

TEST(GpuTiers, AutoswapMovesDeviceObjectsAndNoCopyRacesALayer) {
  train_on_device_tiers("autoswap");
}

TEST(GpuTiers, SmartpoolPlacesDeviceObjectsInOneArena) {
  train_on_device_tiers("smartpool", "");
}

// The engine's own account of last uses: a copy from bytes a layer used waits for that layer's
// event; a range used again takes the new layer's event; parts of a range outside a new use keep
// the old one.
// CUDA's current device is per thread: on cuda:1, moves and host copies from a thread that never
// chose a device (a mover's) work, every event recorded on its own device's stream (the fake
// refuses others, as CUDA does). Events made on such a thread: Device.EventsMadeOnAnotherThread...
// (here the pool's events come from the opening thread, so this test alone would not see them).
TEST(GpuTiers, ThreadsThatNeverChoseADeviceMoveObjectsOnCuda1) {
  auto r = fake_runtime("fast=cuda:1:64MiB,slow=pinned:64MiB", {}, /*devices=*/2);
  ASSERT_TRUE(r) << r.status().to_string();
  Runtime& rt = *r->runtime;
  FakeCuda& fake = FakeCuda::get();
  auto o = rt.allocate("x", 3 * kMiB);
  ASSERT_TRUE(o) << o.status().to_string();
  fake.write_device(o->address, 7, o->bytes);
  std::thread mover([&] {
    auto out = rt.move(o->id, 1);
    EXPECT_TRUE(out) << out.status().to_string();
    auto in = rt.move(o->id, 0);
    EXPECT_TRUE(in) << in.status().to_string();
    std::vector<std::byte> back(16);
    EXPECT_TRUE(rt.read_object(o->id, 0, back.data(), back.size()).is_ok());
    EXPECT_EQ(back[0], std::byte{7});
  });
  mover.join();
  EXPECT_EQ(fake.wrong_device_records(), 0);
  EXPECT_TRUE(holds(rt.address_of(o->id).value(), o->bytes, 7));
}

// The event pool's first event made on a thread whose current device is another (0, never set):
// made on the device's own, so recording it on the device's stream works.
TEST(Device, EventsMadeOnAnotherThreadAreTheDevicesOwn) {
  const CudaApi& api = FakeCuda::install(/*devices=*/2);
  auto device = Device::open(api, 1);
  ASSERT_TRUE(device) << device.status().to_string();
  std::thread other([&] {
    Result<EventHandle> event = device.value()->record(device.value()->compute());
    EXPECT_TRUE(event) << event.status().to_string();
    if (event) device.value()->release(event.value());
  });
  other.join();
  EXPECT_EQ(FakeCuda::get().wrong_device_records(), 0);
}

TEST(CudaMoveEngine, CopiesWaitForTheLastLayerThatUsedTheirBytes) {
  const CudaApi& api = FakeCuda::install();
  FakeCuda& fake = FakeCuda::get();
  auto device = Device::open(api).value();
  void* slots = nullptr;
  ASSERT_EQ(api.malloc_device(&slots, 8 * kMiB), 0);
  std::vector<std::byte> home(8 * kMiB);
  auto* x = static_cast<std::byte*>(slots);
  {
    CudaMoveEngine engine(*device, 0);
    fake.kernel(device->compute(), {}, {FakeCuda::bytes(x, 4 * kMiB)}, "layer writes x");
    const UsedRange used[] = {{x, 4 * kMiB}};
    engine.layer_used(used);
    const UsedRange part[] = {{x + kMiB, kMiB}};
    engine.layer_used(part);
    EXPECT_EQ(engine.tracked_ranges(), 3u) << "x's first and last MiBs, and the part used again";
    const int waits = fake.waits();
    EXPECT_EQ(engine.copy(home.data(), x, 4 * kMiB, {0, 1}), 1u);
    EXPECT_EQ(fake.waits(), waits + 3) << "one wait per range the copy's bytes overlap";
    EXPECT_TRUE(fake.races().empty()) << fake.races().front();
  }
  // Without layer_used, the same copy races the kernel.
  CudaMoveEngine engine(*device, 0);
  fake.kernel(device->compute(), {}, {FakeCuda::bytes(x + 4 * kMiB, kMiB)}, "layer writes y");
  EXPECT_EQ(engine.copy(home.data(), x + 4 * kMiB, kMiB, {0, 1}), 1u);
  EXPECT_EQ(fake.races().size(), 1u);
  ASSERT_EQ(api.free_device(slots), 0);
}

// Where a layer's event cannot be recorded, the engine waits for the layer's work on the host, so
// the copy after it does not race the kernel; where that wait fails too, every later copy is
// refused (the move fails and the bytes stay where they are) instead of racing.
TEST(CudaMoveEngine, ALayerWhoseEventFailsIsWaitedForOrNoCopyRuns) {
  const CudaApi& api = FakeCuda::install();
  FakeCuda& fake = FakeCuda::get();
  auto device = Device::open(api).value();
  void* slots = nullptr;
  ASSERT_EQ(api.malloc_device(&slots, 2 * kMiB), 0);
  std::vector<std::byte> home(kMiB);
  auto* x = static_cast<std::byte*>(slots);
  const UsedRange used[] = {{x, kMiB}};
  {
    CudaMoveEngine engine(*device, 0);
    fake.kernel(device->compute(), {}, {FakeCuda::bytes(x, kMiB)}, "layer writes x");
    const int syncs = fake.stream_syncs(device->compute());
    fake.fail_next_records(1);
    engine.layer_used(used);
    EXPECT_EQ(fake.stream_syncs(device->compute()), syncs + 1) << "the layer waited for instead";
    EXPECT_EQ(engine.copy(home.data(), x, kMiB, {0, 1}), 1u);
    EXPECT_TRUE(fake.races().empty()) << fake.races().front();
  }
  CudaMoveEngine engine(*device, 0);
  fake.kernel(device->compute(), {}, {FakeCuda::bytes(x + kMiB, kMiB)}, "layer writes y");
  fake.fail_next_records(1, /*syncs_too=*/true);
  const UsedRange y[] = {{x + kMiB, kMiB}};
  engine.layer_used(y);
  EXPECT_EQ(engine.copy(home.data(), x + kMiB, kMiB, {0, 1}), 0u) << "refused: y's kernel may be under way";
  EXPECT_EQ(engine.copy(home.data(), x, kMiB, {0, 1}), 0u) << "and every copy after it";
  EXPECT_TRUE(fake.races().empty()) << fake.races().front();
  ASSERT_EQ(api.free_device(slots), 0);
}

// A step on a device tier ends when the device's queued work does: step_end waits for the layer
// stream before it reads the clock (it read it first: the trial and the profile compared the
// host's issue times, not the GPU's work).
TEST(GpuTiers, AStepEndsWhenTheDevicesQueuedWorkDoes) {
  auto r = fake_runtime("fast=cuda:0:64MiB,slow=pinned:64MiB");
  ASSERT_TRUE(r) << r.status().to_string();
  Runtime& rt = *r->runtime;
  FakeCuda& fake = FakeCuda::get();
  auto o = rt.allocate("x", kMiB);
  ASSERT_TRUE(o) << o.status().to_string();
  const StreamHandle compute = rt.device_stream();
  ASSERT_TRUE(rt.step_begin().is_ok());
  std::vector<void*> at(1);
  ASSERT_TRUE(rt.layer_begin("conv", std::vector<ObjectId>{}, std::vector<ObjectId>{o->id}, at).is_ok());
  fake.kernel(compute, {}, {FakeCuda::bytes(at[0], kMiB)}, "conv writes x", 5.0);
  ASSERT_TRUE(rt.layer_end().is_ok());
  const int syncs = fake.stream_syncs(compute);
  ASSERT_TRUE(rt.step_end().is_ok());
  EXPECT_GT(fake.stream_syncs(compute), syncs) << "step_end did not wait for the device's queued work";
}

}  // namespace
}  // namespace tensortier::gpu
