// Ready memory for a plan (issue 36): every fast stay of a planned object gets an offset in one
// fast-tier arena, and every object that moves gets a home in one slow-tier arena, so a move is a
// copy between two mapped ranges and a birth goes straight to its place; the kernel maps nothing
// in a steady-state step. Offsets come from the offset planner over a time axis of three ticks a
// boundary b, in the order the runtime meets them (a stay holds its place over [start, end)):
//
//   3b + 1   deaths at b have let their places go; births at b take theirs (a program frees
//            what it is done with, then allocates)
//   3b + 2   the moves out handed out at b have let their places go (their copies take time: a
//            birth in such a place would wait for one); the moves in handed out at b take theirs
//            (after b's outs: one mover, outs first)
//
// Where the runtime meets them otherwise, the allocator keeps them apart: a birth waits (bounded)
// for a place's occupant on its way out, or falls back; a move in waits (bounded) for it, or fails
// and the object stays where it was. A persistent object fast at the step's end keeps one place across the
// step's end (fixed first). Objects born in one step and alive in another (neither persistent nor of one
// step) get no place: they are allocated and moved as without places, beside the arena.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "tensortier/migrator/plan.h"

namespace tensortier::migrator {

// Lays `plan` out (Plan::places, PlannedMove::place); a page-granular plan gets none. Returns
// Plan::places.problem: "" where the arena and the objects without a place fit the budget beside
// the small objects' reserve, else by how much they do not.
std::string lay_out_places(Plan& plan, const PlanInputs& inputs);

// The same, played (simulate()); then, where it does not fit or is not valid, laid out eager: a
// stay that a move out at boundary b ends lets its place go to b's births, which wait for the
// copy (PlacesPlan::births_wait_for_outs: the room a move out frees as the channel program counts
// it, at the price of the wait), kept where that fits and is valid; where the first is valid,
// laid out again timed: each such stay holds its place until the simulator found the copy done
// (PlannedMove::done_by), so that no birth waits for it, kept where it fits and is predicted
// cheaper. The plan's predictions are filled where it is valid.
std::string lay_out_places_timed(Plan& plan, const PlanInputs& inputs);

}  // namespace tensortier::migrator
