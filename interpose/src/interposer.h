// The interposer: a tensortier Runtime under an unmodified oneDNN program. Every memory oneDNN
// would allocate becomes a runtime object; every primitive execution becomes a layer of a step the
// step detector found, declaring what the argument table says it reads and writes; host access
// through get_data_handle or map_data pins the object until the next execution that uses it.
//
//   dnnl_primitive_execute ─> bind (arguments -> objects, uses, key) ─> detector decision
//     ─> step marks ─> enter (layer_begin, or a pin of every object outside steps) ─> handles
//     refreshed to the objects' addresses ─> libdnnl executes ─> stream wait ─> leave ─> marks
//
// One instance, made at the first oneDNN call (runtime options from the environment, as
// tensortier-run sets it) and destroyed by an exit handler after the program's own: the open step
// is ended, the report and trace written, the runtime destroyed; calls after it pass through.
// Thread safety: memory calls from any thread; executions from the first thread that executes
// are steps and layers, from any other thread pinned and unmarked.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include <oneapi/dnnl/dnnl.h>

#include "memory_table.h"
#include "tensortier/interpose/primitive_info.h"
#include "tensortier/interpose/settings.h"
#include "tensortier/interpose/step_detector.h"
#include "tensortier/runtime.h"
#include "tensortier/timeline.h"

namespace tensortier::interpose {

// The settings from the environment, read once as the interposer loads (threads.cc); a bad one
// ends the program there, before it runs anything, naming the variable.
const InterposeSettings& settings();
inline bool interposing_on() {
  return settings().on;
}

struct InterposeStats {
  std::uint64_t memories = 0;             // memories made on a CPU engine
  std::uint64_t objects = 0;              // objects made for them (DNNL_MEMORY_ALLOCATE)
  std::uint64_t allocation_failures = 0;  // no tier had room: oneDNN allocated it (not an object)
  std::uint64_t object_bytes = 0;
  std::uint64_t aliases = 0;          // memories made on (part of) an existing object
  std::uint64_t program_buffers = 0;  // memories on the program's own buffers (never moved)
  std::uint64_t program_bytes = 0;
  std::uint64_t no_buffer = 0;       // DNNL_MEMORY_NONE
  std::uint64_t passed_through = 0;  // memories and executions on other engines
  std::uint64_t freed = 0;           // objects freed with their memory
  std::uint64_t executions = 0;
  std::uint64_t layers = 0;               // executions marked as layers of a step
  std::uint64_t unmarked = 0;             // executions outside steps (their objects pinned)
  std::uint64_t other_thread = 0;         // of those, from a thread other than the training one
  std::uint64_t scratchpads = 0;          // scratchpad objects given to executions (--scratchpads)
  std::uint64_t host_pins = 0;            // get_data_handle / map_data on an object
  std::uint64_t refreshed = 0;            // memories pointed at an object's new address (a heap tier's move)
  std::uint64_t mismatches = 0;           // executions declaring every argument read and written
  std::uint64_t failed_marks = 0;         // layer or step marks the runtime refused
  std::uint64_t steps = 0;                // steps begun
  std::uint64_t random_moves_failed = 0;  // TENSORTIER_RANDOM_MOVES's refused (a pinned chunk)
};

// The attributes a primitive descriptor is made with: the program's, or, where the interposer gives
// scratchpads and the program left oneDNN its own, a copy in user scratchpad mode (destroyed with
// this; oneDNN keeps its own copy in the descriptor).
class ScratchpadAttr {
 public:
  ScratchpadAttr(const_dnnl_primitive_attr_t attr, bool user);
  ~ScratchpadAttr();
  ScratchpadAttr(const ScratchpadAttr&) = delete;
  ScratchpadAttr& operator=(const ScratchpadAttr&) = delete;
  const_dnnl_primitive_attr_t get() const { return copy_ != nullptr ? copy_ : attr_; }

 private:
  const_dnnl_primitive_attr_t attr_;
  dnnl_primitive_attr_t copy_ = nullptr;
};

class Interposer {
 public:
  // Whether this process made its interposer (it called oneDNN and was the run's to interpose).
  static bool ever_made();
  // The instance, made at the first call; null where it only passes calls through.
  static Interposer* instance();

  dnnl_status_t memory_create(dnnl_memory_t* memory, const dnnl_memory_desc_t* md, dnnl_engine_t engine,
                              void* handle);
  dnnl_status_t memory_destroy(dnnl_memory_t memory);
  // get_data_handle (map = false) and map_data (map = true).
  dnnl_status_t host_access(const_dnnl_memory_t memory, void** out, bool map);
  dnnl_status_t set_data_handle(dnnl_memory_t memory, void* handle, dnnl_stream_t stream, bool v2);
  dnnl_status_t execute(const_dnnl_primitive_t primitive, dnnl_stream_t stream, int nargs,
                        const dnnl_exec_arg_t* args);
  void primitive_destroyed(const_dnnl_primitive_t primitive) { primitives_.erase(primitive); }
  // Whether primitive descriptors on this engine are made in user scratchpad mode, so that each
  // execution's scratchpad is an object (TENSORTIER_SCRATCHPADS=1, tensortier-run --scratchpads).
  bool gives_scratchpads(dnnl_engine_t engine) const;

  ~Interposer();
  Interposer(const Interposer&) = delete;
  Interposer& operator=(const Interposer&) = delete;

 private:
  // One execution's arguments as objects.
  struct Binding {
    const_dnnl_memory_t memory;
    std::uint64_t object;
    std::uint64_t offset;
    void* handle;
  };
  struct Bound {
    std::vector<ObjectId> reads, writes, all;
    std::vector<Binding> bindings;
    std::uint64_t key = 0;
  };

  explicit Interposer(std::unique_ptr<Runtime> runtime);
  static void at_exit();
  MemoryRecord record_for(const dnnl_memory_desc_t* md, void* handle, const std::string& name, bool* failed);
  void release(const MemoryRecord& record);
  Bound bind(const PrimitiveInfo& info, int nargs, const dnnl_exec_arg_t* args);
  void step_marks(bool end, bool begin);
  bool enter(const PrimitiveInfo& info, Bound& bound, bool marked);
  void refresh(const Bound& bound, const std::vector<void*>& addresses, const std::vector<ObjectId>& ids);
  void drop_host_pins(const std::vector<ObjectId>& ids);
  void move_at_random(const Bound& bound);
  dnnl_memory_t make_scratchpad(const PrimitiveInfo& info, dnnl_stream_t stream, int nargs,
                                const dnnl_exec_arg_t* args);
  void warn_once(const std::string& line);
  std::string report_json() const;
  void finish();

  std::unique_ptr<Runtime> runtime_;
  std::unique_ptr<TimelineRecorder> timeline_;
  MemoryTable memories_;
  PrimitiveCache primitives_;
  StepDetector detector_;
  std::atomic<std::uintptr_t> training_thread_{0};
  mutable std::mutex mutex_;  // stats_, host_pins_, warned_
  InterposeStats stats_;
  std::unordered_set<ObjectId> host_pins_;
  std::set<std::string> warned_;
  bool step_open_ = false;                       // training thread only
  std::optional<std::mt19937_64> random_moves_;  // TENSORTIER_RANDOM_MOVES: its draws (none: off)
  bool scratchpads_ = false;                     // TENSORTIER_SCRATCHPADS
};

}  // namespace tensortier::interpose
