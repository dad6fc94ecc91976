// Emulated slow-memory cost model, its presets, and the cached DRAM stream bandwidths.
#include "tensortier/allocator/cost_model.h"

#include "tensortier/settings.h"

#include <sched.h>
#include <sys/mman.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "tensortier/write_file.h"

namespace tensortier {
namespace {

// Figures chosen from the ranges the cited measurements report; docs/EMULATION.md explains each.
constexpr std::array<SlowMemoryPreset, 4> kPresets{{
    {"optane", PresetForm::kRatio, 1.0 / 3.0, 1.0 / 6.0, 3.0,
     "Izraelevitz et al. 2019 (arXiv:1903.05714); Yang et al., FAST 2020: Optane DC PMem "
     "read bandwidth ~1/3 and write ~1/6 of DRAM, load latency ~3x"},
    {"cxl", PresetForm::kRatio, 0.5, 0.5, 2.0,
     "Sun et al., MICRO 2023 (Demystifying CXL Memory); Li et al., ASPLOS 2023 (Pond): a CXL "
     "memory expander gives ~1/2 of DRAM bandwidth at ~2x latency"},
    {"remote-numa", PresetForm::kRatio, 0.6, 0.6, 1.7,
     "Two-socket Xeon remote-node figures (e.g. Maruf et al., ASPLOS 2023, TPP): ~60% of local "
     "bandwidth at ~1.7x latency"},
    {"optane-server", PresetForm::kPerCore, 1.6, 0.6, 3.0,
     "Sentinel's server (Ren et al., HPCA 2021): a 24-core Xeon Gold 6252 socket with six Optane "
     "DC PMem DIMMs; Izraelevitz et al. 2019 measure ~6.6 GB/s read and ~2.3 GB/s write a DIMM, "
     "so ~39 / ~14 GB/s a socket, ~1.6 / ~0.6 GB/s a core"},
}};

constexpr std::uint64_t kSpinTailNs = 100'000;  // wait_until_ns spins only this last stretch

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

std::optional<CachedBandwidth> read_cache(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_bandwidth_cache(text);
}

std::string kernel_release() {
  utsname u{};
  return uname(&u) == 0 ? std::string(u.release) : std::string("unknown");
}

std::int64_t unix_now_s() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string utc_time(std::int64_t unix_s) {
  const auto t = static_cast<std::time_t>(unix_s);
  std::tm tm{};
  gmtime_r(&t, &tm);
  return fmt::format("{:04}-{:02}-{:02} {:02}:{:02} UTC", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                     tm.tm_hour, tm.tm_min);
}

// The reference's buffer: far beyond any cache, the same for the probe and the full measurement
// (a smaller probe buffer partly in cache reads faster, and would replace good entries).
constexpr std::size_t kReferenceBufferBytes = std::size_t{128} << 20;

FastBandwidth compute_dram_bandwidth() {
  const unsigned threads = engine_threads();
  if (Result<std::optional<double>> given = dram_gbps_setting(); given && given->has_value()) {
    return {**given, **given, threads, "TENSORTIER_DRAM_GBPS"};
  } else if (!given) {  // (an emulated tier refuses to open with it: see open_emulated_tier)
    spdlog::warn("{}; measuring instead", given.status().message());
  }
  const std::filesystem::path path = cache_path();
  const BandwidthConditions now = bandwidth_conditions();
  const std::int64_t now_s = unix_now_s();
  const std::optional<CachedBandwidth> cached = path.empty() ? std::nullopt : read_cache(path);
  std::string why = bandwidth_cache_stale(cached, now, now_s, std::nullopt);
  std::optional<FastBandwidth> probe;
  if (why.empty()) {  // a quick probe now (~50 ms; the same buffer): an entry measured under load is slower
    probe = measure_dram_streams(kReferenceBufferBytes, threads, 3);
    why = bandwidth_cache_stale(cached, now, now_s, probe);
  }
  if (why.empty()) {
    FastBandwidth used = cached->bandwidth;
    used.source =
        fmt::format("cache {}, measured {}; a probe now: read {:.1f}, write {:.1f} GB/s", path.string(),
                    utc_time(cached->measured_at_s), probe->read_gbps, probe->write_gbps);
    return used;
  }
  FastBandwidth measured = measure_dram_streams(kReferenceBufferBytes, threads, 7);
  if (measured.source != "measured now") return measured;  // not measured: nothing to cache
  if (probe) {  // the probe that found the cache stale is a measurement of now too: the best of all
    measured.read_gbps = std::max(measured.read_gbps, probe->read_gbps);
    measured.write_gbps = std::max(measured.write_gbps, probe->write_gbps);
  }
  measured.source = fmt::format("measured {}, best of {} probes ({})", utc_time(now_s), probe ? 10 : 7, why);
  if (!path.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(path.parent_path(), ec);
    const CachedBandwidth entry{measured, now, now_s};
    if (Status s = write_file_replacing(path.string(), bandwidth_cache_text(entry), "the DRAM reference");
        !s.is_ok())
      spdlog::info("{}", s.message());  // a hint not kept: the next process measures again
  }
  return measured;
}

// Runs body(thread_index) on `threads` threads (the calling one among them) and returns the
// wall time of the slowest, in ns.
template <typename Body>
// Negative where a helper thread could not be started (no timing then).
double timed_on_threads(unsigned threads, Body body) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> helpers;
  try {
    for (unsigned t = 1; t < threads; ++t) helpers.emplace_back(body, t);
  } catch (const std::system_error&) {
    for (std::thread& h : helpers) h.join();
    return -1;
  }
  body(0U);
  for (std::thread& h : helpers) h.join();
  return static_cast<double>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
}

}  // namespace

std::string_view to_string(PresetForm form) {
  return form == PresetForm::kRatio ? "ratio" : "per core";
}

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

CostModel::CostModel(const SlowMemoryPreset& preset, const FastBandwidth& fast)
    : preset_(preset),
      fast_read_gbps_(fast.read_gbps > 0 ? fast.read_gbps : 1.0),
      fast_write_gbps_(fast.write_gbps > 0 ? fast.write_gbps : 1.0),
      threads_(std::max(1U, fast.threads)),
      reference_source_(fast.source) {
  const double read = preset.form == PresetForm::kRatio ? fast_read_gbps_ * preset.read
                                                        : preset.read * static_cast<double>(threads_);
  const double write = preset.form == PresetForm::kRatio ? fast_write_gbps_ * preset.write
                                                         : preset.write * static_cast<double>(threads_);
  // Slow memory is never faster than fast memory (a per-core figure on a machine slower than the
  // published one would say so).
  slow_read_gbps_ = std::min(read, fast_read_gbps_);
  slow_write_gbps_ = std::min(write, fast_write_gbps_);
}

std::string CostModel::describe() const {
  if (preset_.form == PresetForm::kRatio) {
    return fmt::format("{} (ratio: read {:.2f}, write {:.2f} of DRAM)", preset_.name, preset_.read,
                       preset_.write);
  }
  return fmt::format("{} (per core: {:.1f} GB/s read, {:.1f} GB/s write a core x {} threads)", preset_.name,
                     preset_.read, preset_.write, threads_);
}

std::string CostModel::reference() const {
  return fmt::format("DRAM reference: read {:.1f}, write {:.1f} GB/s with {} threads ({})", fast_read_gbps_,
                     fast_write_gbps_, threads_, reference_source_.empty() ? "given" : reference_source_);
}

std::uint64_t CostModel::layer_charge_ns(std::uint64_t bytes_read, std::uint64_t bytes_written) const {
  const double extra_read = std::max(0.0, ns_per_byte(slow_read_gbps_) - ns_per_byte(fast_read_gbps_));
  const double extra_write = std::max(0.0, ns_per_byte(slow_write_gbps_) - ns_per_byte(fast_write_gbps_));
  return static_cast<std::uint64_t>(std::llround(static_cast<double>(bytes_read) * extra_read +
                                                 static_cast<double>(bytes_written) * extra_write));
}

std::uint64_t CostModel::slow_traffic_ns(std::uint64_t bytes_read, std::uint64_t bytes_written) const {
  return static_cast<std::uint64_t>(
      std::llround(static_cast<double>(bytes_read) * ns_per_byte(slow_read_gbps_) +
                   static_cast<double>(bytes_written) * ns_per_byte(slow_write_gbps_)));
}

std::uint64_t CostModel::move_ns(std::uint64_t bytes, MoveDirection direction) const {
  const double slow = direction == MoveDirection::kIntoSlow ? slow_write_gbps_ : slow_read_gbps_;
  return static_cast<std::uint64_t>(std::llround(static_cast<double>(bytes) * ns_per_byte(slow)));
}

std::uint64_t steady_now_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

void spin_for_ns(std::uint64_t ns) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(ns);
  while (std::chrono::steady_clock::now() < until) {
  }
}

void wait_until_ns(std::uint64_t deadline_ns) {
  const std::uint64_t now = steady_now_ns();
  if (now >= deadline_ns) return;
  if (deadline_ns - now > kSpinTailNs) {
    std::this_thread::sleep_for(std::chrono::nanoseconds(deadline_ns - now - kSpinTailNs));
  }
  while (steady_now_ns() < deadline_ns) {
  }
}

void sleep_until_ns(std::uint64_t deadline_ns) {
  const std::uint64_t now = steady_now_ns();
  if (now < deadline_ns) std::this_thread::sleep_for(std::chrono::nanoseconds(deadline_ns - now));
}

unsigned engine_threads() {
  if (const char* env = std::getenv("OMP_NUM_THREADS"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (end != env && (*end == '\0' || *end == ',') && n > 0 && n < 65536) return static_cast<unsigned>(n);
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
    return static_cast<unsigned>(CPU_COUNT(&set));
  return std::max(1U, std::thread::hardware_concurrency());
}

FastBandwidth measure_dram_streams(std::size_t buffer_bytes, unsigned threads, int repetitions) {
  threads = std::max(1U, threads);
  const std::size_t unit = std::size_t{64} * threads;
  buffer_bytes = std::max<std::size_t>(buffer_bytes / unit * unit, unit);
  void* buffer = mmap(nullptr, buffer_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (buffer == MAP_FAILED) {
    spdlog::warn("could not map {} bytes to measure DRAM bandwidth; assuming 10 GB/s", buffer_bytes);
    return {10.0, 10.0, threads, "assumed (no memory to measure)"};
  }
  (void)madvise(buffer, buffer_bytes, MADV_HUGEPAGE);
  std::memset(buffer, 1, buffer_bytes);  // page faults stay out of the timing
  const std::size_t slice = buffer_bytes / threads;
  auto* base = static_cast<unsigned char*>(buffer);
  std::vector<std::uint64_t> sums(threads, 0);
  double best_read_ns = 1e300, best_write_ns = 1e300;
  for (int i = 0; i < std::max(1, repetitions); ++i) {
    best_read_ns = std::min(best_read_ns, timed_on_threads(threads, [&](unsigned t) {
                              const auto* words = reinterpret_cast<const std::uint64_t*>(base + t * slice);
                              std::uint64_t a = 0, b = 0, c = 0, d = 0;
                              for (std::size_t k = 0; k + 4 <= slice / 8; k += 4) {
                                a += words[k];
                                b += words[k + 1];
                                c += words[k + 2];
                                d += words[k + 3];
                              }
                              sums[t] += a + b + c + d;  // kept so the loads are not optimized away
                            }));
    best_write_ns = std::min(best_write_ns, timed_on_threads(threads, [&](unsigned t) {
                               std::memset(base + t * slice, i & 0xff, slice);
                             }));
  }
  munmap(buffer, buffer_bytes);
  if (best_read_ns < 0 || best_write_ns < 0) {
    spdlog::warn("could not start the threads to measure DRAM bandwidth; assuming 10 GB/s");
    return {10.0, 10.0, threads, "assumed (no thread to measure with)"};
  }
  std::uint64_t total = 0;
  for (std::uint64_t s : sums) total += s;
  if (total == 1) spdlog::debug("bandwidth checksum {}", total);
  const auto bytes = static_cast<double>(buffer_bytes);
  return {bytes / std::max(best_read_ns, 1.0), bytes / std::max(best_write_ns, 1.0), threads, "measured now"};
}

BandwidthConditions bandwidth_conditions() {
  return {cpu_model(), memory_bytes(), engine_threads(), kernel_release()};
}

Result<std::optional<double>> dram_gbps_setting() {
  return settings::env_number("TENSORTIER_DRAM_GBPS", kLeastDramGbps, kMostDramGbps, "GB/s");
}

FastBandwidth dram_bandwidth() {
  static std::once_flag once;
  static FastBandwidth value;
  std::call_once(once, [] { value = compute_dram_bandwidth(); });
  return value;
}

}  // namespace tensortier
