// The GEMM contract's checks (ops/kernels/gemm.h), one copy for every backend.
#include "ops/kernels/gemm.h"

#include "core/error.h"

namespace hg {
namespace {

char trans_name(Trans t) { return t == Trans::N ? 'N' : 'T'; }

void check_ld(const char* ld_name, int64_t ld, const char* dim_name, int64_t dim, const char* flag, Trans t) {
  HG_CHECK(ld >= dim, "gemm: ", ld_name, "=", ld, " is smaller than ", dim_name, "=", dim, " for ", flag, "=",
           trans_name(t), "; pass ", ld_name, " >= ", dim_name);
}

}  // namespace

void check_gemm_args(const GemmArgs& g) {
  HG_CHECK(g.dtype != DType::I64, "gemm: dtype I64 is not supported; use F32, F16, BF16 or F64");
  HG_CHECK(!is_fp8(g.dtype) && !is_fp8(gemm_b_dtype(g)), "gemm: FP8 operands (", g.dtype, " x ", gemm_b_dtype(g),
           ") go to the native FP8 GEMM (fp8_gemm_kernels, ops/kernels/fp8.h) or are decoded to BF16 first");
  HG_CHECK(gemm_b_dtype(g) == g.dtype, "gemm: b_dtype ", gemm_b_dtype(g), " differs from dtype ", g.dtype,
           "; A and B share one dtype (only the FP8 GEMM mixes formats)");
  HG_CHECK(g.epilogue == GemmEpilogue::None && !g.bias && !g.bias_grad, "gemm: an epilogue, bias or bias_grad ",
           "belongs to the GEMM with an epilogue (gemm_epilogue_kernels); this GEMM computes alpha*op(A)op(B)+beta*C");
  HG_CHECK(!g.scale_a && !g.scale_b && !g.query, "gemm: scale_a, scale_b and query belong to the FP8 GEMM ",
           "(fp8_gemm_kernels); this GEMM scales by alpha and always runs");
  HG_CHECK(!g.c_f32 || g.dtype == DType::F16 || g.dtype == DType::BF16, "gemm: c_f32 (an F32 C) takes F16 or BF16 ",
           "A and B, not ", g.dtype, "; for ", g.dtype, " operands leave c_f32 false");
  HG_CHECK(g.m >= 0 && g.n >= 0 && g.k >= 0, "gemm: m=", g.m, ", n=", g.n, ", k=", g.k, " must all be >= 0");
  HG_CHECK(g.batch >= 1, "gemm: batch=", g.batch, " must be >= 1");
  check_ld("lda", g.lda, g.trans_a == Trans::N ? "k" : "m", g.trans_a == Trans::N ? g.k : g.m, "trans_a", g.trans_a);
  check_ld("ldb", g.ldb, g.trans_b == Trans::N ? "n" : "k", g.trans_b == Trans::N ? g.n : g.k, "trans_b", g.trans_b);
  HG_CHECK(g.ldc >= g.n, "gemm: ldc=", g.ldc, " is smaller than n=", g.n, "; pass ldc >= n");
  HG_CHECK(g.stride_a >= 0 && g.stride_b >= 0 && g.stride_c >= 0, "gemm: stride_a=", g.stride_a,
           ", stride_b=", g.stride_b, ", stride_c=", g.stride_c, " must be >= 0 (0 broadcasts A or B)");
  const int64_t c_extent = g.m > 0 && g.n > 0 ? (g.m - 1) * g.ldc + g.n : 0;
  HG_CHECK(g.batch == 1 || g.stride_c >= c_extent, "gemm: stride_c=", g.stride_c, " makes the ", g.batch,
           " C matrices overlap; pass stride_c >= (m-1)*ldc+n = ", c_extent);
  const bool computes = g.m > 0 && g.n > 0 && g.k > 0;
  HG_CHECK(!computes || (g.a && g.b), "gemm: a or b is null for m=", g.m, ", n=", g.n, ", k=", g.k);
  HG_CHECK(c_extent == 0 || g.c, "gemm: c is null for m=", g.m, ", n=", g.n);
}

void check_gemm_epilogue_args(const GemmArgs& g) {
  GemmArgs plain = g;
  plain.epilogue = GemmEpilogue::None;
  plain.bias = nullptr;
  plain.bias_grad = nullptr;
  check_gemm_args(plain);
  HG_CHECK(g.epilogue != GemmEpilogue::None, "gemm_epilogue: epilogue None is the plain GEMM (gemm_kernels)");
  HG_CHECK(g.dtype == DType::F32 || g.dtype == DType::F16 || g.dtype == DType::BF16, "gemm_epilogue: dtype ", g.dtype,
           " has no GEMM epilogue; use F32, F16 or BF16 (or the plain GEMM and separate kernels)");
  HG_CHECK(g.batch == 1 && g.beta == 0.f && !g.c_f32, "gemm_epilogue: batch=", g.batch, ", beta=", g.beta,
           ", c_f32=", g.c_f32, "; an epilogue GEMM takes batch 1, beta 0 and C in the operands' dtype");
  const bool wants_bias = g.epilogue == GemmEpilogue::Bias || g.epilogue == GemmEpilogue::BiasRelu;
  HG_CHECK(wants_bias == (g.bias != nullptr), "gemm_epilogue: bias is ", g.bias ? "set" : "null",
           " for this epilogue; Bias and BiasRelu take bias (n values), BiasGradA does not");
  HG_CHECK((g.epilogue == GemmEpilogue::BiasGradA) == (g.bias_grad != nullptr), "gemm_epilogue: bias_grad is ",
           g.bias_grad ? "set" : "null", " for this epilogue; BiasGradA writes bias_grad (m values), the others do not");
}

}  // namespace hg
