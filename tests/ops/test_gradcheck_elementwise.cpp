// Central-difference gradient checks (F64) of every differentiable elementwise op, its scalar forms,
// broadcasting for every binary op, where, and the shape ops; plus the cast's exact backward.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "halfgrad.h"

using namespace hg;
using Catch::Contains;
using Ts = std::vector<Tensor>;

namespace {

// Pos: >= 0.2. Away: |x| >= 0.5 (relu, abs, division). Clamp: at least 0.05 from +-0.5.
enum class Dom { Any, Pos, Away, Clamp };

Tensor in(const Shape& s, uint64_t seed, Dom d = Dom::Any, bool grad = true) {
  Generator g(seed);
  std::vector<double> v = randn(s, {.dtype = DType::F64}, &g).to_vector<double>();
  for (double& x : v) {
    if (d == Dom::Pos) x = std::fabs(x) + 0.2;
    if (d == Dom::Away) x = x < 0 ? x - 0.5 : x + 0.5;
    if (d == Dom::Clamp && std::fabs(std::fabs(x) - 0.5) < 0.05) x += x > 0 ? 0.1 : -0.1;
  }
  return from_vector(v, s, {.dtype = DType::F64, .requires_grad = grad});
}

void check_grad(const std::string& name, const GradcheckFn& f, const Ts& inputs, GradcheckOptions o = {}) {
  const GradcheckResult r = gradcheck(f, inputs, o);
  INFO(name << ": " << r.message << " (max abs error " << r.max_abs_error << ")");
  CHECK(r.ok);
}

struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  Dom dom = Dom::Any;
};

}  // namespace

TEST_CASE("gradcheck: unary ops and scalar forms", "[gradcheck]") {
  const std::vector<UnaryCase> cases = {
      {"neg", [](const Tensor& x) { return neg(x); }},
      {"exp", [](const Tensor& x) { return exp(x); }},
      {"log", [](const Tensor& x) { return log(x); }, Dom::Pos},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, Dom::Pos},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, Dom::Pos},
      {"pow2", [](const Tensor& x) { return pow(x, 2); }},
      {"pow3", [](const Tensor& x) { return pow(x, 3); }},
      {"pow0", [](const Tensor& x) { return pow(x, 0); }},
      {"pow1", [](const Tensor& x) { return pow(x, 1); }},
      {"pow0.5", [](const Tensor& x) { return pow(x, 0.5); }, Dom::Pos},
      {"pow-1.5", [](const Tensor& x) { return pow(x, -1.5); }, Dom::Pos},
      {"abs", [](const Tensor& x) { return abs(x); }, Dom::Away},
      {"relu", [](const Tensor& x) { return relu(x); }, Dom::Away},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }},
      {"tanh", [](const Tensor& x) { return tanh(x); }},
      {"gelu", [](const Tensor& x) { return gelu(x); }},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, GeluApprox::Tanh); }},
      {"silu", [](const Tensor& x) { return silu(x); }},
      {"erf", [](const Tensor& x) { return erf(x); }},
      {"clamp", [](const Tensor& x) { return clamp(x, -0.5, 0.5); }, Dom::Clamp},
      {"add_s", [](const Tensor& x) { return add(x, 2.5); }},
      {"sub_s", [](const Tensor& x) { return sub(x, 2.5); }},
      {"mul_s", [](const Tensor& x) { return mul(x, -3.0); }},
      {"div_s", [](const Tensor& x) { return div(x, 3.0); }},
      {"rsub", [](const Tensor& x) { return rsub(2.0, x); }},
      {"rdiv", [](const Tensor& x) { return rdiv(2.0, x); }, Dom::Away},
      {"operators", [](const Tensor& x) { return (2.0 - x) * 3.0 + 1.0 / (x * x + 1.0) - x / 4.0 + (-x) + (1.5 + x); }},
  };
  for (const UnaryCase& c : cases)
    check_grad(c.name, [&c](const Ts& v) { return c.op(v[0]); }, {in({3, 4}, 7, c.dom)});
  // 0-d and zero-size inputs
  check_grad("exp 0-d", [](const Ts& v) { return exp(v[0]); }, {in({}, 8)});
  check_grad("tanh zero-size", [](const Ts& v) { return tanh(v[0]); }, {in({0, 3}, 9)});
  // a composite: each op's backward feeds the next
  check_grad("composite", [](const Ts& v) { return sigmoid(v[0] * v[1] + exp(v[2])) * gelu(v[0]); },
             {in({2, 3}, 10), in({2, 3}, 11), in({2, 3}, 12)});
}

TEST_CASE("gradcheck: binary ops with broadcasting", "[gradcheck]") {
  struct B {
    const char* name;
    std::function<Tensor(const Tensor&, const Tensor&)> op;
    Dom b_dom = Dom::Any;
  };
  const std::vector<B> ops = {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, Dom::Away},
      // independent random inputs: no ties (those split the gradient, where the function has a kink)
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }},
      {"operators", [](const Tensor& a, const Tensor& b) { return (a + b) * (a - b) / (b * b + 1.0); }},
  };
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{3, 4}, {3, 4}}, {{3, 1}, {1, 4}}, {{2, 3, 4}, {4}}, {{4}, {2, 3, 4}}, {{}, {2, 3}}, {{2, 3}, {}}, {{1}, {2, 3}}};
  for (const B& o : ops)
    for (const auto& [sa, sb] : shapes) {
      const std::string name = std::string(o.name) + " " + sa.str() + " x " + sb.str();
      check_grad(name, [&o](const Ts& v) { return o.op(v[0], v[1]); }, {in(sa, 21), in(sb, 22, o.b_dom)});
      // only one side requires grad
      check_grad(name + " (a only)", [&o](const Ts& v) { return o.op(v[0], v[1]); },
                 {in(sa, 23), in(sb, 24, o.b_dom, false)});
      check_grad(name + " (b only)", [&o](const Ts& v) { return o.op(v[0], v[1]); },
                 {in(sa, 25, Dom::Any, false), in(sb, 26, o.b_dom)});
    }
  // the same tensor on both sides
  check_grad("x * x", [](const Ts& v) { return v[0] * v[0]; }, {in({5}, 27)});
  check_grad("x / x", [](const Ts& v) { return v[0] / v[0]; }, {in({5}, 28, Dom::Away)});
}

TEST_CASE("gradcheck: where with broadcasting", "[gradcheck]") {
  const Tensor cond = from_vector(std::vector<double>{1, 0, -1}, {3, 1}, {.dtype = DType::F64});
  check_grad("where (3,1) (1,4) (3,4)", [&](const Ts& v) { return where(cond, v[0], v[1]); },
             {in({1, 4}, 31), in({3, 4}, 32)});
  check_grad("where 0-d b", [&](const Ts& v) { return where(cond, v[0], v[1]); }, {in({3, 4}, 33), in({}, 34)});
  check_grad("where a only", [&](const Ts& v) { return where(cond, v[0], v[1]); },
             {in({4}, 35), in({3, 4}, 36, Dom::Any, false)});
  // the condition built from the input itself (a piecewise function away from its switch points)
  check_grad("where(x > 0, x*x, -x)", [](const Ts& v) { return where(gt(v[0], zeros({})), v[0] * v[0], -v[0]); },
             {in({6}, 37, Dom::Away)});
}

TEST_CASE("gradcheck: shape ops", "[gradcheck]") {
  check_grad("reshape", [](const Ts& v) { return v[0].reshape({4, -1}) * v[0].reshape({4, 6}); }, {in({2, 3, 4}, 41)});
  check_grad("view/flatten", [](const Ts& v) { return exp(v[0].view({6, 4})).flatten(); }, {in({2, 3, 4}, 42)});
  check_grad("transpose", [](const Ts& v) { return v[0].transpose(0, 2); }, {in({2, 3, 4}, 43)});
  check_grad("t", [](const Ts& v) { return v[0].t() * v[1]; }, {in({3, 2}, 44), in({2, 3}, 45)});
  check_grad("permute", [](const Ts& v) { return v[0].permute({2, 0, 1}); }, {in({2, 3, 4}, 46)});
  check_grad("slice", [](const Ts& v) { return v[0].slice(1, 1, 4); }, {in({3, 5}, 47)});
  check_grad("slice step", [](const Ts& v) { return v[0].slice(1, 0, 5, 2); }, {in({3, 5}, 48)});
  check_grad("slice negative", [](const Ts& v) { return v[0].slice(-1, -3, 100, 2) * v[0].slice(1, 0, 4, 3); },
             {in({3, 5}, 49)});
  check_grad("slice empty", [](const Ts& v) { return v[0].slice(0, 2, 1); }, {in({3, 5}, 50)});
  check_grad("cat dim 0", [](const Ts& v) { return cat({v[0], v[1]}, 0); }, {in({2, 3}, 51), in({1, 3}, 52)});
  check_grad("cat dim 1, three inputs", [](const Ts& v) { return cat({v[0], v[1], v[2]}, -1); },
             {in({2, 1}, 53), in({2, 3}, 54), in({2, 2}, 55)});
  check_grad("cat with a constant", [](const Ts& v) { return cat({v[0], v[1]}, 0); },
             {in({2}, 56, Dom::Any, false), in({3}, 57)});
  check_grad("cat the same tensor twice", [](const Ts& v) { return cat({v[0], v[0] * 2.0}, 0); }, {in({3}, 58)});
  check_grad("clone", [](const Ts& v) { return v[0].clone() * v[0]; }, {in({4}, 59)});
}

TEST_CASE("the cast backward passes the upstream gradient, cast", "[gradcheck]") {
  // x (F64) -> F32 -> F64: backward rounds the seed to F32 and widens it again, exactly.
  Tensor x = in({50}, 61);
  Generator g(62);
  const Tensor seed = randn({50}, {.dtype = DType::F64}, &g);
  x.to(DType::F32).to(DType::F64).backward(seed);
  REQUIRE(x.grad().dtype() == DType::F64);
  const auto got = x.grad().to_vector<double>();
  const auto want = seed.to(DType::F32).to(DType::F64).to_vector<double>();
  CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(double)) == 0);
  CHECK(got != seed.to_vector<double>());  // the F32 rounding did happen
  // F32 leaf -> F16 -> F32: the F16 rounding of the gradient is visible, the dtype is the leaf's
  Tensor w = randn({50}, {.requires_grad = true}, &g);
  const Tensor s32 = randn({50}, {}, &g);
  w.to(DType::F16).to(DType::F32).backward(s32);
  REQUIRE(w.grad().dtype() == DType::F32);
  CHECK(w.grad().to_vector<double>() == s32.to(DType::F16).to_vector<double>());
  // central differences through the F32 round trip: loose, because the forward rounds to F32
  check_grad("to(F32).to(F64)", [](const Ts& v) { return v[0].to(DType::F32).to(DType::F64) * v[0]; }, {in({6}, 63)},
             {.eps = 1e-3, .atol = 1e-3, .rtol = 1e-2});
}

TEST_CASE("gradcheck itself catches wrong gradients and bad inputs", "[gradcheck]") {
  // a hook that doubles the gradient of an intermediate makes the analytic gradient wrong
  const GradcheckFn wrong = [](const Ts& v) {
    Tensor h = v[0] * 3.0;
    if (h.requires_grad()) h.register_hook([](const Tensor& g) { return g * 2.0; });  // not under NoGradGuard
    return exp(h);
  };
  const GradcheckResult r = gradcheck(wrong, {in({4}, 71)});
  CHECK_FALSE(r.ok);
  CHECK_THAT(r.message, Contains("input 0"));
  CHECK(r.max_abs_error > 0);
  // a correct function passes with a tiny error
  const GradcheckResult ok = gradcheck([](const Ts& v) { return exp(v[0] * 3.0); }, {in({4}, 71)});
  CHECK(ok.ok);
  CHECK(ok.max_abs_error < 1e-6);
  REQUIRE_THROWS_WITH(gradcheck([](const Ts& v) { return v[0]; }, {ones({2}, {.requires_grad = true})}),
                      Contains("gradcheck"));
  // inputs are not modified and get no gradient (gradcheck works on copies)
  const Tensor x = in({3}, 72);
  const auto before = x.to_vector<double>();
  gradcheck([](const Ts& v) { return v[0] * v[0]; }, {x});
  CHECK(x.to_vector<double>() == before);
  CHECK_FALSE(x.grad().defined());
}
