// The timed lower bound (timed_bound.h): for each boundary with a deficit, every window around
// it, the cheapest bytes to keep off the fast tier there.
#include "tensortier/migrator/timed_bound.h"

#include <algorithm>
#include <array>
#include <vector>

#include <fmt/format.h>

namespace tensortier::migrator {
namespace {

// One object alive at boundary p, as the window sees it: the layer that last wrote it before p
// (none: its slow copy may be current) and its next reader at or after p (none: no read back).
struct Rates {
  double out_ns = 0, in_ns = 0;  // a move's channel time a byte, out and in
  double access_ns = 0;          // what a byte a layer reads or writes on the slow tier adds to it
};

struct Candidate {
  std::uint64_t bytes = 0;
  std::int64_t writer = -1;  // -1: none before p in the step
  std::int64_t reader = -1;  // -1: none (dead at p, or not read again in the step)
};

std::vector<Candidate> candidates_at(const PlanInputs& in, std::uint32_t p) {
  std::vector<Candidate> out;
  for (const PlanObject& o : in.objects) {
    if (!(o.persistent || (o.born <= p && p < o.freed))) continue;
    Candidate c{o.bytes, -1, -1};
    auto w = std::ranges::lower_bound(o.writes, p);  // writes before p: those before w
    if (w != o.writes.begin())
      c.writer = *std::prev(w);
    else if (!o.persistent && o.born < p)
      c.writer = o.born;  // its producer wrote it
    auto r = std::ranges::lower_bound(o.uses, p);
    if (r != o.uses.end() && !bytes_dead_at(in, o, p)) c.reader = *r;
    out.push_back(c);
  }
  return out;
}

// Bytes of the candidates by what keeping them slow at p forces into layers [s, e): nothing, the
// way out (written there), the way back (read there), or both.
std::array<std::uint64_t, 4> bytes_by_side(const std::vector<Candidate>& cands, std::uint32_t s,
                                           std::uint32_t e) {
  std::array<std::uint64_t, 4> bytes{};
  for (const Candidate& c : cands) {
    const bool out = c.writer >= static_cast<std::int64_t>(s);
    const bool in = c.reader >= 0 && c.reader + 1 <= static_cast<std::int64_t>(e);
    bytes[(out ? 1 : 0) + (in ? 2 : 0)] += c.bytes;
  }
  return bytes;
}

// The least  alpha x (moves' channel time) + (1 - alpha) x (layers' slow-access charge)  that
// keeping `deficit` bytes slow forces into the window: each side by the cheaper of a move and a
// direct access, the cheapest bytes first.
double least_weighted(const std::array<std::uint64_t, 4>& bytes, std::uint64_t deficit, double alpha,
                      const Rates& rates) {
  const double out = std::min(alpha * rates.out_ns, (1 - alpha) * rates.access_ns);
  const double in = std::min(alpha * rates.in_ns, (1 - alpha) * rates.access_ns);
  const std::array<double, 4> cost{0, out, in, out + in};
  std::array<int, 4> order{0, 1, 2, 3};
  std::ranges::sort(order, [&](int a, int b) { return cost[a] < cost[b]; });
  double work = 0;
  for (int k : order) {
    const std::uint64_t take = std::min(deficit, bytes[k]);
    work += static_cast<double>(take) * cost[k];
    deficit -= take;
  }
  return work;
}

constexpr int kAlphas = 16;  // alpha = 1/16 .. 15/16

}  // namespace

std::string TimedBound::describe() const {
  if (added_ns <= 0) return "the channel's forced work fits in the layers' time";
  return fmt::format(
      "layers {}-{} ({:.1f} ms): keeping {:.1f} MiB off the fast tier at boundary {} forces moves "
      "and slow accesses into them (weighed {:.2f} to {:.2f})",
      first_layer, end_layer - 1, layers_ns / 1e6, static_cast<double>(deficit_bytes) / (1 << 20),
      peak_boundary, alpha, 1 - alpha);
}

// In a window W the layers take layers(W) at least and the moves' channel time M must fit in W's
// duration, which the layers' slow-access charges C in it lengthen: added >= max(M - layers, C) >=
// alpha (M - layers) + (1 - alpha) C for every alpha in [0, 1]; minimised over which bytes are kept
// slow and how, then maximised over alpha (a few values) and windows.
TimedBound timed_bound(const PlanInputs& in) {
  TimedBound best;
  if (in.layers == 0) return best;
  const Rates rates{1.0 / in.move_out_gbps, 1.0 / in.move_in_gbps, in.slow_access_ns_per_byte};
  std::vector<double> before(in.layers + 1, 0);  // layer time before each boundary
  for (std::uint32_t l = 0; l < in.layers; ++l)
    before[l + 1] = before[l] + static_cast<double>(in.layer_ns[l]);
  const std::uint64_t room = in.fast_budget_bytes - std::min(in.fast_budget_bytes, in.small_reserve_bytes);
  for (std::uint32_t p = 0; p < in.layers; ++p) {
    const std::vector<Candidate> cands = candidates_at(in, p);
    std::uint64_t live = 0;
    for (const Candidate& c : cands) live += c.bytes;
    if (live <= room) continue;
    for (std::uint32_t s = 0; s <= p; ++s) {
      for (std::uint32_t e = std::max(p, s + 1); e <= in.layers; ++e) {
        const std::array<std::uint64_t, 4> bytes = bytes_by_side(cands, s, e);
        const double layers = before[e] - before[s];
        for (int k = 1; k < kAlphas; ++k) {
          const double alpha = static_cast<double>(k) / kAlphas;
          const double added = least_weighted(bytes, live - room, alpha, rates) - alpha * layers;
          if (added > best.added_ns) best = TimedBound{added, s, e, p, live - room, alpha, layers};
        }
      }
    }
  }
  return best;
}

}  // namespace tensortier::migrator
