// The GPU backend's device layer on a fake CUDA runtime (fake_cuda.h): no GPU needed. What is
// checked is what the code orders: a copy starts after the events it is given, a layer waits for
// the copy that brings its bytes, and the fake's happens-before graph finds no copy racing a
// kernel on the same bytes (and finds the race where a wait is left out).
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "fake_cuda.h"
#include "tensortier/allocator/tier_spec.h"
#include "tensortier/gpu/arena.h"
#include "tensortier/gpu/copy_engine.h"
#include "tensortier/gpu/device.h"
#include "tensortier/gpu/link.h"

namespace tensortier::gpu {
namespace {

using testing::FakeCuda;
constexpr std::size_t kMiB = std::size_t{1} << 20;

TierConfig tier(const std::string& spec) {
  auto configs = parse_tier_spec(spec);
  EXPECT_TRUE(configs) << configs.status().to_string();
  return configs ? configs->front() : TierConfig{};
}

TEST(FakeCuda, DeviceMemoryIsNotTheCpusAndHostWaitsOrderWhatFollows) {
  const CudaApi& api = FakeCuda::install();
  FakeCuda& fake = FakeCuda::get();
  void* device = nullptr;
  ASSERT_EQ(api.malloc_device(&device, 3 * kMiB + 5), 0);
  EXPECT_TRUE(fake.on_device(static_cast<std::byte*>(device) + 3 * kMiB));
  EXPECT_DEATH((void)*static_cast<volatile unsigned char*>(device), "")
      << "a CPU read of device memory faults";
  fake.write_device(device, 9, kMiB);
  StreamHandle compute = 0, copies = 0;
  ASSERT_EQ(api.stream_create(&compute), 0);
  ASSERT_EQ(api.stream_create(&copies), 0);
  std::vector<std::byte> home(kMiB);
  ASSERT_EQ(api.memcpy_async(home.data(), device, kMiB, CopyKind::kDeviceToHost, copies), 0);
  EXPECT_EQ(home[kMiB - 1], std::byte{9});
  EXPECT_EQ(fake.copies(CopyKind::kDeviceToHost), 1);
  ASSERT_EQ(api.stream_synchronize(copies), 0);  // the host waits for the copy out
  fake.kernel(compute, {}, {FakeCuda::bytes(device, kMiB)}, "a layer overwrites it");
  EXPECT_TRUE(fake.races().empty()) << "issued after the host's wait for the copy: ordered after it";
  ASSERT_EQ(api.free_device(device), 0);
}

TEST(FakeCuda, FindsACopyRacingAKernelAndNotOneOrderedAfterIt) {
  const CudaApi& api = FakeCuda::install();
  StreamHandle compute = 0, copies = 0;
  ASSERT_EQ(api.stream_create(&compute), 0);
  ASSERT_EQ(api.stream_create(&copies), 0);
  std::vector<std::byte> x(4096), home(4096);
  FakeCuda& fake = FakeCuda::get();
  fake.kernel(compute, {}, {FakeCuda::bytes(x.data(), x.size())}, "layer writes x");
  ASSERT_EQ(api.memcpy_async(home.data(), x.data(), x.size(), CopyKind::kDeviceToHost, copies), 0);
  ASSERT_EQ(fake.races().size(), 1u) << "a copy of x not ordered after the layer that writes it";
  EventHandle written = 0;
  ASSERT_EQ(api.event_create(&written), 0);
  ASSERT_EQ(api.event_record(written, compute), 0);
  ASSERT_EQ(api.stream_wait_event(copies, written), 0);
  ASSERT_EQ(api.memcpy_async(home.data(), x.data(), x.size(), CopyKind::kDeviceToHost, copies), 0);
  EXPECT_EQ(fake.races().size(), 1u) << "ordered by the event: no new race";
}

TEST(GpuDevice, NoDeviceIsOneClearLineNotACrash) {
  const CudaApi& api = FakeCuda::install(/*devices=*/0);
  auto device = Device::open(api);
  ASSERT_FALSE(device);
  EXPECT_EQ(device.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(device.status().message().find("no CUDA device to use on this machine"), std::string::npos)
      << device.status().message();
  const CudaApi& one = FakeCuda::install(/*devices=*/1);
  auto second = Device::open(one, 1);
  ASSERT_FALSE(second);
  EXPECT_NE(second.status().message().find("no CUDA device 1 on this machine (1 device)"), std::string::npos)
      << second.status().message();
}

TEST(GpuArena, TiersOpenAsOneAllocationAndRefuseWhatTheyCannotHold) {
  const CudaApi& api = FakeCuda::install(1, std::uint64_t{1} << 30);
  auto device = Device::open(api).value();
  EXPECT_NE(device->describe().find("Fake GPU (cuda:0, 1.0 GiB, compute 9.0"), std::string::npos)
      << device->describe();
  auto arena = GpuArena::open(*device, tier("fast=cuda:0:256MiB"));
  ASSERT_TRUE(arena) << arena.status().to_string();
  EXPECT_EQ(arena.value()->bytes(), 256 * kMiB);
  EXPECT_EQ(arena.value()->at(0, 256 * kMiB), arena.value()->base());
  EXPECT_EQ(arena.value()->at(255 * kMiB, 2 * kMiB), nullptr) << "past the end";
  EXPECT_EQ(FakeCuda::get().live_allocations(), 1u);
  auto whole = GpuArena::open(*device, tier("fast=cuda:0"));  // no size: 90% of what is free
  ASSERT_TRUE(whole);
  EXPECT_EQ(whole.value()->bytes(), ((std::uint64_t{1} << 30) - 256 * kMiB) / 10 * 9);
  whole.value().reset();
  const Status too_big = GpuArena::open(*device, tier("fast=cuda:0:2GiB")).status();
  EXPECT_EQ(too_big.code(), StatusCode::kOutOfMemory);
  EXPECT_NE(too_big.message().find("768 MiB free of 1.00 GiB"), std::string::npos) << too_big.message();
  EXPECT_EQ(GpuArena::open(*device, tier("slow=pinned")).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(GpuArena::open(*device, tier("fast=cuda:1:1GiB")).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(GpuArena::open(*device, tier("fast=dram:1GiB")).status().code(), StatusCode::kInvalidArgument);
  auto pinned = GpuArena::open(*device, tier("slow=pinned:64MiB"));
  ASSERT_TRUE(pinned);
  EXPECT_EQ(pinned.value()->kind(), TierKind::kPinned);
  arena.value().reset();
  pinned.value().reset();
  EXPECT_EQ(FakeCuda::get().live_allocations(), 0u) << "the arenas gave their memory back";
}

// A step's moves as the executor will issue them: object x leaves its device slot for its home in
// pinned memory after the layer that last writes it, object y comes into that slot after x has
// left, and the layer that reads y waits for y's copy. No copy races a kernel; leaving out the
// layer's wait is a race the fake finds.
TEST(CudaCopyEngine, MovesAreOrderedAfterTheirProducersAndBeforeTheirConsumers) {
  for (const bool layer_waits : {true, false}) {
    const CudaApi& api = FakeCuda::install();
    FakeCuda& fake = FakeCuda::get();
    auto device = Device::open(api).value();
    auto slots = GpuArena::open(*device, tier("fast=cuda:0:64MiB")).value();
    auto homes = GpuArena::open(*device, tier("slow=pinned:64MiB")).value();
    CudaCopyEngine engine(*device);
    void* slot = slots->at(0, kMiB);
    void* x_home = homes->at(0, kMiB);
    void* y_home = homes->at(kMiB, kMiB);
    std::memset(y_home, 7, kMiB);
    fake.kernel(device->compute(), {}, {FakeCuda::bytes(slot, kMiB)}, "layer 3 writes x");
    const EventHandle x_written = device->record(device->compute()).value();
    const EventHandle x_left =
        engine.copy(x_home, slot, kMiB, CopyKind::kDeviceToHost, std::vector<EventHandle>{x_written}).value();
    const EventHandle y_in =
        engine.copy(slot, y_home, kMiB, CopyKind::kHostToDevice, std::vector<EventHandle>{x_left}).value();
    if (layer_waits) {
      ASSERT_TRUE(device->wait(device->compute(), y_in).is_ok());
    }
    fake.kernel(device->compute(), {FakeCuda::bytes(slot, kMiB)}, {}, "layer 7 reads y");
    EXPECT_TRUE(engine.done(y_in));
    EXPECT_EQ(fake.read_device(slot, kMiB)[kMiB - 1], std::byte{7}) << "y's bytes are in the slot";
    if (layer_waits) {
      EXPECT_TRUE(fake.races().empty()) << fake.races().front();
    } else {
      ASSERT_EQ(fake.races().size(), 1u);
      EXPECT_NE(fake.races()[0].find("layer 7 reads y"), std::string::npos) << fake.races()[0];
    }
    for (EventHandle e : {x_written, x_left, y_in}) device->release(e);
  }
}

TEST(CudaCopyEngine, AMoveInThatDoesNotWaitForTheSlotsOccupantRaces) {
  // The previous occupant's move out is what a move in must follow: without it in `after`, the
  // copy in overwrites bytes the copy out still reads.
  const CudaApi& api = FakeCuda::install();
  FakeCuda& fake = FakeCuda::get();
  auto device = Device::open(api).value();
  auto slots = GpuArena::open(*device, tier("fast=cuda:0:8MiB")).value();
  auto homes = GpuArena::open(*device, tier("slow=pinned:8MiB")).value();
  CudaCopyEngine engine(*device);
  const EventHandle out =
      engine.copy(homes->at(0, kMiB), slots->at(0, kMiB), kMiB, CopyKind::kDeviceToHost).value();
  (void)engine.copy(slots->at(0, kMiB), homes->at(kMiB, kMiB), kMiB, CopyKind::kHostToDevice).value();
  EXPECT_EQ(fake.races().size(), 1u);
  (void)engine
      .copy(slots->at(0, kMiB), homes->at(kMiB, kMiB), kMiB, CopyKind::kHostToDevice,
            std::vector<EventHandle>{out})
      .value();
  EXPECT_EQ(fake.races().size(), 1u) << "after the move out: ordered";
  EXPECT_EQ(fake.waits(), 1);
}

// The allocator's copy engine interface on CUDA: the direction follows the tiers, and a copy has
// ended when copy() returns (the mover publishes the new address after it).
TEST(CudaMoveEngine, CopiesEachWayByTheTiersAndReturnsWhenDone) {
  const CudaApi& api = FakeCuda::install();
  auto device = Device::open(api).value();
  auto slots = GpuArena::open(*device, tier("fast=cuda:0:8MiB")).value();
  auto homes = GpuArena::open(*device, tier("slow=pinned:8MiB")).value();
  CudaMoveEngine engine(*device, /*device_tier=*/0);
  EXPECT_EQ(engine.kind_of({1, 0}), CopyKind::kHostToDevice);
  EXPECT_EQ(engine.kind_of({0, 1}), CopyKind::kDeviceToHost);
  EXPECT_EQ(engine.kind_of({0, 0}), CopyKind::kDeviceToDevice);
  EXPECT_EQ(engine.kind_of({1, 2}), CopyKind::kHostToHost);
  std::memset(homes->at(0, kMiB), 5, kMiB);
  EXPECT_EQ(engine.copy(slots->at(0, kMiB), homes->at(0, kMiB), kMiB, {1, 0}), 1u);
  EXPECT_EQ(FakeCuda::get().read_device(slots->at(0, kMiB), kMiB)[kMiB - 1], std::byte{5});
  EXPECT_EQ(engine.copy(homes->at(kMiB, kMiB), slots->at(0, kMiB), kMiB, {0, 1}), 1u);
  EXPECT_EQ(static_cast<const unsigned char*>(homes->at(kMiB, kMiB))[0], 5);
  EXPECT_EQ(engine.name(), "cuda");
}

// The link both ways at once: every copy of a round issued before any is waited for, so the two
// directions run together. On the fake's 40 GB/s each way (separate copy streams), 16 MiB each
// way take as long as one: 80 GB/s together. (Issued and waited one by one, the second started
// when the first ended: 40.)
TEST(GpuLink, CopiesOfOneRoundRunTogether) {
  const CudaApi& api = FakeCuda::install();
  FakeCuda& fake = FakeCuda::get();
  fake.set_copy_gbps(CopyKind::kHostToDevice, 40);
  fake.set_copy_gbps(CopyKind::kDeviceToHost, 40);
  auto device = Device::open(api).value();
  CudaCopyEngine engine(*device);
  void *on_device = nullptr, *pinned = nullptr, *on_device2 = nullptr, *pinned2 = nullptr;
  ASSERT_EQ(api.malloc_device(&on_device, 16 * kMiB), 0);
  ASSERT_EQ(api.malloc_device(&on_device2, 16 * kMiB), 0);
  ASSERT_EQ(api.malloc_pinned(&pinned, 16 * kMiB), 0);
  ASSERT_EQ(api.malloc_pinned(&pinned2, 16 * kMiB), 0);
  const double one_way =
      link_gbps(*device, engine, 16 * kMiB, 3, {{on_device, pinned, CopyKind::kHostToDevice}});
  const double both = link_gbps(
      *device, engine, 16 * kMiB, 3,
      {{on_device, pinned, CopyKind::kHostToDevice}, {pinned2, on_device2, CopyKind::kDeviceToHost}});
  EXPECT_NEAR(one_way, 40, 0.5);
  EXPECT_NEAR(both, 80, 1) << "the two directions ran one after the other";
  for (void* p : {on_device, on_device2}) (void)api.free_device(p);
  for (void* p : {pinned, pinned2}) (void)api.free_pinned(p);
}

}  // namespace
}  // namespace tensortier::gpu
