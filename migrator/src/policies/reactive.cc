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

// Plays the policy online, its state carried from step to step. Phases, per layer boundary b:
//
//   free(deaths at b)  place_births(b)  [record b]  touch(layer b's users)  promote(b)
//
// repeated over kWarmSteps steps; the last one's residency is the plan.
class ReactivePlayer {
 public:
  ReactivePlayer(const PlanInputs& in, double decay, double threshold);
  Plan play();

 private:
  static constexpr int kWarmSteps = 4;
  void start();
  void free(const std::vector<std::size_t>& dead);
  void place_births(std::uint32_t b);
  void touch(std::uint32_t b);
  void promote(std::uint32_t b);
  bool demote_for(std::uint64_t bytes);

  const PlanInputs& in_;
  const double decay_, threshold_;
  const std::uint32_t layers_;
  const std::size_t n_;
  const std::uint64_t room_;
  std::vector<std::vector<std::size_t>> users_, births_, deaths_;
  std::vector<double> score_;
  std::vector<std::int64_t> last_access_, score_at_;  // in layers since the run began
  std::vector<char> alive_, fast_;
  std::uint64_t fast_bytes_ = 0;
  std::int64_t now_ = 0;  // layers run
  // The least recently used fast objects, oldest first, listed once per layer where some
  // promotion needs room (those the layer used are not among them; one demoted leaves it).
  std::vector<std::pair<std::int64_t, std::size_t>> lru_;
  std::size_t lru_next_ = 0;
  bool lru_listed_ = false;
};

ReactivePlayer::ReactivePlayer(const PlanInputs& in, double decay, double threshold)
    : in_(in),
      decay_(decay),
      threshold_(threshold),
      layers_(in.layers),
      n_(in.objects.size()),
      room_(plannable_room(in)),
      users_(layers_),
      births_(layers_ + 1),
      deaths_(layers_ + 1),
      score_(n_, 0),
      last_access_(n_, -1),
      score_at_(n_, 0),
      alive_(n_, 0),
      fast_(n_, 0) {
  for (std::size_t i = 0; i < n_; ++i) {
    const PlanObject& o = in.objects[i];
    for (std::uint32_t l : o.uses) {
      if (l < layers_) users_[l].push_back(i);
    }
    if (!o.persistent && o.born < layers_ && o.freed > o.born) {
      births_[o.born].push_back(i);
      deaths_[std::min(o.freed, layers_)].push_back(i);
    }
  }
}

Plan ReactivePlayer::play() {
  start();
  Residency residency(n_, std::vector<char>(layers_, 0));
  for (int step = 0; step < kWarmSteps; ++step) {
    for (std::uint32_t b = 0; b < layers_; ++b, ++now_) {
      free(deaths_[b]);
      place_births(b);
      if (step + 1 == kWarmSteps) {
        for (std::size_t i = 0; i < n_; ++i) residency[i][b] = fast_[i];
      }
      touch(b);  // layer b runs; then the policy reacts to what it saw
      promote(b);
    }
    free(deaths_[layers_]);
  }
  // A persistent object's state after the last layer is boundary 0 of the next step; the state the
  // recorded step began in was the previous step's: in a steady state they agree, else the plan
  // starts from the new one and boundary 0's state holds for layer 0.
  for (std::size_t i = 0; i < n_; ++i) {
    if (in_.objects[i].persistent) residency[i][0] = fast_[i];
  }
  Plan plan = from_residency(in_, "reactive", residency, false);
  plan.interval_layers = 0;
  return plan;
}

// Persistent objects start as first touch would leave them: fast while they fit, in key order.
void ReactivePlayer::start() {
  for (std::size_t i = 0; i < n_; ++i) {
    const PlanObject& o = in_.objects[i];
    if (!o.persistent) continue;
    alive_[i] = 1;
    if (fast_bytes_ + o.bytes <= room_) {
      fast_[i] = 1;
      fast_bytes_ += o.bytes;
    }
  }
}

void ReactivePlayer::free(const std::vector<std::size_t>& dead) {
  for (std::size_t i : dead) {
    if (fast_[i]) fast_bytes_ -= in_.objects[i].bytes;
    alive_[i] = fast_[i] = 0;
  }
}

// Born fast while there is room; an object's segments (in_segments lists them one after the
// other) all on one tier, as the runtime places an object whole.
void ReactivePlayer::place_births(std::uint32_t b) {
  const std::vector<std::size_t>& born = births_[b];
  for (std::size_t at = 0; at < born.size();) {
    std::size_t end = at + 1;
    std::uint64_t object_bytes = in_.objects[born[at]].bytes;
    const ObjectKey whole = whole_key(in_.objects[born[at]].key);
    while (end < born.size() && whole_key(in_.objects[born[end]].key) == whole)
      object_bytes += in_.objects[born[end++]].bytes;
    const bool fits = fast_bytes_ + object_bytes <= room_;
    for (; at < end; ++at) {
      const std::size_t i = born[at];
      alive_[i] = 1;
      score_[i] = 0;
      score_at_[i] = last_access_[i] = now_;
      fast_[i] = fits ? 1 : 0;
    }
    if (fits) fast_bytes_ += object_bytes;
  }
}

void ReactivePlayer::touch(std::uint32_t b) {
  for (std::size_t i : users_[b]) {
    score_[i] = score_[i] * std::pow(decay_, static_cast<double>(now_ - score_at_[i])) + 1.0;
    score_at_[i] = last_access_[i] = now_;
  }
}

// Each slow object layer b used whose score reached the threshold, made room for by demoting the
// least recently used; it stays slow where that cannot make room.
void ReactivePlayer::promote(std::uint32_t b) {
  lru_.clear();
  lru_next_ = 0;
  lru_listed_ = false;
  for (std::size_t i : users_[b]) {
    const PlanObject& o = in_.objects[i];
    if (!alive_[i] || fast_[i] || score_[i] < threshold_ || o.bytes > room_) continue;
    if (fast_bytes_ + o.bytes > room_ && !demote_for(o.bytes)) continue;
    fast_[i] = 1;
    fast_bytes_ += o.bytes;
  }
}

// Demotes the least recently used fast objects until `bytes` fit; false, changing nothing, if
// they cannot.
bool ReactivePlayer::demote_for(std::uint64_t bytes) {
  if (!lru_listed_) {
    for (std::size_t j = 0; j < n_; ++j) {
      if (alive_[j] && fast_[j] && last_access_[j] < now_) lru_.emplace_back(last_access_[j], j);
    }
    std::sort(lru_.begin(), lru_.end());
    lru_listed_ = true;
  }
  std::uint64_t freed = 0;
  std::size_t count = lru_next_;
  while (fast_bytes_ - freed + bytes > room_ && count < lru_.size())
    freed += in_.objects[lru_[count++].second].bytes;
  if (fast_bytes_ - freed + bytes > room_) return false;
  for (std::size_t v = lru_next_; v < count; ++v) {
    fast_[lru_[v].second] = 0;
    fast_bytes_ -= in_.objects[lru_[v].second].bytes;
  }
  lru_next_ = count;
  return true;
}

Plan reactive_with(const PlanInputs& in, double decay, double threshold) {
  return ReactivePlayer(in, decay, threshold).play();
}

}  // namespace

Plan reactive(const PlanInputs& in) {
  // Tuned as the other policies are: the decay and threshold the simulator predicts cheapest
  // (where none is valid: decay 0.8, threshold 1).
  static constexpr double kDecays[] = {0.5, 0.8, 0.95};
  static constexpr double kThresholds[] = {1.0, 1.5, 2.5};
  constexpr std::size_t kPairs = std::size(kDecays) * std::size(kThresholds);
  return cheapest_of(in, kPairs, std::size(kThresholds), [&](std::size_t i) {
    return reactive_with(in, kDecays[i / std::size(kThresholds)], kThresholds[i % std::size(kThresholds)]);
  });
}

}  // namespace tensortier::migrator::policies
