// process_threads (internal to profiler/): the thread ids of this process now, from
// /proc/self/task; the calling thread's alone if that cannot be read. Used by the counters (one
// event set per thread) and the fault tracker (an alternate signal stack per thread).
#pragma once

#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace tensortier::profiler {

inline std::vector<pid_t> process_threads() {
  std::vector<pid_t> tids;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    tids.push_back(static_cast<pid_t>(std::stol(entry.path().filename().string())));
  }
  if (tids.empty()) tids.push_back(static_cast<pid_t>(syscall(SYS_gettid)));
  return tids;
}

}  // namespace tensortier::profiler
