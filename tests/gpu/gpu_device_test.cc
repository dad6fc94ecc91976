// The GPU backend's device layer on a real GPU: arenas of device and pinned memory, kernels of our
// own writing and checking a pattern, moves through the CUDA copy engine ordered by events, and the
// runtime on GPU tiers, every byte checked on the device. Where this machine has no GPU, every test skips and
// says why.
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "kernels.h"
#include "tensortier/allocator/tier_spec.h"
#include "tensortier/gpu/arena.h"
#include "tensortier/gpu/copy_engine.h"
#include "tensortier/gpu/device.h"
#include "tensortier/runtime.h"

namespace tensortier::gpu {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

class GpuDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto device = Device::open(real_cuda_api());
    if (!device) GTEST_SKIP() << "needs a CUDA device: " << device.status().message();
    device_ = std::move(device).value();
    std::printf("device: %s\n", device_->describe().c_str());
  }
  std::unique_ptr<GpuArena> arena(const std::string& spec) {
    auto a = GpuArena::open(*device_, parse_tier_spec(spec).value().front());
    EXPECT_TRUE(a) << a.status().to_string();
    return a ? std::move(a).value() : nullptr;
  }
  // Mismatching words of [p, p + bytes) against the pattern `seed`, counted on the device.
  std::uint64_t mismatches(const void* p, std::size_t bytes, std::uint32_t seed, GpuArena& scratch) {
    auto* count = static_cast<unsigned long long*>(scratch.at(0, sizeof(unsigned long long)));
    const CudaApi& api = device_->api();
    EXPECT_EQ(api.memset_async(count, 0, sizeof *count, device_->compute()), 0);
    EXPECT_EQ(launch_check(p, bytes / 4, seed, count, device_->compute()), 0);
    unsigned long long host = ~0ULL;
    EXPECT_EQ(api.memcpy_async(&host, count, sizeof host, CopyKind::kDeviceToHost, device_->compute()), 0);
    EXPECT_TRUE(device_->synchronize_stream(device_->compute()).is_ok());
    return host;
  }
  std::unique_ptr<Device> device_;
};

TEST_F(GpuDeviceTest, MovesOutAndInThroughTheCopyEngineKeepEveryByte) {
  auto slots = arena("fast=cuda:0:1GiB");
  auto homes = arena("slow=pinned:512MiB");
  auto scratch = arena("scratch=cuda:0:1MiB");
  ASSERT_TRUE(slots && homes && scratch);
  CudaCopyEngine engine(*device_);
  constexpr std::size_t kObject = 64 * kMiB;
  constexpr int kObjects = 6;
  // Six objects written by "layers" (kernels) into device slots, each moved out to its home after
  // its layer, and back into another slot after the one there has left; the reader waits.
  std::vector<EventHandle> written(kObjects), out(kObjects), in(kObjects);
  for (int k = 0; k < kObjects; ++k) {
    void* slot = slots->at(static_cast<std::uint64_t>(k) * kObject, kObject);
    ASSERT_EQ(launch_fill(slot, kObject / 4, 1000U + static_cast<unsigned>(k), device_->compute()), 0);
    written[static_cast<std::size_t>(k)] = device_->record(device_->compute()).value();
    out[static_cast<std::size_t>(k)] =
        engine
            .copy(homes->at(static_cast<std::uint64_t>(k) * kObject, kObject), slot, kObject,
                  CopyKind::kDeviceToHost, std::vector<EventHandle>{written[static_cast<std::size_t>(k)]})
            .value();
  }
  for (int k = 0; k < kObjects; ++k) {  // object k back into the slot of object (k + 1) % n
    const std::size_t into = static_cast<std::size_t>((k + 1) % kObjects);
    in[static_cast<std::size_t>(k)] =
        engine
            .copy(slots->at(into * kObject, kObject),
                  homes->at(static_cast<std::uint64_t>(k) * kObject, kObject), kObject,
                  CopyKind::kHostToDevice, std::vector<EventHandle>{out[into]})
            .value();
  }
  for (int k = 0; k < kObjects; ++k) {
    const std::size_t into = static_cast<std::size_t>((k + 1) % kObjects);
    ASSERT_TRUE(device_->wait(device_->compute(), in[static_cast<std::size_t>(k)]).is_ok());
    EXPECT_EQ(
        mismatches(slots->at(into * kObject, kObject), kObject, 1000U + static_cast<unsigned>(k), *scratch),
        0u)
        << "object " << k;
  }
  // The homes hold the pattern too, read on the host.
  const auto* home0 = static_cast<const std::uint32_t*>(homes->at(0, kObject));
  for (std::size_t i = 0; i < kObject / 4; i += 4099) ASSERT_EQ(home0[i], expected_word(i, 1000U)) << i;
  for (std::vector<EventHandle>* v : {&written, &out, &in}) {
    for (EventHandle e : *v) device_->release(e);
  }
}

// The runtime on real GPU tiers: objects born in the device arena, written by a kernel, moved to
// pinned memory (read there on the host) and back by the runtime's CUDA copy engine, checked on
// the device; the link the provider measured is printed.
TEST_F(GpuDeviceTest, TheRuntimesGpuTiersKeepEveryByteThroughMoves) {
  auto created = Runtime::create({"fast=cuda:0:1GiB,slow=pinned:1GiB"});
  ASSERT_TRUE(created) << created.status().to_string();
  Runtime& rt = *created.value();
  auto scratch = arena("scratch=cuda:0:1MiB");
  ASSERT_TRUE(scratch);
  constexpr std::size_t kObject = 64 * kMiB + 4096;
  std::vector<ObjectInfo> objects;
  for (unsigned k = 0; k < 6; ++k) {
    auto o = rt.allocate("x", kObject);
    ASSERT_TRUE(o) << o.status().to_string();
    ASSERT_EQ(o->tier, 0u);
    ASSERT_EQ(launch_fill(o->address, kObject / 4, 2000U + k, device_->compute()), 0);
    objects.push_back(*o);
  }
  ASSERT_TRUE(device_->synchronize_stream(device_->compute()).is_ok());  // the writers are done
  for (unsigned k = 0; k < objects.size(); ++k) {
    ASSERT_TRUE(rt.move(objects[k].id, 1)) << "object " << k;
    const auto* home = static_cast<const std::uint32_t*>(rt.address_of(objects[k].id).value());
    for (std::size_t i = 0; i < kObject / 4; i += 4099) ASSERT_EQ(home[i], expected_word(i, 2000U + k)) << i;
  }
  for (unsigned k = 0; k < objects.size(); ++k) {
    ASSERT_TRUE(rt.move(objects[k].id, 0)) << "object " << k;
    EXPECT_EQ(mismatches(rt.address_of(objects[k].id).value(), kObject, 2000U + k, *scratch), 0u) << k;
  }
  EXPECT_NE(rt.device_stream(), 0u) << "a device tier: the layers' stream";
  std::printf("runtime on GPU tiers: %s\n", rt.copy_threads_note().c_str());
}

TEST_F(GpuDeviceTest, ATooLargeArenaIsAnOutOfMemoryNamingWhatIsFree) {
  const auto configs = parse_tier_spec("fast=cuda:0:1024GiB").value();
  const Status s = GpuArena::open(*device_, configs.front()).status();
  EXPECT_EQ(s.code(), StatusCode::kOutOfMemory);
  EXPECT_NE(s.message().find("free of"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace tensortier::gpu
