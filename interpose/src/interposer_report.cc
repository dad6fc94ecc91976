// The interposer's end: the open step ended, the trace and the report written, one summary line.
#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "interposer.h"
#include "tensortier/allocator/tier.h"
#include "tensortier/write_file.h"

namespace tensortier::interpose {
namespace {

const char* state_name(StepDetector::State s) {
  switch (s) {
    case StepDetector::State::kSearching:
      return "searching";
    case StepDetector::State::kVerifying:
      return "verifying";
    case StepDetector::State::kTracking:
      return "tracking";
    case StepDetector::State::kGaveUp:
      return "gave up";
  }
  return "?";
}

}  // namespace

std::string Interposer::report_json() const {
  const RuntimeStats rs = runtime_->stats();
  std::lock_guard lock(mutex_);
  const InterposeStats& s = stats_;
  nlohmann::json j = {{"allocation_failures", s.allocation_failures},
                      {"memories", s.memories},
                      {"objects", s.objects},
                      {"object_bytes", s.object_bytes},
                      {"aliases", s.aliases},
                      {"program_buffers", s.program_buffers},
                      {"program_bytes", s.program_bytes},
                      {"no_buffer", s.no_buffer},
                      {"passed_through", s.passed_through},
                      {"freed", s.freed},
                      {"executions", s.executions},
                      {"layers", s.layers},
                      {"unmarked", s.unmarked},
                      {"other_thread", s.other_thread},
                      {"scratchpads", s.scratchpads},
                      {"host_pins", s.host_pins},
                      {"refreshed", s.refreshed},
                      {"mismatches", s.mismatches},
                      {"failed_marks", s.failed_marks},
                      {"steps", s.steps},
                      {"random_moves_failed", s.random_moves_failed},
                      {"warnings", std::vector<std::string>(warned_.begin(), warned_.end())}};
  j["detector"] = {{"state", state_name(detector_.state())},
                   {"period", detector_.period()},
                   {"tracking_from", detector_.tracking_from()},
                   {"other_steps", detector_.other_steps()},
                   {"searches", detector_.searches()}};
  nlohmann::json tiers = nlohmann::json::array();
  for (const TierUsage& t : rs.tiers) {
    tiers.push_back(
        {{"name", t.name}, {"budget_bytes", t.budget_bytes}, {"peak_mapped_bytes", t.peak_mapped_bytes}});
  }
  j["runtime"] = {{"steps_completed", rs.steps_completed},
                  {"profiled_steps", runtime_->profiled_steps()},
                  {"policy", rs.policy},
                  {"policy_failure", runtime_->policy_failure()},
                  {"trial_result", runtime_->trial_result()},
                  {"moves", rs.migration.moves},
                  {"failed_moves", rs.migration.failed_moves},
                  {"refused_moves", rs.failed_moves},
                  {"direct_moves", rs.moves},
                  {"last_move_failure", rs.migration.last_failure},
                  {"bytes_in", rs.migration.bytes_in},
                  {"bytes_out", rs.migration.bytes_out},
                  {"live_objects_at_exit", rs.live_objects},
                  {"tiers", tiers}};
  return j.dump(2);
}

void Interposer::finish() {
  if (step_open_) step_marks(true, false);
  if (timeline_) {
    const char* path = settings().trace.c_str();
    if (timeline_->steps_recorded() == 0) {
      std::fprintf(stderr, "tensortier-run: the traced steps never ran: nothing written to %s\n", path);
    } else if (Status s = timeline_->write(path); !s.is_ok()) {
      std::fprintf(stderr, "tensortier-run: %s\n", s.message().c_str());
    }
  }
  const std::string json = report_json();
  if (const char* path = settings().report.c_str(); *path != '\0') {
    if (Status s = write_file_replacing(path, json + '\n', "the report"); !s.is_ok())
      std::fprintf(stderr, "tensortier-run: %s\n", s.message().c_str());
  }
  const RuntimeStats rs = runtime_->stats();
  std::lock_guard lock(mutex_);
  const InterposeStats& s = stats_;
  std::string line = fmt::format(
      "tensortier-run: {} memories ({} objects, {}; {} on the program's buffers), {} executions: {} layers "
      "in {} "
      "steps",
      s.memories, s.objects, format_bytes(s.object_bytes), s.program_buffers, s.executions, s.layers,
      rs.steps_completed);
  if (detector_.period() > 0) line += fmt::format(" of {} executions", detector_.period());
  line += fmt::format(", {} outside steps", s.unmarked);
  if (!rs.policy.empty()) {
    line += fmt::format("; policy {}: {} moves ({} in, {} out), {} failed", rs.policy, rs.migration.moves,
                        format_bytes(rs.migration.bytes_in), format_bytes(rs.migration.bytes_out),
                        rs.migration.failed_moves + rs.failed_moves);
    if (!runtime_->policy_failure().empty()) line += fmt::format(" ({})", runtime_->policy_failure());
  }
  std::fprintf(stderr, "%s\n", line.c_str());
  if (detector_.state() != StepDetector::State::kTracking) {
    std::fprintf(stderr,
                 "tensortier-run: no repeating step was found (%s); set --step-period (executions a step) "
                 "for a program whose loop the detector cannot see\n",
                 state_name(detector_.state()));
  }
}

}  // namespace tensortier::interpose
