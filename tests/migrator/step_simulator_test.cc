// The step simulator (StepSimulator): the order of moves, moves that do not pay, dead bytes, births waiting
// for room, moves in refused for it.
#include "plan_test_util.h"

namespace tensortier::migrator {
namespace {

TEST(Plan, AtEachBoundaryMovesOutComeBeforeMovesIn) {
  const PlanInputs in = rotating_inputs();
  for (const std::string& policy : policy_names()) {
    if (policy == "fast-only" || policy == "smartpool") continue;  // everything fast, no moves
    auto plan = make_plan(policy, in);
    ASSERT_TRUE(plan) << plan.status().to_string();
    // simulate() refuses a boundary whose moves list an out after an in (the mover's order).
    EXPECT_EQ(simulate(*plan, in), "") << policy;
    std::map<std::uint32_t, std::pair<int, int>> per_boundary;  // outs, ins
    for (const PlannedMove& m : plan->moves) {
      auto& [outs, ins] = per_boundary[m.after_layer];
      ++(m.to == in.fast ? ins : outs);
    }
    if (policy == "sentinel") {
      const bool exchanges = std::any_of(per_boundary.begin(), per_boundary.end(), [](const auto& kv) {
        return kv.second.first > 0 && kv.second.second > 0;
      });
      EXPECT_TRUE(exchanges) << "no boundary both moves out and in: the case proves nothing";
    }
  }
}

// The mover's CPU is part of a plan's cost: where copying costs more than the slow accesses it
// saves, sentinel and the oracle plan no moves; the oracle is never predicted worse than another
// policy's plan.
TEST(Plan, MovesThatCostMoreThanTheySaveAreNotPlanned) {
  PlanInputs in = chain_inputs(8 * kMiB);
  in.mover_cpu_ns_per_byte = 10;  // a copy far dearer than reading the bytes where they are
  in.mover_steals_compute = 1;
  for (const char* policy : {"sentinel", "oracle"}) {
    auto plan = make_plan(policy, in);
    ASSERT_TRUE(plan);
    EXPECT_TRUE(plan->moves.empty()) << policy << " plans " << plan->moves.size() << " moves";
    EXPECT_EQ(plan->mover_cpu_ns, 0.0);
  }
  in.mover_steals_compute = 0;  // a spare core: the same copies cost the layers nothing
  auto moving = make_plan("sentinel", in);
  ASSERT_TRUE(moving);
  EXPECT_FALSE(moving->moves.empty());
  EXPECT_GT(moving->mover_cpu_ns, 0.0) << "counted, though not charged";
  in.mover_cpu_ns_per_byte = 0.1;
  in.mover_steals_compute = 1;
  auto oracle = make_plan("oracle", in);
  ASSERT_TRUE(oracle);
  for (const std::string& policy : policy_names()) {
    if (policy == "fast-only" || policy == "oracle") continue;
    auto other = make_plan(policy, in);
    ASSERT_TRUE(other);
    if (!simulate(*other, in).empty()) continue;
    EXPECT_LE(oracle->predicted_extra_ns, other->predicted_extra_ns) << policy << " beats the oracle";
  }
}

// Dead bytes: a move of an object whose next use in the step overwrites it (or, freed in the step,
// that no layer uses again) is marked `discard` and costs no slow-tier time and no mover CPU; one
// whose bytes a later layer reads copies, and so does one past the step's last use of a
// persistent object. Never for an object accessed undeclared, nor off.
TEST(Plan, MovesOfDeadBytesAreMarkedAndCostNothing) {
  PlanInputs in;
  in.layers = 4;
  in.layer_ns.assign(4, 1'000'000);
  in.fast_budget_bytes = 256 * kMiB;
  in.move_in_gbps = 1.6;
  in.move_out_gbps = 0.6;
  in.slow_access_ns_per_byte = 1;
  in.mover_cpu_ns_per_byte = 0.1;
  in.mover_steals_compute = 1;
  in.peak_bytes = 96 * kMiB;
  // A weight's gradient: written (whole) by layer 2, read by layer 3, dead from then to the next
  // step's layer 2.
  in.objects.push_back({1, 64 * kMiB, 0, 4, true, false, {2, 3}, {2}, {2}, false});
  // An activation: written by layer 0, read by layer 3; freed before the step ends.
  in.objects.push_back({step_key(0), 32 * kMiB, 0, 3, false, false, {0, 2}, {0}, {0}, false});
  Plan plan;
  plan.policy = "hand-made";
  plan.fast_budget_bytes = in.fast_budget_bytes;
  plan.start[1] = in.slow;
  plan.birth[step_key(0)] = in.fast;
  plan.moves = {
      {step_key(0), in.slow, 0, 2, kStepStart, 32 * kMiB},  // out after its write: live, a copy
      {1, in.fast, 0, 2, 2, 64 * kMiB},                     // in before its overwrite: dead
      {step_key(0), in.fast, 1, 2, 2, 32 * kMiB},           // back for its read: live, a copy
      {1, in.slow, 3, 6, kStepStart, 64 * kMiB},            // out after its last read: kept
  };
  auto run = [&](const PlanInputs& inputs) {
    Plan p = plan;
    EXPECT_EQ(simulate(p, inputs), "");
    return p;
  };
  const Plan copies = run(in);
  for (const PlannedMove& m : copies.moves) EXPECT_FALSE(m.discard) << "off: every move copies";
  EXPECT_EQ(copies.discard_bytes, 0u);
  in.dead_moves_free = true;
  const Plan dead = run(in);
  EXPECT_EQ(dead.discard_bytes, 64 * kMiB);
  ASSERT_EQ(dead.moves.size(), 4u);
  EXPECT_FALSE(dead.moves[0].discard);
  EXPECT_TRUE(dead.moves[1].discard);
  EXPECT_FALSE(dead.moves[2].discard);
  // Dead until the next step's layer 2 overwrites it, but code between steps may read it.
  EXPECT_FALSE(dead.moves[3].discard);
  EXPECT_EQ(dead.bytes_in, copies.bytes_in);
  EXPECT_EQ(dead.bytes_out, copies.bytes_out);
  EXPECT_DOUBLE_EQ(dead.mover_cpu_ns, 128.0 * kMiB * 0.1)
      << "the activation's two copies, the gradient's out";
  EXPECT_LT(dead.predicted_extra_ns, copies.predicted_extra_ns);
  EXPECT_TRUE(bytes_dead_at(in, in.objects[1], 3)) << "no use left before it is freed";
  EXPECT_TRUE(bytes_dead_at(in, in.objects[0], 0)) << "its next use overwrites it";
  EXPECT_FALSE(bytes_dead_at(in, in.objects[0], 4)) << "not across the step's end";
  EXPECT_FALSE(bytes_dead_at(in, in.objects[1], 1));
  PlanInputs alive_after = in;
  alive_after.objects[1].freed = 4;  // alive after the step: a later step may read it
  EXPECT_FALSE(bytes_dead_at(alive_after, alive_after.objects[1], 3));
  in.objects[0].accessed_undeclared = true;  // host code touches the gradient: never dead
  const Plan undeclared = run(in);
  EXPECT_FALSE(undeclared.moves[1].discard);
  EXPECT_FALSE(undeclared.moves[3].discard);
  EXPECT_EQ(undeclared.discard_bytes, 0u);
}

// Three 1 ms layers, moves at 1 GB/s (8 MiB out: 8.4 ms, against 1 ms layers), slow accesses
// charged 1 ns a byte; a weight (key 1, 8 MiB) read by layer 0, moved out after it and back after
// layer 2; `activation` (key step_key(0)) born on the fast tier.
struct WeightMovedOut {
  PlanInputs in;
  Plan plan;
};
WeightMovedOut weight_moved_out_after_layer_0(std::uint64_t budget, PlanObject activation) {
  WeightMovedOut w{plain_inputs(3, budget), {}};
  PlanInputs& in = w.in;
  in.move_in_gbps = in.move_out_gbps = 1.0;
  in.slow_access_ns_per_byte = 1;
  in.peak_bytes = 16 * kMiB;
  in.objects.push_back({1, 8 * kMiB, 0, 3, true, false, {0}, {}, {}, false});
  in.objects.push_back(std::move(activation));
  Plan& plan = w.plan;
  plan.policy = "hand-made";
  plan.fast_budget_bytes = in.fast_budget_bytes;
  plan.start[1] = in.fast;
  plan.birth[step_key(0)] = in.fast;
  plan.moves = {{1, in.slow, 0, 3, kStepStart, 8 * kMiB}, {1, in.fast, 2, 3, 3, 8 * kMiB}};
  return w;
}

// A move out takes time, and the room it leaves is there only when it ends. An activation born
// where the plan moved a weight out just before must wait for that move (the runtime's room
// wait), or fall back to the slow tier where the wait would be longer than the runtime allows;
// the prediction counts either. Where the move is fast enough, nothing waits.
TEST(Plan, BirthsWaitForTheMovesOutThatMakeTheirRoom) {
  const auto [in, plan] = weight_moved_out_after_layer_0(
      10 * kMiB, {step_key(0), 8 * kMiB, 1, 3, false, false, {1, 2}, {1}, {}, false});  // born before layer 1
  auto run = [&](const PlanInputs& inputs) {
    Plan p = plan;
    EXPECT_EQ(simulate(p, inputs), "");
    return p;
  };
  const double move_ns = 8.0 * kMiB / in.move_out_gbps;
  const Plan waits = run(in);
  EXPECT_NEAR(waits.room_wait_ns, move_ns, 1e3) << "born when the move out that makes its room ends";
  EXPECT_EQ(waits.fallback_bytes, 0u);
  EXPECT_EQ(waits.slow_access_bytes, 0u);
  EXPECT_GE(waits.predicted_extra_ns, move_ns);
  PlanInputs short_wait = in;
  short_wait.room_wait_ns = 1e6;  // the runtime waits 1 ms at most
  const Plan falls = run(short_wait);
  EXPECT_EQ(falls.room_wait_ns, 0.0);
  EXPECT_EQ(falls.fallback_bytes, 8 * kMiB);
  EXPECT_EQ(falls.slow_access_bytes, 16 * kMiB) << "layers 1 and 2 find it slow";
  PlanInputs roomy_inputs = in;
  roomy_inputs.fast_budget_bytes = 16 * kMiB;  // room for both before the move ends: nothing waits
  const Plan roomy = run(roomy_inputs);
  EXPECT_EQ(roomy.room_wait_ns, 0.0);
  EXPECT_EQ(roomy.fallback_bytes, 0u);
}

// Ready memory: a birth goes to its place, and waits there for the move out of the place's
// occupant to end, though the tier has room (or falls back past the runtime's wait). Here the
// weight leaves offset 0 after layer 0 (8.4 ms at 1 GB/s) and the activation is born there before
// layer 2, 2 ms into the step. Without places nothing waits.
TEST(Plan, BirthsWaitForTheirPlacesOccupantToLeave) {
  auto [in, plan] = weight_moved_out_after_layer_0(  // room for both at any time
      16 * kMiB, {step_key(0), 8 * kMiB, 2, 3, false, false, {2}, {2}, {}, false});  // born before 2
  plan.moves[0].place = 0;                                                           // its home
  plan.moves[1].place = 0;  // back to offset 0 after the activation is freed
  plan.places.fast_bytes = plan.places.home_bytes = 8 * kMiB;
  plan.places.first = {{1, 0}, {step_key(0), 0}};
  auto run = [&](const Plan& p0, const PlanInputs& inputs) {
    Plan p = p0;
    EXPECT_EQ(simulate(p, inputs), "");
    return p;
  };
  const double move_ns = 8.0 * kMiB / in.move_out_gbps;
  const Plan waits = run(plan, in);
  EXPECT_NEAR(waits.place_wait_ns, 1e6 + move_ns - 2e6, 1e3) << "from 2 ms to the move's end";
  EXPECT_EQ(waits.room_wait_ns, 0.0);
  EXPECT_EQ(waits.fallback_bytes, 0u);
  EXPECT_GE(waits.predicted_extra_ns, waits.place_wait_ns);
  PlanInputs short_wait = in;
  short_wait.room_wait_ns = 1e6;  // the runtime waits 1 ms at most
  const Plan falls = run(plan, short_wait);
  EXPECT_EQ(falls.place_wait_ns, 0.0);
  EXPECT_EQ(falls.fallback_bytes, 8 * kMiB);
  EXPECT_EQ(falls.slow_access_bytes, 8 * kMiB) << "layer 2 finds it slow";
  Plan unplaced = plan;
  unplaced.places = {};
  for (PlannedMove& m : unplaced.moves) m.place = kNoPlace;
  const Plan free = run(unplaced, in);
  EXPECT_EQ(free.place_wait_ns, 0.0);
  EXPECT_LT(free.predicted_extra_ns, waits.predicted_extra_ns);
}

// A move in handed out and not begun (the mover is still on an earlier one) reserves no room
// yet: a birth that finds the room free takes it, and when the move begins, the room it was
// planned with is still held by a move out queued behind it. The allocator refuses it; the
// prediction counts the move as failed and its object slow. Where the birth is planned slow,
// the move takes place.
TEST(Plan, AMoveInNotBegunFindsTheRoomABirthTookAndFails) {
  PlanInputs in;
  in.layers = 3;
  in.layer_ns.assign(3, 1'000'000);
  in.fast_budget_bytes = 24 * kMiB;
  in.move_in_gbps = 1.0;  // 8 MiB: 8.4 ms, against 1 ms layers
  in.move_out_gbps = 1.0;
  in.slow_access_ns_per_byte = 1;
  in.peak_bytes = 32 * kMiB;
  const ObjectKey a = step_key(0), z = step_key(1);
  in.objects.push_back({a, 8 * kMiB, 0, 3, false, false, {0}, {0}, {}, false});  // read by layer 0
  in.objects.push_back({2, 8 * kMiB, 0, 3, true, false, {2}, {}, {}, false});    // W, read by layer 2
  in.objects.push_back({3, 8 * kMiB, 0, 3, true, false, {1}, {}, {}, false});    // Y, read by layer 1
  in.objects.push_back({z, 8 * kMiB, 1, 3, false, false, {1, 2}, {1}, {}, false});
  Plan plan;
  plan.policy = "hand-made";
  plan.fast_budget_bytes = in.fast_budget_bytes;
  plan.start[2] = in.slow;
  plan.start[3] = in.slow;
  plan.birth[a] = in.fast;
  plan.birth[z] = in.fast;
  plan.moves = {{2, in.fast, kStepStart, 2, 2, 8 * kMiB},  // W in, then Y in behind it
                {3, in.fast, kStepStart, 1, 1, 8 * kMiB},
                {a, in.slow, 0, 3, kStepStart, 8 * kMiB},  // room for z, queued behind Y
                {2, in.slow, 2, 3, kStepStart, 8 * kMiB},
                {3, in.slow, 2, 3, kStepStart, 8 * kMiB}};
  Plan taken = plan;
  ASSERT_EQ(simulate(taken, in), "");
  EXPECT_FALSE(taken.moves[0].predicted_failed);
  EXPECT_TRUE(taken.moves[1].predicted_failed) << "z took the room Y's move in needs before it began";
  EXPECT_EQ(taken.failed_in_bytes, 8 * kMiB);
  EXPECT_EQ(taken.bytes_in, 8 * kMiB) << "W only";
  EXPECT_EQ(taken.room_wait_ns, 0.0) << "z found the room free";
  EXPECT_EQ(taken.slow_access_bytes, 8 * kMiB) << "layer 1 reads Y on the slow tier";
  EXPECT_LE(taken.peak_fast_bytes, in.fast_budget_bytes);
  Plan slow_birth = plan;
  slow_birth.birth[z] = in.slow;
  ASSERT_EQ(simulate(slow_birth, in), "");
  EXPECT_FALSE(slow_birth.moves[1].predicted_failed);
  EXPECT_EQ(slow_birth.failed_in_bytes, 0u);
  EXPECT_EQ(slow_birth.bytes_in, 16 * kMiB);
}

}  // namespace
}  // namespace tensortier::migrator
