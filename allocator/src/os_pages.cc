// Linux implementation of the OS layer (os_pages.h).
#include "os_pages.h"

#include <numa.h>
#include <numaif.h>
#include <sys/mman.h>
#include <unistd.h>
#include <atomic>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14 uapi value; older headers lack the name
#endif

namespace tensortier::os {

namespace {
std::atomic<std::uint64_t> g_mapping_calls{0};
void count_call() {
  g_mapping_calls.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

std::uint64_t mapping_calls() {
  return g_mapping_calls.load(std::memory_order_relaxed);
}
namespace {

std::size_t page_bytes() {
  return static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

std::uintptr_t as_uint(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p);
}
void* as_ptr(std::uintptr_t u) {
  return reinterpret_cast<void*>(u);
}

}  // namespace

Result<void*> map_anonymous(std::size_t bytes, std::size_t alignment) {
  count_call();
  const std::size_t page = page_bytes();
  const std::size_t slack = alignment > page ? alignment - page : 0;
  void* raw = mmap(nullptr, bytes + slack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) {
    return out_of_memory(fmt::format("mmap of {} bytes failed: {}", bytes, strerrordesc_np(errno)));
  }
  // Trim the unaligned head and the tail so exactly [aligned, aligned + bytes) stays mapped.
  const std::uintptr_t start = as_uint(raw);
  const std::uintptr_t aligned = (start + alignment - 1) & ~(std::uintptr_t{alignment} - 1);
  if (aligned > start) munmap(raw, aligned - start);
  const std::uintptr_t end = start + bytes + slack;
  if (end > aligned + bytes) munmap(as_ptr(aligned + bytes), end - (aligned + bytes));
  return as_ptr(aligned);
}

void unmap(void* address, std::size_t bytes) {
  count_call();
  munmap(address, bytes);
}

void advise_huge_pages(void* address, std::size_t bytes) {
  count_call();
  // Best effort: where THP is off ("never") or the mapping cannot take it, 4 KiB pages serve.
  (void)madvise(address, bytes, MADV_HUGEPAGE);
}

void advise_no_huge_pages(void* address, std::size_t bytes) {
  count_call();
  (void)madvise(address, bytes, MADV_NOHUGEPAGE);  // best effort, as above
}

Status populate(void* address, std::size_t bytes) {
  count_call();
  if (madvise(address, bytes, MADV_POPULATE_WRITE) == 0) return Status::ok();
  if (errno == ENOMEM || errno == EFAULT || errno == EHWPOISON) {
    return out_of_memory(
        fmt::format("the kernel could not back {} bytes: {}", bytes, strerrordesc_np(errno)));
  }
  // EINVAL: a kernel older than 5.14. Touch each page (a fault each, as the first use would).
  auto* bytes_ptr = static_cast<volatile unsigned char*>(address);
  const std::size_t page = page_bytes();
  for (std::size_t off = 0; off < bytes; off += page) bytes_ptr[off] = bytes_ptr[off];
  return Status::ok();
}

static Status bind_range(void* address, std::size_t bytes, int node, unsigned flags) {
  const unsigned long max_node = static_cast<unsigned long>(numa_max_possible_node()) + 1;
  std::vector<unsigned long> mask((max_node + 63) / 64, 0);
  mask[static_cast<std::size_t>(node) / 64] |= 1UL << (static_cast<unsigned>(node) % 64);
  if (mbind(address, bytes, MPOL_BIND, mask.data(), max_node + 1, flags) != 0) {
    return internal_error(fmt::format("mbind to NUMA node {} failed: {}", node, strerrordesc_np(errno)));
  }
  return Status::ok();
}

Status bind_to_node(void* address, std::size_t bytes, int node) {
  count_call();
  return bind_range(address, bytes, node, MPOL_MF_STRICT);
}

Result<void*> replace_mapping(void* replacement, void* at, std::size_t bytes, std::size_t alignment) {
  count_call();
  // An aligned place for the old pages, so that huge pages stay huge (mremap moves whole PMDs
  // only between 2 MiB-aligned addresses).
  Result<void*> aside = map_anonymous(bytes, alignment);
  if (!aside) return aside;
  // MREMAP_DONTUNMAP leaves `at` mapped (empty) while its pages move aside: `at` is never a hole,
  // so no mmap by another thread (a tier, malloc, oneDNN) can be given it before the replacement
  // lands there (MREMAP_FIXED onto a live mapping replaces it in one step).
  if (mremap(at, bytes, bytes, MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP, aside.value()) ==
      MAP_FAILED) {
    const int error = errno;
    unmap(aside.value(), bytes);
    if (error != EINVAL) {
      return internal_error(
          fmt::format("mremap of {} bytes at {} aside failed: {}", bytes, at, strerrordesc_np(error)));
    }
    // A kernel without MREMAP_DONTUNMAP for this mapping (before 5.7; shared ones before 5.13):
    // the replacement goes over `at` directly and the old pages are dropped.
    if (mremap(replacement, bytes, bytes, MREMAP_MAYMOVE | MREMAP_FIXED, at) == MAP_FAILED) {
      return internal_error(
          fmt::format("mremap of {} bytes over {} failed: {}", bytes, at, strerrordesc_np(errno)));
    }
    return static_cast<void*>(nullptr);
  }
  if (mremap(replacement, bytes, bytes, MREMAP_MAYMOVE | MREMAP_FIXED, at) == MAP_FAILED) {
    const int error = errno;
    (void)mremap(aside.value(), bytes, bytes, MREMAP_MAYMOVE | MREMAP_FIXED, at);  // put it back
    return internal_error(
        fmt::format("mremap of {} bytes over {} failed: {}", bytes, at, strerrordesc_np(error)));
  }
  return aside;
}

Status remap_pages(void* from, std::size_t bytes, void* to) {
  count_call();
  if (mremap(from, bytes, bytes, MREMAP_MAYMOVE | MREMAP_FIXED, to) == MAP_FAILED) {
    return internal_error(
        fmt::format("mremap of {} bytes from {} to {} failed: {}", bytes, from, to, strerrordesc_np(errno)));
  }
  return Status::ok();
}

// The address of each page of [address, address + bytes), as move_pages takes them.
static std::vector<void*> page_addresses(const void* address, std::size_t bytes) {
  const std::size_t page = page_bytes();
  std::vector<void*> pages((bytes + page - 1) / page);
  for (std::size_t i = 0; i < pages.size(); ++i) pages[i] = as_ptr(as_uint(address) + i * page);
  return pages;
}

Result<std::vector<int>> page_nodes(const void* address, std::size_t bytes) {
  std::vector<void*> pages = page_addresses(address, bytes);
  std::vector<int> status(pages.size(), 0);
  if (move_pages(0, pages.size(), pages.data(), nullptr, status.data(), 0) != 0) {
    return internal_error(fmt::format("move_pages query failed: {}", strerrordesc_np(errno)));
  }
  return status;
}

Status move_to_node(void* address, std::size_t bytes, int node) {
  count_call();
  std::vector<void*> pages = page_addresses(address, bytes);
  const std::size_t count = pages.size();
  // A transparent huge page moves whole with its first 4 KiB page; move_pages then reports its
  // other pages as busy (-EBUSY), and a page under concurrent use (another thread's write, a
  // query of its node) can be busy for a moment too. So what counts is where each page is
  // afterwards: query, and try the stragglers again, after a short pause from the second time.
  constexpr int kAttempts = 4;
  for (int attempt = 0; attempt < kAttempts && !pages.empty(); ++attempt) {
    if (attempt >= 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::vector<int> nodes(pages.size(), node);
    std::vector<int> status(pages.size(), 0);
    if (move_pages(0, pages.size(), pages.data(), nodes.data(), status.data(), MPOL_MF_MOVE) < 0) {
      return internal_error(fmt::format("move_pages to node {} failed: {}", node, strerrordesc_np(errno)));
    }
    if (move_pages(0, pages.size(), pages.data(), nullptr, status.data(), 0) != 0) {
      return internal_error(fmt::format("move_pages query failed: {}", strerrordesc_np(errno)));
    }
    std::vector<void*> off_node;
    std::string first_problem;
    for (std::size_t i = 0; i < pages.size(); ++i) {
      if (status[i] == node) continue;
      off_node.push_back(pages[i]);
      if (first_problem.empty()) {
        first_problem = status[i] < 0 ? strerrordesc_np(-status[i]) : fmt::format("on node {}", status[i]);
      }
    }
    if (off_node.empty()) return Status::ok();
    if (attempt == kAttempts - 1) {
      return internal_error(fmt::format("move_pages left {} of {} pages off node {} (first: {})",
                                        off_node.size(), count, node, first_problem));
    }
    pages = std::move(off_node);
  }
  return Status::ok();
}

}  // namespace tensortier::os

namespace tensortier::os {

Status rebind_to_node(void* address, std::size_t bytes, int node) {
  count_call();
  // MPOL_MF_MOVE moves the pages only this process maps; a page that could not move is caught
  // by move_to_node's check below, which retries it.
  TENSORTIER_RETURN_IF_ERROR(bind_range(address, bytes, node, MPOL_MF_MOVE));
  return move_to_node(address, bytes, node);
}

}  // namespace tensortier::os
