// The CUDA backend's entry point: libhalfgrad loads this library (cuda/api/loader.cpp) the first time a
// CUDA device is asked for and takes BackendApi from hg_cuda_backend_api(); core's load_backend then calls
// register_kernels once, when a CUDA tensor is first made or reaches a table, so CPU-only programs never
// load the driver. register_kernels is the peer of cpu/register.cpp's: one line per kernel family
// (cuda/register.h).
#include <cudnn.h>

#include <string>

#include "core/allocator.h"
#include "core/error.h"
#include "cuda/api/backend.h"
#include "cuda/blas.h"
#include "cuda/context.h"
#include "cuda/register.h"

namespace hg::cuda {

void stream_synchronize(int device);  // cuda/graph.cpp: cuda/graph.h's work
void* graph_capture(int device, const std::function<void()>& body);
void graph_launch(void* exec, int device);
void graph_destroy(void* exec);
const hg::dist::DeviceBackendApi* nccl_api();  // cuda/nccl.cpp

namespace {

void register_kernels() {
  HG_CHECK(runtime_device_count() > 0, "cuda: no CUDA device is available (", runtime_unavailable_reason(),
           "); use Device::cpu()");
  set_allocator(DeviceType::CUDA, &allocator());
  HG_KERNEL_FAMILIES(HG_CALL_KERNEL_FAMILY)
  register_fp8_gemm();
  register_gemm_epilogue();
}

// CUDA encodes versions as 1000 * major + 10 * minor (13000 = 13.0); cuDNN 9 as 10000 * major + 100 * minor
// + patch. The driver's is the newest CUDA version it supports, 0 when no driver is installed.
std::string cuda_version(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

std::string versions() {
  int runtime = 0, driver = 0, blas_major = 0, blas_minor = 0, blas_patch = 0;
  (void)cudaRuntimeGetVersion(&runtime);
  (void)cudaDriverGetVersion(&driver);
  (void)cublasGetProperty(MAJOR_VERSION, &blas_major);
  (void)cublasGetProperty(MINOR_VERSION, &blas_minor);
  (void)cublasGetProperty(PATCH_LEVEL, &blas_patch);
  const size_t dnn = cudnnGetVersion();
#if defined(HG_CUDA_EMULATE)
  const std::string device = "EMULATED device (a measured H200's properties, kernels run on the CPU: cuda/emulator/), ";
#else
  const std::string device;
#endif
  return device + "CUDA runtime " + cuda_version(runtime) + ", driver " + (driver ? "supports CUDA " + cuda_version(driver) :
         std::string("not found")) + ", cuBLAS " + std::to_string(blas_major) + "." + std::to_string(blas_minor) +
         "." + std::to_string(blas_patch) + ", cuDNN " + std::to_string(dnn / 10000) + "." +
         std::to_string(dnn % 10000 / 100) + "." + std::to_string(dnn % 100);
}

}  // namespace
}  // namespace hg::cuda

extern "C" const hg::cuda::BackendApi* hg_cuda_backend_api() {
  using namespace hg::cuda;
  static const BackendApi api{.abi = kBackendAbi,
                              .device_count = &runtime_device_count,
                              .unavailable_reason = &runtime_unavailable_reason,
                              .register_kernels = &register_kernels,
                              .versions = &versions,
                              .synchronize = &stream_synchronize,
                              .graph_capture = &graph_capture,
                              .graph_launch = &graph_launch,
                              .graph_destroy = &graph_destroy,
                              .nccl = &nccl_api};
  return &api;
}
