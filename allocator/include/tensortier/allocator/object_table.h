// ObjectTable: maps any address to the span (an object, or a group's shared pages) that holds it,
// readable from a signal handler without a lock or an allocation: a two-level page table over
// 48-bit addresses, span records read under a seqlock. In full: allocator/README.md.
//
// Ownership: the table owns its leaves and chunks (mmap'd); not the spans' memory. Errors are
// values (insert() says when the table is full); nothing throws.
// Thread safety: insert(), set_tier() and erase() from any thread (one mutex orders writers);
// lookup() is lock-free, allocation-free and async-signal-safe, concurrent with writers.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "tensortier/status.h"

namespace tensortier {

// A span as a reader sees it.
struct SpanView {
  std::uint64_t id = 0;     // object id, or group id for a group span
  std::uintptr_t base = 0;  // first byte
  std::uint64_t bytes = 0;  // length (whole pages)
  std::uint32_t tier = 0;   // index of the tier it lives on
  bool is_group = false;    // true: shared pages of small objects of group `id`
};

class ObjectTable {
 public:
  using Slot = std::uint32_t;  // index of a span record

  static constexpr std::size_t kMaxSpans = std::size_t{1} << 24;  // 16M spans live at once

  // max_spans: how many spans may be live at once (at most kMaxSpans; tests use fewer).
  explicit ObjectTable(std::size_t max_spans = kMaxSpans);
  ~ObjectTable();
  ObjectTable(const ObjectTable&) = delete;
  ObjectTable& operator=(const ObjectTable&) = delete;

  // Registers [base, base + bytes) (page-aligned, whole pages, below 2^48). The range must not
  // overlap a registered span. Returns the slot to pass to set_tier() and erase(); kOutOfMemory
  // when max_spans are live or the OS has no memory for the table's own pages.
  Result<Slot> insert(const SpanView& span);
  // Records that the span now lives on another tier (a move keeps its address).
  void set_tier(Slot slot, std::uint32_t tier);
  // Unregisters the span.
  void erase(Slot slot);

  // Finds the span holding `address`. Async-signal-safe; false when none does.
  bool lookup(const void* address, SpanView* out) const noexcept;

  // Registered spans (for tests and stats).
  std::size_t size() const;

 private:
  static constexpr int kPageShift = 12;
  static constexpr int kLeafBits = 18;                          // 2^18 pages = 1 GiB per leaf
  static constexpr int kTopBits = 48 - kPageShift - kLeafBits;  // 2^18 leaves = 256 TiB
  static constexpr std::size_t kLeafEntries = std::size_t{1} << kLeafBits;
  static constexpr std::size_t kTopEntries = std::size_t{1} << kTopBits;
  static constexpr std::size_t kChunkRecords = 4096;
  static constexpr std::size_t kMaxChunks = kMaxSpans / kChunkRecords;

  struct Record {
    std::atomic<std::uint32_t> sequence{0};  // odd while being written
    std::atomic<std::uint64_t> id{0};
    std::atomic<std::uintptr_t> base{0};
    std::atomic<std::uint64_t> bytes{0};
    std::atomic<std::uint32_t> tier{0};
    std::atomic<bool> is_group{false};
  };
  using Leaf = std::atomic<std::uint32_t>;  // slot + 1; 0 = no span

  Record& record(Slot slot) const;
  Leaf* leaf_for(std::uintptr_t page, bool create);
  void write_record(Record& r, const SpanView& span);
  // Makes every leaf [base, base + bytes) needs; false when the OS gives no memory.
  bool make_leaves(std::uintptr_t base, std::uint64_t bytes);
  void fill(std::uintptr_t base, std::uint64_t bytes, std::uint32_t value);  // leaves made

  const std::size_t max_spans_;
  std::atomic<Leaf*>* top_ = nullptr;  // kTopEntries leaf pointers (mmap'd; null if that failed)
  std::array<std::atomic<Record*>, kMaxChunks> chunks_{};
  mutable std::mutex writer_mutex_;  // orders insert/set_tier/erase
  std::vector<Leaf*> leaves_;        // every leaf made; guarded by writer_mutex_
  std::vector<Slot> free_slots_;     // guarded by writer_mutex_
  Slot next_slot_ = 0;               // guarded by writer_mutex_
  std::size_t live_ = 0;             // guarded by writer_mutex_
};

}  // namespace tensortier
