// write_file_replacing (see write_file.h). Written on the POSIX calls, not std::filesystem or
// stdio: the checks must not follow links (lstat, O_NOFOLLOW) and the temporary file must be new
// (O_EXCL), which neither library can say.
#include "tensortier/write_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <system_error>
#include <thread>

#include <fmt/format.h>

namespace tensortier {
namespace {

std::string errno_text(int error) {
  return std::generic_category().message(error);
}

// All of `text` to `fd`, through short writes and signals; errno on failure.
bool write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    text.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

// What kind of thing `st` is, for a refusal.
const char* kind_of(const struct stat& st) {
  if (S_ISDIR(st.st_mode)) return "a directory";
  if (S_ISBLK(st.st_mode)) return "a block device";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  return "not a regular file";
}

// A character device or a FIFO: written where it is, as a shell's redirection would.
Status write_in_place(const std::string& path, std::string_view text, std::string_view what) {
  // O_NONBLOCK: a FIFO no process reads fails at once (ENXIO) instead of waiting for a reader.
  const int fd = ::open(path.c_str(), O_WRONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int error = errno;
    if (error == ENXIO)
      return unavailable(
          fmt::format("cannot write {} to '{}': it is a FIFO that no process reads; start its "
                      "reader first, or name a file",
                      what, path));
    return unavailable(fmt::format("cannot write {} to '{}': {}", what, path, errno_text(error)));
  }
  struct stat st {};
  bool ok = ::fstat(fd, &st) == 0 && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode));
  const int flags = ::fcntl(fd, F_GETFL);
  ok = ok && flags >= 0 && ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == 0;
  const bool written = ok && write_all(fd, text);
  const int error = errno;
  ::close(fd);
  if (!ok)
    return invalid_argument(fmt::format("cannot write {} to '{}': it changed while opened", what, path));
  if (!written)
    return unavailable(fmt::format("writing {} to '{}' failed: {}", what, path, errno_text(error)));
  return Status::ok();
}

// A new file beside `path` (never one that exists, never through a link), its name in `tmp`.
int open_temporary(const std::string& path, std::string& tmp) {
  static std::atomic<std::uint64_t> calls{0};
  for (int attempt = 0; attempt < 100; ++attempt) {
    tmp = fmt::format("{}.{}.{}.{}.tmp", path, getpid(),
                      std::hash<std::thread::id>{}(std::this_thread::get_id()),
                      calls.fetch_add(1, std::memory_order_relaxed));
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  return -1;
}

}  // namespace

Status output_path_refused(const std::string& path, std::string_view what) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode) || S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode))
    return Status::ok();
  if (S_ISLNK(st.st_mode)) {
    std::error_code ec;
    const std::filesystem::path target = std::filesystem::read_symlink(path, ec);
    return invalid_argument(fmt::format(
        "cannot write {} to '{}': it is a symbolic link (to '{}'), and no output follows one; name the file "
        "itself",
        what, path, ec ? std::string("?") : target.string()));
  }
  return invalid_argument(
      fmt::format("cannot write {} to '{}': it is {}; name a file", what, path, kind_of(st)));
}

Status write_file_replacing(const std::string& path, std::string_view text, std::string_view what) {
  TENSORTIER_RETURN_IF_ERROR(output_path_refused(path, what));
  if (struct stat st{}; ::lstat(path.c_str(), &st) == 0 && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)))
    return write_in_place(path, text, what);
  std::string tmp;
  const int fd = open_temporary(path, tmp);
  if (fd < 0) {
    return unavailable(fmt::format("cannot write {} to '{}': {}; check the directory exists and is writable",
                                   what, path, errno_text(errno)));
  }
  const bool written = write_all(fd, text);
  const int write_errno = errno;
  const bool flushed = ::fsync(fd) == 0;
  const int flush_errno = errno;
  const bool closed = ::close(fd) == 0;
  if (!written || !flushed || !closed) {
    std::remove(tmp.c_str());
    return unavailable(fmt::format("writing {} to '{}' failed: {}; a file there is left as it was", what,
                                   path, errno_text(!written ? write_errno : flush_errno)));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int rename_errno = errno;
    std::remove(tmp.c_str());
    return unavailable(fmt::format("writing {} to '{}' failed: {}; a file there is left as it was", what,
                                   path, errno_text(rename_errno)));
  }
  return Status::ok();
}

}  // namespace tensortier
