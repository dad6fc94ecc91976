// StepObserver: the events of training steps, as the runtime sends them to whoever attaches —
// the profiler while it records a step, the migrator while it runs a plan. The runtime is where
// they meet; it knows them only through this interface.
//
// One of the core headers (beside ids.h, object_info.h, status.h), in allocator/, the bottom
// layer, so that every layer above can implement it without depending upward.
//
// Who calls what, and from where:
//   - on_step_begin/end, on_layer_begin/end: the training thread, in order;
//   - on_allocate, on_free: any thread that allocates or frees (the runtime serializes them);
//   - on_release: under the allocator's lock, from whichever call releases memory; it must not
//     call the allocator;
//   - on_move: the thread that moved the object, after the move committed;
//   - on_host_pin: the thread that pinned objects for host code (Runtime::pin_objects), after
//     the pin.
// An observer must not call back into the runtime's step or layer marks.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "tensortier/ids.h"
#include "tensortier/object_info.h"

namespace tensortier {

struct SpanView;    // allocator/object_table.h
struct MoveResult;  // allocator/object_allocator.h

// A layer as its observers see it at layer_begin.
struct LayerEvent {
  std::string_view name;
  std::uint32_t index = 0;  // position in its step, from 0
  std::span<const ObjectId> reads;
  std::span<const ObjectId> writes;
  std::span<const ObjectKey> read_keys;    // keys of `reads`, in the same order
  std::span<const ObjectKey> write_keys;   // keys of `writes`
  std::uint64_t live_bytes = 0;            // the allocator's live bytes at layer_begin
  std::uint64_t previous_duration_ns = 0;  // the same layer in the previous step (0: unknown)
  std::uint64_t move_wait_ns = 0;          // how long it waited for moves of its objects in flight
};

// A layer as its observers see it at layer_end.
struct LayerEndEvent {
  std::uint32_t index = 0;
  std::uint64_t duration_ns = 0;         // wall time between layer_begin and layer_end, charge included
  std::uint64_t emulated_charge_ns = 0;  // of which the emulated slow tier's charge
  std::uint64_t slow_bytes_read = 0;     // declared reads of objects on an emulated tier
  std::uint64_t slow_bytes_written = 0;  // declared writes of objects on an emulated tier
};

struct StepEndEvent {
  std::uint64_t step = 0;
  std::uint64_t signature = 0;  // layer names and argument sizes (the kind of step)
  std::uint64_t duration_ns = 0;
};

class StepObserver {
 public:
  virtual ~StepObserver() = default;
  virtual void on_step_begin(std::uint64_t /*step*/) {}
  virtual void on_step_end(const StepEndEvent& /*event*/) {}
  virtual void on_layer_begin(const LayerEvent& /*event*/) {}
  virtual void on_layer_end(const LayerEndEvent& /*event*/) {}
  // `span`: the object's own span, or its group chunk for a small object.
  virtual void on_allocate(const ObjectInfo& /*object*/, const SpanView& /*span*/) {}
  // Before the object's memory is freed.
  virtual void on_free(ObjectId /*id*/, const SpanView& /*span*/) {}
  // Before memory goes back to its tier (ObjectAllocator's release observer).
  virtual void on_release(const SpanView& /*span*/) {}
  virtual void on_move(const MoveResult& /*move*/) {}
  // Host code pinned these objects to touch them outside the layer marks (a loader filling the
  // batch): those accesses are announced, and no move runs under them.
  virtual void on_host_pin(std::span<const ObjectId> /*ids*/) {}
};

// Where an object about to be allocated should go, asked by the runtime on the allocating thread
// just before it allocates (the migrator's executor answers from its plan). nullopt: the caller's
// preferred tier. Must be thread-safe and must not call the runtime.
class PlacementAdvisor {
 public:
  virtual ~PlacementAdvisor() = default;
  virtual std::optional<TierIndex> placement(ObjectKey key, std::size_t bytes) = 0;
  // Where in the runtime's arena (its short-lived region) the object goes, at this offset in
  // bytes; nullopt: not in the arena. Asked first; same rules as placement().
  virtual std::optional<std::uint64_t> arena_offset(ObjectKey /*key*/, std::size_t /*bytes*/) {
    return std::nullopt;
  }
  // Ready memory: the planned place the object is born in (its fast slot or its home); asked
  // first of all. nullopt: none.
  virtual std::optional<Place> place(ObjectKey /*key*/, std::size_t /*bytes*/) { return std::nullopt; }
};

}  // namespace tensortier
