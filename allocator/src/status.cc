// Status names and formatting.
#include "tensortier/status.h"

#include "tensortier/enum_names.h"

namespace tensortier {

const char* to_string(StatusCode code) {
  static constexpr EnumName<StatusCode> kNames[] = {
      {StatusCode::kOk, "ok"},
      {StatusCode::kInvalidArgument, "invalid argument"},
      {StatusCode::kOutOfMemory, "out of memory"},
      {StatusCode::kNotFound, "not found"},
      {StatusCode::kUnavailable, "unavailable"},
      {StatusCode::kFailedPrecondition, "failed precondition"},
      {StatusCode::kInternal, "internal"},
  };
  return name_of(code, kNames).data();  // the table's names are literals: NUL-terminated
}

std::string Status::to_string() const {
  if (is_ok()) return "ok";
  return std::string(tensortier::to_string(code_)) + ": " + message_;
}

}  // namespace tensortier
