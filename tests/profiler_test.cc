// FaultTracker: exact read/write sets of a stretch of code, on the main thread and on worker
// threads, and faults it does not own still reaching the handler that was there before.
#include "tensortier/profiler/fault_tracker.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include <gtest/gtest.h>

#include "tensortier/runtime.h"

namespace tensortier::profiler {
namespace {

bool runtime_lookup(const void* context, const void* address, SpanView* out) {
  return static_cast<const Runtime*>(context)->lookup(address, out);
}

struct Objects {
  std::unique_ptr<Runtime> rt;
  std::vector<ObjectInfo> objects;
  std::vector<SpanView> spans;
};

Objects make(int count, std::size_t bytes) {
  Objects o;
  o.rt = Runtime::create({"fast=dram:256MiB"}).value();
  for (int i = 0; i < count; ++i) {
    o.objects.push_back(o.rt->allocate("o" + std::to_string(i), bytes).value());
    SpanView span;
    EXPECT_TRUE(o.rt->lookup(o.objects.back().address, &span));
    o.spans.push_back(span);
  }
  return o;
}

TEST(FaultTracker, RecordsExactlyWhatIsReadAndWritten) {
  Objects o = make(5, 3 * 4096);
  auto tracker = FaultTracker::install(runtime_lookup, o.rt.get());
  ASSERT_TRUE(tracker) << tracker.status().to_string();
  auto bytes = [&](int i) { return static_cast<volatile unsigned char*>(o.objects[i].address); };
  bytes(0)[5] = 1;  // written before arming: not recorded
  ASSERT_TRUE(tracker.value()->arm(o.spans).is_ok());
  const unsigned char read = bytes(0)[4096 + 7];                     // 0: read
  bytes(1)[100] = 7;                                                 // 1: written
  bytes(2)[2 * 4096] = static_cast<unsigned char>(bytes(2)[0] + 1);  // 2: read, then written
  // 3: untouched; 4: written on another thread
  std::thread([&] { bytes(4)[9] = 3; }).join();
  const auto access = tracker.value()->disarm();
  ASSERT_EQ(access.size(), 5u);
  EXPECT_EQ(read, 0);
  EXPECT_TRUE(access[0].read);
  EXPECT_FALSE(access[0].written);
  EXPECT_TRUE(access[1].written);
  EXPECT_FALSE(access[1].read);  // the error code tells a write from a read on x86-64
  EXPECT_TRUE(access[2].read && access[2].written);
  EXPECT_FALSE(access[3].read || access[3].written);
  EXPECT_TRUE(access[4].written);
  for (std::size_t i = 0; i < access.size(); ++i) EXPECT_EQ(access[i].span.id, o.objects[i].id);
  // Bytes are intact and the memory is writable again.
  EXPECT_EQ(bytes(1)[100], 7);
  bytes(3)[0] = 1;
}

TEST(FaultTracker, OnlyOneAtATimeAndArmRejectsUnalignedSpans) {
  Objects o = make(1, 4096);
  auto first = FaultTracker::install(runtime_lookup, o.rt.get());
  ASSERT_TRUE(first);
  auto second = FaultTracker::install(runtime_lookup, o.rt.get());
  ASSERT_FALSE(second);
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  SpanView bad = o.spans[0];
  bad.base += 8;
  EXPECT_EQ(first.value()->arm(std::span<const SpanView>(&bad, 1)).code(), StatusCode::kInvalidArgument);
}

// The child's exit: how it died.
int run_child(void (*body)()) {
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(10);  // a handler that swallowed the fault would loop forever: die of SIGALRM instead
    body();
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

void crash_with_tracker_installed() {
  static Objects o = make(1, 4096);
  static auto tracker = FaultTracker::install(runtime_lookup, o.rt.get());
  (void)tracker.value()->arm(o.spans);
  // A real bug: a store to memory no object owns (a page nobody may touch; not a null pointer,
  // which UBSan would catch before the fault).
  void* page = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  *static_cast<volatile int*>(page) = 1;
}

TEST(FaultTracker, ARealSegfaultStillKillsTheProcess) {
  const int status = run_child(crash_with_tracker_installed);
#if defined(__SANITIZE_ADDRESS__)
  // AddressSanitizer's own SIGSEGV handler was there first: it reports, then exits non-zero or
  // aborts (abort_on_error). Either way the process died, and not of the watchdog's SIGALRM.
  const bool exited_failing = WIFEXITED(status) && WEXITSTATUS(status) != 0;
  const bool killed = WIFSIGNALED(status) && WTERMSIG(status) != SIGALRM;
  EXPECT_TRUE(exited_failing || killed) << "status " << status;
#else
  ASSERT_TRUE(WIFSIGNALED(status)) << "the child did not die of a signal";
  EXPECT_EQ(WTERMSIG(status), SIGSEGV);
#endif
}

void previous_handler(int) {
  _exit(42);
}

void crash_with_a_previous_handler() {
  signal(SIGSEGV, previous_handler);
  crash_with_tracker_installed();
}

TEST(FaultTracker, FaultsItDoesNotOwnGoToThePreviousHandler) {
  const int status = run_child(crash_with_a_previous_handler);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 42);
}

}  // namespace
}  // namespace tensortier::profiler
