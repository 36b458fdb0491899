// Elementwise ops on tensors: every op of ops/elementwise.h in F32, F16, BF16 and F64 against (1) the
// F64 result of the same rounded inputs and (2) an independent scalar double loop; broadcasting,
// dtype promotion, where, comparisons, scalar forms, operators, errors, and big tensors (the OpenMP
// and block paths, with tails) against small ones.
#include <catch2/catch.hpp>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "halfgrad.h"
#include "ops/broadcast.h"
#include "ops/dispatch.h"

using namespace hg;
using Catch::Contains;

namespace {

const DType kTypes[] = {DType::F32, DType::F16, DType::BF16, DType::F64};

enum class Dom { Any, Pos, Away, Ties };  // Pos: >= 0.1; Away: |x| >= 0.5; Ties: multiples of 0.5

Tensor input(const Shape& s, DType dt, uint64_t seed, Dom d = Dom::Any) {
  Generator g(seed);
  std::vector<double> v = randn(s, {.dtype = DType::F64}, &g).to_vector<double>();
  for (double& x : v) {
    if (d == Dom::Pos) x = std::fabs(x) + 0.1;
    if (d == Dom::Away) x = x < 0 ? x - 0.5 : x + 0.5;
    if (d == Dom::Ties) x = std::round(x * 2) / 2;
  }
  return from_vector(v, s, {.dtype = dt});
}

struct Tol {
  double rel, abs;
};
// F32: rel 1e-6 + abs 1e-6. F16/BF16: one rounding of a float result is at most 2^-11 / 2^-8 of
// the value (half an ulp is <= that), plus the float error of the math (1e-6); abs for subnormals.
Tol tol_for(DType dt) {
  switch (dt) {
    case DType::F16: return {std::ldexp(1.0, -11) + 1e-6, std::ldexp(1.0, -24)};
    case DType::BF16: return {std::ldexp(1.0, -8) + 1e-6, 1e-37};
    case DType::F64: return {1e-13, 1e-300};
    default: return {1e-6, 1e-6};
  }
}
// The machine epsilon of the type the kernel computes in (float for all but F64).
double compute_eps(DType dt) { return dt == DType::F64 ? std::ldexp(1.0, -52) : std::ldexp(1.0, -23); }

void check_values(const std::string& what, const std::vector<double>& got, const std::vector<double>& ref, Tol t) {
  REQUIRE(got.size() == ref.size());
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double g = got[i], r = ref[i];
    const bool ok = std::isnan(r) ? std::isnan(g) : std::isinf(r) ? g == r : std::fabs(g - r) <= t.rel * std::fabs(r) + t.abs;
    if (!ok && bad++ == 0) first = i;
  }
  INFO(what << ": " << bad << " of " << ref.size() << " elements off; first at " << first << ": got "
            << (bad ? got[first] : 0.0) << " expected " << (bad ? ref[first] : 0.0));
  CHECK(bad == 0);
}

// v (of shape in) broadcast to shape out, by NumPy's rules, computed independently of the library.
std::vector<double> expand(const std::vector<double>& v, const Shape& in, const Shape& out) {
  std::vector<double> r(static_cast<size_t>(out.numel()));
  const int64_t lead = out.ndim() - in.ndim();
  for (int64_t i = 0; i < out.numel(); ++i) {
    int64_t rem = i, src = 0, stride = 1;
    for (int64_t d = out.ndim() - 1; d >= 0; --d) {
      const int64_t idx = rem % out[d];
      rem /= out[d];
      if (d >= lead) {
        const int64_t n = in[d - lead];
        src += (n == 1 ? 0 : idx) * stride;
        stride *= n;
      }
    }
    r[static_cast<size_t>(i)] = v[static_cast<size_t>(src)];
  }
  return r;
}

struct Unary {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> ref;
  Dom dom = Dom::Any;
  bool cancels = false;  // gelu: 1 + erf / 1 + tanh cancel in the negative tail, error ~ |x| * eps absolute
};

const double kA = 0.7978845608028654, kB = 0.044715;
const std::vector<Unary>& unary_cases() {
  static const std::vector<Unary> cases = {
      {"neg", [](const Tensor& x) { return neg(x); }, [](double x) { return -x; }},
      {"exp", [](const Tensor& x) { return exp(x); }, [](double x) { return std::exp(x); }},
      {"log", [](const Tensor& x) { return log(x); }, [](double x) { return std::log(x); }, Dom::Pos},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, [](double x) { return std::sqrt(x); }, Dom::Pos},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, [](double x) { return 1 / std::sqrt(x); }, Dom::Pos},
      {"pow2", [](const Tensor& x) { return pow(x, 2); }, [](double x) { return x * x; }},
      {"pow3", [](const Tensor& x) { return pow(x, 3); }, [](double x) { return x * x * x; }},
      {"pow0.5", [](const Tensor& x) { return pow(x, 0.5); }, [](double x) { return std::sqrt(x); }, Dom::Pos},
      {"pow-1.5", [](const Tensor& x) { return pow(x, -1.5); }, [](double x) { return std::pow(x, -1.5); }, Dom::Pos},
      {"abs", [](const Tensor& x) { return abs(x); }, [](double x) { return std::fabs(x); }},
      {"relu", [](const Tensor& x) { return relu(x); }, [](double x) { return x > 0 ? x : 0; }},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, [](double x) { return 1 / (1 + std::exp(-x)); }},
      {"tanh", [](const Tensor& x) { return tanh(x); }, [](double x) { return std::tanh(x); }},
      {"gelu", [](const Tensor& x) { return gelu(x); },
       [](double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }, Dom::Any, true},
      {"silu", [](const Tensor& x) { return silu(x); }, [](double x) { return x / (1 + std::exp(-x)); }},
      {"erf", [](const Tensor& x) { return erf(x); }, [](double x) { return std::erf(x); }},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, GeluApprox::Tanh); },
       [](double x) { return 0.5 * x * (1 + std::tanh(kA * (x + kB * x * x * x))); }, Dom::Any, true},
      {"clamp", [](const Tensor& x) { return clamp(x, -0.5, 0.75); }, [](double x) { return std::min(std::max(x, -0.5), 0.75); }},
      {"add_s", [](const Tensor& x) { return add(x, 2.5); }, [](double x) { return x + 2.5; }},
      {"sub_s", [](const Tensor& x) { return sub(x, 1.25); }, [](double x) { return x - 1.25; }},
      {"mul_s", [](const Tensor& x) { return mul(x, -3.0); }, [](double x) { return x * -3; }},
      {"div_s", [](const Tensor& x) { return div(x, 4.0); }, [](double x) { return x / 4; }},
      {"rsub", [](const Tensor& x) { return rsub(2.0, x); }, [](double x) { return 2 - x; }},
      {"rdiv", [](const Tensor& x) { return rdiv(2.0, x); }, [](double x) { return 2 / x; }, Dom::Away},
      {"x+s", [](const Tensor& x) { return x + 0.5; }, [](double x) { return x + 0.5; }},
      {"s+x", [](const Tensor& x) { return 0.5 + x; }, [](double x) { return 0.5 + x; }},
      {"x-s", [](const Tensor& x) { return x - 0.5; }, [](double x) { return x - 0.5; }},
      {"s-x", [](const Tensor& x) { return 0.5 - x; }, [](double x) { return 0.5 - x; }},
      {"x*s", [](const Tensor& x) { return x * 1.5; }, [](double x) { return x * 1.5; }},
      {"s*x", [](const Tensor& x) { return 1.5 * x; }, [](double x) { return 1.5 * x; }},
      {"x/s", [](const Tensor& x) { return x / 8.0; }, [](double x) { return x / 8; }},
      {"s/x", [](const Tensor& x) { return 3.0 / x; }, [](double x) { return 3 / x; }, Dom::Away},
      {"-x", [](const Tensor& x) { return -x; }, [](double x) { return -x; }},
  };
  return cases;
}

struct Binary {
  const char* name;
  std::function<Tensor(const Tensor&, const Tensor&)> op;
  std::function<double(double, double)> ref;
  Dom b_dom = Dom::Any;
};

const std::vector<Binary>& binary_cases() {
  static const std::vector<Binary> cases = {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, [](double a, double b) { return a + b; }},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, [](double a, double b) { return a - b; }},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, [](double a, double b) { return a * b; }},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, [](double a, double b) { return a / b; }, Dom::Away},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }, [](double a, double b) { return std::max(a, b); }, Dom::Ties},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }, [](double a, double b) { return std::min(a, b); }, Dom::Ties},
      {"a+b", [](const Tensor& a, const Tensor& b) { return a + b; }, [](double a, double b) { return a + b; }},
      {"a-b", [](const Tensor& a, const Tensor& b) { return a - b; }, [](double a, double b) { return a - b; }},
      {"a*b", [](const Tensor& a, const Tensor& b) { return a * b; }, [](double a, double b) { return a * b; }},
      {"a/b", [](const Tensor& a, const Tensor& b) { return a / b; }, [](double a, double b) { return a / b; }, Dom::Away},
      {"eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); }, [](double a, double b) { return double(a == b); }, Dom::Ties},
      {"ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); }, [](double a, double b) { return double(a != b); }, Dom::Ties},
      {"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); }, [](double a, double b) { return double(a < b); }, Dom::Ties},
      {"le", [](const Tensor& a, const Tensor& b) { return le(a, b); }, [](double a, double b) { return double(a <= b); }, Dom::Ties},
      {"gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); }, [](double a, double b) { return double(a > b); }, Dom::Ties},
      {"ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); }, [](double a, double b) { return double(a >= b); }, Dom::Ties},
  };
  return cases;
}

}  // namespace

TEST_CASE("unary ops match the F64 reference in every dtype", "[elementwise]") {
  const Shape shape{7, 129};  // 903 elements: one partial block
  for (const Unary& c : unary_cases())
    for (DType dt : kTypes) {
      const std::string what = std::string(c.name) + " " + dtype_name(dt);
      const Tensor x = input(shape, dt, 11, c.dom);
      const Tensor y = c.op(x);
      REQUIRE(y.dtype() == dt);
      REQUIRE(y.shape() == shape);
      const std::vector<double> xv = x.to_vector<double>();
      std::vector<double> loop(xv.size());
      for (size_t i = 0; i < xv.size(); ++i) loop[i] = c.ref(xv[i]);
      const double extra = c.cancels ? 8 * compute_eps(dt) : 0;
      // the F64 path on the same rounded inputs agrees with the scalar loop
      check_values(what + " (F64 path vs loop)", c.op(x.to(DType::F64)).to_vector<double>(), loop,
                   {1e-13, 8 * compute_eps(DType::F64)});
      Tol t = tol_for(dt);
      t.abs += extra;
      check_values(what, y.to_vector<double>(), loop, t);
    }
}

TEST_CASE("binary ops and comparisons match the F64 reference, with broadcasting", "[elementwise]") {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{7, 129}, {7, 129}}, {{7, 1}, {129}}, {{3, 1, 5}, {4, 1}}, {{}, {2, 3}}, {{1}, {2, 3}}, {{2, 3}, {}}, {{0, 3}, {1, 3}}};
  for (const Binary& c : binary_cases())
    for (DType dt : kTypes)
      for (const auto& [sa, sb] : shapes) {
        const std::string what = std::string(c.name) + " " + dtype_name(dt) + " " + sa.str() + " x " + sb.str();
        const Tensor a = input(sa, dt, 21, c.b_dom == Dom::Ties ? Dom::Ties : Dom::Any);
        const Tensor b = input(sb, dt, 22, c.b_dom);
        const Tensor y = c.op(a, b);
        const Shape out = broadcast_shapes("test", sa, sb);
        REQUIRE(y.shape() == out);
        const bool comparison = std::string(c.name).size() == 2;  // eq ne lt le gt ge: Bool, as torch's
        REQUIRE(y.dtype() == (comparison ? DType::Bool : dt));
        const auto av = expand(a.to_vector<double>(), sa, out), bv = expand(b.to_vector<double>(), sb, out);
        std::vector<double> loop(av.size());
        for (size_t i = 0; i < av.size(); ++i) loop[i] = c.ref(av[i], bv[i]);
        check_values(what + " (F64 path vs loop)", c.op(a.to(DType::F64), b.to(DType::F64)).to_vector<double>(), loop,
                     {1e-15, 0});
        check_values(what, y.to_vector<double>(), loop, tol_for(dt));
      }
}

TEST_CASE("broadcast shapes and values", "[elementwise]") {
  const Tensor a = arange(15).reshape({3, 1, 5});
  const Tensor b = arange(4).reshape({4, 1}) * 100.0;
  const Tensor y = a + b;
  REQUIRE(y.shape() == Shape{3, 4, 5});
  const auto yv = y.to_vector<double>();
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 5; ++k) CHECK(yv[static_cast<size_t>((i * 4 + j) * 5 + k)] == (i * 5 + k) + 100 * j);
  CHECK((full({}, 2) * arange(3)).to_vector<double>() == std::vector<double>{0, 2, 4});
  CHECK((arange(3) - full({}, 1)).shape() == Shape{3});
  CHECK((full({}, 2) + full({}, 3)).ndim() == 0);
  CHECK((full({1}, 5) - arange(6).reshape({2, 3})).to_vector<double>() == std::vector<double>{5, 4, 3, 2, 1, 0});
  CHECK((ones({2, 1, 3}) * ones({1, 4, 1})).shape() == Shape{2, 4, 3});
  CHECK((ones({0, 3}) + ones({1, 3})).shape() == Shape{0, 3});
  // shapes that do not broadcast name the op
  REQUIRE_THROWS_AS(ones({2, 3}) + ones({4}), Error);
  REQUIRE_THROWS_WITH(add(ones({2, 3}), ones({4})), Contains("add"));
  REQUIRE_THROWS_WITH(ones({2, 3}) * ones({3, 2}), Contains("mul"));
  REQUIRE_THROWS_WITH(sub(ones({3}), ones({2})), Contains("sub"));
  REQUIRE_THROWS_WITH(div(ones({3}), ones({2})), Contains("div"));
  REQUIRE_THROWS_WITH(maximum(ones({3}), ones({2})), Contains("maximum"));
  REQUIRE_THROWS_WITH(lt(ones({3}), ones({2})), Contains("lt"));
  REQUIRE_THROWS_WITH(where(ones({3}), ones({3}), ones({2})), Contains("where"));
  REQUIRE_THROWS_WITH(where(ones({2}), ones({3}), ones({3})), Contains("where"));
}

TEST_CASE("mixed dtypes promote like PyTorch", "[elementwise]") {
  const Tensor h = from_vector(std::vector<double>{1.5, -2.25}, {2}, {.dtype = DType::F16});
  const Tensor bf = from_vector(std::vector<double>{0.5, 3}, {2}, {.dtype = DType::BF16});
  const Tensor f = from_vector(std::vector<double>{1.0 / 3, 2}, {2}, {.dtype = DType::F32});
  const Tensor d = from_vector(std::vector<double>{1.0 / 3, 0.125}, {2}, {.dtype = DType::F64});
  const Tensor i = from_vector(std::vector<int64_t>{2, -1}, {2}, {.dtype = DType::I64});
  CHECK((h + bf).dtype() == DType::F32);
  CHECK((h + bf).to_vector<double>() == std::vector<double>{2, 0.75});
  CHECK((f + d).dtype() == DType::F64);
  CHECK((f + d).to_vector<double>() == std::vector<double>{double(1.0f / 3) + 1.0 / 3, 2.125});
  CHECK((h * f).dtype() == DType::F32);
  CHECK((bf - d).dtype() == DType::F64);
  CHECK((h / h).dtype() == DType::F16);
  CHECK((i * f).dtype() == DType::F32);
  CHECK((i * f).to_vector<double>() == std::vector<double>{double(2.0f / 3), -2});
  CHECK(lt(h, bf).dtype() == DType::Bool);
  CHECK(lt(h, bf).to_vector<double>() == std::vector<double>{0, 1});
  CHECK(maximum(f, d).dtype() == DType::F64);
  CHECK(maximum(f, d).to_vector<double>() == std::vector<double>{double(1.0f / 3), 2});  // 1/3 rounds up in F32
  CHECK(where(ones({2}), h, bf).dtype() == DType::F32);
  CHECK((i + i).dtype() == DType::I64);  // integer arithmetic (tests/habits: torch's values)
  CHECK((i / i).dtype() == DType::F32);  // true division
  CHECK(exp(i).dtype() == DType::F32);   // torch's int-to-float ops (test_order.cpp: the rest of the integer rules)
  CHECK(relu(i).dtype() == DType::I64);
  REQUIRE_THROWS_WITH(gelu(i), Contains("gelu"));
  CHECK(lt(i, i).dtype() == DType::Bool);  // comparisons give Bool, as torch's (test_pytorch_spellings.cpp)
}

TEST_CASE("where, comparisons and clamp", "[elementwise]") {
  for (DType dt : kTypes) {
    INFO(dtype_name(dt));
    const Tensor cond = from_vector(std::vector<double>{1, 0, -2}, {3, 1}, {.dtype = dt});
    const Tensor a = from_vector(std::vector<double>{1, 2, 3, 4}, {1, 4}, {.dtype = dt});
    const Tensor b = full({}, -1, {.dtype = dt});
    const Tensor y = where(cond, a, b);
    REQUIRE(y.shape() == Shape{3, 4});
    CHECK(y.dtype() == dt);
    CHECK(y.to_vector<double>() == std::vector<double>{1, 2, 3, 4, -1, -1, -1, -1, 1, 2, 3, 4});
    const Tensor x = from_vector(std::vector<double>{-1, 0, 0.5, 2, NAN}, {5}, {.dtype = dt});
    const Tensor half = full({}, 0.5, {.dtype = dt});
    CHECK(lt(x, half).to_vector<double>() == std::vector<double>{1, 1, 0, 0, 0});
    CHECK(le(x, half).to_vector<double>() == std::vector<double>{1, 1, 1, 0, 0});
    CHECK(gt(x, half).to_vector<double>() == std::vector<double>{0, 0, 0, 1, 0});
    CHECK(ge(x, half).to_vector<double>() == std::vector<double>{0, 0, 1, 1, 0});
    CHECK(eq(x, half).to_vector<double>() == std::vector<double>{0, 0, 1, 0, 0});
    CHECK(ne(x, half).to_vector<double>() == std::vector<double>{1, 1, 0, 1, 1});
    CHECK(eq(x, x).to_vector<double>() == std::vector<double>{1, 1, 1, 1, 0});
    CHECK(lt(x, half).dtype() == DType::Bool);
    const auto c = clamp(x, -0.5, 1).to_vector<double>();
    CHECK(c[0] == -0.5);
    CHECK(c[2] == 0.5);
    CHECK(c[3] == 1);
    CHECK(std::isnan(c[4]));
    CHECK(std::isnan(relu(x).to_vector<double>()[4]));
    CHECK(std::isnan(maximum(x, half).to_vector<double>()[4]));
    // the condition may have any dtype; NaN counts as true
    const Tensor ci = from_vector(std::vector<int64_t>{0, 5}, {2}, {.dtype = DType::I64});
    CHECK(where(ci, ones({2}, {.dtype = dt}), zeros({2}, {.dtype = dt})).to_vector<double>() == std::vector<double>{0, 1});
    CHECK(where(from_vector(std::vector<double>{NAN}, {1}), full({1}, 7, {.dtype = dt}), b).item() == 7);
  }
  // comparisons are not differentiable
  const Tensor r = ones({2}, {.requires_grad = true});
  CHECK_FALSE(lt(r, zeros({2})).requires_grad());
  CHECK_FALSE(eq(r, r).requires_grad());
  REQUIRE_THROWS_WITH(clamp(ones({2}), 1, 0), Contains("clamp"));
  CHECK(clamp(full({1}, 5), 1, 1).item() == 1);
}

TEST_CASE("special values through the F16/BF16 storage path", "[elementwise]") {
  for (DType dt : {DType::F16, DType::BF16}) {
    INFO(dtype_name(dt));
    const Tensor x = from_vector(std::vector<double>{NAN, INFINITY, -INFINITY, -0.0, 12}, {5}, {.dtype = dt});
    const auto e = exp(x).to_vector<double>();
    CHECK(std::isnan(e[0]));
    CHECK(e[1] == INFINITY);
    CHECK(e[2] == 0);
    CHECK(e[3] == 1);
    CHECK(e[4] == (dt == DType::F16 ? INFINITY : 162816));  // exp(12) = 162754.8 > 65504; bf16: 159 * 2^10
    const auto n = neg(x).to_vector<double>();
    CHECK(std::signbit(n[1]));
    CHECK_FALSE(std::signbit(n[3]));
    CHECK(std::isnan((x * 0.0).to_vector<double>()[1]));  // inf * 0 is NaN
    // overflow on store: 300 * 300 is 90000, past F16's 65504
    const Tensor big = full({3}, 300, {.dtype = dt});
    CHECK((big * big).to_vector<double>()[0] == (dt == DType::F16 ? INFINITY : 90112));
  }
}

TEST_CASE("big tensors give the same values as small ones", "[elementwise]") {
  for (int64_t n : {int64_t{1}, int64_t{511}, int64_t{512}, int64_t{513}, int64_t{16385}, int64_t{1} << 20})
    for (DType dt : kTypes) {
      const std::string what = std::to_string(n) + " " + dtype_name(dt);
      const Tensor a = input({n}, dt, 31);
      const Tensor b = input({n}, dt, 32, Dom::Away);
      const Tensor s = full({1}, 0.75, {.dtype = dt});
      const Tensor y = exp(a) * b + s;
      // against the same ops run on small pieces (single-threaded, one block): bit for bit
      for (int64_t start : {int64_t{0}, n / 2, n - 7}) {
        if (start < 0) continue;
        const int64_t end = std::min(n, start + 7);
        const Tensor ys = exp(a.slice(0, start, end)) * b.slice(0, start, end) + s;
        const auto yv = y.slice(0, start, end).to_vector<double>(), sv = ys.to_vector<double>();
        INFO(what << " at " << start);
        CHECK(std::memcmp(yv.data(), sv.data(), yv.size() * sizeof(double)) == 0);
      }
      // against the scalar loop (three roundings in the low-precision dtypes)
      const auto av = a.to_vector<double>(), bv = b.to_vector<double>();
      std::vector<double> loop(av.size());
      for (size_t i = 0; i < av.size(); ++i) loop[i] = std::exp(av[i]) * bv[i] + 0.75;
      const Tol t = tol_for(dt);
      check_values(what, y.to_vector<double>(), loop, {3 * t.rel, 3 * t.abs + 3 * t.rel});
      // a single-threaded run gives the same bits
      if (n == int64_t{1} << 20) {
        const int prev = omp_get_max_threads();
        omp_set_num_threads(1);
        const auto y1 = (exp(a) * b + s).to_vector<double>();
        omp_set_num_threads(prev);
        const auto yv = y.to_vector<double>();
        CHECK(std::memcmp(y1.data(), yv.data(), yv.size() * sizeof(double)) == 0);
      }
    }
}

TEST_CASE("broadcasting on the chunked path: rows longer than a chunk and many short rows", "[elementwise]") {
  for (DType dt : kTypes) {
    INFO(dtype_name(dt));
    for (const auto& [sa, sb] : std::vector<std::pair<Shape, Shape>>{
             {{2, 40001}, {40001}}, {{1000, 1000}, {1000, 1}}, {{3, 1, 20000}, {1, 5, 1}}, {{2, 70000}, {2, 1}}}) {
      const Tensor a = input(sa, dt, 41), b = input(sb, dt, 42);
      const Tensor y = a + b;
      const Shape out = broadcast_shapes("test", sa, sb);
      REQUIRE(y.shape() == out);
      const auto av = expand(a.to_vector<double>(), sa, out), bv = expand(b.to_vector<double>(), sb, out);
      // one rounding of an exact-in-float sum: recompute it in float and round with the library's
      // (separately tested) conversion, then compare bit for bit
      std::vector<double> f(av.size());
      for (size_t i = 0; i < av.size(); ++i)
        f[i] = dt == DType::F64 ? av[i] + bv[i] : double(float(av[i]) + float(bv[i]));
      const auto ref = from_vector(f, out, {.dtype = dt}).to_vector<double>();
      const auto got = y.to_vector<double>();
      CHECK(std::memcmp(ref.data(), got.data(), got.size() * sizeof(double)) == 0);
    }
  }
}

TEST_CASE("run_elementwise checks its inputs", "[elementwise]") {
  const Tensor a = ones({3}), d = ones({3}, {.dtype = DType::F64});
  Tensor out = empty({3});
  REQUIRE_THROWS_WITH(run_elementwise("myop", {EwOp::Add}, {a, d}, out), Contains("myop"));
  REQUIRE_THROWS_WITH(run_elementwise("myop", {EwOp::Exp}, {a, a}, out), Contains("exp"));
  REQUIRE_THROWS_WITH(run_elementwise("myop", {EwOp::Add}, {a, ones({4})}, out), Contains("myop"));
  REQUIRE_THROWS_WITH(run_elementwise("myop", {EwOp::Eq, EwMode::Grad}, {a, a, a}, out), Contains("differentiable"));
  run_elementwise("myop", {EwOp::MulScalar, EwMode::Forward, 4.0}, {a}, out);
  CHECK(out.to_vector<double>() == std::vector<double>{4, 4, 4});
  run_elementwise("myop", {EwOp::Exp, EwMode::Grad}, {a, full({3}, 2), full({3}, 3)}, out);  // dy * y
  CHECK(out.to_vector<double>() == std::vector<double>{6, 6, 6});
}
