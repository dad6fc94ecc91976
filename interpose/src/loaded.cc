// What the interposer does as it loads, before the program's main: reads its settings (a bad one
// ends the program here, before it runs anything), gives the main thread its alternate signal
// stack and every thread started later its own as it starts, and, in the process tensortier-run
// started, says at exit where outputs were asked for and the program never called oneDNN.
//
// Alternate stacks at birth: a profile then never has to signal a thread that may be inside a
// oneDNN kernel (a signal frame there overwrites the kernel's data below its stack pointer; see
// profiler/alt_stacks.h). pthread_create is defined here, in the preloaded library, because only a
// preloaded definition comes before libc's for every caller (oneDNN's OpenMP runtime included).
#include <dlfcn.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "interposer.h"
#include "tensortier/profiler/alt_stacks.h"

namespace tensortier::interpose {
namespace {

using profiler::CreateThreadFn;

CreateThreadFn real_pthread_create() {
  static const auto real = reinterpret_cast<CreateThreadFn>(dlsym(RTLD_NEXT, "pthread_create"));
  return real;
}

InterposeSettings read_settings() {
  Result<InterposeSettings> s = InterposeSettings::from_env();
  if (!s) {
    std::fprintf(stderr, "tensortier-interpose: %s\n", s.status().message().c_str());
    std::_Exit(2);
  }
  return std::move(s).value();
}

// Whether any process of the run was interposed: the claim's word where there is one, else this
// process's own.
bool any_interposed(const InterposeSettings& s) {
  if (s.claim_fd < 0) return Interposer::ever_made();
  void* page = mmap(nullptr, sizeof(std::uint64_t), PROT_READ, MAP_SHARED, s.claim_fd, 0);
  if (page == MAP_FAILED) return Interposer::ever_made();
  const std::uint64_t owner = __atomic_load_n(static_cast<const std::uint64_t*>(page), __ATOMIC_ACQUIRE);
  munmap(page, sizeof(std::uint64_t));
  return owner != 0;
}

void say_if_never_interposed() {
  const InterposeSettings& s = settings();
  if (any_interposed(s)) return;
  std::fprintf(stderr, "tensortier-run: the program never called oneDNN: nothing was tiered%s%s%s\n",
               s.report.empty() ? "" : ", no report written to ", s.report.c_str(),
               s.trace.empty() ? "" : (", no trace written to " + s.trace).c_str());
}

__attribute__((constructor)) void on_load() {
  const InterposeSettings& s = settings();
  if (!s.on) return;
  (void)profiler::give_this_thread_alt_stack();
  if (s.run_pid == static_cast<std::uint64_t>(getpid()) && (!s.report.empty() || !s.trace.empty()))
    std::atexit(&say_if_never_interposed);  // after the interposer's own exit handler
}

}  // namespace

const InterposeSettings& settings() {
  static const InterposeSettings s = read_settings();
  return s;
}

}  // namespace tensortier::interpose

// What tensortier-run looks for to tell the interposer from any other shared library (--library).
extern "C" __attribute__((visibility("default"))) const char tensortier_interposer_version[] = "1";

extern "C" int pthread_create(pthread_t* thread, const pthread_attr_t* attr, void* (*start)(void*),
                              void* arg) {
  const tensortier::profiler::CreateThreadFn real = tensortier::interpose::real_pthread_create();
  if (real == nullptr) return EAGAIN;
  if (!tensortier::interpose::interposing_on()) return real(thread, attr, start, arg);
  return tensortier::profiler::start_thread_with_alt_stack(real, thread, attr, start, arg);
}
