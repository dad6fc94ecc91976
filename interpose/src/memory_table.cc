// The memory table (memory_table.h).
#include "memory_table.h"

namespace tensortier::interpose {

void MemoryTable::put(const_dnnl_memory_t memory, const MemoryRecord& record) {
  std::lock_guard lock(mutex_);
  records_[memory] = record;
}

std::optional<MemoryRecord> MemoryTable::get(const_dnnl_memory_t memory) const {
  std::lock_guard lock(mutex_);
  const auto it = records_.find(memory);
  if (it == records_.end()) return std::nullopt;
  return it->second;
}

std::optional<MemoryRecord> MemoryTable::take(const_dnnl_memory_t memory) {
  std::lock_guard lock(mutex_);
  const auto it = records_.find(memory);
  if (it == records_.end()) return std::nullopt;
  MemoryRecord record = it->second;
  records_.erase(it);
  return record;
}

std::size_t MemoryTable::orphan_aliases(std::uint64_t object) {
  std::lock_guard lock(mutex_);
  std::size_t n = 0;
  for (auto& [memory, record] : records_) {
    if (record.object != object) continue;
    record.object = 0;
    record.offset = 0;
    record.owned = false;
    ++n;
  }
  return n;
}

void MemoryTable::set_handle(const_dnnl_memory_t memory, void* handle) {
  std::lock_guard lock(mutex_);
  if (const auto it = records_.find(memory); it != records_.end()) it->second.handle = handle;
}

}  // namespace tensortier::interpose
