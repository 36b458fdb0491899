// hg::cpu::gemm against hg::cpu::gemm_reference: every dtype, transpose, odd size, padded leading
// dimension, batch stride/broadcast and alpha/beta; padding and batch gaps in C must stay untouched.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/convert.h"
#include "core/cpu_features.h"
#include "core/error.h"
#include "core/half.h"
#include "cpu/gemm.h"
#include "cpu/onednn.h"
#include "ops/kernels/gemm.h"
#include "test_util.h"

using namespace hg;

namespace {

const DType kFloatTypes[] = {DType::F32, DType::F16, DType::BF16, DType::F64};
const Trans kTrans[] = {Trans::N, Trans::T};

// n elements of dtype dt in raw bytes; get/set go through double.
struct Buf {
  DType dt;
  std::vector<unsigned char> bytes;
  Buf(DType d, int64_t n) : dt(d), bytes(static_cast<size_t>(n) * dtype_size(d)) {}
  void* data() { return bytes.data(); }
  int64_t size() const { return static_cast<int64_t>(bytes.size() / dtype_size(dt)); }
  double get(int64_t i) const {
    return visit_dtype(dt, [&](auto tag) -> double {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, int64_t>) return 0;
      else return static_cast<double>(to_float(reinterpret_cast<const T*>(bytes.data())[i]));
    });
  }
  void set(int64_t i, double v) {  // rounds v to dt
    visit_dtype(dt, [&](auto tag) {
      using T = decltype(tag);
      T* p = reinterpret_cast<T*>(bytes.data()) + i;
      if constexpr (std::is_same_v<T, double>) *p = v;
      else if constexpr (std::is_same_v<T, float>) *p = static_cast<float>(v);
      else if constexpr (!std::is_same_v<T, int64_t>) *p = from_float<T>(static_cast<float>(v));
    });
  }
};

// Distance from the 16-bit value nearest x to its next neighbour away from zero: one output ulp.
double ulp16(DType dt, double x) {
  const float f = static_cast<float>(std::fabs(x));
  if (dt == DType::F16) {
    const f16 r = from_float<f16>(f);
    return to_float(f16{static_cast<uint16_t>(r.bits + 1)}) - to_float(r);
  }
  const bf16 r = from_float<bf16>(f);
  return to_float(bf16{static_cast<uint16_t>(r.bits + 1)}) - to_float(r);
}

double rel_tol(DType dt) { return dt == DType::F64 ? 1e-12 : 1e-5; }

enum class Batch { Strided, BroadcastA, BroadcastB, BroadcastAB };

struct Case {
  DType dt = DType::F32;
  Trans ta = Trans::N, tb = Trans::N;
  int64_t m = 1, n = 1, k = 1, pad = 0, batch = 1;
  Batch mode = Batch::Strided;
  float alpha = 1.f, beta = 0.f;
  bool c_f32 = false;  // F16/BF16 A and B into an F32 C
};

std::string describe(const Case& c) {
  std::ostringstream os;
  os << c.dt << " " << (c.ta == Trans::N ? 'N' : 'T') << (c.tb == Trans::N ? 'N' : 'T') << " m=" << c.m
     << " n=" << c.n << " k=" << c.k << " pad=" << c.pad << " batch=" << c.batch
     << " mode=" << int(c.mode) << " alpha=" << c.alpha << " beta=" << c.beta << (c.c_f32 ? " c_f32" : "");
  return os.str();
}

// Owns the operands of one case and the args pointing into them.
struct Problem {
  GemmArgs g;
  Buf a, b, c;
  Problem(const Case& cs, std::mt19937& rng)
      : a(cs.dt, 0), b(cs.dt, 0), c(cs.c_f32 ? DType::F32 : cs.dt, 0) {
    g.dtype = cs.dt, g.trans_a = cs.ta, g.trans_b = cs.tb, g.c_f32 = cs.c_f32;
    g.m = cs.m, g.n = cs.n, g.k = cs.k, g.alpha = cs.alpha, g.beta = cs.beta, g.batch = cs.batch;
    const int64_t ar = cs.ta == Trans::N ? cs.m : cs.k, ac = cs.ta == Trans::N ? cs.k : cs.m;
    const int64_t br = cs.tb == Trans::N ? cs.k : cs.n, bc = cs.tb == Trans::N ? cs.n : cs.k;
    g.lda = ac + cs.pad, g.ldb = bc + cs.pad, g.ldc = cs.n + cs.pad;
    const int64_t gap = cs.batch > 1 ? 5 : 0;  // unused elements between batch matrices
    const bool bca = cs.mode == Batch::BroadcastA || cs.mode == Batch::BroadcastAB;
    const bool bcb = cs.mode == Batch::BroadcastB || cs.mode == Batch::BroadcastAB;
    g.stride_a = bca ? 0 : ar * g.lda + gap;
    g.stride_b = bcb ? 0 : br * g.ldb + gap;
    g.stride_c = cs.m * g.ldc + gap;
    a = Buf(cs.dt, (bca ? 0 : cs.batch - 1) * g.stride_a + ar * g.lda);
    b = Buf(cs.dt, (bcb ? 0 : cs.batch - 1) * g.stride_b + br * g.ldb);
    c = Buf(c.dt, (cs.batch - 1) * g.stride_c + cs.m * g.ldc);
    std::uniform_real_distribution<double> u(-1, 1);
    for (Buf* x : {&a, &b, &c})
      for (int64_t i = 0; i < x->size(); ++i) x->set(i, u(rng));
    // beta == 0 must not read C (BLAS): NaN there would leak into the result if it did.
    if (cs.beta == 0)
      for (int64_t i = 0; i < c.size(); ++i) c.set(i, std::numeric_limits<double>::quiet_NaN());
    g.a = a.data(), g.b = b.data(), g.c = c.data();
  }
  double a_at(int64_t bt, int64_t i, int64_t p) const {
    const int64_t off = bt * g.stride_a;
    return a.get(g.trans_a == Trans::N ? off + i * g.lda + p : off + p * g.lda + i);
  }
  double b_at(int64_t bt, int64_t p, int64_t j) const {
    const int64_t off = bt * g.stride_b;
    return b.get(g.trans_b == Trans::N ? off + p * g.ldb + j : off + j * g.ldb + p);
  }
};

// Compares got (after gemm) with want (after gemm_reference), both started from c0. Returns the
// number of wrong elements and describes the first one in *first.
int64_t count_mismatches(const Problem& pr, const Buf& c0, const Buf& got, const Buf& want,
                         std::string* first) {
  const GemmArgs& g = pr.g;
  std::vector<char> is_out(static_cast<size_t>(got.size()), 0);
  int64_t bad = 0;
  auto report = [&](int64_t idx, const std::string& why) {
    if (bad++ == 0) *first = "element " + std::to_string(idx) + ": " + why;
  };
  for (int64_t bt = 0; bt < g.batch; ++bt)
    for (int64_t i = 0; i < g.m; ++i)
      for (int64_t j = 0; j < g.n; ++j) {
        const int64_t idx = bt * g.stride_c + i * g.ldc + j;
        is_out[idx] = 1;
        double mag = 0;
        for (int64_t p = 0; p < g.k; ++p) mag += std::fabs(pr.a_at(bt, i, p) * pr.b_at(bt, p, j));
        mag = std::fabs(g.alpha) * mag + (g.beta == 0 ? 0 : std::fabs(g.beta * c0.get(idx)));
        double tol = rel_tol(g.dtype) * mag;
        if ((g.dtype == DType::F16 || g.dtype == DType::BF16) && !g.c_f32) tol += ulp16(g.dtype, want.get(idx));
        const double x = got.get(idx), y = want.get(idx);
        if (!(std::fabs(x - y) <= tol))
          report(idx, "got " + std::to_string(x) + ", want " + std::to_string(y) + ", tol " + std::to_string(tol));
      }
  const size_t es = dtype_size(got.dt);
  for (int64_t idx = 0; idx < got.size(); ++idx)
    if (!is_out[idx] && std::memcmp(&got.bytes[idx * es], &c0.bytes[idx * es], es) != 0)
      report(idx, "padding or batch gap was written");
  return bad;
}

// The number of wrong elements of one random problem; `first` describes the first.
int64_t run_case(const Case& cs, uint32_t seed, std::string* first) {
  std::mt19937 rng(seed);
  Problem pr(cs, rng);
  const Buf c0 = pr.c;
  Buf want = pr.c;
  GemmArgs ref = pr.g;
  ref.c = want.data();
  cpu::gemm_reference(ref);
  cpu::gemm(pr.g);
  return count_mismatches(pr, c0, pr.c, want, first);
}

void check_case(const Case& cs, uint32_t seed = 1) {
  std::string first;
  const int64_t bad = run_case(cs, seed, &first);
  INFO(describe(cs) << ": " << bad << " wrong, first " << first);
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("gemm: every dtype, transpose, odd size and padded ld matches the reference", "[cpu][gemm][slow]") {
  const int64_t sizes[][3] = {{1, 1, 1}, {3, 5, 7}, {17, 33, 65}, {64, 784, 256}};
  for (DType dt : kFloatTypes)
    for (Trans ta : kTrans)
      for (Trans tb : kTrans)
        for (const auto& s : sizes)
          for (int64_t pad : {0, 3})
            check_case({.dt = dt, .ta = ta, .tb = tb, .m = s[0], .n = s[1], .k = s[2], .pad = pad});
}

// An F32 C from F16/BF16 operands (the FP8 GEMM's decoded operands): every path (oneDNN's native BF16,
// the widened F16 and the tiles of a large problem) writes the F32 accumulator without a 16-bit rounding.
TEST_CASE("gemm: F16 and BF16 operands into an F32 C", "[cpu][gemm][slow]") {
  const int64_t sizes[][3] = {{1, 1, 1}, {3, 5, 7}, {17, 33, 65}, {300, 200, 784}};
  for (DType dt : {DType::F16, DType::BF16})
    for (Trans ta : kTrans)
      for (Trans tb : kTrans)
        for (const auto& s : sizes)
          for (float beta : {0.f, 1.f})
            check_case({.dt = dt, .ta = ta, .tb = tb, .m = s[0], .n = s[1], .k = s[2], .pad = 2, .alpha = 0.75f,
                        .beta = beta, .c_f32 = true});
  for (Batch mode : {Batch::Strided, Batch::BroadcastB})
    check_case({.dt = DType::BF16, .m = 9, .n = 11, .k = 13, .pad = 1, .batch = 3, .mode = mode, .c_f32 = true});
  // the F32 C keeps what a 16-bit C would round away: 1 + 2^-12 is not a BF16 or F16 value
  for (DType dt : {DType::F16, DType::BF16}) {
    Buf a(dt, 2), b(dt, 2), c(DType::F32, 1);
    a.set(0, 1.0), a.set(1, 1.0 / 4096), b.set(0, 1.0), b.set(1, 1.0);
    const GemmArgs g{.dtype = dt, .m = 1, .n = 1, .k = 2, .a = a.data(), .lda = 2, .b = b.data(), .ldb = 1,
                     .c = c.data(), .ldc = 1, .c_f32 = true};
    cpu::gemm(g);
    CHECK(c.get(0) == 1.0 + 1.0 / 4096);
  }
  Buf a(DType::F32, 1), c(DType::F32, 1);
  const GemmArgs bad{.dtype = DType::F32, .m = 1, .n = 1, .k = 1, .a = a.data(), .lda = 1, .b = a.data(), .ldb = 1,
                     .c = c.data(), .ldc = 1, .c_f32 = true};
  CHECK_THROWS_WITH(cpu::gemm(bad), Catch::Contains("c_f32") && Catch::Contains("F16 or BF16"));
}

// A product of at least 1024 rows with a transposed B of at least 2^20 elements: oneDNN's AVX2 engine (the
// isa_cap_avx2 run of this test) transposes B once into a plain scratch first; the result must equal the same
// product with B stored plain, bit for bit on that engine (the same tiles read the same values), and match a
// double-precision reference on sampled rows everywhere.
TEST_CASE("gemm: a large product with a transposed B matches the plain B and the reference", "[cpu][gemm]") {
  const int64_t m = 1024, n = 1040, k = 1024;  // n not a multiple of 1024: no row padding
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  std::vector<float> a(static_cast<size_t>(m * k)), bt(static_cast<size_t>(n * k)), b(static_cast<size_t>(k * n));
  for (float& v : a) v = nd(rng);
  for (float& v : bt) v = nd(rng);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t p = 0; p < k; ++p) b[static_cast<size_t>(p * n + j)] = bt[static_cast<size_t>(j * k + p)];
  std::vector<float> c_t(static_cast<size_t>(m * n)), c_n(static_cast<size_t>(m * n));
  GemmArgs g{.dtype = DType::F32, .trans_a = Trans::N, .trans_b = Trans::T, .m = m, .n = n, .k = k, .a = a.data(),
             .lda = k, .b = bt.data(), .ldb = k, .c = c_t.data(), .ldc = n};
  cpu::gemm(g);
  g.trans_b = Trans::N, g.b = b.data(), g.ldb = n, g.c = c_n.data();
  cpu::gemm(g);
  const std::string engine = cpu::gemm_engine(DType::F32);
  if (engine.rfind("onednn:", 0) == 0 && engine.rfind("onednn:avx512", 0) != 0) CHECK(c_t == c_n);
  int64_t bad = 0;
  for (int64_t i : {int64_t{0}, int64_t{517}, m - 1})
    for (int64_t j = 0; j < n; ++j) {
      double want = 0, mag = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double prod = double(a[static_cast<size_t>(i * k + p)]) * double(bt[static_cast<size_t>(j * k + p)]);
        want += prod;
        mag += std::fabs(prod);
      }
      const double got = c_t[static_cast<size_t>(i * n + j)], tol = 1e-5 * mag;
      bad += std::fabs(got - want) > tol;
      bad += std::fabs(double(c_n[static_cast<size_t>(i * n + j)]) - want) > tol;
    }
  CHECK(bad == 0);
}

TEST_CASE("gemm: alpha and beta", "[cpu][gemm]") {
  const int64_t sizes[][3] = {{3, 5, 7}, {17, 33, 65}};
  for (DType dt : kFloatTypes)
    for (Trans ta : kTrans)
      for (Trans tb : kTrans)
        for (const auto& s : sizes)
          for (float alpha : {1.f, -1.5f, 0.25f})
            for (float beta : {0.f, 1.f, 0.5f})
              check_case({.dt = dt, .ta = ta, .tb = tb, .m = s[0], .n = s[1], .k = s[2], .pad = 1,
                          .alpha = alpha, .beta = beta});
}

TEST_CASE("gemm: batch with strides and broadcast operands", "[cpu][gemm]") {
  for (DType dt : kFloatTypes)
    for (Trans ta : kTrans)
      for (Trans tb : kTrans)
        for (Batch mode : {Batch::Strided, Batch::BroadcastA, Batch::BroadcastB, Batch::BroadcastAB})
          for (float beta : {0.f, 0.5f}) {
            check_case({.dt = dt, .ta = ta, .tb = tb, .m = 17, .n = 33, .k = 65, .pad = 2, .batch = 3,
                        .mode = mode, .alpha = 0.75f, .beta = beta});
            check_case({.dt = dt, .ta = ta, .tb = tb, .m = 1, .n = 3, .k = 2, .batch = 3, .mode = mode,
                        .beta = beta});
          }
  for (DType dt : {DType::F32, DType::BF16, DType::F16})  // large enough for oneDNN's blocked kernels
    check_case({.dt = dt, .m = 64, .n = 200, .k = 256, .pad = 4, .batch = 3, .mode = Batch::BroadcastB});
}

TEST_CASE("gemm: plans are reused with new pointers and kept apart by alpha", "[cpu][gemm]") {
  for (DType dt : kFloatTypes)
    for (uint32_t seed : {1u, 2u, 3u}) {
      check_case({.dt = dt, .m = 9, .n = 10, .k = 11, .alpha = 1.f}, seed);
      check_case({.dt = dt, .m = 9, .n = 10, .k = 11, .alpha = 2.f}, seed);
    }
}

TEST_CASE("gemm: concurrent calls from several threads", "[cpu][gemm]") {
  std::vector<int64_t> bad(4, -1);
  test::run_threads(4, [&bad](int t) {
    const Case cs{.dt = t % 2 ? DType::BF16 : DType::F32, .m = 33, .n = 40, .k = 50, .beta = 0.5f};
    int64_t total = 0;
    std::string first;
    for (uint32_t rep = 0; rep < 20; ++rep) total += run_case(cs, rep + 100 * t, &first);
    bad[t] = total;
  });
  for (int64_t b : bad) CHECK(b == 0);
}

TEST_CASE("gemm: k == 0 gives beta*C and empty outputs touch nothing", "[cpu][gemm]") {
  for (DType dt : kFloatTypes)
    for (float beta : {0.f, 1.f, 0.5f}) {
      Buf c(dt, 6);
      for (int64_t i = 0; i < 6; ++i) c.set(i, beta == 0 ? std::nan("") : double(i) - 2.5);
      const GemmArgs g{.dtype = dt, .m = 2, .n = 3, .k = 0, .beta = beta, .lda = 0, .ldb = 3,
                       .c = c.data(), .ldc = 3};
      cpu::gemm(g);
      for (int64_t i = 0; i < 6; ++i) CHECK(c.get(i) == (beta == 0 ? 0.0 : beta * (double(i) - 2.5)));
    }
  CHECK_NOTHROW(cpu::gemm({.m = 0, .n = 5, .k = 4, .lda = 4, .ldb = 5, .ldc = 5}));
  CHECK_NOTHROW(cpu::gemm({.m = 5, .n = 0, .k = 4, .lda = 4, .ldb = 0, .ldc = 0}));
}

TEST_CASE("gemm: the comparison catches a single wrong element", "[cpu][gemm]") {
  for (DType dt : kFloatTypes) {
    std::mt19937 rng(7);
    Problem pr({.dt = dt, .m = 5, .n = 6, .k = 7, .pad = 1, .beta = 1.f}, rng);
    const Buf c0 = pr.c;
    cpu::gemm(pr.g);
    Buf want = pr.c;
    std::string first;
    CHECK(count_mismatches(pr, c0, pr.c, want, &first) == 0);
    pr.c.set(2 * pr.g.ldc + 3, pr.c.get(2 * pr.g.ldc + 3) + 0.01);
    CHECK(count_mismatches(pr, c0, pr.c, want, &first) == 1);
    pr.c.set(2 * pr.g.ldc + 6, 42.0);  // padding column
    CHECK(count_mismatches(pr, c0, pr.c, want, &first) == 2);
  }
}

TEST_CASE("gemm: engine names follow this CPU and oneDNN's ISA", "[cpu][gemm]") {
  const std::string f32 = cpu::gemm_engine(DType::F32);
  INFO(cpu_summary() << "; oneDNN ISA " << cpu::onednn_isa() << "; F32 engine " << f32);
  CHECK((f32 == "eigen" || f32 == "onednn:" + cpu::onednn_isa()));
  const std::string widened = std::string("widen:") + convert_isa() + "+" + f32;
  CHECK(cpu::gemm_engine(DType::F16) == widened);
  const std::string bf16 = cpu::gemm_engine(DType::BF16);
  CHECK(bf16 == (cpu::onednn_native(DType::BF16) ? f32 : widened));
  // BF16 is multiplied directly only with BF16 dot products in the CPU and in oneDNN's (capped) ISA
  if (!cpu_features().avx512_bf16 && !cpu_features().amx_bf16) CHECK(bf16 == widened);
  const std::string isa = cpu::onednn_isa();
  if (isa != "avx512_core_bf16" && isa != "avx512_core_amx") CHECK(bf16 == widened);
  CHECK(cpu::gemm_engine(DType::F64) == "eigen");
  CHECK_THROWS_AS(cpu::gemm_engine(DType::I64), Error);
}

TEST_CASE("gemm_tiles: small products are one tile and a recipe layer's backward GEMMs are cut in few", "[cpu][gemm]") {
  // the count bench_gemm prints (docs/PERFORMANCE.md: why 16 threads gained 3.2x): by the shape alone
  CHECK(cpu::gemm_tiles({.m = 32, .n = 64, .k = 64}) == 1);
  CHECK(cpu::gemm_tiles({.m = 0, .n = 64, .k = 64}) == 1);
  for (const DType dt : {DType::F32, DType::BF16, DType::F16}) {
    INFO(dtype_name(dt));
    // 4 where oneDNN's AVX-512 matmul packs a transposed B per tile (its columns are then not cut), else 32
    const bool avx512 = cpu::gemm_engine(DType::F32).rfind("onednn:avx512", 0) == 0;
    CHECK(cpu::gemm_tiles({.dtype = dt, .trans_b = Trans::T, .m = 256, .n = 1024, .k = 1024}) == (avx512 ? 4 : 32));
    CHECK(cpu::gemm_tiles({.dtype = dt, .m = 256, .n = 1024, .k = 1024}) == 4);
    CHECK(cpu::gemm_tiles({.dtype = dt, .trans_a = Trans::T, .m = 1024, .n = 1024, .k = 256}) == 2);
    CHECK(cpu::gemm_tiles({.dtype = dt, .m = 4096, .n = 4096, .k = 4096, .batch = 1}) == 64);  // the most tiles
  }
}

TEST_CASE("gemm: invalid arguments throw hg::Error naming the field", "[cpu][gemm]") {
  std::vector<float> a(64), b(64), c(64);
  const GemmArgs ok{.m = 3, .n = 4, .k = 5, .a = a.data(), .lda = 5, .b = b.data(), .ldb = 4,
                    .c = c.data(), .ldc = 4};
  REQUIRE_NOTHROW(cpu::gemm(ok));
  auto expect = [&](GemmArgs g, const char* field) {
    INFO("field " << field);
    CHECK_THROWS_MATCHES(cpu::gemm(g), Error, Catch::Matchers::Predicate<Error>([&](const Error& e) {
                           const std::string s = e.what();
                           return s.find("gemm") != std::string::npos && s.find(field) != std::string::npos;
                         }));
    CHECK_THROWS_AS(cpu::gemm_reference(g), Error);
  };
  GemmArgs g = ok;
  g.dtype = DType::I64, expect(g, "I64");
  g = ok, g.m = -1, expect(g, "m=-1");
  g = ok, g.n = -2, expect(g, "n=-2");
  g = ok, g.k = -3, expect(g, "k=-3");
  g = ok, g.batch = 0, expect(g, "batch=0");
  g = ok, g.lda = 4, expect(g, "lda=4");
  g = ok, g.trans_a = Trans::T, g.lda = 2, expect(g, "lda=2 is smaller than m=3 for trans_a=T");
  g = ok, g.ldb = 3, expect(g, "ldb=3");
  g = ok, g.trans_b = Trans::T, expect(g, "ldb=4 is smaller than k=5 for trans_b=T");
  g = ok, g.ldc = 3, expect(g, "ldc=3");
  g = ok, g.batch = 2, g.stride_a = -1, expect(g, "stride_a=-1");
  g = ok, g.batch = 2, g.stride_c = 11, expect(g, "stride_c=11");
  g = ok, g.a = nullptr, expect(g, "a or b is null");
  g = ok, g.b = nullptr, expect(g, "a or b is null");
  g = ok, g.c = nullptr, expect(g, "c is null");
  // the FP8 GEMM's fields (ops/kernels/fp8.h) are refused by this one, which scales by alpha
  const float one = 1.0f;
  g = ok, g.dtype = DType::F8E4M3, expect(g, "go to the native FP8 GEMM");
  g = ok, g.b_dtype = DType::F8E5M2, expect(g, "F32 x F8E5M2");
  g = ok, g.b_dtype = DType::F16, expect(g, "b_dtype F16 differs from dtype F32");
  g = ok, g.scale_a = &one, expect(g, "belong to the FP8 GEMM");
  g = ok, g.query = true, expect(g, "belong to the FP8 GEMM");
  g = ok, g.b_dtype = DType::F32;
  REQUIRE_NOTHROW(cpu::gemm(g));  // b_dtype equal to dtype is what leaving it out means
  CHECK_THROWS_WITH(cpu::gemm(GemmArgs{.m = 3, .n = 4, .k = 4, .a = a.data(), .lda = 3, .b = b.data(),
                                       .ldb = 4, .c = c.data(), .ldc = 4}),
                    "gemm: lda=3 is smaller than k=4 for trans_a=N; pass lda >= k");
}
