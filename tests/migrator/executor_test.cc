// The executor: its counts, its moves out, its mover thread beside a training thread that checks every byte
// (run under ThreadSanitizer in CI: label "threaded").
#include <sched.h>

#include "plan_test_util.h"

namespace tensortier::migrator {
namespace {

// A training thread runs steps of layers over objects that the executor's mover thread moves
// between the tiers (whole, or 2 MiB segments under a page-granular policy): every layer finds
// the bytes the last one wrote.
void mover_beside_training(const std::string& policy, std::size_t bytes, int uses,
                           const std::string& slow_preset) {
  SCOPED_TRACE(policy);
  RuntimeOptions options(fmt::format("fast=dram:64MiB,slow=emulated:{}:256MiB", slow_preset));
  options.policy = policy;
  options.mover_steals_compute = 0;  // moves pay then: the test needs them
  options.fast_budget = "40%";
  // Layers wait moves out (see Move.HostWritesUnderPinObjectsAreNeverLostToAMove): under
  // ThreadSanitizer a copy can outlast the default bound, and a layer writing beside a copy that
  // will fail is a race by design.
  options.layer_move_wait = std::chrono::seconds(30);
  auto created = Runtime::create(options);
  ASSERT_TRUE(created) << created.status().to_string();
  Runtime& rt = *created.value();
  constexpr int kObjects = 8;
  const std::size_t kBytes = bytes;
  std::vector<ObjectInfo> weights;
  for (int i = 0; i < kObjects; ++i) {
    auto o = rt.allocate("w", kBytes);
    ASSERT_TRUE(o);
    std::memset(o->address, i, kBytes);
    weights.push_back(*o);
  }
  std::vector<unsigned char> generation(kObjects, 0);
  for (int i = 0; i < kObjects; ++i) generation[static_cast<std::size_t>(i)] = static_cast<unsigned char>(i);
  for (int step = 0; step < 12; ++step) {
    ASSERT_TRUE(rt.step_begin().is_ok());
    for (int layer = 0; layer < uses * kObjects; ++layer) {  // weight i in `uses` layers in a row
      const int i = layer / uses;
      auto act = rt.allocate("a", kBytes / 2);  // keyed by its ordinal in the step
      ASSERT_TRUE(act);
      const ObjectId ids[2] = {weights[static_cast<std::size_t>(i)].id, act->id};
      std::vector<void*> addresses(3);  // w as read; w and the activation as written
      ASSERT_TRUE(rt.layer_begin("layer", std::span<const ObjectId>(ids, 1),
                                 std::span<const ObjectId>(ids, 2), addresses)
                      .is_ok());
      auto* w = static_cast<unsigned char*>(addresses[0]);
      unsigned char& g = generation[static_cast<std::size_t>(i)];
      for (std::size_t b = 0; b < kBytes; b += 4096)
        ASSERT_EQ(w[b], g) << "step " << step << " layer " << layer;
      ++g;
      std::memset(w, g, kBytes);
      std::memset(addresses[2], 1, kBytes / 2);
      ASSERT_TRUE(rt.layer_end().is_ok());
      ASSERT_TRUE(rt.free(act->id).is_ok());  // a temporary
    }
    ASSERT_TRUE(rt.step_end().is_ok());
  }
  ASSERT_NE(rt.plan(), nullptr) << "the policy did not start";
  const RuntimeStats stats = rt.stats();
  EXPECT_EQ(stats.policy, policy);
  EXPECT_GT(stats.migration.moves, 0u) << "nothing moved: the test proves nothing";
  std::size_t split = 0;
  for (const ObjectInfo& w : weights) split += rt.object(w.id)->bytes_by_tier.empty() ? 0 : 1;
  if (policy == "reactive-2m") {
    EXPECT_GT(split, 0u) << "no weight moved in segments";
  } else {
    EXPECT_EQ(split, 0u);
  }
  for (int i = 0; i < kObjects; ++i) {  // pinned: the mover may still be moving them
    const ObjectId id = weights[static_cast<std::size_t>(i)].id;
    void* address = nullptr;
    ASSERT_TRUE(rt.pin_objects(std::span<const ObjectId>(&id, 1), std::span<void*>(&address, 1)).is_ok());
    EXPECT_EQ(static_cast<const unsigned char*>(address)[kBytes - 1],
              generation[static_cast<std::size_t>(i)]);
    rt.unpin_objects(std::span<const ObjectId>(&id, 1));
  }
}

// The room the plan's moves out will leave (what the allocator's room wait counts): a move out
// counts from its hand-out until it ends, under way included; moves in never count. Of the bytes
// moved, those of a clean move are not counted as copied.
// An executor's counts between two snapshots (what the runtime's re-planning, the last step's
// share and the benches' measured steps take): every count is the later less the earlier, the
// last failure the later's; accumulate() of that onto the earlier gives the later back.
TEST(Executor, CountsBetweenTwoSnapshotsUndoAccumulate) {
  ExecutorStats before;
  std::uint64_t v = 1;
  for (std::uint64_t* field :
       {&before.steps, &before.moves, &before.segment_moves, &before.discarded_moves, &before.bytes_in,
        &before.bytes_out, &before.copied_bytes, &before.failed_moves, &before.late_moves,
        &before.late_dropped, &before.stale_dropped, &before.missing, &before.off_plan_steps,
        &before.off_plan_dropped, &before.mover_cpu_ns})
    *field = v++;
  ExecutorStats now = before;
  ExecutorStats added;
  v = 100;
  for (auto [n, a] : {std::pair{&now.steps, &added.steps},
                      {&now.moves, &added.moves},
                      {&now.segment_moves, &added.segment_moves},
                      {&now.discarded_moves, &added.discarded_moves},
                      {&now.bytes_in, &added.bytes_in},
                      {&now.bytes_out, &added.bytes_out},
                      {&now.copied_bytes, &added.copied_bytes},
                      {&now.failed_moves, &added.failed_moves},
                      {&now.late_moves, &added.late_moves},
                      {&now.late_dropped, &added.late_dropped},
                      {&now.stale_dropped, &added.stale_dropped},
                      {&now.missing, &added.missing},
                      {&now.off_plan_steps, &added.off_plan_steps},
                      {&now.off_plan_dropped, &added.off_plan_dropped},
                      {&now.mover_cpu_ns, &added.mover_cpu_ns},
                      {&now.mover_busy_ns, &added.mover_busy_ns}}) {
    *a = v * 7;
    *n += v * 7;
    ++v;
  }
  now.last_failure = "the latest";
  const ExecutorStats d = since(now, before);
  EXPECT_EQ(d.steps, added.steps);
  EXPECT_EQ(d.moves, added.moves);
  EXPECT_EQ(d.segment_moves, added.segment_moves);
  EXPECT_EQ(d.discarded_moves, added.discarded_moves);
  EXPECT_EQ(d.bytes_in, added.bytes_in);
  EXPECT_EQ(d.bytes_out, added.bytes_out);
  EXPECT_EQ(d.copied_bytes, added.copied_bytes);
  EXPECT_EQ(d.failed_moves, added.failed_moves);
  EXPECT_EQ(d.late_moves, added.late_moves);
  EXPECT_EQ(d.late_dropped, added.late_dropped);
  EXPECT_EQ(d.stale_dropped, added.stale_dropped);
  EXPECT_EQ(d.missing, added.missing);
  EXPECT_EQ(d.off_plan_steps, added.off_plan_steps);
  EXPECT_EQ(d.off_plan_dropped, added.off_plan_dropped);
  EXPECT_EQ(d.mover_cpu_ns, added.mover_cpu_ns);
  EXPECT_EQ(d.mover_busy_ns, added.mover_busy_ns);
  EXPECT_EQ(d.last_failure, "the latest");
  ExecutorStats back = before;
  accumulate(back, d);
  EXPECT_EQ(back.steps, now.steps);
  EXPECT_EQ(back.bytes_out, now.bytes_out);
  EXPECT_EQ(back.mover_cpu_ns, now.mover_cpu_ns);
  EXPECT_EQ(back.mover_busy_ns, now.mover_busy_ns);
  EXPECT_EQ(back.off_plan_dropped, now.off_plan_dropped);
}

TEST(Executor, CountsItsMovesOutFromHandOutToTheirEnd) {
  Plan plan;
  plan.fast = 0;
  plan.slow = 1;
  plan.moves = {{42, 1, 0, 2, kStepStart, 8 * kMiB}, {43, 0, 0, 2, 2, 4 * kMiB}};  // out, then in
  std::mutex gate;
  gate.lock();  // the mover's first move waits here
  std::atomic<int> started{0};
  Executor executor(
      plan, 3,
      [&](ObjectId id, TierIndex to, const MoveOptions&) -> Result<MoveResult> {
        ++started;
        std::lock_guard hold(gate);
        MoveResult r;
        r.id = id;
        r.to = to;
        r.from = 1 - to;
        r.moved = true;
        r.bytes = to == 1 ? 8 * kMiB : 4 * kMiB;
        r.clean = to == 1;  // the move out finds its shadow: no copy
        return r;
      },
      [] { return 0u; });
  ASSERT_TRUE(executor.start().is_ok());
  executor.on_step_begin(1);
  EXPECT_EQ(executor.queued_out_bytes(0), 0u);
  executor.on_layer_end(LayerEndEvent{.index = 0});
  EXPECT_EQ(executor.queued_out_bytes(0), 8 * kMiB) << "handed out";
  EXPECT_EQ(executor.queued_out_bytes(1), 0u) << "moves in make no room on the fast tier";
  while (started.load() == 0) std::this_thread::yield();
  EXPECT_EQ(executor.queued_out_bytes(0), 8 * kMiB) << "under way";
  gate.unlock();
  executor.stop();  // the queued moves are done first
  EXPECT_EQ(executor.queued_out_bytes(0), 0u);
  EXPECT_EQ(executor.stats().moves, 2u);
  EXPECT_EQ(executor.stats().bytes_out, 8 * kMiB);
  EXPECT_EQ(executor.stats().copied_bytes, 4 * kMiB) << "the move in only";
}

// --mover-core's binding: a CPU the process may use takes the mover thread; one that does not
// exist leaves it unbound, said (the moves run all the same).
TEST(Executor, TheMoverIsBoundToItsCpuOrSaysWhyNot) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  ASSERT_EQ(sched_getaffinity(0, sizeof allowed, &allowed), 0);
  int cpu = 0;
  while (!CPU_ISSET(cpu, &allowed)) ++cpu;
  auto no_move = [](ObjectId, TierIndex, const MoveOptions&) -> Result<MoveResult> { return MoveResult{}; };
  for (const int asked : {cpu, CPU_SETSIZE + 5}) {
    Executor executor(Plan{}, 1, no_move, [] { return 0u; });
    executor.set_mover_cpu(asked);
    ASSERT_TRUE(executor.start().is_ok());
    if (asked == cpu) {
      EXPECT_EQ(executor.mover_cpu_problem(), "");
    } else {
      EXPECT_NE(executor.mover_cpu_problem().find("could not be bound to CPU"), std::string::npos)
          << executor.mover_cpu_problem();
    }
    executor.stop();
  }
}

TEST(Executor, MoverThreadBesideTheTrainingThreadKeepsEveryByte) {
  mover_beside_training("sentinel", std::size_t{1} << 20, 3, "optane-server");
  // Promoting a 5 MiB weight pays for its next layers.
  mover_beside_training("reactive-2m", std::size_t{5} << 20, 8, "cxl");
}

}  // namespace
}  // namespace tensortier::migrator
