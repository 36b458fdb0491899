#pragma once
// Per-device allocators with current/peak byte statistics ("max memory used by tensors").
// The CPU allocator is 64-byte aligned malloc; the CUDA backend registers a stream-ordered pool.
#include <cstddef>
#include <cstdint>
#include <optional>

#include "core/device.h"
#include "core/dtype.h"

namespace hg {

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* raw_alloc(size_t nbytes, Device dev) = 0;
  virtual void raw_free(void* p, size_t nbytes, Device dev) = 0;
  // Copies bytes where at least one side is this allocator's device (the other may be the CPU).
  virtual void copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t nbytes);
  // Writes the low elem_size bytes of `pattern` (1, 2, 4 or 8) to n elements at dst on dev, without waiting
  // for the device: zeros/ones/full on a GPU then make no host copy and no sync (a CUDA graph can
  // capture them).
  virtual void fill(void* dst, Device dev, int64_t n, size_t elem_size, uint64_t pattern);
};

// Registers the allocator for a device type (the CUDA backend does this on first use).
void set_allocator(DeviceType t, Allocator* a);
Allocator* get_allocator(DeviceType t);
// A backend's one registration entry (docs/ARCHITECTURE.md, "Dispatch and registration"): it fills the
// backend's slots of every kernel table and sets its allocator. Each backend announces its own at start-up
// (cpu/register.cpp; cuda/api/loader.cpp, which loads libhalfgrad_cuda and calls its register_kernels).
void set_backend_registration(DeviceType t, void (*register_kernels)());
// The announcement as a namespace-scope object: `const BackendRegistration g{DeviceType::CPU, &f};`.
struct BackendRegistration {
  BackendRegistration(DeviceType t, void (*register_kernels)()) { set_backend_registration(t, register_kernels); }
};
// Runs device type t's registration once, at the first kernel lookup or allocation on t (a failure throws
// hg::Error naming what is missing and is retried next time). Dispatch tables call it before a lookup.
void load_backend(DeviceType t);

// Allocates through the device's allocator and records the bytes; nbytes == 0 gives nullptr.
// `dtype`: what a tensor storage holds, counted in memory::allocated(dev, dtype); nullopt for untyped
// scratch (cuDNN workspaces), which only allocated(dev) counts. Free with the same dtype.
void* device_alloc(size_t nbytes, Device dev, std::optional<DType> dtype = std::nullopt);
void device_free(void* p, size_t nbytes, Device dev, std::optional<DType> dtype = std::nullopt);

// Copies nbytes between any two devices (host<->device through the device's allocator).
void copy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, size_t nbytes);

namespace memory {
int64_t allocated(Device dev);       // bytes held by live tensors now
int64_t peak_allocated(Device dev);  // most bytes held at once since start or reset_peak
void reset_peak(Device dev);
// Bytes held now by live tensor storages allocated for dtype dt on dev (a storage counts under the dtype it
// was created with; views and reinterpretations do not move it). Sums over dt give allocated(dev) minus
// untyped scratch (a cuDNN workspace while a convolution runs).
int64_t allocated(Device dev, DType dt);
// The CPU allocator keeps freed blocks for reuse (not counted in allocated()): blocks under 1 MiB by
// power-of-two size class, larger ones rounded to 2 MiB; at most 2 GiB in all:
int64_t cached_host_bytes();
void empty_host_cache();  // returns them to the system
}  // namespace memory

}  // namespace hg
