// Plan inputs from a step profile: overwrites, host pins.
#include "plan_test_util.h"

namespace tensortier::migrator {
namespace {

// The profile's evidence for an overwrite: declared written and not read, every page written and
// none read first. Host code or an undeclaring layer touching an object marks it undeclared.
TEST(PlanInputs, ALinksRatesPriceMovesAndSlowAccessesAlike) {
  migrator::PlanInputs inputs;
  inputs.mover_cpu_ns_per_byte = 0.3;
  inputs.set_link_rates(0, 25);  // not measured: nothing changes
  EXPECT_EQ(inputs.move_in_gbps, 10);
  EXPECT_EQ(inputs.mover_cpu_ns_per_byte, 0.3);
  inputs.set_link_rates(50, 25);
  EXPECT_EQ(inputs.move_in_gbps, 50);
  EXPECT_EQ(inputs.move_out_gbps, 25);
  EXPECT_DOUBLE_EQ(inputs.slow_access_ns_per_byte, (1.0 / 50 + 1.0 / 25) / 2) << "a crossing at the mean";
  EXPECT_EQ(inputs.mover_cpu_ns_per_byte, 0) << "the GPU's copy engines copy, not the CPU";
}

TEST(Plan, OverwritesComeFromDeclarationsAndThePagesTheProfileSaw) {
  profiler::StepProfile p;
  constexpr std::uint64_t kPage = 4096;
  for (ObjectId id : {1, 2, 3}) {
    profiler::ObjectProfile o;
    o.id = id;
    o.key = id;
    o.bytes = o.reserved_bytes = 4 * kPage;
    p.objects.push_back(o);
  }
  auto access = [&](ObjectId id, std::uint64_t read, std::uint64_t written) {
    profiler::SpanAccessProfile a;
    a.id = id;
    a.page_bytes = kPage;
    a.pages_read = read;
    a.pages_written = written;
    return a;
  };
  p.layers.resize(5);
  for (std::uint32_t l = 0; l < 5; ++l) p.layers[l].index = l;
  p.layers[0].declared_writes = {1, 2};
  p.layers[0].accesses = {access(1, 0, 4), access(2, 0, 3)};  // 2: one page not written
  p.layers[1].declared_reads = {1};
  p.layers[1].declared_writes = {1};
  p.layers[1].accesses = {access(1, 0, 4)};  // declared read too: not an overwrite
  p.layers[2].declared_writes = {1};
  p.layers[2].accesses = {access(1, 1, 4)};  // a page read before written
  p.layers[3].declared_writes = {1, 3};
  p.layers[3].accesses = {access(1, 0, 4), access(3, 0, 4), access(2, 1, 0)};  // 2 not declared
  p.layers[4].accesses_before = {access(3, 1, 0)};                             // host code reads 3
  auto in = inputs_from_profile(p, 0, 1, kMiB);
  ASSERT_TRUE(in);
  ASSERT_EQ(in->objects.size(), 3u);
  EXPECT_EQ(in->objects[0].overwrites, (std::vector<std::uint32_t>{0, 3}));
  EXPECT_FALSE(in->objects[0].accessed_undeclared);
  EXPECT_TRUE(in->objects[1].overwrites.empty());
  EXPECT_TRUE(in->objects[1].accessed_undeclared);
  EXPECT_EQ(in->objects[2].overwrites, (std::vector<std::uint32_t>{3}));
  EXPECT_TRUE(in->objects[2].accessed_undeclared);
}

TEST(Plan, HostPinsInTheProfileReachThePlanInputs) {
  profiler::StepProfile p;
  for (ObjectId id : {1, 2}) {
    profiler::ObjectProfile o;
    o.id = o.key = id;
    o.bytes = o.reserved_bytes = 1 << 16;
    o.host_pinned = id == 2;
    p.objects.push_back(o);
  }
  p.layers.resize(2);
  p.layers[0].declared_reads = {1, 2};
  profiler::SpanAccessProfile a;
  a.page_bytes = 4096;
  a.pages_written = 1;
  a.id = 1;
  p.layers[0].accesses_before = {a};  // host code before the first layer (or between the steps)
  a.id = 2;
  p.layers[0].accesses_before.push_back(a);
  auto in = inputs_from_profile(p, 0, 1, kMiB);
  ASSERT_TRUE(in);
  EXPECT_TRUE(in->objects[0].stays());
  EXPECT_TRUE(in->objects[1].accessed_undeclared);
  EXPECT_FALSE(in->objects[1].stays());
}

}  // namespace
}  // namespace tensortier::migrator

namespace tensortier::migrator {
namespace {

// A step's object keeps the key of its allocation's ordinal in that step; alive into the next
// step, it shares the key with the next step's object of the same ordinal. The plan names it by
// its id instead (a dead move under the shared key discarded live bytes of the other: a oneDNN
// program under the interposer that frees last iteration's tensors late; gradients kept across
// steps shared keys with the next steps' activations).
TEST(Plan, AnEarlierStepsObjectDoesNotShareItsKeyWithThisStepsInThePlan) {
  profiler::StepProfile p;
  for (ObjectId id : {1, 2, 3}) {
    profiler::ObjectProfile o;
    o.id = id;
    o.key = id == 3 ? ObjectKey{3} : step_key(0);
    o.bytes = o.reserved_bytes = 1 << 16;
    if (id == 1) o.freed_at_layer = 0;  // the step before's: freed before this one's first layer
    if (id == 2) o.born_at_layer = 1;   // this step's, the same ordinal
    p.objects.push_back(o);
  }
  p.layers.resize(3);
  for (std::uint32_t l = 0; l < 3; ++l) p.layers[l].index = l;
  p.layers[1].declared_writes = {2};
  p.layers[2].declared_reads = {2, 3};
  auto in = inputs_from_profile(p, 0, 1, kMiB);
  ASSERT_TRUE(in);
  ASSERT_EQ(in->objects.size(), 3u);
  EXPECT_EQ(in->objects[0].key, ObjectKey{1}) << "the earlier step's object, by its id";
  EXPECT_EQ(in->objects[1].key, step_key(0));
  EXPECT_EQ(in->objects[1].born, 1u) << "the step key names this step's object";
  EXPECT_EQ(in->objects[2].key, ObjectKey{3});
  for (const std::string& policy : policy_names()) {
    auto plan = make_plan(policy, in.value());
    ASSERT_TRUE(plan) << policy;
    for (const PlannedMove& m : plan->moves) {
      EXPECT_FALSE(m.key == step_key(0) && m.discard && m.after_layer < 2)
          << policy << ": its bytes are read at 2";
    }
  }
}

// A runtime's rates into the inputs: the slow channel and slow accesses, the mover's CPU per byte
// as one thread's share of DRAM's bandwidths read and written, the settings; rates not known (0)
// leave the inputs' own; a GPU's link prices moves and slow accesses over the slow tier's and
// takes no CPU.
TEST(PlanInputs, TheRuntimesRatesGoInInOnePlace) {
  TierRates rates;
  rates.slow_read_gbps = 2.0;
  rates.slow_write_gbps = 0.5;
  rates.slow_access_ns_per_byte = 0.7;
  rates.fast_read_gbps = 40;
  rates.fast_write_gbps = 20;
  rates.cpu_threads = 4;
  rates.mover_steals_compute = 1;
  rates.clean_moves_out_free = rates.dead_moves_free = rates.ready_memory = true;
  rates.room_wait_ns = 123;
  rates.timed_program_s = 5;
  rates.tightened_program_s = 6;
  PlanInputs in;
  set_rates(in, rates);
  EXPECT_EQ(in.move_in_gbps, 2.0);
  EXPECT_EQ(in.move_out_gbps, 0.5);
  EXPECT_EQ(in.slow_access_ns_per_byte, 0.7);
  EXPECT_DOUBLE_EQ(in.mover_cpu_ns_per_byte, 4 / 40.0 + 4 / 20.0);
  EXPECT_EQ(in.mover_steals_compute, 1);
  EXPECT_TRUE(in.clean_moves_out_free && in.dead_moves_free && in.ready_memory);
  EXPECT_EQ(in.room_wait_ns, 123);
  EXPECT_EQ(in.timed_program_s, 5);
  EXPECT_EQ(in.tightened_program_s, 6);

  PlanInputs defaults, unknown;
  set_rates(unknown, TierRates{});  // no cost model, no link: the inputs' own rates
  EXPECT_EQ(unknown.move_in_gbps, defaults.move_in_gbps);
  EXPECT_EQ(unknown.move_out_gbps, defaults.move_out_gbps);
  EXPECT_EQ(unknown.slow_access_ns_per_byte, defaults.slow_access_ns_per_byte);
  EXPECT_EQ(unknown.mover_cpu_ns_per_byte, defaults.mover_cpu_ns_per_byte);

  rates.link_to_fast_gbps = 50;
  rates.link_to_slow_gbps = 25;
  PlanInputs gpu;
  set_rates(gpu, rates);
  EXPECT_EQ(gpu.move_in_gbps, 50);
  EXPECT_EQ(gpu.move_out_gbps, 25);
  EXPECT_DOUBLE_EQ(gpu.slow_access_ns_per_byte, (1 / 50.0 + 1 / 25.0) / 2);
  EXPECT_EQ(gpu.mover_cpu_ns_per_byte, 0);
}

}  // namespace
}  // namespace tensortier::migrator
