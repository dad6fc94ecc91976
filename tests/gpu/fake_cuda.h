// FakeCuda: a CudaApi that runs on the CPU, for testing the GPU backend's ordering without a GPU.
// Device and pinned memory are host memory; a copy runs at once; and every copy, memset and kernel
// (fake_kernel: what a layer's cuDNN call would be) is an operation on a stream with a vector clock,
// so the fake knows what happens before what as the real runtime would order it:
//   - operations on one stream happen in the order issued;
//   - an event recorded on a stream covers what was issued there before it;
//   - stream_wait_event makes what is issued on a stream after it happen after that event.
// Two operations on different streams that touch overlapping bytes, one of them writing, with
// neither happening before the other, are a race: the fake records it (races()), naming both.
// Host waits (stream_synchronize, event_synchronize) order the host after the work they wait for;
// host accesses are not tracked.
//
// One fake per process at a time (the table's functions are plain pointers): FakeCuda::install()
// makes it and returns its table; the object lives until the next install. Not thread-safe: the
// tests that use it issue from one thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tensortier/gpu/cuda_api.h"

namespace tensortier::gpu::testing {

class FakeCuda {
 public:
  struct Range {
    std::uintptr_t begin = 0, end = 0;
  };
  using Clock = std::map<StreamHandle, std::uint64_t>;

  // A fresh fake with `devices` devices of `memory_bytes` each; its table.
  static const CudaApi& install(int devices = 1, std::uint64_t memory_bytes = std::uint64_t{16} << 30) {
    instance() = std::unique_ptr<FakeCuda>(new FakeCuda(devices, memory_bytes));
    return instance()->api_;
  }
  static FakeCuda& get() { return *instance(); }

  // A kernel on `stream` that reads and writes these byte ranges (what a layer's cuDNN call does).
  void kernel(StreamHandle stream, std::vector<Range> reads, std::vector<Range> writes, std::string what) {
    issue(stream, std::move(reads), std::move(writes), std::move(what));
  }
  static Range bytes(const void* p, std::size_t n) {
    const auto b = reinterpret_cast<std::uintptr_t>(p);
    return {b, b + n};
  }

  const std::vector<std::string>& races() const { return races_; }
  std::size_t operations() const { return ops_.size(); }
  std::uint64_t live_allocations() const { return allocations_.size(); }
  int waits() const { return waits_; }

 private:
  struct Op {
    StreamHandle stream = 0;
    Clock clock;
    std::vector<Range> reads, writes;
    std::string what;
  };
  struct Event {
    Clock clock;
    bool recorded = false;
  };

  FakeCuda(int devices, std::uint64_t memory_bytes) : devices_(devices), memory_bytes_(memory_bytes) {
    api_.device_count = [](int* count) -> CudaStatus {
      *count = get().devices_;
      return get().devices_ == 0 ? get().api_.no_device : 0;
    };
    api_.set_device = [](int device) -> CudaStatus { return device < get().devices_ ? 0 : 101; };
    api_.device_info = [](int, std::string* name, std::uint64_t* memory, int* capability) -> CudaStatus {
      *name = "Fake GPU";
      *memory = get().memory_bytes_;
      *capability = 90;
      return 0;
    };
    api_.mem_info = [](std::uint64_t* free_bytes, std::uint64_t* total_bytes) -> CudaStatus {
      *total_bytes = get().memory_bytes_;
      *free_bytes = get().memory_bytes_ - get().allocated_;
      return 0;
    };
    api_.malloc_device = [](void** ptr, std::size_t n) -> CudaStatus { return get().allocate(ptr, n); };
    api_.free_device = [](void* ptr) -> CudaStatus { return get().release(ptr); };
    api_.malloc_pinned = [](void** ptr, std::size_t n) -> CudaStatus { return get().allocate(ptr, n); };
    api_.free_pinned = [](void* ptr) -> CudaStatus { return get().release(ptr); };
    api_.memcpy_async = [](void* dst, const void* src, std::size_t n, CopyKind,
                           StreamHandle s) -> CudaStatus {
      std::memmove(dst, src, n);
      get().issue(s, {bytes(src, n)}, {bytes(dst, n)}, fmt::format("copy of {} bytes", n));
      return 0;
    };
    api_.memset_async = [](void* dst, int value, std::size_t n, StreamHandle s) -> CudaStatus {
      std::memset(dst, value, n);
      get().issue(s, {}, {bytes(dst, n)}, "memset");
      return 0;
    };
    api_.stream_create = [](StreamHandle* s) -> CudaStatus {
      *s = ++get().next_handle_;
      get().streams_[*s] = {};
      return 0;
    };
    api_.stream_destroy = [](StreamHandle s) -> CudaStatus { return get().streams_.erase(s) == 1 ? 0 : 400; };
    api_.stream_synchronize = [](StreamHandle) -> CudaStatus { return 0; };
    api_.stream_wait_event = [](StreamHandle s, EventHandle e) -> CudaStatus {
      auto it = get().events_.find(e);
      if (it == get().events_.end()) return 400;
      ++get().waits_;
      Clock& clock = get().streams_[s];
      for (const auto& [stream, tick] : it->second.clock) clock[stream] = std::max(clock[stream], tick);
      return 0;
    };
    api_.event_create = [](EventHandle* e) -> CudaStatus {
      *e = ++get().next_handle_;
      get().events_[*e] = {};
      return 0;
    };
    api_.event_destroy = [](EventHandle e) -> CudaStatus { return get().events_.erase(e) == 1 ? 0 : 400; };
    api_.event_record = [](EventHandle e, StreamHandle s) -> CudaStatus {
      auto it = get().events_.find(e);
      if (it == get().events_.end()) return 400;
      it->second = {get().streams_[s], true};
      return 0;
    };
    api_.event_synchronize = [](EventHandle) -> CudaStatus { return 0; };
    api_.event_query = [](EventHandle) -> CudaStatus { return 0; };  // work runs at once here
    api_.event_elapsed_ms = [](float* ms, EventHandle, EventHandle) -> CudaStatus {
      *ms = 0;
      return 0;
    };
    api_.error_string = [](CudaStatus s) -> const char* { return s == 0 ? "no error" : "fake error"; };
    api_.name = "fake CUDA (CPU)";
  }
  static std::unique_ptr<FakeCuda>& instance() {
    static std::unique_ptr<FakeCuda> fake;
    return fake;
  }
  CudaStatus allocate(void** ptr, std::size_t n) {
    if (allocated_ + n > memory_bytes_) return 2;  // cudaErrorMemoryAllocation
    *ptr = std::malloc(n);
    if (*ptr == nullptr) return 2;
    allocations_[*ptr] = n;
    allocated_ += n;
    return 0;
  }
  CudaStatus release(void* ptr) {
    auto it = allocations_.find(ptr);
    if (it == allocations_.end()) return 1;
    allocated_ -= it->second;
    allocations_.erase(it);
    std::free(ptr);
    return 0;
  }
  static bool overlap(const Range& a, const Range& b) { return a.begin < b.end && b.begin < a.end; }
  static bool conflict(const Op& a, const Op& b) {
    for (const Range& w : a.writes) {
      for (const Range& r : b.reads)
        if (overlap(w, r)) return true;
      for (const Range& x : b.writes)
        if (overlap(w, x)) return true;
    }
    for (const Range& r : a.reads) {
      for (const Range& w : b.writes)
        if (overlap(r, w)) return true;
    }
    return false;
  }
  // a happens before b: b's clock has seen a's tick on a's stream.
  static bool before(const Op& a, const Op& b) {
    auto it = b.clock.find(a.stream);
    return it != b.clock.end() && it->second >= a.clock.at(a.stream);
  }
  void issue(StreamHandle s, std::vector<Range> reads, std::vector<Range> writes, std::string what) {
    Clock& clock = streams_[s];
    ++clock[s];
    Op op{s, clock, std::move(reads), std::move(writes), std::move(what)};
    for (const Op& earlier : ops_) {
      if (earlier.stream != s && conflict(earlier, op) && !before(earlier, op)) {
        races_.push_back(fmt::format("'{}' on stream {} races '{}' on stream {}", op.what, s, earlier.what,
                                     earlier.stream));
      }
    }
    ops_.push_back(std::move(op));
  }

  int devices_;
  std::uint64_t memory_bytes_;
  std::uint64_t allocated_ = 0;
  CudaApi api_;
  std::uintptr_t next_handle_ = 0x1000;
  std::map<StreamHandle, Clock> streams_;
  std::map<EventHandle, Event> events_;
  std::map<void*, std::size_t> allocations_;
  std::vector<Op> ops_;
  std::vector<std::string> races_;
  int waits_ = 0;
};

}  // namespace tensortier::gpu::testing
