// core/atomic_file.h over POSIX open/write/fsync/rename.
#include "core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace hg {
namespace {

// Makes the rename itself durable (POSIX: a rename is recorded in the directory).
void fsync_directory(const char* op, const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  HG_CHECK(fd >= 0, op, ": wrote '", path, "' but cannot open its directory '", dir, "' to sync it: ",
           std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  HG_CHECK(rc == 0, op, ": wrote '", path, "' but syncing its directory failed: ", std::strerror(err),
           "; the new file may not survive a crash");
}

}  // namespace

AtomicFile::AtomicFile(const char* op, std::string target, int64_t fail_after)
    : op_(op), target_(std::move(target)), fail_after_(fail_after) {
  HG_CHECK(!target_.empty(), op_, ": the path is empty; pass a file name");
  tmp_ = target_ + ".tmp." + std::to_string(::getpid());
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
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
