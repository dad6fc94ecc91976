// The executor's counts over the measured steps of a benchmark, per step: tensortier-bench and
// bench_training snapshot ExecutorStats before their first measured step and report the
// difference, so the warm-up steps (among them the first under a plan, which places its objects
// and costs the mover more) are not counted.
#pragma once

#include <cstdint>

#include "tensortier/migrator/executor.h"

namespace tensortier::bench {

struct MigrationPerStep {
  double in_mib = 0, out_mib = 0, copied_mib = 0;  // moved into / out of the fast tier; copied
  double late_dropped = 0, failed = 0;             // moves
  double mover_cpu_ms = 0;                         // the mover thread's CPU time
};

// The counts from `before` to `now`, divided by `steps` (taken as 1 when below it).
inline MigrationPerStep migration_per_step(const migrator::ExecutorStats& before,
                                           const migrator::ExecutorStats& now, double steps) {
  const double n = steps < 1 ? 1 : steps;
  const auto per = [n](std::uint64_t later, std::uint64_t earlier) {
    return static_cast<double>(later - earlier) / n;
  };
  constexpr double kMiB = 1 << 20;
  return {
      per(now.bytes_in, before.bytes_in) / kMiB,         per(now.bytes_out, before.bytes_out) / kMiB,
      per(now.copied_bytes, before.copied_bytes) / kMiB, per(now.late_dropped, before.late_dropped),
      per(now.failed_moves, before.failed_moves),        per(now.mover_cpu_ns, before.mover_cpu_ns) / 1e6};
}

}  // namespace tensortier::bench
