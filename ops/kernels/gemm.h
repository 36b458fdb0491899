#pragma once
// The kernel contract of matmul and linear (docs/ARCHITECTURE.md, "Dispatch and registration"); implemented
// by cpu/gemm.cpp (oneDNN, Eigen) and cuda/blas.cpp (cuBLAS).
// A raw row-major GEMM:
//   C[b] = alpha * op(A[b]) * op(B[b]) + beta * C[b],   b = 0..batch-1
// op(A) is (M,K): A is (M,K) with lda >= K when trans_a == N, (K,M) with lda >= M when T.
// op(B) is (K,N): B is (K,N) with ldb >= N when trans_b == N, (N,K) with ldb >= K when T.
// C is (M,N) with ldc >= N. A, B, C share one dtype; F16/BF16 accumulate in F32 and round once on
// store. With c_f32, F16/BF16 A and B write an F32 C: the accumulator times alpha (plus beta * C) is
// stored unrounded to 16 bits, as cuBLAS's GemmEx with Ctype F32 does (the FP8 GEMM's decoded operands
// need it: their products are exact, and one rounding to 16 bits before the scales would be a second
// one). A batch stride of 0 broadcasts that operand over the batch.
// The same struct asks the native FP8 GEMM (ops/kernels/fp8.h, fp8_gemm_kernels) for its call: dtype is A's
// FP8 format, b_dtype B's, and the product is multiplied by the device scalars scale_a and scale_b.
#include <cstdint>
#include <optional>

#include "core/dispatch_table.h"
#include "core/dtype.h"
#include "ops/matmul.h"  // Trans

namespace hg {

// What a GEMM with an epilogue (gemm_epilogue_kernels) does to C in the same call, after alpha * op(A) op(B):
//   Bias:      C(i, j) += bias[j]                  (bias: C's dtype, n values: one per column, added to every row)
//   BiasRelu:  C(i, j) = relu(C(i, j) + bias[j])   (ReLU as fn::Relu: NaN stays NaN)
//   BiasGradA: C as without an epilogue, and bias_grad[i] = sum over l of op(A)(i, l) (C's dtype, m values), the
//              bias gradient of a Linear layer read from the GEMM that computes its weight gradient
enum class GemmEpilogue : uint8_t { None, Bias, BiasRelu, BiasGradA };

struct GemmArgs {
  DType dtype = DType::F32;
  Trans trans_a = Trans::N, trans_b = Trans::N;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1.f, beta = 0.f;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  void* c = nullptr;
  int64_t ldc = 0;
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;  // in elements
  bool c_f32 = false;  // C is F32 (dtype must then be F16 or BF16; FP8 GEMMs always write F32)
  // FP8 GEMMs only (fp8_gemm_kernels): B's format when it is not dtype's (E4M3 x E5M2), the F32 scalars in
  // device memory that multiply the product, and query (answer whether the call can run; nothing is read or
  // written but the scales' device). The other GEMMs refuse them (check_gemm_args): they have alpha.
  std::optional<DType> b_dtype = std::nullopt;
  const float* scale_a = nullptr;
  const float* scale_b = nullptr;
  bool query = false;
  // gemm_epilogue_kernels only (check_gemm_args refuses them): see GemmEpilogue.
  GemmEpilogue epilogue = GemmEpilogue::None;
  const void* bias = nullptr;  // Bias, BiasRelu
  void* bias_grad = nullptr;   // BiasGradA
};
// The dtype C holds: F32 with c_f32, else dtype.
inline DType gemm_c_dtype(const GemmArgs& g) { return g.c_f32 ? DType::F32 : g.dtype; }
// The dtype B holds: b_dtype when given, else dtype.
inline DType gemm_b_dtype(const GemmArgs& g) { return g.b_dtype.value_or(g.dtype); }
// The contract above, for gemm_kernels (not the FP8 GEMM): an hg::Error naming the field and the fix. Every
// backend's GEMM calls it first (cpu/gemm.cpp, cuda/blas.cpp, which adds cuBLAS's int range).
void check_gemm_args(const GemmArgs& g);
using GemmKernel = void (*)(const GemmArgs& args);
HG_KERNEL_TABLE(GemmKernel, gemm_kernels, "matmul");

// ---- a GEMM with an epilogue: the bias, bias + ReLU or bias gradient of a Linear layer in the GEMM's call --------
// The contract above with an epilogue (not None), batch 1, beta 0, no c_f32, dtype F32, F16 or BF16, and
// the epilogue's pointer set (check_gemm_epilogue_args says which is wrong). The kernel returns false, having
// touched nothing, when it cannot run this call as one library call (the library has no algorithm for it, a
// pointer is not 16-byte aligned): the op then runs the plain GEMM and the separate kernels (ops/matmul.cpp).
// Only backends whose GEMM library has epilogues register it (cuBLASLt's; the CPU has none: its plain GEMM
// already adds a bias for free through beta = 1, and the separate ReLU is one pass over C).
using GemmEpilogueKernel = bool (*)(const GemmArgs& g);
HG_KERNEL_TABLE(GemmEpilogueKernel, gemm_epilogue_kernels, "linear");
void check_gemm_epilogue_args(const GemmArgs& g);

}  // namespace hg
