#include "step_simulator.h"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

namespace tensortier::migrator {

const PlanInputs& played_over(const Plan& plan, const PlanInputs& inputs, PlanInputs& segments) {
  if (plan.segment_bytes == 0) return inputs;
  segments = in_segments(inputs);
  return segments;
}

std::string simulate(Plan& plan, const PlanInputs& inputs) {
  PlanInputs segments;
  plan.problem = StepSimulator(plan, played_over(plan, inputs, segments)).run();
  return plan.problem;
}

std::string StepSimulator::run() {
  reset_predictions();
  if (in_.clean_moves_out_free) mark_clean_at_start();
  index();
  boundary_ns_.assign(in_.layers + 1, 0);
  out_ends_.clear();
  for (std::uint32_t t = 0; t <= in_.layers; ++t) {
    boundary_ns_[t] = clock_ns_;
    free_deaths(t);
    place_births(t);
    hand_out_moves(t);
    seat_births();
    check_budget(t);
    if (t < in_.layers) run_layer(t);
  }
  check_step_end();
  fill_predictions();
  return problem_;
}

void StepSimulator::reset_predictions() {
  plan_.peak_fast_bytes = plan_.bytes_in = plan_.bytes_out = plan_.clean_out_bytes = 0;
  plan_.slow_access_bytes = plan_.discard_bytes = 0;
  plan_.mover_cpu_ns = plan_.mover_busy_ns = plan_.room_wait_ns = plan_.place_wait_ns = 0;
  plan_.fallback_bytes = plan_.failed_in_bytes = 0;
  plan_.fast_bytes_by_boundary.assign(in_.layers + 1, 0);
  plan_.small_reserve_bytes = in_.small_reserve_bytes;
}

// A persistent object starts a step clean when the previous step's last move of it was a move in
// that came after its last write.
void StepSimulator::mark_clean_at_start() {
  std::unordered_map<ObjectKey, std::uint64_t> last_in;  // key -> boundary of its last move in, +1
  std::unordered_map<ObjectKey, std::uint64_t> last_out;
  for (const PlannedMove& m : plan_.moves) {
    const std::uint64_t b = m.after_layer == kStepStart ? 0 : std::uint64_t{m.after_layer} + 1;
    auto& last = m.to == in_.fast ? last_in[m.key] : last_out[m.key];
    last = std::max(last, b + 1);  // +1: 0 means none
  }
  for (const PlanObject& o : in_.objects) {
    if (!o.persistent) continue;
    auto s = plan_.start.find(o.key);
    if (s == plan_.start.end() || s->second != in_.fast || !last_in.contains(o.key)) continue;
    const std::uint64_t b = last_in[o.key] - 1;
    const bool out_after = last_out.contains(o.key) && last_out[o.key] - 1 > b;
    clean_[o.key] = !out_after && (o.writes.empty() || b > o.writes.back());
  }
}

void StepSimulator::index() {
  for (const PlanObject& o : in_.objects) by_key_.emplace(o.key, &o);
  for (const PlanObject& o : in_.objects) {
    if (!o.persistent) continue;
    auto s = plan_.start.find(o.key);
    set_tier(o, s != plan_.start.end() ? s->second : in_.fast);
    auto place = plan_.places.first.find(o.key);
    if (tier_[o.key] == in_.fast && place != plan_.places.first.end()) fast_place_[o.key] = place->second;
  }
  std::unordered_map<std::uint32_t, bool> has_in;  // boundary -> a move in listed so far
  for (PlannedMove& m : plan_.moves) {
    m.predicted_late = m.discard = m.predicted_failed = false;
    const std::uint32_t b = m.after_layer == kStepStart ? 0 : m.after_layer + 1;
    moves_.emplace(b, &m);
    // The mover takes a boundary's moves in the plan's order: a move out listed after a move in
    // leaves that move in without the room it makes.
    if (m.to == in_.fast) {
      has_in[b] = true;
    } else if (has_in[b]) {
      note(fmt::format("after layer {}, a move out of key {:#x} is listed after a move in: outs go first",
                       static_cast<std::int64_t>(m.after_layer), m.key));
    }
  }
  for (const PlanObject& o : in_.objects) {
    if (o.persistent) continue;
    births_.emplace(o.born, &o);
    deaths_.emplace(o.freed, &o);
  }
  users_.resize(in_.layers);
  for (const PlanObject& o : in_.objects) {
    for (std::uint32_t l : o.uses) {
      if (l < in_.layers) users_[l].push_back(&o);
    }
  }
}

void StepSimulator::free_deaths(std::uint32_t t) {
  for (auto [it, end] = deaths_.equal_range(t); it != end; ++it) {
    auto found = tier_.find(it->second->key);
    if (found == tier_.end()) continue;
    if (found->second == in_.fast) fast_ -= it->second->bytes;
    tier_.erase(found);
    fast_place_.erase(it->second->key);  // its place is free at once
    pending_.erase(it->second->key);
  }
}

void StepSimulator::place_births(std::uint32_t t) {
  born_fast_.clear();
  for (auto [it, end] = births_.equal_range(t); it != end; ++it) {
    auto b = plan_.birth.find(it->second->key);
    const TierIndex where = b != plan_.birth.end() ? b->second : in_.fast;
    set_tier(*it->second, where);
    if (where != in_.fast) continue;
    born_fast_.push_back(it->second);
    if (auto place = plan_.places.first.find(it->second->key); place != plan_.places.first.end())
      fast_place_[it->second->key] = place->second;
  }
}

void StepSimulator::hand_out_moves(std::uint32_t t) {
  for (int pass = 0; pass < 2; ++pass) {  // outs first, then ins
    for (auto [it, end] = moves_.equal_range(t); it != end; ++it) {
      PlannedMove& m = *it->second;
      if ((m.to == in_.fast) != (pass == 1)) continue;
      auto o = by_key_.find(m.key);
      if (o == by_key_.end() || !tier_.contains(m.key)) {
        note(fmt::format("a move of key {:#x} after layer {} finds it not alive", m.key,
                         static_cast<std::int64_t>(m.after_layer)));
        continue;
      }
      if (tier_[m.key] == m.to) continue;
      hand_out(m, *o->second, t);
    }
  }
}

// One move handed to the mover: clean moves out and moves of dead bytes copy nothing and take no
// slow-tier time (they wait their turn); the others hold the mover and the slow tier.
void StepSimulator::hand_out(PlannedMove& m, const PlanObject& o, std::uint32_t t) {
  const auto left_place = fast_place_.find(m.key);  // a move out's place in the fast arena
  std::optional<std::size_t> leaving;               // its entry in leaving_, its end set below
  if (m.to != in_.fast && left_place != fast_place_.end()) {
    leaving = leaving_.size();
    leaving_.push_back(Leaving{left_place->second, o.bytes, 0});
  }
  set_tier(o, m.to);
  const bool in = m.to == in_.fast;
  m.discard = in_.dead_moves_free && bytes_dead_at(in_, o, t);
  const bool free_out = !m.discard && !in && in_.clean_moves_out_free && clean_[m.key];
  clean_[m.key] = in && !m.discard;  // a discarding move keeps no shadow
  double turn_ns = std::max(mover_free_ns_, clock_ns_);
  if (in && m.place != kNoPlace) {  // the mover waits for the place to be left
    turn_ns = std::max(turn_ns, place_left_at(m.place, o.bytes));
    mover_free_ns_ = std::max(mover_free_ns_, turn_ns);
    fast_place_[m.key] = m.place;
  }
  if (leaving) leaving_[*leaving].end_ns = turn_ns;
  if (free_out) {  // its slow pages come back: no copy, no slow-tier time
    plan_.bytes_out += m.bytes;
    plan_.clean_out_bytes += m.bytes;
    pending_.erase(m.key);
    outs_.emplace_back(turn_ns, m.bytes);  // in the mover's turn
    out_ends_.emplace_back(&m, turn_ns);
    return;
  }
  (in ? plan_.bytes_in : plan_.bytes_out) += m.bytes;
  double end_ns = turn_ns;
  if (m.discard) {
    plan_.discard_bytes += m.bytes;
  } else {
    plan_.mover_cpu_ns += static_cast<double>(m.bytes) * in_.mover_cpu_ns_per_byte;
    const double ns = static_cast<double>(m.bytes) / (in ? in_.move_in_gbps : in_.move_out_gbps);
    end_ns = std::max(slow_busy_ns_, turn_ns) + ns;
    mover_free_ns_ = slow_busy_ns_ = end_ns;
    plan_.mover_busy_ns += end_ns - turn_ns;
  }
  if (in) {
    pending_[m.key] = Pending{turn_ns, end_ns, &m};
  } else {
    pending_.erase(m.key);
    outs_.emplace_back(end_ns, m.bytes);
    out_ends_.emplace_back(&m, end_ns);
    if (leaving) leaving_[*leaving].end_ns = end_ns;
  }
}

// This boundary's births, as the runtime places them: after the moves just handed out, which take
// time; then the moves in not begun yet find the room these births took.
void StepSimulator::seat_births() {
  std::erase_if(outs_, [&](const auto& o) { return o.first <= clock_ns_; });
  if (born_fast_.empty() || in_.small_reserve_bytes >= in_.fast_budget_bytes) return;
  const std::uint64_t room = in_.fast_budget_bytes - in_.small_reserve_bytes;
  if (held_at(clock_ns_) > room) wait_for_room(room);
  refuse_moves_in(room);
  wait_for_places();
}

// When the fast arena's [offset, offset + bytes) is left by every move out of it under way.
double StepSimulator::place_left_at(std::uint64_t offset, std::uint64_t bytes) const {
  double at = 0;
  for (const Leaving& l : leaving_) {
    if (l.offset < offset + bytes && offset < l.offset + l.bytes) at = std::max(at, l.end_ns);
  }
  return at;
}

// Ready memory: this boundary's fast births wait for their places' occupants to leave (the
// allocator's occupant wait, up to room_wait_ns); past that, a birth falls back to the slow tier.
void StepSimulator::wait_for_places() {
  std::erase_if(leaving_, [&](const Leaving& l) { return l.end_ns <= clock_ns_; });
  for (const PlanObject* o : born_fast_) {
    auto place = fast_place_.find(o->key);
    if (place == fast_place_.end() || tier_[o->key] != in_.fast) continue;
    const double left = place_left_at(place->second, o->bytes);
    if (left <= clock_ns_) continue;
    if (left - clock_ns_ <= in_.room_wait_ns) {
      plan_.place_wait_ns += left - clock_ns_;
      clock_ns_ = left;
    } else {
      set_tier(*o, in_.slow);
      plan_.fallback_bytes += o->bytes;
    }
  }
}

// Where the fast tier has no room until moves out end, the births wait for those (the allocator's
// room wait, up to room_wait_ns) and the layer starts later; where the wait would be longer, they
// fall back to the slow tier. No end of a move out makes room: the plan itself is over the budget
// (check_budget says so).
void StepSimulator::wait_for_room(std::uint64_t room) {
  std::vector<double> ends;
  ends.reserve(outs_.size());
  for (const auto& o : outs_) ends.push_back(o.first);
  std::ranges::sort(ends);
  std::optional<double> fits;
  for (double e : ends) {
    if (held_at(e) <= room) {
      fits = e;
      break;
    }
  }
  if (fits && *fits - clock_ns_ <= in_.room_wait_ns) {
    plan_.room_wait_ns += *fits - clock_ns_;
    clock_ns_ = *fits;
  } else if (fits) {
    for (const PlanObject* o : born_fast_) {
      set_tier(*o, in_.slow);
      plan_.fallback_bytes += o->bytes;
    }
  }
}

// In the order the mover takes them, a move in whose object would not fit at its start is refused
// by the allocator and its object stays slow (its copy time is still counted: a slight
// overestimate of the mover's).
void StepSimulator::refuse_moves_in(std::uint64_t room) {
  std::vector<std::pair<double, ObjectKey>> waiting;
  for (const auto& [key, p] : pending_) {
    if (p.start_ns > clock_ns_ && p.move != nullptr && tier_.contains(key) && tier_[key] == in_.fast)
      waiting.emplace_back(p.start_ns, key);
  }
  std::ranges::sort(waiting);
  for (const auto& [start_ns, key] : waiting) {
    if (held_at(start_ns) <= room) continue;
    const PlanObject& o = *by_key_[key];
    PlannedMove& m = *pending_[key].move;
    m.predicted_failed = true;
    refused_.insert(key);
    plan_.failed_in_bytes += o.bytes;
    plan_.bytes_in -= std::min(plan_.bytes_in, m.bytes);
    if (m.discard) {
      plan_.discard_bytes -= std::min(plan_.discard_bytes, m.bytes);
    } else {
      plan_.mover_cpu_ns -= static_cast<double>(m.bytes) * in_.mover_cpu_ns_per_byte;
    }
    set_tier(o, in_.slow);
    pending_.erase(key);
  }
}

void StepSimulator::check_budget(std::uint32_t t) {
  plan_.peak_fast_bytes = std::max(plan_.peak_fast_bytes, fast_);
  plan_.fast_bytes_by_boundary[t] = fast_;
  if (fast_ + in_.small_reserve_bytes > in_.fast_budget_bytes) {
    note(fmt::format(
        "at the boundary before layer {} the fast tier would hold {} bytes (+{} for small objects) "
        "over its budget of {}",
        t, fast_, in_.small_reserve_bytes, in_.fast_budget_bytes));
  }
}

// Layer t: waits for moves of its objects under way (one not begun yet leaves the object slow for
// it), then computes while its slow traffic holds the slow tier.
void StepSimulator::run_layer(std::uint32_t t) {
  std::uint64_t slow_bytes = 0;
  for (const PlanObject* o : users_[t]) {
    auto found = tier_.find(o->key);
    if (found == tier_.end()) continue;
    bool slow = found->second != in_.fast;
    if (auto p = pending_.find(o->key); !slow && p != pending_.end()) {
      if (p->second.end_ns > clock_ns_ && p->second.move != nullptr) p->second.move->predicted_late = true;
      if (p->second.end_ns <= clock_ns_) {
        pending_.erase(p);
      } else if (p->second.start_ns <= clock_ns_) {
        clock_ns_ = p->second.end_ns;  // under way: the layer waits for it
        pending_.erase(p);
      } else {
        slow = true;  // not begun: this layer reads it where it still is
      }
    }
    if (slow) slow_bytes += o->bytes;
  }
  plan_.slow_access_bytes += slow_bytes;
  for (const PlanObject* o : users_[t]) {
    if (std::binary_search(o->writes.begin(), o->writes.end(), t)) clean_[o->key] = false;
  }
  const double compute = static_cast<double>(in_.layer_ns[t]);
  const double want_end = clock_ns_ + compute + static_cast<double>(slow_bytes) * in_.slow_access_ns_per_byte;
  const double traffic = static_cast<double>(slow_bytes) * in_.slow_traffic_ns_per_byte();
  if (traffic > 0) {
    const double traffic_end = std::max(slow_busy_ns_, want_end - traffic) + traffic;
    slow_busy_ns_ = traffic_end;
    clock_ns_ = std::max(want_end, traffic_end);
  } else {
    clock_ns_ = want_end;
  }
  compute_ns_ += compute;
}

// The step repeats: persistent objects must end where the next step starts them. One whose move
// in was refused ends where the runtime leaves it, not where the plan has it: no fault of the plan.
void StepSimulator::check_step_end() {
  for (const PlanObject& o : in_.objects) {
    if (!o.persistent) continue;
    auto s = plan_.start.find(o.key);
    const TierIndex want = s != plan_.start.end() ? s->second : in_.fast;
    if (tier_[o.key] != want && !refused_.contains(o.key)) {
      note(fmt::format("key {:#x} ends the step on tier {} but the next step starts it on tier {}", o.key,
                       tier_[o.key], want));
    }
  }
}

// Moves after the last layer prepare the next step: they count when they end past this one.
void StepSimulator::fill_predictions() {
  for (auto [m, end_ns] : out_ends_) {  // the first boundary whose births find its place left
    auto at = std::lower_bound(boundary_ns_.begin(), boundary_ns_.end(), end_ns);
    m->done_by = static_cast<std::uint32_t>(at - boundary_ns_.begin());
  }
  plan_.predicted_extra_ns =
      std::max(clock_ns_, mover_free_ns_) - compute_ns_ + plan_.mover_cpu_ns * in_.mover_steals_compute;
  plan_.compute_ns = compute_ns_;
  const std::uint64_t footprint = in_.peak_bytes + in_.small_reserve_bytes;
  plan_.floor_slow_ns = footprint > in_.fast_budget_bytes
                            ? static_cast<double>(footprint - in_.fast_budget_bytes) *
                                  (1.0 / in_.move_in_gbps + 1.0 / in_.move_out_gbps)
                            : 0.0;
}

void StepSimulator::note(std::string problem) {
  if (problem_.empty()) problem_ = std::move(problem);
}

void StepSimulator::set_tier(const PlanObject& o, TierIndex t) {
  auto [it, fresh] = tier_.try_emplace(o.key, t);
  if (!fresh && it->second == in_.fast) fast_ -= o.bytes;
  it->second = t;
  if (t == in_.fast) fast_ += o.bytes;
  if (t != in_.fast) fast_place_.erase(o.key);  // no longer in the fast arena
}

std::uint64_t StepSimulator::held_at(double at_ns) {
  std::uint64_t held = fast_;
  for (const auto& [key, p] : pending_) {
    if (p.start_ns > at_ns && tier_.contains(key) && tier_[key] == in_.fast) held -= by_key_[key]->bytes;
  }
  for (const auto& [end_ns, bytes] : outs_) {
    if (end_ns > at_ns) held += bytes;
  }
  return held;
}

}  // namespace tensortier::migrator
