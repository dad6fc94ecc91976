// FakeCuda: a CudaApi that runs on the CPU, for testing the GPU backend's ordering without a GPU.
// Device and pinned memory are host memory; a copy runs at once; and every copy, memset and kernel
// (fake_kernel: what a layer's cuDNN call would be) is an operation on a stream with a vector clock,
// so the fake knows what happens before what as the real runtime would order it:
//   - operations on one stream happen in the order issued;
//   - an event recorded on a stream covers what was issued there before it;
//   - stream_wait_event makes what is issued on a stream after it happen after that event.
// Two operations on different streams that touch overlapping bytes, one of them writing, with
// neither happening before the other, are a race: the fake records it (races()), naming both.
// Host waits (stream_synchronize, event_synchronize) order the host after the work they wait for,
// and so every operation issued after them (on any stream, from any thread: one host clock);
// host accesses to pinned memory are not tracked.
// The current device is per thread, as CUDA's (set_device; 0 until set): a stream or event is the
// device's that was current where it was made, and an event recorded on another device's stream
// is refused (error 400, counted in wrong_device_records()).
// Device memory is what a GPU's is to the CPU: not there. Each device allocation is a memfd
// mapped twice, once with no access at the address handed out (a CPU read or write of it is a
// SIGSEGV, which fails the test) and once readable for the fake's own copies; read_device and
// write_device are the tests' way in.
//
// One fake per process at a time (the table's functions are plain pointers): FakeCuda::install()
// makes it and returns its table; the object lives until the next install. Thread-safe (one lock):
// a runtime's mover issues copies while the test's thread issues kernels.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
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

  // A kernel on `stream` that reads and writes these byte ranges (what a layer's cuDNN call does)
  // and takes `ms` of the stream's virtual time.
  void kernel(StreamHandle stream, std::vector<Range> reads, std::vector<Range> writes, std::string what,
              double ms = 0) {
    std::lock_guard lock(mutex_);
    double& now = time_ms_[stream];
    now = std::max(now, host_time()) + ms;
    issue(stream, std::move(reads), std::move(writes), std::move(what));
  }
  // The bytes at a device (or host) address, read or written the way a test's check would with a
  // synchronous cudaMemcpy (nothing issued, no ordering recorded).
  std::vector<std::byte> read_device(const void* p, std::size_t n) {
    std::lock_guard lock(mutex_);
    std::vector<std::byte> out(n);
    std::memcpy(out.data(), view(p), n);
    return out;
  }
  void write_device(void* p, int value, std::size_t n) {
    std::lock_guard lock(mutex_);
    std::memset(view(p), value, n);
  }
  static Range bytes(const void* p, std::size_t n) {
    const auto b = reinterpret_cast<std::uintptr_t>(p);
    return {b, b + n};
  }

  std::vector<std::string> races() const {
    std::lock_guard lock(mutex_);
    return races_;
  }
  std::size_t operations() const {
    std::lock_guard lock(mutex_);
    return ops_.size();
  }
  std::uint64_t live_allocations() const {
    std::lock_guard lock(mutex_);
    return allocations_.size();
  }
  int waits() const {
    std::lock_guard lock(mutex_);
    return waits_;
  }
  // Copies issued each way so far.
  int copies(CopyKind kind) const {
    std::lock_guard lock(mutex_);
    return copies_[static_cast<int>(kind)];
  }
  // Copies `kind` take bytes / gbps of virtual time on their stream, which events record and
  // event_elapsed_ms reads (0, the default: no time passes, as if unmeasurable). Work a thread
  // issues after its host wait starts no earlier than what the wait saw end.
  void set_copy_gbps(CopyKind kind, double gbps) {
    std::lock_guard lock(mutex_);
    gbps_[static_cast<int>(kind)] = gbps;
  }
  // The host's waits for everything issued on `stream` so far (stream_synchronize).
  int stream_syncs(StreamHandle stream) const {
    std::lock_guard lock(mutex_);
    auto it = stream_syncs_.find(stream);
    return it == stream_syncs_.end() ? 0 : it->second;
  }
  // The next `n` event records fail (cudaErrorLaunchFailure), and, with `syncs_too`, the next `n`
  // stream synchronizations as well: a device in trouble.
  void fail_next_records(int n, bool syncs_too = false) {
    std::lock_guard lock(mutex_);
    failing_records_ = n;
    failing_syncs_ = syncs_too ? n : 0;
  }
  // Events recorded on a stream of another device than the event's (CUDA refuses them).
  int wrong_device_records() const {
    std::lock_guard lock(mutex_);
    return wrong_device_records_;
  }
  // Whether `p` is in device memory the fake handed out.
  bool on_device(const void* p) const {
    std::lock_guard lock(mutex_);
    return device_alias(p) != nullptr;
  }

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
    double time_ms = 0;  // its stream's virtual time when recorded
  };
  struct Allocation {
    std::size_t bytes = 0;
    std::byte* alias = nullptr;  // device memory: the readable view of it; null for pinned
    std::size_t mapped = 0;      // bytes of each view
  };

  FakeCuda(int devices, std::uint64_t memory_bytes) : devices_(devices), memory_bytes_(memory_bytes) {
    api_.device_count = [](int* count) -> CudaStatus {
      const auto lock = get().guard();
      *count = get().devices_;
      return get().devices_ == 0 ? get().api_.no_device : 0;
    };
    api_.set_device = [](int device) -> CudaStatus {
      if (device >= get().devices_) return 101;
      current_device() = device;
      return 0;
    };
    api_.device_info = [](int, std::string* name, std::uint64_t* memory, int* capability) -> CudaStatus {
      const auto lock = get().guard();
      *name = "Fake GPU";
      *memory = get().memory_bytes_;
      *capability = 90;
      return 0;
    };
    api_.mem_info = [](std::uint64_t* free_bytes, std::uint64_t* total_bytes) -> CudaStatus {
      const auto lock = get().guard();
      *total_bytes = get().memory_bytes_;
      *free_bytes = get().memory_bytes_ - get().allocated_;
      return 0;
    };
    api_.malloc_device = [](void** ptr, std::size_t n) -> CudaStatus {
      const auto lock = get().guard();
      return get().allocate(ptr, n, /*device=*/true);
    };
    api_.free_device = [](void* ptr) -> CudaStatus {
      const auto lock = get().guard();
      return get().release(ptr);
    };
    api_.malloc_pinned = [](void** ptr, std::size_t n) -> CudaStatus {
      const auto lock = get().guard();
      return get().allocate(ptr, n, /*device=*/false);
    };
    api_.free_pinned = [](void* ptr) -> CudaStatus {
      const auto lock = get().guard();
      return get().release(ptr);
    };
    api_.memcpy_async = [](void* dst, const void* src, std::size_t n, CopyKind kind,
                           StreamHandle s) -> CudaStatus {
      const auto lock = get().guard();
      std::memmove(get().view(dst), get().view(src), n);
      ++get().copies_[static_cast<int>(kind)];
      if (const double gbps = get().gbps_[static_cast<int>(kind)]; gbps > 0) {
        double& now = get().time_ms_[s];
        now = std::max(now, get().host_time()) + static_cast<double>(n) / (gbps * 1e6);
      }
      get().issue(s, {bytes(src, n)}, {bytes(dst, n)}, fmt::format("copy of {} bytes {} -> {}", n, src, dst));
      return 0;
    };
    api_.memset_async = [](void* dst, int value, std::size_t n, StreamHandle s) -> CudaStatus {
      const auto lock = get().guard();
      std::memset(get().view(dst), value, n);
      get().issue(s, {}, {bytes(dst, n)}, "memset");
      return 0;
    };
    api_.stream_create = [](StreamHandle* s) -> CudaStatus {
      const auto lock = get().guard();
      *s = ++get().next_handle_;
      get().streams_[*s] = {};
      get().device_of_[*s] = current_device();
      return 0;
    };
    api_.stream_destroy = [](StreamHandle s) -> CudaStatus {
      const auto lock = get().guard();
      return get().streams_.erase(s) == 1 ? 0 : 400;
    };
    api_.stream_synchronize = [](StreamHandle s) -> CudaStatus {
      const auto lock = get().guard();
      if (get().failing_syncs_ > 0) {
        --get().failing_syncs_;
        return 719;
      }
      get().host_waits_for(get().streams_[s]);
      get().host_time() = std::max(get().host_time(), get().time_ms_[s]);
      ++get().stream_syncs_[s];
      return 0;
    };
    api_.stream_wait_event = [](StreamHandle s, EventHandle e) -> CudaStatus {
      const auto lock = get().guard();
      auto it = get().events_.find(e);
      if (it == get().events_.end()) return 400;
      ++get().waits_;
      get().time_ms_[s] = std::max(get().time_ms_[s], it->second.time_ms);
      Clock& clock = get().streams_[s];
      for (const auto& [stream, tick] : it->second.clock) clock[stream] = std::max(clock[stream], tick);
      return 0;
    };
    api_.event_create = [](EventHandle* e) -> CudaStatus {
      const auto lock = get().guard();
      *e = ++get().next_handle_;
      get().events_[*e] = {};
      get().device_of_[*e] = current_device();
      return 0;
    };
    api_.event_destroy = [](EventHandle e) -> CudaStatus {
      const auto lock = get().guard();
      return get().events_.erase(e) == 1 ? 0 : 400;
    };
    api_.event_record = [](EventHandle e, StreamHandle s) -> CudaStatus {
      const auto lock = get().guard();
      if (get().failing_records_ > 0) {
        --get().failing_records_;
        return 719;  // cudaErrorLaunchFailure
      }
      auto it = get().events_.find(e);
      if (it == get().events_.end()) return 400;
      if (get().device_of_[e] != get().device_of_[s]) {  // as CUDA: an event and a stream of two devices
        ++get().wrong_device_records_;
        return 400;
      }
      double& now = get().time_ms_[s];
      now = std::max(now, get().host_time());  // an idle stream is at the host's time
      it->second = {get().streams_[s], true, now};
      return 0;
    };
    api_.event_synchronize = [](EventHandle e) -> CudaStatus {
      const auto lock = get().guard();
      auto it = get().events_.find(e);
      if (it == get().events_.end()) return 400;
      get().host_waits_for(it->second.clock);
      get().host_time() = std::max(get().host_time(), it->second.time_ms);
      return 0;
    };
    api_.event_query = [](EventHandle) -> CudaStatus { return 0; };  // work runs at once here
    api_.event_elapsed_ms = [](float* ms, EventHandle start, EventHandle end) -> CudaStatus {
      const auto lock = get().guard();
      auto a = get().events_.find(start), b = get().events_.find(end);
      if (a == get().events_.end() || b == get().events_.end()) return 400;
      *ms = static_cast<float>(b->second.time_ms - a->second.time_ms);
      return 0;
    };
    api_.error_string = [](CudaStatus s) -> const char* { return s == 0 ? "no error" : "fake error"; };
    api_.name = "fake CUDA (CPU)";
  }
  // The calling thread's current device (cudaSetDevice's; 0 until set).
  static int& current_device() {
    static thread_local int device = 0;
    return device;
  }
  static std::unique_ptr<FakeCuda>& instance() {
    static std::unique_ptr<FakeCuda> fake;
    return fake;
  }
  std::unique_lock<std::recursive_mutex> guard() { return std::unique_lock(mutex_); }
  CudaStatus allocate(void** ptr, std::size_t n, bool device) {
    if (allocated_ + n > memory_bytes_) return 2;  // cudaErrorMemoryAllocation
    Allocation a{n, nullptr, 0};
    if (device) {  // two views of one memfd: none for the CPU at *ptr, one for the fake's copies
      const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
      a.mapped = (n + page - 1) / page * page;
      const int fd = memfd_create("fake-cuda-device", 0);
      if (fd < 0 || ftruncate(fd, static_cast<off_t>(a.mapped)) != 0) return 2;
      void* hidden = mmap(nullptr, a.mapped, PROT_NONE, MAP_SHARED, fd, 0);
      void* alias = mmap(nullptr, a.mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      close(fd);
      if (hidden == MAP_FAILED || alias == MAP_FAILED) return 2;
      *ptr = hidden;
      a.alias = static_cast<std::byte*>(alias);
    } else {
      *ptr = std::malloc(n);
      if (*ptr == nullptr) return 2;
    }
    allocations_[*ptr] = a;
    allocated_ += n;
    return 0;
  }
  CudaStatus release(void* ptr) {
    auto it = allocations_.find(ptr);
    if (it == allocations_.end()) return 1;
    allocated_ -= it->second.bytes;
    if (it->second.alias != nullptr) {
      munmap(ptr, it->second.mapped);
      munmap(it->second.alias, it->second.mapped);
    } else {
      std::free(ptr);
    }
    allocations_.erase(it);
    return 0;
  }
  // The fake's readable view of device address p; null where p is not device memory.
  std::byte* device_alias(const void* p) const {
    auto it =
        allocations_.upper_bound(const_cast<void*>(p));  // NOLINT(cppcoreguidelines-pro-type-const-cast)
    if (it == allocations_.begin()) return nullptr;
    --it;
    const auto offset =
        static_cast<std::size_t>(static_cast<const std::byte*>(p) - static_cast<std::byte*>(it->first));
    if (it->second.alias == nullptr || offset >= it->second.mapped) return nullptr;
    return it->second.alias + offset;
  }
  void* view(const void* p) const {
    std::byte* alias = device_alias(p);
    return alias != nullptr ? alias : const_cast<void*>(p);  // NOLINT(cppcoreguidelines-pro-type-const-cast)
  }
  void host_waits_for(const Clock& clock) {
    for (const auto& [stream, tick] : clock) host_[stream] = std::max(host_[stream], tick);
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
    for (const auto& [stream, tick] : host_)
      clock[stream] = std::max(clock[stream], tick);  // after host waits
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
  std::map<void*, Allocation> allocations_;
  std::vector<Op> ops_;
  std::vector<std::string> races_;
  int waits_ = 0;
  std::map<std::uintptr_t, int> device_of_;  // each stream's and event's device (current where made)
  int wrong_device_records_ = 0;
  int failing_records_ = 0, failing_syncs_ = 0;  // fail_next_records
  std::map<StreamHandle, int> stream_syncs_;
  int copies_[4] = {0, 0, 0, 0};            // by CopyKind
  Clock host_;                              // what host waits have seen completed
  double gbps_[4] = {0, 0, 0, 0};           // by CopyKind: set_copy_gbps
  std::map<StreamHandle, double> time_ms_;  // each stream's virtual time
  // Each host thread's virtual time: the latest its waits have seen end (another thread's wait
  // does not delay what this one issues).
  std::map<std::thread::id, double> host_time_ms_;
  double& host_time() { return host_time_ms_[std::this_thread::get_id()]; }
  mutable std::recursive_mutex mutex_;
};

}  // namespace tensortier::gpu::testing
