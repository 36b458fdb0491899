// core/atomic_file.h over POSIX open/write/fsync/rename.
#include "core/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace hg {
namespace {

std::string dir_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

// Makes the rename itself durable (POSIX: a rename is recorded in the directory).
void fsync_directory(const char* op, const std::string& path) {
  const std::string dir = dir_of(path);
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  HG_CHECK(fd >= 0, op, ": wrote '", path, "' but cannot open its directory '", dir, "' to sync it: ",
           std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  HG_CHECK(rc == 0, op, ": wrote '", path, "' but syncing its directory failed: ", std::strerror(err),
           "; the new file may not survive a crash");
}

const char* kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

constexpr const char* kTmpMark = ".hg-tmp.";

// Temp files of writers that no longer run, in dir: "<name>.hg-tmp.<pid>.<n>" whose pid is gone
// (kill(pid, 0) fails with ESRCH). A live writer's files, and anything else, stay.
void remove_stale_temps(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  const long me = static_cast<long>(::getpid());
  while (const dirent* e = ::readdir(d)) {
    const char* mark = std::strstr(e->d_name, kTmpMark);
    if (!mark) continue;
    char* end = nullptr;
    const long pid = std::strtol(mark + std::strlen(kTmpMark), &end, 10);
    if (pid <= 0 || pid == me || !end || *end != '.') continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to judge
    const std::string p = dir + "/" + e->d_name;
    struct stat st {};
    if (::lstat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode)) ::unlink(p.c_str());
  }
  ::closedir(d);
}

}  // namespace

std::string atomic_write_target(const char* op, const std::string& path) {
  HG_CHECK(!path.empty(), op, ": the path is empty; pass a file name");
  std::string p = path;
  for (int links = 0;; ++links) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0) {
      HG_CHECK(errno == ENOENT, op, ": cannot inspect '", p, "': ", std::strerror(errno));
      return p;  // a new file
    }
    if (S_ISREG(st.st_mode)) return p;
    HG_CHECK(S_ISLNK(st.st_mode), op, ": '", p, "' is ", kind_of(st.st_mode),
             S_ISDIR(st.st_mode) ? "; pass a file name inside it" : "; halfgrad only replaces regular files: pass a file path",
             p == path ? "" : " (reached through the symlink '" + path + "')");
    HG_CHECK(links < 40, op, ": '", path, "' leads through more than 40 symlinks; pass the file's own path");
    std::string buf(4096, '\0');
    const ssize_t n = ::readlink(p.c_str(), buf.data(), buf.size());
    HG_CHECK(n >= 0 && static_cast<size_t>(n) < buf.size(), op, ": cannot read the symlink '", p, "': ",
             n < 0 ? std::strerror(errno) : "target too long");
    buf.resize(static_cast<size_t>(n));
    p = buf.front() == '/' ? buf : dir_of(p) + "/" + buf;
  }
}

void require_regular_file(const char* op, const std::string& path) {
  struct stat st {};
  HG_CHECK(::stat(path.c_str(), &st) == 0, op, ": cannot open '", path, "': ", std::strerror(errno), "; check the path");
  HG_CHECK(S_ISREG(st.st_mode), op, ": '", path, "' is ", kind_of(st.st_mode),
           "; halfgrad reads only regular files: pass the path of the file itself");
}

void check_writable(const char* op, const std::string& path) {
  const std::string target = atomic_write_target(op, path);
  AtomicFile probe(op, target);  // creates the temp file next to it; the destructor removes it
}

AtomicFile::AtomicFile(const char* op, std::string target, int64_t fail_after)
    : op_(op), target_(atomic_write_target(op, target)), fail_after_(fail_after) {
  static std::atomic<int64_t> serial{0};
  const std::string dir = dir_of(target_);
  remove_stale_temps(dir);
  tmp_ = target_ + kTmpMark + std::to_string(::getpid()) + "." + std::to_string(serial++);
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0 && errno == EEXIST) {  // left by an earlier process that had this pid: not a live writer's
    ::unlink(tmp_.c_str());
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  }
  HG_CHECK(fd_ >= 0, op_, ": cannot create '", tmp_, "': ", std::strerror(errno),
           "; check that the directory exists and is writable");
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void* data, size_t n) {
  const auto* p = static_cast<const char*>(data);
  if (fail_after_ >= 0 && written_ + static_cast<int64_t>(n) > fail_after_) {
    write_raw(p, static_cast<size_t>(fail_after_ - written_));
    fail("write", ENOSPC);
  }
  write_raw(p, n);
}

void AtomicFile::commit() {
  if (::fsync(fd_) != 0) fail("fsync", errno);
  const int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) fail("close", errno);
  if (::rename(tmp_.c_str(), target_.c_str()) != 0) fail("rename over '" + target_ + "'", errno);
  committed_ = true;
  fsync_directory(op_, target_);
}

void AtomicFile::write_raw(const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) fail("write", errno);
    p += w;
    n -= static_cast<size_t>(w);
    written_ += w;
  }
}

void AtomicFile::fail(const std::string& what, int err) const {
  HG_FAIL(op_, ": cannot ", what, " '", tmp_, "' after ", written_, " bytes: ", std::strerror(err),
          "; the previous file (if any) is unchanged; free disk space or choose another path");
}

void write_file_atomic(const char* op, const std::string& path, const std::string& bytes) {
  AtomicFile f(op, path);
  f.write(bytes.data(), bytes.size());
  f.commit();
}

}  // namespace hg
