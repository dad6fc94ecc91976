// Signal-safe address-to-span table (see object_table.h for the design).
#include "tensortier/allocator/object_table.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <new>

#include <fmt/format.h>

namespace tensortier {
namespace {

// Zero-filled memory straight from the kernel: untouched parts of the (large, sparse) arrays
// cost nothing, and zero is "empty" for every entry.
// nullptr when the OS has none.
void* map_zeroed(std::size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

// A reader retries while the record is being written. A writer preempted between its odd and
// even sequence stores (it holds writer_mutex_, and touches no watched memory, so it always gets
// to finish) can keep the record odd for a scheduler tick: after kSpinTries the reader yields the
// CPU to it (sched_yield: a bare system call, no lock, safe in the SIGSEGV handler). Giving up
// early would report a live span as absent, and the profiler's own fault would become a crash;
// kMaxReadTries only bounds a bug (a writer that never finishes) to seconds.
constexpr int kSpinTries = 64;
constexpr int kMaxReadTries = 1 << 20;

}  // namespace

ObjectTable::ObjectTable(std::size_t max_spans)
    : max_spans_(std::min(max_spans, kMaxSpans)),
      top_(static_cast<std::atomic<Leaf*>*>(map_zeroed(kTopEntries * sizeof(std::atomic<Leaf*>)))) {}

ObjectTable::~ObjectTable() {
  for (Leaf* leaf : leaves_) munmap(leaf, kLeafEntries * sizeof(Leaf));
  if (top_ != nullptr) munmap(top_, kTopEntries * sizeof(std::atomic<Leaf*>));
  for (auto& chunk : chunks_) {
    if (Record* c = chunk.load(std::memory_order_relaxed)) {
      for (std::size_t i = 0; i < kChunkRecords; ++i) c[i].~Record();
      std::free(c);
    }
  }
}

ObjectTable::Record& ObjectTable::record(Slot slot) const {
  return chunks_[slot / kChunkRecords].load(std::memory_order_acquire)[slot % kChunkRecords];
}

ObjectTable::Leaf* ObjectTable::leaf_for(std::uintptr_t page, bool create) {
  std::atomic<Leaf*>& entry = top_[page >> kLeafBits];
  Leaf* leaf = entry.load(std::memory_order_acquire);
  if (leaf == nullptr && create) {
    leaf = static_cast<Leaf*>(map_zeroed(kLeafEntries * sizeof(Leaf)));
    if (leaf == nullptr) return nullptr;
    leaves_.push_back(leaf);
    entry.store(leaf, std::memory_order_release);
  }
  return leaf;
}

bool ObjectTable::make_leaves(std::uintptr_t base, std::uint64_t bytes) {
  const std::uintptr_t first = base >> kPageShift;
  const std::uintptr_t last = (base + bytes - 1) >> kPageShift;
  for (std::uintptr_t leaf = first >> kLeafBits; leaf <= last >> kLeafBits; ++leaf) {
    if (leaf_for(leaf << kLeafBits, /*create=*/true) == nullptr) return false;
  }
  return true;
}

void ObjectTable::fill(std::uintptr_t base, std::uint64_t bytes, std::uint32_t value) {
  const std::uintptr_t first = base >> kPageShift;
  const std::uintptr_t last = (base + bytes - 1) >> kPageShift;
  for (std::uintptr_t page = first; page <= last;) {
    Leaf* leaf = leaf_for(page, /*create=*/false);  // made by insert()
    if (leaf == nullptr) return;
    const std::uintptr_t leaf_end = ((page >> kLeafBits) + 1) << kLeafBits;
    for (; page <= last && page < leaf_end; ++page) {
      leaf[page & (kLeafEntries - 1)].store(value, std::memory_order_release);
    }
  }
}

void ObjectTable::write_record(Record& r, const SpanView& span) {
  // Seqlock writer without fences (ThreadSanitizer cannot model fences): the odd sequence store
  // comes first, and each field store is a release, so a reader that sees any new field value
  // also sees the odd sequence number (Boehm, "Can seqlocks get along with programming language
  // memory models?", MSPC 2012).
  const std::uint32_t seq = r.sequence.load(std::memory_order_relaxed);
  r.sequence.store(seq + 1, std::memory_order_relaxed);  // odd: being written
  r.id.store(span.id, std::memory_order_release);
  r.base.store(span.base, std::memory_order_release);
  r.bytes.store(span.bytes, std::memory_order_release);
  r.tier.store(span.tier, std::memory_order_release);
  r.is_group.store(span.is_group, std::memory_order_release);
  r.sequence.store(seq + 2, std::memory_order_release);  // even: stable
}

Result<ObjectTable::Slot> ObjectTable::insert(const SpanView& span) {
  std::lock_guard lock(writer_mutex_);
  if (live_ >= max_spans_) {
    return out_of_memory(
        fmt::format("the object table holds its most live spans ({}); free objects first, "
                    "or allocate fewer, larger ones",
                    max_spans_));
  }
  if (top_ == nullptr || !make_leaves(span.base, span.bytes)) {
    return out_of_memory("the OS gave no memory for the object table's own pages");
  }
  Slot slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    const std::size_t chunk = next_slot_ / kChunkRecords;
    if (chunks_[chunk].load(std::memory_order_relaxed) == nullptr) {
      void* memory = std::calloc(kChunkRecords, sizeof(Record));
      if (memory == nullptr) return out_of_memory("the object table could not grow: no memory");
      auto* records = static_cast<Record*>(memory);
      for (std::size_t i = 0; i < kChunkRecords; ++i) new (&records[i]) Record();
      chunks_[chunk].store(records, std::memory_order_release);
    }
    slot = next_slot_++;
  }
  write_record(record(slot), span);
  fill(span.base, span.bytes, slot + 1);
  ++live_;
  return slot;
}

void ObjectTable::set_tier(Slot slot, std::uint32_t tier) {
  std::lock_guard lock(writer_mutex_);
  Record& r = record(slot);
  SpanView span{r.id.load(std::memory_order_relaxed), r.base.load(std::memory_order_relaxed),
                r.bytes.load(std::memory_order_relaxed), tier, r.is_group.load(std::memory_order_relaxed)};
  write_record(r, span);
}

void ObjectTable::erase(Slot slot) {
  std::lock_guard lock(writer_mutex_);
  Record& r = record(slot);
  fill(r.base.load(std::memory_order_relaxed), r.bytes.load(std::memory_order_relaxed), 0);
  write_record(r, SpanView{});
  free_slots_.push_back(slot);
  --live_;
}

bool ObjectTable::lookup(const void* address, SpanView* out) const noexcept {
  const auto addr = reinterpret_cast<std::uintptr_t>(address);
  const std::uintptr_t page = addr >> kPageShift;
  if (top_ == nullptr || (page >> kLeafBits) >= kTopEntries) return false;
  const Leaf* leaf = top_[page >> kLeafBits].load(std::memory_order_acquire);
  if (leaf == nullptr) return false;
  const std::uint32_t entry = leaf[page & (kLeafEntries - 1)].load(std::memory_order_acquire);
  if (entry == 0) return false;
  const Slot slot = entry - 1;
  const Record* chunk = chunks_[slot / kChunkRecords].load(std::memory_order_acquire);
  if (chunk == nullptr) return false;
  const Record& r = chunk[slot % kChunkRecords];
  for (int attempt = 0; attempt < kMaxReadTries; ++attempt) {
    if (attempt >= kSpinTries) syscall(SYS_sched_yield);
    const std::uint32_t before = r.sequence.load(std::memory_order_acquire);
    if ((before & 1U) != 0) continue;
    // Acquire loads keep the second sequence read after the field reads.
    SpanView span{r.id.load(std::memory_order_acquire), r.base.load(std::memory_order_acquire),
                  r.bytes.load(std::memory_order_acquire), r.tier.load(std::memory_order_acquire),
                  r.is_group.load(std::memory_order_acquire)};
    if (r.sequence.load(std::memory_order_relaxed) != before) continue;
    // The slot may have been reused for another span between the leaf read and now.
    if (addr < span.base || addr - span.base >= span.bytes) return false;
    *out = span;
    return true;
  }
  return false;
}

std::size_t ObjectTable::size() const {
  std::lock_guard lock(writer_mutex_);
  return live_;
}

}  // namespace tensortier
