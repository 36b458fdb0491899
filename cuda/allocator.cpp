// The CUDA allocator: CUDA's stream-ordered pool (cudaMallocAsync/cudaFreeAsync on the device's
// stream, release threshold set to "never" in context.cpp so freed blocks are reused). Byte statistics
// are kept by core's device_alloc/device_free around these calls. Uploads go through pinned staging
// memory (UploadRing), so the host does not wait for the device to copy a batch or a scalar.
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <vector>

#include "core/allocator.h"
#include "cuda/check.h"
#include "cuda/context.h"
#include "cuda/counters.h"
#include "cuda/kernels/kernels.h"

namespace hg::cuda {
namespace {

void* pool_alloc(DeviceContext& c, size_t nbytes) {
  void* p = nullptr;
  cudaError_t e = c.memory_pools ? cudaMallocAsync(&p, nbytes, c.stream) : cudaMalloc(&p, nbytes);
  if (e == cudaErrorMemoryAllocation) {
    // Out of memory: let pending frees complete, hand cached blocks back to the driver, retry once.
    (void)cudaGetLastError();
    detail::count_sync();
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

// Host-to-device copies without waiting for the stream. From pageable memory the driver may wait for
// the stream before it copies, and the host buffer may be freed the moment copy() returns, so copy()
// used to synchronise after every upload: each batch and each scalar waited for all queued kernels.
// Here the bytes go first into a ring of pinned memory (a host memcpy), the device copies them from
// there in stream order, and an event recorded after that copy tells when the ring's bytes may be
// reused. The host waits only when the ring wraps onto a copy the device has not done yet.
class UploadRing {
 public:
  // False when the copy cannot take this path (larger than kMaxCopy, no pinned memory): the caller
  // copies the synchronous way.
  bool upload(DeviceContext& c, void* dst, const void* src, size_t n) {
    if (n > kMaxCopy) return false;
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_) return false;
    if (base_ == nullptr) {
      if (cudaHostAlloc(reinterpret_cast<void**>(&base_), kBytes, cudaHostAllocDefault) != cudaSuccess) {
        (void)cudaGetLastError();
        failed_ = true;  // no pinned memory to be had: every upload synchronises, as before
        return false;
      }
    }
    while (!in_flight_.empty()) {
      const cudaError_t q = cudaEventQuery(in_flight_.front().done);
      if (q == cudaSuccess) {
        retire_front();
        continue;
      }
      // "not ready" is no error, but the runtime may leave it as the last error, where a later launch
      // check would find it (PyTorch's allocator clears it the same way); anything else is reported
      if (q == cudaErrorNotReady && cudaPeekAtLastError() == cudaErrorNotReady) (void)cudaGetLastError();
      if (q != cudaErrorNotReady) HG_CUDA_CHECK(q);
      break;
    }
    const size_t len = (n + kAlign - 1) / kAlign * kAlign;
    const size_t begin = head_ + len <= kBytes ? head_ : 0, end = begin + len;
    // Copies complete in stream order: waiting for the last one that reads [begin, end) waits for all.
    size_t overlapping = 0;
    for (size_t k = 0; k < in_flight_.size(); ++k)
      if (in_flight_[k].begin < end && begin < in_flight_[k].end) overlapping = k + 1;
    if (overlapping > 0) {
      detail::count_sync();
      HG_CUDA_CHECK(cudaEventSynchronize(in_flight_[overlapping - 1].done));
      while (overlapping-- > 0) retire_front();
    }
    std::memcpy(base_ + begin, src, n);
    detail::count_copy();
    HG_CUDA_CHECK(cudaMemcpyAsync(dst, base_ + begin, n, cudaMemcpyHostToDevice, c.stream));
    cudaEvent_t done = nullptr;
    if (spare_.empty()) {
      HG_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    } else {
      done = spare_.back();
      spare_.pop_back();
    }
    HG_CUDA_CHECK(cudaEventRecord(done, c.stream));
    in_flight_.push_back({begin, end, done});
    head_ = end;
    return true;
  }

 private:
  static constexpr size_t kBytes = size_t{16} << 20, kMaxCopy = size_t{4} << 20, kAlign = 256;
  struct Use {
    size_t begin, end;
    cudaEvent_t done;
  };
  void retire_front() {
    spare_.push_back(in_flight_.front().done);
    in_flight_.pop_front();
  }
  std::mutex mu_;
  char* base_ = nullptr;
  bool failed_ = false;
  size_t head_ = 0;
  std::deque<Use> in_flight_;
  std::vector<cudaEvent_t> spare_;
};

// One ring per device, never destroyed (uploads may happen during static destruction).
UploadRing& upload_ring(int device) {
  static std::mutex m;
  static auto* rings = new std::map<int, UploadRing>;
  std::lock_guard<std::mutex> lock(m);
  return (*rings)[device];
}

bool capturing(const DeviceContext& c) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  HG_CUDA_CHECK(cudaStreamIsCapturing(c.stream, &status));
  return status != cudaStreamCaptureStatusNone;
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
      detail::count_sync();
      HG_CUDA_CHECK(cudaStreamSynchronize(context(src_dev.index).stream));
      DeviceContext& d = context(dst_dev.index);
      detail::count_copy();
      HG_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_dev.index, src, src_dev.index, nbytes, d.stream));
      detail::count_sync();
      HG_CUDA_CHECK(cudaStreamSynchronize(d.stream));
      return;
    }
    const Device dev = dst_dev.is_cuda() ? dst_dev : src_dev;
    DeviceContext& c = context(dev.index);
    // (a staged upload inside a graph capture would be replayed from bytes overwritten since: an upload
    // there takes the path below, which the driver refuses with a clear error)
    if (src_dev.is_cpu() && !capturing(c) && upload_ring(dev.index).upload(c, dst, src, nbytes)) return;
    const cudaMemcpyKind kind = src_dev.is_cpu()   ? cudaMemcpyHostToDevice
                                : dst_dev.is_cpu() ? cudaMemcpyDeviceToHost
                                                   : cudaMemcpyDeviceToDevice;
    detail::count_copy();
    HG_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, kind, c.stream));
    // Host memory is pageable and may be freed or read as soon as we return: wait (a download must
    // anyway). A copy within one device is ordered on its stream like any kernel, so it needs no wait.
    if (kind != cudaMemcpyDeviceToDevice) {
      detail::count_sync();
      HG_CUDA_CHECK(cudaStreamSynchronize(c.stream));
    }
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
