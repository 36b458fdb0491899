// The emulated cuBLASLt (HG_CUDA=EMULATE): the calls cuda/blas_lt.cpp makes, with the real header's signatures
// and cuBLASLt's documented rules, which are checked, not assumed. Two kinds of matmul:
//  - FP8: compute type CUBLAS_COMPUTE_32F with an F32 scale type; A and B E4M3 or E5M2 but not both E5M2; the
//    "TN" layout (A transposed, B not); leading dimensions multiples of 16 bytes; C and D of one type, F32,
//    BF16 or F16; a device of compute capability 8.9 or later (the emulated device is sm_90); no epilogue.
//  - F32, F16, BF16: A, B, C and D of one type, compute type CUBLAS_COMPUTE_32F (or 32F_FAST_TF32 for F32),
//    F32 scale type, any transposes, and the epilogues DEFAULT, BIAS, RELU_BIAS and BGRADB (the bias, or the
//    bias gradient, in D's type: cuBLASLt's default).
// Every pointer must be 16-byte aligned (what cuda/blas_lt.cpp asks the heuristic for). Anything else gets
// the status cuBLASLt gives (NOT_SUPPORTED, or no algorithm from the heuristic).
//
// The references sum the products in F32 over k in increasing order from 0, then D = alpha * sum (times
// scale_A * scale_B for FP8) + beta * C, then the epilogue (+ bias[i] over D's rows, ReLU as fn::Relu), rounded
// once into D's type: the same operations, in the same order, as the emulated cuBLAS GEMM with the bias
// preloaded into C and beta = 1, so the fused and unfused routes agree bit for bit here (on a GPU they are
// different kernels). FP8 values are decoded exactly (core/convert.h's tables) and each FP8 product is exact in
// F32 (at most 8 significant bits, within F32's range). BGRADB's bias gradient, grad[j] = sum over l of
// op(B)(l, j), is summed the same way. The scales are read when the work runs, in stream order, as the GPU does.
#include <cublasLt.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include "core/convert.h"
#include "core/half.h"
#include "cuda/emulator/runtime.h"
#include "ops/functors.h"

struct cublasLtContext {
  int unused = 0;
};

namespace {

struct Desc {
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t scale_type = CUDA_R_32F;
  int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  const void* a_scale = nullptr;
  const void* b_scale = nullptr;
  int8_t fast_accum = 0;  // kept; the reference always sums in F32
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;  // the bias (BIAS, RELU_BIAS) or the bias gradient written (BGRADB)
};
struct Layout {
  cudaDataType type = CUDA_R_32F;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
};
struct Pref {
  uint64_t workspace = 0;
  uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D: cuBLASLt's defaults
};
static_assert(sizeof(Desc) <= sizeof(cublasLtMatmulDescOpaque_t));
static_assert(sizeof(Layout) <= sizeof(cublasLtMatrixLayoutOpaque_t));
static_assert(sizeof(Pref) <= sizeof(cublasLtMatmulPreferenceOpaque_t));

// The emulator's state lives in the opaque struct's bytes, constructed there by the Create call.
template <class S, class O> S& state(O* o) { return *std::launder(reinterpret_cast<S*>(o->data)); }

template <class S, class O> cublasStatus_t create(O** out, const S& init) {
  if (out == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  O* o = new (std::nothrow) O{};
  if (o == nullptr) return CUBLAS_STATUS_ALLOC_FAILED;
  new (o->data) S(init);
  *out = o;
  return CUBLAS_STATUS_SUCCESS;
}

template <class O> cublasStatus_t destroy(O* o) {
  delete o;  // the states are trivially destructible
  return CUBLAS_STATUS_SUCCESS;
}

template <class T> bool read_attr(T& dst, const void* buf, size_t size) {
  if (buf == nullptr || size != sizeof(T)) return false;
  std::memcpy(&dst, buf, sizeof(T));
  return true;
}

bool is_fp8(cudaDataType t) { return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2; }
bool is_standard(cudaDataType t) { return t == CUDA_R_32F || t == CUDA_R_16F || t == CUDA_R_16BF; }
bool emulated_epilogue(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_DEFAULT || e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_RELU_BIAS ||
         e == CUBLASLT_EPILOGUE_BGRADB;
}
size_t out_bytes(cudaDataType t) { return t == CUDA_R_32F ? 4 : t == CUDA_R_16BF || t == CUDA_R_16F ? 2 : 0; }
constexpr uint64_t kAlgoTag = 0x4647454d55384c54ull;  // the one algorithm the heuristic hands out

// The problem, validated as cuBLASLt does: (M, N, K) from the layouts, or the failing status.
struct Problem {
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  int64_t m = 0, n = 0, k = 0;
  bool fp8 = false;
  bool tf32 = false;  // CUBLAS_COMPUTE_32F_FAST_TF32: F32 A and B read rounded to TF32
};
Problem check(const Desc& d, const Layout& a, const Layout& b, const Layout& c, const Layout& dl) {
  Problem p;
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
  p.fp8 = is_fp8(a.type) && is_fp8(b.type) && !(a.type == CUDA_R_8F_E5M2 && b.type == CUDA_R_8F_E5M2);
  const bool valid_ops = (d.transa == CUBLAS_OP_N || d.transa == CUBLAS_OP_T) &&
                         (d.transb == CUBLAS_OP_N || d.transb == CUBLAS_OP_T);
  p.tf32 = d.compute == CUBLAS_COMPUTE_32F_FAST_TF32 && a.type == CUDA_R_32F;
  const bool standard = is_standard(a.type) && a.type == b.type && a.type == dl.type && valid_ops &&
                        (d.compute == CUBLAS_COMPUTE_32F || p.tf32) && emulated_epilogue(d.epilogue);
  const bool fp8_ok = p.fp8 && d.compute == CUBLAS_COMPUTE_32F && 10 * major + minor >= 89 &&
                      d.transa == CUBLAS_OP_T && d.transb == CUBLAS_OP_N && out_bytes(dl.type) != 0 &&
                      d.epilogue == CUBLASLT_EPILOGUE_DEFAULT;
  if ((!standard && !fp8_ok) || d.scale_type != CUDA_R_32F || c.type != dl.type) {
    p.status = CUBLAS_STATUS_NOT_SUPPORTED;  // what this emulation runs: see the top of the file
    return p;
  }
  // op(A) is M x K, op(B) is K x N, C and D are M x N
  const bool na = d.transa == CUBLAS_OP_N, nb = d.transb == CUBLAS_OP_N;
  p.m = static_cast<int64_t>(na ? a.rows : a.cols);
  p.k = static_cast<int64_t>(na ? a.cols : a.rows);
  p.n = static_cast<int64_t>(nb ? b.cols : b.rows);
  const auto fits = [](const Layout& l) { return l.ld >= static_cast<int64_t>(l.rows) && l.ld >= 1; };
  if (static_cast<int64_t>(nb ? b.rows : b.cols) != p.k || static_cast<int64_t>(dl.rows) != p.m ||
      static_cast<int64_t>(dl.cols) != p.n || c.rows != dl.rows || c.cols != dl.cols || !fits(a) || !fits(b) ||
      !fits(c) || !fits(dl)) {
    p.status = CUBLAS_STATUS_INVALID_VALUE;
    return p;
  }
  const int64_t ob = static_cast<int64_t>(out_bytes(dl.type));
  if (p.fp8 && (a.ld % 16 != 0 || b.ld % 16 != 0 || (c.ld * ob) % 16 != 0 || (dl.ld * ob) % 16 != 0))
    p.status = CUBLAS_STATUS_NOT_SUPPORTED;
  return p;
}

struct Call {
  int64_t m = 0, n = 0, k = 0;
  const uint8_t* a = nullptr;
  int64_t lda = 0;
  const uint8_t* b = nullptr;
  int64_t ldb = 0;
  const void* c = nullptr;
  int64_t ldc = 0;
  void* d = nullptr;
  int64_t ldd = 0;
  const float* a_scale = nullptr;
  const float* b_scale = nullptr;
  float alpha = 1.0f, beta = 0.0f;
  const float* ta = nullptr;  // decode tables of A's and B's formats (FP8)
  const float* tb = nullptr;
  // F32, F16, BF16
  bool op_a_n = false, op_b_n = true, tf32 = false;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
};

// One element of a stored A or B as the reference reads it: an FP8 byte through its decode table, F32 rounded
// to TF32 under COMPUTE_32F_FAST_TF32, F16/BF16 widened (all exact but TF32's rounding).
template <class TIn> float read_in(const Call& g, const void* base, int64_t i, const float* table) {
  if constexpr (std::is_same_v<TIn, uint8_t>) {
    return table[static_cast<const uint8_t*>(base)[i]];
  } else if constexpr (std::is_same_v<TIn, float>) {
    const float v = static_cast<const float*>(base)[i];
    return g.tf32 ? hg::round_to_tf32(v) : v;
  } else {
    return hg::load(static_cast<const TIn*>(base)[i]);
  }
}

// TIn is A's and B's storage (uint8_t: FP8 bytes), TD C's and D's (and the bias's): the GEMM, then the
// epilogue, as described at the top of the file.
template <class TIn, class TD> void reference(const Call& g) {
  const float s = g.alpha * (g.a_scale ? *g.a_scale : 1.0f) * (g.b_scale ? *g.b_scale : 1.0f);
  // op(A) row by row and op(B) column by column, widened once
  std::vector<float> a_rows(static_cast<size_t>(g.m * g.k)), b_col(static_cast<size_t>(g.k));
  for (int64_t i = 0; i < g.m; ++i)
    for (int64_t l = 0; l < g.k; ++l)
      a_rows[static_cast<size_t>(i * g.k + l)] = read_in<TIn>(g, g.a, g.op_a_n ? i + l * g.lda : l + i * g.lda, g.ta);
  const bool bias = g.epilogue == CUBLASLT_EPILOGUE_BIAS || g.epilogue == CUBLASLT_EPILOGUE_RELU_BIAS;
  const bool relu = g.epilogue == CUBLASLT_EPILOGUE_RELU_BIAS;
  for (int64_t j = 0; j < g.n; ++j) {
    float col_sum = 0.0f;
    for (int64_t l = 0; l < g.k; ++l) {
      b_col[static_cast<size_t>(l)] = read_in<TIn>(g, g.b, g.op_b_n ? l + j * g.ldb : j + l * g.ldb, g.tb);
      col_sum += b_col[static_cast<size_t>(l)];
    }
    if (g.epilogue == CUBLASLT_EPILOGUE_BGRADB) static_cast<TD*>(const_cast<void*>(g.bias))[j] = hg::store<TD>(col_sum);
    for (int64_t i = 0; i < g.m; ++i) {
      const float* a = &a_rows[static_cast<size_t>(i * g.k)];
      float acc = 0.0f;
      for (int64_t l = 0; l < g.k; ++l) acc += a[l] * b_col[static_cast<size_t>(l)];
      float v = s * acc;
      if (g.beta != 0.0f) v += g.beta * hg::load(static_cast<const TD*>(g.c)[i + j * g.ldc]);
      if (bias) v += hg::load(static_cast<const TD*>(g.bias)[i]);
      if (relu) v = hg::fn::Relu{}(v);
      static_cast<TD*>(g.d)[i + j * g.ldd] = hg::store<TD>(v);
    }
  }
}

// The dtype whose row (core/dtype.h) holds this cudaDataType_t (check() admitted only the FP8 types).
hg::DType hg_fp8(cudaDataType t) {
  for (const hg::DTypeInfo& d : hg::kDTypeInfo)
    if (hg::is_fp8(d.dtype) && d.cuda_data_type == static_cast<int>(t)) return d.dtype;
  return hg::DType::F8E4M3;  // unreachable: check() refused any other type
}
bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new (std::nothrow) cublasLtContext;
  return *handle != nullptr ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType) {
  return create(desc, Desc{.compute = computeType, .scale_type = scaleType});
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) { return destroy(desc); }

// The attributes cuda/blas_lt.cpp sets, and the harmless ones; any other is reported and refused.
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
  if (desc == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  Desc& d = state<Desc>(desc);
  bool ok = false;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: ok = read_attr(d.transa, buf, size); break;
    case CUBLASLT_MATMUL_DESC_TRANSB: ok = read_attr(d.transb, buf, size); break;
    case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER: ok = read_attr(d.a_scale, buf, size); break;
    case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER: ok = read_attr(d.b_scale, buf, size); break;
    case CUBLASLT_MATMUL_DESC_FAST_ACCUM: ok = read_attr(d.fast_accum, buf, size); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: ok = read_attr(d.epilogue, buf, size); break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: ok = read_attr(d.bias, buf, size); break;
    default:
      std::fprintf(stderr, "halfgrad emulator: cublasLtMatmulDescSetAttribute: attribute %d is not emulated\n",
                   static_cast<int>(attr));
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (ok && (attr == CUBLASLT_MATMUL_DESC_TRANSA || attr == CUBLASLT_MATMUL_DESC_TRANSB)) {
    const int32_t op = attr == CUBLASLT_MATMUL_DESC_TRANSA ? d.transa : d.transb;
    ok = op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C;
  }
  return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  if (rows > INT64_MAX || cols > INT64_MAX || ld < 0) return CUBLAS_STATUS_INVALID_VALUE;
  return create(layout, Layout{.type = type, .rows = rows, .cols = cols, .ld = ld});
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) { return destroy(layout); }

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) { return create(pref, Pref{}); }
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) { return destroy(pref); }

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t size) {
  if (pref == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  Pref& p = state<Pref>(pref);
  bool ok = false;
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: ok = read_attr(p.workspace, buf, size); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: ok = read_attr(p.align[0], buf, size); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: ok = read_attr(p.align[1], buf, size); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: ok = read_attr(p.align[2], buf, size); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: ok = read_attr(p.align[3], buf, size); break;
    default:
      std::fprintf(stderr, "halfgrad emulator: cublasLtMatmulPreferenceSetAttribute: attribute %d is not emulated\n",
                   static_cast<int>(attr));
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

// One algorithm for a problem the rules above allow, none otherwise (NOT_SUPPORTED, as cuBLASLt answers when
// it has nothing). It needs no workspace and works at 16-byte alignment, so every preference of 16 bytes or
// more admits it.
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t A, cublasLtMatrixLayout_t B,
                                              cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* count) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!desc || !A || !B || !C || !D || !pref || requested < 1 || !results || !count) return CUBLAS_STATUS_INVALID_VALUE;
  *count = 0;
  const Problem p = check(state<Desc>(desc), state<Layout>(A), state<Layout>(B), state<Layout>(C), state<Layout>(D));
  if (p.status != CUBLAS_STATUS_SUCCESS) return p.status;
  for (const uint32_t a : state<Pref>(pref).align)
    if (a != 0 && a < 16) return CUBLAS_STATUS_NOT_SUPPORTED;  // this emulation's one algorithm needs 16-byte operands
  results[0] = cublasLtMatmulHeuristicResult_t{};
  results[0].algo.data[0] = kAlgoTag;
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *count = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc,
                              const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspaceSize, cudaStream_t stream) {
  (void)workspace;
  (void)workspaceSize;
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!desc || !Adesc || !Bdesc || !Cdesc || !Ddesc || !alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
  if (algo != nullptr && algo->data[0] != kAlgoTag) return CUBLAS_STATUS_INVALID_VALUE;  // not one we handed out
  const Desc& d = state<Desc>(desc);
  const Layout &la = state<Layout>(Adesc), &lb = state<Layout>(Bdesc), &lc = state<Layout>(Cdesc),
               &ld = state<Layout>(Ddesc);
  const Problem p = check(d, la, lb, lc, ld);
  if (p.status != CUBLAS_STATUS_SUCCESS) return p.status;
  if (p.m == 0 || p.n == 0) return CUBLAS_STATUS_SUCCESS;
  if (!aligned16(A) || !aligned16(B) || !aligned16(C) || !aligned16(D)) return CUBLAS_STATUS_NOT_SUPPORTED;
  const char* fn = "cublasLtMatmul";
  // alpha and beta are host memory (the default pointer mode); the scales are device memory
  if (hg::emu::is_device_range(alpha, 4) || hg::emu::is_device_range(beta, 4)) {
    hg::emu::fail_sticky(std::string(fn) + ": alpha or beta points into device memory, but the pointer mode is host");
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  for (const void* s : {d.a_scale, d.b_scale}) {
    if (s == nullptr || hg::emu::is_device_range(s, sizeof(float))) continue;
    hg::emu::fail_sticky(std::string(fn) + ": a scale pointer (" + hg::emu::hex(s) +
                         ") is not device memory: illegal address");
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  const bool has_vector = d.epilogue != CUBLASLT_EPILOGUE_DEFAULT;
  if (has_vector) {  // the bias (read) or bias gradient (written): D's type, m or n values, 16-byte aligned
    const int64_t len = d.epilogue == CUBLASLT_EPILOGUE_BGRADB ? p.n : p.m;
    if (d.bias == nullptr || !aligned16(d.bias)) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (!hg::emu::check_matrix(fn, "bias", d.bias, out_bytes(ld.type), len, "the bias length", 0, 1))
      return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  Call g{.m = p.m, .n = p.n, .k = p.k,
         .a = static_cast<const uint8_t*>(A), .lda = la.ld,
         .b = static_cast<const uint8_t*>(B), .ldb = lb.ld,
         .c = C, .ldc = lc.ld, .d = D, .ldd = ld.ld,
         .alpha = *static_cast<const float*>(alpha), .beta = *static_cast<const float*>(beta),
         .op_a_n = d.transa == CUBLAS_OP_N, .op_b_n = d.transb == CUBLAS_OP_N, .tf32 = p.tf32,
         .epilogue = d.epilogue, .bias = d.bias};
  const size_t ob = out_bytes(ld.type), ib = p.fp8 ? 1 : ob;
  const int64_t a_extent = g.op_a_n ? la.ld * (p.k - 1) + p.m : la.ld * (p.m - 1) + p.k;
  const int64_t b_extent = g.op_b_n ? lb.ld * (p.n - 1) + p.k : lb.ld * (p.k - 1) + p.n;
  if (p.k > 0 && (!hg::emu::check_matrix(fn, "A", A, ib, a_extent, "the extent of A", 0, 1) ||
                  !hg::emu::check_matrix(fn, "B", B, ib, b_extent, "the extent of B", 0, 1)))
    return CUBLAS_STATUS_EXECUTION_FAILED;
  if ((g.beta != 0.0f && !hg::emu::check_matrix(fn, "C", C, ob, lc.ld * (p.n - 1) + p.m, "ldc*(n-1)+m", 0, 1)) ||
      !hg::emu::check_matrix(fn, "D", D, ob, ld.ld * (p.n - 1) + p.m, "ldd*(n-1)+m", 0, 1))
    return CUBLAS_STATUS_EXECUTION_FAILED;
  if (p.fp8) {
    g.a_scale = static_cast<const float*>(d.a_scale);
    g.b_scale = static_cast<const float*>(d.b_scale);
    g.ta = hg::fp8_decode_table(hg_fp8(la.type));
    g.tb = hg::fp8_decode_table(hg_fp8(lb.type));
  }
  const auto run = [&](auto in_tag, auto d_tag) {
    using TIn = decltype(in_tag);
    using TD = decltype(d_tag);
    return hg::emu::enqueue(stream, fn, [g] { reference<TIn, TD>(g); });
  };
  const auto with_out = [&](auto in_tag) {
    if (ld.type == CUDA_R_32F) return run(in_tag, float{});
    if (ld.type == CUDA_R_16BF) return run(in_tag, hg::bf16{});
    return run(in_tag, hg::f16{});
  };
  // FP8 inputs write any of the three outputs; the others write their own type (check() holds them to it)
  const cudaError_t e = p.fp8 ? with_out(uint8_t{})
                        : ld.type == CUDA_R_32F ? run(float{}, float{})
                        : ld.type == CUDA_R_16BF ? run(hg::bf16{}, hg::bf16{})
                                                  : run(hg::f16{}, hg::f16{});
  return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

}  // extern "C"
