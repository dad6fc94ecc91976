// What must never be lost or crash (docs/RELIABILITY.md): host code between steps seen by the
// profile, two runtimes profiling in one process, the C API's object ids and pins.
#include <fcntl.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <atomic>

#include <chrono>
#include <cstring>
#include <map>
#include <system_error>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tensortier/profiler/fault_tracker.h"
#include "tensortier/runtime.h"
#include "tensortier/tensortier.h"
#include "test_util.h"

namespace tensortier {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

std::unique_ptr<Runtime> make(RuntimeOptions options) {
  auto rt = Runtime::create(options);
  EXPECT_TRUE(rt) << rt.status().to_string();
  return rt ? std::move(rt).value() : nullptr;
}

// One step of one layer that reads `reads`.
void one_layer_step(Runtime& rt, const std::vector<ObjectId>& reads) {
  ASSERT_TRUE(rt.step_begin().is_ok());
  std::vector<void*> addresses(reads.size());
  ASSERT_TRUE(rt.layer_begin("layer", reads, {}, addresses).is_ok());
  ASSERT_TRUE(rt.layer_end().is_ok());
  ASSERT_TRUE(rt.step_end().is_ok());
}

const profiler::SpanAccessProfile* access_of(const std::vector<profiler::SpanAccessProfile>& accesses,
                                             ObjectId id) {
  for (const auto& a : accesses) {
    if (!a.is_group && a.id == id) return &a;
  }
  return nullptr;
}

TEST(ProfileWindow, HostCodeBetweenTheStepsIsProfiledAndItsPinsAreRecorded) {
  auto rt = make(RuntimeOptions("fast=dram:64MiB"));
  ASSERT_NE(rt, nullptr);
  const ObjectInfo loose = rt->allocate("loose", kMiB).value();    // written unpinned between steps
  const ObjectInfo pinned = rt->allocate("pinned", kMiB).value();  // written under pin_objects
  const ObjectInfo quiet = rt->allocate("quiet", kMiB).value();    // not touched between steps
  one_layer_step(*rt, {loose.id, pinned.id, quiet.id});            // step 0; step 1 is profiled
  // Between the steps: the window of step 1's profile is open, and no move runs in it.
  std::memset(loose.address, 1, kMiB);
  void* address = nullptr;
  ASSERT_TRUE(rt->pin_objects(std::span(&pinned.id, 1), std::span(&address, 1)).is_ok());
  std::memset(address, 2, kMiB);
  rt->unpin_objects(std::span(&pinned.id, 1));
  const ObjectInfo late = rt->allocate("late", kMiB).value();  // born between: alive before the step
  const ObjectInfo gone = rt->allocate("gone", kMiB).value();  // born and freed between: not in it
  ASSERT_TRUE(rt->free(gone.address).is_ok());
  EXPECT_EQ(rt->move(quiet.id, 0).status().code(), StatusCode::kUnavailable);
  one_layer_step(*rt, {loose.id, pinned.id, quiet.id, late.id});
  const auto profile = rt->profile();
  ASSERT_NE(profile, nullptr);
  EXPECT_EQ(profile->step, 1u);
  const auto& before = profile->layers.at(0).accesses_before;
  ASSERT_NE(access_of(before, loose.id), nullptr);
  EXPECT_GT(access_of(before, loose.id)->pages_written, 0u);
  EXPECT_NE(access_of(before, pinned.id), nullptr);
  EXPECT_EQ(access_of(before, quiet.id), nullptr);
  for (const profiler::ObjectProfile& o : profile->objects) {
    EXPECT_NE(o.id, gone.id) << "an object born and freed before the step is not part of it";
    EXPECT_EQ(o.host_pinned, o.id == pinned.id) << o.name;
    if (o.id == late.id) {
      EXPECT_FALSE(o.born_at_layer.has_value());
    }
  }
  // The plan inputs: the loose object stays where it is, the pinned one may move.
  auto in = migrator::inputs_from_profile(*profile, 0, 0 + 1, 64 * kMiB);
  ASSERT_TRUE(in);
  for (const migrator::PlanObject& o : in->objects) {
    EXPECT_EQ(o.stays(), o.key == loose.key) << o.key;
  }
}

TEST(ProfileWindow, TwoRuntimesSteppingInTurnBothProfile) {
  // tensortier-bench runs every policy's runtime in one process, steps alternating: the window
  // of one runtime's profile (from its step's end) covers the other's step, whose profile then
  // starts when its own step begins.
  auto a = make(RuntimeOptions("fast=dram:64MiB"));
  auto b = make(RuntimeOptions("fast=dram:64MiB"));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const ObjectInfo xa = a->allocate("x", kMiB).value();
  const ObjectInfo xb = b->allocate("x", kMiB).value();
  for (int step = 0; step < 3; ++step) {
    std::memset(xa.address, step, kMiB);  // between the steps, inside a's window
    one_layer_step(*a, {xa.id});
    std::memset(xb.address, step, kMiB);
    one_layer_step(*b, {xb.id});
  }
  ASSERT_NE(a->profile(), nullptr);
  ASSERT_NE(b->profile(), nullptr);
  EXPECT_EQ(a->profile()->step, 1u);
  EXPECT_EQ(b->profile()->step, 1u);
  EXPECT_NE(access_of(a->profile()->layers.at(0).accesses_before, xa.id), nullptr);
}

TEST(SmallObjects, AThreadMovingItsOwnNeverLosesAnotherThreadsWrites) {
  // Each thread writes its own small objects (unpinned: nobody else moves them) and moves them
  // back and forth; a move takes the whole chunk, so chunks shared between threads lost the
  // writes another thread made during the copy.
  auto rt = make(RuntimeOptions("fast=dram:64MiB,slow=emulated:optane:256MiB"));
  ASSERT_NE(rt, nullptr);
  constexpr int kThreads = 4, kObjects = 40, kRounds = 60;
  constexpr std::size_t kBytes = 1000;
  std::atomic<int> lost{0};
  std::atomic<int> failed_moves{0};
  auto work = [&](int thread) {
    std::vector<ObjectInfo> mine;
    for (int i = 0; i < kObjects; ++i) mine.push_back(rt->allocate("small", kBytes).value());
    for (int round = 0; round < kRounds; ++round) {
      const auto value = static_cast<unsigned char>(thread * 64 + round % 64);
      for (const ObjectInfo& o : mine) std::memset(o.address, value, kBytes);
      for (const ObjectInfo& o : mine) {
        if (!rt->move(o.id, static_cast<TierIndex>(round % 2))) ++failed_moves;
      }
      for (const ObjectInfo& o : mine) {
        const auto* bytes = static_cast<const unsigned char*>(o.address);
        if (bytes[0] != value || bytes[kBytes - 1] != value) ++lost;
      }
    }
    for (const ObjectInfo& o : mine) ASSERT_TRUE(rt->free(o.address).is_ok());
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(work, t);
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(lost.load(), 0);
  EXPECT_EQ(failed_moves.load(), 0);
}

// A child forked while other threads move, allocate and free: what it reads and whether it can
// allocate. Its exit code: 0 all well, 3 an object's bytes were not whole, 4 an allocation or a
// free failed; killed by SIGALRM where it hung.
int child_after_fork(Runtime& rt, const ObjectInfo& moving, unsigned char value) {
  alarm(3);
  const auto* bytes = static_cast<const unsigned char*>(moving.address);
  for (std::size_t i = 0; i < moving.bytes; i += 4096) {
    if (bytes[i] != value) return 3;
  }
  for (std::size_t size : {std::size_t{100}, kMiB}) {
    auto made = rt.allocate("in the child", size);
    if (!made) return 4;
    std::memset(made->address, 1, size);
    if (!rt.free(made->address).is_ok()) return 4;
  }
  return 0;
}

TEST(Fork, AChildForkedDuringMovesHasEveryObjectWholeAndCanAllocate) {
  // A child forked between a move's two remaps read zeros, and one forked while another thread
  // held the allocator's lock hung at its first allocation.
  auto rt = make(RuntimeOptions("fast=dram:64MiB,slow=emulated:optane:256MiB"));
  ASSERT_NE(rt, nullptr);
  const ObjectInfo moving = rt->allocate("moving", 4 * kMiB).value();
  constexpr unsigned char kValue = 0x5a;
  std::memset(moving.address, kValue, moving.bytes);
  std::atomic<bool> stop{false};
  std::thread mover([&] {
    for (TierIndex to = 1; !stop.load(); to ^= 1) (void)rt->move(moving.id, to);
  });
  std::thread churn([&] {  // holds the allocator's lock often
    while (!stop.load()) {
      auto small = rt->allocate("churn", 200);
      auto large = rt->allocate("churn", 256 << 10);
      if (small) (void)rt->free(small->address);
      if (large) (void)rt->free(large->address);
    }
  });
  std::map<int, int> outcomes;  // exit code (or 100 + signal) -> children
  constexpr int kChildren = 100;
  for (int i = 0; i < kChildren; ++i) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) _exit(child_after_fork(*rt, moving, kValue));
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ++outcomes[WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status)];
  }
  stop = true;
  mover.join();
  churn.join();
  EXPECT_EQ(outcomes[0], kChildren) << "3: bytes not whole, 4: allocation failed, 114: hung (SIGALRM): "
                                    << ::testing::PrintToString(outcomes);
  EXPECT_GT(rt->stats().moves, 0u);
}

// Whether a thread can be started now.
bool thread_starts() {
  try {
    std::thread([] {}).join();
    return true;
  } catch (const std::system_error&) {
    return false;
  }
}

// While it lives, no thread of this process can be started: the default stack of a new thread is
// larger than any address space (std::thread then throws std::system_error).
class NoThreads {
 public:
  NoThreads() {
    pthread_getattr_default_np(&saved_);
    pthread_attr_t huge;
    pthread_attr_init(&huge);
    pthread_attr_setstacksize(&huge, std::size_t{1} << 62);  // beyond any x86-64 address space
    pthread_setattr_default_np(&huge);
    pthread_attr_destroy(&huge);
  }
  ~NoThreads() {
    pthread_setattr_default_np(&saved_);
    pthread_attr_destroy(&saved_);
  }
  NoThreads(const NoThreads&) = delete;
  NoThreads& operator=(const NoThreads&) = delete;

 private:
  pthread_attr_t saved_{};
};

TEST(ThreadStarts, AThreadThatCannotStartIsAnErrorNeverAnAbort) {
  // tensortier-train under `ulimit -v` died of an uncaught std::system_error.
  auto rt = make(RuntimeOptions("fast=dram:64MiB,slow=emulated:optane:256MiB"));
  ASSERT_NE(rt, nullptr);
  {
    NoThreads none;
    if (thread_starts())
      GTEST_SKIP() << "this machine starts a thread whatever its stack size: the case cannot be made";
    // The profile's sampler thread: the profile is skipped, the step runs.
    auto live = std::vector<std::pair<ObjectInfo, SpanView>>{};
    auto profiler = profiler::StepProfiler::start(
        rt->profile_options(), [](const void*, const void*, SpanView*) { return false; }, nullptr, 0, live,
        nullptr);
    ASSERT_FALSE(profiler);
    EXPECT_EQ(profiler.status().code(), StatusCode::kUnavailable);
    EXPECT_NE(profiler.status().message().find("sampler thread"), std::string::npos)
        << profiler.status().message();
    // The mover: the executor says so and runs nothing.
    migrator::Executor executor(
        migrator::Plan{}, 1,
        [](ObjectId, TierIndex, const MoveOptions&) -> Result<MoveResult> { return MoveResult{}; },
        [] { return 0U; });
    const Status started = executor.start();
    EXPECT_EQ(started.code(), StatusCode::kUnavailable);
    EXPECT_NE(started.message().find("mover thread"), std::string::npos) << started.message();
  }
  // Copy helpers: refused, and copies go on with the moving thread alone.
  testing::TempDir unused;
  auto alloc = testing::allocator_for("fast=dram:64MiB,slow=emulated:optane:256MiB");
  ASSERT_NE(alloc, nullptr);
  {
    NoThreads none;
    EXPECT_EQ(alloc->set_copy_threads(3).code(), StatusCode::kUnavailable);
  }
  EXPECT_EQ(alloc->copy_threads(), 1u);
  const ObjectInfo big = alloc->allocate("big", 8 * kMiB).value();
  std::memset(big.address, 9, big.bytes);
  auto moved = alloc->move(big.id, 1);
  ASSERT_TRUE(moved) << moved.status().to_string();
  EXPECT_EQ(moved->copy_threads, 1u);
  EXPECT_EQ(static_cast<const unsigned char*>(big.address)[big.bytes - 1], 9);
}

TEST(ThreadStarts, APolicyWhoseMoverCannotStartSaysSoAndTrainingGoesOn) {
  RuntimeOptions options("fast=dram:64MiB,slow=emulated:optane:256MiB");
  options.policy = "sentinel";
  options.fast_budget = "50%";
  options.profile.sample_interval_us = 0;  // no sampler thread: the profile itself needs none
  auto rt = make(options);
  ASSERT_NE(rt, nullptr);
  const ObjectInfo a = rt->allocate("a", 4 * kMiB).value();
  const ObjectInfo b = rt->allocate("b", 4 * kMiB).value();
  NoThreads none;
  if (thread_starts())
    GTEST_SKIP() << "this machine starts a thread whatever its stack size: the case cannot be made";
  for (int step = 0; step < 4; ++step) one_layer_step(*rt, {step % 2 == 0 ? a.id : b.id});
  EXPECT_NE(rt->profile(), nullptr);
  EXPECT_EQ(rt->stats().policy, "") << "no mover, no policy";
  EXPECT_EQ(rt->stats().steps_completed, 4u);
}

// While it lives, this process can open no file (its soft limit on open files is reached).
class NoFreeFiles {
 public:
  NoFreeFiles() {
    getrlimit(RLIMIT_NOFILE, &saved_);
    const int base = open("/dev/null", O_RDONLY);
    rlimit low = saved_;
    low.rlim_cur = 64;
    setrlimit(RLIMIT_NOFILE, &low);
    if (base >= 0) {
      fds_.push_back(base);
      for (int fd; (fd = dup(base)) >= 0;) fds_.push_back(fd);
    }
  }
  ~NoFreeFiles() {
    for (int fd : fds_) close(fd);
    setrlimit(RLIMIT_NOFILE, &saved_);
  }
  NoFreeFiles(const NoFreeFiles&) = delete;
  NoFreeFiles& operator=(const NoFreeFiles&) = delete;

 private:
  rlimit saved_{};
  std::vector<int> fds_;
};

TEST(ProfileWindow, ThreadsThatCannotBeListedSkipTheProfileNeverCorruptTheHeap) {
  // Under `ulimit -n 5` the thread list could not be read, oneDNN's threads got no alternate
  // signal stack, and the fault frames on their own stacks overwrote their data.
  auto rt = make(RuntimeOptions("fast=dram:64MiB"));
  ASSERT_NE(rt, nullptr);
  const ObjectInfo x = rt->allocate("x", kMiB).value();
  {
    NoFreeFiles none;
    ASSERT_LT(open("/proc/self/task", O_RDONLY | O_DIRECTORY), 0) << "the test's premise";
    auto tracker =
        profiler::FaultTracker::install([](const void*, const void*, SpanView*) { return false; }, nullptr);
    ASSERT_FALSE(tracker);
    EXPECT_EQ(tracker.status().code(), StatusCode::kUnavailable);
    EXPECT_NE(tracker.status().message().find("/proc/self/task"), std::string::npos)
        << tracker.status().message();
    one_layer_step(*rt, {x.id});
    one_layer_step(*rt, {x.id});      // the step that was to be profiled
    std::memset(x.address, 3, kMiB);  // not left protected
  }
  EXPECT_EQ(rt->profile(), nullptr);
  EXPECT_EQ(rt->profiled_steps(), 0u);
  // A tracker can be installed again once the files are there: the refused one left none behind.
  auto tracker =
      profiler::FaultTracker::install([](const void*, const void*, SpanView*) { return false; }, nullptr);
  EXPECT_TRUE(tracker) << tracker.status().to_string();
}

TEST(CApiIds, LayersAndPinsByIdGiveTheCurrentAddress) {
  tt_runtime* rt = nullptr;
  ASSERT_EQ(tt_runtime_create("fast=dram:16MiB,slow=emulated:optane:64MiB", &rt), TT_OK) << tt_last_error();
  void* a = nullptr;
  ASSERT_EQ(tt_alloc(rt, "a", kMiB, 0, &a), TT_OK);
  uint64_t id = 0;
  ASSERT_EQ(tt_object_id(rt, a, &id), TT_OK);
  void* found = nullptr;
  ASSERT_EQ(tt_address_of(rt, id, &found), TT_OK);
  EXPECT_EQ(found, a);
  void* pinned = nullptr;
  ASSERT_EQ(tt_pin(rt, &id, 1, &pinned), TT_OK);
  EXPECT_EQ(pinned, a);
  ASSERT_EQ(tt_unpin(rt, &id, 1), TT_OK);
  ASSERT_EQ(tt_step_begin(rt), TT_OK);
  void* addresses[1] = {nullptr};
  ASSERT_EQ(tt_layer_begin_ids(rt, "l", &id, 1, nullptr, 0, addresses), TT_OK) << tt_last_error();
  EXPECT_EQ(addresses[0], a);
  ASSERT_EQ(tt_layer_end(rt), TT_OK);
  ASSERT_EQ(tt_step_end(rt), TT_OK);
  const uint64_t missing = id + 1000;
  EXPECT_EQ(tt_pin(rt, &missing, 1, nullptr), TT_NOT_FOUND);
  EXPECT_NE(std::strstr(tt_last_error(), "not live"), nullptr) << tt_last_error();
  EXPECT_EQ(tt_address_of(rt, missing, &found), TT_NOT_FOUND);
  EXPECT_EQ(tt_pin(rt, nullptr, 1, nullptr), TT_INVALID_ARGUMENT);
  tt_runtime_destroy(rt);
}

TEST(CApiIds, ACallerOnAHeapTierFollowsAMoveById) {
  // A move to a memkind heap tier (pmem) gives the object a new address: layer marks by id find
  // it there; the old address is refused, never read.
  testing::TempDir dir;
  tt_runtime* rt = nullptr;
  const std::string spec = "fast=dram:16MiB,slow=pmem:" + dir.path() + ":64MiB";
  ASSERT_EQ(tt_runtime_create(spec.c_str(), &rt), TT_OK) << tt_last_error();
  void* a = nullptr;
  ASSERT_EQ(tt_alloc(rt, "a", kMiB, 0, &a), TT_OK);
  std::memset(a, 7, kMiB);
  uint64_t id = 0;
  ASSERT_EQ(tt_object_id(rt, a, &id), TT_OK);
  void* moved = nullptr;
  ASSERT_EQ(tt_move(rt, a, 1, &moved), TT_OK) << tt_last_error();
  ASSERT_NE(moved, a);
  ASSERT_EQ(tt_step_begin(rt), TT_OK);
  const void* stale[] = {a};
  EXPECT_EQ(tt_layer_begin(rt, "by address", stale, 1, nullptr, 0), TT_NOT_FOUND);
  void* addresses[1] = {nullptr};
  ASSERT_EQ(tt_layer_begin_ids(rt, "by id", &id, 1, nullptr, 0, addresses), TT_OK) << tt_last_error();
  EXPECT_EQ(addresses[0], moved);
  EXPECT_EQ(static_cast<const unsigned char*>(addresses[0])[kMiB - 1], 7);
  ASSERT_EQ(tt_layer_end(rt), TT_OK);
  ASSERT_EQ(tt_step_end(rt), TT_OK);
  tt_runtime_destroy(rt);
}

// Counts the moves of one object (StepObserver::on_move).
class MovesOf final : public StepObserver {
 public:
  explicit MovesOf(ObjectId id) : id_(id) {}
  void on_move(const MoveResult& move) override {
    if (move.id == id_) moves_.fetch_add(1, std::memory_order_relaxed);
  }
  int moves() const { return moves_.load(std::memory_order_relaxed); }

 private:
  ObjectId id_;
  std::atomic<int> moves_{0};
};

// A helper thread writes `object` unpinned, page by page, a new value each round, and checks every
// page of the round before the next: a move whose copy ran under a write loses it (the page reads
// an older value). Between rounds it sleeps a little, as a loader waits for its next batch (a
// thread that never enters the kernel gets no alternate signal stack: see AltStacks.*).
class UnpinnedWriter {
 public:
  explicit UnpinnedWriter(const ObjectInfo& object)
      : words_(static_cast<std::uint64_t*>(object.address)),
        pages_(object.bytes / 4096),
        thread_([this] { run(); }) {}
  ~UnpinnedWriter() { stop(); }
  UnpinnedWriter(const UnpinnedWriter&) = delete;
  UnpinnedWriter& operator=(const UnpinnedWriter&) = delete;
  void stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  std::uint64_t lost() const { return lost_.load(); }
  std::uint64_t rounds() const { return rounds_.load(); }

 private:
  static constexpr std::size_t kWordsAPage = 4096 / sizeof(std::uint64_t);
  void run() {
    for (std::uint64_t value = 1; !stop_.load(); ++value) {
      auto* volatile words = words_;
      for (std::size_t p = 0; p < pages_; ++p) words[p * kWordsAPage] = value;
      for (std::size_t p = 0; p < pages_; ++p) {
        if (words[p * kWordsAPage] != value) lost_.fetch_add(1);
      }
      rounds_.store(value);
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  std::uint64_t* words_;
  std::size_t pages_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> lost_{0}, rounds_{0};
  std::thread thread_;
};

TEST(StayingObjects, NoPlanInstallMovesAnObjectWrittenUnpinnedOutsideTheLayers) {
  // A persistent object a helper thread writes unpinned outside the layers (the profile sees it:
  // PlanObject::stays) is never moved: not when the policy starts, not at the trial's phases, not
  // when the plan is made again with the mover's measured CPU; ready memory on and off. Before,
  // its start tier was set to the slow tier and every plan install moved it (writes lost).
  for (const bool ready : {true, false}) {
    for (const std::string& policy : migrator::policy_names()) {
      SCOPED_TRACE(policy + (ready ? ", ready memory" : ", moves in place"));
      RuntimeOptions options("fast=dram:64MiB,slow=emulated:optane:256MiB");
      options.policy = policy;
      options.fast_budget = "30%";
      options.ready_memory = ready;
      options.trial_steps = 1;
      options.measured_mover_steps = 1;
      options.profile.sample_interval_us = 0;
      auto rt = make(options);
      ASSERT_NE(rt, nullptr);
      const ObjectInfo loose = rt->allocate("loose", 4 * kMiB).value();  // born fast
      std::vector<ObjectInfo> weights;
      for (int l = 0; l < 6; ++l) {
        weights.push_back(rt->allocate("weight", 2 * kMiB).value());
        std::memset(weights.back().address, l + 1, 2 * kMiB);
      }
      MovesOf moves(loose.id);
      ASSERT_TRUE(rt->add_observer(&moves).is_ok());
      const TierIndex born_on = loose.tier;
      UnpinnedWriter writer(loose);
      while (writer.rounds() == 0) std::this_thread::yield();
      for (int step = 0; step < 14; ++step) {
        // The training thread touches it too (another word of each page), so that the profile
        // sees it whatever the helper's timing.
        auto* words = static_cast<std::uint64_t*>(loose.address);
        for (std::size_t w = 511; w < loose.bytes / 8; w += 512) words[w] = static_cast<std::uint64_t>(step);
        ASSERT_TRUE(rt->step_begin().is_ok());
        std::vector<ObjectId> acts;
        for (int l = 0; l < 6; ++l) {
          acts.push_back(rt->allocate("act", 2 * kMiB).value().id);
          const std::vector<ObjectId> reads{weights[l].id}, writes{acts.back()};
          std::vector<void*> at(2);
          ASSERT_TRUE(rt->layer_begin("layer", reads, writes, at).is_ok());
          std::memset(at[1], l, 2 * kMiB);
          ASSERT_TRUE(rt->layer_end().is_ok());
        }
        for (ObjectId id : acts) ASSERT_TRUE(rt->free(id).is_ok());
        ASSERT_TRUE(rt->step_end().is_ok());
      }
      writer.stop();
      rt->remove_observer(&moves);
      // smartpool moves nothing, so it runs only where the whole step fits the budget.
      EXPECT_EQ(rt->policy_failure().empty(), policy != "smartpool") << rt->policy_failure();
      EXPECT_GT(writer.rounds(), 0u);
      EXPECT_EQ(moves.moves(), 0) << "moves of the object written unpinned";
      EXPECT_EQ(writer.lost(), 0u) << "pages that lost a write";
      EXPECT_EQ(rt->object(loose.id)->tier, born_on);
      ASSERT_NE(rt->profile(), nullptr);
      EXPECT_EQ(rt->profile()->access_source, "protection");
    }
  }
}

}  // namespace
}  // namespace tensortier
