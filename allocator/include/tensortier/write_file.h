// write_file_replacing: a file written whole or not at all. Every file the project writes for
// people and tools (profiles, traces, reports, bench results, the DRAM reference) goes through it.
// Thread-safe (a temporary name per process, thread and call).
#pragma once

#include <string>
#include <string_view>

#include "tensortier/status.h"

namespace tensortier {

// What `path` names decides how `text` is written (docs/RELIABILITY.md, "Outputs"):
//
//   path names             | written
//   -----------------------+-------------------------------------------------------------------
//   nothing, a regular file| to a new temporary file beside it, flushed to disk, then renamed
//                          | over it: a failed write (a full disk, a missing directory) or an
//                          | interruption leaves a file already there as it was
//   a character device,    | in place, as a shell's `>` would (/dev/null, /dev/stdout, a FIFO a
//   a FIFO                 | reader holds open); a FIFO no process reads is refused, not waited on
//   a symbolic link        | refused, naming its target: no output follows a link (one planted in
//                          | a shared directory would aim a root-run tool at any file)
//   anything else          | refused (a directory, a block device, a socket)
//
// `what` names the file in errors ("the profile"). Errors (kInvalidArgument for a path refused,
// kUnavailable for a write that failed) name the path, the cause and what to do.
Status write_file_replacing(const std::string& path, std::string_view text, std::string_view what);

// The refusal write_file_replacing would give `path` now (a link, a directory, a block device, a
// socket), or ok: for tools to check an output before a run whose end writes it.
Status output_path_refused(const std::string& path, std::string_view what);

}  // namespace tensortier
