// Ready memory (places.cc): every plan's places replayed event by event against an independent
// occupancy map: no birth or move in finds its place held by another object (a birth, not even
// by one moving out at its boundary, unless the layout is eager), every arena holds
// what is placed in it, persistent objects end the step where they began it, and the layout fits
// the budget.
#include "tensortier/migrator/places.h"
#include "plan_test_util.h"
#include "policies/policy_kit.h"

namespace tensortier::migrator {
namespace {

// Occupants of the two arenas, replayed over a step.
class PlaceReplay {
 public:
  PlaceReplay(const Plan& plan, const PlanInputs& in) : plan_(plan), in_(in) {}

  // "" where the plan's places hold, else the first thing wrong.
  std::string run() {
    for (const PlanObject& o : in_.objects) by_key_[o.key] = &o;
    start_persistent();
    // At each boundary, births before the moves out handed out there have ended (their copies
    // take time): deaths, births, moves out, moves in.
    for (std::uint32_t b = 0; b <= in_.layers; ++b) {
      for (const PlanObject& o : in_.objects) {
        if (!o.persistent && o.freed == b) at_.erase(o.key);
      }
      // An eager layout (births_wait_for_outs): the births wait for b's moves out.
      if (plan_.places.births_wait_for_outs) moves_at(b, /*in=*/false);
      for (const PlanObject& o : in_.objects) {
        if (!o.persistent && o.born == b) born(o);
      }
      if (!plan_.places.births_wait_for_outs) moves_at(b, /*in=*/false);
      moves_at(b, /*in=*/true);
      if (!problem_.empty()) return problem_;
    }
    for (const auto& [key, where] : start_) {
      if (!at_.contains(key) || at_[key] != where)
        return fmt::format("persistent key {:#x} ends the step away from where it began it", key);
    }
    return problem_;
  }

 private:
  struct Where {
    TierIndex tier = 0;
    std::uint64_t offset = kNoPlace;  // kNoPlace: not in an arena
    bool operator==(const Where&) const = default;
  };

  // A persistent object begins the step where its last move leaves it.
  void start_persistent() {
    for (const PlanObject& o : in_.objects) {
      if (!o.persistent) continue;
      Where w{plan_.start.contains(o.key) ? plan_.start.at(o.key) : plan_.fast, kNoPlace};
      if (auto f = plan_.places.first.find(o.key); f != plan_.places.first.end()) w.offset = f->second;
      for (const PlannedMove& m : plan_.moves) {
        if (m.key == o.key && m.place != kNoPlace) w = Where{m.to, m.place};
      }
      take(o, w, "begins the step");
      start_[o.key] = w;
    }
  }
  void moves_at(std::uint32_t b, bool in) {
    for (const PlannedMove& m : plan_.moves) {
      const std::uint32_t mb = m.after_layer == kStepStart ? 0 : m.after_layer + 1;
      if (mb == b && (m.to == plan_.fast) == in) move(m);
    }
  }
  void born(const PlanObject& o) {
    const TierIndex tier = plan_.birth.contains(o.key) ? plan_.birth.at(o.key) : plan_.fast;
    auto f = plan_.places.first.find(o.key);
    take(o, Where{tier, f != plan_.places.first.end() ? f->second : kNoPlace}, "is born");
  }
  void move(const PlannedMove& m) {
    auto o = by_key_.find(m.key);
    if (o == by_key_.end() || !at_.contains(m.key)) return;  // not alive: the simulator's to say
    if (at_[m.key].tier == m.to && (m.place == kNoPlace || at_[m.key].offset == m.place)) return;
    if (m.place == kNoPlace && !placed(*o->second)) {
      at_[m.key] = Where{m.to, kNoPlace};  // no place: moved as without places
      return;
    }
    if (m.place == kNoPlace) {
      note(fmt::format("a move of key {:#x} after layer {} has no place", m.key, m.after_layer));
      return;
    }
    at_.erase(m.key);
    take(*o->second, Where{m.to, m.place}, fmt::format("moves after layer {}", m.after_layer));
  }
  // The object takes its place: it must fit its arena and overlap no other occupant.
  void take(const PlanObject& o, Where w, const std::string& when) {
    at_[o.key] = w;
    if (w.offset == kNoPlace) {
      if (w.tier == plan_.fast && placed(o))
        note(fmt::format("key {:#x} {} fast with no place", o.key, when));
      return;
    }
    const std::uint64_t size = w.tier == plan_.fast ? plan_.places.fast_bytes : plan_.places.home_bytes;
    if (w.offset % kPageBytes != 0 || w.offset + round_up(o.bytes, kPageBytes) > size)
      note(fmt::format("key {:#x} {} at offset {}, past its arena of {}", o.key, when, w.offset, size));
    for (const auto& [key, other] : at_) {
      if (key == o.key || other.tier != w.tier || other.offset == kNoPlace) continue;
      const std::uint64_t end = w.offset + round_up(o.bytes, kPageBytes);
      const std::uint64_t other_end = other.offset + round_up(by_key_.at(key)->bytes, kPageBytes);
      if (w.offset < other_end && other.offset < end)
        note(fmt::format("key {:#x} {} into a place key {:#x} holds", o.key, when, key));
    }
  }
  // Objects of one step, and persistent ones no host code touches unannounced, have places.
  bool placed(const PlanObject& o) const { return o.persistent ? !o.stays() : o.freed < in_.layers; }
  void note(std::string problem) {
    if (problem_.empty()) problem_ = std::move(problem);
  }

  const Plan& plan_;
  const PlanInputs& in_;
  std::map<ObjectKey, const PlanObject*> by_key_;
  std::map<ObjectKey, Where> at_, start_;
  std::string problem_;
};

const char* const kPlannedPolicies[] = {"fast-only", "first-touch", "reactive", "autoswap", "sentinel"};

TEST(Places, EveryPolicysPlaceHoldsAtEveryEvent) {
  std::mt19937 rng(7);
  int fitted = 0, tried = 0;
  for (int seed = 0; seed < 150; ++seed) {
    PlanInputs in = random_inputs(rng, seed % 2 == 0, seed % 3 == 0);
    in.ready_memory = true;
    for (const char* policy : kPlannedPolicies) {
      auto plan = make_plan(policy, in);
      ASSERT_TRUE(plan) << plan.status().message();
      ++tried;
      if (!plan->places.problem.empty()) continue;  // a budget the layout could not be brought under
      ++fitted;
      EXPECT_EQ(PlaceReplay(plan.value(), in).run(), "") << policy << " seed " << seed;
      EXPECT_GE(plan->places.fast_bytes, plan->places.fast_max_live_bytes) << policy;
      EXPECT_LE(plan->places.fast_bytes + plan->places.unplaced_fast_bytes + in.small_reserve_bytes,
                in.fast_budget_bytes)
          << policy << " seed " << seed;
    }
  }
  EXPECT_GT(fitted, tried * 3 / 4) << "layouts that fit the budget, of plans made";
}

TEST(Places, TheOracleAndHandMadeStepsHoldToo) {
  for (PlanInputs in : {chain_inputs(8 * kMiB), chain_inputs(12 * kMiB), rotating_inputs()}) {
    in.ready_memory = true;
    in.oracle_time_limit_s = 2;
    for (const char* policy : {"sentinel", "autoswap", "oracle"}) {
      auto plan = make_plan(policy, in);
      ASSERT_TRUE(plan);
      EXPECT_EQ(plan->places.problem, "") << policy;
      EXPECT_EQ(PlaceReplay(plan.value(), in).run(), "") << policy;
    }
  }
}

// The rotating step: two of four 4 MiB objects fit; each move in reuses the place of the move out
// at the same boundary, so the arena is the two slots' 8 MiB and every moving object has a home.
TEST(Places, AMoveInTakesThePlaceItsPredecessorLeavesAtTheSameBoundary) {
  HandPlan hand;
  Plan plan = judged_hand_plan(hand);
  plan.fast_budget_bytes = hand.in.fast_budget_bytes;
  EXPECT_EQ(lay_out_places(plan, hand.in), "");
  EXPECT_EQ(plan.places.fast_bytes, 8 * kMiB);
  EXPECT_EQ(plan.places.homes, 4U);
  EXPECT_EQ(PlaceReplay(plan, hand.in).run(), "");
  for (const PlannedMove& m : plan.moves) EXPECT_NE(m.place, kNoPlace) << m.key << " after " << m.after_layer;
}

// Room for one 4 MiB object: A, used by layer 0, moves out at boundary 1, where B is born. Laid
// out at the boundary's clock they need 8 MiB (B cannot take A's place before A's copy ends); the
// eager layout gives B A's place, and B waits for A's copy (4 MiB at 10 GB/s).
TEST(Places, AnEagerLayoutLetsABirthTakeThePlaceOfAMoveOutAndWaitForItsCopy) {
  PlanInputs in = plain_inputs(3, 4 * kMiB);
  in.ready_memory = true;
  in.objects.push_back({1, 4 * kMiB, 0, 2, false, false, {0}, {0}, {}, false});  // A
  in.objects.push_back({2, 4 * kMiB, 1, 2, false, false, {1}, {1}, {}, false});  // B
  in.peak_bytes = 8 * kMiB;
  const Residency r = {{1, 0, 0}, {0, 1, 0}};
  Plan boundary = policies::from_residency(in, "hand", r, true);
  EXPECT_NE(lay_out_places(boundary, in), "") << "8 MiB at the boundary's clock";
  Plan plan = policies::from_residency(in, "hand", r, true);
  ASSERT_EQ(lay_out_places_timed(plan, in), "");
  EXPECT_TRUE(plan.places.births_wait_for_outs);
  EXPECT_EQ(plan.places.fast_bytes, 4 * kMiB);
  EXPECT_EQ(plan.places.first.at(2), plan.places.first.at(1)) << "B is born in A's place";
  EXPECT_EQ(PlaceReplay(plan, in).run(), "");
  ASSERT_EQ(simulate(plan, in), "");
  // The simulator's account at plain_inputs' 10 GB/s (no clock is read): 4 MiB copied out.
  EXPECT_NEAR(plan.room_wait_ns + plan.place_wait_ns, 4.0 * kMiB / 10, 1e3)
      << "B waits for A's copy out (for room, then for its place: one wait)";
}

// SmartPool: every object fast at a place, no moves, in an arena within 1% of the step's max-live
// (the offset planner's), wherever the budget holds the footprint; below it, the layout's problem
// says by how much, and the plan is not made again under less (it could not need less).
TEST(Places, SmartpoolPlacesEveryObjectInOneTightArenaAndMovesNothing) {
  std::mt19937 rng(11);
  int fitted = 0, refused = 0;
  for (int seed = 0; seed < 100; ++seed) {
    PlanInputs in = random_inputs(rng, seed % 2 == 0, seed % 3 == 0);
    in.ready_memory = true;
    if (seed % 2 == 1) in.fast_budget_bytes = 2 * (in.peak_bytes + in.small_reserve_bytes);  // room to spare
    auto plan = make_plan("smartpool", in);
    ASSERT_TRUE(plan) << plan.status().message();
    EXPECT_TRUE(plan->must_fit);
    EXPECT_TRUE(plan->moves.empty());
    EXPECT_EQ(plan->places.replans, 0u);
    for (const auto& [key, tier] : plan->birth) EXPECT_EQ(tier, in.fast);
    for (const PlanObject& o : in.objects) {  // objects that stay put stay where they are
      if (o.persistent) {
        EXPECT_EQ(plan->start.at(o.key), o.stays() ? o.tier : in.fast);
      }
    }
    if (!plan->places.problem.empty()) {
      ++refused;
      EXPECT_GT(plan->places.fast_bytes + plan->places.unplaced_fast_bytes + in.small_reserve_bytes,
                in.fast_budget_bytes)
          << "seed " << seed << ": refused what fits";
      continue;
    }
    ++fitted;
    EXPECT_EQ(PlaceReplay(plan.value(), in).run(), "") << "seed " << seed;
    EXPECT_LE(static_cast<double>(plan->places.fast_bytes),
              1.01 * static_cast<double>(plan->places.fast_max_live_bytes))
        << "seed " << seed;
  }
  EXPECT_GT(fitted, 10);
  EXPECT_GT(refused, 10);
}

// A layout over the budget is the policy's to fix: make_plan plans again under less.
TEST(Places, ALayoutOverTheBudgetIsMadeAgainUnderLess) {
  PlanInputs in = chain_inputs(8 * kMiB);
  in.ready_memory = true;
  auto plan = make_plan("sentinel", in);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->places.problem, "");
  EXPECT_LE(plan->places.fast_bytes, in.fast_budget_bytes);
  in.ready_memory = false;
  auto without = make_plan("sentinel", in);
  ASSERT_TRUE(without);
  EXPECT_TRUE(without->places.empty());
}

}  // namespace
}  // namespace tensortier::migrator
