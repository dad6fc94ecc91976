// The timed lower bound (timed_bound.h): for each boundary with a deficit, every window around
// it, the cheapest bytes to keep off the fast tier there.
#include "tensortier/migrator/timed_bound.h"

#include <algorithm>
#include <array>
#include <limits>
#include <vector>

#include <fmt/format.h>

namespace tensortier::migrator {
namespace {

struct Rates {
  double out_ns = 0, in_ns = 0;  // a move's channel time a byte, out and in
  double access_ns = 0;          // what a byte a layer reads or writes on the slow tier adds to it
};

// One object alive at boundary p, as the window sees it: the layer that last wrote it before p
// (none: its slow copy may be current) and its next reader at or after p (none: no read back).
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

// Bytes kept slow at p by what that forces into a window: nothing, the way out (written in it),
// the way back (read in it), or both.
using BytesBySide = std::array<std::uint64_t, 4>;

// One weighing, alpha x (moves' channel time) + (1 - alpha) x (layers' slow-access charge): each
// side's cost a byte by the cheaper of a move and a direct access, and the sides cheapest first.
struct Weighing {
  double alpha = 0;
  std::array<double, 4> cost{};
  std::array<int, 4> order{0, 1, 2, 3};
  Weighing(double a, const Rates& rates) : alpha(a) {
    const double out = std::min(alpha * rates.out_ns, (1 - alpha) * rates.access_ns);
    const double in = std::min(alpha * rates.in_ns, (1 - alpha) * rates.access_ns);
    cost = {0, out, in, out + in};
    std::ranges::sort(order, [&](int x, int y) { return cost[x] < cost[y]; });
  }
  // The least weighted work that keeping `deficit` of these bytes slow forces: cheapest first.
  double least(const BytesBySide& bytes, std::uint64_t deficit) const {
    double work = 0;
    for (int k : order) {
      const std::uint64_t take = std::min(deficit, bytes[k]);
      work += static_cast<double>(take) * cost[k];
      deficit -= take;
    }
    return work;
  }
};

constexpr int kAlphas = 16;  // alpha = 1/16 .. 15/16

}  // namespace

std::string TimedBound::describe() const {
  if (added_ns <= 0) return "the channel's forced work fits in the layers' time";
  if (tightened_ns >= added_ns && tightened_ns > std::max(program_ns, window_ns))
    return fmt::format(
        "the tightened channel program, integral at uses ({}); the linear one: {:.1f} ms, the worst window: "
        "{:.1f} ms",
        tightened, program_ns / 1e6, window_ns / 1e6);
  if (program_ns > window_ns)
    return fmt::format("the channel program over every boundary ({}); the worst window alone: {:.1f} ms",
                       program, window_ns / 1e6);
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
  std::vector<Weighing> weighings;
  for (int k = 1; k < kAlphas; ++k) weighings.emplace_back(static_cast<double>(k) / kAlphas, rates);
  std::vector<double> before(in.layers + 1, 0);  // layer time before each boundary
  for (std::uint32_t l = 0; l < in.layers; ++l)
    before[l + 1] = before[l] + static_cast<double>(in.layer_ns[l]);
  const std::uint64_t room = in.fast_budget_bytes - std::min(in.fast_budget_bytes, in.small_reserve_bytes);
  bool short_of_room = false;  // some boundary's live bytes pass the room
  for (std::uint32_t p = 0; p < in.layers; ++p) {
    std::vector<Candidate> cands = candidates_at(in, p);
    std::uint64_t live = 0;
    for (const Candidate& c : cands) live += c.bytes;
    if (live <= room) continue;
    short_of_room = true;
    // By when their way back falls in the window (never: last), so that a sweep of the window's
    // end moves each across once.
    std::ranges::sort(cands, {}, [](const Candidate& c) {
      return c.reader < 0 ? std::numeric_limits<std::int64_t>::max() : c.reader;
    });
    for (std::uint32_t s = 0; s <= p; ++s) {
      BytesBySide bytes{};
      for (const Candidate& c : cands) bytes[c.writer >= s ? 1 : 0] += c.bytes;
      std::size_t back = 0;  // the first candidate whose way back is not in [s, e) yet
      for (std::uint32_t e = std::max(p, s + 1); e <= in.layers; ++e) {
        for (; back < cands.size() && cands[back].reader >= 0 && cands[back].reader + 1 <= e; ++back) {
          const int out = cands[back].writer >= s ? 1 : 0;
          bytes[out] -= cands[back].bytes;
          bytes[out + 2] += cands[back].bytes;
        }
        const double layers = before[e] - before[s];
        for (const Weighing& w : weighings) {
          const double added = w.least(bytes, live - room) - w.alpha * layers;
          if (added > best.window_ns) {
            best.window_ns = added;
            best.first_layer = s;
            best.end_layer = e;
            best.peak_boundary = p;
            best.deficit_bytes = live - room;
            best.alpha = w.alpha;
            best.layers_ns = layers;
          }
        }
      }
    }
  }
  if (!short_of_room)  // everything fast and nothing moved is the program's solution: 0
    best.program = "not needed: every boundary's live bytes fit the room";
  else if (in.timed_program_s > 0)
    best.program_ns = channel_program_bound(in, in.timed_program_s, best.program);
  else
    best.program = "not solved (PlanInputs::timed_program_s is 0)";
  if (short_of_room && in.tightened_program_s > 0)
    best.tightened_ns = tightened_program_bound(in, in.tightened_program_s, best.tightened);
  else if (short_of_room)
    best.tightened = "not solved (PlanInputs::tightened_program_s is 0)";
  best.added_ns = std::max({best.window_ns, best.program_ns, best.tightened_ns});
  return best;
}

}  // namespace tensortier::migrator
