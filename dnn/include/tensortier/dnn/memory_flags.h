// The dnn engine's memory flags (dnn::MemoryOptions) on a program's command line (CLI11),
// registered in one place for tensortier-train and bench_training: --in-place, --fuse and
// --recompute, each on by default and turned off by its --no- form. For programs that link
// tensortier_dnn and CLI11 (dnn's, not cli/'s: cli/ sits below dnn/ and knows nothing of it).
//
// Thread safety: call while building the command line, before parsing.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "tensortier/dnn/engine.h"

namespace tensortier::dnn {

// `what` says whom the flags apply to in this program ("every mode; "), or nothing.
inline void add_memory_flags(CLI::App& app, MemoryOptions& options, const std::string& what = "") {
  app.add_flag("--in-place,!--no-in-place", options.in_place,
               "ReLUs and residual adds write over their first input where nothing else reads it (less "
               "memory, same results; " +
                   what + "default on)");
  app.add_flag(
      "--fuse,!--no-fuse", options.fuse_batch_norm_relu,
      "Batch norms apply the ReLU after them in one pass (oneDNN fuse_norm_relu; " + what + "default on)");
  app.add_flag("--recompute,!--no-recompute", options.recompute_batch_norm,
               "Batch-norm outputs freed after forward and computed again for the backward that reads them "
               "(less memory, an elementwise pass more; " +
                   what + "default on)");
}

}  // namespace tensortier::dnn
