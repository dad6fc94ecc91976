// write_file_replacing: a file written whole or not at all. Every file the project writes for
// people and tools (profiles, traces, bench results) goes through it.
// Thread-safe (a temporary name per process and thread).
#pragma once

#include <string>
#include <string_view>

#include "tensortier/status.h"

namespace tensortier {

// Writes `text` to a temporary file beside `path`, flushed to disk, then renames it over `path`:
// a failed write (a full disk, a missing directory) or an interruption leaves a file already there
// as it was, and a reader never sees half of one. `what` names the file in errors ("the profile").
// Errors (kUnavailable, kInvalidArgument for a directory) name the path, the cause and what to do.
Status write_file_replacing(const std::string& path, std::string_view text, std::string_view what);

}  // namespace tensortier
