#pragma once
// Raw row-major GEMM shared by the CPU and CUDA backends' callers:
//   C[b] = alpha * op(A[b]) * op(B[b]) + beta * C[b],   b = 0..batch-1
// op(A) is (M,K): A is (M,K) with lda >= K when trans_a == N, (K,M) with lda >= M when T.
// op(B) is (K,N): B is (K,N) with ldb >= N when trans_b == N, (N,K) with ldb >= K when T.
// C is (M,N) with ldc >= N. A, B, C share one dtype; F16/BF16 accumulate in F32 and round once on
// store. A batch stride of 0 broadcasts that operand over the batch.
#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace hg {

enum class Trans : uint8_t { N, T };

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
};

namespace cpu {
// Validates args (hg::Error naming the bad field) and runs on the CPU: oneDNN matmul for F32, and for
// BF16 where this CPU has BF16 dot products (primitives cached per shape/dtype/layout); F16, and BF16
// elsewhere, converted to F32, run as an F32 GEMM and rounded once; Eigen for F64 and for everything
// when built with HG_ONEDNN=OFF.
void gemm(const GemmArgs& args);
// The engine gemm() uses for a dtype on this CPU: "onednn:<isa>" (e.g. onednn:avx2,
// onednn:avx512_core_bf16), "eigen", or "widen:<conversion path>+<F32 engine>" (widen:f16c+onednn:avx2).
std::string gemm_engine(DType dt);
// The slow, obviously correct reference (double accumulation) every fast path is tested against.
void gemm_reference(const GemmArgs& args);
}  // namespace cpu

}  // namespace hg
