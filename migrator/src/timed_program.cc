// The timed bound's channel program (timed_bound.h): a linear program over the step's layers in
// which the slow tier's channel is a resource in time. Its optimum is below every valid plan's
// added time, so it bounds them from below, tighter than the window argument where many
// boundaries are short of room at once.
//
//   per object i, per boundary t of its life:  s[t] in [0, 1]  its share on the slow tier there
//                                              d[t] >= 0       its share fast and written since
//                                                              its slow copy (clean moves out)
//   per layer l between t = l and t' = l + 1:  in[l], out[l] >= 0  its shares copied in and out
//                                              while layer l's interval runs
//   per layer l:  slack[l] >= 0  what the step waits beyond layer l's own time and charge
//
//     in[l]  >= s[t] - s[t']                    moving in copies (not where its bytes are dead)
//     out[l] >= s[t'] + d' - 1,  d[t'] >= d' - out[l],  d' = 1 - s[t] if layer l writes it, else d[t]
//                                               only its dirty fast share costs a copy out
//     moves' channel time in l <= layer l + charge(l) + slack[l]
//     moves' channel time in l of objects layer l uses <= slack[l]   (they move when it is over)
//     fast bytes at every boundary <= the room;  whole step: its time >= the channel's busy time
//     minimise  sum over l of (charge(l) + slack[l]) + the mover's CPU the layers lose
//
// A plan's own schedule is a solution (an object half copied counts half), so no valid plan is
// predicted to add less. Units: MiB and ms, so that coefficients are near 1.
//
// Tightened (issue 50): where a layer uses an object, no plan has it partly fast (a layer waits
// for a move of its object under way, and one not begun leaves it slow), except a page-granular
// plan, a whole number of its 2 MiB segments. So at each use the share is integral: the object's
// bytes slow are S n + r m, its segments' (S = kSegmentBytes, n whole, up to its full segments) and
// its remainder's (r < S, m 0 or 1); an object of one segment or less has s binary there. The
// program is then a mixed-integer one (CBC adds its own cuts, knapsack covers on the room rows
// among them); its best possible objective within the time limit is still below every plan's.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "linear_program.h"
#include "tensortier/migrator/residency_model.h"
#include "tensortier/migrator/timed_bound.h"
#include "timed_program.h"

namespace tensortier::migrator {
namespace {

class ChannelProgram {
 public:
  ChannelProgram(const PlanInputs& in, UseShares uses);
  ChannelSolution solve(double time_limit_s) const;

 private:
  static constexpr double kMiB = 1024.0 * 1024.0;
  void add_object(std::size_t i);
  void add_transition(const PlanObject& o, std::uint32_t l, std::uint32_t next, const std::vector<int>& s,
                      const std::vector<int>& d);
  void add_layers();
  void integral_share(int s, std::uint64_t bytes);

  const PlanInputs& in_;
  UseShares uses_;
  LinearProgram lp_;
  double charge_ms_ = 0, traffic_ms_ = 0, in_ms_ = 0, out_ms_ = 0, cpu_ms_ = 0;  // a MiB
  std::vector<Expr> room_;                                                       // per boundary: fast MiB
  std::vector<Expr> moves_;              // per layer: the moves' channel ms in its interval
  std::vector<Expr> used_;               // per layer: those of the objects it uses
  std::vector<Expr> charge_;             // per layer: its slow accesses' charge, ms
  Expr traffic_;                         // the slow accesses' channel ms over the step
  std::vector<std::vector<int>> share_;  // per object, per boundary: its s column (-1: none)
};

ChannelProgram::ChannelProgram(const PlanInputs& in, UseShares uses)
    : in_(in),
      uses_(uses),
      room_(in.layers),
      moves_(in.layers),
      used_(in.layers),
      charge_(in.layers),
      share_(in.objects.size()) {
  charge_ms_ = in.slow_access_ns_per_byte * kMiB / 1e6;
  traffic_ms_ = in.slow_traffic_ns_per_byte() * kMiB / 1e6;
  in_ms_ = kMiB / in.move_in_gbps / 1e6;
  out_ms_ = kMiB / in.move_out_gbps / 1e6;
  cpu_ms_ = in.mover_cpu_ns_per_byte * in.mover_steals_compute * kMiB / 1e6;
  for (std::size_t i = 0; i < in.objects.size(); ++i) add_object(i);
  add_layers();
}

void ChannelProgram::add_object(std::size_t i) {
  const PlanObject& o = in_.objects[i];
  const auto window = residency_window(in_, o);
  const std::uint32_t first = window.first, end = window.second;
  const bool declared = std::ranges::any_of(o.uses, [&](std::uint32_t t) { return t >= first && t < end; });
  if (first >= end || !declared) return;  // no layer finds it: slow costs nothing
  const double mib = static_cast<double>(o.bytes) / kMiB;
  std::vector<int> s(in_.layers, -1), d(in_.layers, -1);
  for (std::uint32_t t = first; t < end; ++t) {
    s[t] = lp_.column(0, 1);
    room_[t].add(s[t], -mib).constant += mib;
    if (in_.clean_moves_out_free) d[t] = lp_.column(0, 1);
  }
  share_[i] = s;
  for (std::uint32_t t : o.uses) {
    if (t < first || t >= end) continue;
    charge_[t].add(s[t], mib * charge_ms_);
    traffic_.add(s[t], mib * traffic_ms_);
    if (uses_ != UseShares::kFluid) integral_share(s[t], o.bytes);
  }
  // Layer l's interval takes boundary l to the next (a persistent object's last, around the cycle).
  const std::uint32_t last = o.persistent ? end : end - 1;
  for (std::uint32_t l = first; l < last; ++l) {
    const std::uint32_t next = l + 1 == in_.layers ? 0 : l + 1;
    if (o.stays()) {  // left where it is born
      lp_.row(Expr{}.add(s[next], 1).add(s[l], -1), 'E', 0);
      continue;
    }
    add_transition(o, l, next, s, d);
  }
}

// The share s of an object of `bytes` slow at a use: whole segments and the remainder (see above).
void ChannelProgram::integral_share(int s, std::uint64_t bytes) {
  const std::uint64_t full = bytes / kSegmentBytes, rest = bytes % kSegmentBytes;
  Expr e;
  e.add(s, static_cast<double>(bytes) / kMiB);
  if (full > 0)
    e.add(lp_.column(0, static_cast<double>(full), 0, true), -static_cast<double>(kSegmentBytes) / kMiB);
  if (rest > 0) e.add(lp_.column(0, 1, 0, true), -static_cast<double>(rest) / kMiB);
  lp_.row(std::move(e), 'E', 0);
}

// Layer l's interval takes the object from boundary l to `next`.
void ChannelProgram::add_transition(const PlanObject& o, std::uint32_t l, std::uint32_t next,
                                    const std::vector<int>& s, const std::vector<int>& d) {
  if (in_.dead_moves_free && bytes_dead_at(in_, o, next)) return;  // its bytes move with no copy
  const double mib = static_cast<double>(o.bytes) / kMiB;
  const int in = lp_.column(0, 1, mib * cpu_ms_);
  lp_.row(Expr{}.add(in, 1).add(s[l], -1).add(s[next], 1), 'G', 0);
  const int out = lp_.column(0, 1, mib * cpu_ms_);
  if (in_.clean_moves_out_free) {
    Expr dirty;  // its dirty fast share before the moves of l
    if (std::ranges::binary_search(o.writes, l)) {
      dirty.add(s[l], -1).constant = 1;
    } else {
      dirty.add(d[l], 1);
    }
    lp_.row(Expr{}.add(out, 1).add(s[next], -1).add(dirty, -1), 'G', -1);
    lp_.row(Expr{}.add(d[next], 1).add(dirty, -1).add(out, 1), 'G', 0);
  } else {
    lp_.row(Expr{}.add(out, 1).add(s[next], -1).add(s[l], 1), 'G', 0);
  }
  Expr work;
  work.add(in, mib * in_ms_).add(out, mib * out_ms_);
  moves_[l].add(work, 1);
  if (std::ranges::binary_search(o.uses, l)) used_[l].add(work, 1);
}

void ChannelProgram::add_layers() {
  const double room_mib =
      static_cast<double>(in_.fast_budget_bytes - std::min(in_.fast_budget_bytes, in_.small_reserve_bytes)) /
      kMiB;
  for (std::uint32_t t = 0; t < in_.layers; ++t)
    if (!room_[t].terms.empty()) lp_.row(std::move(room_[t]), 'L', room_mib);
  Expr step;  // the step's time beyond its layers' own
  double compute_ms = 0;
  for (std::uint32_t l = 0; l < in_.layers; ++l) {
    const double layer_ms = static_cast<double>(in_.layer_ns[l]) / 1e6;
    compute_ms += layer_ms;
    const int slack = lp_.column(0, 1e12, 1);
    for (const auto& [c, coef] : charge_[l].terms) lp_.add_objective(c, coef);
    step.add(slack, 1).add(charge_[l], 1);
    if (!moves_[l].terms.empty())
      lp_.row(Expr{}.add(moves_[l], 1).add(charge_[l], -1).add(slack, -1), 'L', layer_ms);
    if (!used_[l].terms.empty()) lp_.row(Expr{}.add(used_[l], 1).add(slack, -1), 'L', 0);
    step.add(moves_[l], -1);
  }
  lp_.row(step.add(traffic_, -1), 'G', -compute_ms);
}

ChannelSolution ChannelProgram::solve(double time_limit_s) const {
  ChannelSolution out;
  const LinearProgram::Solved solved = lp_.solve(time_limit_s);
  if (solved.infeasible) {
    out.status = "infeasible: the room cannot hold what must be fast";
    return out;
  }
  if (!solved.x.empty()) {
    out.solved = true;
    out.slow_share.resize(share_.size());
    for (std::size_t i = 0; i < share_.size(); ++i) {
      out.slow_share[i].assign(in_.layers, -1.0);
      for (std::size_t t = 0; t < share_[i].size(); ++t)
        if (share_[i][t] >= 0) out.slow_share[i][t] = solved.x[static_cast<std::size_t>(share_[i][t])];
    }
  }
  if (uses_ != UseShares::kFluid) {  // the search's best possible objective bounds the optimum, proven or not
    if (!std::isfinite(solved.best_possible)) {
      out.status = fmt::format("no bound within {:.1f} s", time_limit_s);
      return out;
    }
    out.status =
        fmt::format("{} columns ({} integer), {} rows, {} in {:.2f} s", lp_.columns(), lp_.integers(),
                    lp_.rows(), solved.optimal ? "optimal" : "its search's bound", solved.seconds);
    out.bound_ns = std::max(0.0, solved.best_possible * 1e6);
    return out;
  }
  if (!solved.optimal || solved.x.empty()) {
    out.status = fmt::format("not solved within {:.1f} s", time_limit_s);
    return out;
  }
  out.status =
      fmt::format("{} columns, {} rows, solved in {:.2f} s", lp_.columns(), lp_.rows(), solved.seconds);
  out.bound_ns = std::max(0.0, solved.objective * 1e6);
  return out;
}

}  // namespace

double channel_program_bound(const PlanInputs& in, double time_limit_s, std::string& status) {
  ChannelSolution solved = solve_channel_program(in, UseShares::kFluid, time_limit_s);
  status = std::move(solved.status);
  return solved.bound_ns;
}

double tightened_program_bound(const PlanInputs& in, double time_limit_s, std::string& status) {
  ChannelSolution solved = solve_channel_program(in, UseShares::kSegments, time_limit_s);
  status = std::move(solved.status);
  return solved.bound_ns;
}

ChannelSolution solve_channel_program(const PlanInputs& in, UseShares uses, double time_limit_s) {
  if (in.layers == 0 || in.move_in_gbps <= 0 || in.move_out_gbps <= 0) {
    ChannelSolution none;
    none.status = "not run: no layers or no move bandwidth";
    return none;
  }
  return ChannelProgram(in, uses).solve(time_limit_s);
}

}  // namespace tensortier::migrator
