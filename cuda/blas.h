#pragma once
// Row-major GEMM on column-major cuBLAS. Pure host code with no CUDA include, so the mapping is
// tested on the CPU (tests/cuda/test_gemm_mapping.cpp) against a naive column-major GEMM.
//
// A row-major R (r x c, leading dim ld) is, byte for byte, the column-major R^T (c x r, same ld).
// So row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands (with their
// leading dims and batch strides), swap m and n, keep each operand's transpose flag
// (docs/ARCHITECTURE.md, "Facts the code relies on").
#include <cstdint>
#include "ops/kernels/gemm.h"


namespace hg::cuda {

// One column-major (BLAS-convention) strided-batched GEMM:
//   C[b] = alpha * op_a(A[b]) * op_b(B[b]) + beta * C[b],  op_a(A) is m x k, op_b(B) is k x n,
//   element (i, j) of a column-major X is X[i + j * ldx]; batch b starts at X + b * stride_x.
struct ColMajorGemm {
  Trans op_a = Trans::N, op_b = Trans::N;
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 1;
  const void* b = nullptr;
  int64_t ldb = 1;
  void* c = nullptr;
  int64_t ldc = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;  // in elements; 0 broadcasts
  int64_t batch = 1;
};

// The column-major call computing the row-major g. Leading dims are raised to at least 1 (BLAS
// rejects 0 even when the matrix is empty).
ColMajorGemm to_col_major(const GemmArgs& g);

// The GemmKernel of the CUDA backend: validates g (hg::Error naming the field) and runs
// cublasGemmEx / cublasGemmStridedBatchedEx on the device's stream, fp32 compute (fp64 for F64).
void gemm(const GemmArgs& g);

}  // namespace hg::cuda
