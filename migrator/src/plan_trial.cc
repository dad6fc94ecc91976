// PlanTrial (see plan_trial.h).
#include "tensortier/migrator/plan_trial.h"

#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace tensortier::migrator {
namespace {

// The upper median of `v` (0 for none); reorders it.
std::uint64_t median_of(std::vector<std::uint64_t>& v) {
  if (v.empty()) return 0;
  std::ranges::nth_element(v, v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2));
  return v[v.size() / 2];
}

std::string with_variant(const std::string& variant, const std::string& more) {
  return (variant.empty() ? "" : variant + "; ") + more;
}

}  // namespace

std::optional<PlanTrial> PlanTrial::begin(const Plan& plan, const PlanInputs& inputs, std::uint32_t steps,
                                          std::string policy) {
  if (steps == 0 || plan.moves.empty()) return std::nullopt;
  PlanTrial trial(inputs, steps, std::move(policy));
  trial.phases_.push_back({.what = "with its moves", .verdict = "its plan runs as made"});
  if (std::optional<Plan> timely = without_late_moves(plan, inputs); timely) {
    timely->variant = with_variant(timely->variant,
                                   "its late moves left out (their objects stay slow), chosen by the trial");
    trial.phases_.push_back({.what = "with its late moves left out",
                             .verdict = "its plan runs without its late moves",
                             .plan = std::move(timely),
                             .late_left_out = true});
  }
  if (Result<Plan> unmoved = make_plan("first-touch", inputs); unmoved) {
    (void)simulate(unmoved.value(), inputs);
    unmoved->policy = trial.policy_;
    unmoved->variant = "no moves: first-touch placement, chosen by the trial";
    trial.phases_.push_back({.what = "with none (first-touch placement)",
                             .verdict = "moving does not pay here, the run goes on without moves",
                             .plan = std::move(unmoved).value()});
  }
  return trial;
}

std::vector<std::string> PlanTrial::phases() const {
  std::vector<std::string> out;
  for (const Phase& p : phases_) out.push_back(p.what);
  return out;
}

std::optional<Plan> PlanTrial::step(std::uint64_t step_ns, std::span<const std::uint64_t> layer_ns,
                                    const Plan& running) {
  if (done()) return std::nullopt;
  if (skip_ > 0) {  // the first step of a phase pays for placing the persistent objects
    --skip_;
    return std::nullopt;
  }
  step_ns_.push_back(step_ns);
  layer_ns_.emplace_back(layer_ns.begin(), layer_ns.end());
  if (step_ns_.size() < steps_) return std::nullopt;
  close_phase();
  if (phases_[phase_].late_left_out) add_judged_phase();
  if (phase_ + 1 < phases_.size()) return switch_to(phase_ + 1, running);
  std::size_t best = 0;  // the first of equals: the plan as made before its variants
  for (std::size_t k = 1; k < phases_.size(); ++k) {
    if (phases_[k].median_ns < phases_[best].median_ns) best = k;
  }
  std::string times;
  for (const Phase& p : phases_) {
    times += fmt::format("{}{:.1f} ms a step {}", times.empty() ? "" : ", ",
                         static_cast<double>(p.median_ns) / 1e6, p.what);
  }
  result_ =
      fmt::format("trial of {} over {} steps each: {}: {}", policy_, steps_, times, phases_[best].verdict);
  if (best == phase_) return std::nullopt;
  return switch_to(best, running);
}

void PlanTrial::close_phase() {
  Phase& ended = phases_[phase_];
  ended.median_ns = median_of(step_ns_);
  const std::size_t layers = layer_ns_.back().size();
  ended.layer_median_ns.assign(layers, 0);
  std::vector<std::uint64_t> one_layer;
  for (std::size_t l = 0; l < layers; ++l) {
    one_layer.clear();
    for (const std::vector<std::uint64_t>& step : layer_ns_) {
      if (l < step.size()) one_layer.push_back(step[l]);
    }
    ended.layer_median_ns[l] = static_cast<double>(median_of(one_layer));
  }
  step_ns_.clear();
  layer_ns_.clear();
  skip_ = 1;
}

void PlanTrial::add_judged_phase() {
  const Phase& made = phases_.front();
  const Phase& without = phases_[phase_];
  if (!made.plan) return;
  const std::vector<LateMoveVerdict> verdicts =
      judge_late_moves(*made.plan, inputs_.layers, made.layer_median_ns, without.layer_median_ns);
  std::vector<std::size_t> left_out;
  for (const LateMoveVerdict& v : verdicts) {
    if (!v.keep()) left_out.push_back(v.move);
    spdlog::debug(
        "policy {}: the late move in of object {} (layers {}-{}): {:.2f} ms with the late moves, {:.2f} ms "
        "without: {}",
        policy_, made.plan->moves[v.move].key, v.first_layer, v.last_layer, v.with_ns / 1e6,
        v.without_ns / 1e6, v.keep() ? "kept" : "left out");
  }
  const std::size_t kept = verdicts.size() - left_out.size();
  const bool split = kept > 0 && !left_out.empty();  // else the two phases so far are those plans
  spdlog::info(
      "policy {}: its {} late moves judged one by one by the layers each can change: {} worth their wait, {} "
      "not{}",
      policy_, verdicts.size(), kept, left_out.size(),
      split ? "" : " (no phase of their own: the two phases so far are those plans)");
  if (!split) return;
  std::optional<Plan> judged = without_moves_in(*made.plan, inputs_, left_out);
  if (!judged) return;
  judged->variant = with_variant(
      judged->variant, fmt::format("{} of its {} late moves kept (judged one by one), chosen by the trial",
                                   kept, verdicts.size()));
  phases_.insert(
      phases_.begin() + static_cast<std::ptrdiff_t>(phase_) + 1,
      Phase{.what = fmt::format("with {} of its {} late moves (judged one by one)", kept, verdicts.size()),
            .verdict = fmt::format("its plan runs with the {} late moves its layers were faster with", kept),
            .plan = std::move(judged)});
}

Plan PlanTrial::switch_to(std::size_t k, const Plan& running) {
  Plan next = std::move(phases_[k].plan).value();
  phases_[k].plan.reset();
  phases_[phase_].plan = running;
  phase_ = k;
  return next;
}

}  // namespace tensortier::migrator
