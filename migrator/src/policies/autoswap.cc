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
#include <optional>
#include <vector>

namespace tensortier::migrator::policies {

namespace {

enum class SwapScore { kAbsenceTime, kAbsenceArea, kVote };

struct Candidate {  // an absence around the peak, in boundaries of an unrolled timeline
  std::size_t object = 0;
  std::int64_t out = 0, in = 0;  // out from boundary `out`, fast again from boundary `in`
  double absence_ns = 0;
  double score = 0;
};

// One AutoSwap plan for one priority score, in phases:
//
//   live bytes with every object fast -> the peak boundary
//   candidates()  absences that span the peak      rank()  by the score
//   swap_out()    candidates taken until the peak fits     admit()  within the budget
class SwapPlanner {
 public:
  SwapPlanner(const PlanInputs& in, SwapScore score_kind);
  Plan make();

 private:
  static constexpr std::uint64_t kMinCandidateBytes = 1 << 20;
  double time_at(std::int64_t b) const {
    return at_ns_[static_cast<std::size_t>(b + layers_)] - at_ns_[layers_];
  }
  bool alive_at(const PlanObject& o, std::uint32_t b) const {
    return o.persistent || (o.born <= b && b < o.freed);
  }
  void find_peak();
  std::optional<Candidate> candidate(std::size_t i) const;
  void rank(std::vector<Candidate>& candidates) const;
  Residency swap_out(const std::vector<Candidate>& candidates);
  Residency admit(const Residency& want) const;

  const PlanInputs& in_;
  const SwapScore score_kind_;
  const std::uint32_t layers_;
  const std::size_t n_;
  const std::uint64_t room_;
  std::vector<double> at_ns_;        // time at boundary b of three unrolled steps, b in [-L, 2L]
  std::vector<std::uint64_t> live_;  // bytes fast at each boundary
  std::uint32_t peak_ = 0;
};

SwapPlanner::SwapPlanner(const PlanInputs& in, SwapScore score_kind)
    : in_(in),
      score_kind_(score_kind),
      layers_(in.layers),
      n_(in.objects.size()),
      room_(plannable_room(in)),
      at_ns_(3 * static_cast<std::size_t>(layers_) + 1, 0),
      live_(layers_, 0) {
  for (std::size_t b = 0; b + 1 < at_ns_.size(); ++b)
    at_ns_[b + 1] = at_ns_[b] + static_cast<double>(in.layer_ns[b % layers_]);
}

Plan SwapPlanner::make() {
  find_peak();
  std::vector<Candidate> candidates;
  for (std::size_t i = 0; i < n_; ++i) {
    if (auto c = candidate(i)) candidates.push_back(*c);
  }
  rank(candidates);
  return from_residency(in_, "autoswap", admit(swap_out(candidates)), true);
}

// Everything fast: the peak boundary.
void SwapPlanner::find_peak() {
  for (const PlanObject& o : in_.objects) {
    for (std::uint32_t b = 0; b < layers_; ++b) {
      if (alive_at(o, b)) live_[b] += o.bytes;
    }
  }
  peak_ = static_cast<std::uint32_t>(std::max_element(live_.begin(), live_.end()) - live_.begin());
}

// Object i's absence around the peak, if it has one worth swapping: from after its use before the
// peak (persistent: possibly in the previous step) to its use after (possibly in the next step),
// back in early enough for the move's time at the measured bandwidth.
std::optional<Candidate> SwapPlanner::candidate(std::size_t i) const {
  const PlanObject& o = in_.objects[i];
  if (o.bytes < kMinCandidateBytes || !alive_at(o, peak_) || o.uses.empty()) return std::nullopt;
  auto after = std::lower_bound(o.uses.begin(), o.uses.end(), peak_);  // first use at or after the peak
  std::int64_t before_use = 0, after_use = 0;
  if (after != o.uses.begin()) {
    before_use = *(after - 1);
  } else if (o.persistent) {
    before_use = static_cast<std::int64_t>(o.uses.back()) - layers_;
  } else {
    return std::nullopt;  // not used before the peak: nothing to swap out
  }
  if (after != o.uses.end()) {
    after_use = *after;
  } else if (o.persistent) {
    after_use = static_cast<std::int64_t>(o.uses.front()) + layers_;
  } else {
    after_use = o.freed;  // no use left: out until it dies, never back in
  }
  if (after_use <= peak_) return std::nullopt;  // used by the layer at the peak
  Candidate c;
  c.object = i;
  c.out = before_use + 1;
  c.in = after_use;
  if (o.persistent || after != o.uses.end()) {  // comes back: the move's time counted back
    const double move_ns = static_cast<double>(o.bytes) / in_.move_in_gbps;
    while (c.in > c.out && time_at(after_use) - time_at(c.in) < move_ns) --c.in;
  }
  if (c.in <= peak_ || c.out > peak_) return std::nullopt;  // the swap would not free the peak
  c.absence_ns = time_at(after_use) - time_at(before_use + 1);
  return c;
}

// Priority: absence time; absence time x size; or their vote (the sum of both ranks).
void SwapPlanner::rank(std::vector<Candidate>& candidates) const {
  std::vector<std::size_t> by_time(candidates.size()), by_area(candidates.size());
  for (std::size_t c = 0; c < candidates.size(); ++c) by_time[c] = by_area[c] = c;
  std::sort(by_time.begin(), by_time.end(), [&](std::size_t a, std::size_t b) {
    return candidates[a].absence_ns > candidates[b].absence_ns;
  });
  auto area = [&](const Candidate& c) {
    return c.absence_ns * static_cast<double>(in_.objects[c.object].bytes);
  };
  std::sort(by_area.begin(), by_area.end(),
            [&](std::size_t a, std::size_t b) { return area(candidates[a]) > area(candidates[b]); });
  for (std::size_t r = 0; r < candidates.size(); ++r) {
    const auto rank = static_cast<double>(r);
    if (score_kind_ != SwapScore::kAbsenceArea) candidates[by_time[r]].score += rank;
    if (score_kind_ != SwapScore::kAbsenceTime) candidates[by_area[r]].score += rank;
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return a.score < b.score; });
}

// Wanted residency: fast through each object's life but for the absences chosen, taken in rank
// order while any boundary is over the room (another boundary may become the peak).
Residency SwapPlanner::swap_out(const std::vector<Candidate>& candidates) {
  Residency want(n_, std::vector<char>(layers_, 0));
  for (std::size_t i = 0; i < n_; ++i) {
    for (std::uint32_t b = 0; b < layers_; ++b) want[i][b] = alive_at(in_.objects[i], b) ? 1 : 0;
  }
  std::uint64_t peak_fast = live_[peak_];
  for (const Candidate& c : candidates) {
    if (peak_fast <= room_) break;
    for (std::int64_t b = c.out; b < c.in; ++b)
      want[c.object][static_cast<std::size_t>((b % layers_ + layers_) % layers_)] = 0;
    std::fill(live_.begin(), live_.end(), 0);
    for (std::size_t i = 0; i < n_; ++i) {
      for (std::uint32_t b = 0; b < layers_; ++b) live_[b] += want[i][b] ? in_.objects[i].bytes : 0;
    }
    peak_fast = *std::max_element(live_.begin(), live_.end());
  }
  return want;
}

// Admission within the budget: persistent objects first, then by birth; a fast stretch of an
// object stays fast only if the budget holds it at every boundary of the stretch.
Residency SwapPlanner::admit(const Residency& want) const {
  std::vector<std::uint64_t> used(layers_, 0);
  Residency fast(n_, std::vector<char>(layers_, 0));
  for (std::size_t i : birth_order(in_)) {
    const std::uint64_t bytes = in_.objects[i].bytes;
    for (std::uint32_t b = 0; b < layers_;) {
      if (!want[i][b]) {
        ++b;
        continue;
      }
      std::uint32_t e = b;
      while (e < layers_ && want[i][e]) ++e;
      bool fits = true;
      for (std::uint32_t k = b; k < e && fits; ++k) fits = used[k] + bytes <= room_;
      for (std::uint32_t k = b; k < e && fits; ++k) {
        used[k] += bytes;
        fast[i][k] = 1;
      }
      b = e;
    }
  }
  return fast;
}

Plan autoswap_with(const PlanInputs& in, SwapScore score_kind) {
  return SwapPlanner(in, score_kind).make();
}

}  // namespace

Plan autoswap(const PlanInputs& in) {
  constexpr SwapScore kScores[] = {SwapScore::kVote, SwapScore::kAbsenceTime, SwapScore::kAbsenceArea};
  return cheapest_of(in, std::size(kScores), 0, [&](std::size_t i) { return autoswap_with(in, kScores[i]); });
}

}  // namespace tensortier::migrator::policies
