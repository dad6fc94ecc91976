// fork_guard (see fork_guard.h).
#include "fork_guard.h"

#include <pthread.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "tensortier/runtime.h"

namespace tensortier {

// The registry and its handlers; Runtime's fork hooks are private to it (a friend).
struct ForkHandlers {
  static std::mutex& mutex() {
    static std::mutex m;  // held from prepare to parent/child: no Runtime comes or goes meanwhile
    return m;
  }
  static std::vector<Runtime*>& runtimes() {
    static std::vector<Runtime*> list;
    return list;
  }
  static void prepare() {
    mutex().lock();
    for (Runtime* rt : runtimes()) rt->prepare_fork();
  }
  static void after(bool child) {
    // The reverse order of prepare: each Runtime's locks let go before the registry's.
    for (auto it = runtimes().rbegin(); it != runtimes().rend(); ++it) (*it)->after_fork(child);
    mutex().unlock();
  }
  static void parent() { after(false); }
  static void child() { after(true); }
};

namespace fork_guard {

void enter(Runtime* runtime) {
  static std::once_flag registered;
  std::call_once(registered,
                 [] { pthread_atfork(&ForkHandlers::prepare, &ForkHandlers::parent, &ForkHandlers::child); });
  std::lock_guard lock(ForkHandlers::mutex());
  ForkHandlers::runtimes().push_back(runtime);
}

void leave(Runtime* runtime) {
  std::lock_guard lock(ForkHandlers::mutex());
  std::erase(ForkHandlers::runtimes(), runtime);
}

}  // namespace fork_guard
}  // namespace tensortier
