// The CUDA allocator: CUDA's stream-ordered pool (cudaMallocAsync/cudaFreeAsync on the device's
// stream, release threshold set to "never" in context.cpp so freed blocks are reused, cuda-notes §6
// stage 1). Byte statistics are kept by core's device_alloc/device_free around these calls.
#include <cstdio>
#include <exception>

#include "core/allocator.h"
#include "cuda/check.h"
#include "cuda/context.h"
#include "cuda/kernels/kernels.h"

namespace hg::cuda {
namespace {

void* pool_alloc(DeviceContext& c, size_t nbytes) {
  void* p = nullptr;
  cudaError_t e = c.memory_pools ? cudaMallocAsync(&p, nbytes, c.stream) : cudaMalloc(&p, nbytes);
  if (e == cudaErrorMemoryAllocation) {
    // Out of memory: let pending frees complete, hand cached blocks back to the driver, retry once.
    (void)cudaGetLastError();
    HG_CUDA_CHECK(cudaStreamSynchronize(c.stream));
    if (c.memory_pools) {
      cudaMemPool_t pool = nullptr;
      HG_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, c.device));
      HG_CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
    }
    e = c.memory_pools ? cudaMallocAsync(&p, nbytes, c.stream) : cudaMalloc(&p, nbytes);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      const Device dev = Device::cuda(c.device);
      size_t free_b = 0, total_b = 0;
      (void)cudaMemGetInfo(&free_b, &total_b);
      HG_FAIL("cuda: out of memory allocating ", nbytes, " bytes on ", dev, " (tensors hold ", memory::allocated(dev),
              " bytes, peak ", memory::peak_allocated(dev), "; the device has ", free_b, " of ", total_b,
              " bytes free); use smaller batches or free tensors");
    }
  }
  HG_CUDA_CHECK(e);
  return p;
}

class CudaAllocator final : public Allocator {
 public:
  void* raw_alloc(size_t nbytes, Device dev) override { return pool_alloc(context(dev.index), nbytes); }

  // Called from Storage's destructor: must not throw. The free is ordered after every kernel already
  // queued on the stream, so no synchronisation is needed.
  void raw_free(void* p, size_t, Device dev) override {
    try {
      DeviceContext& c = context(dev.index);
      if (c.memory_pools) HG_CUDA_WARN(cudaFreeAsync(p, c.stream));
      else HG_CUDA_WARN(cudaFree(p));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "halfgrad: warning: freeing %p on %s failed: %s\n", p, dev.str().c_str(), e.what());
    }
  }

  void copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t nbytes) override {
    if (dst_dev.is_cuda() && src_dev.is_cuda() && dst_dev.index != src_dev.index) {
      // Both streams' queued work must be finished: the destination's stream runs the copy.
      HG_CUDA_CHECK(cudaStreamSynchronize(context(src_dev.index).stream));
      DeviceContext& d = context(dst_dev.index);
      HG_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_dev.index, src, src_dev.index, nbytes, d.stream));
      HG_CUDA_CHECK(cudaStreamSynchronize(d.stream));
      return;
    }
    const Device dev = dst_dev.is_cuda() ? dst_dev : src_dev;
    DeviceContext& c = context(dev.index);
    const cudaMemcpyKind kind = src_dev.is_cpu()   ? cudaMemcpyHostToDevice
                                : dst_dev.is_cpu() ? cudaMemcpyDeviceToHost
                                                   : cudaMemcpyDeviceToDevice;
    HG_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, kind, c.stream));
    // Host memory is pageable and may be freed or read as soon as we return: wait. A copy within one
    // device is ordered on its stream like any kernel, so it needs no wait.
    if (kind != cudaMemcpyDeviceToDevice) HG_CUDA_CHECK(cudaStreamSynchronize(c.stream));
  }

  void fill(void* dst, Device, int64_t n, size_t elem_size, uint64_t pattern) override {
    fill_pattern(dst, n, elem_size, pattern);
  }
};

}  // namespace

// Never destroyed: a GPU tensor held by a static object may be freed after every static destructor.
Allocator& allocator() {
  static CudaAllocator* a = new CudaAllocator;
  return *a;
}

}  // namespace hg::cuda
