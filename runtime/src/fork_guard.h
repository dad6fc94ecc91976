// fork_guard: every live Runtime of the process kept whole across fork(). One pthread_atfork
// registration for the process (handlers cannot be taken back, Runtimes come and go): before a
// fork, each registered Runtime holds its moves and takes its locks (Runtime::prepare_fork); after
// it, in the parent and in the child, lets them go (Runtime::after_fork).
// Thread-safe; a Runtime enters in its constructor and leaves first thing in its destructor.
#pragma once

namespace tensortier {

class Runtime;

namespace fork_guard {

void enter(Runtime* runtime);
void leave(Runtime* runtime);

}  // namespace fork_guard
}  // namespace tensortier
