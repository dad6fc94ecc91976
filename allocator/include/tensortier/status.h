// Errors as values for every tensortier call that can fail on bad input or missing hardware.
//
// A Status is a code plus a message written for the user: it names the problem and what to do.
// Result<T> holds either a T or a non-OK Status. Both are plain values: copyable, no ownership
// beyond their members, safe to pass between threads. (C++23's std::expected would do; we build
// with C++20 on GCC 12, which lacks it, hence this small type.)
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace tensortier {

// What kind of failure a Status reports; the C API mirrors these values (tt_status).
enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,     // the caller passed something malformed (bad spec, size, pointer)
  kOutOfMemory = 2,         // no tier has room within its budget, or the OS refused memory
  kNotFound = 3,            // a pointer, object or tier that the runtime does not know
  kUnavailable = 4,         // the machine lacks the hardware or kernel feature asked for
  kFailedPrecondition = 5,  // a call out of order (layer_end without layer_begin, ...)
  kInternal = 6,            // an OS call failed in a way we did not expect
};

// Short lowercase name of a code, e.g. "invalid argument".
const char* to_string(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }
  bool is_ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "invalid argument: <message>", or "ok".
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}          // NOLINT(google-explicit-constructor)
  Result(Status status) : status_(std::move(status)) {}  // NOLINT(google-explicit-constructor)

  bool is_ok() const { return value_.has_value(); }
  explicit operator bool() const { return is_ok(); }
  const Status& status() const { return status_; }
  // Precondition: is_ok().
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  std::optional<T> value_;
  Status status_;  // non-OK exactly when value_ is empty (constructing from OK is a bug)
};

// Status helpers that read well at call sites.
inline Status invalid_argument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status out_of_memory(std::string m) {
  return {StatusCode::kOutOfMemory, std::move(m)};
}
inline Status not_found(std::string m) {
  return {StatusCode::kNotFound, std::move(m)};
}
inline Status unavailable(std::string m) {
  return {StatusCode::kUnavailable, std::move(m)};
}
inline Status failed_precondition(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status internal_error(std::string m) {
  return {StatusCode::kInternal, std::move(m)};
}

}  // namespace tensortier

// Returns the Status of `expr` from the calling function when it is not OK.
#define TENSORTIER_RETURN_IF_ERROR(expr)                                         \
  do {                                                                           \
    if (::tensortier::Status status_ = (expr); !status_.is_ok()) return status_; \
  } while (0)
