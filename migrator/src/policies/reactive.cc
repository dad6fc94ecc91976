// Reactive (no knowledge of the future), as Linux's NUMA-balancing tiering and TPP work at object
// granularity: each object's access score decays by `decay` per layer and gains 1 per layer that
// uses it; a new object is born fast while there is room, else slow; after a layer, each slow
// object it used whose score reached `threshold` is promoted, making room by demoting the fast
// objects used least recently (not those the layer just used); when there is no such room it
// stays slow. The policy is played online over `kWarmSteps` repeats of the step (its state
// carried from step to step) and the last repeat is the plan: what it does in the steady state.
#include "policies/policy_kit.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <vector>

namespace tensortier::migrator::policies {

namespace {

Plan reactive_with(const PlanInputs& in, double decay, double threshold) {
  constexpr int kWarmSteps = 4;
  const std::uint32_t L = in.layers;
  const std::size_t n = in.objects.size();
  const std::uint64_t room = plannable_room(in);
  std::vector<std::vector<std::size_t>> users(L), births(L + 1), deaths(L + 1);
  for (std::size_t i = 0; i < n; ++i) {
    const PlanObject& o = in.objects[i];
    for (std::uint32_t l : o.uses) {
      if (l < L) users[l].push_back(i);
    }
    if (!o.persistent && o.born < L && o.freed > o.born) {
      births[o.born].push_back(i);
      deaths[std::min(o.freed, L)].push_back(i);
    }
  }
  std::vector<double> score(n, 0);
  std::vector<std::int64_t> last_access(n, -1), score_at(n, 0);  // in layers since the run began
  std::vector<char> alive(n, 0), fast(n, 0);
  std::uint64_t fast_bytes = 0;
  // Persistent objects start as first touch would leave them: fast while they fit, in key order.
  for (std::size_t i = 0; i < n; ++i) {
    const PlanObject& o = in.objects[i];
    if (!o.persistent) continue;
    alive[i] = 1;
    if (fast_bytes + o.bytes <= room) {
      fast[i] = 1;
      fast_bytes += o.bytes;
    }
  }
  Residency residency(n, std::vector<char>(L, 0));
  std::int64_t now = 0;  // layers run
  for (int step = 0; step < kWarmSteps; ++step) {
    const bool record = step + 1 == kWarmSteps;
    for (std::uint32_t b = 0; b < L; ++b, ++now) {
      for (std::size_t i : deaths[b]) {
        if (fast[i]) fast_bytes -= in.objects[i].bytes;
        alive[i] = fast[i] = 0;
      }
      // Born fast while there is room; an object's segments (in_segments lists them one after
      // the other) all on one tier, as the runtime places an object whole.
      for (std::size_t n_born = births[b].size(), at = 0; at < n_born;) {
        std::size_t end = at + 1;
        std::uint64_t object_bytes = in.objects[births[b][at]].bytes;
        const ObjectKey whole = whole_key(in.objects[births[b][at]].key);
        while (end < n_born && whole_key(in.objects[births[b][end]].key) == whole)
          object_bytes += in.objects[births[b][end++]].bytes;
        const bool fits = fast_bytes + object_bytes <= room;
        for (; at < end; ++at) {
          const std::size_t i = births[b][at];
          alive[i] = 1;
          score[i] = 0;
          score_at[i] = now;
          last_access[i] = now;
          fast[i] = fits ? 1 : 0;
        }
        if (fits) fast_bytes += object_bytes;
      }
      if (record) {
        for (std::size_t i = 0; i < n; ++i) residency[i][b] = fast[i];
      }
      // Layer b runs; then the policy reacts to what it saw.
      for (std::size_t i : users[b]) {
        score[i] = score[i] * std::pow(decay, static_cast<double>(now - score_at[i])) + 1.0;
        score_at[i] = now;
        last_access[i] = now;
      }
      // The least recently used fast objects, oldest first, listed once per layer where some
      // promotion needs room (those the layer used are not among them; one demoted leaves it).
      std::vector<std::pair<std::int64_t, std::size_t>> lru;
      std::size_t lru_next = 0;
      bool lru_listed = false;
      for (std::size_t i : users[b]) {
        const PlanObject& o = in.objects[i];
        if (!alive[i] || fast[i] || score[i] < threshold || o.bytes > room) continue;
        if (fast_bytes + o.bytes > room) {
          if (!lru_listed) {
            for (std::size_t j = 0; j < n; ++j) {
              if (alive[j] && fast[j] && last_access[j] < now) lru.emplace_back(last_access[j], j);
            }
            std::sort(lru.begin(), lru.end());
            lru_listed = true;
          }
          std::uint64_t freed = 0;
          std::size_t count = lru_next;
          while (fast_bytes - freed + o.bytes > room && count < lru.size())
            freed += in.objects[lru[count++].second].bytes;
          if (fast_bytes - freed + o.bytes > room) continue;
          for (std::size_t v = lru_next; v < count; ++v) {
            fast[lru[v].second] = 0;
            fast_bytes -= in.objects[lru[v].second].bytes;
          }
          lru_next = count;
        }
        fast[i] = 1;
        fast_bytes += o.bytes;
      }
    }
    for (std::size_t i : deaths[L]) {
      if (fast[i]) fast_bytes -= in.objects[i].bytes;
      alive[i] = fast[i] = 0;
    }
  }
  // The state the next step starts in: what the policy did after the last layer.
  for (std::size_t i = 0; i < n; ++i) {
    if (in.objects[i].persistent) residency[i][0] = fast[i];
  }
  // A persistent object's state after the last layer is boundary 0 of the next step; the state the
  // recorded step began in was the previous step's: in a steady state they agree, else the plan
  // starts from the new one (residency[0] above) and boundary 0's state holds for layer 0.
  Plan plan = from_residency(in, "reactive", residency, false);
  plan.interval_layers = 0;
  return plan;
}

}  // namespace

Plan reactive(const PlanInputs& in) {
  // Tuned as the other policies are: the decay and threshold the simulator predicts cheapest
  // (where none is valid: decay 0.8, threshold 1).
  constexpr double kDecays[] = {0.5, 0.8, 0.95};
  constexpr double kThresholds[] = {1.0, 1.5, 2.5};
  constexpr std::size_t kPairs = std::size(kDecays) * std::size(kThresholds);
  return cheapest_of(in, kPairs, std::size(kThresholds), [&](std::size_t i) {
    return reactive_with(in, kDecays[i / std::size(kThresholds)], kThresholds[i % std::size(kThresholds)]);
  });
}

}  // namespace tensortier::migrator::policies
