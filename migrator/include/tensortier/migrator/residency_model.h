// The oracle's exact model: which objects are on the fast tier at each layer boundary, chosen by
// a mixed-integer program (COIN-OR CBC) so that a lower bound on the time simulate() adds to a
// step is least. It gives the oracle a bound (no valid plan predicts less: Plan::bound_extra_ns)
// and a residency it turns into a plan (policies/oracle.cc). The model, and why one variable per
// use and per gap suffices: migrator/README.md, "The exact model".
//
// Thread safety: pure functions (each call builds and frees its own solver model).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tensortier/migrator/plan.h"

namespace tensortier::migrator {

// Per object of PlanInputs::objects, per boundary b in [0, layers): whether it is on the fast tier
// at b (after b's moves, as layer b finds it). Only the boundaries of its life matter.
using Residency = std::vector<std::vector<char>>;

// The boundaries [first, end) of an object's life that a residency places it at: every boundary
// of the step for a persistent object, [born, min(freed, layers)) for another; first >= end: none.
std::pair<std::uint32_t, std::uint32_t> residency_window(const PlanInputs& in, const PlanObject& o);

// The model's cost of one residency (what the program minimises), in ns added to a step: moves
// are its changes, cleanliness is tracked as simulate() tracks it. Residencies that pass the
// budget at some boundary are costed all the same (the caller checks the budget).
double residency_cost_ns(const PlanInputs& in, const Residency& fast);

// The same cost with its parts: what the layers find on the slow tier and what is copied.
struct ResidencyCost {
  double slow_access_bytes = 0;  // declared bytes the layers find on the slow tier
  double in_bytes = 0;           // copied into the fast tier
  double out_bytes = 0;          // copied out of it (moves out of clean objects copy nothing)
  double extra_ns = 0;           // residency_cost_ns
  // Of extra_ns, the copies' CPU time the layers lose (PlanInputs::mover_steals_compute): what a
  // mover with a core of its own would not add.
  double mover_cpu_ns = 0;
};
ResidencyCost residency_cost(const PlanInputs& in, const Residency& fast);

struct ResidencySolution {
  bool solved = false;   // a residency was found (optimal or the best within the time limit)
  bool optimal = false;  // proven optimal
  Residency fast;        // valid where solved: one entry per object, `layers` boundaries each
  double cost_ns = 0;    // residency_cost_ns of `fast`
  ResidencyCost parts;   // residency_cost of `fast`
  double bound_ns = 0;   // no residency (and no valid plan) costs less; 0 where the solver gave none
  std::string status;    // what the solver did, for logs: "optimal", "time limit, gap 3.2%", ...
  int binaries = 0, rows = 0;
  double seconds = 0;  // the solver's wall time
};

// Solves the model within `time_limit_s` seconds. Never fails: where the solver finds nothing,
// `solved` is false and `status` says why.
ResidencySolution solve_residency(const PlanInputs& in, double time_limit_s);

}  // namespace tensortier::migrator
