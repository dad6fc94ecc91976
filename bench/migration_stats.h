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
  double mover_busy_ms = 0;                        // its wall time in moves
};

// The counts from `before` to `now`, divided by `steps` (taken as 1 when below it).
inline MigrationPerStep migration_per_step(const migrator::ExecutorStats& before,
                                           const migrator::ExecutorStats& now, double steps) {
  const double n = steps < 1 ? 1 : steps;
  const migrator::ExecutorStats d = migrator::since(now, before);
  const auto per = [n](std::uint64_t count) { return static_cast<double>(count) / n; };
  constexpr double kMiB = 1 << 20;
  return {per(d.bytes_in) / kMiB, per(d.bytes_out) / kMiB,   per(d.copied_bytes) / kMiB, per(d.late_dropped),
          per(d.failed_moves),    per(d.mover_cpu_ns) / 1e6, per(d.mover_busy_ns) / 1e6};
}

}  // namespace tensortier::bench
