// The operating-system layer of the allocator: anonymous page mappings, huge-page advice,
// pre-faulting, and NUMA page queries. Every mmap/madvise/mbind/move_pages call of the tiers
// goes through here, so the rest of allocator/ is plain C++.
// All functions are thread-safe (they only make system calls on the ranges given).
#pragma once

#include <cstddef>
#include <vector>

#include "tensortier/status.h"

namespace tensortier::os {

// How many of the calls below this process has made (each counts one): what a test of a step that
// must map nothing reads. Lock-free.
std::uint64_t mapping_calls();

// Maps `bytes` of private anonymous read-write memory aligned to `alignment` (a power of two,
// >= the page size). Errors carry strerror(errno).
Result<void*> map_anonymous(std::size_t bytes, std::size_t alignment);
void unmap(void* address, std::size_t bytes);

// Asks for transparent huge pages on [address, address + bytes); best effort (no error).
void advise_huge_pages(void* address, std::size_t bytes);
// A range that must never share a transparent huge page with its neighbours (one that moves by
// move_pages: the kernel migrates a huge page whole, the neighbour's pages with it).
void advise_no_huge_pages(void* address, std::size_t bytes);

// Faults every page in now, so later accesses take no page fault and NUMA policy is applied at
// once. Uses MADV_POPULATE_WRITE (Linux >= 5.14), else touches one byte per page. Fails with
// kOutOfMemory where the kernel cannot back the range (e.g. a full NUMA node).
Status populate(void* address, std::size_t bytes);

// Binds the range to one NUMA node (mbind MPOL_BIND) before it is faulted in.
Status bind_to_node(void* address, std::size_t bytes, int node);

// The NUMA node of each page of the range (move_pages query); -errno for a page not present.
Result<std::vector<int>> page_nodes(const void* address, std::size_t bytes);

// Moves each page of the range to `node` with move_pages; the addresses stay the same.
Status move_to_node(void* address, std::size_t bytes, int node);

// Rebinds the range's memory policy to `node` (mbind MPOL_BIND with MPOL_MF_MOVE, so pages
// already there move too, and later faults land on `node`), then checks every page and moves
// stragglers (move_to_node). The bytes and addresses stay the same.
Status rebind_to_node(void* address, std::size_t bytes, int node);

// Puts the mapping at `replacement` at `at` (both `bytes` long) and returns the address, aligned
// to `alignment`, that the mapping which was at `at` has now, its pages kept (mremap both ways:
// no byte is copied). `at` stays mapped throughout (MREMAP_DONTUNMAP), so no other mapping can
// take its place meanwhile; between the two mremaps it reads as zeros: the caller makes sure
// nothing uses it. Where the kernel lacks MREMAP_DONTUNMAP the old pages are dropped and the
// result is nullptr. On failure both mappings are where they were.
Result<void*> replace_mapping(void* replacement, void* at, std::size_t bytes, std::size_t alignment);

// Moves the pages of [from, from + bytes) to `to` (mremap MREMAP_FIXED over part of a mapping the
// caller owns): page tables move, no byte is copied and no page faults in later. `from` is
// unmapped after. On failure nothing moved.
Status remap_pages(void* from, std::size_t bytes, void* to);

}  // namespace tensortier::os
