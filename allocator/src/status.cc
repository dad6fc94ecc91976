// Status names and formatting.
#include "tensortier/status.h"

namespace tensortier {

const char* to_string(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "ok";
    case StatusCode::kInvalidArgument:
      return "invalid argument";
    case StatusCode::kOutOfMemory:
      return "out of memory";
    case StatusCode::kNotFound:
      return "not found";
    case StatusCode::kUnavailable:
      return "unavailable";
    case StatusCode::kFailedPrecondition:
      return "failed precondition";
    case StatusCode::kInternal:
      return "internal";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (is_ok()) return "ok";
  return std::string(tensortier::to_string(code_)) + ": " + message_;
}

}  // namespace tensortier
