// The native FP8 GEMM (ops/kernels/fp8.h: GemmArgs with its FP8 fields) through cuBLASLt, on GPUs with FP8 Tensor Cores
// (compute capability 8.9 and later: Ada, Hopper, Blackwell).
//
// Row-major c (m,n) = a (m,k) . b (n,k)^T is, column-major, c^T (n x m) = b^T' . a^T' where the stored
// b is the column-major k x n matrix (ld = ldb) read transposed and the stored a the column-major k x m
// matrix (ld = lda) read as it is: cuBLASLt's "TN" layout, the only one its FP8 kernels take. So Lt's A is
// our b (its scale pointer is scale_b) and Lt's B is our a. cuBLASLt computes
// D = alpha * scale_A * scale_B * (A^T B) with F32 accumulation (CUBLAS_COMPUTE_32F, F32 scale type), and
// D is F32 here (the op applies the bias and rounds once, as the decode route does).
//
// What is checked before cuBLASLt is asked: the documented FP8 conditions (TN, 16-byte aligned pointers,
// leading dimensions multiples of 16 bytes, not E5M2 x E5M2) and, as Transformer Engine asks of FP8
// GEMMs, m, n and k multiples of 16. Anything else returns false and the op decodes to BF16 instead. The
// matmul descriptor, layouts and chosen algorithm are kept per shape (cuBLASLt's heuristic is a host call
// worth skipping on every step); only the scale pointers change between calls.
#include <cublasLt.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

#include "core/error.h"
#include "cuda/check.h"
#include "cuda/context.h"
#include "cuda/counters.h"
#include "cuda/register.h"
#include "ops/kernels/fp8.h"

namespace hg::cuda {

namespace {

cudaDataType_t f8_type(DType t) { return static_cast<cudaDataType_t>(dtype_info(t).cuda_data_type); }  // core/dtype.h

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The conditions that need no pointer: what a query answers (besides whether an algorithm exists).
bool shape_ok(const DeviceContext& ctx, const GemmArgs& g) {
  if (ctx.compute_capability < 89) return false;
  // the one layout and epilogue this kernel runs: TN, no batch, C = scale_a * scale_b * A B^T in F32
  if (g.trans_a != Trans::N || g.trans_b != Trans::T || g.batch != 1 || g.alpha != 1.0f || g.beta != 0.0f || !g.c_f32)
    return false;
  const DType at = g.dtype, bt = gemm_b_dtype(g);
  if (!is_fp8(at) || !is_fp8(bt)) return false;
  if (at == DType::F8E5M2 && bt == DType::F8E5M2) return false;
  if (g.m <= 0 || g.n <= 0 || g.k <= 0 || g.m % 16 || g.n % 16 || g.k % 16) return false;
  if (g.lda % 16 || g.ldb % 16 || g.ldc % 4) return false;  // 16 bytes: 16 FP8 values, 4 F32 values
  constexpr int64_t kMax = INT32_MAX;
  return g.m <= kMax && g.n <= kMax && g.k <= kMax && g.lda <= kMax && g.ldb <= kMax && g.ldc <= kMax;
}

// One shape's cuBLASLt objects, made once and never freed (like the handles: contexts live until exit).
struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;  // Lt's A (our b), B (our a), C = D
  cublasLtMatmulAlgo_t algo{};
  bool found = false;  // the heuristic returned an algorithm
};

using Key = std::tuple<int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, DType, DType>;

template <class T>
void set_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& v) {
  HG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof v));
}

Plan make_plan(DeviceContext& ctx, const GemmArgs& g) {
  Plan p;
  HG_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_attr(p.op, CUBLASLT_MATMUL_DESC_TRANSA, int32_t{CUBLAS_OP_T});  // the attribute is an int32_t
  set_attr(p.op, CUBLASLT_MATMUL_DESC_TRANSB, int32_t{CUBLAS_OP_N});
  HG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, f8_type(gemm_b_dtype(g)), static_cast<uint64_t>(g.k),
                                             static_cast<uint64_t>(g.n), g.ldb));
  HG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, f8_type(g.dtype), static_cast<uint64_t>(g.k),
                                             static_cast<uint64_t>(g.m), g.lda));
  HG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d, CUDA_R_32F, static_cast<uint64_t>(g.n),
                                             static_cast<uint64_t>(g.m), g.ldc));
  cublasLtMatmulPreference_t pref = nullptr;
  HG_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  // The workspace, and the alignment every call is checked for (16 bytes; the default assumes 256, which
  // views into a tensor need not have).
  const uint64_t ws = ctx.blas_workspace_bytes;
  const uint32_t align = 16;
  cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  for (const auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof align);
  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulAlgoGetHeuristic(lt_handle(ctx), p.op, p.a, p.b, p.d, p.d, pref, 1, &result, &count);
  (void)cublasLtMatmulPreferenceDestroy(pref);
  // No algorithm (NOT_SUPPORTED, or none found) is an answer, not an error: the op decodes instead.
  p.found = st == CUBLAS_STATUS_SUCCESS && count > 0;
  if (p.found) p.algo = result.algo;
  return p;
}

std::mutex g_plans_mutex;
std::map<Key, Plan>& plans() {
  static auto* m = new std::map<Key, Plan>;  // never destroyed: see Plan
  return *m;
}

const Plan& plan_for(DeviceContext& ctx, const GemmArgs& g) {
  const Key key{ctx.device, g.m, g.n, g.k, g.lda, g.ldb, g.ldc, g.dtype, gemm_b_dtype(g)};
  std::lock_guard<std::mutex> lock(g_plans_mutex);
  auto it = plans().find(key);
  if (it == plans().end()) it = plans().emplace(key, make_plan(ctx, g)).first;
  return it->second;
}

bool fp8_gemm(const GemmArgs& g) {
  HG_CHECK(g.scale_a && g.scale_b, "fp8_gemm: scale_a or scale_b is null; pass the dequantization factors ",
           "(1/scale) as F32 scalars in device memory (a query too: scale_a names the device)");
  DeviceContext& ctx = context_for(g.scale_a);
  if (!shape_ok(ctx, g)) return false;
  if (!g.query && !(aligned16(g.a) && aligned16(g.b) && aligned16(g.c))) return false;
  const Plan& p = plan_for(ctx, g);
  if (!p.found || g.query) return p.found;
  std::lock_guard<std::mutex> lock(ctx.handle_mutex);
  set_attr(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(g.scale_b));
  set_attr(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(g.scale_a));
  const float alpha = 1.0f, beta = 0.0f;
  detail::count_library_call();
  HG_CUBLAS_CHECK(cublasLtMatmul(lt_handle(ctx), p.op, &alpha, g.b, p.a, g.a, p.b, &beta, g.c, p.d, g.c, p.d, &p.algo,
                                 ctx.blas_workspace, ctx.blas_workspace_bytes, ctx.stream));
  return true;
}

}  // namespace

void register_fp8_gemm() {
  fp8_gemm_kernels().set(DeviceType::CUDA, DType::F8E4M3, &fp8_gemm);
  fp8_gemm_kernels().set(DeviceType::CUDA, DType::F8E5M2, &fp8_gemm);
}

}  // namespace hg::cuda
