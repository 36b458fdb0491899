#pragma once
// Writing a file so that a failure never destroys the previous one: the bytes go to
// "<target>.hg-tmp.<pid>.<n>", which is fsynced and renamed over the target, and the rename is made
// durable by syncing the directory. Until commit() the target is untouched; a temp file left by a
// failure is removed, and one left by a writer that was killed is removed by the next AtomicFile in
// that directory (only when its pid no longer runs). Only a regular file is ever replaced: a path
// that is a device, FIFO, socket or directory is refused before anything is written, and a symlink is
// followed (as editors do: the file it leads to is replaced, the link stays). Used by safetensors
// checkpoints and the inspectors' CSV/JSON reports.
//   AtomicFile f("save_safetensors", path);
//   f.write(header.data(), header.size());
//   f.commit();
#include <cstddef>
#include <cstdint>
#include <string>

namespace hg {

class AtomicFile {
 public:
  // op names the caller in errors. fail_after >= 0 makes write() fail with ENOSPC once that many bytes
  // were written (tests simulate a full disk with it).
  AtomicFile(const char* op, std::string target, int64_t fail_after = -1);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n);
  // fsync, close, rename over the target, sync the directory.
  void commit();

 private:
  void write_raw(const char* p, size_t n);
  [[noreturn]] void fail(const std::string& what, int err) const;

  const char* op_;
  std::string target_, tmp_;  // target_: the regular file replaced (symlinks followed)
  int fd_ = -1;
  int64_t written_ = 0, fail_after_ = -1;
  bool committed_ = false;
};

// The whole text at once.
void write_file_atomic(const char* op, const std::string& path, const std::string& bytes);

// The file a write to `path` replaces: path itself, or the end of its chain of symlinks (at most 40).
// Throws an hg::Error naming op when that exists and is not a regular file.
std::string atomic_write_target(const char* op, const std::string& path);

// Readers call this before opening: throws an hg::Error naming op when path is missing or is not a
// regular file once symlinks are followed (a FIFO would block the reader for ever, a device would
// never end, a directory cannot be read).
void require_regular_file(const char* op, const std::string& path);

// Before long work that ends in a write (a training run with --save): throws now, with the reason,
// when `path` could not be written then (not a regular file, no such directory, no permission); it
// creates and removes a temporary file next to the target and leaves the target untouched.
void check_writable(const char* op, const std::string& path);

}  // namespace hg
