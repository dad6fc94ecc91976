// Page-protection fault tracking (see fault_tracker.h).
#include "tensortier/profiler/fault_tracker.h"

#include "tensortier/profiler/alt_stacks.h"

#include "async_writes.h"
#include "threads.h"

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <sys/syscall.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <thread>

#include <fmt/format.h>

namespace tensortier::profiler {
namespace {

std::atomic<FaultTracker*> g_active{nullptr};  // the installed tracker, read by the handler
std::atomic<int> g_in_handler{0};              // handlers between reading g_active and done with it
struct sigaction g_previous {};                // the handler before ours; written before install

// Per-unit flags, set by the handler, cleared by collect().
constexpr std::uint8_t kRead = 1;     // first access in the interval was a read
constexpr std::uint8_t kWritten = 2;  // written in the interval
constexpr std::uint8_t kSampled = 4;  // re-protected by sample(); the next fault is a re-touch

constexpr std::uint64_t kWeightOne = 1024;  // fixed-point 1.0 for re-touch weights

// Passes a fault we do not own to the handler that was there before. For the default action (or
// SIG_IGN, which cannot ignore a real fault) restore it and return: the instruction faults again
// and the process dies of SIGSEGV exactly as it would have without us.
void chain(int signal, siginfo_t* info, void* ucontext) {
  if ((g_previous.sa_flags & SA_SIGINFO) != 0 && g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(signal, info, ucontext);
    return;
  }
  if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(signal);
    return;
  }
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  sigaction(SIGSEGV, &default_action, nullptr);
}

// A fault the tracker does not own may still be one it caused: a thread faults on a watched
// span, and before its handler looks, another thread unwatches the span (a free, the end of the
// profile) or a new tracker replaces this one; the page is accessible by then. Passing that fault
// on would be fatal (the default action). So a thread's first declined protection fault at an
// address is retried: the handler returns, and the instruction runs again. A second fault at the
// same address on the same thread within kRetryWindowNs is real and is passed on. Each thread's
// last declined fault sits in a slot by thread id (a rare collision costs one more retry).
constexpr std::size_t kDeclineSlots = 256;
constexpr std::int64_t kRetryWindowNs = 100'000'000;
struct Declined {
  std::atomic<std::uint64_t> key{0};
  std::atomic<std::int64_t> at_ns{0};
};
Declined g_declined[kDeclineSlots];

// True the first time this thread declines a fault at `address` (retry it); false when the
// retry faulted there again (pass it on). Async-signal-safe: gettid, clock_gettime, atomics.
bool first_decline(const void* address) {
  const auto tid = static_cast<std::uint64_t>(syscall(SYS_gettid));
  const std::uint64_t key = (reinterpret_cast<std::uintptr_t>(address) ^ (tid << 48)) | 1;
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  const std::int64_t now_ns = std::int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec;
  Declined& d = g_declined[tid % kDeclineSlots];
  if (d.key.load(std::memory_order_relaxed) == key &&
      now_ns - d.at_ns.load(std::memory_order_relaxed) < kRetryWindowNs) {
    d.key.store(0, std::memory_order_relaxed);
    return false;
  }
  d.key.store(key, std::memory_order_relaxed);
  d.at_ns.store(now_ns, std::memory_order_relaxed);
  return true;
}

std::size_t hash_base(std::uintptr_t base) {
  return static_cast<std::size_t>((base >> 12) * 0x9E3779B97F4A7C15ull >> 17);
}

}  // namespace

struct FaultTracker::SpanState {
  SpanView span;
  std::uint64_t unit_bytes = 0;
  std::uint64_t units = 0;
  std::unique_ptr<std::atomic<std::uint8_t>[]> flags;
  std::atomic<bool> touched{false};  // some unit has flags this interval
  std::atomic<bool> coarse{false};   // the whole span was granted read-write (mprotect of a unit failed)
  // Cleared by unwatch before it unprotects the span: a handler whose grant may land after that
  // unprotection (a read fault's PROT_READ) then makes the unit read-write again.
  std::atomic<bool> watched{true};
  bool async = false;  // registered with AsyncWrites: writes told by the kernel
  std::atomic<std::uint64_t> faults{0};
  std::atomic<std::uint64_t> retouch_weight{0};  // sum of sampled re-touch weights (kWeightOne = 1)

  void* unit_address(std::uint64_t unit) const {
    return reinterpret_cast<void*>(span.base + unit * unit_bytes);
  }
  std::size_t unit_length(std::uint64_t first, std::uint64_t count) const {
    const std::uint64_t end = std::min(span.bytes, (first + count) * unit_bytes);
    return static_cast<std::size_t>(end - first * unit_bytes);
  }
};

FaultTracker::FaultTracker(Lookup lookup, const void* context, Options options)
    : lookup_(lookup), context_(context), options_(options) {
  const std::size_t capacity = std::bit_ceil(std::max<std::size_t>(options.max_spans * 2, 64));
  table_ = std::make_unique<Entry[]>(capacity);
  table_mask_ = capacity - 1;
}

void FaultTracker::on_signal(int signal, siginfo_t* info, void* ucontext) {
  // Counted in g_in_handler while it may use the tracker: the destructor waits for it to leave.
  g_in_handler.fetch_add(1);
  FaultTracker* tracker = g_active.load();
  bool owned = false;
  if (tracker != nullptr && info != nullptr && info->si_code == SEGV_ACCERR) {
    bool is_write = false;
    bool write_known = false;
#if defined(__x86_64__)
    // The page-fault error code's bit 1 says the access was a write.
    is_write = (static_cast<const ucontext_t*>(ucontext)->uc_mcontext.gregs[REG_ERR] & 0x2) != 0;
    write_known = true;
#endif
    owned = tracker->handle_owned(info->si_addr, is_write, write_known);
  }
  g_in_handler.fetch_sub(1);
  if (owned) return;
  // A protection fault (not an unmapped address) may be one a concurrent unwatch has just made
  // stale: retry it once before passing it on (first_decline).
  if (info != nullptr && info->si_code == SEGV_ACCERR && first_decline(info->si_addr)) return;
  chain(signal, info, ucontext);
}

FaultTracker::Entry* FaultTracker::find_entry(std::uintptr_t base) const {
  for (std::size_t i = hash_base(base) & table_mask_, probes = 0; probes <= table_mask_;
       i = (i + 1) & table_mask_, ++probes) {
    const std::uintptr_t b = table_[i].base.load(std::memory_order_acquire);
    if (b == base) return &table_[i];
    if (b == 0) return nullptr;
  }
  return nullptr;
}

bool FaultTracker::handle_owned(const void* address, bool is_write, bool write_known) {
  SpanView span;
  if (!lookup_(context_, address, &span)) return false;
  Entry* entry = find_entry(span.base);
  if (entry == nullptr) return false;
  SpanState* s = entry->state.load(std::memory_order_acquire);
  if (s == nullptr || s->span.id != span.id || s->span.is_group != span.is_group ||
      s->span.bytes != span.bytes) {
    return false;  // not watched (any more): not ours
  }
  const std::uint64_t unit = (reinterpret_cast<std::uintptr_t>(address) - span.base) / s->unit_bytes;
  if (!s->watched.load()) {
    // Being unwatched (the span is freed, or the profile ends): it is on its way to read-write.
    mprotect(s->unit_address(unit), s->unit_length(unit, 1), PROT_READ | PROT_WRITE);
    return true;
  }
  std::atomic<std::uint8_t>& flag = s->flags[unit];
  const std::uint8_t before = flag.load(std::memory_order_relaxed);
  if (!write_known) {
    // Without the error code: a fault on a unit already readable (and not re-protected) is a write.
    is_write = (before & kRead) != 0 && (before & kSampled) == 0;
  }
  if ((before & kSampled) != 0 && (flag.fetch_and(static_cast<std::uint8_t>(~kSampled)) & kSampled) != 0) {
    s->retouch_weight.fetch_add(retouch_weight_.load(std::memory_order_relaxed), std::memory_order_relaxed);
  }
  // A read of a unit already written in this interval reads the interval's own data (it faults
  // again only because sample() re-protected it, or a concurrent write's grant is under way): it
  // is not a read of what the unit held before, so it does not count as one.
  const std::uint8_t bit = is_write ? kWritten : ((before & kWritten) != 0 ? std::uint8_t{0} : kRead);
  const std::uint8_t now = static_cast<std::uint8_t>(flag.fetch_or(bit) | bit);
  s->touched.store(true, std::memory_order_relaxed);
  s->faults.fetch_add(1, std::memory_order_relaxed);
  faults_.fetch_add(1, std::memory_order_relaxed);
  stack_t stack{};
  if (sigaltstack(nullptr, &stack) == 0 && (stack.ss_flags & SS_ONSTACK) == 0) {
    faults_off_alt_stack_.fetch_add(1, std::memory_order_relaxed);
  }
  const int prot = (now & kWritten) != 0 || s->async ? PROT_READ | PROT_WRITE : PROT_READ;
  if (mprotect(s->unit_address(unit), s->unit_length(unit, 1), prot) != 0) {
    // Splitting the mapping failed (vm.max_map_count): grant the whole span, record it as coarse.
    if (mprotect(reinterpret_cast<void*>(span.base), span.bytes, PROT_READ | PROT_WRITE) != 0) return false;
    s->coarse.store(true, std::memory_order_relaxed);
  }
  // An unwatch on another thread may have unprotected the span just before this grant, which
  // would then leave the unit read-only for good (a later write: a fault nobody owns). It clears
  // `watched` before it unprotects, so seeing it set here means its unprotection comes after.
  if (prot != (PROT_READ | PROT_WRITE) && !s->watched.load())
    mprotect(s->unit_address(unit), s->unit_length(unit, 1), PROT_READ | PROT_WRITE);
  return true;
}

Result<std::unique_ptr<FaultTracker>> FaultTracker::install(Lookup lookup, const void* context,
                                                            Options options) {
  if (lookup == nullptr) return invalid_argument("FaultTracker::install: no lookup function");
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  if (options.unit_bytes == 0 || options.unit_bytes % page != 0) {
    return invalid_argument(
        fmt::format("FaultTracker::install: unit of {} bytes is not a multiple of the {}-byte page",
                    options.unit_bytes, page));
  }
  std::unique_ptr<FaultTracker> tracker(new FaultTracker(lookup, context, options));
  FaultTracker* expected = nullptr;
  if (!g_active.compare_exchange_strong(expected, tracker.get())) {
    return failed_precondition(
        "a FaultTracker is already installed (one profile at a time); destroy it first");
  }
  std::size_t without = options.threads_without_alt_stack;
  if (!options.alt_stacks_given) {
    Result<AltStackHandout> handout = give_threads_alt_stacks();
    if (!handout) return handout.status();  // the tracker's destructor uninstalls it
    without = handout->unanswered + handout->running;
  }
  tracker->threads_without_alt_stack_ = without;
  if (options.async_writes) {
    std::string why;
    tracker->async_ = AsyncWrites::open(&why);
    tracker->write_tracking_ = tracker->async_ ? "userfaultfd WP_ASYNC" : "page protection (" + why + ")";
  } else {
    tracker->write_tracking_ = "page protection";
  }
  struct sigaction action {};
  action.sa_sigaction = &FaultTracker::on_signal;
  action.sa_flags = SA_SIGINFO | SA_NODEFER;  // a chained handler may fault again
  action.sa_flags |= SA_ONSTACK;              // see give_threads_alt_stacks()
  sigemptyset(&action.sa_mask);
  // Ours stays installed once it is (see ~FaultTracker): install it, and take the handler before
  // it as the one to pass faults on to, only where the current one is not ours (the first
  // install, or the program installed its own since).
  struct sigaction current {};
  if (sigaction(SIGSEGV, nullptr, &current) != 0) return internal_error("sigaction(SIGSEGV) failed");
  const bool ours = (current.sa_flags & SA_SIGINFO) != 0 && current.sa_sigaction == &FaultTracker::on_signal;
  if (!ours) {
    g_previous = current;
    if (sigaction(SIGSEGV, &action, nullptr) != 0) return internal_error("sigaction(SIGSEGV) failed");
  }
  return tracker;
}

FaultTracker::~FaultTracker() {
  unwatch_all();
  // The handler is not uninstalled: a thread may have faulted on a span before the unwatch and
  // not yet been given the signal (the kernel delivers it when the thread next runs, with the
  // handler installed then). With ours still there, that fault is retried (first_decline) and
  // goes on, the page being accessible now; a real fault is passed on to the handler before ours.
  // Only where this one is installed: a tracker whose install found another one there must leave
  // that one active (clearing it left the other profile's faults to nobody: a crash).
  FaultTracker* self = this;
  if (g_active.compare_exchange_strong(self, nullptr)) {
    // A handler that found this tracker before the exchange may still be reading its spans'
    // state: wait for it before they are freed (handlers take microseconds).
    while (g_in_handler.load() != 0) std::this_thread::yield();
  }
  async_.reset();
}

Status FaultTracker::watch(const SpanView& span) {
  const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  if (span.base % page != 0 || span.bytes == 0 || span.bytes % page != 0) {
    return invalid_argument(fmt::format("FaultTracker::watch: span {} at {:#x} ({} bytes) is not whole pages",
                                        span.id, span.base, span.bytes));
  }
  std::lock_guard lock(mutex_);
  if (auto it = watched_.find(span.base); it != watched_.end()) {
    const SpanView& w = it->second->span;
    if (w.id == span.id && w.bytes == span.bytes && w.is_group == span.is_group) return Status::ok();
  }
  Entry* entry = find_entry(span.base);
  if (entry == nullptr) {
    if (used_entries_ >= options_.max_spans) {
      return out_of_memory(fmt::format("FaultTracker: more than {} distinct spans; raise Options::max_spans",
                                       options_.max_spans));
    }
    std::size_t i = hash_base(span.base) & table_mask_;
    while (table_[i].base.load(std::memory_order_relaxed) != 0) i = (i + 1) & table_mask_;
    entry = &table_[i];
    entry->base.store(span.base, std::memory_order_release);
    ++used_entries_;
  }
  auto state = std::make_unique<SpanState>();
  state->span = span;
  state->unit_bytes = std::min<std::uint64_t>(options_.unit_bytes, span.bytes);
  state->units = (span.bytes + state->unit_bytes - 1) / state->unit_bytes;
  state->flags = std::make_unique<std::atomic<std::uint8_t>[]>(state->units);
  SpanState* raw = state.get();
  states_.push_back(std::move(state));
  watched_[span.base] = raw;
  if (async_ != nullptr) raw->async = async_->add(span.base, span.bytes);
  // Publish before protecting: a fault right after mprotect must find the state.
  entry->state.store(raw, std::memory_order_release);
  if (mprotect(reinterpret_cast<void*>(span.base), span.bytes, PROT_NONE) != 0) {
    entry->state.store(nullptr, std::memory_order_release);
    watched_.erase(span.base);
    if (raw->async) async_->remove(span.base, span.bytes);
    return internal_error(fmt::format("FaultTracker::watch: mprotect of span {} failed", span.id));
  }
  return Status::ok();
}

void FaultTracker::unwatch(std::uintptr_t base) {
  std::lock_guard lock(mutex_);
  auto it = watched_.find(base);
  if (it == watched_.end()) return;
  const SpanView& span = it->second->span;
  it->second->watched.store(false);  // before the unprotection (see handle_owned)
  if (it->second->async) async_->remove(span.base, span.bytes);
  mprotect(reinterpret_cast<void*>(span.base), span.bytes, PROT_READ | PROT_WRITE);
  if (Entry* entry = find_entry(base); entry != nullptr)
    entry->state.store(nullptr, std::memory_order_release);
  watched_.erase(it);
}

void FaultTracker::unwatch_all() {
  std::lock_guard lock(mutex_);
  for (const auto& [base, state] : watched_) {
    state->watched.store(false);  // before the unprotection (see handle_owned)
    if (state->async) async_->remove(base, state->span.bytes);
    mprotect(reinterpret_cast<void*>(base), state->span.bytes, PROT_READ | PROT_WRITE);
    if (Entry* entry = find_entry(base); entry != nullptr)
      entry->state.store(nullptr, std::memory_order_release);
  }
  watched_.clear();
}

std::size_t FaultTracker::watched_spans() const {
  std::lock_guard lock(mutex_);
  return watched_.size();
}

// Counts and clears one span's unit flags and re-protects its touched units, a run of adjacent
// units in one mprotect call. Caller holds mutex_.
// Asks the kernel which pages of units [first_unit, first_unit + units) were written and marks
// those units written. Caller holds mutex_.
void FaultTracker::mark_async_writes(SpanState& s, std::uint64_t first_unit, std::uint64_t units) {
  const std::uintptr_t from = s.span.base + first_unit * s.unit_bytes;
  async_->scan(from, s.unit_length(first_unit, units), [&](std::uintptr_t first, std::uintptr_t end) {
    for (std::uint64_t u = (first - s.span.base) / s.unit_bytes; u <= (end - 1 - s.span.base) / s.unit_bytes;
         ++u) {
      s.flags[u].fetch_or(kWritten, std::memory_order_relaxed);
    }
  });
}

void FaultTracker::reprotect_touched(SpanState& s, SpanAccess* out) {
  std::uint64_t first_touches = 0;
  std::uint64_t run_start = 0;
  std::uint64_t run_length = 0;
  auto flush = [&] {
    if (run_length == 0) return;
    mprotect(s.unit_address(run_start), s.unit_length(run_start, run_length), PROT_NONE);
    run_length = 0;
  };
  const bool coarse = s.coarse.exchange(false, std::memory_order_relaxed);
  if (s.async) {
    // Writes after a unit's first fault were told to the kernel, not to us: ask it (and let it
    // write-protect them again), for each run of touched units, or the whole span if coarse.
    if (coarse) {
      mark_async_writes(s, 0, s.units);
    } else {
      for (std::uint64_t u = 0; u < s.units;) {
        if ((s.flags[u].load(std::memory_order_relaxed) & (kRead | kWritten)) == 0) {
          ++u;
          continue;
        }
        std::uint64_t end = u + 1;
        while (end < s.units && (s.flags[end].load(std::memory_order_relaxed) & (kRead | kWritten)) != 0)
          ++end;
        mark_async_writes(s, u, end - u);
        u = end;
      }
    }
  }
  for (std::uint64_t u = 0; u < s.units; ++u) {
    const std::uint8_t f = s.flags[u].exchange(0, std::memory_order_relaxed);
    if ((f & (kRead | kWritten)) == 0) {
      flush();
      continue;
    }
    ++first_touches;
    if ((f & kRead) != 0) ++out->units_read;
    if ((f & kWritten) != 0) ++out->units_written;
    if (run_length == 0) run_start = u;
    ++run_length;
  }
  flush();
  if (coarse) mprotect(reinterpret_cast<void*>(s.span.base), s.span.bytes, PROT_NONE);
  out->span = s.span;
  out->unit_bytes = s.unit_bytes;
  out->coarse = coarse;
  out->faults = s.faults.exchange(0, std::memory_order_relaxed);
  out->touches = static_cast<double>(first_touches) +
                 static_cast<double>(s.retouch_weight.exchange(0, std::memory_order_relaxed)) / kWeightOne;
}

std::vector<FaultTracker::SpanAccess> FaultTracker::collect() {
  std::lock_guard lock(mutex_);
  std::vector<SpanAccess> out;
  for (const auto& [base, state] : watched_) {
    if (!state->touched.exchange(false, std::memory_order_relaxed)) continue;
    SpanAccess access;
    reprotect_touched(*state, &access);
    if (access.units_read + access.units_written > 0) out.push_back(access);
  }
  std::sort(out.begin(), out.end(),
            [](const SpanAccess& a, const SpanAccess& b) { return a.span.base < b.span.base; });
  return out;
}

std::size_t FaultTracker::sample(double fraction, std::size_t max_units) {
  std::lock_guard lock(mutex_);
  auto granted = [](std::uint8_t f) { return (f & (kRead | kWritten)) != 0 && (f & kSampled) == 0; };
  std::size_t eligible = 0;
  for (const auto& [base, s] : watched_) {
    if (!s->touched.load(std::memory_order_relaxed)) continue;
    for (std::uint64_t u = 0; u < s->units; ++u)
      eligible += granted(s->flags[u].load(std::memory_order_relaxed));
  }
  if (eligible == 0 || fraction <= 0) return 0;
  const double p = std::min({1.0, fraction, static_cast<double>(max_units) / static_cast<double>(eligible)});
  retouch_weight_.store(static_cast<std::uint64_t>(kWeightOne / p), std::memory_order_relaxed);
  // Keep a unit when a 53-bit uniform draw falls below p (p = 1 keeps every one).
  const auto threshold = static_cast<std::uint64_t>(p * static_cast<double>(std::uint64_t{1} << 53));
  std::size_t count = 0;
  for (const auto& [base, s] : watched_) {
    if (!s->touched.load(std::memory_order_relaxed)) continue;
    for (std::uint64_t u = 0; u < s->units && count < max_units; ++u) {
      if (!granted(s->flags[u].load(std::memory_order_relaxed))) continue;
      rng_state_ ^= rng_state_ << 13;
      rng_state_ ^= rng_state_ >> 7;
      rng_state_ ^= rng_state_ << 17;
      if ((rng_state_ >> 11) >= threshold) continue;
      // Record the unit's kernel-told writes first: a read fault after re-protection must know
      // the unit was written in this interval (then it is not a read).
      if (s->async) mark_async_writes(*s, u, 1);
      s->flags[u].fetch_or(kSampled, std::memory_order_relaxed);
      mprotect(s->unit_address(u), s->unit_length(u, 1), PROT_NONE);
      ++count;
    }
  }
  return count;
}

}  // namespace tensortier::profiler
