#pragma once
// Per-device CUDA state, created on first use and never at static initialisation, so a CPU-only
// program never touches the driver. All work of a device (kernels, cuBLAS, copies, stream-ordered
// allocations and frees) is ordered on its one non-blocking stream; the host waits only when bytes
// come back to the CPU. Only files under cuda/ (and tests) include this header.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstddef>
#include <mutex>
#include <string>

namespace hg {
class Allocator;  // core/allocator.h
}

namespace hg::cuda {

struct DeviceContext {
  int device = 0;
  cudaStream_t stream = nullptr;  // non-blocking: no implicit sync with the legacy default stream
  cublasHandle_t blas = nullptr;  // bound to `stream`, own workspace, no reduced-precision split-K
  void* blas_workspace = nullptr;
  size_t blas_workspace_bytes = 0;
  cudnnHandle_t dnn = nullptr;  // created on first use by dnn_handle(), bound to `stream`
  cublasLtHandle_t lt = nullptr;  // created on first use by lt_handle(); shares blas_workspace (same stream)
  // cuBLAS and cuDNN forbid two host threads using one handle at once: every call on `blas`, `lt` or `dnn`
  // holds this lock (cuda/blas.cpp, cuda/blas_lt.cpp, cuda/dnn.cpp).
  std::mutex handle_mutex;
  bool memory_pools = false;  // cudaMallocAsync is supported (else the allocator uses cudaMalloc)
  int sm_count = 0;
  int compute_capability = 0;  // 10 * major + minor: 80 for an A100, 89 for an L4 or RTX 4090, 90 for an H100/H200
  // Zero between launches: the blocks of one launch that finishes in its last block count themselves out here,
  // and the last one resets it (the multi-tensor optimizer update advances the step counters there,
  // cuda/kernels/optim.cu; the cross-entropy forward sums the row losses, cuda/kernels/loss.cu). One counter
  // serves every such kernel because a device's launches run one after another on its stream. Made with the
  // context, so never inside a graph capture.
  unsigned* block_ticket = nullptr;
};

// The devices cudaGetDeviceCount finds (0 when it fails); cached after the first call; never throws.
// Named apart from the public hg::cuda::device_count() (cuda/api/loader.cpp, in libhalfgrad), which
// loads this backend and then asks this one.
int runtime_device_count();
// Why runtime_device_count() is 0, e.g. "cudaErrorInsufficientDriver: CUDA driver version is
// insufficient..."; empty when a device is available.
std::string runtime_unavailable_reason();

// The context of `device`, created on first use (thread-safe); makes `device` current on this thread.
// Throws hg::Error when no device is available or the index is out of range.
DeviceContext& context(int device);
// The context of the device that owns a device pointer (device 0 on a one-GPU machine, where no
// lookup is needed); makes that device current.
DeviceContext& context_for(const void* device_ptr);

// c's cuDNN handle (cuda/dnn.cpp's convolutions), created on first use and bound to c.stream. Lazily,
// because creating it loads cuDNN's sub-libraries and costs time and memory nothing else needs.
cudnnHandle_t dnn_handle(DeviceContext& c);

// c's cuBLASLt handle (cuda/blas_lt.cpp's FP8 GEMM), created on first use. Lt takes the stream per call.
cublasLtHandle_t lt_handle(DeviceContext& c);

// The allocator registered for DeviceType::CUDA (cuda/allocator.cpp).
Allocator& allocator();

// Grid size for a grid-stride loop over n elements with `threads` per block: enough blocks to fill
// the GPU a few times over, never more than the work needs.
unsigned grid_for(const DeviceContext& c, long long n, int threads);

}  // namespace hg::cuda
