// The machine a benchmark ran on, recorded with every result of tensortier-bench so that a figure
// can be read against the hardware and settings that produced it: CPU and the cores used, NUMA
// nodes with their sizes, CPUs and hwloc memory attributes (HMAT bandwidth and latency), the
// kernel and its tiering settings (NUMA balancing, demotion, memory tiers), the oneDNN and
// tensortier versions.
//
// Reads /proc, /sys, uname and hwloc; what it cannot read is recorded as null, never guessed.
// Thread-safe (each call reads afresh).
#pragma once

#include <nlohmann/json.hpp>

namespace tensortier::bench {

nlohmann::json machine_record();

// One line for people: "CPU, N cores (M used), K NUMA nodes (node 1 CPU-less), Linux x.y".
std::string machine_line(const nlohmann::json& record);

// Counters read around a measured step: this process's page faults (minor and major), and the
// machine's TLB shootdown interrupts so far (the "TLB" line of /proc/interrupts summed over CPUs:
// every process's, so a busy neighbour adds to it); -1 where /proc has no such line.
long process_page_faults();
long tlb_shootdowns();

}  // namespace tensortier::bench
