// Edits of a made plan for the trial: moves in left out, late moves judged by measured time.
#include "tensortier/migrator/plan_edits.h"

#include <algorithm>
#include <unordered_map>
#include <vector>

#include "step_simulator.h"
#include "tensortier/migrator/places.h"

namespace tensortier::migrator {

std::optional<Plan> without_late_moves(const Plan& plan, const PlanInputs& in) {
  std::vector<std::size_t> late;
  for (std::size_t i = 0; i < plan.moves.size(); ++i) {
    const PlannedMove& m = plan.moves[i];
    if (m.to == in.fast && m.predicted_late && m.needed_by < in.layers) late.push_back(i);
  }
  return without_moves_in(plan, in, late);
}

std::optional<Plan> without_moves_in(const Plan& plan, const PlanInputs& inputs,
                                     std::span<const std::size_t> left_out) {
  PlanInputs segments;
  const PlanInputs& in = played_over(plan, inputs, segments);
  std::vector<bool> leave(plan.moves.size(), false);
  bool any = false;
  for (const std::size_t i : left_out) {
    if (i >= plan.moves.size() || plan.moves[i].to != in.fast) continue;
    leave[i] = true;
    any = true;
  }
  if (!any) return std::nullopt;
  Plan out = plan;
  out.moves.clear();
  // Where each object is as the plan's moves are taken in the mover's order.
  std::unordered_map<ObjectKey, TierIndex> at;
  for (const auto& [key, tier] : plan.start) at[key] = tier;
  for (const auto& [key, tier] : plan.birth) at[key] = tier;
  for (std::size_t i = 0; i < plan.moves.size(); ++i) {
    const PlannedMove& m = plan.moves[i];
    if (leave[i]) continue;
    auto it = at.find(m.key);
    if (it != at.end() && it->second == m.to) continue;  // already there: its move in was left out
    if (it != at.end()) it->second = m.to;
    out.moves.push_back(m);
  }
  // A persistent object left slow by a move in left out goes back in after the last layer, where
  // the plan had it fast, so that the next step starts it where the plan does.
  for (const PlanObject& o : in.objects) {
    auto s = plan.start.find(o.key);
    if (!o.persistent || s == plan.start.end() || at[o.key] == s->second) continue;
    PlannedMove m;
    m.key = o.key;
    m.to = s->second;
    m.after_layer = in.layers - 1;
    m.needed_by = in.layers;
    m.bytes = o.bytes;
    out.moves.push_back(m);
  }
  out.problem = StepSimulator(out, in).run();
  if (!out.problem.empty()) return std::nullopt;
  // Ready memory: the edited plan's stays are not the made plan's; its places are laid out anew.
  // Where they do not fit the budget, the runtime runs it with its moves in place (and says so).
  if (!plan.places.empty()) {
    const std::uint32_t replans = plan.places.replans;
    (void)lay_out_places(out, in);
    out.places.replans = replans;
  }
  return out;
}

std::vector<LateMoveVerdict> judge_late_moves(const Plan& plan, std::uint32_t layers,
                                              std::span<const double> with_layer_ns,
                                              std::span<const double> without_layer_ns) {
  std::vector<LateMoveVerdict> verdicts;
  if (layers == 0 || with_layer_ns.size() < layers || without_layer_ns.size() < layers) return verdicts;
  for (std::size_t i = 0; i < plan.moves.size(); ++i) {
    const PlannedMove& m = plan.moves[i];
    if (m.to != plan.fast || !m.predicted_late || m.needed_by >= layers) continue;
    LateMoveVerdict v;
    v.move = i;
    // Handed out after layer after_layer (or before the step, or at the end of the step before).
    v.first_layer = m.after_layer == kStepStart || m.after_layer >= m.needed_by ? 0 : m.after_layer + 1;
    v.last_layer = m.useful_until == kStepStart ? m.needed_by : std::min(m.useful_until, layers - 1);
    v.last_layer = std::max(v.last_layer, v.first_layer);
    for (std::uint32_t l = v.first_layer; l <= v.last_layer; ++l) {
      v.with_ns += with_layer_ns[l];
      v.without_ns += without_layer_ns[l];
    }
    verdicts.push_back(v);
  }
  return verdicts;
}

}  // namespace tensortier::migrator
