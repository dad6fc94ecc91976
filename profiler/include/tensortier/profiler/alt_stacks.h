// Alternate signal stacks for the page-protection profile. oneDNN's JIT kernels keep data below
// the stack pointer, past the 128-byte red zone a signal frame spares: a frame pushed on such a
// thread's own stack overwrites it (heap corruption in a training step). So the profile's
// SIGSEGV handler runs on an alternate stack, and every thread that may touch a watched span
// needs one before anything is protected. A signal of any kind that lands inside a kernel does the
// same damage, so no thread is signalled while it may run one:
//
//   how a thread gets one                         | signal
//   ----------------------------------------------+-----------------------------------------
//   the thread that hands them out                | none: it takes its own
//   its OpenMP team (oneDNN's workers for it)     | none: a parallel region where each takes its own
//   a thread started through                      | none: it takes one before its start routine
//   start_thread_with_alt_stack (tensortier-run's |   and gives it back at exit
//   pthread_create), or one that called           |
//   give_this_thread_alt_stack (tt_prepare_thread)|
//   any other thread, while blocked in a system   | one, answered at the system call's return
//   call (/proc/self/task/N/syscall says which)   |   (where no kernel's data is below the stack)
//   any other thread running user code throughout | none: counted in `running`; the step
//   the wait (or waiting in a page fault)         |   profiler then profiles by declaration
//
// Stacks handed out by signal are never freed (a thread keeps its stack for life; they come from
// a pool mapped before any signal is sent, so the handler allocates nothing). Which threads have
// one is kept by thread id and start time, so a reused id is not taken for its predecessor.
// Thread safety: every function from any thread; hand-outs one at a time.
#pragma once

#include <pthread.h>

#include <chrono>
#include <cstddef>
#include <string>

#include "tensortier/status.h"

namespace tensortier::profiler {

struct AltStackHandout {
  std::size_t threads = 0;     // threads of the process at the hand-out
  std::size_t had = 0;         // had one already (at birth, their own, an earlier hand-out)
  std::size_t team = 0;        // took one in the caller's OpenMP parallel region
  std::size_t signalled = 0;   // signalled while blocked in a system call, and answered
  std::size_t unanswered = 0;  // signalled, no answer in the wait (they block the signal)
  std::size_t running = 0;     // never seen in a system call in the wait: left without one
  // One line for a profile's notes: "alternate signal stacks: 9 threads: 8 had one, 1 ...".
  std::string describe() const;
};

// Gives every thread of the process an alternate signal stack as the table above says, waiting
// up to `wait` for threads to block or answer. Errors (kUnavailable, nothing signalled) where the
// threads cannot be listed or the stacks cannot be mapped.
Result<AltStackHandout> give_threads_alt_stacks(
    std::chrono::milliseconds wait = std::chrono::milliseconds(1000));

// The calling thread gets an alternate signal stack of its own now (where it has none), given back
// when it exits. Returns false where it could not (no memory, or the thread has one set by
// someone else, which it keeps).
bool give_this_thread_alt_stack();

// pthread_create's signature, for start_thread_with_alt_stack's `create`.
using CreateThreadFn = int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
// `create` (the real pthread_create) with a start routine that first gives the new thread its
// alternate stack (give_this_thread_alt_stack). Errors as pthread_create's (EAGAIN without memory).
int start_thread_with_alt_stack(CreateThreadFn create, pthread_t* thread, const pthread_attr_t* attr,
                                void* (*start)(void*), void* arg);

}  // namespace tensortier::profiler
