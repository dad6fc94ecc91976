// The CPU copy engine (copy_engine.h): helper threads and non-temporal stores.
#include "tensortier/allocator/copy_engine.h"

#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <fmt/format.h>

#include "tensortier/allocator/tier.h"

namespace tensortier {

// Helper threads of our own, not a TBB arena: TBB hands its tasks over inside libtbb, which the
// thread sanitizer cannot see, so every split copy was reported as a data race (and the test of
// three split copies ran 220 s under it); a mutex and condition variables here are seen. One copy
// at a time: the parts of a copy go to whichever of the caller and the helpers is free first (in
// a child after fork(), the caller alone takes them all).
class CpuCopyEngine::Pool {
 public:
  // Throws std::system_error where a helper cannot start, after stopping the ones that did.
  explicit Pool(unsigned helpers) {
    try {
      for (unsigned i = 0; i < helpers; ++i) threads_.emplace_back([this] { serve(); });
    } catch (...) {
      stop_and_join();
      throw;
    }
  }
  ~Pool() { stop_and_join(); }
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;
  // In a child after fork() the helpers are the parent's threads: none to wake or join here.
  bool forked() const { return getpid() != pid_; }

  // Runs part(i) for every i below `parts`, the calling thread among the workers; returns when
  // all have ended.
  void run(std::size_t parts, const std::function<void(std::size_t)>& part) {
    std::lock_guard one_at_a_time(run_mutex_);
    std::unique_lock lock(mutex_);
    job_ = &part;
    parts_ = parts;
    next_ = 0;
    left_ = parts;
    work_.notify_all();
    take_parts(lock);
    done_.wait(lock, [&] { return left_ == 0; });
    job_ = nullptr;
  }

 private:
  // Takes and runs parts while any is left; `lock` holds mutex_ (let go while a part runs).
  void take_parts(std::unique_lock<std::mutex>& lock) {
    while (job_ != nullptr && next_ < parts_) {
      const std::size_t i = next_++;
      const std::function<void(std::size_t)>& part = *job_;
      lock.unlock();
      part(i);
      lock.lock();
      if (--left_ == 0) done_.notify_all();
    }
  }
  void serve() {
    std::unique_lock lock(mutex_);
    while (true) {
      work_.wait(lock, [&] { return stop_ || (job_ != nullptr && next_ < parts_); });
      if (stop_) return;
      take_parts(lock);
    }
  }

  void stop_and_join() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    work_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  std::mutex run_mutex_;  // one copy at a time
  std::mutex mutex_;      // what follows
  std::condition_variable work_, done_;
  const std::function<void(std::size_t)>* job_ = nullptr;
  std::size_t parts_ = 0, next_ = 0, left_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
  const pid_t pid_ = getpid();
};

void stream_copy(void* to, const void* from, std::size_t bytes) {
#if defined(__SSE2__)
  auto* d = static_cast<__m128i*>(to);
  const auto* s = static_cast<const __m128i*>(from);
  if (reinterpret_cast<std::uintptr_t>(to) % 16 == 0) {
    const std::size_t lines = bytes / 64;
    for (std::size_t i = 0; i < lines; ++i, d += 4, s += 4) {
      const __m128i a = _mm_loadu_si128(s), b = _mm_loadu_si128(s + 1);
      const __m128i c = _mm_loadu_si128(s + 2), e = _mm_loadu_si128(s + 3);
      _mm_stream_si128(d, a);
      _mm_stream_si128(d + 1, b);
      _mm_stream_si128(d + 2, c);
      _mm_stream_si128(d + 3, e);
    }
    _mm_sfence();  // the stores are visible before the move commits
    const std::size_t done = lines * 64;
    std::memcpy(static_cast<std::byte*>(to) + done, static_cast<const std::byte*>(from) + done, bytes - done);
    return;
  }
#endif
  std::memcpy(to, from, bytes);
}

CpuCopyEngine::CpuCopyEngine(unsigned threads) : threads_(threads) {}

Result<std::unique_ptr<CpuCopyEngine>> CpuCopyEngine::create(unsigned threads) {
  threads = std::max(1U, threads);
  std::unique_ptr<CpuCopyEngine> engine(new CpuCopyEngine(threads));
  if (threads == 1) return engine;
  try {
    engine->pool_ = std::make_unique<Pool>(threads - 1);
  } catch (const std::system_error& e) {  // the helpers started before it are joined as it unwinds
    return unavailable(fmt::format("{} copy helper threads could not be started: {}", threads - 1, e.what()));
  }
  return engine;
}

CpuCopyEngine::~CpuCopyEngine() {
  // A child after fork(): the helpers are the parent's threads; joining them would wait forever,
  // so the pool is left, not destroyed (the child's copies ran on the calling thread alone).
  if (pool_ != nullptr && pool_->forked())
    (void)pool_.release();  // NOLINT(bugprone-unused-return-value): leaked on purpose
}

unsigned CpuCopyEngine::copy(void* to, const void* from, std::size_t bytes, CopyRoute) {
  auto one = [](void* d, const void* s, std::size_t n) {
    if (n >= kStreamBytes) {
      stream_copy(d, s, n);
    } else {
      std::memcpy(d, s, n);
    }
  };
  if (pool_ == nullptr || bytes < kSplitBytes) {
    one(to, from, bytes);
    return 1;
  }
  // Parts of whole pages, one a thread: no two threads write one page.
  const std::size_t part_bytes = round_up((bytes + threads_ - 1) / threads_, kPageBytes);
  const std::size_t parts = (bytes + part_bytes - 1) / part_bytes;
  auto* dst = static_cast<std::byte*>(to);
  const auto* src = static_cast<const std::byte*>(from);
  pool_->run(parts, [&](std::size_t i) {
    const std::size_t at = i * part_bytes;
    one(dst + at, src + at, std::min(part_bytes, bytes - at));
  });
  return static_cast<unsigned>(parts);
}

}  // namespace tensortier
