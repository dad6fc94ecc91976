// Page-protection fault tracking (see fault_tracker.h).
#include "tensortier/profiler/fault_tracker.h"

#include <sys/mman.h>
#include <ucontext.h>

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

namespace tensortier::profiler {
namespace {

std::atomic<FaultTracker*> g_active{nullptr};  // the installed tracker, read by the handler
struct sigaction g_previous {};                // the handler before ours; written before install

constexpr std::uint8_t kRead = 1;
constexpr std::uint8_t kWritten = 2;

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

}  // namespace

void FaultTracker::on_signal(int signal, siginfo_t* info, void* ucontext) {
  FaultTracker* tracker = g_active.load(std::memory_order_acquire);
  if (tracker != nullptr && info != nullptr && info->si_code == SEGV_ACCERR) {
    bool is_write = false;
    bool write_known = false;
#if defined(__x86_64__)
    // The page-fault error code's bit 1 says the access was a write.
    is_write = (static_cast<const ucontext_t*>(ucontext)->uc_mcontext.gregs[REG_ERR] & 0x2) != 0;
    write_known = true;
#endif
    if (tracker->handle_owned(info->si_addr, is_write, write_known)) return;
  }
  chain(signal, info, ucontext);
}

bool FaultTracker::handle_owned(const void* address, bool is_write, bool write_known) {
  SpanView span;
  if (!lookup_(context_, address, &span)) return false;
  // Binary search of the armed spans (sorted by base): no lock, no allocation.
  const std::size_t n = armed_count_.load(std::memory_order_acquire);
  std::size_t lo = 0, hi = n;
  while (lo < hi) {
    const std::size_t mid = (lo + hi) / 2;
    if (armed_[mid].span.base < span.base) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo == n || armed_[lo].span.base != span.base) return false;  // not armed: not ours
  Armed& a = armed_[lo];
  void* base = reinterpret_cast<void*>(span.base);
  if (!write_known) {
    // Without the error code: a fault on a span already readable must be a write.
    is_write = (a.state.load(std::memory_order_relaxed) & kRead) != 0;
  }
  if (is_write) {
    a.state.fetch_or(kWritten, std::memory_order_relaxed);
    mprotect(base, span.bytes, PROT_READ | PROT_WRITE);
  } else {
    a.state.fetch_or(kRead, std::memory_order_relaxed);
    if ((a.state.load(std::memory_order_relaxed) & kWritten) == 0) mprotect(base, span.bytes, PROT_READ);
  }
  return true;
}

Result<std::unique_ptr<FaultTracker>> FaultTracker::install(Lookup lookup, const void* context) {
  if (lookup == nullptr) return invalid_argument("FaultTracker::install: no lookup function");
  std::unique_ptr<FaultTracker> tracker(new FaultTracker(lookup, context));
  FaultTracker* expected = nullptr;
  if (!g_active.compare_exchange_strong(expected, tracker.get())) {
    return failed_precondition("a FaultTracker is already installed; destroy it first");
  }
  struct sigaction action {};
  action.sa_sigaction = &FaultTracker::on_signal;
  action.sa_flags = SA_SIGINFO | SA_NODEFER;  // a chained handler may fault again
  sigemptyset(&action.sa_mask);
  if (sigaction(SIGSEGV, &action, &g_previous) != 0) {
    g_active.store(nullptr);
    return internal_error("sigaction(SIGSEGV) failed");
  }
  return tracker;
}

FaultTracker::~FaultTracker() {
  (void)disarm();
  sigaction(SIGSEGV, &g_previous, nullptr);
  g_active.store(nullptr, std::memory_order_release);
}

Status FaultTracker::arm(std::span<const SpanView> spans) {
  if (armed_count_.load() != 0) return failed_precondition("FaultTracker::arm: already armed (disarm first)");
  for (const SpanView& s : spans) {
    if (s.base % static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE)) != 0 || s.bytes == 0) {
      return invalid_argument(
          fmt::format("FaultTracker::arm: span {} at {:#x} is not whole pages", s.id, s.base));
    }
  }
  order_.resize(spans.size());
  std::iota(order_.begin(), order_.end(), std::size_t{0});
  std::sort(order_.begin(), order_.end(),
            [&](std::size_t a, std::size_t b) { return spans[a].base < spans[b].base; });
  armed_ = std::make_unique<Armed[]>(spans.size());
  std::vector<std::size_t> position(spans.size());
  for (std::size_t k = 0; k < order_.size(); ++k) {
    armed_[k].span = spans[order_[k]];
    position[order_[k]] = k;
  }
  order_ = std::move(position);  // order_[i]: where span i of arm()'s order sits in armed_
  armed_count_.store(spans.size(), std::memory_order_release);
  for (std::size_t k = 0; k < spans.size(); ++k) {
    if (mprotect(reinterpret_cast<void*>(armed_[k].span.base), armed_[k].span.bytes, PROT_NONE) != 0) {
      (void)disarm();
      return internal_error(fmt::format("mprotect of span {} failed", armed_[k].span.id));
    }
  }
  return Status::ok();
}

std::vector<FaultTracker::Access> FaultTracker::disarm() {
  const std::size_t n = armed_count_.load();
  std::vector<Access> out(n);
  for (std::size_t k = 0; k < n; ++k) {
    mprotect(reinterpret_cast<void*>(armed_[k].span.base), armed_[k].span.bytes, PROT_READ | PROT_WRITE);
  }
  for (std::size_t i = 0; i < n; ++i) {
    const Armed& a = armed_[order_[i]];
    const std::uint8_t state = a.state.load();
    out[i] = Access{a.span, (state & kRead) != 0, (state & kWritten) != 0};
  }
  armed_count_.store(0, std::memory_order_release);
  return out;
}

}  // namespace tensortier::profiler
