// The interposer (interposer.h): memories as objects, executions as layers of found steps.
#include "interposer.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "dnnl_api.h"
#include "tensortier/allocator/tier.h"

namespace tensortier::interpose {
namespace {

std::atomic<Interposer*> g_instance{nullptr};
std::atomic<bool> g_ever_made{false};

[[noreturn]] void fail(const std::string& line) {
  std::fprintf(stderr, "tensortier-interpose: %s\n", line.c_str());
  std::_Exit(2);
}

std::optional<StepHint> step_hint(const InterposeSettings& s) {
  if (s.step_period == 0) return std::nullopt;
  return StepHint{s.step_period, s.step_offset};
}

// The run's claim (InterposeSettings::claim_fd): true where this process is the one interposed,
// the first of the run to call oneDNN (or one started apart from tensortier-run); else says so once.
bool claim_the_run(const InterposeSettings& s) {
  if (s.claim_fd < 0) return true;
  void* page = mmap(nullptr, sizeof(std::uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED, s.claim_fd, 0);
  if (page == MAP_FAILED) return true;  // the program closed it: every process on its own, as before
  auto* word = static_cast<std::uint64_t*>(page);
  std::uint64_t expected = 0;
  const auto self = static_cast<std::uint64_t>(getpid());
  const bool first =
      __atomic_compare_exchange_n(word, &expected, self, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  munmap(page, sizeof(std::uint64_t));
  if (first || expected == self) return true;
  std::fprintf(
      stderr,
      "tensortier-interpose: process %llu calls oneDNN too; only process %llu, the first of this run to, "
      "is interposed (its report, trace and profile are its own): this one runs as without "
      "tensortier-run\n",
      static_cast<unsigned long long>(self), static_cast<unsigned long long>(expected));
  return false;
}

std::string object_name(const dnnl_memory_desc_t* md) {
  std::string name = "dnnl:";
  for (int d = 0; d < md->ndims; ++d) name += fmt::format("{}{}", d == 0 ? "" : "x", md->dims[d]);
  return name;
}

bool on_cpu(dnnl_engine_t engine) {
  dnnl_engine_kind_t kind = dnnl_any_engine;
  return engine != nullptr && dnnl_engine_get_kind(engine, &kind) == dnnl_success && kind == dnnl_cpu;
}

bool on_cpu(dnnl_stream_t stream) {
  dnnl_engine_t engine = nullptr;
  return stream != nullptr && dnnl_stream_get_engine(stream, &engine) == dnnl_success && on_cpu(engine);
}

void add_unique(std::vector<ObjectId>& ids, ObjectId id) {
  if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
}

std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
  return (h ^ v) * 0x100000001b3ULL + (h >> 29);
}

}  // namespace

Interposer* Interposer::instance() {
  static std::once_flag once;
  std::call_once(once, [] {
    const DnnlApi& api = real_dnnl();
    const InterposeSettings& s = settings();
    if (!api.unusable.empty() || !s.on) {
      if (!api.unusable.empty()) std::fprintf(stderr, "tensortier-interpose: %s\n", api.unusable.c_str());
      return;
    }
    if (!claim_the_run(s)) return;
    RuntimeOptions options;
    options.ready_memory = false;  // the program holds raw pointers (TENSORTIER_READY_MEMORY overrides)
    if (s.trial_steps_given) options.trial_steps = static_cast<std::uint32_t>(s.trial_steps);
    auto runtime = Runtime::create(options);
    if (!runtime) fail(fmt::format("the runtime did not start: {}", runtime.status().message()));
    g_instance.store(new Interposer(std::move(runtime).value()), std::memory_order_release);
    g_ever_made.store(true, std::memory_order_release);
    std::atexit(&Interposer::at_exit);  // after the exit handlers the program registers later
  });
  return g_instance.load(std::memory_order_acquire);
}

Interposer::Interposer(std::unique_ptr<Runtime> runtime)
    : runtime_(std::move(runtime)), detector_(step_hint(settings())), scratchpads_(settings().scratchpads) {
  if (const std::uint64_t seed = settings().random_moves; seed != 0) random_moves_.emplace(seed);
  if (const InterposeSettings& given = settings(); !given.trace.empty()) {
    timeline_ = std::make_unique<TimelineRecorder>(given.trace_from - 1, given.trace_steps, "tensortier-run");
    if (Status s = runtime_->add_observer(timeline_.get()); !s.is_ok()) fail(s.message());
  }
}

Interposer::~Interposer() {
  if (timeline_) runtime_->remove_observer(timeline_.get());
}

bool Interposer::ever_made() {
  return g_ever_made.load(std::memory_order_acquire);
}

void Interposer::at_exit() {
  Interposer* self = g_instance.exchange(nullptr, std::memory_order_acq_rel);
  if (self == nullptr) return;
  self->finish();
  delete self;
}

void Interposer::warn_once(const std::string& line) {
  {
    std::lock_guard lock(mutex_);
    if (!warned_.insert(line).second) return;
  }
  std::fprintf(stderr, "tensortier-interpose: %s\n", line.c_str());
}

// ---- memories ----

MemoryRecord Interposer::record_for(const dnnl_memory_desc_t* md, void* handle, const std::string& name,
                                    bool* failed) {
  MemoryRecord r;
  r.bytes = dnnl_memory_desc_get_size(md);
  r.handle = handle;
  *failed = false;
  if (handle == DNNL_MEMORY_ALLOCATE) {
    if (r.bytes == 0) return r;
    auto object = runtime_->allocate(name, r.bytes);  // may wait for room: no lock of ours held
    if (!object) {
      *failed = true;
      r.handle = nullptr;
      warn_once(fmt::format("{}; oneDNN allocates it instead", object.status().message()));
      std::lock_guard lock(mutex_);
      ++stats_.allocation_failures;
      return r;
    }
    r = MemoryRecord{object->id, 0, true, r.bytes, object->address};
  } else if (SpanView span; handle != nullptr && runtime_->lookup(handle, &span) && !span.is_group) {
    r.object = span.id;
    r.offset = reinterpret_cast<std::uintptr_t>(handle) - span.base;
  }
  std::lock_guard lock(mutex_);
  if (r.owned) {
    ++stats_.objects;
    stats_.object_bytes += r.bytes;
  } else if (r.object != 0) {
    ++stats_.aliases;
  } else if (handle == nullptr) {
    ++stats_.no_buffer;
  } else if (handle != DNNL_MEMORY_ALLOCATE) {
    ++stats_.program_buffers;
    stats_.program_bytes += r.bytes;
  }
  return r;
}

void Interposer::release(const MemoryRecord& record) {
  drop_host_pins({record.object});
  if (Status s = runtime_->free(ObjectId{record.object}); !s.is_ok()) warn_once(s.message());
  memories_.orphan_aliases(record.object);
  std::lock_guard lock(mutex_);
  ++stats_.freed;
}

dnnl_status_t Interposer::memory_create(dnnl_memory_t* memory, const dnnl_memory_desc_t* md,
                                        dnnl_engine_t engine, void* handle) {
  const DnnlApi& api = real_dnnl();
  if (memory == nullptr || md == nullptr || !on_cpu(engine)) {
    std::lock_guard lock(mutex_);
    ++stats_.passed_through;
    return api.memory_create(memory, md, engine, handle);
  }
  bool failed = false;
  const MemoryRecord r = record_for(md, handle, object_name(md), &failed);
  const dnnl_status_t s = api.memory_create(memory, md, engine, failed ? handle : r.handle);
  if (s != dnnl_success) {
    if (r.owned) release(r);
    return s;
  }
  memories_.put(*memory, r);
  std::lock_guard lock(mutex_);
  ++stats_.memories;
  return s;
}

dnnl_status_t Interposer::memory_destroy(dnnl_memory_t memory) {
  const std::optional<MemoryRecord> r = memories_.take(memory);
  const dnnl_status_t s = real_dnnl().memory_destroy(memory);
  if (r && r->owned) release(*r);
  return s;
}

// Pins the object until the next execution that uses it, and gives its current address.
dnnl_status_t Interposer::host_access(const_dnnl_memory_t memory, void** out, bool map) {
  const DnnlApi& api = real_dnnl();
  const std::optional<MemoryRecord> r = memories_.get(memory);
  if (r && r->object != 0) {
    ObjectId id{r->object};
    void* address = nullptr;
    if (Status s = runtime_->pin_objects({&id, 1}, {&address, 1}); s.is_ok()) {
      bool again = false;
      {
        std::lock_guard lock(mutex_);
        again = !host_pins_.insert(id).second;
        ++stats_.host_pins;
      }
      if (again) runtime_->unpin_objects({&id, 1});  // one pin an object, however often asked
      void* current = static_cast<char*>(address) + r->offset;
      if (current != r->handle) {
        api.memory_set_data_handle_v2(const_cast<dnnl_memory_t>(memory), current, nullptr);
        memories_.set_handle(memory, current);
        std::lock_guard lock(mutex_);
        ++stats_.refreshed;
      }
    } else {
      warn_once(fmt::format("a host access could not pin its object: {}", s.message()));
    }
  }
  return map ? api.memory_map_data(memory, out) : api.memory_get_data_handle(memory, out);
}

// oneDNN frees a buffer it allocated when the memory is pointed elsewhere; so is the object.
dnnl_status_t Interposer::set_data_handle(dnnl_memory_t memory, void* handle, dnnl_stream_t stream, bool v2) {
  const DnnlApi& api = real_dnnl();
  const std::optional<MemoryRecord> old = memories_.get(memory);
  const dnnl_status_t s =
      v2 ? api.memory_set_data_handle_v2(memory, handle, stream) : api.memory_set_data_handle(memory, handle);
  if (s != dnnl_success || !old || handle == old->handle) return s;
  const dnnl_memory_desc_t* md = nullptr;
  dnnl_memory_get_memory_desc(memory, &md);
  bool failed = false;
  MemoryRecord next = record_for(md, handle, "", &failed);
  const bool same_object = old->owned && next.object == old->object;
  next.owned = same_object;
  memories_.put(memory, next);
  if (old->owned && !same_object) release(*old);
  return s;
}

// ---- executions ----

Interposer::Bound Interposer::bind(const PrimitiveInfo& info, int nargs, const dnnl_exec_arg_t* args) {
  Bound b;
  std::vector<std::pair<int, std::uint64_t>> shape;
  for (int i = 0; i < nargs; ++i) {
    const int arg = args[i].arg;
    const dnnl_memory_t memory = args[i].memory;
    if (memory == nullptr) continue;
    const std::optional<MemoryRecord> r = memories_.get(memory);
    std::uint64_t bytes = r ? r->bytes : 0;  // the table has every memory made on a CPU engine
    if (!r) {
      const dnnl_memory_desc_t* md = nullptr;
      if (dnnl_memory_get_memory_desc(memory, &md) == dnnl_success && md != nullptr)
        bytes = dnnl_memory_desc_get_size(md);
    }
    shape.emplace_back(arg, bytes);
    if (!r || r->object == 0) continue;
    const auto known = info.uses.find(arg);
    const ArgUse use = !info.mismatch.empty()     ? ArgUse::kReadWrite
                       : known != info.uses.end() ? known->second
                                                  : classify(info.traits, arg);
    if (reads(use)) add_unique(b.reads, ObjectId{r->object});
    if (writes(use)) add_unique(b.writes, ObjectId{r->object});
    add_unique(b.all, ObjectId{r->object});
    b.bindings.push_back({memory, r->object, r->offset, r->handle});
  }
  std::sort(shape.begin(), shape.end());
  b.key = info.key;
  for (const auto& [arg, bytes] : shape) b.key = mix(mix(b.key, static_cast<std::uint64_t>(arg)), bytes);
  return b;
}

void Interposer::step_marks(bool end, bool begin) {
  if (end && step_open_) {
    step_open_ = false;
    if (Status s = runtime_->step_end(); !s.is_ok())
      warn_once(fmt::format("step end refused: {}", s.message()));
  }
  if (begin) {
    if (Status s = runtime_->step_begin(); !s.is_ok()) {
      warn_once(fmt::format("step begin refused: {}", s.message()));
      std::lock_guard lock(mutex_);
      ++stats_.failed_marks;
      return;
    }
    step_open_ = true;
    std::lock_guard lock(mutex_);
    ++stats_.steps;
  }
}

// Holds the execution's objects where they are (a layer of the open step, or pins) and points
// the memories at them. false where the runtime refused (the execution then runs as it is).
bool Interposer::enter(const PrimitiveInfo& info, Bound& bound, bool marked) {
  std::vector<ObjectId> ids = marked ? bound.reads : bound.all;
  if (marked) ids.insert(ids.end(), bound.writes.begin(), bound.writes.end());
  std::vector<void*> addresses(ids.size());
  const Status s = marked ? runtime_->layer_begin(info.name, bound.reads, bound.writes, addresses)
                          : runtime_->pin_objects(ids, addresses);
  if (!s.is_ok()) {
    warn_once(fmt::format("{} of {} refused: {}", marked ? "a layer mark" : "a pin", info.name, s.message()));
    std::lock_guard lock(mutex_);
    ++stats_.failed_marks;
    return false;
  }
  refresh(bound, addresses, ids);
  drop_host_pins(bound.all);
  return true;
}

void Interposer::refresh(const Bound& bound, const std::vector<void*>& addresses,
                         const std::vector<ObjectId>& ids) {
  for (const Binding& b : bound.bindings) {
    const auto at = std::find(ids.begin(), ids.end(), ObjectId{b.object});
    if (at == ids.end()) continue;
    void* current = static_cast<char*>(addresses[static_cast<std::size_t>(at - ids.begin())]) + b.offset;
    if (current == b.handle) continue;
    real_dnnl().memory_set_data_handle_v2(const_cast<dnnl_memory_t>(b.memory), current, nullptr);
    memories_.set_handle(b.memory, current);
    std::lock_guard lock(mutex_);
    ++stats_.refreshed;
  }
}

void Interposer::drop_host_pins(const std::vector<ObjectId>& ids) {
  std::vector<ObjectId> dropped;
  {
    std::lock_guard lock(mutex_);
    for (const ObjectId id : ids) {
      if (host_pins_.erase(id) > 0) dropped.push_back(id);
    }
  }
  if (!dropped.empty()) runtime_->unpin_objects(dropped);
}

dnnl_status_t Interposer::execute(const_dnnl_primitive_t primitive, dnnl_stream_t stream, int nargs,
                                  const dnnl_exec_arg_t* args) {
  const DnnlApi& api = real_dnnl();
  if (!on_cpu(stream) || (nargs > 0 && args == nullptr)) {
    std::lock_guard lock(mutex_);
    ++stats_.passed_through;
    return api.primitive_execute(primitive, stream, nargs, args);
  }
  const PrimitiveInfo& info = primitives_.get(primitive);
  std::vector<dnnl_exec_arg_t> with_scratchpad;
  const dnnl_memory_t scratchpad = make_scratchpad(info, stream, nargs, args);
  if (scratchpad != nullptr) {
    with_scratchpad.assign(args, args + nargs);
    with_scratchpad.push_back({DNNL_ARG_SCRATCHPAD, scratchpad});
    args = with_scratchpad.data();
    nargs = static_cast<int>(with_scratchpad.size());
  }
  if (!info.mismatch.empty()) {
    warn_once(fmt::format("{}: {}; its executions declare every argument read and written", info.name,
                          info.mismatch));
  }
  Bound bound = bind(info, nargs, args);
  std::uintptr_t expected = 0;
  const auto self = static_cast<std::uintptr_t>(pthread_self());
  training_thread_.compare_exchange_strong(expected, self);
  const bool training = training_thread_.load() == self;
  const StepDecision d = training ? detector_.next(bound.key) : StepDecision{};
  if (training) step_marks(d.end_before, d.begin_before);
  bool marked = d.marked && step_open_ && enter(info, bound, true);
  const bool pinned = !marked && enter(info, bound, false);
  const dnnl_status_t s = api.primitive_execute(primitive, stream, nargs, args);
  if (s == dnnl_success) dnnl_stream_wait(stream);  // the layer ends when its bytes are written
  if (marked) {
    if (Status e = runtime_->layer_end(); !e.is_ok())
      warn_once(fmt::format("layer end refused: {}", e.message()));
  } else if (pinned) {
    runtime_->unpin_objects(bound.all);
  }
  if (marked && random_moves_) move_at_random(bound);
  if (scratchpad != nullptr) memory_destroy(scratchpad);  // its object freed after the layer
  if (training) step_marks(d.end_after, d.begin_after);
  std::lock_guard lock(mutex_);
  ++stats_.executions;
  stats_.layers += marked ? 1 : 0;
  stats_.unmarked += marked ? 0 : 1;
  stats_.other_thread += training ? 0 : 1;
  stats_.mismatches += info.mismatch.empty() ? 0 : 1;
  return s;
}

ScratchpadAttr::ScratchpadAttr(const_dnnl_primitive_attr_t attr, bool user) : attr_(attr) {
  dnnl_scratchpad_mode_t mode = dnnl_scratchpad_mode_library;
  if (!user || (attr != nullptr && (dnnl_primitive_attr_get_scratchpad_mode(attr, &mode) != dnnl_success ||
                                    mode == dnnl_scratchpad_mode_user)))
    return;  // the program's choice stands
  const dnnl_status_t s =
      attr != nullptr ? dnnl_primitive_attr_clone(&copy_, attr) : dnnl_primitive_attr_create(&copy_);
  if (s != dnnl_success ||
      dnnl_primitive_attr_set_scratchpad_mode(copy_, dnnl_scratchpad_mode_user) != dnnl_success) {
    if (copy_ != nullptr) dnnl_primitive_attr_destroy(copy_);
    copy_ = nullptr;
  }
}

ScratchpadAttr::~ScratchpadAttr() {
  if (copy_ != nullptr) dnnl_primitive_attr_destroy(copy_);
}

bool Interposer::gives_scratchpads(dnnl_engine_t engine) const {
  return scratchpads_ && on_cpu(engine);
}

// A primitive made in user scratchpad mode by the interposer (the program passes no scratchpad):
// one as an object for this execution, freed after it, as the DNN engine does (Engine::run).
dnnl_memory_t Interposer::make_scratchpad(const PrimitiveInfo& info, dnnl_stream_t stream, int nargs,
                                          const dnnl_exec_arg_t* args) {
  if (!scratchpads_ || info.user_scratchpad_bytes == 0) return nullptr;
  for (int i = 0; i < nargs; ++i) {
    if (args[i].arg == DNNL_ARG_SCRATCHPAD) return nullptr;  // the program's own
  }
  dnnl_engine_t engine = nullptr;
  dnnl_memory_desc_t md{};
  const dnnl_dims_t dims = {static_cast<dnnl_dim_t>(info.user_scratchpad_bytes)};
  dnnl_memory_t memory = nullptr;
  if (dnnl_stream_get_engine(stream, &engine) != dnnl_success ||
      dnnl_memory_desc_init_by_tag(&md, 1, dims, dnnl_u8, dnnl_a) != dnnl_success ||
      memory_create(&memory, &md, engine, DNNL_MEMORY_ALLOCATE) != dnnl_success) {
    warn_once(fmt::format("{}: no scratchpad could be made for it", info.name));
    return nullptr;
  }
  std::lock_guard lock(mutex_);
  ++stats_.scratchpads;
  return memory;
}

// A test of the promise that results never depend on placement: one of the layer's objects to
// another tier after it, drawn by a generator seeded from TENSORTIER_RANDOM_MOVES.
void Interposer::move_at_random(const Bound& bound) {
  const Runtime::RandomMoves done = runtime_->move_at_random(bound.all, 1, *random_moves_);
  if (done.refused != 0) {
    std::lock_guard lock(mutex_);
    stats_.random_moves_failed += done.refused;
  }
}

}  // namespace tensortier::interpose
