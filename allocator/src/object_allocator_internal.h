// What ObjectAllocator's source files share (internal to allocator/): small address helpers and
// the rollback of a failed move_pages migration.
#pragma once

#include <cstddef>
#include <cstdint>

#include <spdlog/spdlog.h>

#include "os_pages.h"
#include "tensortier/allocator/tier.h"
#include "tensortier/status.h"

namespace tensortier::object_allocator_internal {

// The alignment Tier::map_reserved gives a range of `bytes`.
inline std::size_t range_alignment(std::size_t bytes) {
  return bytes >= kHugePageBytes ? kHugePageBytes : kPageBytes;
}

inline std::uintptr_t as_uint(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p);
}

// Rolls a failed move_pages migration back: the pages go back to `node`. The bytes are right
// wherever the pages are; a page that will not go back leaves the object on two nodes, which
// costs only speed, so that is logged (once per failed rollback) rather than failed.
inline void put_pages_back(void* base, std::size_t bytes, int node, const Status& why) {
  if (Status back = os::rebind_to_node(base, bytes, node); !back.is_ok()) {
    spdlog::warn(
        "a move_pages migration failed ({}) and its rollback to node {} did too ({}); the object's "
        "bytes are intact, but some of its pages stay on the other node",
        why.message(), node, back.message());
  }
}

}  // namespace tensortier::object_allocator_internal
