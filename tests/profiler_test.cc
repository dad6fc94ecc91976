// FaultTracker: exact read/write sets of a stretch of code, on the main thread and on worker
// threads, and faults it does not own still reaching the handler that was there before.
#include "tensortier/profiler/fault_tracker.h"

#include "tensortier/profiler/alt_stacks.h"
#include "tensortier/profiler/step_profile.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
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
  RuntimeOptions options("fast=dram:256MiB");
  options.profile.enabled = false;  // these tests drive a FaultTracker of their own
  o.rt = Runtime::create(options).value();
  for (int i = 0; i < count; ++i) {
    o.objects.push_back(o.rt->allocate("o" + std::to_string(i), bytes).value());
    SpanView span;
    EXPECT_TRUE(o.rt->lookup(o.objects.back().address, &span));
    o.spans.push_back(span);
  }
  return o;
}

FaultTracker::Options small_units() {
  FaultTracker::Options o;
  o.unit_bytes = kSmallPageBytes;
  return o;
}

Status watch_all(FaultTracker& t, const std::vector<SpanView>& spans) {
  for (const SpanView& s : spans) TENSORTIER_RETURN_IF_ERROR(t.watch(s));
  return Status::ok();
}

// The access of span `id` in a collect() result, or null.
const FaultTracker::SpanAccess* find(const std::vector<FaultTracker::SpanAccess>& accesses,
                                     std::uint64_t id) {
  for (const auto& a : accesses) {
    if (a.span.id == id) return &a;
  }
  return nullptr;
}

TEST(FaultTracker, RecordsExactlyWhatIsReadAndWritten) {
  Objects o = make(5, 3 * 4096);
  auto tracker = FaultTracker::install(runtime_lookup, o.rt.get(), small_units());
  ASSERT_TRUE(tracker) << tracker.status().to_string();
  auto bytes = [&](int i) { return static_cast<volatile unsigned char*>(o.objects[i].address); };
  bytes(0)[5] = 1;  // written before watching: not recorded
  ASSERT_TRUE(watch_all(*tracker.value(), o.spans).is_ok());
  const unsigned char read = bytes(0)[4096 + 7];                     // 0: read (page 1)
  bytes(1)[100] = 7;                                                 // 1: written (page 0)
  bytes(2)[2 * 4096] = static_cast<unsigned char>(bytes(2)[0] + 1);  // 2: page 0 read, page 2 written
  // 3: untouched; 4: written on another thread
  std::thread([&] { bytes(4)[9] = 3; }).join();
  const auto access = tracker.value()->collect();
  ASSERT_EQ(access.size(), 4u);  // the untouched span is not reported
  EXPECT_EQ(read, 0);
  const auto* a0 = find(access, o.objects[0].id);
  const auto* a1 = find(access, o.objects[1].id);
  const auto* a2 = find(access, o.objects[2].id);
  const auto* a4 = find(access, o.objects[4].id);
  ASSERT_TRUE(a0 && a1 && a2 && a4);
  EXPECT_EQ(find(access, o.objects[3].id), nullptr);
  EXPECT_EQ(a0->units_read, 1u);
  EXPECT_EQ(a0->units_written, 0u);
  EXPECT_EQ(a1->units_written, 1u);
  EXPECT_EQ(a1->units_read, 0u);  // the error code tells a write from a read on x86-64
  EXPECT_EQ(a2->units_read, 1u);
  EXPECT_EQ(a2->units_written, 1u);
  EXPECT_EQ(a4->units_written, 1u);
  EXPECT_EQ(a0->unit_bytes, kSmallPageBytes);
  // collect() re-protected what was touched: the next interval sees it again.
  bytes(1)[100] = 8;
  const unsigned char again = bytes(0)[4096 + 7];
  const auto second = tracker.value()->collect();
  ASSERT_EQ(second.size(), 2u);
  EXPECT_EQ(again, 0);
  EXPECT_EQ(find(second, o.objects[1].id)->units_written, 1u);
  EXPECT_EQ(find(second, o.objects[0].id)->units_read, 1u);
  tracker.value()->unwatch_all();
  // Bytes are intact and the memory is writable again.
  EXPECT_EQ(bytes(1)[100], 8);
  bytes(3)[0] = 1;
}

TEST(FaultTracker, CountsPagesInItsUnit) {
  // A 6 MiB object (2 MiB aligned by the allocator): 3 units of 2 MiB, or 1536 of 4 KiB.
  Objects o = make(1, 6 << 20);
  auto* bytes = static_cast<volatile unsigned char*>(o.objects[0].address);
  for (std::size_t unit : {kHugePageBytes, kSmallPageBytes}) {
    FaultTracker::Options options;
    options.unit_bytes = unit;
    auto tracker = FaultTracker::install(runtime_lookup, o.rt.get(), options);
    ASSERT_TRUE(tracker);
    ASSERT_TRUE(tracker.value()->watch(o.spans[0]).is_ok());
    for (std::size_t at = 0; at < (3u << 20); at += 4096) bytes[at] = 1;  // writes the first 3 MiB
    const auto access = tracker.value()->collect();
    ASSERT_EQ(access.size(), 1u);
    EXPECT_EQ(access[0].unit_bytes, unit);
    EXPECT_EQ(access[0].units_written, unit == kHugePageBytes ? 2u : 768u);
    EXPECT_EQ(access[0].faults, access[0].units_written);
    EXPECT_EQ(access[0].units_read, 0u);
  }
}

TEST(FaultTracker, SamplingCountsReTouches) {
  Objects o = make(2, 4 * 4096);
  auto tracker = FaultTracker::install(runtime_lookup, o.rt.get(), small_units());
  ASSERT_TRUE(tracker);
  ASSERT_TRUE(watch_all(*tracker.value(), o.spans).is_ok());
  auto* hot = static_cast<volatile unsigned char*>(o.objects[0].address);
  auto* cold = static_cast<volatile unsigned char*>(o.objects[1].address);
  cold[0] = 1;  // touched once
  for (int round = 0; round < 10; ++round) {
    for (int page = 0; page < 4; ++page) hot[page * 4096] = static_cast<unsigned char>(round);
    // Every granted page re-protected: the next round's touch of each hot page is a re-touch.
    EXPECT_EQ(tracker.value()->sample(1.0, 1000), round == 0 ? 5u : 4u);
  }
  const auto access = tracker.value()->collect();
  // 4 first touches + 9 rounds x 4 re-touches, each counted with weight 1 (probability 1).
  EXPECT_DOUBLE_EQ(find(access, o.objects[0].id)->touches, 40.0);
  EXPECT_DOUBLE_EQ(find(access, o.objects[1].id)->touches, 1.0);
  EXPECT_EQ(find(access, o.objects[0].id)->units_written, 4u);
}

TEST(FaultTracker, WritesToldByUserfaultfdSaveTheSecondFault) {
  Objects o = make(2, 4 * 4096);
  FaultTracker::Options options = small_units();
  options.async_writes = true;
  auto tracker = FaultTracker::install(runtime_lookup, o.rt.get(), options);
  ASSERT_TRUE(tracker);
  if (tracker.value()->write_tracking().rfind("userfaultfd", 0) != 0) {
    GTEST_SKIP() << "this kernel has no userfaultfd WP_ASYNC: " << tracker.value()->write_tracking();
  }
  ASSERT_TRUE(watch_all(*tracker.value(), o.spans).is_ok());
  auto* a = static_cast<volatile unsigned char*>(o.objects[0].address);
  auto* b = static_cast<volatile unsigned char*>(o.objects[1].address);
  for (int page = 0; page < 4; ++page)
    a[page * 4096] = static_cast<unsigned char>(a[page * 4096] + 1);  // read, then write
  const unsigned char seen = b[4096];                                 // read only
  auto access = tracker.value()->collect();
  const auto* ra = find(access, o.objects[0].id);
  const auto* rb = find(access, o.objects[1].id);
  ASSERT_TRUE(ra && rb);
  EXPECT_EQ(ra->units_read, 4u);
  EXPECT_EQ(ra->units_written, 4u);  // told by the kernel
  EXPECT_EQ(ra->faults, 4u);         // one fault a page, not two
  EXPECT_EQ(rb->units_read, 1u);
  EXPECT_EQ(rb->units_written, 0u);
  EXPECT_EQ(seen, 0);
  // The next interval starts write-protected again: a write alone is told once more.
  b[4096] = 9;
  access = tracker.value()->collect();
  ASSERT_EQ(access.size(), 1u);
  EXPECT_EQ(access[0].units_written, 1u);
  EXPECT_EQ(access[0].units_read, 0u);
}

TEST(FaultTracker, UnwatchedSpansAreNotTracked) {
  Objects o = make(2, 4096);
  auto tracker = FaultTracker::install(runtime_lookup, o.rt.get(), small_units());
  ASSERT_TRUE(tracker);
  ASSERT_TRUE(watch_all(*tracker.value(), o.spans).is_ok());
  EXPECT_EQ(tracker.value()->watched_spans(), 2u);
  tracker.value()->unwatch(o.spans[0].base);
  static_cast<volatile unsigned char*>(o.objects[0].address)[0] = 1;  // writable again: no fault
  const auto access = tracker.value()->collect();
  EXPECT_TRUE(access.empty());
  EXPECT_EQ(tracker.value()->faults(), 0u);
}

TEST(FaultTracker, GivesThreadsAlternateStacksAndSurvivesOneThatBlocksSignals) {
  Objects o = make(1, 4096);
  std::atomic<int> phase{0};
  std::atomic<bool> had_stack_after{false};
  std::thread blocker([&] {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);
    phase = 1;
    while (phase.load() != 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    pthread_sigmask(SIG_UNBLOCK, &all, nullptr);  // the pending hand-out signal arrives now
    stack_t stack{};
    sigaltstack(nullptr, &stack);
    had_stack_after = (stack.ss_flags & SS_DISABLE) == 0;
  });
  std::atomic<bool> worker_had_stack{false};
  std::atomic<bool> release_worker{false};
  std::thread worker([&] {
    while (!release_worker.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    stack_t stack{};
    sigaltstack(nullptr, &stack);
    worker_had_stack = (stack.ss_flags & SS_DISABLE) == 0;
  });
  while (phase.load() != 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto tracker = FaultTracker::install(runtime_lookup, o.rt.get());
  ASSERT_TRUE(tracker);
  EXPECT_EQ(tracker.value()->threads_without_alt_stack(), 1u);  // the blocker; the worker answered
  release_worker = true;
  worker.join();
  EXPECT_TRUE(worker_had_stack.load());
  phase = 2;
  blocker.join();  // the process is still alive: the late signal found a handler
  EXPECT_TRUE(had_stack_after.load());
}

// Whether the calling thread has an alternate signal stack.
bool has_alt_stack() {
  stack_t stack{};
  return sigaltstack(nullptr, &stack) == 0 && (stack.ss_flags & SS_DISABLE) == 0;
}

// Whether a real-time signal is pending on the calling thread (one it blocks was sent to it).
bool realtime_signal_pending() {
  sigset_t pending;
  sigpending(&pending);
  for (int sig = SIGRTMIN; sig <= SIGRTMAX; ++sig) {
    if (sigismember(&pending, sig) == 1) return true;
  }
  return false;
}

void block_all_signals() {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
}

TEST(AltStacks, NoThreadIsSignalledWhileItRunsUserCodeOrHasAStackAlready) {
  // Three threads beside this one: one spinning in user code (as a thread inside a oneDNN kernel
  // does), one born through start_thread_with_alt_stack, one asleep in a system call. Only the
  // sleeper may be signalled; the others block every signal, so a signal sent to them would show
  // as pending. Before, every thread was signalled (a signal inside a kernel corrupted its stack).
  std::atomic<int> ready{0};
  std::atomic<bool> done{false};
  // (A sanitizer's runtime gives every thread a stack of its own: what matters is that none was
  // handed out, so the spinner's is what it had.)
  std::atomic<bool> spinner_stack_changed{true}, spinner_got_signal{true};
  std::thread spinner([&] {
    const bool had = has_alt_stack();
    block_all_signals();
    ++ready;
    volatile std::uint64_t spins = 0;
    while (!done.load(std::memory_order_relaxed)) spins = spins + 1;  // no system call
    spinner_stack_changed = has_alt_stack() != had;
    spinner_got_signal = realtime_signal_pending();
  });
  struct Born {
    std::atomic<int>* ready;
    std::atomic<bool>* done;
    bool had_stack_at_start = false, got_signal = true;
  } born{&ready, &done};
  pthread_t born_thread{};
  ASSERT_EQ(start_thread_with_alt_stack(
                &pthread_create, &born_thread, nullptr,
                [](void* raw) -> void* {
                  auto* b = static_cast<Born*>(raw);
                  b->had_stack_at_start = has_alt_stack();
                  block_all_signals();
                  ++*b->ready;
                  while (!b->done->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
                  b->got_signal = realtime_signal_pending();
                  return nullptr;
                },
                &born),
            0);
  std::atomic<bool> sleeper_had_stack{false};
  std::thread sleeper([&] {
    ++ready;
    while (!done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    sleeper_had_stack = has_alt_stack();
  });
  while (ready.load() != 3) std::this_thread::yield();
  Result<AltStackHandout> handout = give_threads_alt_stacks(std::chrono::milliseconds(300));
  done = true;
  spinner.join();
  pthread_join(born_thread, nullptr);
  sleeper.join();
  ASSERT_TRUE(handout) << handout.status().to_string();
  EXPECT_TRUE(has_alt_stack()) << "the caller takes its own";
  EXPECT_FALSE(spinner_got_signal.load());
  EXPECT_FALSE(spinner_stack_changed.load());
  EXPECT_GE(handout->running, 1u);
  EXPECT_TRUE(born.had_stack_at_start);
  EXPECT_FALSE(born.got_signal);
  EXPECT_TRUE(sleeper_had_stack.load());
  EXPECT_GE(handout->signalled, 1u);
  EXPECT_NE(handout->describe().find("running user code"), std::string::npos);
}

TEST(AltStacks, ARunningThreadMakesTheStepProfiledByDeclarationSaidInItsNotes) {
  RuntimeOptions options("fast=dram:64MiB");
  options.profile.sample_interval_us = 0;
  auto rt = Runtime::create(options).value();
  const ObjectInfo x = rt->allocate("x", 1 << 20).value();
  std::atomic<bool> done{false}, started{false};
  std::thread spinner([&] {
    started = true;
    volatile std::uint64_t spins = 0;
    while (!done.load(std::memory_order_relaxed)) spins = spins + 1;
  });
  while (!started.load()) std::this_thread::yield();
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE(rt->step_begin().is_ok());
    std::vector<void*> at(1);
    ASSERT_TRUE(rt->layer_begin("l", std::vector<ObjectId>{x.id}, {}, at).is_ok());
    ASSERT_TRUE(rt->layer_end().is_ok());
    ASSERT_TRUE(rt->step_end().is_ok());
  }
  done = true;
  spinner.join();
  ASSERT_NE(rt->profile(), nullptr);
  EXPECT_EQ(rt->profile()->access_source, "declared");
  bool said = false;
  for (const std::string& note : rt->profile()->notes)
    said |= note.find("ran user code throughout") != std::string::npos;
  EXPECT_TRUE(said);
}

TEST(AltStacks, TheCallersOpenMpTeamTakesItsStacksWithoutASignal) {
  // oneDNN runs its kernels on the calling thread's OpenMP team (libgomp): the team's workers take
  // their stacks in a parallel region, and are never signalled. Each worker blocks every signal
  // first, so a hand-out signal would show as pending.
  if (dlopen("libgomp.so.1", RTLD_NOW | RTLD_GLOBAL) == nullptr)
    GTEST_SKIP() << "no libgomp here: " << dlerror();
  using Parallel = void (*)(void (*)(void*), void*, unsigned, unsigned);
  auto* parallel = reinterpret_cast<Parallel>(dlsym(RTLD_DEFAULT, "GOMP_parallel"));
  ASSERT_NE(parallel, nullptr);
  struct Team {
    std::atomic<int> threads{0}, with_stack{0}, signalled{0};
  };
  Team before, after;
  parallel(
      [](void* raw) {
        auto* t = static_cast<Team*>(raw);
        ++t->threads;
        sigset_t all;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, nullptr);  // the workers keep it: they live on in the pool
      },
      &before, 2, 0);
  Result<AltStackHandout> handout = give_threads_alt_stacks(std::chrono::milliseconds(300));
  ASSERT_TRUE(handout) << handout.status().to_string();
  parallel(
      [](void* raw) {
        auto* t = static_cast<Team*>(raw);
        ++t->threads;
        if (has_alt_stack()) ++t->with_stack;
        if (realtime_signal_pending()) ++t->signalled;
      },
      &after, 2, 0);
  EXPECT_EQ(after.threads.load(), 2);
  EXPECT_EQ(after.with_stack.load(), 2);
  EXPECT_EQ(after.signalled.load(), 0);
  // The worker took its stack in the region, or had one of a sanitizer's: never a signal.
  EXPECT_EQ(handout->signalled + handout->unanswered, 0u) << handout->describe();
}

TEST(StepProfileJson, AProfileComesBackFromItsJsonAsItWas) {
  StepProfile p;
  p.step = 3;
  p.signature = 0xfeedbeefcafe1234ULL;
  p.granularity_bytes = 4096;
  p.duration_ns = 12345;
  p.peak_live_bytes = 1 << 20;
  p.access_source = "declared";
  p.notes = {"a note"};
  ObjectProfile o;
  o.id = 7;
  o.key = 9;
  o.name = "w";
  o.bytes = 5000;
  o.reserved_bytes = 8192;
  o.born_at_layer = 1;
  o.lifetime = LifetimeClass::kCrossing;
  o.host_pinned = true;
  p.objects = {o};
  LayerProfile l;
  l.name = "conv";
  l.declared_reads = {7};
  l.accesses = {{7, false, 4096, 2, 1, 3, 2.5, false}};
  l.counters = {{"cycles", "PAPI", 42}};
  p.layers = {l};
  const std::string text = to_json(p);
  auto back = from_json(text);
  ASSERT_TRUE(back) << back.status().to_string();
  EXPECT_EQ(to_json(back.value()), text);
  EXPECT_EQ(back->signature, p.signature);
  EXPECT_FALSE(from_json("{\"schema\": \"tensortier.step_profile/1\"}"));
  EXPECT_FALSE(from_json("[1, 2"));
  EXPECT_FALSE(from_json("{\"schema\": \"other\"}"));
}

TEST(FaultTracker, OnlyOneAtATimeAndWatchRejectsUnalignedSpans) {
  Objects o = make(1, 4096);
  auto first = FaultTracker::install(runtime_lookup, o.rt.get());
  ASSERT_TRUE(first);
  auto second = FaultTracker::install(runtime_lookup, o.rt.get());
  ASSERT_FALSE(second);
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  // The refused one leaves the first installed: its watched spans' faults are still its own (a
  // second runtime's profile once cleared the first's, and the next fault killed the process).
  ASSERT_TRUE(first.value()->watch(o.spans[0]).is_ok());
  static_cast<volatile char*>(o.objects[0].address)[0] = 1;
  const auto touched = first.value()->collect();
  ASSERT_EQ(touched.size(), 1u);
  EXPECT_EQ(touched[0].units_written, 1u);
  first.value()->unwatch_all();
  SpanView bad = o.spans[0];
  bad.base += 8;
  EXPECT_EQ(first.value()->watch(bad).code(), StatusCode::kInvalidArgument);
  FaultTracker::Options odd;
  odd.unit_bytes = 1000;
  first.value().reset();
  EXPECT_EQ(FaultTracker::install(runtime_lookup, o.rt.get(), odd).status().code(),
            StatusCode::kInvalidArgument);
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
  (void)watch_all(*tracker.value(), o.spans);
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
