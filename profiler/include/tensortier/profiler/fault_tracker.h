// FaultTracker: learns which objects, and which of their pages, a stretch of code reads and
// which it writes, by page protection; the step profiler drives it at every layer boundary. Its
// SIGSEGV handler, units, sampling, alternate stacks and limits in full: profiler/README.md.
//
// Ownership: one may exist at a time; it unprotects everything when destroyed (its handler stays,
// passing on faults it does not own). The spans' memory stays the allocator's.
// Thread safety: the handler is async-signal-safe and runs on any thread; watch, unwatch,
// collect, unwatch_all and sample are thread-safe with each other; collect and unwatch_all run
// while no other thread is inside the code being profiled.
#pragma once

#include <signal.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "tensortier/allocator/object_table.h"
#include "tensortier/status.h"

namespace tensortier::profiler {

class AsyncWrites;

inline constexpr std::size_t kSmallPageBytes = 4096;
inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

class FaultTracker {
 public:
  // Finds the span of an address; must be async-signal-safe (ObjectAllocator::lookup and
  // Runtime::lookup are). `context` is passed back unchanged.
  using Lookup = bool (*)(const void* context, const void* address, SpanView* out);

  struct Options {
    std::size_t unit_bytes = kHugePageBytes;       // protection unit: kSmallPageBytes or kHugePageBytes
    std::size_t max_spans = std::size_t{1} << 15;  // distinct span addresses it can ever watch
    // Track writes through userfaultfd asynchronous write-protection where the kernel has it
    // (Linux >= 6.7): a read fault then grants read-write at once and later writes cost no
    // fault; collect() asks the kernel which pages were written. Elsewhere, page protection.
    // Off by default: it saves few faults on training steps and its ioctls cost more than they
    // save (docs/RESULTS.md).
    bool async_writes = false;
    // The caller gave the threads their alternate signal stacks already (give_threads_alt_stacks,
    // alt_stacks.h), leaving this many without; else install() does.
    bool alt_stacks_given = false;
    std::size_t threads_without_alt_stack = 0;
  };

  // What one watched span saw in one interval (only spans touched in it are reported).
  struct SpanAccess {
    SpanView span;
    std::uint64_t unit_bytes = 0;     // its protection unit
    std::uint64_t units_read = 0;     // units whose first access in the interval was a read
    std::uint64_t units_written = 0;  // units written in the interval
    std::uint64_t faults = 0;         // protection faults taken on it
    double touches = 0;               // estimated unit-touches: first touches + sampled re-touches
    bool coarse = false;              // a unit could not be granted alone; the whole span was
    bool read() const { return units_read > 0; }
    bool written() const { return units_written > 0; }
  };

  // Installs the SIGSEGV handler. Fails (kFailedPrecondition) if another tracker is installed,
  // (kInvalidArgument) for a unit size that is not a multiple of the page size.
  static Result<std::unique_ptr<FaultTracker>> install(Lookup lookup, const void* context, Options options);
  static Result<std::unique_ptr<FaultTracker>> install(Lookup lookup, const void* context) {
    return install(lookup, context, Options{});
  }
  ~FaultTracker();
  FaultTracker(const FaultTracker&) = delete;
  FaultTracker& operator=(const FaultTracker&) = delete;

  // Protects a span and records faults on it from now on. Watching a span already watched (same
  // base, id and size) does nothing. Errors: a span not whole pages (kInvalidArgument), more
  // distinct spans than Options::max_spans (kOutOfMemory), mprotect failing (kInternal); on
  // error the span is left unprotected.
  Status watch(const SpanView& span);
  // Unprotects a span and forgets it; call before its memory is freed. Unknown bases are ignored.
  void unwatch(std::uintptr_t base);
  // Ends the interval: what each span touched since the last collect saw, and re-protects the
  // touched units.
  std::vector<SpanAccess> collect();
  // Re-protects each unit granted in the current interval with probability `fraction`, at most
  // `max_units` of them (the probability is lowered to keep to that); returns how many. A later
  // fault on one counts 1/probability re-touches.
  std::size_t sample(double fraction, std::size_t max_units);
  // Unprotects and forgets every span.
  void unwatch_all();

  std::size_t unit_bytes() const { return options_.unit_bytes; }
  // How writes are told: "userfaultfd WP_ASYNC" or "page protection (<why not the other>)".
  const std::string& write_tracking() const { return write_tracking_; }
  std::size_t watched_spans() const;
  std::uint64_t faults() const { return faults_.load(std::memory_order_relaxed); }
  // Threads alive at install() that could not be given an alternate signal stack (they block
  // real-time signals). A fault on one runs the handler on its own stack, which oneDNN's JIT
  // kernels do not tolerate; threads started after install() are in the same case.
  std::size_t threads_without_alt_stack() const { return threads_without_alt_stack_; }
  // Owned faults whose handler ran on the thread's own stack (a thread without an alternate one).
  std::uint64_t faults_off_alt_stack() const { return faults_off_alt_stack_.load(std::memory_order_relaxed); }

 private:
  struct SpanState;
  struct Entry {  // open-addressing table by span base, read by the handler
    std::atomic<std::uintptr_t> base{0};
    std::atomic<SpanState*> state{nullptr};
  };
  FaultTracker(Lookup lookup, const void* context, Options options);
  static void on_signal(int signal, siginfo_t* info, void* ucontext);
  bool handle_owned(const void* address, bool is_write, bool write_known);
  Entry* find_entry(std::uintptr_t base) const;  // signal-safe; null when absent
  void reprotect_touched(SpanState& state, SpanAccess* out);
  void mark_async_writes(SpanState& state, std::uint64_t first_unit, std::uint64_t units);

  Lookup lookup_;
  const void* context_;
  Options options_;
  std::unique_ptr<Entry[]> table_;
  std::size_t table_mask_ = 0;
  std::atomic<std::uint64_t> faults_{0};
  std::atomic<std::uint64_t> faults_off_alt_stack_{0};
  std::unique_ptr<AsyncWrites> async_;  // null: writes told by page protection
  std::string write_tracking_;
  std::size_t threads_without_alt_stack_ = 0;
  std::atomic<std::uint64_t> retouch_weight_{1024};  // 1024 / current sampling probability

  mutable std::mutex mutex_;                        // guards the members below (not the handler's path)
  std::vector<std::unique_ptr<SpanState>> states_;  // every state ever made
  std::unordered_map<std::uintptr_t, SpanState*> watched_;  // by base
  std::uint64_t rng_state_ = 0x9E3779B97F4A7C15ull;         // xorshift for sample()
  std::size_t used_entries_ = 0;
};

}  // namespace tensortier::profiler
