// write_file_replacing (see write_file.h).
#include "tensortier/write_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <system_error>
#include <thread>

#include <fmt/format.h>

namespace tensortier {

Status write_file_replacing(const std::string& path, std::string_view text, std::string_view what) {
  if (std::error_code ec; std::filesystem::is_directory(path, ec)) {
    return invalid_argument(
        fmt::format("cannot write {} to '{}': it is a directory; name a file", what, path));
  }
  const std::string tmp =
      fmt::format("{}.{}.{}.tmp", path, getpid(), std::hash<std::thread::id>{}(std::this_thread::get_id()));
  std::FILE* out = std::fopen(tmp.c_str(), "w");
  if (out == nullptr) {
    return unavailable(fmt::format("cannot write {} to '{}': {}; check the directory exists and is writable",
                                   what, path, std::generic_category().message(errno)));
  }
  const bool written = std::fwrite(text.data(), 1, text.size(), out) == text.size();
  const int write_errno = errno;
  const bool flushed = std::fflush(out) == 0 && fsync(fileno(out)) == 0;
  const int flush_errno = errno;
  const bool closed = std::fclose(out) == 0;
  if (!written || !flushed || !closed) {
    std::remove(tmp.c_str());
    return unavailable(fmt::format("writing {} to '{}' failed: {}; a file there is left as it was", what,
                                   path,
                                   std::generic_category().message(!written ? write_errno : flush_errno)));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int rename_errno = errno;
    std::remove(tmp.c_str());
    return unavailable(fmt::format("writing {} to '{}' failed: {}; a file there is left as it was", what,
                                   path, std::generic_category().message(rename_errno)));
  }
  return Status::ok();
}

}  // namespace tensortier
