// Counters: per-layer counter readings for the step profile, from the best source the machine
// has, each figure naming its source.
//
// Sources, first that works wins:
//   1. PAPI hardware events (cycles, instructions, last-level cache misses, memory stall cycles:
//      those of PAPI_TOT_CYC, PAPI_TOT_INS, PAPI_L3_TCM, PAPI_MEM_SCY the machine has), one event
//      set attached to every thread of the process;
//   2. perf_event_open software counters (page faults, task clock) on every thread;
//   3. getrusage(RUSAGE_SELF) (minor + major faults, user + system CPU time), process-wide.
// open() logs one line naming the source it chose and why the better ones were not used (e.g.
// "PAPI 7.0.0: no hardware events on this machine"), once per process.
// Threads are the ones alive at open(): a thread started later is not counted by sources 1 and 2
// (oneDNN's OpenMP workers start with the first primitive, before the profiled step).
//
// Ownership: a Counters owns its event sets / file descriptors and closes them when destroyed.
// Thread safety: read() may be called from one thread at a time.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace tensortier::profiler {

class Counters {
 public:
  virtual ~Counters() = default;
  static std::unique_ptr<Counters> open();

  const std::string& source() const { return source_; }
  const std::vector<std::string>& names() const { return names_; }
  // Why better sources were not used (empty when the first one works).
  const std::vector<std::string>& notes() const { return notes_; }
  // Cumulative values, one per name, summed over the threads counted.
  virtual std::vector<double> read() = 0;

 protected:
  std::string source_;
  std::vector<std::string> names_;
  std::vector<std::string> notes_;
};

}  // namespace tensortier::profiler
