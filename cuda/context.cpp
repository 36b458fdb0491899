#include "cuda/context.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>

#include "cuda/check.h"

namespace hg::cuda {
namespace {

constexpr int kMaxDevices = 16;  // as core/allocator.cpp's statistics
// cuBLAS docs: 32 MiB of workspace suits Hopper; smaller GPUs use less of it.
constexpr size_t kBlasWorkspaceBytes = size_t{32} << 20;

struct Probe {
  int count = 0;
  std::string reason;
};

const Probe& probe() {
  static const Probe p = [] {
    Probe r;
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();  // cudaErrorInsufficientDriver / NoDevice are not sticky
      r.reason = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
    } else if (n <= 0) {
      r.reason = "cudaGetDeviceCount found 0 devices";
    } else {
      r.count = std::min(n, kMaxDevices);
    }
    return r;
  }();
  return p;
}

std::atomic<DeviceContext*> g_contexts[kMaxDevices] = {};
std::mutex g_create_mutex;
thread_local int t_current_device = -1;

void make_current(int device) {
  if (t_current_device == device) return;
  HG_CUDA_CHECK(cudaSetDevice(device));
  t_current_device = device;
}

void setup_memory_pool(DeviceContext& c) {
  int supported = 0;
  HG_CUDA_CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, c.device));
  c.memory_pools = supported != 0;
  if (!c.memory_pools) return;
  cudaMemPool_t pool = nullptr;
  HG_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, c.device));
  // Keep freed memory in the pool instead of returning it to the driver at every sync: reuse.
  uint64_t threshold = UINT64_MAX;
  HG_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
}

void setup_blas(DeviceContext& c) {
  HG_CUBLAS_CHECK(cublasCreate(&c.blas));
  HG_CUBLAS_CHECK(cublasSetStream(c.blas, c.stream));
  // Split-K partial sums stay in the fp32 accumulator even when C is F16/BF16 (docs/ARCHITECTURE.md, "cuBLAS math mode").
  HG_CUBLAS_CHECK(cublasSetMathMode(
      c.blas, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
  // A user-owned workspace: reproducible results on one stream, and usable under graph capture.
  c.blas_workspace_bytes = kBlasWorkspaceBytes;
  HG_CUDA_CHECK(cudaMalloc(&c.blas_workspace, c.blas_workspace_bytes));
  HG_CUBLAS_CHECK(cublasSetWorkspace(c.blas, c.blas_workspace, c.blas_workspace_bytes));
}

// What create_context made before a later step threw: freed, so a failed first use leaks nothing.
void destroy_partial(DeviceContext* c) {
  if (c->blas) (void)cublasDestroy(c->blas);
  if (c->blas_workspace) (void)cudaFree(c->blas_workspace);
  if (c->block_ticket) (void)cudaFree(c->block_ticket);
  if (c->stream) (void)cudaStreamDestroy(c->stream);
  (void)cudaGetLastError();
  delete c;
}

// Contexts live until the process ends: destroying handles from static destructors races the
// runtime's own teardown, so (like PyTorch's handle pools) they are deliberately never freed.
DeviceContext* create_context(int device) {
  auto* c = new DeviceContext;
  c->device = device;
  try {
    HG_CUDA_CHECK(cudaSetDevice(device));
    t_current_device = device;
    HG_CUDA_CHECK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    HG_CUDA_CHECK(cudaDeviceGetAttribute(&c->sm_count, cudaDevAttrMultiProcessorCount, device));
    int major = 0, minor = 0;
    HG_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    HG_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    c->compute_capability = 10 * major + minor;
    setup_memory_pool(*c);
    setup_blas(*c);
    HG_CUDA_CHECK(cudaMalloc(&c->block_ticket, sizeof(unsigned)));
    HG_CUDA_CHECK(cudaMemsetAsync(c->block_ticket, 0, sizeof(unsigned), c->stream));
  } catch (...) {
    destroy_partial(c);
    throw;
  }
  return c;
}

}  // namespace

int runtime_device_count() { return probe().count; }
std::string runtime_unavailable_reason() { return probe().reason; }

DeviceContext& context(int device) {
  if (device >= 0 && device < kMaxDevices) {
    if (DeviceContext* c = g_contexts[device].load(std::memory_order_acquire)) {
      make_current(device);
      return *c;
    }
  }
  const int count = runtime_device_count();
  HG_CHECK(count > 0, "cuda: no CUDA device is available (", runtime_unavailable_reason(), "); use Device::cpu()");
  HG_CHECK(device >= 0 && device < count, "cuda: device index ", device, " is out of range: ", count,
           " device(s) present; use Device::cuda(i) with 0 <= i < ", count);
  std::lock_guard<std::mutex> lock(g_create_mutex);
  DeviceContext* c = g_contexts[device].load(std::memory_order_acquire);
  if (c == nullptr) {
    c = create_context(device);
    g_contexts[device].store(c, std::memory_order_release);
  }
  make_current(device);
  return *c;
}

DeviceContext& context_for(const void* device_ptr) {
  if (runtime_device_count() <= 1 || device_ptr == nullptr) return context(0);
  cudaPointerAttributes attr{};
  HG_CUDA_CHECK(cudaPointerGetAttributes(&attr, device_ptr));
  HG_CHECK(attr.type == cudaMemoryTypeDevice, "cuda: a kernel was given a pointer that is not device memory; "
           "move the tensor with .to(Device::cuda())");
  return context(attr.device);
}

cublasLtHandle_t lt_handle(DeviceContext& c) {
  std::lock_guard<std::mutex> lock(g_create_mutex);
  if (c.lt == nullptr) {
    make_current(c.device);
    cublasLtHandle_t h = nullptr;
    HG_CUBLAS_CHECK(cublasLtCreate(&h));
    c.lt = h;
  }
  return c.lt;
}

cudnnHandle_t dnn_handle(DeviceContext& c) {
  std::lock_guard<std::mutex> lock(g_create_mutex);
  if (c.dnn == nullptr) {
    make_current(c.device);
    cudnnHandle_t h = nullptr;
    cudnnStatus_t st = cudnnCreate(&h);
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnSetStream(h, c.stream);
    if (st != CUDNN_STATUS_SUCCESS) {
      char why[1024] = {};
      cudnnGetLastErrorString(why, sizeof why);
      HG_FAIL("cudnn: creating the handle of cuda:", c.device, " failed: ", cudnnGetErrorString(st), " (", why,
              "); cuDNN runtime version ", cudnnGetVersion(), ", check that libcudnn 9 matches the CUDA runtime");
    }
    c.dnn = h;
  }
  return c.dnn;
}

unsigned grid_for(const DeviceContext& c, long long n, int threads) {
  const long long needed = (n + threads - 1) / threads;
  const long long cap = static_cast<long long>(std::max(c.sm_count, 1)) * 32;
  return static_cast<unsigned>(std::clamp(needed, 1LL, cap));
}

}  // namespace hg::cuda
