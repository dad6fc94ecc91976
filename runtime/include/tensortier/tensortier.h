/* tensortier's C API: the same runtime as tensortier/runtime.h for programs in C or with a C
 * FFI.
 *
 * Every call returns a tt_status; on failure, tt_last_error() gives a message for people that
 * names the problem and what to do (thread-local, valid until the thread's next tensortier call,
 * and for the whole life of the process: atexit handlers may read it).
 * Thread safety is that of the C++ API: allocation, free, moves, pins, lookups and stats from any
 * thread; step and layer marks from the one training thread. A tt_runtime owns all memory it
 * handed out; destroy it with tt_runtime_destroy.
 *
 * Objects move. An object is named for good by its id (tt_object_id); its address holds until a
 * move to or from a memkind heap tier (pmem, daxkmem) gives it a new one. Code that touches an
 * object's bytes outside the layer marks (a loader filling the batch between steps) pins it:
 * tt_pin gives its current address and holds it where it is until tt_unpin. A program that does
 * not pin is still safe under a policy where the profiled step saw those accesses: the plan then
 * leaves such objects in place (docs/RELIABILITY.md).
 */
#ifndef TENSORTIER_TENSORTIER_H
#define TENSORTIER_TENSORTIER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Mirrors tensortier::StatusCode. */
typedef enum tt_status {
  TT_OK = 0,
  TT_INVALID_ARGUMENT = 1,
  TT_OUT_OF_MEMORY = 2,
  TT_NOT_FOUND = 3,
  TT_UNAVAILABLE = 4,
  TT_FAILED_PRECONDITION = 5,
  TT_INTERNAL = 6
} tt_status;

typedef struct tt_runtime tt_runtime;

/* Per-tier accounting (see tensortier::TierUsage). */
typedef struct tt_tier_stats {
  char name[64];
  uint64_t budget_bytes;
  uint64_t mapped_bytes;
  uint64_t peak_mapped_bytes;
  uint64_t live_bytes;
  uint64_t live_objects;
  uint64_t cached_bytes;
  uint64_t fallbacks_out;
  uint64_t fallbacks_in;
} tt_tier_stats;

/* spec: a tier spec, or NULL/"" for TENSORTIER_TIERS, else hwloc discovery. */
tt_status tt_runtime_create(const char* spec, tt_runtime** out);
void tt_runtime_destroy(tt_runtime* runtime);

/* Allocates `bytes` for an object named `name` in lifetime group `group` (0: default) on the
 * fastest tier with room; *out receives its address. */
tt_status tt_alloc(tt_runtime* runtime, const char* name, size_t bytes, uint32_t group, void** out);
tt_status tt_free(tt_runtime* runtime, void* address);

tt_status tt_step_begin(tt_runtime* runtime);
tt_status tt_step_end(tt_runtime* runtime);
tt_status tt_layer_begin(tt_runtime* runtime, const char* name, const void* const* reads, size_t read_count,
                         const void* const* writes, size_t write_count);
tt_status tt_layer_end(tt_runtime* runtime);

/* The id of the live object starting at `address`, and the current address of the object with id
 * `id`: an object keeps its id for life. */
tt_status tt_object_id(const tt_runtime* runtime, const void* address, uint64_t* out);
tt_status tt_address_of(const tt_runtime* runtime, uint64_t id, void** out);
/* tt_layer_begin by object ids: the layer reads `reads` and writes `writes`; `addresses` (may be
 * NULL) receives read_count + write_count current addresses, reads first, valid until
 * tt_layer_end (the layer's objects do not move meanwhile). What a C caller on a tier that moves
 * objects to new addresses uses. */
tt_status tt_layer_begin_ids(tt_runtime* runtime, const char* name, const uint64_t* reads, size_t read_count,
                             const uint64_t* writes, size_t write_count, void** addresses);

/* Host access outside the layer marks: pins the `count` objects (waiting for a move of one of
 * them already in flight) and writes their current addresses to `addresses` (may be NULL); they
 * do not move until tt_unpin with the same ids. Pins count: each tt_pin needs its tt_unpin. Any
 * thread. TT_NOT_FOUND for an id that is not live (nothing is pinned then). */
tt_status tt_pin(tt_runtime* runtime, const uint64_t* ids, size_t count, void** addresses);
tt_status tt_unpin(tt_runtime* runtime, const uint64_t* ids, size_t count);
/* For a thread of the program's own that runs oneDNN primitives beside the training thread: call it
 * first in that thread. It gets its alternate signal stack now, so that a profile never has to
 * signal it (a signal landing inside a oneDNN kernel corrupts its stack; a thread running user code
 * throughout a profile's start makes that step's profile go by declared accesses instead).
 * tensortier-run does this for every thread. TT_OUT_OF_MEMORY where no stack could be mapped. */
tt_status tt_prepare_thread(void);
/* With a device tier (cuda:N): the stream, a cudaStream_t as a number, that the program queues each
 * layer's kernels on, and its kernels on pinned objects, so that moves wait for them and layer
 * times are measured on it; 0 without a device tier (or for NULL). Any thread. */
uintptr_t tt_device_stream(const tt_runtime* runtime);

/* Moves the object starting at `address` (a small one: its whole 64 KiB chunk, the small objects of
 * its group that the same thread allocated) to tier `tier`
 * (0 = fastest). *out (may be NULL) receives its address afterwards: the same address where the
 * two tiers move in place (dram, numa, emulated), a new one where a memkind heap tier (pmem,
 * daxkmem) is involved. On failure the object is where it was, bytes intact. Thread-safe; not
 * while a layer that declared the object runs (the move waits for it). */
tt_status tt_move(tt_runtime* runtime, const void* address, uint32_t tier, void** out);
/* The tier the object starting at `address` is placed on now. */
tt_status tt_object_tier(const tt_runtime* runtime, const void* address, uint32_t* out);

size_t tt_tier_count(const tt_runtime* runtime);
tt_status tt_tier_stats_get(const tt_runtime* runtime, size_t tier, tt_tier_stats* out);

/* The newest step profile as JSON (docs/PROFILE.md), NUL-terminated, into `buffer` of
 * `capacity` bytes; *needed (may be NULL) receives the bytes it takes, NUL included. Errors:
 * TT_NOT_FOUND before any step was profiled, TT_OUT_OF_MEMORY when `capacity` is too small
 * (call with capacity 0 to learn *needed). */
tt_status tt_profile_json(const tt_runtime* runtime, char* buffer, size_t capacity, size_t* needed);

/* The message of this thread's last failed call, or "" if none. */
const char* tt_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* TENSORTIER_TENSORTIER_H */
