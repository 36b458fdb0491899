#pragma once
// The CUDA backend's registration, the peer of cpu/register.h (docs/ARCHITECTURE.md, "Dispatch and
// registration"): register_kernels() (cuda/register.cpp) sets the allocator and fills the CUDA slots of
// every kernel table by calling each family's register_<family>() (ops/kernels/families.h); core's
// load_backend runs it once, through cuda/api/loader.cpp, at the first lookup or allocation on a GPU.
// Each family's function sets its tables' CUDA slots, one line per kernel, beside those kernels:
// conv in cuda/dnn.cpp, gemm in cuda/blas.cpp, elementwise in cuda/kernels/copy.cu, scaler in
// cuda/kernels/amp.cu, the others in cuda/kernels/<family>.cu.
#include "ops/kernels/families.h"

namespace hg::cuda {

HG_KERNEL_FAMILIES(HG_DECLARE_KERNEL_FAMILY)
void register_fp8_gemm();       // cuda/blas_lt.cpp: the native FP8 GEMM (cuBLASLt), a kernel the CPU lacks
void register_gemm_epilogue();  // cuda/blas_lt.cpp: the GEMM with a bias, bias + ReLU or bias-gradient epilogue

}  // namespace hg::cuda
