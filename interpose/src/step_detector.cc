// The step detector (step_detector.h).
#include "tensortier/interpose/step_detector.h"

namespace tensortier::interpose {

StepDetector::StepDetector(std::optional<StepHint> hint) : hint_(hint) {
  if (hint_) {
    state_ = State::kTracking;
    period_ = hint_->period;
    tracking_from_ = hint_->offset;
  }
}

StepDecision StepDetector::next(std::uint64_t key) {
  StepDecision d;
  if (hint_) {
    d = hinted();
  } else if (state_ == State::kSearching) {
    d = search(key);
  } else if (state_ == State::kVerifying) {
    d = verify(key);
  } else if (state_ == State::kTracking) {
    d = track(key);
  }
  ++executions_;
  return d;
}

// Steps every period executions from the offset on; nothing is compared.
StepDecision StepDetector::hinted() {
  StepDecision d;
  const std::uint64_t e = executions_;
  if (e < hint_->offset) {
    d.begin_after = e + 1 == hint_->offset;
    return d;
  }
  d.begin_before = e == 0;
  d.marked = true;
  if ((e - hint_->offset + 1) % hint_->period == 0) d.end_after = d.begin_after = true;
  return d;
}

// Adds the key to the history and keeps, for every period P, how many trailing keys equal the
// key P before them; a period holds once they cover two repetitions (the last 3P keys).
StepDecision StepDetector::search(std::uint64_t key) {
  if (history_.size() == kHistory) {
    state_ = State::kGaveUp;
    history_.clear();
    run_.clear();
    return {};
  }
  history_.push_back(key);
  const std::size_t i = history_.size() - 1;
  run_.resize(i + 1, 0);
  for (std::size_t p = 1; p <= i; ++p) run_[p] = history_[i] == history_[i - p] ? run_[p] + 1 : 0;
  if (state_ != State::kSearching) return {};
  for (std::size_t p = min_period_; 3 * p <= i + 1; ++p) {
    if (run_[p] < 2 * p) continue;
    // The keys [i - run - p + 1, i] repeat with period p; a step starts where they begin.
    const std::size_t start = i - run_[p] - p + 1;
    period_ = p;
    sequence_.assign(history_.begin() + static_cast<std::ptrdiff_t>(start),
                     history_.begin() + static_cast<std::ptrdiff_t>(start + p));
    position_ = (i + 1 - start) % p;
    in_step_ = 0;  // verified keys
    state_ = State::kVerifying;
    break;
  }
  return {};
}

// One more repetition must follow the period; the first step then begins where an iteration does.
StepDecision StepDetector::verify(std::uint64_t key) {
  search(key);  // keeps the runs current, should the period break
  if (key != sequence_[position_]) {
    min_period_ = period_ + 1;
    period_ = 0;
    state_ = State::kSearching;
    return {};
  }
  position_ = (position_ + 1) % period_;
  ++in_step_;
  StepDecision d;
  if (in_step_ >= period_ && position_ == 0) {
    state_ = State::kTracking;
    history_.clear();
    history_.shrink_to_fit();
    run_.clear();
    run_.shrink_to_fit();
    open_ = true;
    deviated_ = false;
    in_step_ = 0;
    tracking_from_ = executions_ + 1;
    d.begin_after = true;
  }
  return d;
}

StepDecision StepDetector::track(std::uint64_t key) {
  StepDecision d;
  if (!open_) {
    d.begin_before = true;
    open_ = true;
    deviated_ = false;
    in_step_ = position_ = 0;
  } else if (deviated_ && in_step_ > 0 && key == sequence_[0]) {
    d.end_before = d.begin_before = true;
    deviated_ = false;
    in_step_ = position_ = 0;
  }
  d.marked = true;
  ++in_step_;
  if (!deviated_ && key == sequence_[position_]) {
    if (++position_ == period_) {
      d.end_after = d.begin_after = true;
      in_step_ = position_ = 0;
      lost_in_row_ = 0;
    }
    return d;
  }
  if (!deviated_) {
    deviated_ = true;
    ++other_steps_;
    ++lost_in_row_;
  }
  if (lost_in_row_ >= kLostSteps) {
    // The loop has changed: close the step and look for the new one.
    d.end_after = true;
    open_ = false;
    restart_search(1);
  } else if (in_step_ >= 4 * period_) {
    d.end_after = d.begin_after = true;
    deviated_ = false;
    in_step_ = position_ = 0;
  }
  return d;
}

void StepDetector::restart_search(std::uint64_t min_period) {
  state_ = State::kSearching;
  ++searches_;
  min_period_ = min_period;
  period_ = 0;
  lost_in_row_ = 0;
  history_.clear();
  run_.clear();
  sequence_.clear();
}

}  // namespace tensortier::interpose
