// The CUDA backend's host plumbing, tested without a device:
//  * the row-major -> column-major GEMM mapping (cuda/blas.h) is executed by a naive column-major GEMM
//    that follows BLAS argument rules (including cuBLAS's leading-dimension checks and bounds) and is
//    compared with a naive row-major GEMM, for many shapes, all transposes, padded leading dims,
//    batches and stride-0 broadcasts: a wrong swap, ld, op or stride fails;
//  * with no GPU, is_available() is false without throwing and CUDA tensors throw hg::Error.
#if HG_HAS_CUDA

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "cuda/blas.h"
#include "halfgrad.h"
#include "ops/kernels/gemm.h"

using namespace hg;

namespace {

constexpr double kSentinel = -777.0;  // C padding and batch gaps must keep it

// Bounds-checked access to the test's three host buffers through the raw pointers of a GEMM.
struct Buffers {
  std::vector<double> a, b, c;
  const double& at(const void* p, int64_t i) const {
    const auto addr = reinterpret_cast<uintptr_t>(p);
    for (const std::vector<double>* v : {&a, &b, &c}) {
      const auto base = reinterpret_cast<uintptr_t>(v->data());
      if (addr >= base && addr < base + v->size() * sizeof(double)) {
        const int64_t off = static_cast<int64_t>((addr - base) / sizeof(double)) + i;
        if (off < 0 || off >= static_cast<int64_t>(v->size()))
          throw Error("gemm test: access at " + std::to_string(off) + " outside a buffer of " +
                      std::to_string(v->size()));
        return (*v)[static_cast<size_t>(off)];
      }
    }
    throw Error("gemm test: pointer is not one of the test buffers");
  }
  double& at_mut(void* p, int64_t i) { return const_cast<double&>(at(p, i)); }
};

// C = alpha op(A) op(B) + beta C, row-major, straight from ops/gemm.h's contract.
void rowmajor_gemm(const GemmArgs& g, Buffers& buf) {
  for (int64_t bt = 0; bt < g.batch; ++bt)
    for (int64_t i = 0; i < g.m; ++i)
      for (int64_t j = 0; j < g.n; ++j) {
        double acc = 0;
        for (int64_t l = 0; l < g.k; ++l) {
          const int64_t ia = g.trans_a == Trans::N ? i * g.lda + l : l * g.lda + i;
          const int64_t ib = g.trans_b == Trans::N ? l * g.ldb + j : j * g.ldb + l;
          acc += buf.at(g.a, bt * g.stride_a + ia) * buf.at(g.b, bt * g.stride_b + ib);
        }
        double& c = buf.at_mut(g.c, bt * g.stride_c + i * g.ldc + j);
        c = g.alpha * acc + (g.beta == 0 ? 0.0 : g.beta * c);
      }
}

// BLAS column-major semantics: X(i, j) = X[i + j*ldx], op_a(A) is m x k, op_b(B) is k x n. Rejects
// the leading dimensions cuBLAS rejects (CUBLAS_STATUS_INVALID_VALUE).
void colmajor_gemm(const cuda::ColMajorGemm& g, float alpha, float beta, Buffers& buf) {
  const int64_t a_rows = g.op_a == Trans::N ? g.m : g.k, b_rows = g.op_b == Trans::N ? g.k : g.n;
  if (g.lda < std::max<int64_t>(1, a_rows) || g.ldb < std::max<int64_t>(1, b_rows) ||
      g.ldc < std::max<int64_t>(1, g.m))
    throw Error("gemm test: cuBLAS would reject lda/ldb/ldc");
  for (int64_t bt = 0; bt < g.batch; ++bt)
    for (int64_t j = 0; j < g.n; ++j)
      for (int64_t i = 0; i < g.m; ++i) {
        double acc = 0;
        for (int64_t l = 0; l < g.k; ++l) {
          const int64_t ia = g.op_a == Trans::N ? i + l * g.lda : l + i * g.lda;
          const int64_t ib = g.op_b == Trans::N ? l + j * g.ldb : j + l * g.ldb;
          // row-major multiplies a*b, this b'*a': the same rounding, so the results are identical
          acc += buf.at(g.b, bt * g.stride_b + ib) * buf.at(g.a, bt * g.stride_a + ia);
        }
        double& c = buf.at_mut(g.c, bt * g.stride_c + i + j * g.ldc);
        c = alpha * acc + (beta == 0 ? 0.0 : beta * c);
      }
}

struct Case {
  int64_t m, n, k;
  Trans ta, tb;
  int64_t pad_a, pad_b, pad_c;  // leading-dim padding
  int64_t batch;
  bool bcast_a, bcast_b;  // batch stride 0
  float alpha, beta;
  std::string str() const {
    std::ostringstream os;
    os << "m=" << m << " n=" << n << " k=" << k << " ta=" << (ta == Trans::N ? 'N' : 'T')
       << " tb=" << (tb == Trans::N ? 'N' : 'T') << " pads=" << pad_a << "," << pad_b << "," << pad_c
       << " batch=" << batch << " bcast=" << bcast_a << bcast_b << " alpha=" << alpha << " beta=" << beta;
    return os.str();
  }
};

// Builds the GEMM of case c over fresh buffers (small integers: every sum is exact); gaps in C hold
// kSentinel.
GemmArgs make_case(const Case& c, Buffers& buf, std::mt19937& rng) {
  GemmArgs g;
  g.dtype = DType::F64;
  g.trans_a = c.ta;
  g.trans_b = c.tb;
  g.m = c.m, g.n = c.n, g.k = c.k;
  g.alpha = c.alpha, g.beta = c.beta;
  const int64_t a_rows = c.ta == Trans::N ? c.m : c.k, a_cols = c.ta == Trans::N ? c.k : c.m;
  const int64_t b_rows = c.tb == Trans::N ? c.k : c.n, b_cols = c.tb == Trans::N ? c.n : c.k;
  g.lda = a_cols + c.pad_a;
  g.ldb = b_cols + c.pad_b;
  g.ldc = c.n + c.pad_c;
  g.batch = c.batch;
  const int64_t a_size = a_rows * g.lda, b_size = b_rows * g.ldb, c_size = c.m * g.ldc + 3;  // + a batch gap
  g.stride_a = c.bcast_a ? 0 : a_size;
  g.stride_b = c.bcast_b ? 0 : b_size;
  g.stride_c = c_size;
  std::uniform_int_distribution<int> val(-4, 4);
  buf.a.assign(static_cast<size_t>(std::max<int64_t>(1, a_size * (c.bcast_a ? 1 : c.batch))), 0.0);
  buf.b.assign(static_cast<size_t>(std::max<int64_t>(1, b_size * (c.bcast_b ? 1 : c.batch))), 0.0);
  buf.c.assign(static_cast<size_t>(std::max<int64_t>(1, c_size * c.batch)), kSentinel);
  for (double& x : buf.a) x = val(rng);
  for (double& x : buf.b) x = val(rng);
  for (int64_t bt = 0; bt < c.batch; ++bt)
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) buf.c[static_cast<size_t>(bt * c_size + i * g.ldc + j)] = val(rng);
  g.a = buf.a.data();
  g.b = buf.b.data();
  g.c = buf.c.data();
  return g;
}

// Re-points a GEMM made over `from` at the same offsets in `to`.
GemmArgs rebase(GemmArgs g, const Buffers& from, Buffers& to) {
  g.a = to.a.data() + (static_cast<const double*>(g.a) - from.a.data());
  g.b = to.b.data() + (static_cast<const double*>(g.b) - from.b.data());
  g.c = to.c.data() + (static_cast<double*>(g.c) - from.c.data());
  return g;
}

std::vector<Case> all_cases() {
  const int64_t dims[][3] = {{1, 1, 1}, {2, 3, 4}, {4, 3, 2}, {5, 1, 7}, {1, 6, 3}, {7, 5, 1},
                             {3, 8, 5}, {9, 4, 6}, {16, 16, 16}, {13, 11, 17}, {2, 2, 0}};
  struct Batch {
    int64_t n;
    bool ba, bb;
  };
  const Batch batches[] = {{1, false, false}, {3, false, false}, {3, true, false}, {2, false, true}};
  const int64_t pads[][3] = {{0, 0, 0}, {2, 1, 3}};
  const float ab[][2] = {{1.f, 0.f}, {2.f, -1.f}};
  std::vector<Case> cases;
  for (const auto& d : dims)
    for (Trans ta : {Trans::N, Trans::T})
      for (Trans tb : {Trans::N, Trans::T})
        for (const Batch& b : batches)
          for (const auto& p : pads)
            for (const auto& s : ab)
              cases.push_back({d[0], d[1], d[2], ta, tb, p[0], p[1], p[2], b.n, b.ba, b.bb, s[0], s[1]});
  return cases;
}

}  // namespace

TEST_CASE("cuda gemm mapping: column-major call reproduces row-major GEMM", "[cuda][cpu]") {
  std::mt19937 rng(1234);
  const std::vector<Case> cases = all_cases();
  int checked = 0;
  for (const Case& c : cases) {
    INFO(c.str());
    Buffers row, col;
    const GemmArgs g = make_case(c, row, rng);
    col = row;
    const GemmArgs gc = rebase(g, row, col);
    rowmajor_gemm(g, row);
    const cuda::ColMajorGemm cm = cuda::to_col_major(gc);
    REQUIRE_NOTHROW(colmajor_gemm(cm, gc.alpha, gc.beta, col));
    REQUIRE(cm.batch == c.batch);
    REQUIRE(row.c == col.c);  // every element, sentinels in the padding and batch gaps included
    ++checked;
  }
  CHECK(checked == static_cast<int>(cases.size()));
  CHECK(checked >= 700);
}

TEST_CASE("cuda gemm mapping: the fields of the swap", "[cuda][cpu]") {
  // Y[B,out] = X W^T with W [out,in] (docs/ARCHITECTURE.md, "Facts the code relies on"): gemm(T, N, m=out, n=B, k=in, A=W, B=X).
  double x[6] = {}, w[12] = {}, y[8] = {};
  GemmArgs g;
  g.dtype = DType::F32;
  g.trans_a = Trans::N, g.trans_b = Trans::T;
  g.m = 2, g.n = 4, g.k = 3;
  g.a = x, g.lda = 3;
  g.b = w, g.ldb = 3;
  g.c = y, g.ldc = 4;
  g.batch = 5, g.stride_a = 6, g.stride_b = 0, g.stride_c = 8;
  const cuda::ColMajorGemm c = cuda::to_col_major(g);
  CHECK(c.op_a == Trans::T);
  CHECK(c.op_b == Trans::N);
  CHECK(c.m == 4);
  CHECK(c.n == 2);
  CHECK(c.k == 3);
  CHECK(c.a == static_cast<const void*>(w));
  CHECK(c.lda == 3);
  CHECK(c.b == static_cast<const void*>(x));
  CHECK(c.ldb == 3);
  CHECK(c.c == static_cast<void*>(y));
  CHECK(c.ldc == 4);
  CHECK(c.stride_a == 0);
  CHECK(c.stride_b == 6);
  CHECK(c.stride_c == 8);
  CHECK(c.batch == 5);
}

TEST_CASE("cuda gemm mapping: the reference catches an unswapped mapping", "[cuda][cpu]") {
  // The test's own teeth: passing row-major operands unswapped must not reproduce the result.
  std::mt19937 rng(7);
  const Case c{3, 5, 4, Trans::N, Trans::N, 0, 0, 0, 1, false, false, 1.f, 0.f};
  Buffers row, col;
  const GemmArgs g = make_case(c, row, rng);
  col = row;
  const GemmArgs gc = rebase(g, row, col);
  rowmajor_gemm(g, row);
  cuda::ColMajorGemm wrong = cuda::to_col_major(gc);
  std::swap(wrong.a, wrong.b);
  std::swap(wrong.lda, wrong.ldb);
  std::swap(wrong.m, wrong.n);
  bool rejected = false;
  try {
    colmajor_gemm(wrong, 1.f, 0.f, col);
  } catch (const Error&) {
    rejected = true;
  }
  CHECK((rejected || row.c != col.c));
}

TEST_CASE("cuda gemm mapping: leading dims are at least 1 for empty operands", "[cuda][cpu]") {
  GemmArgs g;
  g.m = 3, g.n = 2, g.k = 0;
  g.trans_a = Trans::N, g.trans_b = Trans::T;
  g.lda = 0, g.ldb = 0, g.ldc = 2;
  const cuda::ColMajorGemm c = cuda::to_col_major(g);
  CHECK(c.lda >= 1);
  CHECK(c.ldb >= 1);
  CHECK(c.ldc == 2);
}

TEST_CASE("cuda without a device: is_available is false and CUDA tensors throw", "[cuda][cpu]") {
  if (cuda::is_available()) {
    WARN("a CUDA device is present: the no-device behaviour is not tested here (tests/gpu covers the device)");
    return;
  }
  bool avail = true;
  REQUIRE_NOTHROW(avail = cuda::is_available());
  CHECK_FALSE(avail);
  CHECK(cuda::is_available() == avail);  // cached, still no throw
  CHECK(cuda::device_count() == 0);
  // libhalfgrad loaded the backend (found next to it) and the CUDA runtime said why there is no device.
  INFO(cuda::unavailable_reason());
  CHECK(cuda::unavailable_reason().find("could not be loaded") == std::string::npos);
  CHECK(cuda::unavailable_reason().find("cudaError") != std::string::npos);
  CHECK(cuda::version_info().find("CUDA runtime") != std::string::npos);

  CHECK_THROWS_AS(empty({2, 3}, {.device = Device::cuda()}), Error);
  CHECK_THROWS_AS(zeros({2, 3}, {.device = Device::cuda()}), Error);
  const Tensor x = ones({4});
  for (int attempt = 0; attempt < 2; ++attempt) {  // the failed registration is retried, and fails again
    try {
      (void)x.to(Device::cuda());
      FAIL("x.to(Device::cuda()) did not throw without a device");
    } catch (const Error& e) {
      const std::string msg = e.what();
      INFO(msg);
      CHECK(msg.find("no CUDA device is available") != std::string::npos);
      CHECK(msg.find("Device::cpu()") != std::string::npos);
    }
  }
  CHECK(memory::allocated(Device::cuda()) == 0);
}

#endif  // HG_HAS_CUDA
