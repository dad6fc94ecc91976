// CopyEngine: how a move's bytes go from one mapped range to another, for the allocator's moves
// (into planned places, and the copies of moves in place). The allocator owns one; the CPU's is
// the default, and a GPU backend's (cudaMemcpyAsync on a copy stream, ordered by events) plugs in
// behind the same call: copy() returns once the bytes are at `to`, so the mover, the executor and
// the policies are the same whichever engine copies.
//
// Ownership: an engine owns its helper threads. Thread safety: copy() and threads() from any
// thread; copies of one engine run one at a time.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string_view>

#include "tensortier/ids.h"
#include "tensortier/status.h"

namespace tensortier {

// The two tiers a copy goes between (an engine may copy each way differently: a CUDA engine picks
// its stream and direction by them).
struct CopyRoute {
  TierIndex from = 0;
  TierIndex to = 0;
};

// Bytes a layer used.
struct UsedRange {
  const void* address = nullptr;
  std::size_t bytes = 0;
};

class CopyEngine {
 public:
  virtual ~CopyEngine() = default;
  virtual std::string_view name() const = 0;
  // Copies `bytes` from `from` to `to` (ranges that do not overlap, page-aligned); returns the
  // threads it took (1: the caller's alone), 0 where the copy failed (the move then fails).
  virtual unsigned copy(void* to, const void* from, std::size_t bytes, CopyRoute route) = 0;
  // The most threads one copy takes.
  virtual unsigned threads() const = 0;
  // Called at each layer's end with the bytes it used (its objects, still pinned). An engine whose
  // copies run beside layers that may still be running when layer_end returns (a GPU's kernels)
  // orders later copies from or into these bytes after the layer's work. The CPU's layers are
  // done by then: nothing to do.
  virtual void layer_used(std::span<const UsedRange> /*ranges*/) {}
};

// The CPU's: a copy of kSplitBytes or more is cut into `threads` parts of whole pages, copied at
// once by the caller and threads - 1 helper threads kept for it (a move ends sooner where the
// tiers' bandwidth grows with threads: a remote node, Optane, CXL); each part of kStreamBytes or
// more goes with non-temporal stores (the mover never reads what it copied, and glibc's memcpy
// keeps cached stores up to a few MiB: 0.08-0.09 ms a MiB against its 0.10-0.13 here, 1-16 MiB
// copies on an idle 2-core AMD EPYC).
class CpuCopyEngine final : public CopyEngine {
 public:
  static constexpr std::size_t kSplitBytes = std::size_t{4} << 20;
  static constexpr std::size_t kStreamBytes = std::size_t{256} << 10;
  // Errors: kUnavailable where a helper thread cannot be started (none is kept then).
  static Result<std::unique_ptr<CpuCopyEngine>> create(unsigned threads);
  ~CpuCopyEngine() override;
  CpuCopyEngine(const CpuCopyEngine&) = delete;
  CpuCopyEngine& operator=(const CpuCopyEngine&) = delete;

  std::string_view name() const override { return "cpu"; }
  unsigned copy(void* to, const void* from, std::size_t bytes, CopyRoute route) override;
  unsigned threads() const override { return threads_; }

 private:
  explicit CpuCopyEngine(unsigned threads);
  class Pool;
  unsigned threads_ = 1;
  std::unique_ptr<Pool> pool_;  // null with one thread
};

// Copies with non-temporal stores where the CPU has them (x86-64: SSE2), else memcpy.
void stream_copy(void* to, const void* from, std::size_t bytes);

}  // namespace tensortier
