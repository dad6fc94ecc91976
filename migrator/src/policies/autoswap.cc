// AutoSwap (Zhang et al., arXiv 1903.06631) over the two tiers: with every object fast, find the
// boundary of the step's peak; the candidates are objects of 1 MiB or more alive there whose
// absence (the gap between the use before and the use after, across the step's end for
// persistent objects) spans it; rank them by a priority score and swap them out after the use
// before and back in before the use after (early enough for the move's time at the measured
// bandwidth, counted back over the layers' times), taking candidates until the peak fits the
// budget. Where the budget still cannot hold what is left fast, an object's fast stretches are
// admitted in birth order while they fit, the rest stays slow (on a GPU AutoSwap would fail
// there; here slow memory takes it).
#include "policies/policy_kit.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <vector>

namespace tensortier::migrator::policies {

namespace {

enum class SwapScore { kAbsenceTime, kAbsenceArea, kVote };

Plan autoswap_with(const PlanInputs& in, SwapScore score_kind) {
  constexpr std::uint64_t kMinCandidateBytes = 1 << 20;
  const std::uint32_t L = in.layers;
  const std::size_t n = in.objects.size();
  const std::uint64_t room = plannable_room(in);
  // Time at boundary b of an unrolled timeline of three steps, b in [-L, 2L].
  std::vector<double> at_ns(3 * static_cast<std::size_t>(L) + 1, 0);
  for (std::size_t b = 0; b + 1 < at_ns.size(); ++b)
    at_ns[b + 1] = at_ns[b] + static_cast<double>(in.layer_ns[b % L]);
  auto time_at = [&](std::int64_t b) { return at_ns[static_cast<std::size_t>(b + L)] - at_ns[L]; };
  auto alive_at = [&](const PlanObject& o, std::uint32_t b) {
    return o.persistent || (o.born <= b && b < o.freed);
  };
  // Everything fast: the peak boundary.
  std::vector<std::uint64_t> live(L, 0);
  for (const PlanObject& o : in.objects) {
    for (std::uint32_t b = 0; b < L; ++b) {
      if (alive_at(o, b)) live[b] += o.bytes;
    }
  }
  const std::uint32_t peak =
      static_cast<std::uint32_t>(std::max_element(live.begin(), live.end()) - live.begin());
  // Candidates: the absence around the peak, [out, in) in boundaries of an unrolled timeline
  // (persistent absences may start in the previous step or end in the next).
  struct Candidate {
    std::size_t object = 0;
    std::int64_t out = 0, in = 0;  // fast again from boundary `in`
    double absence_ns = 0;
    double score = 0;
  };
  std::vector<Candidate> candidates;
  for (std::size_t i = 0; i < n; ++i) {
    const PlanObject& o = in.objects[i];
    if (o.bytes < kMinCandidateBytes || !alive_at(o, peak) || o.uses.empty()) continue;
    auto after = std::lower_bound(o.uses.begin(), o.uses.end(), peak);  // first use at or after the peak
    std::int64_t before_use = 0, after_use = 0;
    if (after != o.uses.begin()) {
      before_use = *(after - 1);
    } else if (o.persistent) {
      before_use = static_cast<std::int64_t>(o.uses.back()) - L;
    } else {
      continue;  // not used before the peak: nothing to swap out
    }
    if (after != o.uses.end()) {
      after_use = *after;
    } else if (o.persistent) {
      after_use = static_cast<std::int64_t>(o.uses.front()) + L;
    } else {
      after_use = o.freed;  // no use left: out until it dies, never back in
    }
    if (after_use <= peak) continue;  // used by the layer at the peak
    const bool comes_back = o.persistent || after != o.uses.end();
    Candidate c;
    c.object = i;
    c.out = before_use + 1;
    c.in = after_use;
    if (comes_back) {  // back in early enough: the move's time counted back over the layers before the use
      const double move_ns = static_cast<double>(o.bytes) / in.move_in_gbps;
      while (c.in > c.out && time_at(after_use) - time_at(c.in) < move_ns) --c.in;
    }
    if (c.in <= peak || c.out > peak) continue;  // the swap would not free the peak
    c.absence_ns = time_at(after_use) - time_at(before_use + 1);
    candidates.push_back(c);
  }
  // Priority: absence time; absence time x size; or their vote (the sum of both ranks).
  std::vector<std::size_t> by_time(candidates.size()), by_area(candidates.size());
  for (std::size_t c = 0; c < candidates.size(); ++c) by_time[c] = by_area[c] = c;
  std::sort(by_time.begin(), by_time.end(), [&](std::size_t a, std::size_t b) {
    return candidates[a].absence_ns > candidates[b].absence_ns;
  });
  auto area = [&](const Candidate& c) {
    return c.absence_ns * static_cast<double>(in.objects[c.object].bytes);
  };
  std::sort(by_area.begin(), by_area.end(),
            [&](std::size_t a, std::size_t b) { return area(candidates[a]) > area(candidates[b]); });
  for (std::size_t r = 0; r < candidates.size(); ++r) {
    switch (score_kind) {
      case SwapScore::kAbsenceTime:
        candidates[by_time[r]].score = static_cast<double>(r);
        break;
      case SwapScore::kAbsenceArea:
        candidates[by_area[r]].score = static_cast<double>(r);
        break;
      case SwapScore::kVote:
        candidates[by_time[r]].score += static_cast<double>(r);
        candidates[by_area[r]].score += static_cast<double>(r);
        break;
    }
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return a.score < b.score; });
  // Wanted residency: fast through each object's life but for the absences chosen.
  Residency want(n, std::vector<char>(L, 0));
  for (std::size_t i = 0; i < n; ++i) {
    for (std::uint32_t b = 0; b < L; ++b) want[i][b] = alive_at(in.objects[i], b) ? 1 : 0;
  }
  std::uint64_t peak_fast = live[peak];
  for (const Candidate& c : candidates) {
    if (peak_fast <= room) break;
    for (std::int64_t b = c.out; b < c.in; ++b) want[c.object][static_cast<std::size_t>((b % L + L) % L)] = 0;
    // Other boundaries may now be the peak: keep taking candidates while any is over.
    std::fill(live.begin(), live.end(), 0);
    for (std::size_t i = 0; i < n; ++i) {
      for (std::uint32_t b = 0; b < L; ++b) live[b] += want[i][b] ? in.objects[i].bytes : 0;
    }
    peak_fast = *std::max_element(live.begin(), live.end());
  }
  // Admission within the budget: persistent objects first, then by birth; a fast stretch of an
  // object stays fast only if the budget holds it at every boundary of the stretch.
  std::vector<std::uint64_t> used(L, 0);
  Residency fast(n, std::vector<char>(L, 0));
  for (std::size_t i : birth_order(in)) {
    const PlanObject& o = in.objects[i];
    std::uint32_t b = 0;
    while (b < L) {
      if (!want[i][b]) {
        ++b;
        continue;
      }
      std::uint32_t e = b;
      while (e < L && want[i][e]) ++e;
      bool fits = true;
      for (std::uint32_t k = b; k < e && fits; ++k) fits = used[k] + o.bytes <= room;
      if (fits) {
        for (std::uint32_t k = b; k < e; ++k) {
          used[k] += o.bytes;
          fast[i][k] = 1;
        }
      }
      b = e;
    }
  }
  Plan plan = from_residency(in, "autoswap", fast, true);
  return plan;
}

}  // namespace

Plan autoswap(const PlanInputs& in) {
  constexpr SwapScore kScores[] = {SwapScore::kVote, SwapScore::kAbsenceTime, SwapScore::kAbsenceArea};
  return cheapest_of(in, std::size(kScores), 0, [&](std::size_t i) { return autoswap_with(in, kScores[i]); });
}

}  // namespace tensortier::migrator::policies
