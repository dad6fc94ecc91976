// StepSimulator: plays a plan over one step in time, as the executor and an emulated slow tier
// play it (simulate() in plan.h says what is modelled). One object per play; its phases:
//
//   index()                                   objects by key, births, deaths, users, moves
//   for each boundary t = 0 .. layers:
//     free_deaths(t)  place_births(t)  hand_out_moves(t)  seat_births(t)  check_budget(t)
//                     (seat_births: room, then places in ready memory)
//     run_layer(t)                            (not after the last boundary)
//   check_step_end()  fill_predictions()
//
// Three clocks: clock_ns_ (the layers), mover_free_ns_ (the one mover), slow_busy_ns_ (the slow
// tier, which moves and the layers' slow traffic share). Not thread-safe; internal to migrator/.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "tensortier/migrator/plan.h"

namespace tensortier::migrator {

class StepSimulator {
 public:
  // `inputs` must be those the plan is written for (its segments for a page-granular plan).
  StepSimulator(Plan& plan, const PlanInputs& inputs) : plan_(plan), in_(inputs) {}
  // Fills the plan's predictions; returns "" where it is valid, else its first problem.
  std::string run();

 private:
  struct Pending {  // a move in handed out and not yet done
    double start_ns = 0, end_ns = 0;
    PlannedMove* move = nullptr;
  };

  void reset_predictions();
  void mark_clean_at_start();
  void index();
  void free_deaths(std::uint32_t t);
  void place_births(std::uint32_t t);
  void hand_out_moves(std::uint32_t t);
  void hand_out(PlannedMove& m, const PlanObject& o, std::uint32_t t);
  void seat_births();
  double place_left_at(std::uint64_t offset, std::uint64_t bytes) const;
  void wait_for_places();
  void wait_for_room(std::uint64_t room);
  void refuse_moves_in(std::uint64_t room);
  void check_budget(std::uint32_t t);
  void run_layer(std::uint32_t t);
  void check_step_end();
  void fill_predictions();

  void note(std::string problem);
  void set_tier(const PlanObject& o, TierIndex t);
  std::uint64_t held_at(double at_ns);  // fast-tier bytes held at that time

  Plan& plan_;
  const PlanInputs& in_;
  std::string problem_;
  std::unordered_map<ObjectKey, const PlanObject*> by_key_;
  std::unordered_map<ObjectKey, TierIndex> tier_;  // objects that exist now
  std::uint64_t fast_ = 0;                         // their bytes on the fast tier, moves counted done
  std::unordered_map<ObjectKey, bool> clean_;  // on the fast tier with its slow pages kept, unwritten since
  std::multimap<std::uint32_t, PlannedMove*> moves_;  // boundary -> move
  std::multimap<std::uint32_t, const PlanObject*> births_, deaths_;
  std::vector<std::vector<const PlanObject*>> users_;  // layer -> objects it declares
  std::vector<const PlanObject*> born_fast_;           // this boundary's births on the fast tier
  double clock_ns_ = 0, mover_free_ns_ = 0, slow_busy_ns_ = 0, compute_ns_ = 0;
  std::unordered_map<ObjectKey, Pending> pending_;  // moves in not yet done, by key
  // Moves out handed out so far, by when they end: the room they leave on the fast tier is there
  // only then (fast_ counts every move as done at its hand-out).
  std::vector<std::pair<double, std::uint64_t>> outs_;  // (end, bytes)
  std::unordered_set<ObjectKey> refused_;               // objects whose move in the allocator would refuse
  // Ready memory: each fast object's offset in the fast arena, and places in it being left by
  // moves out, with when they end.
  struct Leaving {
    std::uint64_t offset = 0, bytes = 0;
    double end_ns = 0;
  };
  std::unordered_map<ObjectKey, std::uint64_t> fast_place_;
  std::vector<Leaving> leaving_;
  std::vector<double> boundary_ns_;                        // when each boundary began
  std::vector<std::pair<PlannedMove*, double>> out_ends_;  // moves out and when each ends
};

// The inputs `plan` is played over: `inputs`, or for a page-granular plan their segments, made
// in `segments`.
const PlanInputs& played_over(const Plan& plan, const PlanInputs& inputs, PlanInputs& segments);

}  // namespace tensortier::migrator
