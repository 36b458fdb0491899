#pragma once
// Scratch memory for one launch sequence: bytes from the device allocator (core/allocator.h, so the
// memory statistics count it), freed when the object goes out of scope. The free is stream-ordered
// (cudaFreeAsync on the device's one stream, or cudaFree, which waits), so it runs after the work
// queued before it: a kernel launched with get() may still be running when the destructor returns.
#include <cstddef>

#include "core/allocator.h"
#include "core/device.h"

namespace hg::cuda {

class Workspace {
 public:
  Workspace(size_t bytes, Device dev) : bytes_(bytes), dev_(dev), p_(device_alloc(bytes, dev)) {}
  ~Workspace() { device_free(p_, bytes_, dev_); }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  void* get() const { return p_; }

 private:
  size_t bytes_;
  Device dev_;
  void* p_;
};

}  // namespace hg::cuda
