// The interposer's settings from the environment (see settings.h).
#include "tensortier/interpose/settings.h"

#include <cstdlib>
#include <limits>

#include <fmt/format.h>

#include "tensortier/settings.h"

namespace tensortier::interpose {
namespace {

// `value` from the whole number in `name` where it is set; an error for a bad one.
Status read_whole(const char* name, std::uint64_t least, std::uint64_t most, std::uint64_t& value,
                  bool* given = nullptr) {
  Result<std::optional<std::uint64_t>> read = settings::env_whole(name, least, most);
  if (!read) return read.status();
  if (read->has_value()) value = **read;
  if (given != nullptr) *given = read->has_value();
  return Status::ok();
}

Status read_switch(const char* name, bool& value) {
  Result<std::optional<bool>> read = settings::env_switch(name);
  if (!read) return read.status();
  if (read->has_value()) value = **read;
  return Status::ok();
}

std::string text_of(const char* name) {
  const char* text = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): see settings.h
  return text != nullptr ? text : "";
}

}  // namespace

Result<InterposeSettings> InterposeSettings::from_env() {
  InterposeSettings s;
  constexpr std::uint64_t kAny = std::numeric_limits<std::uint64_t>::max();
  TENSORTIER_RETURN_IF_ERROR(read_switch("TENSORTIER_INTERPOSE", s.on));
  TENSORTIER_RETURN_IF_ERROR(
      read_whole("TENSORTIER_TRIAL_STEPS", 0, kMostTrialSteps, s.trial_steps, &s.trial_steps_given));
  TENSORTIER_RETURN_IF_ERROR(read_whole("TENSORTIER_RANDOM_MOVES", 0, kAny, s.random_moves));
  TENSORTIER_RETURN_IF_ERROR(read_switch("TENSORTIER_SCRATCHPADS", s.scratchpads));
  TENSORTIER_RETURN_IF_ERROR(read_whole("TENSORTIER_STEP_PERIOD", 0, kMostStepPeriod, s.step_period));
  bool offset_given = false;
  TENSORTIER_RETURN_IF_ERROR(
      read_whole("TENSORTIER_STEP_OFFSET", 0, kMostStepOffset, s.step_offset, &offset_given));
  if (offset_given && s.step_period == 0) {
    return invalid_argument(
        "TENSORTIER_STEP_OFFSET is set without TENSORTIER_STEP_PERIOD: an offset counts executions before "
        "the "
        "first step of a given period; give the period too, or leave both unset (the steps are then "
        "detected)");
  }
  TENSORTIER_RETURN_IF_ERROR(read_whole("TENSORTIER_TRACE_FROM", 1, kMostTraceFrom, s.trace_from));
  TENSORTIER_RETURN_IF_ERROR(read_whole("TENSORTIER_TRACE_STEPS", 1, kMostTraceSteps, s.trace_steps));
  s.trace = text_of("TENSORTIER_TRACE");
  s.report = text_of("TENSORTIER_INTERPOSE_REPORT");
  TENSORTIER_RETURN_IF_ERROR(read_whole("TENSORTIER_RUN_PID", 0, kAny, s.run_pid));
  std::uint64_t claim = 0;
  bool claim_given = false;
  TENSORTIER_RETURN_IF_ERROR(read_whole("TENSORTIER_RUN_CLAIM", 0, 1 << 30, claim, &claim_given));
  if (claim_given) s.claim_fd = static_cast<int>(claim);
  return s;
}

}  // namespace tensortier::interpose
