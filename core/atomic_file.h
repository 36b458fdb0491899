#pragma once
// Writing a file so that a failure never destroys the previous one: the bytes go to
// "<target>.tmp.<pid>", which is fsynced and renamed over the target, and the rename is made durable
// by syncing the directory. Until commit() the target is untouched; a temp file left by a failure is
// removed. Used by safetensors checkpoints and the inspectors' CSV/JSON reports.
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
  std::string target_, tmp_;
  int fd_ = -1;
  int64_t written_ = 0, fail_after_ = -1;
  bool committed_ = false;
};

// The whole text at once.
void write_file_atomic(const char* op, const std::string& path, const std::string& bytes);

}  // namespace hg
