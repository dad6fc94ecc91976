// Per-layer counters from PAPI, perf_event_open or getrusage (see counters.h).
#include "tensortier/profiler/counters.h"

#include "threads.h"

#include <linux/perf_event.h>
#include <papi.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <mutex>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace tensortier::profiler {
namespace {

// 1. PAPI hardware events, one event set attached to each thread.
class PapiCounters final : public Counters {
 public:
  // Null, with the reason in `why`, when PAPI has none of the events here.
  static std::unique_ptr<PapiCounters> open(std::string* why) {
    if (PAPI_is_initialized() == PAPI_NOT_INITED) {
      const int version = PAPI_library_init(PAPI_VER_CURRENT);
      if (version != PAPI_VER_CURRENT) {
        *why = fmt::format("PAPI: library_init failed ({})",
                           version < 0 ? PAPI_strerror(version) : "version mismatch");
        return nullptr;
      }
    }
    constexpr std::array<std::pair<int, const char*>, 4> kWanted{{{PAPI_TOT_CYC, "cycles"},
                                                                  {PAPI_TOT_INS, "instructions"},
                                                                  {PAPI_L3_TCM, "llc_misses"},
                                                                  {PAPI_MEM_SCY, "memory_stall_cycles"}}};
    auto out = std::unique_ptr<PapiCounters>(new PapiCounters());
    for (const auto& [code, name] : kWanted) {
      if (PAPI_query_event(code) == PAPI_OK) {
        out->codes_.push_back(code);
        out->names_.emplace_back(name);
      }
    }
    if (out->codes_.empty()) {
      *why = fmt::format("PAPI {}.{}.{}: no hardware events on this machine (PAPI_TOT_CYC: {})",
                         PAPI_VERSION_MAJOR(PAPI_VERSION), PAPI_VERSION_MINOR(PAPI_VERSION),
                         PAPI_VERSION_REVISION(PAPI_VERSION), PAPI_strerror(PAPI_query_event(PAPI_TOT_CYC)));
      return nullptr;
    }
    for (pid_t tid : process_threads()) {
      int set = PAPI_NULL;
      if (PAPI_create_eventset(&set) != PAPI_OK) continue;
      bool ok = PAPI_assign_eventset_component(set, 0) == PAPI_OK &&
                PAPI_attach(set, static_cast<unsigned long>(tid)) == PAPI_OK;
      for (int code : out->codes_) ok = ok && PAPI_add_event(set, code) == PAPI_OK;
      ok = ok && PAPI_start(set) == PAPI_OK;
      if (!ok) {
        PAPI_cleanup_eventset(set);
        PAPI_destroy_eventset(&set);
        continue;
      }
      out->sets_.push_back(set);
    }
    if (out->sets_.empty()) {
      *why = "PAPI: its events exist but could not be attached to this process's threads";
      return nullptr;
    }
    out->source_ = fmt::format("PAPI ({} threads)", out->sets_.size());
    return out;
  }
  ~PapiCounters() override {
    std::vector<long long> values(codes_.size());
    for (int set : sets_) {
      PAPI_stop(set, values.data());
      PAPI_cleanup_eventset(set);
      PAPI_destroy_eventset(&set);
    }
  }
  std::vector<double> read() override {
    std::vector<double> sum(codes_.size(), 0.0);
    std::vector<long long> values(codes_.size());
    for (int set : sets_) {
      if (PAPI_read(set, values.data()) != PAPI_OK) continue;
      for (std::size_t i = 0; i < values.size(); ++i) sum[i] += static_cast<double>(values[i]);
    }
    return sum;
  }

 private:
  PapiCounters() = default;
  std::vector<int> codes_;
  std::vector<int> sets_;
};

// 2. perf_event_open software counters on each thread.
class PerfSoftwareCounters final : public Counters {
 public:
  static std::unique_ptr<PerfSoftwareCounters> open(std::string* why) {
    constexpr std::array<std::pair<std::uint64_t, const char*>, 2> kEvents{
        {{PERF_COUNT_SW_PAGE_FAULTS, "page_faults"}, {PERF_COUNT_SW_TASK_CLOCK, "task_clock_ns"}}};
    auto out = std::unique_ptr<PerfSoftwareCounters>(new PerfSoftwareCounters());
    for (const auto& [config, name] : kEvents) out->names_.emplace_back(name);
    int last_errno = 0;
    for (pid_t tid : process_threads()) {
      std::vector<int> fds;
      for (const auto& [config, name] : kEvents) {
        perf_event_attr attr{};
        attr.size = sizeof(attr);
        attr.type = PERF_TYPE_SOFTWARE;
        attr.config = config;
        attr.exclude_kernel = 1;  // allowed at perf_event_paranoid 2; faults are still counted (user regs)
        attr.exclude_hv = 1;
        const long fd = syscall(SYS_perf_event_open, &attr, tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
        if (fd < 0) {
          last_errno = errno;
          break;
        }
        fds.push_back(static_cast<int>(fd));
      }
      if (fds.size() != kEvents.size()) {
        for (int fd : fds) close(fd);
        continue;
      }
      out->fds_.push_back(std::move(fds));
    }
    if (out->fds_.empty()) {
      *why = fmt::format("perf_event_open: {} (see /proc/sys/kernel/perf_event_paranoid)",
                         strerrordesc_np(last_errno));
      return nullptr;
    }
    out->source_ = fmt::format("perf_event software ({} threads)", out->fds_.size());
    return out;
  }
  ~PerfSoftwareCounters() override {
    for (const auto& fds : fds_) {
      for (int fd : fds) close(fd);
    }
  }
  std::vector<double> read() override {
    std::vector<double> sum(names_.size(), 0.0);
    for (const auto& fds : fds_) {
      for (std::size_t i = 0; i < fds.size(); ++i) {
        std::uint64_t value = 0;
        if (::read(fds[i], &value, sizeof(value)) == static_cast<ssize_t>(sizeof(value))) {
          sum[i] += static_cast<double>(value);
        }
      }
    }
    return sum;
  }

 private:
  PerfSoftwareCounters() = default;
  std::vector<std::vector<int>> fds_;  // per thread, one per event
};

// 3. getrusage: always there, process-wide.
class RusageCounters final : public Counters {
 public:
  RusageCounters() {
    source_ = "getrusage";
    names_ = {"page_faults", "cpu_time_ns"};
  }
  std::vector<double> read() override {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    auto ns = [](const timeval& t) {
      return static_cast<double>(t.tv_sec) * 1e9 + static_cast<double>(t.tv_usec) * 1e3;
    };
    return {static_cast<double>(usage.ru_minflt + usage.ru_majflt), ns(usage.ru_utime) + ns(usage.ru_stime)};
  }
};

}  // namespace

std::unique_ptr<Counters> Counters::open() {
  std::vector<std::string> notes;
  std::unique_ptr<Counters> chosen;
  std::string why;
  // PAPI and perf_event attach to each thread: where the threads cannot be listed (no file
  // descriptor left) neither is tried (PAPI's init was seen to corrupt the heap then).
  if (!list_process_threads(&why)) {
    notes.push_back("hardware and perf_event counters not tried: " + why);
    chosen = std::make_unique<RusageCounters>();
  } else if (auto papi = PapiCounters::open(&why)) {
    chosen = std::move(papi);
  } else {
    notes.push_back(why);
    if (auto perf = PerfSoftwareCounters::open(&why)) {
      chosen = std::move(perf);
    } else {
      notes.push_back(why);
      chosen = std::make_unique<RusageCounters>();
    }
  }
  chosen->notes_ = std::move(notes);
  static std::once_flag logged;
  std::call_once(logged, [&] {
    std::string reasons;
    for (const std::string& n : chosen->notes_) reasons += "; " + n;
    spdlog::info("profiler counters: {}{}", chosen->source_, reasons);
  });
  return chosen;
}

}  // namespace tensortier::profiler
