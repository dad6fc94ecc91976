// Emulated slow-memory cost model, its presets, and the cached DRAM bandwidth figure.
#include "tensortier/allocator/cost_model.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

namespace tensortier {
namespace {

// Ratios chosen from the ranges the cited measurements report; docs/EMULATION.md explains each.
constexpr std::array<SlowMemoryPreset, 3> kPresets{{
    {"optane", 1.0 / 3.0, 1.0 / 6.0, 3.0,
     "Izraelevitz et al. 2019 (arXiv:1903.05714); Yang et al., FAST 2020: Optane DC PMem "
     "read bandwidth ~1/3 and write ~1/6 of DRAM, load latency ~3x"},
    {"cxl", 0.5, 0.5, 2.0,
     "Sun et al., MICRO 2023 (Demystifying CXL Memory); Li et al., ASPLOS 2023 (Pond): a CXL "
     "memory expander gives ~1/2 of DRAM bandwidth at ~2x latency"},
    {"remote-numa", 0.6, 0.6, 1.7,
     "Two-socket Xeon remote-node figures (e.g. Maruf et al., ASPLOS 2023, TPP): ~60% of local "
     "bandwidth at ~1.7x latency"},
}};

double ns_per_byte(double gbps) {
  return 1.0 / gbps;
}  // 1 GB/s == 1 byte per ns

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with("model name")) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown";
}

std::uint64_t memory_bytes() {
  return static_cast<std::uint64_t>(sysconf(_SC_PHYS_PAGES)) *
         static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
}

std::filesystem::path cache_path() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return std::filesystem::path(xdg) / "tensortier" / "dram_bandwidth.json";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return std::filesystem::path(home) / ".cache" / "tensortier" / "dram_bandwidth.json";
  }
  return {};
}

DramBandwidth compute_dram_bandwidth() {
  if (const char* env = std::getenv("TENSORTIER_DRAM_GBPS"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    const double gbps = std::strtod(env, &end);
    if (end != env && *end == '\0' && gbps > 0 && std::isfinite(gbps)) {
      return {gbps, "TENSORTIER_DRAM_GBPS"};
    }
    spdlog::warn("TENSORTIER_DRAM_GBPS='{}' is not a positive number of GB/s; measuring instead", env);
  }
  const std::filesystem::path path = cache_path();
  const std::string cpu = cpu_model();
  const std::uint64_t mem = memory_bytes();
  if (!path.empty()) {
    std::ifstream in(path);
    if (in) {
      const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
      if (j.is_object() && j.value("cpu_model", "") == cpu &&
          j.value("memory_bytes", std::uint64_t{0}) == mem && j.value("gbps", 0.0) > 0) {
        return {j["gbps"].get<double>(), "cache " + path.string()};
      }
    }
  }
  const double gbps = measure_dram_copy_gbps(64ULL << 20, 5);
  if (!path.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(path.parent_path(), ec);
    std::ofstream out(path);
    if (out) {
      out << nlohmann::json{{"gbps", gbps}, {"cpu_model", cpu}, {"memory_bytes", mem}}.dump(2) << '\n';
    }
  }
  return {gbps, "measured now"};
}

}  // namespace

std::span<const SlowMemoryPreset> slow_memory_presets() {
  return kPresets;
}

Result<SlowMemoryPreset> find_preset(std::string_view name) {
  std::string known;
  for (const auto& p : kPresets) {
    if (p.name == name) return p;
    known += (known.empty() ? "" : ", ") + std::string(p.name);
  }
  return invalid_argument(fmt::format("unknown emulation preset '{}' (known: {})", name, known));
}

CostModel::CostModel(const SlowMemoryPreset& preset, double fast_gbps)
    : preset_(preset), fast_gbps_(fast_gbps > 0 ? fast_gbps : 1.0) {}

std::uint64_t CostModel::layer_charge_ns(std::uint64_t bytes_read, std::uint64_t bytes_written) const {
  const double fast = ns_per_byte(fast_gbps_);
  const double extra_read = std::max(0.0, ns_per_byte(slow_read_gbps()) - fast);
  const double extra_write = std::max(0.0, ns_per_byte(slow_write_gbps()) - fast);
  return static_cast<std::uint64_t>(std::llround(static_cast<double>(bytes_read) * extra_read +
                                                 static_cast<double>(bytes_written) * extra_write));
}

std::uint64_t CostModel::move_ns(std::uint64_t bytes, MoveDirection direction) const {
  const double slow = direction == MoveDirection::kIntoSlow ? slow_write_gbps() : slow_read_gbps();
  return static_cast<std::uint64_t>(
      std::llround(static_cast<double>(bytes) * ns_per_byte(std::min(slow, fast_gbps_))));
}

void spin_for_ns(std::uint64_t ns) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(ns);
  while (std::chrono::steady_clock::now() < until) {
  }
}

double measure_dram_copy_gbps(std::size_t buffer_bytes, int repetitions) {
  // Two private anonymous buffers, touched first so page faults stay out of the timing.
  void* src = mmap(nullptr, buffer_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  void* dst = mmap(nullptr, buffer_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (src == MAP_FAILED || dst == MAP_FAILED) {
    if (src != MAP_FAILED) munmap(src, buffer_bytes);
    if (dst != MAP_FAILED) munmap(dst, buffer_bytes);
    spdlog::warn("could not map {} bytes to measure DRAM bandwidth; assuming 10 GB/s", buffer_bytes);
    return 10.0;
  }
  std::memset(src, 1, buffer_bytes);
  std::memset(dst, 0, buffer_bytes);
  double best_ns = 1e300;
  for (int i = 0; i < std::max(1, repetitions); ++i) {
    const auto start = std::chrono::steady_clock::now();
    std::memcpy(dst, src, buffer_bytes);
    const auto stop = std::chrono::steady_clock::now();
    best_ns = std::min(
        best_ns,
        static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(stop - start).count()));
  }
  munmap(src, buffer_bytes);
  munmap(dst, buffer_bytes);
  return 2.0 * static_cast<double>(buffer_bytes) / std::max(best_ns, 1.0);
}

DramBandwidth dram_bandwidth() {
  static std::once_flag once;
  static DramBandwidth value;
  std::call_once(once, [] { value = compute_dram_bandwidth(); });
  return value;
}

}  // namespace tensortier
