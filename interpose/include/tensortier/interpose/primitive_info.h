// What the interposer knows of one primitive, read once from its descriptor and kept until
// dnnl_primitive_destroy: a layer name, the argument table's traits, how each argument it was
// executed with is used, and whether the table agrees with oneDNN's own counts.
//
// PrimitiveCache: any thread (one mutex). Entries are stable while their primitive lives.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include <oneapi/dnnl/dnnl.h>

#include "tensortier/interpose/arg_table.h"

namespace tensortier::interpose {

struct PrimitiveInfo {
  std::string name;  // "convolution:forward_training"
  PrimitiveTraits traits;
  std::uint64_t key = 0;  // of kind and propagation, for the step detector
  std::string mismatch;   // empty: the table agrees with oneDNN's counts; else why not
  // Argument id -> use, for the arguments the primitive uses (a non-empty exec_arg_md); an
  // argument passed but not used by the primitive is absent (it touches no bytes of it).
  std::map<int, ArgUse> uses;
  // Its scratchpad is the caller's to give (dnnl_scratchpad_mode_user), of this many bytes (0: none
  // or the library's own).
  std::uint64_t user_scratchpad_bytes = 0;
};

class PrimitiveCache {
 public:
  // The primitive's entry, made at its first execution.
  const PrimitiveInfo& get(const_dnnl_primitive_t primitive);
  void erase(const_dnnl_primitive_t primitive);

 private:
  std::mutex mutex_;
  std::unordered_map<const_dnnl_primitive_t, std::unique_ptr<PrimitiveInfo>> entries_;
};

// Reads a primitive's entry from its descriptor (exposed for tests).
PrimitiveInfo describe(const_dnnl_primitive_t primitive);

}  // namespace tensortier::interpose
