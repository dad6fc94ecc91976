// Which runtime object backs each oneDNN memory the program made, and the memories the program
// backs itself.
//
//   dnnl_memory_create(handle)     record
//   DNNL_MEMORY_ALLOCATE           an object of the descriptor's size, made for the memory
//                                  (owned: freed when the memory is destroyed or re-pointed)
//   the start or inside of a live  an alias: the object and the offset in it (not owned)
//   object (not a packed small one)
//   any other pointer              the program's buffer: counted, never moved
//   DNNL_MEMORY_NONE               no buffer until set_data_handle gives one
//
// The table only keeps records; the interposer makes and frees the objects. Any thread (one
// mutex); a record is copied out, never referenced.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.h>

namespace tensortier::interpose {

struct MemoryRecord {
  std::uint64_t object = 0;  // the object backing it (0: none, the program's buffer)
  std::uint64_t offset = 0;  // bytes into the object (an alias)
  bool owned = false;        // the object was made for this memory
  std::uint64_t bytes = 0;   // the descriptor's size
  void* handle = nullptr;    // what oneDNN holds now
};

class MemoryTable {
 public:
  void put(const_dnnl_memory_t memory, const MemoryRecord& record);
  std::optional<MemoryRecord> get(const_dnnl_memory_t memory) const;
  std::optional<MemoryRecord> take(const_dnnl_memory_t memory);
  // Records that alias `object`, made the program's buffers (the object is gone): how many.
  std::size_t orphan_aliases(std::uint64_t object);
  void set_handle(const_dnnl_memory_t memory, void* handle);

 private:
  mutable std::mutex mutex_;
  std::unordered_map<const_dnnl_memory_t, MemoryRecord> records_;
};

}  // namespace tensortier::interpose
