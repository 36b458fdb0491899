// The math of every elementwise op (ops/functors.h), forward and derivatives, at special values:
// +-0, +-inf, NaN, subnormals, huge inputs, exp overflow, typical values; in float and double compute.
// References are long double <cmath> evaluations of the textbook formula, rounded to the compute type.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "ops/functors.h"

using namespace hg;
using LD = long double;

namespace {

constexpr LD kInf = std::numeric_limits<LD>::infinity();
constexpr LD kNaN = std::numeric_limits<LD>::quiet_NaN();
constexpr LD kA = 0.79788456080286535587989211986876373L;   // sqrt(2/pi)
constexpr LD kB = 0.044715L;
constexpr LD kInvSqrt2 = 0.70710678118654752440084436210484904L;
constexpr LD kInvSqrt2Pi = 0.39894228040143267793994605993438187L;

// float 1e-40 is subnormal, double 1e-310 is subnormal (0 in float); 88.8/89 overflow expf,
// 709.7/710 bracket exp's overflow in double.
const std::vector<LD> kSpecial = {0.0L,   -0.0L,   kInf,  -kInf, kNaN,   1e-40L, -1e-40L, 1e-310L, 1e30L,
                                  -1e30L, 88.8L,   89.0L, -88.8L, -89.0L, 709.7L, 710.0L,  0.5L,    -0.5L,
                                  1.0L,   -1.0L,   2.5L,  -3.0L, 10.0L,  -10.0L, 0.1L,    3.0L,    1e-3L};
const std::vector<LD> kGrid = {0.0L, -0.0L, kInf, -kInf, kNaN, 1e-40L, 1e30L, -1e30L, 2.5L, -1.5L, 1.0L, 3.0L};

// String building without operator+ on literals (GCC 12's -Wrestrict false positive, PR 105329).
template <class... A>
std::string cat(const A&... a) {
  std::ostringstream os;
  (os << ... << a);
  return os.str();
}

template <class C> constexpr LD kRtol = std::is_same_v<C, float> ? 1e-6L : 1e-14L;

std::string fmt(LD v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.17Lg", v);
  return b;
}

// got must equal ref rounded to C: NaN matches NaN, inf matches inf exactly, finite values within
// rtol * (|ref| + scale) plus the smallest normal (results below the normal range may flush).
// scale > 0 admits the cancellation a formula has by design (gelu's 1 + tanh, 1 + erf tails).
template <class C>
void expect(const std::string& what, C got, LD ref_ld, LD scale = 0, bool zero_sign = false) {
  const C ref = static_cast<C>(ref_ld);
  INFO(what << ": got " << fmt(got) << ", expected " << fmt(ref_ld));
  if (std::isnan(ref)) {
    CHECK(std::isnan(got));
  } else if (std::isinf(ref)) {
    CHECK(got == ref);
  } else {
    REQUIRE(std::isfinite(got));
    const LD tol = kRtol<C> * (std::fabs(ref_ld) + scale) + std::numeric_limits<C>::min();
    CHECK(std::fabs(static_cast<LD>(got) - ref_ld) <= tol);
    if (zero_sign && ref == 0) CHECK(std::signbit(got) == std::signbit(ref));
  }
}

// Checks a unary functor at every special value. ref(x) is f(x); dref(x, y, dy) is the derivative,
// with y the functor's own (rounded) output, as backward receives it. cancel: the formula's
// cancellation scale at x (0 for none). nan_grad: whether the derivative at NaN is specified.
// grad_scale: an absolute scale for the derivative's tolerance (tanh's 1 - y*y cancels near |y| = 1).
template <class C, class F, class Ref, class DRef>
void check_unary(const std::string& name, F f, Ref ref, DRef dref, bool cancel = false, bool nan_grad = true,
                 LD grad_scale = 0) {
  const C dy = C(1.5);
  for (LD xl : kSpecial) {
    const C x = static_cast<C>(xl);
    const LD scale = cancel && std::isfinite(x) ? std::fabs(static_cast<LD>(x)) + 1 : 0;
    const C y = f(x);
    expect<C>(cat(name, "(", fmt(x), ")"), y, ref(static_cast<LD>(x)), scale, true);
    if (std::isnan(x) && !nan_grad) continue;
    expect<C>(cat(name, ".grad(", fmt(x), ")"), f.grad(x, y, dy), dref(static_cast<LD>(x), static_cast<LD>(y), dy),
              scale + grad_scale);
  }
}

LD gelu_tanh(LD x) { return 0.5L * x * (1 + std::tanh(kA * (x + kB * x * x * x))); }
LD gelu_tanh_d(LD x) {
  if (std::isinf(x)) return x > 0 ? 1 : 0;  // the limits; the formula below is inf * 0 there
  const LD t = std::tanh(kA * (x + kB * x * x * x));
  return 0.5L * (1 + t) + 0.5L * x * (1 - t * t) * kA * (1 + 3 * kB * x * x);
}
LD gelu_erf(LD x) { return 0.5L * x * (1 + std::erf(x * kInvSqrt2)); }
LD gelu_erf_d(LD x) {
  if (std::isinf(x)) return x > 0 ? 1 : 0;
  return 0.5L * (1 + std::erf(x * kInvSqrt2)) + x * std::exp(-0.5L * x * x) * kInvSqrt2Pi;
}

template <class C>
void check_all_unary() {
  using std::exp, std::log, std::sqrt, std::fabs, std::tanh, std::pow, std::isnan;
  check_unary<C>("neg", fn::Neg{}, [](LD x) { return -x; }, [](LD, LD, LD dy) { return -dy; });
  check_unary<C>("exp", fn::Exp{}, [](LD x) { return exp(x); }, [](LD, LD y, LD dy) { return dy * y; });
  check_unary<C>("log", fn::Log{}, [](LD x) { return log(x); }, [](LD x, LD, LD dy) { return dy / x; });
  check_unary<C>("sqrt", fn::Sqrt{}, [](LD x) { return sqrt(x); }, [](LD, LD y, LD dy) { return dy / (2 * y); });
  check_unary<C>("rsqrt", fn::Rsqrt{}, [](LD x) { return 1 / sqrt(x); },
                 [](LD, LD y, LD dy) { return -0.5L * dy * y * y * y; });
  // abs and relu: the gradient at 0 is 0 (torch); at NaN it is not specified here
  check_unary<C>("abs", fn::Abs{}, [](LD x) { return fabs(x); },
                 [](LD x, LD, LD dy) { return x > 0 ? dy : x < 0 ? -dy : 0; }, false, false);
  check_unary<C>("relu", fn::Relu{}, [](LD x) { return isnan(x) ? x : x > 0 ? x : 0; },
                 [](LD x, LD, LD dy) { return x > 0 ? dy : 0; }, false, false);
  check_unary<C>("sigmoid", fn::Sigmoid{}, [](LD x) { return 1 / (1 + exp(-x)); },
                 [](LD, LD y, LD dy) { return dy * y * (1 - y); });
  check_unary<C>("tanh", fn::Tanh{}, [](LD x) { return tanh(x); }, [](LD, LD y, LD dy) { return dy * (1 - y * y); },
                 false, true, 1);
  // gelu(-inf) is -inf * 0 = NaN in both forms, as in PyTorch
  check_unary<C>("gelu_tanh", fn::GeluTanh{}, gelu_tanh, [](LD x, LD, LD dy) { return dy * gelu_tanh_d(x); }, true);
  check_unary<C>("gelu_erf", fn::GeluErf{}, gelu_erf, [](LD x, LD, LD dy) { return dy * gelu_erf_d(x); }, true);
  check_unary<C>("erf", fn::Erf{}, [](LD x) { return std::erf(x); },
                 [](LD x, LD, LD dy) { return dy * 2 / std::sqrt(3.14159265358979323846L) * std::exp(-x * x); });
  // silu(-inf) is -inf * 0 = NaN, as in PyTorch (x / (1 + exp(-x)))
  check_unary<C>("silu", fn::Silu{}, [](LD x) { return x / (1 + exp(-x)); },
                 [](LD x, LD, LD dy) { const LD s = 1 / (1 + exp(-x)); return dy * s * (1 + x * (1 - s)); }, true);
  for (double e : {2.0, 3.0, 0.5, -1.0, 0.0, 1.0, 2.5, -0.5}) {
    const LD el = static_cast<C>(e);
    check_unary<C>(cat("pow^", fmt(e)), fn::PowScalar{e}, [el](LD x) { return pow(x, el); },
                   [el](LD x, LD, LD dy) { return el == 0 ? 0 : dy * el * pow(x, el - 1); });  // torch: 0 for e = 0
  }
  for (auto [lo, hi] : {std::pair{-1.0, 2.0}, std::pair{0.0, 0.0}, std::pair{-1e30, 1e-40}}) {
    const LD l = static_cast<C>(lo), h = static_cast<C>(hi);
    // torch.clamp: NaN stays NaN, its gradient is 0; the bounds themselves pass the gradient
    check_unary<C>(cat("clamp[", fmt(lo), ",", fmt(hi), "]"), fn::Clamp{lo, hi},
                   [l, h](LD x) { return isnan(x) ? x : x < l ? l : x > h ? h : x; },
                   [l, h](LD x, LD, LD dy) { return x >= l && x <= h ? dy : 0; });
  }
  for (double s : {0.1, -3.0, 1e30, 0.0, 1e-40}) {
    const LD sl = static_cast<C>(s);  // the scalar is rounded to the compute type, as in torch
    const std::string p = cat("[", fmt(s), "]");
    check_unary<C>(cat("add", p), fn::AddScalar{s}, [sl](LD x) { return x + sl; }, [](LD, LD, LD dy) { return dy; });
    check_unary<C>(cat("mul", p), fn::MulScalar{s}, [sl](LD x) { return x * sl; }, [sl](LD, LD, LD dy) { return dy * sl; });
    check_unary<C>(cat("div", p), fn::DivScalar{s}, [sl](LD x) { return x / sl; }, [sl](LD, LD, LD dy) { return dy / sl; });
    check_unary<C>(cat("rsub", p), fn::RsubScalar{s}, [sl](LD x) { return sl - x; }, [](LD, LD, LD dy) { return -dy; });
    check_unary<C>(cat("rdiv", p), fn::RdivScalar{s}, [sl](LD x) { return sl / x; },
                   [sl](LD x, LD, LD dy) { return -dy * sl / (x * x); });
  }
}

}  // namespace

TEST_CASE("unary functors at special values, float compute", "[functors]") { check_all_unary<float>(); }
TEST_CASE("unary functors at special values, double compute", "[functors]") { check_all_unary<double>(); }

TEMPLATE_TEST_CASE("named special cases", "[functors]", float, double) {
  using C = TestType;
  const C inf = std::numeric_limits<C>::infinity(), nan = std::numeric_limits<C>::quiet_NaN();
  CHECK(std::isnan(fn::Relu{}(nan)));
  CHECK(std::isnan(fn::Maximum{}(nan, C(1))));
  CHECK(std::isnan(fn::Maximum{}(C(1), nan)));
  CHECK(std::isnan(fn::Minimum{}(nan, C(1))));
  CHECK(std::isnan(fn::Minimum{}(C(1), nan)));
  CHECK(std::isnan(fn::Clamp{-1, 1}(nan)));
  CHECK(fn::GeluTanh{}.grad(C(1e30), C(0), C(1)) == 1);
  CHECK(fn::GeluTanh{}.grad(C(-1e30), C(0), C(1)) == 0);
  CHECK(fn::GeluErf{}.grad(C(1e30), C(0), C(1)) == 1);
  CHECK(fn::GeluErf{}.grad(C(-1e30), C(0), C(1)) == 0);
  CHECK(fn::GeluTanh{}(inf) == inf);
  CHECK(fn::GeluErf{}(inf) == inf);
  const C s = fn::Sigmoid{}(C(-1e30));
  CHECK(s == 0);
  CHECK(fn::Sigmoid{}.grad(C(-1e30), s, C(1)) == 0);
  CHECK(fn::Sigmoid{}(C(1e30)) == 1);
  CHECK(fn::Abs{}.grad(C(0), C(0), C(1)) == 0);
  CHECK(fn::Abs{}.grad(C(-0.0), C(0), C(1)) == 0);
  CHECK(fn::PowScalar{0}.grad(C(0), C(1), C(1)) == 0);
  CHECK(fn::PowScalar{0}.grad(inf, C(1), C(1)) == 0);
  CHECK(fn::Tanh{}.grad(C(50), fn::Tanh{}(C(50)), C(1)) == 0);
  CHECK(fn::Tanh{}.grad(-inf, fn::Tanh{}(-inf), C(1)) == 0);
  CHECK(fn::Exp{}(C(std::is_same_v<C, float> ? 89 : 710)) == inf);
  CHECK(std::signbit(fn::Neg{}(C(0))));
  CHECK(!std::signbit(fn::Abs{}(C(-0.0))));
  // the derivatives through the output agree with the true derivative where y is well conditioned
  const LD rtol = std::is_same_v<C, float> ? 1e-5L : 1e-12L;
  for (LD x : {-2.0L, -0.7L, 0.3L, 1.0L, 2.0L}) {
    const C xc = static_cast<C>(x), one = 1;
    const LD xl = xc, sg = 1 / (1 + std::exp(-xl)), th = std::tanh(xl);
    CHECK(fn::Exp{}.grad(xc, fn::Exp{}(xc), one) == Approx(static_cast<double>(std::exp(xl))).epsilon(rtol));
    CHECK(fn::Sigmoid{}.grad(xc, fn::Sigmoid{}(xc), one) == Approx(static_cast<double>(sg * (1 - sg))).epsilon(rtol));
    CHECK(fn::Tanh{}.grad(xc, fn::Tanh{}(xc), one) == Approx(static_cast<double>(1 - th * th)).epsilon(rtol));
    const C ax = static_cast<C>(std::fabs(xl));
    CHECK(fn::Sqrt{}.grad(ax, fn::Sqrt{}(ax), one) == Approx(static_cast<double>(0.5L / std::sqrt(LD(ax)))).epsilon(rtol));
    CHECK(fn::Rsqrt{}.grad(ax, fn::Rsqrt{}(ax), one) ==
          Approx(static_cast<double>(-0.5L * std::pow(LD(ax), -1.5L))).epsilon(rtol));
  }
}

TEMPLATE_TEST_CASE("binary functors over a grid of special values", "[functors]", float, double) {
  using C = TestType;
  const C dy = C(1.5);
  for (LD al : kGrid)
    for (LD bl : kGrid) {
      const C a = static_cast<C>(al), b = static_cast<C>(bl);
      const LD A = a, B = b, D = dy;
      const std::string ab = cat("(", fmt(A), ", ", fmt(B), ")");
      expect<C>(cat("add", ab), fn::Add{}(a, b), A + B, 0, true);
      expect<C>(cat("sub", ab), fn::Sub{}(a, b), A - B, 0, true);
      expect<C>(cat("mul", ab), fn::Mul{}(a, b), A * B, 0, true);
      expect<C>(cat("div", ab), fn::Div{}(a, b), A / B, 0, true);
      expect<C>(cat("add.grad_a", ab), fn::Add{}.grad_a(a, b, dy), D);
      expect<C>(cat("add.grad_b", ab), fn::Add{}.grad_b(a, b, dy), D);
      expect<C>(cat("sub.grad_a", ab), fn::Sub{}.grad_a(a, b, dy), D);
      expect<C>(cat("sub.grad_b", ab), fn::Sub{}.grad_b(a, b, dy), -D);
      expect<C>(cat("mul.grad_a", ab), fn::Mul{}.grad_a(a, b, dy), D * B);
      expect<C>(cat("mul.grad_b", ab), fn::Mul{}.grad_b(a, b, dy), D * A);
      expect<C>(cat("div.grad_a", ab), fn::Div{}.grad_a(a, b, dy), D / B);
      expect<C>(cat("div.grad_b", ab), fn::Div{}.grad_b(a, b, dy), -D * A / (B * B));
      const bool any_nan = std::isnan(A) || std::isnan(B);
      // maximum/minimum propagate NaN; the sign of a zero result is not specified
      expect<C>(cat("maximum", ab), fn::Maximum{}(a, b), any_nan ? kNaN : std::max(A, B));
      expect<C>(cat("minimum", ab), fn::Minimum{}(a, b), any_nan ? kNaN : std::min(A, B));
      if (!any_nan) {  // ties split the gradient evenly (torch.maximum)
        expect<C>(cat("maximum.grad_a", ab), fn::Maximum{}.grad_a(a, b, dy), A > B ? D : A == B ? D / 2 : 0);
        expect<C>(cat("maximum.grad_b", ab), fn::Maximum{}.grad_b(a, b, dy), B > A ? D : A == B ? D / 2 : 0);
        expect<C>(cat("minimum.grad_a", ab), fn::Minimum{}.grad_a(a, b, dy), A < B ? D : A == B ? D / 2 : 0);
        expect<C>(cat("minimum.grad_b", ab), fn::Minimum{}.grad_b(a, b, dy), B < A ? D : A == B ? D / 2 : 0);
      }
      INFO("comparisons" << ab);
      CHECK(fn::Eq{}(a, b) == C(A == B ? 1 : 0));
      CHECK(fn::Ne{}(a, b) == C(A != B ? 1 : 0));
      CHECK(fn::Lt{}(a, b) == C(A < B ? 1 : 0));
      CHECK(fn::Le{}(a, b) == C(A <= B ? 1 : 0));
      CHECK(fn::Gt{}(a, b) == C(A > B ? 1 : 0));
      CHECK(fn::Ge{}(a, b) == C(A >= B ? 1 : 0));
    }
  // NaN never compares equal, +0 == -0
  const C nan = std::numeric_limits<C>::quiet_NaN();
  CHECK(fn::Eq{}(nan, nan) == 0);
  CHECK(fn::Ne{}(nan, nan) == 1);
  CHECK(fn::Eq{}(C(0), C(-0.0)) == 1);
  // division's gradient does not overflow in b*b when the result is representable
  expect<C>("div.grad_b(1e30, 1e30)", fn::Div{}.grad_b(C(1e30), C(1e30), C(1)), -1 / LD(C(1e30)));
  expect<C>("rdiv[1e30].grad(1e30)", fn::RdivScalar{1e30}.grad(C(1e30), C(1), C(1)), -1 / LD(C(1e30)));
}

TEMPLATE_TEST_CASE("where and its gradient masks", "[functors]", float, double) {
  using C = TestType;
  const C nan = std::numeric_limits<C>::quiet_NaN(), inf = std::numeric_limits<C>::infinity();
  const C a = C(2.5), b = C(-1.5);
  // any nonzero condition (NaN and inf too) selects a; +0 and -0 select b
  for (C c : {C(1), C(-2), nan, inf, C(1e-40)}) {
    INFO("cond " << c);
    CHECK(fn::Where{}(c, a, b) == a);
    CHECK(fn::MaskTrue{}(c, C(3)) == 3);
    CHECK(fn::MaskFalse{}(c, C(3)) == 0);
  }
  for (C c : {C(0), C(-0.0)}) {
    INFO("cond " << c);
    CHECK(fn::Where{}(c, a, b) == b);
    CHECK(fn::MaskTrue{}(c, C(3)) == 0);
    CHECK(fn::MaskFalse{}(c, C(3)) == 3);
  }
  CHECK(std::isnan(fn::Where{}(C(1), nan, b)));
  CHECK(fn::Where{}(C(0), nan, b) == b);
  CHECK(std::isnan(fn::MaskTrue{}(C(1), nan)));
}

TEMPLATE_TEST_CASE("Round: floor, ceil, half-to-even round and trunc, specials through, zero gradient", "[functors]",
                   float, double) {
  using C = TestType;
  const C nan = std::numeric_limits<C>::quiet_NaN(), inf = std::numeric_limits<C>::infinity();
  const C xs[] = {C(-2.5), C(-1.5), C(-0.5), C(0.5), C(1.5), C(2.5), C(-1.7), C(1.2), C(-0.0), C(1e30)};
  for (C x : xs) {
    INFO(static_cast<double>(x));
    CHECK(fn::Round{0}(x) == std::floor(x));
    CHECK(fn::Round{1}(x) == std::ceil(x));
    CHECK(fn::Round{2}(x) == std::nearbyint(x));  // ties to even in the default rounding mode
    CHECK(fn::Round{3}(x) == std::trunc(x));
    CHECK(fn::Round{2}.grad(x, x, C(1)) == 0);
  }
  CHECK(fn::Round{2}(C(2.5)) == 2);
  CHECK(fn::Round{2}(C(-0.5)) == 0);
  CHECK(std::signbit(fn::Round{1}(C(-0.5))));  // ceil(-0.5) is -0, as torch's
  for (int m = 0; m < 4; ++m) {
    CHECK(std::isnan(fn::Round{double(m)}(nan)));
    CHECK(fn::Round{double(m)}(inf) == inf);
    CHECK(fn::Round{double(m)}(-inf) == -inf);
  }
}
