// The CUDA backend's entry point: libhalfgrad loads this library (cuda/api/loader.cpp) the first time a
// CUDA device is asked for and takes BackendApi from hg_cuda_backend_api(); ops/dispatch.cpp's
// ensure_backend() then calls register_kernels once, when a CUDA tensor first reaches a table (or
// .to(Device::cuda()) is called), so CPU-only programs never load the driver.
#include <cudnn.h>

#include <string>

#include "core/allocator.h"
#include "core/error.h"
#include "cuda/api/backend.h"
#include "cuda/blas.h"
#include "cuda/context.h"
#include "cuda/kernels/kernels.h"
#include "ops/dispatch.h"
#include "ops/kernels/elementwise.h"
#include "ops/kernels/gemm.h"
#include "ops/kernels/reduce.h"

namespace hg::cuda {

void register_amp();  // cuda/kernels/amp.cu: the grad scaler's unscale-and-check (ops/kernels/scaler.h)
void register_dnn();  // cuda/dnn.cpp: the conv2d tables
void register_loss();  // cuda/kernels/loss.cu: cross-entropy / NLL (ops/loss_math.h)
void register_dropout();  // cuda/kernels/dropout.cu: dropout (ops/dropout_math.h)
void register_embedding();  // cuda/kernels/embedding.cu: embedding forward and backward
void register_fp8();  // cuda/kernels/fp8.cu: per-tensor FP8 scaling (ops/kernels/fp8.h)
void register_fp8_gemm();  // cuda/blas_lt.cpp: the native FP8 GEMM (ops/kernels/fp8.h)
void register_rounding();  // cuda/kernels/rounding.cu: stochastic rounding (core/stochastic_round.h)
void register_optim();  // cuda/kernels/optim.cu: optimizer updates and clipping (ops/kernels/optim.h)
void register_norm();  // cuda/kernels/norm.cu: batch_norm and layer_norm (ops/norm_math.h)
void register_pool();  // cuda/kernels/pool.cu: the pooling tables
void stream_synchronize(int device);  // cuda/graph.cpp: cuda/graph.h's work
void* graph_capture(int device, const std::function<void()>& body);
void graph_launch(void* exec, int device);
void graph_destroy(void* exec);

namespace {

void register_kernels() {
  HG_CHECK(runtime_device_count() > 0, "cuda: no CUDA device is available (", runtime_unavailable_reason(),
           "); use Device::cpu()");
  set_allocator(DeviceType::CUDA, &allocator());
  ew_kernels().set_floating(DeviceType::CUDA, []<class T>(type_tag<T>) { return &elementwise<T>; });
  cast_kernels().set(DeviceType::CUDA, DType::F32, &cast);          // slot F32 = any dtype pair
  copy_kernels().set(DeviceType::CUDA, DType::F32, &strided_copy);  // slot F32 = any element size
  gemm_kernels().set_all_floating(DeviceType::CUDA, &gemm);
  reduce_kernels().set_floating(DeviceType::CUDA, []<class T>(type_tag<T>) { return &reduce<T>; });
  softmax_kernels().set_floating(DeviceType::CUDA, []<class T>(type_tag<T>) { return &softmax<T>; });
  softmax_backward_kernels().set_floating(DeviceType::CUDA, []<class T>(type_tag<T>) { return &softmax_backward<T>; });
  register_amp();
  register_dnn();
  register_loss();
  register_dropout();
  register_embedding();
  register_fp8();
  register_fp8_gemm();
  register_rounding();
  register_norm();
  register_optim();
  register_pool();
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
                              .graph_destroy = &graph_destroy};
  return &api;
}
