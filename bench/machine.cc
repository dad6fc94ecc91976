#include "machine.h"

#include <sched.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <fmt/format.h>
#include <oneapi/dnnl/dnnl.h>

#include "tensortier/allocator/cost_model.h"
#include "tensortier/allocator/topology.h"

#ifndef TENSORTIER_VERSION
#define TENSORTIER_VERSION "unknown"
#endif

namespace tensortier::bench {

using nlohmann::json;

namespace {

// The first line of a file, or null when it cannot be read.
json first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return nullptr;
  return line;
}

json cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("model name")) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return nullptr;
}

}  // namespace

nlohmann::json machine_record() {
  json r;
  r["cpu"] = cpu_model();
  r["cpus_online"] = sysconf(_SC_NPROCESSORS_ONLN);
  cpu_set_t set;
  CPU_ZERO(&set);
  r["cpus_allowed"] = sched_getaffinity(0, sizeof set, &set) == 0 ? json(CPU_COUNT(&set)) : json(nullptr);
  r["threads_used"] = engine_threads();  // oneDNN's threads (OMP_NUM_THREADS or the cores allowed)
  utsname u{};
  if (uname(&u) == 0) {
    r["kernel"] = fmt::format("{} {} {}", u.sysname, u.release, u.machine);
  } else {
    r["kernel"] = nullptr;
  }
  json nodes = json::array();
  if (auto topo = discover_topology(); topo) {
    for (const MemoryNode& n : topo.value().nodes) {
      json node{{"node", n.os_index},
                {"capacity_bytes", n.capacity_bytes},
                {"cpu_less", n.cpu_less},
                {"subtype", n.subtype},
                {"cpus", first_line(fmt::format("/sys/devices/system/node/node{}/cpulist", n.os_index))}};
      node["hmat_bandwidth_mibps"] = n.bandwidth_mibps ? json(*n.bandwidth_mibps) : json(nullptr);
      node["hmat_latency_ns"] = n.latency_ns ? json(*n.latency_ns) : json(nullptr);
      nodes.push_back(std::move(node));
    }
    r["ranking_basis"] = topo.value().ranking_basis;
  } else {
    r["ranking_basis"] = topo.status().message();
  }
  r["numa_nodes"] = nodes;
  json tiering{{"numa_balancing", first_line("/proc/sys/kernel/numa_balancing")},
               {"demotion_enabled", first_line("/sys/kernel/mm/numa/demotion_enabled")},
               {"transparent_hugepage", first_line("/sys/kernel/mm/transparent_hugepage/enabled")}};
  json tiers = json::object();
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/sys/devices/virtual/memory_tiering", ec)) {
    if (entry.path().filename().string().starts_with("memory_tier"))
      tiers[entry.path().filename().string()] = first_line(entry.path() / "nodelist");
  }
  tiering["memory_tiers"] = tiers;
  r["tiering"] = tiering;
  const dnnl_version_t* v = dnnl_version();
  r["onednn"] = fmt::format("{}.{}.{} ({})", v->major, v->minor, v->patch, v->hash);
  r["tensortier"] = TENSORTIER_VERSION;
  return r;
}

std::string machine_line(const nlohmann::json& r) {
  std::string cpu_less;
  std::size_t nodes = 0;
  if (r.contains("numa_nodes")) {
    for (const json& n : r.at("numa_nodes")) {
      ++nodes;
      if (n.value("cpu_less", false))
        cpu_less += fmt::format("{}node {} CPU-less", cpu_less.empty() ? "" : ", ", n.at("node").get<int>());
    }
  }
  return fmt::format(
      "{}, {} cores ({} used), {} NUMA node{}{}, {}",
      r.value("cpu", json("unknown CPU")).is_string() ? r.at("cpu").get<std::string>() : "unknown CPU",
      r.value("cpus_online", 0L), r.value("threads_used", 0U), nodes, nodes == 1 ? "" : "s",
      cpu_less.empty() ? "" : " (" + cpu_less + ")",
      r.value("kernel", json("")).is_string() ? r.at("kernel").get<std::string>() : "unknown kernel");
}

long process_page_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt + usage.ru_majflt;
}

long tlb_shootdowns() {
  std::ifstream in("/proc/interrupts");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string name;
    fields >> name;
    if (name != "TLB:") continue;
    long total = 0, count = 0;
    while (fields >> count) total += count;
    return total;
  }
  return -1;
}

}  // namespace tensortier::bench
