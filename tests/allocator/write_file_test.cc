// write_file_replacing: what each kind of path gets (write_file.h's table), and that nothing a path
// names is lost or replaced by what it should not be.
#include "tensortier/write_file.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "test_util.h"

namespace tensortier {
namespace {

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

mode_t kind_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & S_IFMT;
}

TEST(WriteFile, ARegularFileIsReplacedWholeAndANewOneMade) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/out.json";
  ASSERT_TRUE(write_file_replacing(path, "first", "the test").is_ok());
  EXPECT_EQ(read(path), "first");
  ASSERT_TRUE(write_file_replacing(path, "second", "the test").is_ok());
  EXPECT_EQ(read(path), "second");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1) << "no temporary left";
}

// A character device for the test: the null or the full device made in `dir` where this process
// may make device nodes (root: a regression then replaces the test's node, never the system's),
// else the system's (which a process that may not make nodes cannot replace either).
std::string char_device(const testing::TempDir& dir, const char* name, unsigned minor) {
  const std::string path = dir.path() + "/" + name;
  if (mknod(path.c_str(), S_IFCHR | 0666, makedev(1, minor)) == 0) return path;
  return std::string("/dev/") + name;
}

TEST(WriteFile, ACharacterDeviceIsWrittenInPlaceNeverReplaced) {
  // Run as root, "--trace /dev/null" replaced /dev/null with a regular file.
  testing::TempDir dir;
  const std::string null = char_device(dir, "null", 3), full = char_device(dir, "full", 7);
  ASSERT_TRUE(write_file_replacing(null, "trace", "the trace").is_ok());
  EXPECT_EQ(kind_of(null), static_cast<mode_t>(S_IFCHR));
  const Status s = write_file_replacing(full, "trace", "the trace");
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find(full), std::string::npos) << s.message();
  EXPECT_EQ(kind_of(full), static_cast<mode_t>(S_IFCHR));
}

TEST(WriteFile, AFifoIsWrittenToItsReaderOrRefusedWithoutOne) {
  testing::TempDir dir;
  const std::string fifo = dir.path() + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const Status nobody = write_file_replacing(fifo, "profile", "the profile");  // no reader: refused at once
  EXPECT_EQ(nobody.code(), StatusCode::kUnavailable);
  EXPECT_NE(nobody.message().find("no process reads"), std::string::npos) << nobody.message();
  std::string got;
  std::thread reader([&] { got = read(fifo); });
  Status written;
  for (int attempt = 0; attempt < 2000; ++attempt) {  // until the reader has opened its end
    written = write_file_replacing(fifo, "profile", "the profile");
    if (written.is_ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  reader.join();
  EXPECT_TRUE(written.is_ok()) << written.message();
  EXPECT_EQ(got, "profile");
  EXPECT_EQ(kind_of(fifo), static_cast<mode_t>(S_IFIFO));
}

TEST(WriteFile, ASymbolicLinkIsRefusedAndWhatItNamesUntouched) {
  testing::TempDir dir;
  const std::string target = dir.path() + "/precious", link = dir.path() + "/trace.json";
  std::ofstream(target) << "keep me";
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  const Status s = write_file_replacing(link, "trace", "the trace");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("symbolic link"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(target), std::string::npos) << s.message();
  EXPECT_EQ(read(target), "keep me");
  EXPECT_EQ(kind_of(link), static_cast<mode_t>(S_IFLNK));
  // A dangling one too: it would have been replaced by a regular file.
  const std::string dangling = dir.path() + "/dangling";
  ASSERT_EQ(symlink((dir.path() + "/nothing").c_str(), dangling.c_str()), 0);
  EXPECT_EQ(write_file_replacing(dangling, "x", "the trace").code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/nothing"));
}

TEST(WriteFile, DirectoriesAndSocketsAreRefused) {
  testing::TempDir dir;
  EXPECT_EQ(write_file_replacing(dir.path(), "x", "the report").code(), StatusCode::kInvalidArgument);
  const std::string path = dir.path() + "/socket";
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  ASSERT_LT(path.size(), sizeof address.sun_path);
  std::copy(path.begin(), path.end(), address.sun_path);
  ASSERT_EQ(bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address), 0);
  const Status s = write_file_replacing(path, "x", "the report");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("socket"), std::string::npos) << s.message();
  EXPECT_EQ(kind_of(path), static_cast<mode_t>(S_IFSOCK));
  close(fd);
}

TEST(WriteFile, AFailedWriteLeavesTheFileThereAsItWas) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/missing-dir/out.json";
  const Status s = write_file_replacing(path, "x", "the profile");
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("directory exists"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace tensortier
