#include "tensortier/migrator/residency_model.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "linear_program.h"

namespace tensortier::migrator {
namespace {

// Its uses within that window (a use outside it finds no object, as in simulate()).
std::vector<std::uint32_t> uses_in_window(const PlanInputs& in, const PlanObject& o) {
  const auto [first, end] = residency_window(in, o);
  std::vector<std::uint32_t> uses;
  for (std::uint32_t t : o.uses)
    if (t >= first && t < end) uses.push_back(t);
  return uses;
}

bool writes_at(const PlanObject& o, std::uint32_t t) {
  return std::binary_search(o.writes.begin(), o.writes.end(), t);
}

// The mover's CPU time the layers lose to copying `in_bytes` in and `out_bytes` out.
double mover_cpu_ns_of(const PlanInputs& in, double in_bytes, double out_bytes) {
  return (in_bytes + out_bytes) * in.mover_cpu_ns_per_byte * in.mover_steals_compute;
}

// The cost of a step with S slow-access bytes, `in_bytes` moved in and `out_bytes` moved out with
// a copy: the lower bound of residency_model.h, in ns added to the compute.
double bound_of(const PlanInputs& in, double slow_bytes, double in_bytes, double out_bytes) {
  double compute = 0;
  for (std::uint64_t ns : in.layer_ns) compute += static_cast<double>(ns);
  const double with_charge = compute + slow_bytes * in.slow_access_ns_per_byte;
  const double slow_busy =
      slow_bytes * in.slow_traffic_ns_per_byte() + in_bytes / in.move_in_gbps + out_bytes / in.move_out_gbps;
  return std::max(with_charge, slow_busy) - compute + mover_cpu_ns_of(in, in_bytes, out_bytes);
}

}  // namespace

std::pair<std::uint32_t, std::uint32_t> residency_window(const PlanInputs& in, const PlanObject& o) {
  if (o.persistent) return {0, in.layers};
  return {o.born, std::min(o.freed, in.layers)};
}

double residency_cost_ns(const PlanInputs& in, const Residency& fast) {
  return residency_cost(in, fast).extra_ns;
}

ResidencyCost residency_cost(const PlanInputs& in, const Residency& fast) {
  const std::uint32_t L = in.layers;
  double slow_bytes = 0, in_bytes = 0, out_bytes = 0;
  for (std::size_t i = 0; i < in.objects.size() && i < fast.size(); ++i) {
    const PlanObject& o = in.objects[i];
    const auto [first, end] = residency_window(in, o);
    if (first >= end) continue;
    const auto& r = fast[i];
    const auto b_bytes = static_cast<double>(o.bytes);
    for (std::uint32_t t : uses_in_window(in, o))
      if (!r[t]) slow_bytes += b_bytes;
    // Moves and cleanliness as simulate() plays them; a persistent object's cycle is played twice
    // and its second lap counted (the first sets up the state a step starts with).
    const int laps = o.persistent ? 2 : 1;
    bool clean = false;
    for (int lap = 0; lap < laps; ++lap) {
      for (std::uint32_t b = first; b < end; ++b) {
        const bool has_prev = o.persistent ? (lap > 0 || b > 0) : b > first;
        if (has_prev) {
          const bool before = r[b == 0 ? L - 1 : b - 1] != 0;
          const bool now = r[b] != 0;
          // A change of tier here moves bytes that are dead: no copy.
          const bool dead = before != now && in.dead_moves_free && bytes_dead_at(in, o, b);
          if (!before && now) {
            if (lap == laps - 1 && !dead) in_bytes += b_bytes;
            clean = in.clean_moves_out_free && !dead;
          } else if (before && !now) {
            if (lap == laps - 1 && !clean && !dead) out_bytes += b_bytes;
            clean = false;
          }
        }
        if (writes_at(o, b)) clean = false;
      }
    }
  }
  return {slow_bytes, in_bytes, out_bytes, bound_of(in, slow_bytes, in_bytes, out_bytes),
          mover_cpu_ns_of(in, in_bytes, out_bytes)};
}

namespace {

// The exact model as a mixed-integer program for CBC, built in phases:
//
//   add_object(i)   per object: y[k] fast at its k-th use, gap[k] fast through the gap after it,
//                   pre fast from birth to its first use; the MiB its moves copy in and out
//   add_budget()    at every boundary the fast columns' MiB within the room
//   add_objective() T >= the slow accesses' charge, T >= the slow tier's busy time - compute;
//                   minimize T + the mover's CPU
//   solve()         CBC within the time limit; the residency read back per boundary
//
// Units: MiB and ms, so that coefficients are near 1.
class ResidencyProgram {
 public:
  explicit ResidencyProgram(const PlanInputs& in);
  ResidencySolution solve(double time_limit_s);

 private:
  static constexpr double kMiB = 1024.0 * 1024.0;
  struct Vars {
    std::vector<std::uint32_t> uses;
    std::vector<int> y, gap;
    int pre = -1;
  };
  int col(double lb, double ub, bool integer) { return lp_.column(lb, ub, 0, integer); }
  void row(Expr e, char sense, double rhs) { lp_.row(std::move(e), sense, rhs); }
  void add_object(std::size_t i);
  void add_gaps(const PlanObject& o, Vars& v, std::vector<Expr>& mi, std::vector<Expr>& mo);
  void add_copies_out_clean(const PlanObject& o, const Vars& v, const std::vector<Expr>& mi,
                            const std::vector<Expr>& mo, double mib);
  void add_budget();
  void add_objective();
  void read_solution(const double* x, ResidencySolution& sol) const;
  // Calls visit(t, column) for each boundary t of object i's life: the column that says whether
  // it is fast there (its use's, or the gap's it lies in; -1: none, it is slow).
  template <typename Visit>
  void for_each_boundary(std::size_t i, Visit&& visit) const;

  const PlanInputs& in_;
  LinearProgram lp_;
  std::vector<Vars> vars_;
  Expr slow_fast_;  // sum of MiB x y: the slow-access MiB a plan avoids
  double slow_total_ = 0;
  Expr moved_in_, moved_out_;  // MiB copied in / out
};

ResidencyProgram::ResidencyProgram(const PlanInputs& in) : in_(in), vars_(in.objects.size()) {
  for (std::size_t i = 0; i < in.objects.size(); ++i) add_object(i);
  add_budget();
  add_objective();
}

void ResidencyProgram::add_object(std::size_t i) {
  const PlanObject& o = in_.objects[i];
  const auto [first, end] = residency_window(in_, o);
  Vars& v = vars_[i];
  v.uses = first < end ? uses_in_window(in_, o) : std::vector<std::uint32_t>{};
  const std::size_t m = v.uses.size();
  if (m == 0) return;  // no layer declares it: slow costs nothing
  const double mib = static_cast<double>(o.bytes) / kMiB;
  for (std::size_t k = 0; k < m; ++k) {
    v.y.push_back(col(0, 1, true));
    slow_fast_.add(v.y.back(), mib);
    slow_total_ += mib;
  }
  std::vector<Expr> mi(m), mo(m);  // moves in (before use k) and out (after use k)
  add_gaps(o, v, mi, mo);
  if (!o.persistent && first < v.uses[0]) {  // born before its first use: born fast, or moved in
    v.pre = col(0, 1, true);
    row(Expr{}.add(v.pre, 1).add(v.y[0], -1), 'L', 0);
    mi[0].add(v.y[0], 1).add(v.pre, -1);
  }  // else born at its first use, where the plan wants it: no move
  // A move whose bytes are dead copies nothing: in before a use that overwrites.
  for (std::size_t k = 0; k < m; ++k)
    if (!(in_.dead_moves_free && bytes_dead_at(in_, o, v.uses[k]))) moved_in_.add(mi[k], mib);
  add_copies_out_clean(o, v, mi, mo, mib);
}

// gap[k]: fast through the gap after use k: to the next use, or for a persistent object's last
// use around the cycle to its first; for another object's last use, to its end.
void ResidencyProgram::add_gaps(const PlanObject& o, Vars& v, std::vector<Expr>& mi, std::vector<Expr>& mo) {
  const std::uint32_t L = in_.layers;
  const std::uint32_t end = residency_window(in_, o).second;
  const std::size_t m = v.uses.size();
  for (std::size_t k = 0; k < m; ++k) {
    const bool last = k + 1 == m;
    if (last && !o.persistent) {
      if (end > v.uses[k] + 1) {  // alive past its last use: out, or kept fast to its end
        v.gap.push_back(col(0, 1, true));
        row(Expr{}.add(v.gap[k], 1).add(v.y[k], -1), 'L', 0);
        mo[k].add(v.y[k], 1).add(v.gap[k], -1);
      } else {
        v.gap.push_back(-1);  // freed at once: no move
      }
      break;
    }
    const std::size_t next = last ? 0 : k + 1;
    const bool empty = last ? (v.uses[k] == L - 1 && v.uses[0] == 0) : v.uses[next] == v.uses[k] + 1;
    const int g = col(0, 1, true);
    v.gap.push_back(g);
    row(Expr{}.add(g, 1).add(v.y[k], -1), 'L', 0);
    row(Expr{}.add(g, 1).add(v.y[next], -1), 'L', 0);
    // No boundary between the two uses to be slow at: fast at both means it stays.
    if (empty) row(Expr{}.add(g, 1).add(v.y[k], -1).add(v.y[next], -1), 'G', -1);
    mo[k].add(v.y[k], 1).add(g, -1);
    mi[next].add(v.y[next], 1).add(g, -1);
  }
}

// The MiB moves out copy: none where the bytes are dead (the next use overwrites, or none comes),
// and, where clean moves out are free, only for a move out after a write since the move in.
void ResidencyProgram::add_copies_out_clean(const PlanObject& o, const Vars& v, const std::vector<Expr>& mi,
                                            const std::vector<Expr>& mo, double mib) {
  const std::size_t m = v.uses.size();
  auto dead_out = [&](std::size_t k) { return in_.dead_moves_free && bytes_dead_at(in_, o, v.uses[k] + 1); };
  if (!in_.clean_moves_out_free) {
    for (std::size_t k = 0; k < m; ++k)
      if (!dead_out(k)) moved_out_.add(mo[k], mib);
    return;
  }
  // Clean after use k: moved in since the last write and not written at use k.
  std::vector<int> c(m);
  for (std::size_t k = 0; k < m; ++k) c[k] = col(0, writes_at(o, v.uses[k]) ? 0 : 1, false);
  for (std::size_t k = 0; k < m; ++k) {
    row(Expr{}.add(c[k], 1).add(v.y[k], -1), 'L', 0);
    Expr carry;  // c[k] <= c[before] + mi[k]
    carry.add(c[k], 1).add(mi[k], -1);
    if (k > 0) {
      carry.add(c[k - 1], -1);
    } else if (o.persistent) {
      carry.add(c[m - 1], -1);
    }
    row(std::move(carry), 'L', 0);
    if (mo[k].terms.empty() || dead_out(k)) continue;
    const int dirty = col(0, 1, false);  // a move out that copies: dirty >= mo[k] - c[k]
    row(Expr{}.add(dirty, 1).add(mo[k], -1).add(c[k], 1), 'G', 0);
    moved_out_.add(dirty, mib);
  }
}

template <typename Visit>
void ResidencyProgram::for_each_boundary(std::size_t i, Visit&& visit) const {
  const Vars& v = vars_[i];
  if (v.uses.empty()) return;
  const PlanObject& o = in_.objects[i];
  const auto [first, end] = residency_window(in_, o);
  std::size_t k = 0;  // the first use at or after t
  for (std::uint32_t t = first; t < end; ++t) {
    while (k < v.uses.size() && v.uses[k] < t) ++k;
    int c = -1;
    if (k < v.uses.size() && v.uses[k] == t) {
      c = v.y[k];
    } else if (k == 0) {
      c = o.persistent ? v.gap.back() : v.pre;  // before the first use
    } else {
      c = v.gap[k - 1];  // after use k - 1 (for a persistent object's last: around the cycle)
    }
    visit(t, c);
  }
}

// The budget at every boundary, less the small-object reserve. With ready memory, also at each
// boundary's births: an object moving out there keeps its place until its move ends, after the
// births (places.h), so what was fast before the boundary and the boundary's fast births fit
// together; a layout of the stays needs at least that (its max-live).
void ResidencyProgram::add_budget() {
  const double room_mib = static_cast<double>(in_.fast_budget_bytes > in_.small_reserve_bytes
                                                  ? in_.fast_budget_bytes - in_.small_reserve_bytes
                                                  : 0) /
                          kMiB;
  const std::uint32_t L = in_.layers;
  std::vector<Expr> at(L), births(L);
  std::vector<int> column(L, -1);
  for (std::size_t i = 0; i < in_.objects.size(); ++i) {
    const PlanObject& o = in_.objects[i];
    const double mib = static_cast<double>(o.bytes) / kMiB;
    std::ranges::fill(column, -1);
    for_each_boundary(i, [&](std::uint32_t t, int c) {
      at[t].add(c, mib);
      column[t] = c;
    });
    if (!in_.ready_memory) continue;
    const auto [first, end] = residency_window(in_, o);
    for (std::uint32_t t = first; t < end; ++t) {
      const bool born_here = !o.persistent && t == first;
      births[t].add(born_here ? column[t] : column[t == 0 ? L - 1 : t - 1], mib);
    }
  }
  for (std::uint32_t t = 0; t < L; ++t) {
    if (!at[t].terms.empty()) row(std::move(at[t]), 'L', room_mib);
    if (!births[t].terms.empty()) row(std::move(births[t]), 'L', room_mib);
  }
}

// T (ms added) >= the slow accesses' charge, and >= the slow tier's busy time less the compute;
// the objective is T plus the mover's CPU the layers lose.
void ResidencyProgram::add_objective() {
  const double charge_ms = in_.slow_access_ns_per_byte * kMiB / 1e6;  // per MiB
  const double traffic_ms = in_.slow_traffic_ns_per_byte() * kMiB / 1e6;
  const double in_ms = kMiB / in_.move_in_gbps / 1e6;
  const double out_ms = kMiB / in_.move_out_gbps / 1e6;
  const double cpu_ms = in_.mover_cpu_ns_per_byte * in_.mover_steals_compute * kMiB / 1e6;
  double compute_ms = 0;
  for (std::uint64_t ns : in_.layer_ns) compute_ms += static_cast<double>(ns) / 1e6;
  const int T = lp_.column(0, 1e12, 1);
  row(Expr{}.add(T, 1).add(slow_fast_, charge_ms), 'G', charge_ms * slow_total_);
  row(Expr{}.add(T, 1).add(slow_fast_, traffic_ms).add(moved_in_, -in_ms).add(moved_out_, -out_ms), 'G',
      traffic_ms * slow_total_ - compute_ms);
  for (const auto& [c, coef] : moved_in_.terms) lp_.add_objective(c, coef * cpu_ms);
  for (const auto& [c, coef] : moved_out_.terms) lp_.add_objective(c, coef * cpu_ms);
}

ResidencySolution ResidencyProgram::solve(double time_limit_s) {
  ResidencySolution sol;
  sol.fast.assign(in_.objects.size(), std::vector<char>(in_.layers, 0));
  sol.binaries = lp_.integers();
  sol.rows = lp_.rows();
  const LinearProgram::Solved solved = lp_.solve(time_limit_s);
  sol.seconds = solved.seconds;
  sol.optimal = solved.optimal;
  if (solved.best_possible > -1e20) sol.bound_ns = std::max(0.0, solved.best_possible * 1e6);
  if (solved.x.empty()) {
    sol.status = solved.infeasible ? "infeasible: the budget cannot hold what must be fast"
                                   : fmt::format("no solution within {:.1f} s", time_limit_s);
    return sol;
  }
  const double* x = solved.x.data();
  read_solution(x, sol);
  if (sol.optimal) sol.bound_ns = std::max(0.0, solved.objective * 1e6);
  const double gap = sol.cost_ns > 0 ? (sol.cost_ns - sol.bound_ns) / sol.cost_ns : 0.0;
  sol.status = fmt::format(
      "{}; its residency reads {:.0f} MiB on the slow tier, copies {:.0f} MiB in and {:.0f} MiB out, "
      "and adds {:.1f} ms, {:.1f} ms of it the mover's CPU taken from the layers",
      sol.optimal ? "optimal" : fmt::format("time limit, gap {:.1f}%", 100.0 * gap),
      sol.parts.slow_access_bytes / kMiB, sol.parts.in_bytes / kMiB, sol.parts.out_bytes / kMiB,
      sol.cost_ns / 1e6, sol.parts.mover_cpu_ns / 1e6);
  return sol;
}

void ResidencyProgram::read_solution(const double* x, ResidencySolution& sol) const {
  for (std::size_t i = 0; i < in_.objects.size(); ++i) {
    for_each_boundary(i, [&](std::uint32_t t, int c) { sol.fast[i][t] = c >= 0 && x[c] > 0.5 ? 1 : 0; });
  }
  sol.solved = true;
  sol.parts = residency_cost(in_, sol.fast);
  sol.cost_ns = sol.parts.extra_ns;
}

}  // namespace

ResidencySolution solve_residency(const PlanInputs& in, double time_limit_s) {
  if (in.layers == 0 || in.move_in_gbps <= 0 || in.move_out_gbps <= 0) {
    ResidencySolution sol;
    sol.fast.assign(in.objects.size(), std::vector<char>(in.layers, 0));
    sol.status = "not run: no layers or no move bandwidth";
    return sol;
  }
  return ResidencyProgram(in).solve(time_limit_s);
}

}  // namespace tensortier::migrator
