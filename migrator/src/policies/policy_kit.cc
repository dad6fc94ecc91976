#include "policies/policy_kit.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace tensortier::migrator::policies {

std::uint64_t plannable_room(const PlanInputs& in) {
  return in.fast_budget_bytes > in.small_reserve_bytes ? in.fast_budget_bytes - in.small_reserve_bytes : 0;
}

std::uint64_t lowered_budget(const Plan& plan, const PlanInputs& in, std::uint64_t planned_bytes,
                             std::uint32_t attempt) {
  const std::uint64_t need =
      plan.places.fast_bytes + plan.places.unplaced_fast_bytes + in.small_reserve_bytes;
  const std::uint64_t over = need > in.fast_budget_bytes ? need - in.fast_budget_bytes : 0;
  const std::uint64_t cut = over + (attempt + 1) * (in.fast_budget_bytes / 100);
  return planned_bytes - std::min(planned_bytes, cut);
}

std::vector<std::size_t> birth_order(const PlanInputs& in) {
  std::vector<std::size_t> order(in.objects.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const PlanObject& x = in.objects[a];
    const PlanObject& y = in.objects[b];
    return std::tuple(!x.persistent, x.born, x.key) < std::tuple(!y.persistent, y.born, y.key);
  });
  return order;
}

void place(Plan& plan, const PlanObject& o, TierIndex tier) {
  (o.persistent ? plan.start : plan.birth)[o.key] = tier;
}

void sort_in_mover_order(std::vector<PlannedMove>& moves, TierIndex fast) {
  std::stable_sort(moves.begin(), moves.end(), [&](const PlannedMove& a, const PlannedMove& b) {
    const std::uint64_t x = a.after_layer == kStepStart ? 0 : std::uint64_t{a.after_layer} + 1;
    const std::uint64_t y = b.after_layer == kStepStart ? 0 : std::uint64_t{b.after_layer} + 1;
    return std::tuple(x, a.to == fast) < std::tuple(y, b.to == fast);
  });
}

Plan from_residency(const PlanInputs& in, std::string policy, const Residency& fast, bool know_uses) {
  Plan plan;
  plan.policy = std::move(policy);
  const std::uint32_t L = in.layers;
  for (std::size_t i = 0; i < in.objects.size(); ++i) {
    const PlanObject& o = in.objects[i];
    const auto window = residency_window(in, o);  // named, not bound: next_use captures `end`
    const std::uint32_t first = window.first, end = window.second;
    if (first >= end) {  // born and freed at one boundary, or born after the last layer
      place(plan, o, in.slow);
      continue;
    }
    place(plan, o, fast[i][first] ? in.fast : in.slow);
    auto next_use = [&](std::uint32_t b) -> std::uint32_t {
      auto it = std::lower_bound(o.uses.begin(), o.uses.end(), b);
      if (it != o.uses.end()) return *it;
      return o.persistent && !o.uses.empty() ? L + o.uses.front() : std::max(b, end);
    };
    for (std::uint32_t b = o.persistent ? 0 : first + 1; b < end; ++b) {
      const char before = fast[i][b == 0 ? L - 1 : b - 1];
      if (before == fast[i][b]) continue;
      PlannedMove m;
      m.key = o.key;
      m.bytes = o.bytes;
      m.after_layer = b == 0 ? L - 1 : b - 1;
      if (fast[i][b]) {
        m.to = in.fast;
        const std::uint32_t use = next_use(b);
        m.needed_by = b == 0 ? L + use : use;
        m.useful_until = kStepStart;
        if (know_uses && b != 0) {
          std::uint32_t stay = b;  // the fast run from b, within the step
          while (stay + 1 < end && fast[i][stay + 1]) ++stay;
          auto past = std::upper_bound(o.uses.begin(), o.uses.end(), stay);
          m.useful_until = past != o.uses.begin() && *(past - 1) >= use ? *(past - 1) : use;
        } else if (know_uses) {
          m.useful_until = m.needed_by;
        }
      } else {
        m.to = in.slow;
        m.needed_by = b == 0 ? L : b;
        m.useful_until = kStepStart;  // a move out makes room for moves in: never dropped as late
      }
      plan.moves.push_back(m);
    }
    if (o.persistent) plan.start[o.key] = fast[i][0] ? in.fast : in.slow;
  }
  sort_in_mover_order(plan.moves, in.fast);
  return plan;
}

// The exact model's residency moves each object in at the boundary of the use that needs it (the
// model has no time in it); a mover needs the layers before to copy it. Each move in is handed out
// up to `lead` boundaries earlier where the budget has room at every boundary it then holds the
// object, earliest moves first. A move reaching back to the object's previous stay joins it (no
// move out, no move in); one reaching its birth makes it born fast.
Residency lead_moves_in(const PlanInputs& in, Residency r, std::uint32_t lead) {
  const std::uint32_t L = in.layers;
  if (L == 0 || lead == 0) return r;
  const std::uint64_t room = plannable_room(in);
  std::vector<std::uint64_t> held(L, 0);
  struct In {
    std::uint32_t b;
    std::size_t i;
  };
  std::vector<In> ins;
  for (std::size_t i = 0; i < in.objects.size(); ++i) {
    const PlanObject& o = in.objects[i];
    const auto [first, end] = residency_window(in, o);
    for (std::uint32_t b = first; b < end; ++b) {
      if (r[i][b]) held[b] += o.bytes;
      const bool has_prev = o.persistent || b > first;
      if (has_prev && r[i][b] && !r[i][b == 0 ? L - 1 : b - 1]) ins.push_back({b, i});
    }
  }
  std::stable_sort(ins.begin(), ins.end(), [](const In& a, const In& b) { return a.b < b.b; });
  for (const In& m : ins) {
    const PlanObject& o = in.objects[m.i];
    const std::uint32_t first = residency_window(in, o).first;
    std::uint32_t b = m.b;
    for (std::uint32_t s = 0; s < lead; ++s) {
      if (!o.persistent && b == first) break;  // born fast now
      const std::uint32_t p = b == 0 ? L - 1 : b - 1;
      if (r[m.i][p]) break;  // joined its previous stay
      if (held[p] + o.bytes > room) break;
      r[m.i][p] = 1;
      held[p] += o.bytes;
      b = p;
    }
  }
  return r;
}

Residency residency_of(const Plan& plan, const PlanInputs& in) {
  const std::uint32_t L = in.layers;
  std::map<ObjectKey, std::vector<const PlannedMove*>> moves;  // by key, in the mover's order
  for (const PlannedMove& m : plan.moves) moves[m.key].push_back(&m);
  Residency r(in.objects.size(), std::vector<char>(L, 0));
  for (std::size_t i = 0; i < in.objects.size(); ++i) {
    const PlanObject& o = in.objects[i];
    const auto [first, end] = residency_window(in, o);
    if (first >= end) continue;
    const auto& where = o.persistent ? plan.start : plan.birth;
    auto at = where.find(o.key);
    TierIndex tier = at != where.end() ? at->second : in.slow;
    auto mine = moves.find(o.key);
    std::size_t next = 0;
    for (std::uint32_t b = first; b < end; ++b) {
      // Moves handed out after layer b - 1 (or before the step, for b = 0) are done at b.
      while (mine != moves.end() && next < mine->second.size()) {
        const PlannedMove& m = *mine->second[next];
        const std::uint32_t at_boundary = m.after_layer == kStepStart ? 0 : m.after_layer + 1;
        if (at_boundary > b) break;
        tier = m.to;
        ++next;
      }
      r[i][b] = tier == in.fast ? 1 : 0;
    }
  }
  return r;
}

}  // namespace tensortier::migrator::policies
