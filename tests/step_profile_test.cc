// The step profile of real training steps: exact per-layer read and write sets against what the
// dnn engine declares (ResNet-18, VGG-11), lifetimes and the peak against the allocator's own
// accounting, unchanged results, profiling again when the step changes, the JSON form, and bad
// profile settings.
#include <algorithm>
#include <cstring>
#include <set>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tensortier/dnn/data.h"
#include "tensortier/dnn/models.h"
#include "tensortier/migrator/plan_inputs.h"
#include "tensortier/profiler/step_profile.h"

namespace tensortier::dnn {
namespace {

using profiler::LayerProfile;
using profiler::LifetimeClass;
using profiler::StepProfile;

struct Training {
  std::unique_ptr<Runtime> rt;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<Network> net;
  Dataset data;
  Batch batch;
  std::vector<double> losses;
};

RuntimeOptions options(std::size_t granularity_bytes, bool profile = true, bool async_writes = false,
                       profiler::AccessSource accesses = profiler::AccessSource::kPageProtection) {
  RuntimeOptions o("fast=dram:2GiB");
  o.profile.enabled = profile;
  o.profile.granularity_bytes = granularity_bytes;
  o.profile.async_writes = async_writes;
  o.profile.accesses = accesses;
  return o;
}

// Builds `model` on 2 x 3 x 32 x 32 inputs and trains `steps` SGD steps; profiles as `options` say.
Training train(const std::string& model, int width, const RuntimeOptions& rt_options, int steps) {
  Training t;
  auto rt = Runtime::create(rt_options);
  EXPECT_TRUE(rt) << rt.status().to_string();
  t.rt = std::move(rt).value();
  t.engine = std::make_unique<Engine>(*t.rt);
  t.net = make_model(model, {10, width}).value();
  const Status built = t.net->build(*t.engine, {2, 3, 32, 32}, /*seed=*/3);
  EXPECT_TRUE(built.is_ok()) << built.to_string();
  t.data = synthetic_dataset(8, 3, 32, 32, 10, 5);
  BatchIterator it(t.data, 2, 1, /*shuffle=*/false);
  Batch& batch = t.batch;
  for (int s = 0; s < steps; ++s) {
    EXPECT_TRUE(it.next(*t.engine, batch).is_ok());
    EXPECT_TRUE(t.rt->step_begin().is_ok());
    auto r = t.net->train_step(*t.engine, batch, {0.05F, 0.9F, 0.0F});
    EXPECT_TRUE(t.rt->step_end().is_ok());
    EXPECT_TRUE(r) << r.status().to_string();
    if (r) t.losses.push_back(r->loss);
  }
  return t;
}

std::string describe(const StepProfile& p, ObjectId id) {
  const auto* o = p.object(id);
  return o != nullptr ? fmt::format("'{}' (id {}, {} bytes)", o->name, id, o->bytes)
                      : fmt::format("id {}", id);
}

// Precision and recall 1.0, per layer, for objects of a page or more: the objects the profile saw
// read (written) equal the ones the layer declared it reads (writes).
void expect_exact(const StepProfile& p) {
  std::size_t compared = 0;
  for (const LayerProfile& layer : p.layers) {
    std::set<ObjectId> declared_reads, declared_writes, seen_reads, seen_writes;
    auto large = [&](ObjectId id) { return p.object(id) != nullptr && !p.object(id)->small; };
    for (ObjectId id : layer.declared_reads) {
      if (large(id)) declared_reads.insert(id);
    }
    for (ObjectId id : layer.declared_writes) {
      if (large(id)) declared_writes.insert(id);
    }
    for (const auto& a : layer.accesses) {
      if (a.is_group) continue;
      if (a.read()) seen_reads.insert(a.id);
      if (a.written()) seen_writes.insert(a.id);
    }
    for (ObjectId id : declared_reads) {
      EXPECT_TRUE(seen_reads.contains(id))
          << "layer " << layer.index << " '" << layer.name << "' declares it reads " << describe(p, id)
          << "; the profile saw no read";
    }
    for (ObjectId id : seen_reads) {
      // A oneDNN scratchpad's contents are undefined when a primitive starts; some primitives read
      // parts of it before writing them, others do not, and oneDNN does not say which. The engine
      // declares scratchpads as written; the profile reports such reads as they are, and this
      // check does not count them.
      if (p.object(id)->group == kScratchpads) continue;
      EXPECT_TRUE(declared_reads.contains(id)) << "layer " << layer.index << " '" << layer.name << "' read "
                                               << describe(p, id) << " without declaring it";
    }
    for (ObjectId id : declared_writes) {
      EXPECT_TRUE(seen_writes.contains(id))
          << "layer " << layer.index << " '" << layer.name << "' declares it writes " << describe(p, id)
          << "; the profile saw no write";
    }
    for (ObjectId id : seen_writes) {
      EXPECT_TRUE(declared_writes.contains(id)) << "layer " << layer.index << " '" << layer.name << "' wrote "
                                                << describe(p, id) << " without declaring it";
    }
    compared += declared_reads.size() + declared_writes.size();
  }
  EXPECT_GT(compared, 100u);  // the check compared something
}

TEST(StepProfile, ExactReadAndWriteSetsResNet18) {
  Training t = train("resnet18", 8, options(profiler::kHugePageBytes), 2);
  auto p = t.rt->profile();
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->step, 1u);
  EXPECT_GT(p->layers.size(), 150u);
  expect_exact(*p);
}

TEST(StepProfile, ExactReadAndWriteSetsVgg11AtBothGranularities) {
  for (std::size_t unit : {profiler::kHugePageBytes, profiler::kSmallPageBytes}) {
    SCOPED_TRACE(fmt::format("granularity {} bytes", unit));
    Training t = train("vgg11", 8, options(unit), 2);
    auto p = t.rt->profile();
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(p->granularity_bytes, unit);
    expect_exact(*p);
  }
}

TEST(StepProfile, ExactWithWritesToldByUserfaultfd) {
  for (std::size_t unit : {profiler::kHugePageBytes, profiler::kSmallPageBytes}) {
    SCOPED_TRACE(fmt::format("granularity {} bytes", unit));
    Training t = train("vgg11", 8, options(unit, true, /*async_writes=*/true), 2);
    auto p = t.rt->profile();
    ASSERT_NE(p, nullptr);
    if (p->write_tracking.rfind("userfaultfd", 0) != 0) {
      GTEST_SKIP() << "this kernel has no userfaultfd WP_ASYNC: " << p->write_tracking;
    }
    expect_exact(*p);
  }
}

TEST(StepProfile, PagesAreCountedInTheGranularity) {
  // The same step at 4 KiB counts every page a layer touches; at 2 MiB, units of up to 2 MiB.
  Training fine = train("vgg11", 8, options(profiler::kSmallPageBytes), 2);
  Training coarse = train("vgg11", 8, options(profiler::kHugePageBytes), 2);
  auto pf = fine.rt->profile();
  auto pc = coarse.rt->profile();
  ASSERT_TRUE(pf && pc);
  ASSERT_EQ(pf->layers.size(), pc->layers.size());
  std::uint64_t fine_faults = 0, coarse_faults = 0;
  for (const LayerProfile& l : pf->layers) {
    for (const auto& a : l.accesses) {
      fine_faults += a.faults;
      EXPECT_LE(a.page_bytes, profiler::kSmallPageBytes);
      const auto* o = pf->object(a.id);
      if (o == nullptr || a.is_group) continue;
      // A layer touches no more pages than the object has.
      EXPECT_LE(std::max(a.pages_read, a.pages_written), (o->reserved_bytes + 4095) / 4096) << o->name;
      EXPECT_GE(a.touches, static_cast<double>(std::max(a.pages_read, a.pages_written)));
    }
  }
  for (const LayerProfile& l : pc->layers) {
    for (const auto& a : l.accesses) coarse_faults += a.faults;
  }
  EXPECT_GT(fine_faults, coarse_faults);
}

TEST(StepProfile, LifetimesAndPeakAgreeWithTheAllocator) {
  Training t = train("resnet18", 8, options(profiler::kHugePageBytes), 2);  // the profiled step is the last
  auto p = t.rt->profile();
  ASSERT_NE(p, nullptr);
  // Live bytes per layer, summed from the profile's lifetimes, equal the allocator's count.
  std::uint64_t max_layer_bytes = 0;
  for (const LayerProfile& l : p->layers) {
    EXPECT_EQ(l.live_bytes, l.allocator_live_bytes) << "layer " << l.index << " '" << l.name << "'";
    max_layer_bytes = std::max(max_layer_bytes, l.live_bytes);
  }
  EXPECT_EQ(p->peak_live_bytes, p->allocator_peak_live_bytes);
  EXPECT_GE(p->peak_live_bytes, max_layer_bytes);
  ASSERT_LE(p->peak_at_layer, p->layers.size());
  // Every object a layer declares is alive in that layer.
  for (const LayerProfile& l : p->layers) {
    for (const auto* ids : {&l.declared_reads, &l.declared_writes}) {
      for (ObjectId id : *ids) {
        const auto* o = p->object(id);
        ASSERT_NE(o, nullptr) << "layer '" << l.name << "' uses id " << id << ", unknown to the profile";
        EXPECT_LE(o->born_at_layer.value_or(0), l.index) << o->name << " used before it was born";
        EXPECT_GT(o->freed_at_layer.value_or(UINT32_MAX), l.index) << o->name << " used after it was freed";
      }
    }
  }
  // Objects alive at the end of the profiled step are the ones the allocator still has.
  std::size_t alive_after = 0;
  for (const auto& o : p->objects) alive_after += o.freed_at_layer.has_value() ? 0 : 1;
  EXPECT_EQ(alive_after, t.rt->stats().live_objects);
  // Lifetime classes: weights persist; the first convolution's output lives into backward; the
  // gradient of the last activation is short-lived.
  std::size_t persistent = 0, long_lived = 0, short_lived = 0;
  for (const auto& o : p->objects) {
    persistent += o.lifetime == LifetimeClass::kPersistent;
    long_lived += o.lifetime == LifetimeClass::kLong;
    short_lived += o.lifetime == LifetimeClass::kShort;
    if (o.group == kParams) {
      EXPECT_EQ(o.lifetime, LifetimeClass::kPersistent) << o.name;
    }
    if (o.group == kGradients) {
      EXPECT_NE(o.lifetime, LifetimeClass::kPersistent) << o.name;
    }
  }
  EXPECT_GT(persistent, 0u);
  EXPECT_GT(long_lived, 0u);
  EXPECT_GT(short_lived, 0u);
}

TEST(StepProfile, ProfilingChangesNoResult) {
  Training plain = train("resnet18", 8, options(profiler::kHugePageBytes, /*profile=*/false), 4);
  Training profiled = train("resnet18", 8, options(profiler::kHugePageBytes), 4);
  EXPECT_EQ(plain.rt->profile(), nullptr);
  ASSERT_NE(profiled.rt->profile(), nullptr);
  ASSERT_EQ(plain.losses.size(), profiled.losses.size());
  for (std::size_t i = 0; i < plain.losses.size(); ++i) {
    EXPECT_EQ(std::memcmp(&plain.losses[i], &profiled.losses[i], sizeof(double)), 0)
        << "step " << i << ": " << plain.losses[i] << " vs " << profiled.losses[i];
  }
}

// Declared accesses: the same step as page protection sees it, object by object and layer by
// layer, but no fault; each layer's accesses are its declarations, every page counted, a
// written-only object overwritten (as plans read it) where protection saw it overwritten too.
TEST(StepProfile, DeclaredAccessesAreTheDeclarationsOfTheSameStep) {
  Training seen = train("resnet18", 8, options(profiler::kSmallPageBytes), 3);
  Training declared = train(
      "resnet18", 8, options(profiler::kHugePageBytes, true, false, profiler::AccessSource::kDeclared), 3);
  ASSERT_NE(seen.rt->profile(), nullptr);
  ASSERT_NE(declared.rt->profile(), nullptr);
  const StepProfile& p = *seen.rt->profile();
  const StepProfile& d = *declared.rt->profile();
  EXPECT_EQ(d.faults, 0u);
  EXPECT_GT(p.faults, 0u);
  EXPECT_EQ(d.write_tracking, "declared by the layers");
  EXPECT_EQ(d.access_source, "declared");
  EXPECT_EQ(p.access_source, "protection");
  EXPECT_EQ(d.granularity_bytes, profiler::kSmallPageBytes);
  EXPECT_TRUE(
      std::ranges::any_of(d.notes, [](const std::string& n) { return n.find("declared") != n.npos; }));
  EXPECT_EQ(d.peak_live_bytes, p.peak_live_bytes);
  ASSERT_EQ(d.objects.size(), p.objects.size());
  for (std::size_t i = 0; i < d.objects.size(); ++i) {
    EXPECT_EQ(d.objects[i].key, p.objects[i].key);
    EXPECT_EQ(d.objects[i].bytes, p.objects[i].bytes);
    EXPECT_EQ(d.objects[i].born_at_layer, p.objects[i].born_at_layer) << d.objects[i].name;
    EXPECT_EQ(d.objects[i].freed_at_layer, p.objects[i].freed_at_layer) << d.objects[i].name;
  }
  ASSERT_EQ(d.layers.size(), p.layers.size());
  std::size_t overwrites_seen = 0, overwrites_declared = 0;
  for (std::size_t l = 0; l < d.layers.size(); ++l) {
    const LayerProfile& dl = d.layers[l];
    EXPECT_EQ(dl.name, p.layers[l].name);
    EXPECT_TRUE(dl.accesses_before.empty());
    std::set<ObjectId> reads(dl.declared_reads.begin(), dl.declared_reads.end());
    std::set<ObjectId> writes(dl.declared_writes.begin(), dl.declared_writes.end());
    std::set<ObjectId> accessed;
    for (const auto& a : dl.accesses) {
      const profiler::ObjectProfile* o = d.object(a.id);
      ASSERT_NE(o, nullptr);
      const std::uint64_t pages = (o->bytes + profiler::kSmallPageBytes - 1) / profiler::kSmallPageBytes;
      EXPECT_EQ(a.pages_read, reads.contains(a.id) ? pages : 0) << o->name << " in " << dl.name;
      EXPECT_EQ(a.pages_written, writes.contains(a.id) ? pages : 0) << o->name << " in " << dl.name;
      accessed.insert(a.id);
      if (a.written() && !a.read()) ++overwrites_declared;
    }
    std::set<ObjectId> both = reads;
    both.insert(writes.begin(), writes.end());
    EXPECT_EQ(accessed, both) << dl.name;
    // An object the protected profile saw wholly written with none of it read first is declared
    // written only.
    for (const auto& a : p.layers[l].accesses) {
      const profiler::ObjectProfile* o = p.object(a.id);
      if (a.is_group || o == nullptr || o->small || a.pages_read > 0 ||
          a.pages_written * a.page_bytes < o->bytes) {
        continue;
      }
      ++overwrites_seen;
      EXPECT_TRUE(writes.contains(a.id) && !reads.contains(a.id)) << o->name << " in " << dl.name;
    }
  }
  EXPECT_GT(overwrites_seen, 50u);
  EXPECT_GE(overwrites_declared, overwrites_seen);
  // What plans read of them: every overwrite the protected profile gives, the declared one gives.
  auto seen_inputs = migrator::inputs_from_profile(p, 0, 1, 1 << 20);
  auto declared_inputs = migrator::inputs_from_profile(d, 0, 1, 1 << 20);
  ASSERT_TRUE(seen_inputs && declared_inputs);
  ASSERT_EQ(seen_inputs->objects.size(), declared_inputs->objects.size());
  std::size_t planned_overwrites = 0;
  for (std::size_t i = 0; i < seen_inputs->objects.size(); ++i) {
    const auto& s = seen_inputs->objects[i].overwrites;
    const auto& o = declared_inputs->objects[i].overwrites;
    EXPECT_TRUE(std::ranges::includes(o, s)) << "object " << i;
    EXPECT_EQ(seen_inputs->objects[i].uses, declared_inputs->objects[i].uses);
    planned_overwrites += s.size();
  }
  EXPECT_GT(planned_overwrites, 50u);
  // The same training either way.
  EXPECT_EQ(declared.losses, seen.losses);
}

TEST(StepProfile, CountersNameTheirSource) {
  Training t = train("vgg11", 8, options(profiler::kHugePageBytes), 2);
  auto p = t.rt->profile();
  ASSERT_NE(p, nullptr);
  ASSERT_FALSE(p->counter_source.empty());
  for (const LayerProfile& l : p->layers) {
    ASSERT_FALSE(l.counters.empty()) << l.name;
    for (const auto& c : l.counters) {
      EXPECT_EQ(c.source, p->counter_source);
      EXPECT_GE(c.value, 0) << c.name;
    }
  }
  if (p->counter_source.rfind("PAPI", 0) != 0) {
    // Hardware counters are missing: the profile says why.
    bool says_why = false;
    for (const std::string& n : p->notes) says_why = says_why || n.find("PAPI") != std::string::npos;
    EXPECT_TRUE(says_why);
  }
}

TEST(StepProfile, JsonCarriesTheProfile) {
  Training t = train("vgg11", 8, options(profiler::kHugePageBytes), 2);
  auto p = t.rt->profile();
  ASSERT_NE(p, nullptr);
  const auto j = nlohmann::json::parse(profiler::to_json(*p));
  EXPECT_EQ(j["schema"], "tensortier.step_profile/1");
  EXPECT_EQ(j["layers"].size(), p->layers.size());
  EXPECT_EQ(j["objects"].size(), p->objects.size());
  EXPECT_EQ(j["peak_live_bytes"].get<std::uint64_t>(), p->peak_live_bytes);
  const auto& first = j["layers"][0];
  EXPECT_EQ(first["name"], p->layers[0].name);
  EXPECT_EQ(first["accesses"].size(), p->layers[0].accesses.size());
  for (const auto& o : j["objects"]) {
    if (o["lifetime"] == "persistent") {
      EXPECT_TRUE(o["born_at_layer"].is_null());
    }
  }
  const Status bad = profiler::write_json(*p, "/nonexistent-dir/profile.json");
  EXPECT_EQ(bad.code(), StatusCode::kUnavailable);
  EXPECT_NE(bad.message().find("/nonexistent-dir/profile.json"), std::string::npos);
}

// A hand-marked step: one layer writing `bytes` of one object and reading another.
void hand_step(Runtime& rt, std::size_t bytes) {
  auto a = rt.allocate("a", bytes).value();
  auto b = rt.allocate("b", bytes).value();
  ASSERT_TRUE(rt.step_begin().is_ok());
  const void* reads[] = {a.address};
  const void* writes[] = {b.address};
  ASSERT_TRUE(rt.layer_begin("copy", reads, writes).is_ok());
  std::memcpy(b.address, a.address, bytes);
  ASSERT_TRUE(rt.layer_end().is_ok());
  ASSERT_TRUE(rt.step_end().is_ok());
  ASSERT_TRUE(rt.free(a.address).is_ok());
  ASSERT_TRUE(rt.free(b.address).is_ok());
}

TEST(StepProfile, ANewKindOfStepIsProfiledAgain) {
  auto rt = Runtime::create(options(profiler::kSmallPageBytes)).value();
  hand_step(*rt, 64 << 10);
  EXPECT_EQ(rt->profile(), nullptr);  // the first step is the warm-up
  hand_step(*rt, 64 << 10);
  auto first = rt->profile();
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->step, 1u);
  ASSERT_EQ(first->layers.size(), 1u);
  ASSERT_EQ(first->layers[0].accesses.size(), 2u);
  hand_step(*rt, 64 << 10);
  EXPECT_EQ(rt->profile(), first);  // same kind of step: not profiled again
  hand_step(*rt, 128 << 10);        // the shapes change
  hand_step(*rt, 128 << 10);
  auto second = rt->profile();
  ASSERT_NE(second, first);
  EXPECT_EQ(second->step, 4u);
  EXPECT_NE(second->signature, first->signature);
  EXPECT_EQ(rt->profile_of(first->signature), first);
  // 64 KiB read in 16 pages, 128 KiB written in 32.
  for (const auto& a : second->layers[0].accesses) EXPECT_EQ(a.pages_read + a.pages_written, 32u);
}

// An epoch's last batch is smaller: one step of another kind between runs of the usual one. The
// step after it is of the usual kind again, so its profile is dropped (the first is kept), and
// the next one-off step of that kind predicts no profile at all.
TEST(StepProfile, AOneOffStepOfAnotherKindDoesNotReplaceTheProfile) {
  auto rt = Runtime::create(options(profiler::kSmallPageBytes)).value();
  hand_step(*rt, 64 << 10);
  hand_step(*rt, 64 << 10);
  auto first = rt->profile();
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(rt->profiled_steps(), 1u);
  hand_step(*rt, 32 << 10);  // the partial batch
  hand_step(*rt, 64 << 10);  // profiled: predicted to be like the one before; it is not
  EXPECT_EQ(rt->profiled_steps(), 2u);
  EXPECT_EQ(rt->profile(), first);
  EXPECT_EQ(rt->profile_of(first->signature), first);
  hand_step(*rt, 64 << 10);
  hand_step(*rt, 32 << 10);  // the next epoch's partial batch
  hand_step(*rt, 64 << 10);  // not profiled: that kind missed once
  EXPECT_EQ(rt->profiled_steps(), 2u);
  EXPECT_EQ(rt->profile(), first);
  hand_step(*rt, 32 << 10);  // a run of two of that kind: the next step is profiled, and is of it
  hand_step(*rt, 32 << 10);
  hand_step(*rt, 32 << 10);
  EXPECT_EQ(rt->profiled_steps(), 3u);
  ASSERT_NE(rt->profile(), first);
  EXPECT_EQ(rt->profile()->signature, rt->last_step_signature());
}

TEST(StepProfile, MemoryTheAllocatorReleasesDuringAProfiledStepIsUnprotected) {
  // A tight fast tier: an empty group chunk is released to make room mid-step, and the tier may
  // hand its memory out again at once (memkind reuses it). Protected memory handed out again
  // would fault where no watched object is (a crash), or fail the tier's pre-fault.
  RuntimeOptions o("fast=dram:256KiB,slow=dram:64MiB");
  o.profile.step = 0;
  auto rt = Runtime::create(o).value();
  ASSERT_TRUE(rt->step_begin().is_ok());
  std::vector<void*> small;
  for (int i = 0; i < 60; ++i) small.push_back(rt->allocate("s", 1000, kGradients).value().address);
  const void* reads[] = {small[0]};
  ASSERT_TRUE(rt->layer_begin("use", reads, {}).is_ok());  // protects the chunk
  volatile char sink = *static_cast<const volatile char*>(small[0]);
  (void)sink;
  ASSERT_TRUE(rt->layer_end().is_ok());
  for (void* p : small) ASSERT_TRUE(rt->free(p).is_ok());  // the chunk is empty now
  std::vector<void*> large;
  for (int i = 0; i < 4; ++i) {
    auto l = rt->allocate("l", 64 << 10, kActivations);  // needs the chunk's room: it is released
    ASSERT_TRUE(l) << l.status().to_string();
    std::memset(l->address, 1, 64 << 10);  // outside any layer: must not fault on a stale protection
    large.push_back(l->address);
  }
  const void* writes[] = {large[0]};
  ASSERT_TRUE(rt->layer_begin("write", {}, writes).is_ok());
  std::memset(large[0], 2, 64 << 10);
  ASSERT_TRUE(rt->layer_end().is_ok());
  ASSERT_TRUE(rt->step_end().is_ok());
  ASSERT_NE(rt->profile(), nullptr);
  EXPECT_EQ(rt->profile()->layers[1].accesses.size(), 1u);
  EXPECT_EQ(rt->tier(0).used_bytes() <= 256u << 10, true);
}

// An object the training thread makes inside a running layer (PyTorch makes a layer's outputs
// there) is born at that layer and among its declared writes: plans see its room during the layer
// and its write there. One made between layers is born at the next layer, as before.
TEST(StepProfile, AnObjectMadeInsideALayerIsBornThereAndWrittenByIt) {
  RuntimeOptions o("fast=dram:64MiB");
  o.profile.step = 0;
  auto rt = Runtime::create(o).value();
  ASSERT_TRUE(rt->step_begin().is_ok());
  const ObjectInfo before = rt->allocate("before", 1 << 20).value();
  const void* writes[] = {before.address};
  ASSERT_TRUE(rt->layer_begin("l0", {}, writes).is_ok());
  std::memset(before.address, 1, 1 << 20);
  const ObjectInfo inside = rt->allocate("inside", 1 << 20).value();
  std::memset(inside.address, 2, 1 << 20);
  ASSERT_TRUE(rt->layer_end().is_ok());
  const ObjectInfo between = rt->allocate("between", 1 << 20).value();
  const void* reads[] = {inside.address, between.address};
  ASSERT_TRUE(rt->layer_begin("l1", reads, {}).is_ok());
  ASSERT_TRUE(rt->layer_end().is_ok());
  ASSERT_TRUE(rt->step_end().is_ok());
  const std::shared_ptr<const StepProfile> profile = rt->profile();
  ASSERT_NE(profile, nullptr);
  ASSERT_EQ(profile->layers.size(), 2u);
  EXPECT_EQ(profile->object(before.id)->born_at_layer, 0u);
  EXPECT_EQ(profile->object(inside.id)->born_at_layer, 0u);
  EXPECT_EQ(profile->object(between.id)->born_at_layer, 1u);
  EXPECT_EQ(profile->layers[0].declared_writes, (std::vector<ObjectId>{before.id, inside.id}));
  EXPECT_EQ(profile->layers[1].declared_writes, std::vector<ObjectId>{});
  for (const ObjectInfo& x : {before, inside, between}) ASSERT_TRUE(rt->free(x.address).is_ok());
}

TEST(StepProfile, AnUnknownAccessSourceIsNamed) {
  EXPECT_EQ(profiler::parse_access_source("declared").value(), profiler::AccessSource::kDeclared);
  EXPECT_EQ(profiler::parse_access_source("protection").value(), profiler::AccessSource::kPageProtection);
  const auto bad = profiler::parse_access_source("pages");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.status().message().find("'pages': use 'protection'"), std::string::npos);
  ASSERT_EQ(setenv("TENSORTIER_PROFILE_ACCESSES", "pages", 1), 0);
  auto rt = Runtime::create({"fast=dram:64MiB"});
  unsetenv("TENSORTIER_PROFILE_ACCESSES");
  ASSERT_FALSE(rt);
  EXPECT_NE(rt.status().message().find("TENSORTIER_PROFILE_ACCESSES: profile accesses 'pages'"),
            std::string::npos)
      << rt.status().to_string();
}

TEST(StepProfile, BadSettingsAreNamed) {
  ::setenv("TENSORTIER_PROFILE", "sometimes", 1);
  auto rt = Runtime::create(RuntimeOptions("fast=dram:64MiB"));
  ::unsetenv("TENSORTIER_PROFILE");
  ASSERT_FALSE(rt);
  EXPECT_NE(rt.status().message().find("TENSORTIER_PROFILE='sometimes'"), std::string::npos)
      << rt.status().message();
  ::setenv("TENSORTIER_PROFILE_GRANULARITY", "64KiB", 1);
  rt = Runtime::create(RuntimeOptions("fast=dram:64MiB"));
  ::unsetenv("TENSORTIER_PROFILE_GRANULARITY");
  ASSERT_FALSE(rt);
  EXPECT_NE(rt.status().message().find("4KiB or 2MiB"), std::string::npos);
  RuntimeOptions o("fast=dram:64MiB");
  o.profile.granularity_bytes = 12345;
  EXPECT_EQ(Runtime::create(o).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tensortier::dnn
