#pragma once
// Whether CUDA can be used, in every build (cuda/api/loader.cpp, in libhalfgrad); no CUDA headers. The
// first call loads the CUDA backend (libhalfgrad_cuda.so, next to libhalfgrad or at $HG_CUDA_LIBRARY) and
// with it the CUDA libraries; a program that never asks for CUDA loads none of them.
#include <string>

namespace hg::cuda {

// True when the backend loads and finds a GPU; never throws.
bool is_available();
int device_count();
// Why is_available() is false: the build has no CUDA backend, the backend or a CUDA library could not be
// loaded (the dynamic loader's message), or the runtime found no usable driver or device. "" when available.
std::string unavailable_reason();
// The CUDA runtime, driver, cuBLAS and cuDNN versions the backend runs with, or why there is no backend.
std::string version_info();

// TF32 for F32 products on CUDA devices, like torch.backends.cuda.matmul.allow_tf32 and
// torch.backends.cudnn.allow_tf32 together. Off by default: F32 stays true fp32. When on, F32 matmuls
// (cuBLAS's CUBLAS_COMPUTE_32F_FAST_TF32) and convolutions (cuDNN may pick its tensor-core engines)
// round their inputs to TF32 (a 10-bit mantissa, core/half.h's round_to_tf32) and accumulate in F32:
// Tensor Cores on Ampere and later, about 8x the fp32 rate on an H100, with F16-like input precision
// and F32 range. No effect on the CPU or on other dtypes. Process-wide, read when an op is enqueued:
// a captured CUDA graph keeps what it was captured with. Loads no CUDA library.
void set_allow_tf32(bool allow);
bool allow_tf32();

}  // namespace hg::cuda
