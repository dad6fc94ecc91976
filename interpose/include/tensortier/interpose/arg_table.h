// What a oneDNN primitive does with each argument of an execution: reads it, writes it, or both,
// from the argument id (dnnl_types.h's DNNL_ARG_*) and what the primitive is (its kind,
// propagation kind and the few flags that turn an input into an output). The interposer declares
// a layer's reads and writes from it; a wrong "read" where the primitive writes would let a clean
// copy of stale bytes survive a move, so anything the table does not know is declared both.
//
//   argument ids                      use
//   SRC_* (1-16), WEIGHTS_* (33-40),  read
//   BIAS, SCALE, SHIFT, DIFF_DST_*,
//   MULTIPLE_SRC + i, ATTR_*
//   DST_* (17-32), DIFF_SRC_*,        write (DST: also read under a sum post-op; only read in
//                                     backward, where eltwise and softmax read forward's output)
//   DIFF_WEIGHTS_*, DIFF_BIAS,        write (RNN backward: read and write, it accumulates)
//   DIFF_SCALE, DIFF_SHIFT,
//   MULTIPLE_DST + i, SCRATCHPAD
//   MEAN, VARIANCE                    write in normalization forward training without global
//                                     statistics, else read
//   WORKSPACE                         write in forward, read in backward
//   anything else                     read and write (unknown)
//
// check_counts() compares the table with oneDNN's own input and output counts
// (dnnl_query_num_of_inputs_s32 / _outputs_s32) over the arguments the primitive uses.
//
// Pure functions of their arguments: thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include <oneapi/dnnl/dnnl_types.h>

namespace tensortier::interpose {

enum class ArgUse : std::uint8_t { kRead = 1, kWrite = 2, kReadWrite = 3 };

inline bool reads(ArgUse use) {
  return (static_cast<int>(use) & 1) != 0;
}
inline bool writes(ArgUse use) {
  return (static_cast<int>(use) & 2) != 0;
}

// What the table needs to know of a primitive (from its primitive descriptor).
struct PrimitiveTraits {
  dnnl_primitive_kind_t kind = dnnl_undefined_primitive;
  dnnl_prop_kind_t prop = dnnl_prop_kind_undef;  // undef for kinds without one (reorder, sum, ...)
  bool global_stats = false;                     // normalization with dnnl_use_global_stats
  unsigned normalization_flags = 0;              // a normalization's dnnl_normalization_flags_t
  bool dst_summed = false;                       // a sum post-op: dst is read before it is written
};

// How the primitive uses argument `arg`; `known` (may be null) is set false for an id the table
// does not know (then kReadWrite).
ArgUse classify(const PrimitiveTraits& traits, int arg, bool* known = nullptr);

// Whether a primitive uses `arg` that its descriptor gives a memory descriptor for: a
// normalization's descriptor answers for every scale and shift argument (SCALE_SHIFT, SCALE,
// SHIFT and their gradients) and its statistics whatever its flags chose; the flags decide.
bool uses(const PrimitiveTraits& traits, int arg);

// Whether oneDNN counts `arg` among a primitive's inputs or outputs (its scratchpad and the
// attributes' arguments it does not).
bool counted(int arg);

// The table against oneDNN's counts: `used` are the arguments the primitive uses (a non-empty
// dnnl_query_exec_arg_md). Empty when they agree, else one line naming the primitive, both
// counts and the arguments.
std::string check_counts(const PrimitiveTraits& traits, std::span<const int> used, int inputs, int outputs);

}  // namespace tensortier::interpose
