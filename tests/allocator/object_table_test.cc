// ObjectTable: exact lookup, reuse of slots, and lookup from inside a SIGSEGV handler.
#include "tensortier/allocator/object_table.h"

#include <signal.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstring>

#include <gtest/gtest.h>

namespace tensortier {
namespace {

constexpr std::uintptr_t kBase = std::uintptr_t{0x7f0000000000};

TEST(ObjectTable, FindsTheSpanOfEveryAddressInside) {
  ObjectTable table;
  const auto slot = table.insert({42, kBase, 3 * 4096, 1, false}).value();
  SpanView span;
  for (std::uintptr_t a : {kBase, kBase + 1, kBase + 4096, kBase + 3 * 4096 - 1}) {
    ASSERT_TRUE(table.lookup(reinterpret_cast<void*>(a), &span)) << std::hex << a;
    EXPECT_EQ(span.id, 42u);
    EXPECT_EQ(span.base, kBase);
    EXPECT_EQ(span.bytes, 3u * 4096);
    EXPECT_EQ(span.tier, 1u);
  }
  EXPECT_FALSE(table.lookup(reinterpret_cast<void*>(kBase - 1), &span));
  EXPECT_FALSE(table.lookup(reinterpret_cast<void*>(kBase + 3 * 4096), &span));
  EXPECT_FALSE(table.lookup(nullptr, &span));
  table.set_tier(slot, 0);
  ASSERT_TRUE(table.lookup(reinterpret_cast<void*>(kBase), &span));
  EXPECT_EQ(span.tier, 0u);
  table.erase(slot);
  EXPECT_FALSE(table.lookup(reinterpret_cast<void*>(kBase), &span));
  EXPECT_EQ(table.size(), 0u);
}

TEST(ObjectTable, SpansAcrossALeafBoundaryAndReusedSlots) {
  ObjectTable table;
  const std::uintptr_t gib = std::uintptr_t{1} << 30;
  const std::uintptr_t base = kBase + gib - 2 * 4096;  // two pages in one leaf, two in the next
  auto a = table.insert({1, base, 4 * 4096, 0, false}).value();
  SpanView span;
  ASSERT_TRUE(table.lookup(reinterpret_cast<void*>(base + 3 * 4096), &span));
  EXPECT_EQ(span.id, 1u);
  table.erase(a);
  auto b = table.insert({2, kBase, 4096, 0, true}).value();
  EXPECT_EQ(a, b);  // slot reused
  EXPECT_FALSE(table.lookup(reinterpret_cast<void*>(base), &span));
  ASSERT_TRUE(table.lookup(reinterpret_cast<void*>(kBase), &span));
  EXPECT_EQ(span.id, 2u);
  EXPECT_TRUE(span.is_group);
}

TEST(ObjectTable, HundredThousandSpans) {
  ObjectTable table;
  for (std::uint64_t i = 0; i < 100'000; ++i)
    ASSERT_TRUE(table.insert({i + 1, kBase + i * 8192, 4096, 0, false}));
  EXPECT_EQ(table.size(), 100'000u);
  SpanView span;
  for (std::uint64_t i = 0; i < 100'000; i += 997) {
    ASSERT_TRUE(table.lookup(reinterpret_cast<void*>(kBase + i * 8192 + 100), &span));
    EXPECT_EQ(span.id, i + 1);
    EXPECT_FALSE(table.lookup(reinterpret_cast<void*>(kBase + i * 8192 + 4096), &span));  // gaps
  }
}

// A full table says so (an error value, not an exception) and registers nothing; a freed slot
// makes room again.
TEST(ObjectTable, AFullTableRefusesAnInsertWithAnError) {
  ObjectTable table(/*max_spans=*/3);
  ObjectTable::Slot slots[3];
  for (std::uint64_t i = 0; i < 3; ++i)
    slots[i] = table.insert({i + 1, kBase + i * 8192, 4096, 0, false}).value();
  const Result<ObjectTable::Slot> fourth = table.insert({4, kBase + 3 * 8192, 4096, 0, false});
  ASSERT_FALSE(fourth);
  EXPECT_EQ(fourth.status().code(), StatusCode::kOutOfMemory);
  EXPECT_NE(fourth.status().message().find("most live spans (3)"), std::string::npos)
      << fourth.status().message();
  SpanView span;
  EXPECT_FALSE(table.lookup(reinterpret_cast<void*>(kBase + 3 * 8192), &span));
  EXPECT_EQ(table.size(), 3u);
  table.erase(slots[1]);
  EXPECT_TRUE(table.insert({4, kBase + 3 * 8192, 4096, 0, false}));
}

// The handler does what the profiler's will: look the address up, record, unprotect, return.
ObjectTable* g_table = nullptr;
volatile sig_atomic_t g_found_id = 0;
volatile sig_atomic_t g_faults = 0;

void handler(int, siginfo_t* info, void*) {
  SpanView span;
  if (g_table->lookup(info->si_addr, &span)) {
    g_found_id = static_cast<sig_atomic_t>(span.id);
    g_faults = g_faults + 1;
    mprotect(reinterpret_cast<void*>(span.base), span.bytes, PROT_READ | PROT_WRITE);
    return;
  }
  signal(SIGSEGV, SIG_DFL);  // not ours: crash as usual
}

TEST(ObjectTable, LookupWorksInsideASigsegvHandler) {
  ObjectTable table;
  g_table = &table;
  void* memory = mmap(nullptr, 2 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(memory, MAP_FAILED);
  ASSERT_TRUE(table.insert({7, reinterpret_cast<std::uintptr_t>(memory), 2 * 4096, 0, false}));
  struct sigaction action {};
  struct sigaction previous {};
  action.sa_sigaction = handler;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  ASSERT_EQ(sigaction(SIGSEGV, &action, &previous), 0);
  ASSERT_EQ(mprotect(memory, 2 * 4096, PROT_NONE), 0);
  static_cast<volatile char*>(memory)[4096 + 5] = 9;  // faults once, handler unprotects
  sigaction(SIGSEGV, &previous, nullptr);
  EXPECT_EQ(g_faults, 1);
  EXPECT_EQ(g_found_id, 7);
  EXPECT_EQ(static_cast<char*>(memory)[4096 + 5], 9);
  munmap(memory, 2 * 4096);
}

}  // namespace
}  // namespace tensortier
