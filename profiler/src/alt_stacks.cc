// Alternate signal stacks (see alt_stacks.h).
#include "tensortier/profiler/alt_stacks.h"

#include "threads.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <sys/syscall.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

namespace tensortier::profiler {
namespace {

// Threads known to have a stack, by key: thread id in the low 23 bits (pid_max is at most 2^22),
// its start time (clock ticks since boot, /proc's field 22) above. 0: a free slot.
constexpr std::size_t kSlots = 8192;
constexpr std::uint64_t kTidBits = 23;
constexpr std::uint64_t kTidMask = (std::uint64_t{1} << kTidBits) - 1;
std::atomic<std::uint64_t> g_with_stack[kSlots];
// The hand-out's signalled threads, by tid % kSlots: the key it expects; the handler clears it.
std::atomic<std::uint64_t> g_pending[kSlots];

std::uint64_t key_of(pid_t tid, std::uint64_t start_ticks) {
  return static_cast<std::uint64_t>(tid) | (start_ticks << kTidBits);
}

pid_t this_tid() {
  return static_cast<pid_t>(syscall(SYS_gettid));
}

// Async-signal-safe (atomics only).
void remember(std::uint64_t key) {
  for (std::atomic<std::uint64_t>& slot : g_with_stack) {
    std::uint64_t empty = 0;
    if (slot.compare_exchange_strong(empty, key)) return;
  }
}

void forget(std::uint64_t key) {
  for (std::atomic<std::uint64_t>& slot : g_with_stack) {
    std::uint64_t k = key;
    if (slot.compare_exchange_strong(k, 0)) return;
  }
}

bool remembered(std::uint64_t key) {
  return std::ranges::any_of(g_with_stack,
                             [&](const std::atomic<std::uint64_t>& s) { return s.load() == key; });
}

// Up to `size` bytes of a /proc/self/task/<tid>/<name> file into `out` (terminated); false where it
// cannot be read (the thread is gone, or the kernel has no such file).
bool read_task_file(pid_t tid, const char* name, char* out, std::size_t size) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%d/%s", tid, name);
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const ssize_t n = ::read(fd, out, size - 1);
  ::close(fd);
  if (n <= 0) return false;
  out[n] = '\0';
  return true;
}

struct TaskState {
  char state = '?';  // R, S, D, T, ...
  std::uint64_t start_ticks = 0;
};

// From /proc/self/task/<tid>/stat: after the command name (in parentheses, which it may contain),
// the state is field 3 and the start time field 22.
std::optional<TaskState> task_state(pid_t tid) {
  char text[1024];
  if (!read_task_file(tid, "stat", text, sizeof text)) return std::nullopt;
  const char* close = std::strrchr(text, ')');
  if (close == nullptr || close[1] == '\0') return std::nullopt;
  TaskState s;
  s.state = close[2];
  const char* field = close + 2;
  for (int f = 3; f < 22 && field != nullptr; ++f) {
    field = std::strchr(field, ' ');
    if (field != nullptr) ++field;
  }
  if (field == nullptr) return std::nullopt;
  s.start_ticks = std::strtoull(field, nullptr, 10);
  return s;
}

// Whether the thread waits in a system call now (a signal then lands at the call's return, in code
// that keeps nothing below its stack pointer): /proc/self/task/<tid>/syscall starts with the call's
// number; "-1" (blocked elsewhere: a page fault, mid-instruction) and "running" do not. Where the
// file cannot be read, a sleeping state (S) stands for it.
bool in_system_call(pid_t tid, const TaskState& s) {
  char text[256];
  if (!read_task_file(tid, "syscall", text, sizeof text)) return s.state == 'S';
  return text[0] >= '0' && text[0] <= '9';
}

// Stacks of g_alt_bytes; a pool for the hand-out, mapped before any signal is sent.
std::size_t stack_bytes() {
  static const std::size_t bytes =
      std::max<std::size_t>(std::size_t{256} << 10, 4 * static_cast<std::size_t>(sysconf(_SC_SIGSTKSZ)));
  return bytes;
}
constexpr std::size_t kMaxPool = 4096;
void* g_pool[kMaxPool];
std::atomic<std::size_t> g_pool_next{0};
std::atomic<std::size_t> g_pool_count{0};
std::mutex g_handout_mutex;  // one hand-out at a time fills the pool

bool has_alt_stack() {
  stack_t current{};
  return sigaltstack(nullptr, &current) == 0 && (current.ss_flags & SS_DISABLE) == 0;
}

// The hand-out signal's handler: a stack from the pool, remembered under the key the hand-out
// left for this thread. Async-signal-safe: gettid, sigaltstack, atomics.
void on_handout_signal(int /*signal*/, siginfo_t* /*info*/, void* context) {
  const int saved_errno = errno;
  if (!has_alt_stack()) {
    const std::size_t i = g_pool_next.fetch_add(1);
    if (i < g_pool_count.load()) {
      stack_t fresh{};
      fresh.ss_sp = g_pool[i];
      fresh.ss_size = stack_bytes();
      sigaltstack(&fresh, nullptr);
      // Returning from a signal handler restores the alternate stack saved in its frame: record
      // the new one there too, or sigreturn undoes the hand-out.
      if (context != nullptr) static_cast<ucontext_t*>(context)->uc_stack = fresh;
    }
  }
  const pid_t tid = this_tid();
  std::atomic<std::uint64_t>& pending = g_pending[static_cast<std::size_t>(tid) % kSlots];
  const std::uint64_t key = pending.load();
  if ((key & kTidMask) == static_cast<std::uint64_t>(tid)) {
    if (has_alt_stack()) remember(key);
    pending.store(0);
  }
  errno = saved_errno;
}

// A stack of the calling thread's own, given back at its exit (thread_local destructor).
struct OwnStack {
  void* base = nullptr;
  std::uint64_t key = 0;
  OwnStack() = default;
  OwnStack(const OwnStack&) = delete;
  OwnStack& operator=(const OwnStack&) = delete;
  ~OwnStack() {
    if (key != 0) forget(key);
    if (base == nullptr) return;
    stack_t current{};
    if (sigaltstack(nullptr, &current) == 0 && current.ss_sp == base &&
        (current.ss_flags & SS_ONSTACK) == 0) {
      stack_t off{};
      off.ss_flags = SS_DISABLE;
      sigaltstack(&off, nullptr);
      munmap(base, stack_bytes());
    }
  }
};
thread_local OwnStack t_own_stack;

// A real-time signal nobody handles, taken for the hand-out and kept: a thread that blocks it and
// unblocks it later must still find this harmless handler, not the default action (which would
// end the process). A program that installs its own handler for it later just replaces ours.
int handout_signal() {
  static int borrowed = 0;
  for (int sig = SIGRTMAX; sig >= SIGRTMIN && borrowed == 0; --sig) {
    struct sigaction current {};
    if (sigaction(sig, nullptr, &current) == 0 && current.sa_handler == SIG_DFL &&
        (current.sa_flags & SA_SIGINFO) == 0) {
      borrowed = sig;
    }
  }
  if (borrowed == 0) return 0;
  struct sigaction action {};
  action.sa_sigaction = &on_handout_signal;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  sigaction(borrowed, &action, nullptr);
  return borrowed;
}

// The caller's OpenMP team (oneDNN's workers, where oneDNN runs on libgomp) takes its stacks in
// one parallel region: no signal reaches a worker. Found at run time (GOMP_parallel is what
// `#pragma omp parallel` compiles to): only where libgomp is in the process already, so a program
// without OpenMP gets none started.
std::size_t give_team_alt_stacks() {
  using GompParallel = void (*)(void (*)(void*), void*, unsigned, unsigned);
  auto* parallel = reinterpret_cast<GompParallel>(dlsym(RTLD_DEFAULT, "GOMP_parallel"));
  if (parallel == nullptr) return 0;
  std::atomic<std::size_t> took{0};
  parallel(
      [](void* count) {  // each remembered, whoever gave it its stack (a sanitizer gives its own)
        const bool had = has_alt_stack();
        if (give_this_thread_alt_stack() && !had) static_cast<std::atomic<std::size_t>*>(count)->fetch_add(1);
      },
      &took, 0, 0);
  return took.load();
}

Status fill_pool(std::size_t threads) {
  const std::size_t want = std::min(kMaxPool, g_pool_next.load() + threads);
  for (std::size_t i = g_pool_count.load(); i < want; ++i) {
    void* stack = mmap(nullptr, stack_bytes(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (stack == MAP_FAILED) {
      return unavailable(
          fmt::format("no memory for the {} threads' alternate signal stacks ({} KiB each: {})", threads,
                      stack_bytes() >> 10, strerrordesc_np(errno)));
    }
    g_pool[i] = stack;
    g_pool_count.store(i + 1);
  }
  return Status::ok();
}

// The threads that need a stack signalled as each is seen in a system call, until all are done or
// `wait` runs out; the counts into `out`.
void signal_in_system_calls(std::vector<std::pair<pid_t, std::uint64_t>> need, int signal,
                            std::chrono::milliseconds wait, AltStackHandout& out) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  std::vector<std::pair<pid_t, std::uint64_t>> sent;
  while ((!need.empty() || !sent.empty()) && std::chrono::steady_clock::now() < deadline) {
    std::erase_if(need, [&](const std::pair<pid_t, std::uint64_t>& t) {
      const auto [tid, key] = t;
      std::atomic<std::uint64_t>& pending = g_pending[static_cast<std::size_t>(tid) % kSlots];
      const std::optional<TaskState> s = task_state(tid);
      if (!s || key_of(tid, s->start_ticks) != key) return true;          // gone
      if (pending.load() != 0 || !in_system_call(tid, *s)) return false;  // another's slot; running
      pending.store(key);
      if (syscall(SYS_tgkill, getpid(), tid, signal) != 0) {
        pending.store(0);
        return true;  // gone since
      }
      sent.emplace_back(tid, key);
      return true;
    });
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    std::erase_if(sent, [&](const std::pair<pid_t, std::uint64_t>& t) {
      if (g_pending[static_cast<std::size_t>(t.first) % kSlots].load() == t.second) return false;
      ++out.signalled;
      return true;
    });
  }
  for (const auto& [tid, key] : sent) {  // a late answer finds no slot: it keeps the stack all the same
    std::uint64_t expected = key;
    g_pending[static_cast<std::size_t>(tid) % kSlots].compare_exchange_strong(expected, 0);
  }
  out.unanswered = sent.size();
  out.running = need.size();
}

}  // namespace

std::string AltStackHandout::describe() const {
  return fmt::format(
      "alternate signal stacks: {} threads: {} had one, {} took one in the OpenMP team's region, {} "
      "signalled in "
      "a system call, {} signalled and not answering (blocking the signal), {} running user code throughout "
      "(not signalled)",
      threads, had, team, signalled, unanswered, running);
}

bool give_this_thread_alt_stack() {
  if (t_own_stack.key != 0) return true;
  const pid_t tid = this_tid();
  const std::optional<TaskState> s = task_state(tid);
  if (!has_alt_stack()) {
    void* stack = mmap(nullptr, stack_bytes(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (stack == MAP_FAILED) return false;
    stack_t fresh{};
    fresh.ss_sp = stack;
    fresh.ss_size = stack_bytes();
    if (sigaltstack(&fresh, nullptr) != 0) {
      munmap(stack, stack_bytes());
      return false;
    }
    t_own_stack.base = stack;
  }
  if (s) {
    t_own_stack.key = key_of(tid, s->start_ticks);
    remember(t_own_stack.key);
  }
  return true;
}

Result<AltStackHandout> give_threads_alt_stacks(std::chrono::milliseconds wait) {
  std::lock_guard lock(g_handout_mutex);
  std::string why;
  const std::optional<std::vector<pid_t>> listed = list_process_threads(&why);
  if (!listed) {
    return unavailable(fmt::format(
        "the process's threads cannot be listed to give each an alternate signal stack ({})", why));
  }
  AltStackHandout out;
  out.threads = listed->size();
  TENSORTIER_RETURN_IF_ERROR(fill_pool(listed->size()));
  if (!give_this_thread_alt_stack()) return unavailable("no memory for this thread's alternate signal stack");
  out.team = give_team_alt_stacks();
  const pid_t self = this_tid();
  std::vector<std::pair<pid_t, std::uint64_t>> need;
  for (pid_t tid : *listed) {
    const std::optional<TaskState> s = task_state(tid);
    if (!s) continue;  // gone
    const std::uint64_t key = key_of(tid, s->start_ticks);
    if (tid == self || remembered(key)) {
      ++out.had;
    } else {
      need.emplace_back(tid, key);
    }
  }
  out.had -= std::min(out.had, out.team);
  const int signal = need.empty() ? 0 : handout_signal();
  if (signal == 0) {
    out.running = need.size();  // no signal to be had: as if running
    return out;
  }
  signal_in_system_calls(std::move(need), signal, wait, out);
  return out;
}

namespace {
struct StartArgs {
  void* (*start)(void*);
  void* arg;
};
void* start_with_alt_stack(void* raw) {
  const StartArgs args = *static_cast<StartArgs*>(raw);
  delete static_cast<StartArgs*>(raw);
  (void)give_this_thread_alt_stack();
  return args.start(args.arg);
}
}  // namespace

int start_thread_with_alt_stack(CreateThreadFn create, pthread_t* thread, const pthread_attr_t* attr,
                                void* (*start)(void*), void* arg) {
  auto* args = new (std::nothrow) StartArgs{start, arg};
  if (args == nullptr) return EAGAIN;
  const int error = create(thread, attr, &start_with_alt_stack, args);
  if (error != 0) delete args;
  return error;
}

}  // namespace tensortier::profiler
