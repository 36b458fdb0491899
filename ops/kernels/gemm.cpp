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

}  // namespace hg
