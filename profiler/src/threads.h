// process_threads (internal to profiler/): the thread ids of this process now, from
// /proc/self/task; the calling thread's alone if that cannot be read (list_process_threads says
// so instead). Used by the counters (one
// event set per thread) and the fault tracker (an alternate signal stack per thread).
#pragma once

#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

namespace tensortier::profiler {

// Every thread of the process, or nullopt with `why` (an open file limit reached: EMFILE) where
// /proc/self/task cannot be read.
inline std::optional<std::vector<pid_t>> list_process_threads(std::string* why) {
  std::vector<pid_t> tids;
  std::error_code ec;
  std::filesystem::directory_iterator it("/proc/self/task", ec);
  for (; !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    tids.push_back(static_cast<pid_t>(std::stol(it->path().filename().string())));
  }
  if (ec || tids.empty()) {
    *why = "/proc/self/task: " + (ec ? ec.message() : std::string("no threads listed"));
    return std::nullopt;
  }
  return tids;
}

inline std::vector<pid_t> process_threads() {
  std::string why;
  std::optional<std::vector<pid_t>> tids = list_process_threads(&why);
  return tids ? *tids : std::vector<pid_t>{static_cast<pid_t>(syscall(SYS_gettid))};
}

}  // namespace tensortier::profiler
