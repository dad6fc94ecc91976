// tensortier._torch: the runtime under PyTorch's CPU allocator, for tensortier/torch.py.
//
// What it is for: every CPU tensor PyTorch allocates while a TorchRuntime is installed is a
// runtime object (Runtime::allocate), freed with its storage; step and layer marks come from
// Python (module hooks in torch.py), with the objects each layer declares by address. Moves keep
// addresses (ready memory off: PyTorch holds raw pointers), so PyTorch never sees one.
//
// Ownership: one process-wide TieredCpuAllocator (PyTorch keeps a raw pointer to it for good);
// each TorchRuntime owns its Runtime until close(), after which the Runtime lives on, leaked on
// purpose, while any tensor it allocated may still be freed (its deleter calls into it).
// Thread safety: allocate and free from any thread (the runtime's); marks from the training
// thread, as the C++ API.
#include "tensortier/runtime.h"
#include "tensortier/timeline.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace tensortier::torch_bridge {
namespace {

// PyTorch's highest allocator priority: an allocator set at it replaces any other, and only one
// set at it again (the one we found, when uninstalled) replaces it back.
constexpr std::uint8_t kPriority = 255;

// The runtime objects' allocator. After a fork (a DataLoader worker) the child allocates as
// PyTorch's own CPU allocator does (c10::alloc_cpu): the runtime refuses calls from a forked child.
// One deleter for both (PyTorch's raw_allocate needs it): an address the runtime gave is freed
// there, any other with c10::free_cpu.
class TieredCpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(std::size_t bytes) const override;
  c10::DeleterFnPtr raw_deleter() const override { return &TieredCpuAllocator::free_object; }

  void install(Runtime* runtime);
  // Names the objects allocated from now on (the running layer's name; null: "torch"). The
  // string must live as long as the process (interned()).
  void set_layer_name(const std::string* name) { layer_name_.store(name, std::memory_order_release); }
  void uninstall();
  std::uint64_t allocations() const { return allocations_.load(std::memory_order_relaxed); }

 private:
  static void free_object(void* address);

  std::atomic<Runtime*> runtime_{nullptr};
  std::atomic<const std::string*> layer_name_{nullptr};
  c10::Allocator* previous_ = nullptr;
  pid_t owner_pid_ = 0;
  mutable std::atomic<std::uint64_t> allocations_{0};
};

TieredCpuAllocator& allocator() {
  static TieredCpuAllocator* const instance = new TieredCpuAllocator();  // PyTorch holds it for good
  return *instance;
}

// The runtime each live object came from (a freed tensor may outlive the runtime's install).
std::mutex& owners_mutex() {
  static auto* m = new std::mutex();
  return *m;
}
std::unordered_map<void*, Runtime*>& owners() {
  static auto* map = new std::unordered_map<void*, Runtime*>();
  return *map;
}

// Allocations this thread makes in plain memory (not objects) while above 0: buffers a system call
// reads or writes (gloo's sockets), which the profile's page protection would fail with EFAULT.
thread_local int plain_depth = 0;

c10::DataPtr TieredCpuAllocator::allocate(std::size_t bytes) const {
  Runtime* runtime = runtime_.load(std::memory_order_acquire);
  if (runtime == nullptr || bytes == 0 || plain_depth > 0 || getpid() != owner_pid_) {
    void* data = c10::alloc_cpu(bytes);
    return {data, data, &TieredCpuAllocator::free_object, c10::Device(c10::DeviceType::CPU)};
  }
  const std::string* layer = layer_name_.load(std::memory_order_acquire);
  Result<ObjectInfo> object = runtime->allocate(layer != nullptr ? *layer : "torch", bytes);
  TORCH_CHECK(static_cast<bool>(object), "tensortier: no tier has room for a tensor of ", bytes,
              " bytes: ", object.status().message(),
              " (give the tiers more room in --tiers, or a smaller batch)");
  {
    std::lock_guard lock(owners_mutex());
    owners()[object->address] = runtime;
  }
  allocations_.fetch_add(1, std::memory_order_relaxed);
  return {object->address, object->address, &TieredCpuAllocator::free_object,
          c10::Device(c10::DeviceType::CPU)};
}

void TieredCpuAllocator::free_object(void* address) {
  Runtime* runtime = nullptr;
  {
    std::lock_guard lock(owners_mutex());
    auto it = owners().find(address);
    if (it == owners().end()) {
      c10::free_cpu(address);
      return;
    }
    runtime = it->second;
    owners().erase(it);
  }
  if (getpid() != allocator().owner_pid_) return;  // a forked child's copy: the parent frees it
  const auto at = reinterpret_cast<std::uintptr_t>(address);
  const Status freed = runtime->free(address);
  // The analyzer takes Runtime::free for free(3) and the message printed after it for freed memory.
  if (!freed.is_ok()) {
    std::fprintf(stderr, "tensortier: freeing a tensor at %#lx: %s\n", static_cast<unsigned long>(at),
                 freed.message().c_str());  // NOLINT(clang-analyzer-unix.Malloc)
  }
}

void TieredCpuAllocator::install(Runtime* runtime) {
  if (previous_ == nullptr) previous_ = c10::GetCPUAllocator();
  owner_pid_ = getpid();
  layer_name_.store(nullptr, std::memory_order_release);
  runtime_.store(runtime, std::memory_order_release);
  c10::SetCPUAllocator(this, kPriority);
}

void TieredCpuAllocator::uninstall() {
  runtime_.store(nullptr, std::memory_order_release);
  if (previous_ != nullptr) c10::SetCPUAllocator(previous_, kPriority);
}

// Layer names for the allocator, kept for the process (allocating threads may read one at any time).
const std::string& interned(const std::string& name) {
  static auto* mutex = new std::mutex();
  static auto* names = new std::set<std::string, std::less<>>();
  std::lock_guard lock(*mutex);
  return *names->insert(name).first;
}

[[noreturn]] void raise(const Status& status) {
  throw std::runtime_error("tensortier: " + status.message());
}
void check(const Status& status) {
  if (!status.is_ok()) raise(status);
}

// One runtime under PyTorch: the allocator installed while it is open, marks from torch.py.
class TorchRuntime {
 public:
  TorchRuntime(const std::string& tiers, const std::string& policy, const std::string& fast_budget,
               int profile_step, const py::dict& options);
  ~TorchRuntime() { close(); }
  void close();
  void step_begin() { check(open().step_begin()); }
  void step_end() { check(open().step_end()); }
  void layer_begin(const std::string& name, const std::vector<std::uintptr_t>& reads,
                   const std::vector<std::uintptr_t>& writes);
  void layer_end();
  bool owns(std::uintptr_t address) const;
  // The runtime's ids of the objects at these addresses (0 where none), and the addresses of those
  // of them still alive: a layer's forward tensors are named again in its backward only while
  // they live (the address of one freed since may hold another object, or none).
  std::vector<std::uint64_t> ids_of(const std::vector<std::uintptr_t>& addresses) const;
  std::vector<std::uintptr_t> live_addresses(const std::vector<std::uint64_t>& ids) const;
  std::uint32_t tier_of(std::uintptr_t address) const;
  py::dict stats() const;
  std::string describe() const { return open().describe() + policy_line(); }
  // Records `steps` steps from `first_step` on as a Chrome trace (timeline.h); write_trace writes it.
  void trace(std::uint64_t first_step, std::uint64_t steps);
  // Chaos for tests: moves `count` of this runtime's live objects, drawn at random, each to another
  // tier drawn at random (none may change address); the number moved. Between layers only (no
  // PyTorch op runs then); moves the runtime refuses (a profiled step) are skipped.
  std::uint32_t move_random(std::uint32_t count);
  void write_trace(const std::string& path) const;

 private:
  Runtime& open() const;
  std::vector<const void*> objects_among(const std::vector<std::uintptr_t>& addresses) const;
  std::string policy_line() const;

  Runtime* runtime_ = nullptr;                  // owned until close(); leaked after (see the file's top)
  std::unique_ptr<TimelineRecorder> timeline_;  // observes runtime_ from trace() to close()
  std::mt19937_64 chaos_{7};                    // move_random's draws: the same each run
};

// The RuntimeOptions a caller may set by name (runtime.h says what each does).
void set_options(const py::dict& given, RuntimeOptions& options) {
  for (const auto& [key, value] : given) {
    const auto name = key.cast<std::string>();
    if (name == "dead_moves") {
      options.dead_moves = value.cast<bool>();
    } else if (name == "short_lived_arena") {
      options.short_lived_arena = value.cast<bool>();
    } else if (name == "trial_steps") {
      options.trial_steps = value.cast<std::uint32_t>();
    } else if (name == "timed_bound_s") {
      options.timed_bound_s = value.cast<double>();
    } else if (name == "room_wait_ms") {
      options.room_wait = std::chrono::microseconds(static_cast<std::int64_t>(1000 * value.cast<double>()));
    } else {
      throw std::invalid_argument(
          fmt::format("tensortier: no runtime option '{}' (known: dead_moves, short_lived_arena, "
                      "trial_steps, room_wait_ms, timed_bound_s)",
                      name));
    }
  }
}

TorchRuntime::TorchRuntime(const std::string& tiers, const std::string& policy,
                           const std::string& fast_budget, int profile_step, const py::dict& given) {
  RuntimeOptions options(tiers);
  set_options(given, options);
  options.policy = policy;
  options.fast_budget = fast_budget;
  options.ready_memory = false;  // PyTorch holds raw pointers: moves keep addresses
  options.clean_moves = false;   // a write PyTorch does not declare must not leave a stale slow copy
  // Every move copies: a move "of dead bytes" trusts that no layer reads the object after its
  // last declared use, and the profile sees undeclared writes, not reads (under sentinel at 20%
  // such moves dropped live bytes: losses differed from step 3 on). The option turns it back on.
  options.dead_moves = false;
  if (profile_step >= 0) options.profile.step = static_cast<std::uint64_t>(profile_step);
  Result<std::unique_ptr<Runtime>> runtime = Runtime::create(options);
  if (!runtime) raise(runtime.status());
  runtime_ = std::move(runtime).value().release();
  allocator().install(runtime_);
}

void TorchRuntime::close() {
  if (runtime_ == nullptr) return;
  if (timeline_ != nullptr) runtime_->remove_observer(timeline_.get());
  // A profile's window opens at the end of the step before the profiled one: closed between them,
  // the runtime (leaked) would hold the process's one fault tracker, and no later runtime could
  // profile. Profiling off ends the window.
  profiler::ProfileOptions off = runtime_->profile_options();
  off.enabled = false;
  if (Status s = runtime_->set_profile_options(off); !s.is_ok())
    std::fprintf(stderr, "tensortier: closing: %s\n", s.message().c_str());
  allocator().uninstall();
  runtime_ = nullptr;  // leaked: tensors it allocated may be freed later (see the file's top)
}

void TorchRuntime::trace(std::uint64_t first_step, std::uint64_t steps) {
  if (timeline_ != nullptr) open().remove_observer(timeline_.get());
  timeline_ = std::make_unique<TimelineRecorder>(first_step, steps, "tensortier.torch");
  check(open().add_observer(timeline_.get()));
}

void TorchRuntime::write_trace(const std::string& path) const {
  if (timeline_ == nullptr) throw std::runtime_error("tensortier: no trace recorded (call trace() first)");
  check(timeline_->write(path));
}

std::uint32_t TorchRuntime::move_random(std::uint32_t count) {
  Runtime& r = open();
  std::vector<void*> mine;
  {
    std::lock_guard lock(owners_mutex());
    for (const auto& [address, owner] : owners())
      if (owner == runtime_) mine.push_back(address);
  }
  std::ranges::sort(mine);  // the map's order is not the same each run; the draws must be
  std::vector<ObjectId> ids;
  for (void* address : mine) {
    if (Result<ObjectInfo> info = r.object(address); info) ids.push_back(info->id);
  }
  const std::uint64_t relocations = r.relocations();
  const Runtime::RandomMoves done = r.move_at_random(ids, count, chaos_);
  if (r.relocations() != relocations)
    throw std::runtime_error("tensortier: a move changed a tensor's address");
  return done.moved;
}

Runtime& TorchRuntime::open() const {
  if (runtime_ == nullptr) throw std::runtime_error("tensortier: the runtime was closed");
  return *runtime_;
}

// The addresses that start a live object of this runtime, each once (a view's tensor shares its
// storage's object; anything else, e.g. a tensor from before the runtime, is left undeclared: the
// profile then sees its accesses as undeclared and no plan moves it).
std::vector<const void*> TorchRuntime::objects_among(const std::vector<std::uintptr_t>& addresses) const {
  std::set<const void*> seen;
  std::vector<const void*> out;
  for (std::uintptr_t a : addresses) {
    const void* p = reinterpret_cast<const void*>(a);
    if (p == nullptr || seen.contains(p) || !owns(a)) continue;
    seen.insert(p);
    out.push_back(p);
  }
  return out;
}

std::vector<std::uint64_t> TorchRuntime::ids_of(const std::vector<std::uintptr_t>& addresses) const {
  std::vector<std::uint64_t> ids;
  ids.reserve(addresses.size());
  for (std::uintptr_t a : addresses) {
    Result<ObjectInfo> info = owns(a) ? open().object(reinterpret_cast<const void*>(a)) : unavailable("");
    ids.push_back(info ? info->id : 0);
  }
  return ids;
}

std::vector<std::uintptr_t> TorchRuntime::live_addresses(const std::vector<std::uint64_t>& ids) const {
  std::vector<std::uintptr_t> addresses;
  for (std::uint64_t id : ids) {
    if (id == 0) continue;
    if (Result<void*> a = open().address_of(static_cast<ObjectId>(id)); a)
      addresses.push_back(reinterpret_cast<std::uintptr_t>(a.value()));
  }
  return addresses;
}

// An object both read and written is declared in both (the emulated charge counts both ways).
void TorchRuntime::layer_begin(const std::string& name, const std::vector<std::uintptr_t>& reads,
                               const std::vector<std::uintptr_t>& writes) {
  const std::vector<const void*> r = objects_among(reads);
  const std::vector<const void*> w = objects_among(writes);
  allocator().set_layer_name(&interned(name));
  check(open().layer_begin(name, r, w));
}

void TorchRuntime::layer_end() {
  allocator().set_layer_name(nullptr);
  check(open().layer_end());
}

bool TorchRuntime::owns(std::uintptr_t address) const {
  void* p = reinterpret_cast<void*>(address);
  {
    std::lock_guard lock(owners_mutex());
    auto it = owners().find(p);
    if (it == owners().end() || it->second != runtime_) return false;
  }
  return true;
}

std::uint32_t TorchRuntime::tier_of(std::uintptr_t address) const {
  Result<ObjectInfo> info = open().object(reinterpret_cast<const void*>(address));
  if (!info) raise(info.status());
  return info->tier;
}

std::string TorchRuntime::policy_line() const {
  const Runtime& r = open();
  std::string line;
  if (!r.policy_failure().empty()) line += "\npolicy: " + r.policy_failure();
  if (!r.trial_result().empty()) line += "\ntrial: " + r.trial_result();
  return line;
}

py::dict TorchRuntime::stats() const {
  const RuntimeStats s = open().stats();
  py::dict d;
  d["steps"] = s.steps_completed;
  d["live_objects"] = s.live_objects;
  d["live_bytes"] = s.live_bytes;
  d["peak_live_bytes"] = s.peak_live_bytes;
  d["policy"] = s.policy;
  d["emulated_charge_ns"] = s.emulated_charge_ns;
  d["last_step_emulated_charge_ns"] = s.last_step_emulated_charge_ns;
  d["last_step_slow_bytes"] = s.last_step_slow_bytes;
  d["last_step_undeclared_slow_bytes"] = s.last_step_undeclared_slow_bytes;
  d["moves"] = s.migration.moves;
  d["bytes_in"] = s.migration.bytes_in;
  d["bytes_out"] = s.migration.bytes_out;
  d["failed_moves"] = s.migration.failed_moves;
  d["discarded_moves"] = s.migration.discarded_moves;  // moves of dead bytes (copied nothing)
  d["late_moves"] = s.late_moves;
  d["move_wait_ns"] = s.move_wait_ns;
  d["mover_busy_ns"] = s.migration.mover_busy_ns;
  d["late_dropped"] = s.migration.late_dropped;
  d["off_plan_steps"] = s.migration.off_plan_steps;
  d["last_failure"] = s.migration.last_failure;
  d["profiled_steps"] = open().profiled_steps();
  d["plan_settled"] = open().plan_settled();
  d["allocations"] = allocator().allocations();
  // What the running plan predicted a step adds over its layers on fast memory, and the timed
  // bound no plan beats (with the timed_bound_s option; 0 without), both from the profiled step.
  const migrator::Plan* plan = open().plan();
  d["compute_ms"] = plan != nullptr ? plan->compute_ns / 1e6 : 0.0;
  d["predicted_added_ms"] = plan != nullptr ? plan->predicted_extra_ns / 1e6 : 0.0;
  d["bound_added_ms"] = plan != nullptr ? plan->timed_bound_ns / 1e6 : 0.0;
  py::list tiers;
  for (const TierUsage& t : s.tiers) {
    py::dict tier;
    tier["name"] = t.name;
    tier["live_bytes"] = t.live_bytes;
    tier["peak_live_bytes"] = t.peak_live_bytes;
    tier["live_objects"] = t.live_objects;
    tier["room_waits"] = t.room_waits;
    tier["fallbacks_in"] = t.fallbacks_in;
    tiers.append(tier);
  }
  d["tiers"] = tiers;
  return d;
}

}  // namespace
}  // namespace tensortier::torch_bridge

PYBIND11_MODULE(_torch, m) {
  using tensortier::torch_bridge::TorchRuntime;
  m.doc() = "tensortier's runtime under PyTorch's CPU allocator (use tensortier.torch)";
  py::class_<TorchRuntime>(m, "Runtime")
      .def(py::init<const std::string&, const std::string&, const std::string&, int, const py::dict&>(),
           py::arg("tiers"), py::arg("policy") = "", py::arg("fast_budget") = "",
           py::arg("profile_step") = -1, py::arg("options") = py::dict())
      .def("close", &TorchRuntime::close)
      .def("step_begin", &TorchRuntime::step_begin)
      .def("step_end", &TorchRuntime::step_end)
      .def("layer_begin", &TorchRuntime::layer_begin, py::arg("name"), py::arg("reads"), py::arg("writes"))
      .def("layer_end", &TorchRuntime::layer_end)
      .def("owns", &TorchRuntime::owns)
      .def("ids_of", &TorchRuntime::ids_of)
      .def("live_addresses", &TorchRuntime::live_addresses)
      .def("tier_of", &TorchRuntime::tier_of)
      .def("stats", &TorchRuntime::stats)
      .def("describe", &TorchRuntime::describe)
      .def("trace", &TorchRuntime::trace, py::arg("first_step"), py::arg("steps"))
      .def("move_random", &TorchRuntime::move_random, py::arg("count"))
      .def("write_trace", &TorchRuntime::write_trace, py::arg("path"));
  m.def(
      "plain_begin", [] { ++tensortier::torch_bridge::plain_depth; },
      "This thread's allocations are plain memory (not objects) until plain_end");
  m.def("plain_end", [] {
    if (tensortier::torch_bridge::plain_depth > 0) --tensortier::torch_bridge::plain_depth;
  });
}
