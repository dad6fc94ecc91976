// FaultTracker: learns which objects a stretch of code reads and which it writes, by page
// protection: the first slice of the step profiler (issue: profiler/).
//
// arm() protects the pages of the given spans (PROT_NONE). The SIGSEGV handler looks up the span
// of a faulting address with the allocator's signal-safe lookup, records a read or a write, and
// grants just enough access for the instruction to go on: PROT_READ for a read, read-write for a
// write. On x86-64 the fault's error code says which it was; elsewhere a read fault grants
// PROT_READ and a second fault on the same span is the write. disarm() unprotects everything and
// returns what each span saw. A fault the tracker does not own (no span, or a span not armed) goes
// to the handler that was installed before it, so a real crash still crashes with the usual
// report (the default action, a debugger's or a sanitizer's handler).
//
// Ownership: one FaultTracker may exist at a time (installing a second is an error); it restores
// the previous handler when destroyed. The spans' memory stays the allocator's.
// Thread safety: the handler is async-signal-safe (atomics, mprotect, no locks, no allocation)
// and may run on any thread, oneDNN's OpenMP workers included. arm() and disarm() are called by
// the training thread while no other thread touches the spans' pages concurrently with them.
#pragma once

#include <signal.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "tensortier/allocator/object_table.h"
#include "tensortier/status.h"

namespace tensortier::profiler {

class FaultTracker {
 public:
  // Finds the span of an address; must be async-signal-safe (ObjectAllocator::lookup and
  // Runtime::lookup are). `context` is passed back unchanged.
  using Lookup = bool (*)(const void* context, const void* address, SpanView* out);

  // What one armed span saw between arm() and disarm().
  struct Access {
    SpanView span;
    bool read = false;
    bool written = false;
  };

  // Installs the SIGSEGV handler. Fails (kFailedPrecondition) if another tracker is installed.
  static Result<std::unique_ptr<FaultTracker>> install(Lookup lookup, const void* context);
  ~FaultTracker();
  FaultTracker(const FaultTracker&) = delete;
  FaultTracker& operator=(const FaultTracker&) = delete;

  // Protects these spans and starts recording. Fails if already armed or a span is not
  // page-aligned; on failure nothing stays protected.
  Status arm(std::span<const SpanView> spans);
  // Unprotects every armed span and returns their accesses, in the order given to arm().
  std::vector<Access> disarm();

 private:
  struct Armed {
    SpanView span;
    std::atomic<std::uint8_t> state{0};  // bit 0: read, bit 1: written
  };
  FaultTracker(Lookup lookup, const void* context) : lookup_(lookup), context_(context) {}
  // The SIGSEGV handler; handle_owned() records a fault on an armed span and grants access.
  static void on_signal(int signal, siginfo_t* info, void* ucontext);
  bool handle_owned(const void* address, bool is_write, bool write_known);

  Lookup lookup_;
  const void* context_;
  std::unique_ptr<Armed[]> armed_;  // sorted by base while armed
  std::atomic<std::size_t> armed_count_{0};
  std::vector<std::size_t> order_;  // armed_ index of each span in arm() order
};

}  // namespace tensortier::profiler
