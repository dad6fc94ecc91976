// AsyncWrites (internal to profiler/): tracks which pages are written without signals, through
// userfaultfd asynchronous write-protection (UFFD_FEATURE_WP_ASYNC) and the PAGEMAP_SCAN ioctl
// (Linux >= 6.7). Registered ranges are write-protected; the kernel resolves a write to one by
// itself (no fault reaches us) and remembers the page as written; scan() reports the written
// pages of a range and write-protects them again, atomically.
//
// Debian 12's kernel headers predate both, so the ABI (stable since 6.7) is declared in the .cc.
// open() probes the running kernel and says why not, where it cannot be used (older kernel,
// userfaultfd not allowed to this process, ...).
//
// Ownership: owns the userfaultfd and a /proc/self/pagemap descriptor. Thread safety: calls may
// come from any thread; the kernel serializes them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace tensortier::profiler {

class AsyncWrites {
 public:
  // Null, with the reason in `why`, where the kernel or the process's rights do not allow it.
  static std::unique_ptr<AsyncWrites> open(std::string* why);
  ~AsyncWrites();
  AsyncWrites(const AsyncWrites&) = delete;
  AsyncWrites& operator=(const AsyncWrites&) = delete;

  // Registers [base, base + bytes) for asynchronous write-protection and protects it.
  bool add(std::uintptr_t base, std::uint64_t bytes);
  void remove(std::uintptr_t base, std::uint64_t bytes);
  // Calls `written(first, end)` for each run of pages written in [base, base + bytes) since they
  // were last protected, and protects them again. False if the scan failed.
  bool scan(std::uintptr_t base, std::uint64_t bytes,
            const std::function<void(std::uintptr_t first, std::uintptr_t end)>& written);

 private:
  AsyncWrites(int uffd, int pagemap) : uffd_(uffd), pagemap_(pagemap) {}
  int uffd_;
  int pagemap_;
};

}  // namespace tensortier::profiler
