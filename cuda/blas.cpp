// Row-major GEMM through cuBLAS (contract in ops/gemm.h, mapping in cuda/blas.h).
// F16/BF16 use the tensor cores through CUBLAS_COMPUTE_32F + CUBLAS_GEMM_DEFAULT (no opt-in needed);
// F32 stays true fp32 unless cuda::allow_tf32() (then CUBLAS_COMPUTE_32F_FAST_TF32); F64 computes in fp64.
#include "cuda/blas.h"

#include <algorithm>
#include <climits>

#include "core/error.h"
#include "cuda/available.h"
#include "cuda/counters.h"
#include "cuda/check.h"
#include "cuda/context.h"
#include "cuda/register.h"
#include "ops/kernels/gemm.h"

namespace hg::cuda {

ColMajorGemm to_col_major(const GemmArgs& g) {
  ColMajorGemm c;
  c.op_a = g.trans_b;  // column-major A' is row-major B (as stored)
  c.op_b = g.trans_a;  // column-major B' is row-major A
  c.m = g.n;
  c.n = g.m;
  c.k = g.k;
  c.a = g.b;
  c.lda = std::max<int64_t>(g.ldb, 1);
  c.b = g.a;
  c.ldb = std::max<int64_t>(g.lda, 1);
  c.c = g.c;
  c.ldc = std::max<int64_t>(g.ldc, 1);
  c.stride_a = g.stride_b;
  c.stride_b = g.stride_a;
  c.stride_c = g.stride_c;
  c.batch = g.batch;
  return c;
}

namespace {

void check_int(const char* name, int64_t v) {
  HG_CHECK(v <= INT_MAX, "gemm: ", name, "=", v, " exceeds cuBLAS's int range (", INT_MAX,
           "); split the matmul into smaller pieces");
}

// The contract's checks (ops/kernels/gemm.h, check_gemm_args), plus cuBLAS's int limits.
void validate(const GemmArgs& g) {
  check_gemm_args(g);
  check_int("m", g.m);
  check_int("n", g.n);
  check_int("k", g.k);
  check_int("lda", g.lda);
  check_int("ldb", g.ldb);
  check_int("ldc", g.ldc);
  check_int("batch", g.batch);
}

// Each dtype's row (core/dtype.h) holds its cudaDataType_t value; the asserts tie them to the library's.
static_assert(dtype_info(DType::F32).cuda_data_type == CUDA_R_32F && dtype_info(DType::F16).cuda_data_type == CUDA_R_16F &&
              dtype_info(DType::BF16).cuda_data_type == CUDA_R_16BF && dtype_info(DType::F64).cuda_data_type == CUDA_R_64F &&
              dtype_info(DType::F8E4M3).cuda_data_type == CUDA_R_8F_E4M3 &&
              dtype_info(DType::F8E5M2).cuda_data_type == CUDA_R_8F_E5M2);
cudaDataType_t cuda_type(DType t) {
  const int v = dtype_info(t).cuda_data_type;
  HG_CHECK(v >= 0, "gemm: dtype ", t, " has no cuBLAS type; use F32, F16, BF16 or F64");
  return static_cast<cudaDataType_t>(v);
}

cublasOperation_t cublas_op(Trans t) { return t == Trans::N ? CUBLAS_OP_N : CUBLAS_OP_T; }

// alpha/beta live on the host (the handle's default pointer mode); their type follows the compute type.
// C is dt's type, or F32 for F16/BF16 A and B with c_f32 (GemmEx's mixed Ctype, computed in F32).
void run(DeviceContext& ctx, const ColMajorGemm& c, DType dt, bool c_f32, const void* alpha, const void* beta) {
  const cudaDataType_t t = cuda_type(dt), ct = c_f32 ? CUDA_R_32F : t;
  const cublasComputeType_t compute = dt == DType::F64                  ? CUBLAS_COMPUTE_64F
                                      : dt == DType::F32 && allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                         : CUBLAS_COMPUTE_32F;
  const int m = static_cast<int>(c.m), n = static_cast<int>(c.n), k = static_cast<int>(c.k);
  const int lda = static_cast<int>(c.lda), ldb = static_cast<int>(c.ldb), ldc = static_cast<int>(c.ldc);
  std::lock_guard<std::mutex> lock(ctx.handle_mutex);  // one host thread per handle at a time
  if (c.batch == 1) {
    detail::count_library_call();
    HG_CUBLAS_CHECK(cublasGemmEx(ctx.blas, cublas_op(c.op_a), cublas_op(c.op_b), m, n, k, alpha, c.a, t, lda, c.b,
                                 t, ldb, beta, c.c, ct, ldc, compute, CUBLAS_GEMM_DEFAULT));
  } else {
    detail::count_library_call();
    HG_CUBLAS_CHECK(cublasGemmStridedBatchedEx(ctx.blas, cublas_op(c.op_a), cublas_op(c.op_b), m, n, k, alpha, c.a,
                                               t, lda, c.stride_a, c.b, t, ldb, c.stride_b, beta, c.c, ct, ldc,
                                               c.stride_c, static_cast<int>(c.batch), compute,
                                               CUBLAS_GEMM_DEFAULT));
  }
}

}  // namespace

void gemm(const GemmArgs& g) {
  validate(g);
  if (g.m == 0 || g.n == 0) return;
  DeviceContext& ctx = context_for(g.c);
  const ColMajorGemm c = to_col_major(g);
  if (g.dtype == DType::F64) {
    const double alpha = g.alpha, beta = g.beta;
    run(ctx, c, g.dtype, false, &alpha, &beta);
  } else {
    run(ctx, c, g.dtype, g.c_f32, &g.alpha, &g.beta);
  }
}

void register_gemm() { gemm_kernels().set_all_floating(DeviceType::CUDA, &gemm); }

}  // namespace hg::cuda
