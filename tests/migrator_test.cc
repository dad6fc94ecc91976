// The migrator without a training engine: plans on hand-made inputs (what each policy must do),
// and the executor's mover thread beside a training thread that runs layers over objects whose
// bytes it checks (run under ThreadSanitizer in CI: label "threaded").
#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "tensortier/migrator/executor.h"
#include "tensortier/migrator/plan.h"
#include "tensortier/migrator/plan_edits.h"
#include "tensortier/migrator/plan_trial.h"
#include "tensortier/migrator/residency_model.h"
#include "tensortier/runtime.h"

namespace tensortier::migrator {
namespace {

constexpr std::uint64_t kMiB = 1 << 20;

// `layers` layers of `layer_ns` each, a fast budget, moves at 10 GB/s each way and slow accesses
// at 0.5 ns a byte: the rates most hand-made inputs here share.
PlanInputs plain_inputs(std::uint32_t layers, std::uint64_t budget, std::uint64_t layer_ns = 1'000'000) {
  PlanInputs in;
  in.layers = layers;
  in.layer_ns.assign(layers, layer_ns);
  in.fast_budget_bytes = budget;
  in.move_in_gbps = in.move_out_gbps = 10;
  in.slow_access_ns_per_byte = 0.5;
  return in;
}

// Ten layers; two persistent objects used early and late, and a chain of activations.
PlanInputs chain_inputs(std::uint64_t budget) {
  PlanInputs in = plain_inputs(10, budget);
  in.objects.push_back(
      {1, 4 * kMiB, 0, 10, true, false, {0, 9}, {9}, {}, false});  // weights: first and last layer
  in.objects.push_back({2, 4 * kMiB, 0, 10, true, false, {4, 5}, {5}, {}, false});  // weights: the middle
  for (std::uint32_t l = 0; l < 10; ++l) {  // activation l: born before layer l, used by l and l+1
    in.objects.push_back({step_key(l),
                          2 * kMiB,
                          l,
                          std::min(l + 2, 10U),
                          false,
                          true,
                          l + 1 < 10 ? std::vector<std::uint32_t>{l, l + 1} : std::vector<std::uint32_t>{l},
                          {l},
                          {},
                          false});
  }
  in.peak_bytes = 12 * kMiB;
  return in;
}

TEST(Plan, EveryPolicyIsValidAtEveryBudgetThatHoldsTheShortLived) {
  for (std::uint64_t budget : {12 * kMiB, 8 * kMiB, 5 * kMiB}) {
    const PlanInputs in = chain_inputs(budget);
    for (const std::string& policy : policy_names()) {
      auto plan = make_plan(policy, in);
      ASSERT_TRUE(plan) << plan.status().to_string();
      const std::string problem = simulate(*plan, in);
      if (policy == "fast-only" && budget < 12 * kMiB) {
        EXPECT_NE(problem, "") << "fast-only ignores the budget: the simulator must say so";
        continue;
      }
      EXPECT_EQ(problem, "") << policy << " at " << budget;
      EXPECT_LE(plan->peak_fast_bytes, budget) << policy;
      // The planned occupancy tensortier-bench plots: one figure per boundary, its peak the plan's.
      ASSERT_EQ(plan->fast_bytes_by_boundary.size(), in.layers + 1U) << policy;
      EXPECT_EQ(*std::max_element(plan->fast_bytes_by_boundary.begin(), plan->fast_bytes_by_boundary.end()),
                plan->peak_fast_bytes)
          << policy;
      EXPECT_EQ(plan->small_reserve_bytes, in.small_reserve_bytes);
    }
  }
}

// Eight layers; four persistent 4 MiB objects, each used by two layers in turn (0-1, 2-3, ...):
// with room for two, a plan swaps one out and the next in at the same boundaries.
PlanInputs rotating_inputs() {
  PlanInputs in = plain_inputs(8, 9 * kMiB, 2'000'000);
  for (std::uint32_t i = 0; i < 4; ++i)
    in.objects.push_back({i + 1, 4 * kMiB, 0, 8, true, false, {2 * i, 2 * i + 1}, {2 * i + 1}, {}, false});
  in.peak_bytes = 16 * kMiB;
  return in;
}

TEST(Plan, AtEachBoundaryMovesOutComeBeforeMovesIn) {
  const PlanInputs in = rotating_inputs();
  for (const std::string& policy : policy_names()) {
    if (policy == "fast-only") continue;
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

TEST(Plan, FirstTouchFillsFastInBirthOrderAndNeverMoves) {
  const PlanInputs in = chain_inputs(5 * kMiB);
  auto plan = make_plan("first-touch", in);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->start.at(1), 0u);  // the first persistent object fits
  EXPECT_EQ(plan->start.at(2), 1u);  // the second does not
  EXPECT_TRUE(plan->moves.empty());
}

TEST(Plan, SentinelMovesPersistentObjectsInBeforeTheirLayersAndBeatsFirstTouch) {
  const PlanInputs in = chain_inputs(8 * kMiB);
  auto sentinel = make_plan("sentinel", in);
  auto first_touch = make_plan("first-touch", in);
  ASSERT_TRUE(sentinel && first_touch);
  EXPECT_FALSE(sentinel->moves.empty());
  EXPECT_LT(sentinel->slow_access_bytes, first_touch->slow_access_bytes);
  EXPECT_LT(sentinel->predicted_extra_ns, first_touch->predicted_extra_ns);
  for (const PlannedMove& m : sentinel->moves) {
    if (m.to != in.fast || m.needed_by >= in.layers) continue;
    EXPECT_TRUE(m.after_layer == kStepStart || m.after_layer < m.needed_by)
        << "a move in must start before the layer that needs it";
  }
}

// Counted per layer, an interval's fast set holds objects that are not fast at the same time:
// one that dies before the next is born, and one moved out after its last use before another is
// born; counted per interval, the second of each pair stays slow.
TEST(Plan, SentinelCountsAnIntervalsFastSetAtEachLayer) {
  PlanInputs in = plain_inputs(6, 8 * kMiB);
  // Interval 0 (layers 0-1): a dies before b is born. Interval 1 (layers 2-3): d, alive to the
  // step's end, is last used by layer 2; e is born at 3. Interval 2 (layers 4-5): f, last used by
  // layer 4, dies with the step, so it holds its room when g is born at 5 (no move out of it).
  in.objects.push_back({11, 6 * kMiB, 0, 1, false, false, {0}, {0}, {}, false});  // a
  in.objects.push_back({12, 6 * kMiB, 1, 2, false, false, {1}, {1}, {}, false});  // b
  in.objects.push_back({13, 6 * kMiB, 2, 6, false, false, {2}, {2}, {}, false});  // d
  in.objects.push_back({14, 6 * kMiB, 3, 4, false, false, {3}, {3}, {}, false});  // e
  in.objects.push_back({15, 6 * kMiB, 4, 6, false, false, {4}, {4}, {}, false});  // f
  in.objects.push_back({16, 6 * kMiB, 5, 6, false, false, {5}, {5}, {}, false});  // g
  in.peak_bytes = 12 * kMiB;
  Plan per_interval = sentinel_with(in, 2, 0, SentinelCount::kPerInterval);
  Plan per_layer = sentinel_with(in, 2, 0, SentinelCount::kPerLayer);
  ASSERT_EQ(simulate(per_interval, in), "");
  ASSERT_EQ(simulate(per_layer, in), "") << "counted per layer, the plan must still hold the budget";
  EXPECT_EQ(per_interval.birth.at(12), in.slow);
  EXPECT_EQ(per_interval.birth.at(14), in.slow);
  EXPECT_EQ(per_interval.birth.at(16), in.slow);
  EXPECT_EQ(per_interval.slow_access_bytes, 18 * kMiB);
  for (ObjectKey key : {11, 12, 13, 14, 15}) EXPECT_EQ(per_layer.birth.at(key), in.fast) << key;
  EXPECT_EQ(per_layer.birth.at(16), in.slow);
  EXPECT_EQ(per_layer.slow_access_bytes, 6 * kMiB);
  EXPECT_LE(per_layer.peak_fast_bytes, in.fast_budget_bytes);
  // d's count ends at its move out after layer 2, so the plan has that move.
  const bool d_out = std::any_of(per_layer.moves.begin(), per_layer.moves.end(), [&](const PlannedMove& m) {
    return m.key == 13 && m.to == in.slow && m.after_layer == 2;
  });
  EXPECT_TRUE(d_out);
  EXPECT_LT(per_layer.predicted_extra_ns, per_interval.predicted_extra_ns);
}

// Ranked by uses per byte-layer held, four one-layer stays go before one object held over the
// whole interval; ranked per byte, the long stay (more uses per byte) takes the room first.
TEST(Plan, SentinelRankedByHeldBytesPutsShortStaysFirst) {
  PlanInputs in = plain_inputs(4, 8 * kMiB);
  in.objects.push_back({20, 6 * kMiB, 0, 4, false, false, {0, 3}, {0}, {}, false});  // 2 uses in 4 layers
  for (std::uint32_t l = 0; l < 4; ++l)
    in.objects.push_back({21 + l, 5 * kMiB, l, l + 1, false, false, {l}, {l}, {}, false});  // 1 use, 1 layer
  in.peak_bytes = 26 * kMiB;
  Plan per_byte = sentinel_with(in, 4, 0, SentinelCount::kPerLayer);
  Plan per_held = sentinel_with(in, 4, 0, SentinelCount::kPerLayerByHeld);
  ASSERT_EQ(simulate(per_byte, in), "");
  ASSERT_EQ(simulate(per_held, in), "");
  EXPECT_EQ(per_byte.birth.at(20), in.fast);
  EXPECT_EQ(per_byte.slow_access_bytes, 20 * kMiB);  // the four short stays read where they are
  EXPECT_EQ(per_held.birth.at(20), in.slow);
  for (ObjectKey key = 21; key < 25; ++key) EXPECT_EQ(per_held.birth.at(key), in.fast) << key;
  EXPECT_EQ(per_held.slow_access_bytes, 12 * kMiB);  // the long stay read twice where it is
}

// Ranked by uses per layer held (each use touches all of an object's pages), the object used at
// every layer of its stay goes first whatever its size; ranked per byte too, a smaller one used
// less often goes first and leaves the larger slow.
TEST(Plan, SentinelRankedByHotHeldPutsDenseUseFirst) {
  PlanInputs in = plain_inputs(2, 7 * kMiB);
  in.objects.push_back({30, 6 * kMiB, 0, 2, false, false, {0, 1}, {0}, {}, false});  // used at both layers
  in.objects.push_back({31, 2 * kMiB, 0, 2, false, false, {0}, {0}, {}, false});     // used at one
  in.peak_bytes = 8 * kMiB;
  Plan per_byte = sentinel_with(in, 2, 0, SentinelCount::kPerLayerByHeld);
  Plan hot = sentinel_with(in, 2, 0, SentinelCount::kPerLayerByHotHeld);
  ASSERT_EQ(simulate(per_byte, in), "");
  ASSERT_EQ(simulate(hot, in), "");
  EXPECT_EQ(per_byte.birth.at(30), in.slow);
  EXPECT_EQ(per_byte.birth.at(31), in.fast);
  EXPECT_EQ(per_byte.slow_access_bytes, 12 * kMiB);
  EXPECT_EQ(hot.birth.at(30), in.fast);
  EXPECT_EQ(hot.birth.at(31), in.slow);
  EXPECT_EQ(hot.slow_access_bytes, 2 * kMiB);
}

// The policy keeps the cheapest valid plan of every interval length and count.
TEST(Plan, SentinelKeepsTheCheapestIntervalAndCount) {
  for (std::uint64_t budget : {8 * kMiB, 6 * kMiB}) {
    PlanInputs in = chain_inputs(budget);
    auto best = make_plan("sentinel", in);
    ASSERT_TRUE(best);
    ASSERT_EQ(simulate(*best, in), "");
    for (PlanObject& o : in.objects) o.short_lived = false;  // the variant without the region
    int valid = 0;
    for (std::uint32_t n = 1; n <= in.layers; ++n) {
      for (SentinelCount count : kSentinelCounts) {
        Plan plan = sentinel_with(in, n, 0, count);
        if (!simulate(plan, in).empty()) continue;
        ++valid;
        EXPECT_LE(best->predicted_extra_ns, plan.predicted_extra_ns)
            << "interval " << n << ", " << plan.variant;
      }
    }
    EXPECT_GT(valid, 0);
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

// A move out takes time, and the room it leaves is there only when it ends. An activation born
// where the plan moved a weight out just before must wait for that move (the runtime's room
// wait), or fall back to the slow tier where the wait would be longer than the runtime allows;
// the prediction counts either. Where the move is fast enough, nothing waits.
TEST(Plan, BirthsWaitForTheMovesOutThatMakeTheirRoom) {
  PlanInputs in;
  in.layers = 3;
  in.layer_ns.assign(3, 1'000'000);
  in.fast_budget_bytes = 10 * kMiB;
  in.move_in_gbps = 1.0;
  in.move_out_gbps = 1.0;  // 8 MiB out: 8.4 ms, against 1 ms layers
  in.slow_access_ns_per_byte = 1;
  in.peak_bytes = 16 * kMiB;
  in.objects.push_back({1, 8 * kMiB, 0, 3, true, false, {0}, {}, {}, false});  // a weight, read by layer 0
  in.objects.push_back(
      {step_key(0), 8 * kMiB, 1, 3, false, false, {1, 2}, {1}, {}, false});  // born before layer 1
  Plan plan;
  plan.policy = "hand-made";
  plan.fast_budget_bytes = in.fast_budget_bytes;
  plan.start[1] = in.fast;
  plan.birth[step_key(0)] = in.fast;
  plan.moves = {{1, in.slow, 0, 3, kStepStart, 8 * kMiB}, {1, in.fast, 2, 3, 3, 8 * kMiB}};
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

// The profile's evidence for an overwrite: declared written and not read, every page written and
// none read first. Host code or an undeclaring layer touching an object marks it undeclared.
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

TEST(Plan, ObjectsTouchedUnpinnedOutsideTheLayersStayWhereTheyAreBorn) {
  // The weights used by the first and last layer (key 1) are what every moving policy moves at
  // 5 MiB; host code touching them unpinned makes every plan leave them on one tier, and a pin
  // (host_pinned) gives the policy its plan back.
  for (std::uint64_t budget : {12 * kMiB, 8 * kMiB, 5 * kMiB}) {
    PlanInputs free_in = chain_inputs(budget);
    free_in.objects[0].accessed_undeclared = true;
    free_in.objects[0].host_pinned = true;
    PlanInputs stay_in = free_in;
    stay_in.objects[0].host_pinned = false;
    ASSERT_TRUE(stay_in.objects[0].stays());
    ASSERT_FALSE(free_in.objects[0].stays());
    bool some_policy_moved_it = false;
    for (const std::string& policy : policy_names()) {
      auto free_plan = make_plan(policy, free_in);
      auto plan = make_plan(policy, stay_in);
      ASSERT_TRUE(plan && free_plan) << policy;
      const auto moves_of_1 = [](const Plan& p) {
        return std::ranges::count_if(p.moves, [](const PlannedMove& m) { return whole_key(m.key) == 1; });
      };
      EXPECT_EQ(moves_of_1(*plan), 0) << policy << " at " << budget;
      const bool moved = moves_of_1(*free_plan) > 0;
      some_policy_moved_it |= moved;
      EXPECT_EQ(plan->left_in_place, moved ? std::vector<ObjectKey>{1} : std::vector<ObjectKey>{}) << policy;
      if (!moved) {  // nothing to leave: the very plan the policy made
        EXPECT_EQ(plan->moves.size(), free_plan->moves.size()) << policy;
        continue;
      }
      if (policy != "fast-only") {
        EXPECT_EQ(simulate(*plan, stay_in), "") << policy << " at " << budget;
      }
      // On one tier its whole life (every segment of it, in a page-granular plan): fast where the
      // rest of the plan leaves it room at every boundary.
      std::set<TierIndex> tiers;
      for (const auto& [key, t] : plan->start) {
        if (whole_key(key) == 1) tiers.insert(t);
      }
      ASSERT_EQ(tiers.size(), 1u) << policy;
      const TierIndex tier = *tiers.begin();
      std::vector<std::uint64_t> without(plan->fast_bytes_by_boundary);
      if (tier == stay_in.fast) {
        for (std::uint64_t& b : without) b -= 4 * kMiB;
      }
      const bool room = std::ranges::all_of(without, [&](std::uint64_t b) { return b + 4 * kMiB <= budget; });
      EXPECT_EQ(tier, room ? stay_in.fast : stay_in.slow) << policy << " at " << budget;
    }
    EXPECT_TRUE(some_policy_moved_it) << "at " << budget << ": the test needs a plan that moves key 1";
  }
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

// Small random steps: persistent objects and objects born in the step, random uses and writes
// (with dead_free, some of them overwrites, and now and then an object accessed undeclared),
// rates where either the charge or the slow tier's busy time can decide the step.
PlanInputs random_inputs(std::mt19937& rng, bool clean_out_free, bool dead_free = false) {
  auto pick = [&](std::uint32_t lo, std::uint32_t hi) {  // in [lo, hi]
    return std::uniform_int_distribution<std::uint32_t>(lo, hi)(rng);
  };
  PlanInputs in;
  in.layers = pick(4, 5);
  for (std::uint32_t l = 0; l < in.layers; ++l) in.layer_ns.push_back(pick(2, 30) * 100'000);
  in.move_in_gbps = 1.6;
  in.move_out_gbps = 0.6;
  in.slow_access_ns_per_byte = pick(1, 8) * 0.1;
  in.mover_cpu_ns_per_byte = pick(0, 3) * 0.1;
  in.mover_steals_compute = 1;
  in.clean_moves_out_free = clean_out_free;
  in.dead_moves_free = dead_free;
  std::uint32_t cells = 0;
  for (ObjectKey key = 1; cells < 12; ++key) {
    PlanObject o;
    o.key = key;
    o.bytes = pick(1, 4) * kMiB;
    o.persistent = key <= 2;
    o.born = o.persistent ? 0 : pick(0, in.layers - 1);
    o.freed = o.persistent ? in.layers : pick(o.born + 1, in.layers);
    for (std::uint32_t l = o.born; l < o.freed; ++l) {
      if (pick(0, 2) == 0 && l != o.born)
        continue;  // used by about two layers in three; a new object by its first
      o.uses.push_back(l);
      if (pick(0, 1) == 0 || (!o.persistent && l == o.born)) {
        o.writes.push_back(l);
        if (dead_free && pick(0, 1) == 0) o.overwrites.push_back(l);
      }
    }
    o.accessed_undeclared = dead_free && pick(0, 5) == 0;
    cells += o.freed - o.born;
    in.objects.push_back(o);
  }
  std::uint64_t total = 0, largest = 0;
  for (const PlanObject& o : in.objects) {
    total += o.bytes;
    largest = std::max(largest, o.bytes);
  }
  in.fast_budget_bytes = largest + pick(0, 4) * (total - largest) / 5;
  in.peak_bytes = total;
  return in;
}

// The exact model's solver against brute force: over every residency of small random steps that
// keeps the budget, the least residency_cost_ns is what the solver reports as optimal, its
// residency costs that, and no policy's plan is predicted below it (the bound holds for simulate()).
TEST(ExactModel, TheSolversOptimumIsTheLeastCostOfEveryResidencyAndBoundsEveryPlan) {
  std::mt19937 rng(7);
  for (int instance = 0; instance < 120; ++instance) {
    const PlanInputs in = random_inputs(rng, instance % 2 == 1, instance % 4 >= 2);
    std::vector<std::pair<std::size_t, std::uint32_t>> cells;  // (object, boundary) of each life
    for (std::size_t i = 0; i < in.objects.size(); ++i) {
      const PlanObject& o = in.objects[i];
      for (std::uint32_t b = o.born; b < std::min(o.freed, in.layers); ++b) cells.emplace_back(i, b);
    }
    ASSERT_LE(cells.size(), 20U);
    double least = std::numeric_limits<double>::infinity();
    Residency r(in.objects.size(), std::vector<char>(in.layers, 0));
    for (std::uint64_t mask = 0; mask < (1ULL << cells.size()); ++mask) {
      std::vector<std::uint64_t> held(in.layers, 0);
      for (std::size_t c = 0; c < cells.size(); ++c) {
        const auto [i, b] = cells[c];
        r[i][b] = static_cast<char>((mask >> c) & 1U);
        if (r[i][b]) held[b] += in.objects[i].bytes;
      }
      if (*std::max_element(held.begin(), held.end()) > in.fast_budget_bytes) continue;
      least = std::min(least, residency_cost_ns(in, r));
    }
    const ResidencySolution sol = solve_residency(in, 10);
    ASSERT_TRUE(sol.solved && sol.optimal) << instance << ": " << sol.status;
    const double tolerance = 1e-5 * least + 10;  // the solver works in ms and MiB
    EXPECT_NEAR(sol.bound_ns, least, tolerance) << instance;
    EXPECT_NEAR(sol.cost_ns, least, tolerance) << instance;
    // The mover's CPU share of the cost: its copies' CPU, which a mover on a core of its own
    // (mover_steals_compute 0) would not add.
    EXPECT_NEAR(sol.parts.mover_cpu_ns, (sol.parts.in_bytes + sol.parts.out_bytes) * in.mover_cpu_ns_per_byte,
                1)
        << instance;
    PlanInputs own_core = in;
    own_core.mover_steals_compute = 0;
    EXPECT_NEAR(residency_cost(own_core, sol.fast).extra_ns, sol.cost_ns - sol.parts.mover_cpu_ns, 1)
        << instance;
    // A page-granular plan may keep part of an object fast, which no residency of whole objects
    // does: its bound is the model's over the segments (where moving a segment out is never clean).
    const ResidencySolution by_segment = solve_residency(in_segments(in), 10);
    ASSERT_TRUE(by_segment.solved) << instance << ": " << by_segment.status;
    for (const std::string& policy : policy_names()) {
      auto plan = make_plan(policy, in);
      ASSERT_TRUE(plan);
      if (!simulate(*plan, in).empty()) continue;
      const double bound = plan->segment_bytes != 0 ? by_segment.bound_ns : sol.bound_ns;
      EXPECT_GE(plan->predicted_extra_ns, bound - tolerance) << instance << " " << policy;
    }
  }
}

// With dead moves free, the oracle still weighs its variants as if every move copied (a plan of
// many moves is predicted far better than it runs): by that account no other policy's plan beats
// its choice, while by the dead-free account some instances have a cheaper one.
TEST(ExactModel, TheOracleWeighsDeadMovesAsCopies) {
  std::mt19937 rng(11);
  int chosen_against_free_account = 0;
  for (int instance = 0; instance < 80; ++instance) {
    PlanInputs in = random_inputs(rng, instance % 2 == 1, true);
    in.mover_cpu_ns_per_byte = 0.5 * (instance % 4);  // copies from free to dear
    PlanInputs copies = in;
    copies.dead_moves_free = false;
    auto oracle = make_plan("oracle", in);
    ASSERT_TRUE(oracle);
    if (!simulate(*oracle, in).empty()) continue;
    const double free_account = oracle->predicted_extra_ns;
    Plan weighed = *oracle;
    ASSERT_EQ(simulate(weighed, copies), "");
    double cheapest_free = free_account;
    for (const char* policy : {"first-touch", "reactive", "autoswap", "sentinel"}) {
      auto other = make_plan(policy, in);
      ASSERT_TRUE(other);
      if (!simulate(*other, in).empty()) continue;
      cheapest_free = std::min(cheapest_free, other->predicted_extra_ns);
      ASSERT_EQ(simulate(*other, copies), "");
      EXPECT_LE(weighed.predicted_extra_ns, other->predicted_extra_ns + 1) << instance << " " << policy;
    }
    if (cheapest_free + 1 < free_account) ++chosen_against_free_account;
  }
  EXPECT_GT(chosen_against_free_account, 0) << "no instance tells the two accounts apart";
}

// The oracle carries the bound and takes the exact model's plan where it is predicted cheapest;
// a solver given no time still leaves a valid plan.
TEST(ExactModel, TheOracleReportsTheBoundAndStaysValidWithoutTheSolver) {
  PlanInputs in = rotating_inputs();
  in.move_in_gbps = 1.6;
  in.move_out_gbps = 0.6;
  auto oracle = make_plan("oracle", in);
  ASSERT_TRUE(oracle);
  EXPECT_EQ(simulate(*oracle, in), "");
  EXPECT_GT(oracle->bound_extra_ns, 0.0);
  EXPECT_LE(oracle->bound_extra_ns, oracle->predicted_extra_ns + 10);
  EXPECT_NE(oracle->solver.find("optimal"), std::string::npos) << oracle->solver;
  for (const std::string& policy : policy_names()) {
    auto plan = make_plan(policy, in);
    ASSERT_TRUE(plan);
    if (!simulate(*plan, in).empty()) continue;
    EXPECT_GE(plan->predicted_extra_ns + 10, oracle->bound_extra_ns) << policy;
  }
}

// rotating_inputs with 5 ms layers and 4 MiB moves of 4.2 ms, and a plan by hand over them that
// starts objects 1 and 2 fast, 3 and 4 slow; move() adds one of its moves.
struct HandPlan {
  PlanInputs in = rotating_inputs();
  Plan plan;
  HandPlan() {
    in.layer_ns.assign(in.layers, 5'000'000);
    in.move_in_gbps = in.move_out_gbps = 1;
    plan.policy = "by hand";
    plan.start = {{1, 0}, {2, 0}, {3, 1}, {4, 1}};
  }
  void move(ObjectKey key, TierIndex to, std::uint32_t after, std::uint32_t needed_by,
            std::uint32_t useful_until = kStepStart) {
    plan.moves.push_back({key, to, after, needed_by, useful_until, 4 * kMiB});
  }
};

// Moves the simulator predicts late (the layer would wait, or find the object still slow) are
// marked; the plan without them is valid and leaves out only those, and the moves out that would
// find their objects already slow. A plan by hand over rotating_inputs (object k used by layers
// 2k-2 and 2k-1, 5 ms each; 4 MiB moves of 4.2 ms): object 3 moved in after layer 1 for layer 4
// (in time behind a move out), object 4 after layer 5 for layer 6 behind a move out (late).
TEST(Plan, LateMovesAreMarkedAndThePlanWithoutThemIsValid) {
  HandPlan hand;
  const PlanInputs& in = hand.in;
  Plan& plan = hand.plan;
  auto move = [&](ObjectKey key, TierIndex to, std::uint32_t after, std::uint32_t needed_by) {
    hand.move(key, to, after, needed_by);
  };
  move(1, 1, 1, 2);
  move(3, 0, 1, 4);
  move(2, 1, 3, 4);
  move(3, 1, 5, 6);
  move(4, 0, 5, 6);
  move(4, 1, 7, 8);
  move(1, 0, 7, 8);
  move(2, 0, 7, 8);
  ASSERT_EQ(simulate(plan, in), "");
  std::vector<ObjectKey> late;
  for (const PlannedMove& m : plan.moves)
    if (m.predicted_late) late.push_back(m.key);
  EXPECT_EQ(late, std::vector<ObjectKey>{4}) << "object 3's move in is in time, object 4's late";

  const std::optional<Plan> left_out = without_late_moves(plan, in);
  ASSERT_TRUE(left_out) << "a late move to leave out";
  const Plan& timely = *left_out;
  Plan check = timely;
  EXPECT_EQ(simulate(check, in), "");
  ASSERT_EQ(timely.moves.size(), plan.moves.size() - 2) << "object 4's move in, and its move out";
  for (const PlannedMove& m : timely.moves) EXPECT_NE(m.key, 4U);
  EXPECT_EQ(timely.bytes_in, plan.bytes_in - 4 * kMiB);
  EXPECT_GT(timely.slow_access_bytes, plan.slow_access_bytes - 1) << "object 4 is read where it is";
  // Where nothing is late there is nothing to leave out.
  EXPECT_FALSE(without_late_moves(timely, in));
}

// A plan by hand over rotating_inputs with two late moves in: object 3's after layer 3 (behind
// object 2's move out; judged on layers 4-5) and object 4's after layer 5 (layers 6-7).
Plan judged_hand_plan(HandPlan& hand) {
  auto move = [&](ObjectKey key, TierIndex to, std::uint32_t after, std::uint32_t needed_by,
                  std::uint32_t useful_until) { hand.move(key, to, after, needed_by, useful_until); };
  move(1, 1, 1, 2, kStepStart);
  move(2, 1, 3, 4, kStepStart);
  move(3, 0, 3, 4, 5);
  move(3, 1, 5, 6, kStepStart);
  move(4, 0, 5, 6, 7);
  move(4, 1, 7, 8, kStepStart);
  move(1, 0, 7, 8, 8);
  move(2, 0, 7, 8, 8);
  (void)simulate(hand.plan, hand.in);
  return hand.plan;
}

// The trial's verdicts move by move: each late move in judged by the time of the layers it can
// change (from the one after it is handed out to the last it helps), with the late moves and
// without them; the plan that leaves out only those judged not worth it is valid. The plan by
// hand above with object 3's move in handed out after layer 3 (behind object 2's move out: late
// too).
TEST(Plan, LateMovesAreJudgedOneByOneByTheLayersTheyServe) {
  HandPlan hand;
  const PlanInputs& in = hand.in;
  Plan plan = judged_hand_plan(hand);
  ASSERT_EQ(simulate(plan, in), "");
  ASSERT_TRUE(plan.moves[2].predicted_late && plan.moves[4].predicted_late);

  const std::vector<double> with_ns = {5e6, 5e6, 5e6, 5e6, 6e6, 5e6, 9e6, 5e6};
  const std::vector<double> without_ns = {5e6, 5e6, 5e6, 5e6, 8e6, 6e6, 7e6, 6e6};
  const std::vector<LateMoveVerdict> verdicts = judge_late_moves(plan, in.layers, with_ns, without_ns);
  ASSERT_EQ(verdicts.size(), 2U) << "one verdict for each late move in, none for the others";
  EXPECT_EQ(verdicts[0].move, 2U);
  EXPECT_EQ(verdicts[0].first_layer, 4U);
  EXPECT_EQ(verdicts[0].last_layer, 5U);
  EXPECT_DOUBLE_EQ(verdicts[0].with_ns, 11e6);
  EXPECT_DOUBLE_EQ(verdicts[0].without_ns, 14e6);
  EXPECT_TRUE(verdicts[0].keep()) << "its layers were faster with it";
  EXPECT_EQ(verdicts[1].move, 4U);
  EXPECT_EQ(verdicts[1].first_layer, 6U);
  EXPECT_EQ(verdicts[1].last_layer, 7U);
  EXPECT_FALSE(verdicts[1].keep()) << "its layers were faster without it (14 ms against 13 ms)";
  EXPECT_TRUE(judge_late_moves(plan, in.layers, std::span(with_ns).first(7), without_ns).empty())
      << "times for fewer layers than the step has judge nothing";

  const std::vector<std::size_t> leave = {verdicts[1].move};
  const std::optional<Plan> mixed = without_moves_in(plan, in, leave);
  ASSERT_TRUE(mixed);
  Plan check = *mixed;
  EXPECT_EQ(simulate(check, in), "");
  EXPECT_EQ(mixed->moves.size(), plan.moves.size() - 2) << "object 4's move in, and its move out";
  EXPECT_EQ(std::ranges::count_if(mixed->moves, [](const PlannedMove& m) { return m.key == 3; }), 2)
      << "object 3's moves stay";
  EXPECT_EQ(std::ranges::count_if(mixed->moves, [](const PlannedMove& m) { return m.key == 4; }), 0);
  // Leaving out a move out, or nothing, gives no plan.
  EXPECT_FALSE(without_moves_in(plan, in, std::vector<std::size_t>{0}));
  EXPECT_FALSE(without_moves_in(plan, in, std::vector<std::size_t>{}));
}

// Feeds `steps` steps of `step_ns` (each layer `layer_ns`, or 1 ms) to the trial under `running`;
// returns the plan it switched to, if it did (after the last step).
std::optional<Plan> feed(PlanTrial& trial, Plan& running, int steps, std::uint64_t step_ns,
                         std::vector<std::uint64_t> layer_ns = std::vector<std::uint64_t>(8, 1'000'000)) {
  std::optional<Plan> switched;
  for (int s = 0; s < steps; ++s) {
    switched = trial.step(step_ns, layer_ns, running);
    if (switched) running = *switched;
  }
  return switched;
}

TEST(PlanTrial, TheFastestPhaseByTheStepTimesGivenGoesOn) {
  // Three phases (as made, without its late moves, none), two measured steps each after an
  // unmeasured one; the times are given, so the verdict is the code's alone.
  for (int fastest = 0; fastest < 3; ++fastest) {
    HandPlan hand;
    Plan running = judged_hand_plan(hand);
    auto trial = PlanTrial::begin(running, hand.in, 2, "by hand");
    ASSERT_TRUE(trial);
    ASSERT_EQ(trial->phases().size(), 3u) << "made, without its late moves, none";
    // Equal layer times in the first two phases: no late move is judged worth keeping alone, so
    // no judged phase comes in between.
    for (int phase = 0; phase < 3; ++phase) {
      const std::uint64_t ns = phase == fastest ? 10'000'000 : 20'000'000;
      const std::optional<Plan> next = feed(*trial, running, 3, ns);
      if (phase < 2) {
        ASSERT_TRUE(next) << "phase " << phase << " ended: the next one's plan runs";
        EXPECT_EQ(trial->running_phase(), static_cast<std::size_t>(phase + 1));
      }
    }
    ASSERT_TRUE(trial->done());
    EXPECT_EQ(trial->running_phase(), static_cast<std::size_t>(fastest)) << trial->result();
    const std::vector<std::string> verdicts = {
        "its plan runs as made", "its plan runs without its late moves", "moving does not pay here"};
    EXPECT_NE(trial->result().find(verdicts[static_cast<std::size_t>(fastest)]), std::string::npos)
        << trial->result();
    EXPECT_EQ(running.moves.empty(), fastest == 2) << "the plan running at the end is the fastest phase's";
    EXPECT_FALSE(trial->step(1, {}, running)) << "a trial that is done switches no more";
  }
  // Ties keep the first of equals (the plan as made); a plan that moves nothing has no trial.
  HandPlan hand;
  Plan running = judged_hand_plan(hand);
  auto trial = PlanTrial::begin(running, hand.in, 1, "by hand");
  ASSERT_TRUE(trial);
  (void)feed(*trial, running, 6, 5'000'000);
  ASSERT_TRUE(trial->done());
  EXPECT_EQ(trial->running_phase(), 0u) << trial->result();
  Plan still;
  EXPECT_FALSE(PlanTrial::begin(still, hand.in, 3, "none"));
  EXPECT_FALSE(PlanTrial::begin(running, hand.in, 0, "off"));
}

TEST(PlanTrial, LateMovesAreJudgedOneByOneFromTheLayerTimesGiven) {
  // Layers 4-5 (object 3's late move) faster with the late moves, layers 6-7 (object 4's) faster
  // without: the judged phase keeps 3's and leaves out 4's; given as fastest, it goes on.
  HandPlan hand;
  Plan running = judged_hand_plan(hand);
  auto trial = PlanTrial::begin(running, hand.in, 2, "by hand");
  ASSERT_TRUE(trial);
  const std::vector<std::uint64_t> with = {5, 5, 5, 5, 6, 5, 9, 5}, without = {5, 5, 5, 5, 8, 6, 7, 6};
  auto ms = [](std::vector<std::uint64_t> v) {
    for (std::uint64_t& x : v) x *= 1'000'000;
    return v;
  };
  ASSERT_TRUE(feed(*trial, running, 3, 45'000'000, ms(with)));
  ASSERT_TRUE(feed(*trial, running, 3, 48'000'000, ms(without)));
  ASSERT_EQ(trial->phases().size(), 4u);
  EXPECT_EQ(trial->phases()[2], "with 1 of its 2 late moves (judged one by one)");
  EXPECT_EQ(trial->running_phase(), 2u);
  const auto moves_of = [&](ObjectKey key) {
    return std::ranges::count_if(running.moves, [&](const PlannedMove& m) { return m.key == key; });
  };
  EXPECT_EQ(moves_of(3), 2) << "object 3's late move in kept (and its move out)";
  EXPECT_EQ(moves_of(4), 0) << "object 4's late move in left out (and its move out)";
  ASSERT_TRUE(feed(*trial, running, 3, 40'000'000));  // judged: the fastest
  (void)feed(*trial, running, 3, 50'000'000);         // none
  ASSERT_TRUE(trial->done());
  EXPECT_EQ(trial->running_phase(), 2u) << trial->result();
  EXPECT_NE(trial->result().find("its plan runs with the 1 late moves its layers were faster with"),
            std::string::npos)
      << trial->result();
  EXPECT_EQ(moves_of(4), 0);
}

TEST(Plan, UnknownPolicyAndBadInputsAreRefused) {
  auto plan = make_plan("lru", chain_inputs(8 * kMiB));
  ASSERT_FALSE(plan);
  EXPECT_NE(plan.status().message().find("known: fast-only"), std::string::npos);
  profiler::StepProfile empty;
  EXPECT_FALSE(inputs_from_profile(empty, 0, 1, kMiB));
}

// Reactive knows only the past: every move in follows a layer that used the object (a promotion
// of what was just touched), and with room for the weights it keeps them fast.
TEST(Plan, ReactivePromotesOnlyWhatALayerJustUsed) {
  const PlanInputs in = chain_inputs(8 * kMiB);
  auto plan = make_plan("reactive", in);
  ASSERT_TRUE(plan);
  EXPECT_EQ(simulate(*plan, in), "");
  std::map<ObjectKey, const PlanObject*> by_key;
  for (const PlanObject& o : in.objects) by_key[o.key] = &o;
  std::size_t ins = 0;
  for (const PlannedMove& m : plan->moves) {
    if (m.to != in.fast) continue;
    ++ins;
    const auto& uses = by_key.at(m.key)->uses;
    ASSERT_NE(m.after_layer, kStepStart);
    EXPECT_TRUE(std::binary_search(uses.begin(), uses.end(), m.after_layer))
        << "key " << m.key << " moved in after layer " << m.after_layer << ", which did not use it";
    EXPECT_EQ(m.useful_until, kStepStart) << "reactive cannot know when a move stops helping";
  }
  EXPECT_GT(ins, 0u) << "at 8 MiB of 16 MiB live something must be promoted";
  auto roomy = make_plan("reactive", chain_inputs(64 * kMiB));
  ASSERT_TRUE(roomy);
  EXPECT_TRUE(roomy->moves.empty()) << "with room for everything a reactive policy moves nothing";
  EXPECT_EQ(roomy->slow_access_bytes, 0u);
}

// Reactive at 2 MiB pages: part of an object too large for the budget stays fast (object-level
// reactive keeps all of it slow), an object is born whole on one tier, and promotions and
// demotions move segments, named by part keys.
TEST(Plan, Reactive2mKeepsPartOfAnObjectFastAndMovesSegments) {
  PlanInputs in = plain_inputs(4, 6 * kMiB);
  const std::uint64_t big = 9 * kMiB + 4096;  // segments of 2, 2, 2, 2 and 1 MiB + 4 KiB
  in.objects.push_back({1, big, 0, 4, true, false, {0, 1, 2, 3}, {3}, {}, false});
  in.objects.push_back({step_key(0), 3 * kMiB, 1, 3, false, false, {1, 2}, {1}, {}, false});
  in.peak_bytes = big + 3 * kMiB;
  const PlanInputs segments = in_segments(in);
  ASSERT_EQ(segments.objects.size(), 7u);
  EXPECT_EQ(segments.objects[4].key, part_key(1, 4));
  EXPECT_EQ(segments.objects[4].bytes, kMiB + 4096);
  EXPECT_EQ(whole_key(segments.objects[6].key), step_key(0));
  EXPECT_EQ(segment_of(segments.objects[6].key), 1u);
  EXPECT_EQ(segment_of(step_key(0)), kWholeObject);

  auto whole = make_plan("reactive", in);
  auto paged = make_plan("reactive-2m", in);
  ASSERT_TRUE(whole && paged);
  EXPECT_EQ(simulate(*paged, in), "");
  EXPECT_EQ(paged->segment_bytes, kSegmentBytes);
  EXPECT_EQ(whole->start.at(1), in.slow) << "9 MiB never fits 6 MiB whole";
  int fast_segments = 0;
  for (std::uint32_t k = 0; k < 5; ++k) fast_segments += paged->start.at(part_key(1, k)) == in.fast ? 1 : 0;
  EXPECT_EQ(fast_segments, 3) << "three of its 2 MiB segments fit";
  EXPECT_EQ(paged->birth.at(part_key(step_key(0), 0)), paged->birth.at(part_key(step_key(0), 1)))
      << "an object is born whole on one tier";
  EXPECT_LT(paged->slow_access_bytes, whole->slow_access_bytes);
  EXPECT_LT(paged->predicted_extra_ns, whole->predicted_extra_ns);

  // Two weights of 6 MiB taking turns in 8 MiB: the second's segments are promoted after the layer
  // that uses it, the first's demoted to make room, segment by segment.
  PlanInputs turns;
  turns.layers = 8;
  turns.layer_ns.assign(8, 1'000'000);
  turns.move_in_gbps = turns.move_out_gbps = 10;
  turns.slow_access_ns_per_byte = 0.5;
  turns.fast_budget_bytes = 8 * kMiB;
  turns.objects.push_back({1, 6 * kMiB, 0, 8, true, false, {0, 1, 2, 3}, {3}, {}, false});
  turns.objects.push_back({2, 6 * kMiB, 0, 8, true, false, {4, 5, 6, 7}, {7}, {}, false});
  turns.peak_bytes = 12 * kMiB;
  auto moving = make_plan("reactive-2m", turns);
  ASSERT_TRUE(moving);
  EXPECT_EQ(simulate(*moving, turns), "");
  std::size_t ins = 0;
  for (const PlannedMove& m : moving->moves) {
    EXPECT_NE(segment_of(m.key), kWholeObject) << "key " << m.key;
    EXPECT_EQ(m.bytes, kSegmentBytes);
    ins += m.to == turns.fast ? 1 : 0;
  }
  EXPECT_GT(ins, 0u);
  EXPECT_EQ(moving->peak_fast_bytes, turns.fast_budget_bytes)
      << "pages fill the budget; 6 MiB objects cannot";
  auto objects = make_plan("reactive", turns);
  ASSERT_TRUE(objects);
  EXPECT_EQ(objects->peak_fast_bytes, 6 * kMiB);
  EXPECT_LT(moving->slow_access_bytes, objects->slow_access_bytes);
}

// AutoSwap swaps out the large objects idle across the peak, after their use before it, and back
// in early enough for the move to end before their next use; objects under 1 MiB never move.
TEST(Plan, AutoswapSwapsIdleLargeObjectsAcrossThePeakInTime) {
  PlanInputs in;
  in.layers = 10;
  in.layer_ns.assign(10, 1'000'000);
  in.move_in_gbps = in.move_out_gbps = 4;  // 4 MiB in ~1 ms: one layer back
  in.slow_access_ns_per_byte = 0.5;
  in.objects.push_back({1, 4 * kMiB, 0, 10, true, false, {0, 9}, {9}, {}, false});  // idle across the middle
  in.objects.push_back({2, 4 * kMiB, 0, 10, true, false, {4, 5}, {5}, {}, false});  // used at the peak
  in.objects.push_back({3, kMiB / 2, 0, 10, true, false, {0, 9}, {9}, {}, false});  // idle, but too small
  in.objects.push_back(
      {step_key(0), 6 * kMiB, 3, 7, false, false, {3, 4, 5, 6}, {3}, {}, false});  // the peak's activation
  in.peak_bytes = 4 * kMiB + 4 * kMiB + kMiB / 2 + 6 * kMiB;
  in.fast_budget_bytes = in.peak_bytes - 2 * kMiB;
  auto plan = make_plan("autoswap", in);
  ASSERT_TRUE(plan);
  EXPECT_EQ(simulate(*plan, in), "");
  bool out = false, back = false;
  for (const PlannedMove& m : plan->moves) {
    EXPECT_EQ(m.key, 1u) << "only the large object idle across the peak is swapped";
    if (m.to == in.slow) {
      out = true;
      EXPECT_EQ(m.after_layer, 0u) << "out right after its use before the peak";
    } else {
      back = true;
      EXPECT_EQ(m.needed_by, 9u);
      ASSERT_NE(m.after_layer, kStepStart);
      const double lead_ns = static_cast<double>(m.needed_by - m.after_layer - 1) * 1e6;
      EXPECT_GE(lead_ns, static_cast<double>(m.bytes) / in.move_in_gbps) << "in too late to hide the move";
      EXPECT_LE(m.after_layer, 7u);
    }
  }
  EXPECT_TRUE(out && back);
  EXPECT_EQ(plan->slow_access_bytes, 0u) << "the swap is hidden: no layer finds its object slow";
}

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
      ASSERT_TRUE(rt.free(rt.address_of(act->id).value()).is_ok());  // a temporary
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

TEST(Executor, MoverThreadBesideTheTrainingThreadKeepsEveryByte) {
  mover_beside_training("sentinel", std::size_t{1} << 20, 3, "optane-server");
  // Promoting a 5 MiB weight pays for its next layers.
  mover_beside_training("reactive-2m", std::size_t{5} << 20, 8, "cxl");
}

}  // namespace
}  // namespace tensortier::migrator
