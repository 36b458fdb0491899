// The cuBLASLt GEMMs: the native FP8 GEMM (ops/kernels/fp8.h: GemmArgs with its FP8 fields) on GPUs with FP8
// Tensor Cores (compute capability 8.9 and later: Ada, Hopper, Blackwell), and the F32/F16/BF16 GEMM with an
// epilogue (ops/kernels/gemm.h: a Linear layer's bias, bias + ReLU, or bias gradient in the GEMM's own call).
//
// Both map the row-major problem to column-major as cuda/blas.h does: row-major c (m,n) = op(a) op(b) is
// column-major c^T (n x m) = op(b)^T op(a)^T, so cuBLASLt's A is our b and its B our a, its m our n and its n
// our m. Hence the epilogues: our bias (n values, one per column of row-major C) is cuBLASLt's bias over the
// rows of its D (BIAS, RELU_BIAS); our bias gradient (sums of op(a)'s rows over k) is its BGRADB.
//
// FP8: c (m,n) = a (m,k) . b (n,k)^T is cuBLASLt's "TN" layout, the only one its FP8 kernels take. cuBLASLt
// computes D = alpha * scale_A * scale_B * (A^T B) with F32 accumulation (CUBLAS_COMPUTE_32F, F32 scale
// type), and D is F32 here (the op applies the bias and rounds once, as the decode route does). Checked before
// cuBLASLt is asked: the documented FP8 conditions (TN, 16-byte aligned pointers, leading dimensions multiples
// of 16 bytes, not E5M2 x E5M2) and, as Transformer Engine asks of FP8 GEMMs, m, n and k multiples of 16.
// Anything else returns false and the op decodes to BF16 instead.
//
// Epilogue: compute type CUBLAS_COMPUTE_32F (FAST_TF32 for F32 under cuda::allow_tf32()), the bias and bias
// gradient in C's type (cuBLASLt's default), pointers 16-byte aligned. No algorithm, or anything else off
// the path, returns false and the op runs the plain GEMM and the separate kernels.
//
// The matmul descriptor, layouts and chosen algorithm are kept per shape (cuBLASLt's heuristic is a host call
// worth skipping on every step); only the scale and bias pointers change between calls.
#include <cublasLt.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

#include "core/error.h"
#include "cuda/available.h"
#include "cuda/check.h"
#include "cuda/context.h"
#include "cuda/counters.h"
#include "cuda/register.h"
#include "ops/kernels/fp8.h"
#include "ops/kernels/gemm.h"

namespace hg::cuda {

namespace {

cudaDataType_t lt_type(DType t) { return static_cast<cudaDataType_t>(dtype_info(t).cuda_data_type); }  // core/dtype.h
cublasOperation_t lt_op(Trans t) { return t == Trans::N ? CUBLAS_OP_N : CUBLAS_OP_T; }

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// One cuBLASLt matmul as cuBLASLt sees it (column-major; its A is our b, its B our a): D (m x n) = op_a(A) op_b(B).
struct Spec {
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t a_type = CUDA_R_32F, b_type = CUDA_R_32F, d_type = CUDA_R_32F;
  cublasOperation_t op_a = CUBLAS_OP_N, op_b = CUBLAS_OP_N;
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldd = 0;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
};

// The row-major GemmArgs seen column-major (the types and compute type are the caller's).
Spec col_major(const GemmArgs& g) {
  return Spec{.op_a = lt_op(g.trans_b), .op_b = lt_op(g.trans_a), .m = g.n, .n = g.m, .k = g.k,
              .lda = g.ldb, .ldb = g.lda, .ldd = g.ldc};
}

bool fits_int(const Spec& s) {
  constexpr int64_t kMax = INT32_MAX;
  return s.m <= kMax && s.n <= kMax && s.k <= kMax && s.lda <= kMax && s.ldb <= kMax && s.ldd <= kMax;
}

// One shape's cuBLASLt objects, made once and never freed (like the handles: contexts live until exit).
struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;  // Lt's A (our b), B (our a), C = D
  cublasLtMatmulAlgo_t algo{};
  bool found = false;  // the heuristic returned an algorithm
};

using Key = std::tuple<int, int, int, int, int, int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int>;
Key key_of(const DeviceContext& ctx, const Spec& s) {
  return {ctx.device, static_cast<int>(s.compute), static_cast<int>(s.a_type), static_cast<int>(s.b_type),
          static_cast<int>(s.d_type), static_cast<int>(s.op_a), static_cast<int>(s.op_b), s.m, s.n, s.k, s.lda,
          s.ldb, s.ldd, static_cast<int>(s.epilogue)};
}

template <class T>
void set_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& v) {
  HG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof v));
}

bool has_bias_pointer(cublasLtEpilogue_t e) { return e != CUBLASLT_EPILOGUE_DEFAULT; }

Plan make_plan(DeviceContext& ctx, const Spec& s) {
  Plan p;
  HG_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, s.compute, CUDA_R_32F));
  set_attr(p.op, CUBLASLT_MATMUL_DESC_TRANSA, static_cast<int32_t>(s.op_a));  // the attribute is an int32_t
  set_attr(p.op, CUBLASLT_MATMUL_DESC_TRANSB, static_cast<int32_t>(s.op_b));
  if (s.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    set_attr(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<uint32_t>(s.epilogue));
    // The heuristic reads the bias pointer's alignment from its value: 16 bytes, what every call is checked for.
    set_attr(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, reinterpret_cast<const void*>(uintptr_t{16}));
  }
  const bool na = s.op_a == CUBLAS_OP_N, nb = s.op_b == CUBLAS_OP_N;
  HG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, s.a_type, static_cast<uint64_t>(na ? s.m : s.k),
                                             static_cast<uint64_t>(na ? s.k : s.m), std::max<int64_t>(s.lda, 1)));
  HG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, s.b_type, static_cast<uint64_t>(nb ? s.k : s.n),
                                             static_cast<uint64_t>(nb ? s.n : s.k), std::max<int64_t>(s.ldb, 1)));
  HG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d, s.d_type, static_cast<uint64_t>(s.m), static_cast<uint64_t>(s.n),
                                             std::max<int64_t>(s.ldd, 1)));
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
  // No algorithm (NOT_SUPPORTED, or none found) is an answer, not an error: the op takes its other route.
  p.found = st == CUBLAS_STATUS_SUCCESS && count > 0;
  if (p.found) p.algo = result.algo;
  return p;
}

std::mutex g_plans_mutex;
std::map<Key, Plan>& plans() {
  static auto* m = new std::map<Key, Plan>;  // never destroyed: see Plan
  return *m;
}

const Plan& plan_for(DeviceContext& ctx, const Spec& s) {
  const Key key = key_of(ctx, s);
  std::lock_guard<std::mutex> lock(g_plans_mutex);
  auto it = plans().find(key);
  if (it == plans().end()) it = plans().emplace(key, make_plan(ctx, s)).first;
  return it->second;
}

// D = alpha * op(A) op(B) (+ the plan's epilogue), D in place of C (beta 0); the caller holds ctx.handle_mutex
// and has set the descriptor's pointers.
void run(DeviceContext& ctx, const Plan& p, const GemmArgs& g) {
  const float alpha = g.alpha, beta = 0.0f;
  detail::count_library_call();
  HG_CUBLAS_CHECK(cublasLtMatmul(lt_handle(ctx), p.op, &alpha, g.b, p.a, g.a, p.b, &beta, g.c, p.d, g.c, p.d, &p.algo,
                                 ctx.blas_workspace, ctx.blas_workspace_bytes, ctx.stream));
}

// ---- FP8 ----

// The conditions that need no pointer: what a query answers (besides whether an algorithm exists).
bool fp8_shape_ok(const DeviceContext& ctx, const GemmArgs& g) {
  if (ctx.compute_capability < 89) return false;
  // the one layout and epilogue this kernel runs: TN, no batch, C = scale_a * scale_b * A B^T in F32
  if (g.trans_a != Trans::N || g.trans_b != Trans::T || g.batch != 1 || g.alpha != 1.0f || g.beta != 0.0f || !g.c_f32)
    return false;
  const DType at = g.dtype, bt = gemm_b_dtype(g);
  if (!is_fp8(at) || !is_fp8(bt)) return false;
  if (at == DType::F8E5M2 && bt == DType::F8E5M2) return false;
  if (g.m <= 0 || g.n <= 0 || g.k <= 0 || g.m % 16 || g.n % 16 || g.k % 16) return false;
  return g.lda % 16 == 0 && g.ldb % 16 == 0 && g.ldc % 4 == 0;  // 16 bytes: 16 FP8 values, 4 F32 values
}

bool fp8_gemm(const GemmArgs& g) {
  HG_CHECK(g.scale_a && g.scale_b, "fp8_gemm: scale_a or scale_b is null; pass the dequantization factors ",
           "(1/scale) as F32 scalars in device memory (a query too: scale_a names the device)");
  DeviceContext& ctx = context_for(g.scale_a);
  if (!fp8_shape_ok(ctx, g)) return false;
  Spec s = col_major(g);
  s.compute = CUBLAS_COMPUTE_32F;
  s.a_type = lt_type(gemm_b_dtype(g));
  s.b_type = lt_type(g.dtype);
  s.d_type = CUDA_R_32F;
  if (!fits_int(s)) return false;
  if (!g.query && !(aligned16(g.a) && aligned16(g.b) && aligned16(g.c))) return false;
  const Plan& p = plan_for(ctx, s);
  if (!p.found || g.query) return p.found;
  std::lock_guard<std::mutex> lock(ctx.handle_mutex);
  set_attr(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(g.scale_b));
  set_attr(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(g.scale_a));
  run(ctx, p, g);
  return true;
}

// ---- the GEMM with an epilogue ----

cublasLtEpilogue_t lt_epilogue(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::Bias: return CUBLASLT_EPILOGUE_BIAS;
    case GemmEpilogue::BiasRelu: return CUBLASLT_EPILOGUE_RELU_BIAS;
    case GemmEpilogue::BiasGradA: return CUBLASLT_EPILOGUE_BGRADB;  // our A is cuBLASLt's B
    case GemmEpilogue::None: break;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

bool gemm_epilogue(const GemmArgs& g) {
  check_gemm_epilogue_args(g);
  if (g.m == 0 || g.n == 0 || g.k == 0) return false;  // nothing for a library call to do: the op's plain route
  const void* vec = g.epilogue == GemmEpilogue::BiasGradA ? static_cast<const void*>(g.bias_grad) : g.bias;
  if (!aligned16(g.a) || !aligned16(g.b) || !aligned16(g.c) || !aligned16(vec)) return false;
  DeviceContext& ctx = context_for(g.c);
  Spec s = col_major(g);
  s.compute = g.dtype == DType::F32 && allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  s.a_type = s.b_type = s.d_type = lt_type(g.dtype);
  s.epilogue = lt_epilogue(g.epilogue);
  if (!fits_int(s)) return false;
  const Plan& p = plan_for(ctx, s);
  if (!p.found) return false;
  std::lock_guard<std::mutex> lock(ctx.handle_mutex);
  set_attr(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, vec);
  run(ctx, p, g);
  return true;
}

}  // namespace

void register_fp8_gemm() {
  fp8_gemm_kernels().set(DeviceType::CUDA, DType::F8E4M3, &fp8_gemm);
  fp8_gemm_kernels().set(DeviceType::CUDA, DType::F8E5M2, &fp8_gemm);
}

void register_gemm_epilogue() {
  for (const DType t : {DType::F32, DType::F16, DType::BF16}) gemm_epilogue_kernels().set(DeviceType::CUDA, t, &gemm_epilogue);
}

}  // namespace hg::cuda
