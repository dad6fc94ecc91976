// What the migrator's tests share: hand-made plan inputs (a chain, rotating users, seeded random
// steps) and a hand-made plan with late moves.
#pragma once

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

inline constexpr std::uint64_t kMiB = 1 << 20;

// `layers` layers of `layer_ns` each, a fast budget, moves at 10 GB/s each way and slow accesses
// at 0.5 ns a byte: the rates most hand-made inputs here share.
inline PlanInputs plain_inputs(std::uint32_t layers, std::uint64_t budget,
                               std::uint64_t layer_ns = 1'000'000) {
  PlanInputs in;
  in.layers = layers;
  in.layer_ns.assign(layers, layer_ns);
  in.fast_budget_bytes = budget;
  in.move_in_gbps = in.move_out_gbps = 10;
  in.slow_access_ns_per_byte = 0.5;
  return in;
}

// Ten layers; two persistent objects used early and late, and a chain of activations.
inline PlanInputs chain_inputs(std::uint64_t budget) {
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

// Eight layers; four persistent 4 MiB objects, each used by two layers in turn (0-1, 2-3, ...):
// with room for two, a plan swaps one out and the next in at the same boundaries.
inline PlanInputs rotating_inputs() {
  PlanInputs in = plain_inputs(8, 9 * kMiB, 2'000'000);
  for (std::uint32_t i = 0; i < 4; ++i)
    in.objects.push_back({i + 1, 4 * kMiB, 0, 8, true, false, {2 * i, 2 * i + 1}, {2 * i + 1}, {}, false});
  in.peak_bytes = 16 * kMiB;
  return in;
}

// Small random steps: persistent objects and objects born in the step, random uses and writes
// (with dead_free, some of them overwrites, and now and then an object accessed undeclared),
// rates where either the charge or the slow tier's busy time can decide the step.
inline PlanInputs random_inputs(std::mt19937& rng, bool clean_out_free, bool dead_free = false) {
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
  // A persistent object touched undeclared stays where it is: on the fast tier now and then, while
  // those leave the plans half the budget.
  std::uint64_t staying_fast_bytes = 0;
  for (PlanObject& o : in.objects) {
    if (!o.persistent || !o.stays()) continue;
    const bool fast = pick(0, 1) == 0 && 2 * (staying_fast_bytes + o.bytes) <= in.fast_budget_bytes;
    o.tier = fast ? in.fast : in.slow;
    if (fast) staying_fast_bytes += o.bytes;
  }
  return in;
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

// A plan by hand over rotating_inputs with two late moves in: object 3's after layer 3 (behind
// object 2's move out; judged on layers 4-5) and object 4's after layer 5 (layers 6-7).
inline Plan judged_hand_plan(HandPlan& hand) {
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

}  // namespace tensortier::migrator
