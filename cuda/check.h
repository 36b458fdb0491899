#pragma once
// Error checks for every CUDA runtime and cuBLAS call: each macro evaluates its expression once and
// throws hg::Error naming the call, where it was made and what the library said. Usable from .cpp
// (g++) and .cu (nvcc) host code. Only files under cuda/ (and tests) include this header.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdio>

#include "core/error.h"

namespace hg::cuda::detail {

[[noreturn]] inline void throw_cuda_error(cudaError_t e, const char* expr, const char* file, int line) {
  (void)cudaGetLastError();  // clear a non-sticky error so the next call does not report it again
  HG_FAIL("cuda: ", expr, " failed at ", file, ":", line, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e),
          ")");
}

[[noreturn]] inline void throw_cublas_error(cublasStatus_t s, const char* expr, const char* file, int line) {
  HG_FAIL("cublas: ", expr, " failed at ", file, ":", line, ": ", cublasGetStatusName(s), " (",
          cublasGetStatusString(s), ")");
}

// For destructors and frees, which must not throw: report on stderr. At process exit the runtime may
// already be unloaded; that is not worth a message.
inline void warn_cuda_error(cudaError_t e, const char* expr, const char* file, int line) {
  (void)cudaGetLastError();
  if (e == cudaErrorCudartUnloading) return;
  std::fprintf(stderr, "halfgrad: warning: %s failed at %s:%d: %s (%s)\n", expr, file, line, cudaGetErrorName(e),
               cudaGetErrorString(e));
}

}  // namespace hg::cuda::detail

#define HG_CUDA_CHECK(expr)                                                              \
  do {                                                                                   \
    const cudaError_t hg_cuda_err_ = (expr);                                             \
    if (hg_cuda_err_ != cudaSuccess) [[unlikely]]                                        \
      ::hg::cuda::detail::throw_cuda_error(hg_cuda_err_, #expr, __FILE__, __LINE__);     \
  } while (0)

#define HG_CUBLAS_CHECK(expr)                                                            \
  do {                                                                                   \
    const cublasStatus_t hg_cublas_st_ = (expr);                                         \
    if (hg_cublas_st_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                             \
      ::hg::cuda::detail::throw_cublas_error(hg_cublas_st_, #expr, __FILE__, __LINE__);  \
  } while (0)

// The non-throwing form, for destructors and deallocation paths.
#define HG_CUDA_WARN(expr)                                                               \
  do {                                                                                   \
    const cudaError_t hg_cuda_err_ = (expr);                                             \
    if (hg_cuda_err_ != cudaSuccess) [[unlikely]]                                        \
      ::hg::cuda::detail::warn_cuda_error(hg_cuda_err_, #expr, __FILE__, __LINE__);      \
  } while (0)

// After every <<<...>>>: launch-configuration errors surface here; errors inside the kernel surface
// at the next synchronising call.
#define HG_CUDA_LAUNCH_CHECK() HG_CUDA_CHECK(cudaGetLastError())
