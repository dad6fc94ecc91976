// userfaultfd WP_ASYNC + PAGEMAP_SCAN write tracking (see async_writes.h).
#include "async_writes.h"

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace tensortier::profiler {
namespace {

// The ABI of Linux 6.7 (include/uapi/linux/userfaultfd.h and fs.h), absent from Debian 12's
// headers. Declared here rather than requiring newer kernel headers: the running kernel, not
// the build machine, decides whether it is there, and open() asks it.
constexpr std::uint64_t kFeatureWpUnpopulated = std::uint64_t{1} << 13;
constexpr std::uint64_t kFeatureWpAsync = std::uint64_t{1} << 15;
#ifndef UFFD_USER_MODE_ONLY
constexpr int UFFD_USER_MODE_ONLY = 1;
#endif

struct PageRegion {
  std::uint64_t start;
  std::uint64_t end;
  std::uint64_t categories;
};
struct PmScanArg {
  std::uint64_t size;
  std::uint64_t flags;
  std::uint64_t start;
  std::uint64_t end;
  std::uint64_t walk_end;
  std::uint64_t vec;
  std::uint64_t vec_len;
  std::uint64_t max_pages;
  std::uint64_t category_inverted;
  std::uint64_t category_mask;
  std::uint64_t category_anyof_mask;
  std::uint64_t return_mask;
};
constexpr unsigned long kPagemapScan = _IOWR('f', 16, PmScanArg);  // NOLINT(hicpp-signed-bitwise)
constexpr std::uint64_t kScanWpMatching = 1;
constexpr std::uint64_t kScanCheckWpAsync = 2;
constexpr std::uint64_t kPageIsWritten = 2;

}  // namespace

std::unique_ptr<AsyncWrites> AsyncWrites::open(std::string* why) {
  const long uffd = syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
  if (uffd < 0) {
    *why = fmt::format("userfaultfd: {} (vm.unprivileged_userfaultfd, or a kernel without it)",
                       strerrordesc_np(errno));
    return nullptr;
  }
  uffdio_api api{};
  api.api = UFFD_API;
  api.features = kFeatureWpAsync | kFeatureWpUnpopulated;
  if (ioctl(static_cast<int>(uffd), UFFDIO_API, &api) != 0) {
    *why = "userfaultfd has no asynchronous write-protection (UFFD_FEATURE_WP_ASYNC: Linux 6.7 and later)";
    close(static_cast<int>(uffd));
    return nullptr;
  }
  const int pagemap = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (pagemap < 0) {
    *why = fmt::format("/proc/self/pagemap: {}", strerrordesc_np(errno));
    close(static_cast<int>(uffd));
    return nullptr;
  }
  std::unique_ptr<AsyncWrites> out(new AsyncWrites(static_cast<int>(uffd), pagemap));
  // Probe the whole path on one page: protect, write, scan finds it.
  const auto page = static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
  void* probe = mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (probe == MAP_FAILED) {
    *why = "could not map a probe page";
    return nullptr;
  }
  const auto base = reinterpret_cast<std::uintptr_t>(probe);
  bool found = false;
  bool ok = out->add(base, page);
  if (ok) {
    *static_cast<volatile char*>(probe) = 1;
    ok = out->scan(base, page, [&](std::uintptr_t, std::uintptr_t) { found = true; });
    out->remove(base, page);
  }
  munmap(probe, page);
  if (!ok || !found) {
    *why = "PAGEMAP_SCAN did not report a written page (a kernel before 6.7?)";
    return nullptr;
  }
  return out;
}

AsyncWrites::~AsyncWrites() {
  close(pagemap_);
  close(uffd_);
}

bool AsyncWrites::add(std::uintptr_t base, std::uint64_t bytes) {
  uffdio_register reg{};
  reg.range = {base, bytes};
  reg.mode = UFFDIO_REGISTER_MODE_WP;
  if (ioctl(uffd_, UFFDIO_REGISTER, &reg) != 0) return false;
  uffdio_writeprotect wp{};
  wp.range = {base, bytes};
  wp.mode = UFFDIO_WRITEPROTECT_MODE_WP;
  if (ioctl(uffd_, UFFDIO_WRITEPROTECT, &wp) != 0) {
    remove(base, bytes);
    return false;
  }
  return true;
}

void AsyncWrites::remove(std::uintptr_t base, std::uint64_t bytes) {
  uffdio_range range{base, bytes};
  ioctl(uffd_, UFFDIO_UNREGISTER, &range);
}

bool AsyncWrites::scan(std::uintptr_t base, std::uint64_t bytes,
                       const std::function<void(std::uintptr_t first, std::uintptr_t end)>& written) {
  std::array<PageRegion, 64> regions{};
  std::uint64_t start = base;
  const std::uint64_t end = base + bytes;
  while (start < end) {
    PmScanArg arg{};
    arg.size = sizeof(arg);
    arg.flags = kScanWpMatching | kScanCheckWpAsync;
    arg.start = start;
    arg.end = end;
    arg.vec = reinterpret_cast<std::uint64_t>(regions.data());
    arg.vec_len = regions.size();
    arg.category_mask = kPageIsWritten;
    arg.return_mask = kPageIsWritten;
    const int n = ioctl(pagemap_, kPagemapScan, &arg);
    if (n < 0) return false;
    for (int i = 0; i < n; ++i)
      written(regions[static_cast<std::size_t>(i)].start, regions[static_cast<std::size_t>(i)].end);
    if (arg.walk_end <= start) return false;  // no progress: give up rather than loop
    start = arg.walk_end;
  }
  return true;
}

}  // namespace tensortier::profiler
