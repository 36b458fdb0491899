// hg_backend_ops: every CUDA kernel against the CPU backend, in the manner of ggml's test-backend-ops.
//
// A list of op cases walks every dispatch table the CUDA backend registers: each op in each dtype it
// supports, over shape variants chosen to reach each kernel's edges (odd sizes, empty tensors,
// broadcasting, reductions over a non-last dim, non-contiguous inputs, and one shape large enough that
// the grid-stride loops go round more than once). A case builds its inputs on the CPU, runs the op on
// the CPU and on the GPU from the same bits, backpropagates the same upstream gradient on both, and
// compares the outputs and every input's gradient with a tolerance chosen by the kind of op and the
// dtype. At the end it prints the CUDA kernel coverage table; a run over the whole list fails when a
// registered CUDA kernel was never looked up, so a new kernel needs a case here.
//
// It runs unchanged on the emulated device (HG_CUDA=EMULATE, in CI) and on a real GPU
// (scripts/gpu-check.sh); without a device it exits 77 (CTest: skipped).
//
//   hg_backend_ops [-o SUBSTRING] [-t DTYPE] [--list] [-v]
//     -o      only the ops whose name contains SUBSTRING (no coverage requirement then)
//     -t      only one dtype (F32, F16, BF16, F64)
//     --list  the ops, the CUDA tables each one reaches, and their shape variants; needs no device
//     -v      one line per case, not only failures
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend_ops/cases.h"
#include "gpu/coverage.h"
#include "halfgrad.h"
#include "ops/ew.h"

using namespace hg;
using namespace hg::backend_ops;

namespace {

// ---- comparison ---------------------------------------------------------------------------------
struct Mismatch {
  std::string what;
};

// Empty when cpu and gpu agree; otherwise what differs.
std::string compare(const Tensor& cpu, const Tensor& gpu_result, Check check) {
  const Tensor g = gpu_result.to(kCpu);
  if (cpu.shape() != g.shape()) return "shape " + cpu.shape().str() + " on the CPU, " + g.shape().str() + " on the GPU";
  if (cpu.dtype() != g.dtype())
    return std::string("dtype ") + dtype_name(cpu.dtype()) + " on the CPU, " + dtype_name(g.dtype()) + " on the GPU";
  const std::vector<double> a = cpu.to_vector<double>(), b = g.to_vector<double>();
  const bool floating = is_floating(cpu.dtype());
  const Tol tol = floating ? tolerance(check, cpu.dtype()) : Tol{0, 0};
  if ((check == Check::Gemm || check == Check::Fp8Gemm) && floating) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      if (std::isnan(a[i]) != std::isnan(b[i])) return "NaN at " + std::to_string(i) + " on one device only";
      num += (a[i] - b[i]) * (a[i] - b[i]);
      den += a[i] * a[i];
    }
    const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    if (rel <= tol.rtol) return "";
    return "relative error " + std::to_string(rel) + " > " + std::to_string(tol.rtol);
  }
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < a.size(); ++i) {
    const bool same = (std::isnan(a[i]) && std::isnan(b[i])) || a[i] == b[i] ||
                      std::fabs(a[i] - b[i]) <= tol.atol + tol.rtol * std::fabs(a[i]);
    if (!same && bad++ == 0) first = static_cast<int64_t>(i);
  }
  if (bad == 0) return "";
  char buf[256];
  std::snprintf(buf, sizeof buf, "%lld of %zu elements differ; first at %lld: cpu %.9g gpu %.9g (rtol %g atol %g)",
                static_cast<long long>(bad), a.size(), static_cast<long long>(first), a[size_t(first)],
                b[size_t(first)], tol.rtol, tol.atol);
  return buf;
}

// Runs one case on both devices; returns the failures (empty: it passed).
std::vector<std::string> run_case(const OpCase& op, const Case& c, const Device& gpu) {
  std::vector<std::string> fails;
  std::vector<Tensor> ci, gi;
  for (size_t i = 0; i < c.in.size(); ++i) {
    ci.push_back(c.in[i].defined() ? c.in[i].clone() : Tensor());
    gi.push_back(c.in[i].defined() ? c.in[i].to(gpu) : Tensor());
    if (c.grad[i]) {
      ci.back().requires_grad_();
      gi.back().requires_grad_();
    }
  }
  const std::vector<Tensor> co = op.run(ci, c), go = op.run(gi, c);
  if (co.size() != go.size()) return {"a different number of outputs"};
  for (size_t k = 0; k < co.size(); ++k) {
    if (go[k].device() != gpu) fails.push_back("output " + std::to_string(k) + " is not on " + gpu.str());
    const std::string m = compare(co[k], go[k], op.check);
    if (!m.empty()) fails.push_back("output " + std::to_string(k) + ": " + m);
  }
  if (co.empty() || !co[0].requires_grad() || !fails.empty()) return fails;
  Maker mk{Generator(seed_of(op.name + c.variant + "dy", co[0].dtype())), co[0].dtype()};
  const Tensor dy = mk.normal(co[0].shape());
  co[0].backward(dy);
  go[0].backward(dy.to(gpu));
  for (size_t i = 0; i < c.in.size(); ++i) {
    if (!c.grad[i]) continue;
    if (!ci[i].grad().defined() || !gi[i].grad().defined()) {
      if (ci[i].grad().defined() != gi[i].grad().defined()) fails.push_back("grad of input " + std::to_string(i) + ": defined on one device only");
      continue;
    }
    const std::string m = compare(ci[i].grad(), gi[i].grad(), op.grad_check.value_or(op.check));
    if (!m.empty()) fails.push_back("grad of input " + std::to_string(i) + ": " + m);
  }
  return fails;
}

// ---- the op list --------------------------------------------------------------------------------
using Fn1 = std::function<Tensor(const Tensor&)>;
using Fn2 = std::function<Tensor(const Tensor&, const Tensor&)>;


// Unary elementwise: odd, empty, 0-d, non-contiguous (a transposed view), large.
OpCase unary(const std::string& name, EwOp op, Fn1 f, bool positive_only, Check check = Check::Elementwise) {
  return {name, std::string("elementwise ") + ew_op_name(op), check,
          [name, positive_only](DType dt) {
            Maker m{Generator(seed_of(name, dt)), dt};
            auto x = [&](Shape s) { return positive_only ? m.positive(std::move(s)) : m.normal(std::move(s), 1.5); };
            return std::vector<Case>{{"odd (7,13)", {x({7, 13})}, {true}},
                                     {"empty (0,5)", {x({0, 5})}, {true}},
                                     {"0-d", {x({})}, {true}},
                                     {"transposed (13,7)^T", {transpose(x({13, 7}), 0, 1)}, {true}},
                                     {"large (" + std::to_string(kLarge) + ")", {x({kLarge})}, {true}}};
          },
          [f](const std::vector<Tensor>& in, const Case&) { return one(f(in[0])); },
          kFloating,
          Check::Reduction};  // gradients: products and sums of several roundings (tests/gpu's bound)
}

// Binary elementwise: same shapes, empty, broadcast both ways, a non-last-dim broadcast, transposed, large.
OpCase binary(const std::string& name, EwOp op, Fn2 f, bool positive_b, Check check = Check::Elementwise,
              bool ties = false) {
  OpCase c{name, std::string("elementwise ") + ew_op_name(op), check,
          [name, positive_b, ties](DType dt) {
            Maker m{Generator(seed_of(name, dt)), dt};
            auto a = [&](Shape s) { return ties ? m.ints(std::move(s)) : m.normal(std::move(s)); };
            auto b = [&](Shape s) {
              return ties ? m.ints(std::move(s)) : positive_b ? m.positive(std::move(s)) : m.normal(std::move(s));
            };
            return std::vector<Case>{
                {"odd (7,13)", {a({7, 13}), b({7, 13})}, {true, true}},
                {"empty (0,5) with (5)", {a({0, 5}), b({5})}, {true, true}},
                {"broadcast (3,1,5) with (4,1)", {a({3, 1, 5}), b({4, 1})}, {true, true}},
                {"broadcast (7,1,6) with (7,9,1)", {a({7, 1, 6}), b({7, 9, 1})}, {true, true}},
                {"scalar (2,3) with ()", {a({2, 3}), b({})}, {true, true}},
                {"transposed (9,4)^T with (4,9)", {transpose(a({9, 4}), 0, 1), b({4, 9})}, {true, true}},
                {"large", {a({kLarge}), b({kLarge})}, {true, true}}};
          },
          [f](const std::vector<Tensor>& in, const Case&) { return one(f(in[0], in[1])); }};
  c.grad_check = Check::Reduction;  // a broadcast input's gradient is a sum over the broadcast dims
  return c;
}

// Reductions: every element, the last dim, a non-last dim, a middle dim with keepdim, long columns, few
// long rows, many columns, every element of a large tensor, and (where defined) an empty dim.
std::vector<Case> reduce_cases(const std::string& name, DType dt, bool ties, bool allow_empty) {
  Maker m{Generator(seed_of(name, dt)), dt};
  auto x = [&](Shape s) { return ties ? m.ints(std::move(s)) : m.normal(std::move(s)); };
  std::vector<Case> v = {
      {"all of (7,13)", {x({7, 13})}, {true}, {}},
      {"dim 1 of (7,13)", {x({7, 13})}, {true}, {1}},
      {"dim 0 of (37,5) (non-last)", {x({37, 5})}, {true}, {0}},
      {"dim 1 of (3,41,6) keepdim", {x({3, 41, 6})}, {true}, {1}, true},
      {"dim 0 of (3000,3) (long columns)", {x({3000, 3})}, {true}, {0}},
      {"dim 1 of (2,70001) (few long rows)", {x({2, 70001})}, {true}, {1}},
      {"dim 0 of (1030,1031) (many columns)", {x({1030, 1031})}, {true}, {0}},
      {"dim 0 of (20001,9) (few long columns)", {x({20001, 9})}, {true}, {0}},
      {"dim 1 of (5,3001,40) keepdim", {x({5, 3001, 40})}, {true}, {1}, true},
      {"all of large", {x({kLarge})}, {true}, {}},
  };
  if (allow_empty) v.push_back({"dim 0 of (0,5)", {x({0, 5})}, {true}, {0}});
  return v;
}


std::vector<OpCase> op_cases() {
  std::vector<OpCase> ops;
  // unary elementwise (the transcendental ones compare with room for CUDA's math library)
  ops.push_back(unary("neg", EwOp::Neg, [](const Tensor& x) { return neg(x); }, false));
  ops.push_back(unary("exp", EwOp::Exp, [](const Tensor& x) { return exp(x); }, false, Check::Transcendental));
  ops.push_back(unary("log", EwOp::Log, [](const Tensor& x) { return log(x); }, true, Check::Transcendental));
  ops.push_back(unary("sqrt", EwOp::Sqrt, [](const Tensor& x) { return sqrt(x); }, true));
  ops.push_back(unary("rsqrt", EwOp::Rsqrt, [](const Tensor& x) { return rsqrt(x); }, true, Check::Transcendental));
  ops.push_back(unary("abs", EwOp::Abs, [](const Tensor& x) { return abs(x); }, false));
  ops.push_back(unary("relu", EwOp::Relu, [](const Tensor& x) { return relu(x); }, false));
  ops.push_back(unary("sigmoid", EwOp::Sigmoid, [](const Tensor& x) { return sigmoid(x); }, false, Check::Transcendental));
  ops.push_back(unary("tanh", EwOp::Tanh, [](const Tensor& x) { return tanh(x); }, false, Check::Transcendental));
  ops.push_back(unary("gelu_tanh", EwOp::GeluTanh, [](const Tensor& x) { return gelu(x, GeluApprox::Tanh); }, false,
                      Check::Transcendental));
  ops.push_back(unary("gelu", EwOp::GeluErf, [](const Tensor& x) { return gelu(x); }, false, Check::Transcendental));
  ops.push_back(unary("silu", EwOp::Silu, [](const Tensor& x) { return silu(x); }, false, Check::Transcendental));
  ops.push_back(unary("erf", EwOp::Erf, [](const Tensor& x) { return erf(x); }, false, Check::Transcendental));
  ops.push_back(unary("pow(2.5)", EwOp::PowScalar, [](const Tensor& x) { return pow(x, 2.5); }, true, Check::Transcendental));
  ops.push_back(unary("pow(3)", EwOp::PowScalar, [](const Tensor& x) { return pow(x, 3.0); }, false, Check::Transcendental));
  ops.push_back(unary("clamp", EwOp::Clamp, [](const Tensor& x) { return clamp(x, -0.5, 0.75); }, false));
  ops.push_back(unary("add_scalar", EwOp::AddScalar, [](const Tensor& x) { return x + 1.5; }, false));
  ops.push_back(unary("mul_scalar", EwOp::MulScalar, [](const Tensor& x) { return x * -2.25; }, false));
  ops.push_back(unary("div_scalar", EwOp::DivScalar, [](const Tensor& x) { return x / 3.0; }, false));
  ops.push_back(unary("rsub_scalar", EwOp::RsubScalar, [](const Tensor& x) { return 2.0 - x; }, false));
  ops.push_back(unary("rdiv_scalar", EwOp::RdivScalar, [](const Tensor& x) { return 2.0 / x; }, true));
  ops.push_back(unary("floor", EwOp::Round, [](const Tensor& x) { return floor(x); }, false, Check::Exact));
  ops.push_back(unary("round", EwOp::Round, [](const Tensor& x) { return round(x); }, false, Check::Exact));
  // binary elementwise and comparisons
  ops.push_back(binary("add", EwOp::Add, [](const Tensor& a, const Tensor& b) { return a + b; }, false));
  ops.push_back(binary("sub", EwOp::Sub, [](const Tensor& a, const Tensor& b) { return a - b; }, false));
  ops.push_back(binary("mul", EwOp::Mul, [](const Tensor& a, const Tensor& b) { return a * b; }, false));
  ops.push_back(binary("div", EwOp::Div, [](const Tensor& a, const Tensor& b) { return a / b; }, true));
  ops.push_back(binary("maximum", EwOp::Maximum, [](const Tensor& a, const Tensor& b) { return maximum(a, b); }, false,
                       Check::Elementwise, true));
  ops.push_back(binary("minimum", EwOp::Minimum, [](const Tensor& a, const Tensor& b) { return minimum(a, b); }, false,
                       Check::Elementwise, true));
  const std::pair<const char*, EwOp> cmps[] = {{"eq", EwOp::Eq}, {"ne", EwOp::Ne}, {"lt", EwOp::Lt},
                                               {"le", EwOp::Le}, {"gt", EwOp::Gt}, {"ge", EwOp::Ge}};
  const Fn2 cmp_fns[] = {[](const Tensor& a, const Tensor& b) { return eq(a, b); },
                         [](const Tensor& a, const Tensor& b) { return ne(a, b); },
                         [](const Tensor& a, const Tensor& b) { return lt(a, b); },
                         [](const Tensor& a, const Tensor& b) { return le(a, b); },
                         [](const Tensor& a, const Tensor& b) { return gt(a, b); },
                         [](const Tensor& a, const Tensor& b) { return ge(a, b); }};
  for (size_t i = 0; i < 6; ++i) ops.push_back(binary(cmps[i].first, cmps[i].second, cmp_fns[i], false, Check::Exact, true));
  // where(cond, a, b): forward, and its backward through the masks
  ops.push_back({"where", "elementwise where, mask_true, mask_false", Check::Elementwise,
                 [](DType dt) {
                   Maker m{Generator(seed_of("where", dt)), dt};
                   auto c3 = [&](Shape s) { return m.mask(std::move(s)); };
                   return std::vector<Case>{
                       {"odd (7,13)", {c3({7, 13}), m.normal({7, 13}), m.normal({7, 13})}, {false, true, true}},
                       {"broadcast (3,1,5), (4,1), ()", {c3({3, 1, 5}), m.normal({4, 1}), m.normal({})}, {false, true, true}},
                       {"empty (0,4)", {c3({0, 4}), m.normal({0, 4}), m.normal({4})}, {false, true, true}},
                       {"large", {c3({kLarge}), m.normal({kLarge}), m.normal({kLarge})}, {false, true, true}}};
                 },
                 [](const std::vector<Tensor>& in, const Case&) { return one(where(in[0], in[1], in[2])); }});

  // the backward of a leaf's narrowing cast: the gradient widened back (batched by the engine: cast_batch_kernels)
  ops.push_back({"to(dtype) backward (widening)", "to(dtype), to(dtype), batched", Check::Exact,
                 [](DType dt) {
                   Maker m{Generator(seed_of("to(dtype) backward", dt)), dt};
                   if (dt == DType::F64)
                     return std::vector<Case>{{"to F32 (7,13)", {m.normal({7, 13})}, {true}},
                                              {"to F32 large", {m.normal({kLarge})}, {true}}};
                   return std::vector<Case>{{"to F16 (7,13)", {m.normal({7, 13})}, {true}},
                                            {"to BF16 (7,13)", {m.normal({7, 13})}, {true}},
                                            {"to F16 large", {m.normal({kLarge})}, {true}}};
                 },
                 [](const std::vector<Tensor>& in, const Case& c) {
                   const DType to = c.variant.starts_with("to F16")    ? DType::F16
                                    : c.variant.starts_with("to BF16") ? DType::BF16
                                                                       : DType::F32;
                   return one(in[0].to(to));
                 },
                 {DType::F32, DType::F64}});

  // to(dtype): from each dtype to every dtype, with the values where rounding and range matter
  ops.push_back({"to(dtype)", "to(dtype)", Check::Exact,
                 [](DType dt) {
                   Maker m{Generator(seed_of("to", dt)), dt};
                   std::vector<Case> v = {{"odd (7,13)", {m.normal({7, 13}, 100.0)}, {false}},
                                          {"empty (0,3)", {m.normal({0, 3})}, {false}},
                                          {"large", {m.normal({kLarge}, 1000.0)}, {false}}};
                   if (dt != DType::I64) {
                     const double inf = std::numeric_limits<double>::infinity();
                     const std::vector<double> special = {0.0, -0.0, inf, -inf, std::nan(""), 65504, 65519.99, 65520,
                                                          1e6, 3.4e38, 1e-8, 5.96e-8, 2.98e-8, 2.99e-8, 1e-40,
                                                          1 + 0x1p-11, 1 + 3 * 0x1p-11, 1 + 0x1p-8, 1 + 3 * 0x1p-8,
                                                          -2.5, 255.5, 4097};
                     v.push_back({"specials", {from_vector(special, {int64_t(special.size())}, {.dtype = DType::F64}).to(dt)},
                                  {false}});
                   }
                   return v;
                 },
                 [](const std::vector<Tensor>& in, const Case& c) {
                   std::vector<Tensor> out;
                   for (DType to : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64})
                     if (to != DType::I64 || c.variant != "specials") out.push_back(in[0].to(to));
                   return out;
                 },
                 {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64}});
  // several casts in one batched call (autocast casts an op's inputs and the region's weights with it), with
  // the values where rounding and range matter, and their gradients (the engine's batched widening)
  ops.push_back({"cast_each", "to(dtype), batched", Check::Exact,
                 [](DType dt) {
                   Maker m{Generator(seed_of("cast_each", dt)), dt};
                   const std::vector<double> special = {0.0, -0.0, 65504, 65520, 1e6, 3.4e38, 1e-8, 2.98e-8, 1e-40,
                                                        1 + 0x1p-11, 1 + 3 * 0x1p-11, 1 + 3 * 0x1p-8, -2.5, 4097};
                   const Tensor sp = from_vector(special, {int64_t(special.size())}, {.dtype = DType::F64}).to(dt);
                   return std::vector<Case>{
                       {"to F16", {m.normal({7, 13}, 100.0), sp, m.normal({0, 3}), m.normal({kLarge})}, {true, true, true, true}},
                       {"to BF16", {m.normal({7, 13}, 100.0), sp, m.normal({5}), m.normal({kLarge})}, {true, true, true, true}},
                       {"to F64", {m.normal({7, 13}), sp, m.normal({5}), m.normal({kLarge})}, {true, true, true, true}}};
                 },
                 [](const std::vector<Tensor>& in, const Case& c) {
                   const DType to = c.variant == "to F16" ? DType::F16 : c.variant == "to BF16" ? DType::BF16 : DType::F64;
                   return cast_each(in, to);
                 },
                 {DType::F32, DType::F16, DType::BF16}});
  // strided copies: permute, slice with a step, cat, transpose; their backward copies back
  ops.push_back({"copy (permute, slice, cat)", "copy", Check::Exact,
                 [](DType dt) {
                   Maker m{Generator(seed_of("copy", dt)), dt};
                   const bool g = dt != DType::I64;
                   return std::vector<Case>{{"(2,3,4,5)", {m.normal({2, 3, 4, 5}, 10.0), m.normal({2, 3, 4, 5})}, {g, g}},
                                            {"(1,7,1,3)", {m.normal({1, 7, 1, 3}, 10.0), m.normal({1, 7, 1, 3})}, {g, g}},
                                            {"empty (0,3,2,2)", {m.normal({0, 3, 2, 2}), m.normal({0, 3, 2, 2})}, {g, g}},
                                            {"large (1,1031,1,1067)", {m.normal({1, 1031, 1, 1067}), m.normal({1, 1031, 1, 1067})},
                                             {g, g}}};
                 },
                 [](const std::vector<Tensor>& in, const Case&) {
                   const Tensor p = permute(in[0], {3, 0, 2, 1});
                   const Tensor s = slice(p, 0, 0, p.shape()[0], 2);
                   return std::vector<Tensor>{cat({p, permute(in[1], {3, 0, 2, 1})}, 3).clone(), s.clone(),
                                              transpose(in[1], 1, 3).clone()};
                 },
                 {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64}});

  // matmul: 2-D, every transpose flag, batched, broadcast, empty M and empty K, large; and linear
  ops.push_back({"matmul", "matmul", Check::Gemm,
                 [](DType dt) {
                   Maker m{Generator(seed_of("matmul", dt)), dt};
                   auto x = [&](Shape s) { return m.normal(std::move(s), 0.5); };
                   return std::vector<Case>{
                       {"(7,13)x(13,5)", {x({7, 13}), x({13, 5})}, {true, true}, {0, 0}},
                       {"(13,7)^T x (13,5)", {x({13, 7}), x({13, 5})}, {true, true}, {1, 0}},
                       {"(7,13) x (5,13)^T", {x({7, 13}), x({5, 13})}, {true, true}, {0, 1}},
                       {"(13,7)^T x (5,13)^T", {x({13, 7}), x({5, 13})}, {true, true}, {1, 1}},
                       {"batched (3,4,6)x(3,6,5)", {x({3, 4, 6}), x({3, 6, 5})}, {true, true}, {0, 0}},
                       {"broadcast (4,6)x(3,6,5)", {x({4, 6}), x({3, 6, 5})}, {true, true}, {0, 0}},
                       {"empty K (3,0)x(0,4)", {x({3, 0}), x({0, 4})}, {true, true}, {0, 0}},
                       {"empty M (0,5)x(5,3)", {x({0, 5}), x({5, 3})}, {true, true}, {0, 0}},
                       {"large (131,257)x(257,67)", {x({131, 257}), x({257, 67})}, {true, true}, {0, 0}}};
                 },
                 [](const std::vector<Tensor>& in, const Case& c) {
                   const Trans ta = c.dims[0] ? Trans::T : Trans::N, tb = c.dims[1] ? Trans::T : Trans::N;
                   return one(matmul(in[0], in[1], {.trans_a = ta, .trans_b = tb}));
                 }});
  ops.push_back({"linear", "matmul, reduce (the bias gradient)", Check::Gemm,
                 [](DType dt) {
                   Maker m{Generator(seed_of("linear", dt)), dt};
                   return std::vector<Case>{
                       {"(17,33) w(9,33) b(9)", {m.normal({17, 33}), m.normal({9, 33}, 0.2), m.normal({9})}, {true, true, true}},
                       {"(2,5,33) w(9,33) b(9)", {m.normal({2, 5, 33}), m.normal({9, 33}, 0.2), m.normal({9})}, {true, true, true}},
                       {"(0,33) w(9,33) b(9)", {m.normal({0, 33}), m.normal({9, 33}, 0.2), m.normal({9})}, {true, true, true}},
                       {"large (1500,64) w(700,64) b(700)", {m.normal({1500, 64}), m.normal({700, 64}, 0.2), m.normal({700})},
                        {true, true, true}}};
                 },
                 [](const std::vector<Tensor>& in, const Case&) { return one(linear(in[0], in[1], in[2])); }});
  ops.push_back({"linear + relu", "linear (the GEMM epilogues: bias + ReLU, bias gradient), matmul", Check::Gemm,
                 [](DType dt) {
                   Maker m{Generator(seed_of("linear + relu", dt)), dt};
                   return std::vector<Case>{
                       {"(17,33) w(9,33) b(9)", {m.normal({17, 33}), m.normal({9, 33}, 0.2), m.normal({9})}, {true, true, true}},
                       {"(64,784) w(256,784) b(256)", {m.normal({64, 784}), m.normal({256, 784}, 0.05), m.normal({256})},
                        {true, true, true}},
                       {"(1,1) w(1,1) b(1)", {m.normal({1, 1}), m.normal({1, 1}), m.normal({1})}, {true, true, true}}};
                 },
                 [](const std::vector<Tensor>& in, const Case&) {
                   return one(linear(in[0], in[1], in[2], Activation::Relu));
                 }});

  // reductions
  ops.push_back({"sum", "reduce", Check::Reduction, [](DType dt) { return reduce_cases("sum", dt, false, true); },
                 [](const std::vector<Tensor>& in, const Case& c) {
                   return one(c.dims.empty() ? sum(in[0]) : sum(in[0], c.dims, {.keepdim = c.keepdim}));
                 }});
  ops.push_back({"mean", "reduce", Check::Reduction, [](DType dt) { return reduce_cases("mean", dt, false, false); },
                 [](const std::vector<Tensor>& in, const Case& c) {
                   return one(c.dims.empty() ? mean(in[0]) : mean(in[0], c.dims, {.keepdim = c.keepdim}));
                 }});
  ops.push_back({"var", "reduce", Check::Reduction, [](DType dt) { return reduce_cases("var", dt, false, false); },
                 [](const std::vector<Tensor>& in, const Case& c) {
                   return one(var(in[0], c.dims, {.correction = 1, .keepdim = c.keepdim}));
                 }});
  for (bool is_max : {true, false}) {
    const std::string name = is_max ? "max" : "min";
    ops.push_back({name + " (values, indices)", "reduce", Check::Exact,
                   [name](DType dt) { return reduce_cases(name, dt, true, false); },
                   [is_max](const std::vector<Tensor>& in, const Case& c) {
                     if (c.dims.empty()) return std::vector<Tensor>{is_max ? max(in[0]) : min(in[0]), argmax(in[0])};
                     const ValuesIndices r = is_max ? max(in[0], c.dims[0], {.keepdim = c.keepdim})
                                                    : min(in[0], c.dims[0], {.keepdim = c.keepdim});
                     return std::vector<Tensor>{r.values, r.indices};
                   }});
  }
  for (bool log : {false, true}) {
    const std::string name = log ? "log_softmax" : "softmax";
    ops.push_back({name, "softmax, softmax backward", Check::Reduction,
                   [name](DType dt) {
                     Maker m{Generator(seed_of(name, dt)), dt};
                     return std::vector<Case>{{"dim 1 of (7,13)", {m.normal({7, 13}, 2.0)}, {true}, {1}},
                                              {"dim 0 of (37,5) (non-last)", {m.normal({37, 5}, 2.0)}, {true}, {0}},
                                              {"dim 1 of (3,41,6)", {m.normal({3, 41, 6}, 2.0)}, {true}, {1}},
                                              {"dim 1 of (0,5)", {m.normal({0, 5})}, {true}, {1}},
                                              {"dim 1 of (3,70001) (long rows)", {m.normal({3, 70001}, 3.0)}, {true}, {1}},
                                              {"dim 1 of (5000,217)", {m.normal({5000, 217}, 2.0)}, {true}, {1}}};
                   },
                   [log](const std::vector<Tensor>& in, const Case& c) {
                     return one(log ? log_softmax(in[0], c.dims[0]) : softmax(in[0], c.dims[0]));
                   }});
  }

  // convolution: cuDNN on a GPU, the emulator's reference convolution on the emulated device
  ops.push_back({"conv2d", "conv2d, conv2d backward (dx), conv2d backward (dw), reduce (the bias gradient)", Check::Gemm,
                 [](DType dt) {
                   Maker m{Generator(seed_of("conv2d", dt)), dt};
                   return std::vector<Case>{
                       {"(2,3,9,7) w(4,3,3,3) b stride 2 pad 1", {m.normal({2, 3, 9, 7}), m.normal({4, 3, 3, 3}, 0.3), m.normal({4})},
                        {true, true, true}, {2, 1, 1, 1}},
                       {"(1,2,8,8) w(3,2,3,3) dilation 2", {m.normal({1, 2, 8, 8}), m.normal({3, 2, 3, 3}, 0.3), Tensor()},
                        {true, true, false}, {1, 0, 2, 1}},
                       {"(2,4,5,5) w(6,2,1,1) groups 2", {m.normal({2, 4, 5, 5}), m.normal({6, 2, 1, 1}, 0.3), m.normal({6})},
                        {true, true, true}, {1, 0, 1, 2}},
                       {"large (4,16,32,32) w(32,16,3,3) pad 1", {m.normal({4, 16, 32, 32}), m.normal({32, 16, 3, 3}, 0.1), m.normal({32})},
                        {true, true, true}, {1, 1, 1, 1}}};
                 },
                 [](const std::vector<Tensor>& in, const Case& c) {
                   return one(conv2d(in[0], in[1], in[2], {.stride = c.dims[0], .padding = c.dims[1], .dilation = c.dims[2],
                                                           .groups = c.dims[3]}));
                 }});

  // losses
  for (int red = 0; red < 3; ++red) {
    const Reduction r = red == 0 ? Reduction::Mean : red == 1 ? Reduction::Sum : Reduction::None;
    const std::string name = std::string("cross_entropy ") + (red == 0 ? "mean" : red == 1 ? "sum" : "none");
    ops.push_back({name, "cross_entropy, cross_entropy backward", Check::Reduction,
                   [name](DType dt) {
                     Maker m{Generator(seed_of(name, dt)), dt};
                     return std::vector<Case>{
                         {"(37,10) ignore_index", {m.normal({37, 10}, 3.0), m.classes({37}, 10, 5)}, {true, false}, {0}},
                         {"(9,1000) label_smoothing 0.1", {m.normal({9, 1000}, 2.0), m.classes({9}, 1000)}, {true, false}, {1}},
                         {"spatial (4,7,3,5)", {m.normal({4, 7, 3, 5}), m.classes({4, 3, 5}, 7, 4)}, {true, false}, {0}},
                         {"(0,6)", {m.normal({0, 6}), m.classes({0}, 6)}, {true, false}, {0}},
                         {"large (3,70001)", {m.normal({3, 70001}, 2.0), m.classes({3}, 70001)}, {true, false}, {0}},
                         {"(2500,11)", {m.normal({2500, 11}, 2.0), m.classes({2500}, 11, 7)}, {true, false}, {1}}};
                   },
                   [r](const std::vector<Tensor>& in, const Case& c) {
                     return one(cross_entropy(in[0], in[1], {.reduction = r, .label_smoothing = c.dims[0] ? 0.1 : 0.0}));
                   }});
  }
  ops.push_back({"nll_loss", "cross_entropy, cross_entropy backward", Check::Reduction,
                 [](DType dt) {
                   Maker m{Generator(seed_of("nll", dt)), dt};
                   return std::vector<Case>{{"(21,6)", {m.normal({21, 6}), m.classes({21}, 6, 3)}, {true, false}}};
                 },
                 [](const std::vector<Tensor>& in, const Case&) { return one(nll_loss(log_softmax(in[0], 1), in[1])); }});

  // dropout: the same Philox stream on both devices gives the same mask, bit for bit
  ops.push_back({"dropout", "dropout", Check::Exact,
                 [](DType dt) {
                   Maker m{Generator(seed_of("dropout", dt)), dt};
                   return std::vector<Case>{{"p 0.1 (3,1001)", {m.normal({3, 1001})}, {true}, {1}},
                                            {"p 0.5 (7)", {m.normal({7})}, {true}, {5}},
                                            {"p 0.9 (0,4)", {m.normal({0, 4})}, {true}, {9}},
                                            {"p 0.3 large", {m.normal({kLarge})}, {true}, {3}}};
                 },
                 [](const std::vector<Tensor>& in, const Case& c) {
                   Generator g(1234);
                   return one(dropout(in[0], {.p = double(c.dims[0]) / 10.0, .generator = &g}));
                 }});
  add_fp8_cases(ops);
  // embedding: repeated indices (scatter-add), padding_idx, no indices, many rows
  ops.push_back({"embedding", "embedding, embedding backward", Check::Reduction,
                 [](DType dt) {
                   Maker m{Generator(seed_of("embedding", dt)), dt};
                   return std::vector<Case>{{"(2,5) of (8,33)", {m.classes({2, 5}, 8), m.normal({8, 33})}, {false, true}, {-1}},
                                            {"padding_idx 3", {m.classes({4, 6}, 8), m.normal({8, 33})}, {false, true}, {3}},
                                            {"no indices (0)", {m.classes({0}, 8), m.normal({8, 5})}, {false, true}, {-1}},
                                            {"large (4000) of (500,300)", {m.classes({4000}, 500), m.normal({500, 300})},
                                             {false, true}, {-1}}};
                 },
                 [](const std::vector<Tensor>& in, const Case& c) {
                   return one(embedding(in[0], in[1], {.padding_idx = c.dims[0]}));
                 }});

  // normalisation: batch_norm in training (with running statistics) and eval; layer_norm
  ops.push_back({"batch_norm", "batch_norm, batch_norm backward", Check::Reduction,
                 [](DType dt) {
                   Maker m{Generator(seed_of("bn", dt)), dt};
                   auto stats = [&](int64_t c) {
                     return std::vector<Tensor>{m.normal({c}, 0.1).to(DType::F32), m.positive({c}, 0.5, 1.0).to(DType::F32)};
                   };
                   auto mk = [&](std::string v, Shape x, int64_t c, int64_t training) {
                     std::vector<Tensor> s = stats(c);
                     return Case{std::move(v), {m.normal(std::move(x), 2.0), m.positive({c}), m.normal({c}), s[0], s[1]},
                                 {true, true, true, false, false}, {training}};
                   };
                   return std::vector<Case>{mk("training (9,5)", {9, 5}, 5, 1), mk("training (4,3,7,5)", {4, 3, 7, 5}, 3, 1),
                                            mk("eval (4,3,7,5)", {4, 3, 7, 5}, 3, 0),
                                            mk("training large (6,4,215,215)", {6, 4, 215, 215}, 4, 1)};
                 },
                 [](const std::vector<Tensor>& in, const Case& c) {
                   Tensor rm = in[3].clone(), rv = in[4].clone();
                   const Tensor y = batch_norm(in[0], rm, rv, in[1], in[2], {.training = c.dims[0] == 1});
                   return std::vector<Tensor>{y, rm, rv};
                 }});
  ops.push_back({"layer_norm", "layer_norm, layer_norm backward", Check::Reduction,
                 [](DType dt) {
                   Maker m{Generator(seed_of("ln", dt)), dt};
                   return std::vector<Case>{
                       {"(7,13) over 1", {m.normal({7, 13}, 2.0), m.positive({13}), m.normal({13})}, {true, true, true}, {1}},
                       {"(2,3,4,5) over 2", {m.normal({2, 3, 4, 5}), m.positive({4, 5}), m.normal({4, 5})}, {true, true, true}, {2}},
                       {"(3,33) without affine", {m.normal({3, 33}), Tensor(), Tensor()}, {true, false, false}, {1}},
                       {"(0,8) over 1", {m.normal({0, 8}), m.positive({8}), m.normal({8})}, {true, true, true}, {1}},
                       {"large (4100,270) over 1", {m.normal({4100, 270}), m.positive({270}), m.normal({270})},
                        {true, true, true}, {1}}};
                 },
                 [](const std::vector<Tensor>& in, const Case& c) {
                   const Shape& s = in[0].shape();
                   std::vector<int64_t> norm(s.dims().end() - c.dims[0], s.dims().end());
                   return one(layer_norm(in[0], norm, in[1], in[2]));
                 }});

  // pooling
  ops.push_back({"max_pool2d", "pool2d, pool2d backward", Check::Exact,
                 [](DType dt) {
                   Maker m{Generator(seed_of("maxpool", dt)), dt};
                   return std::vector<Case>{{"(2,3,11,9) k2", {m.ints({2, 3, 11, 9})}, {true}, {2, 0, 0, 0}},
                                            {"(2,3,11,9) k3 s2 p1 ceil", {m.normal({2, 3, 11, 9})}, {true}, {3, 2, 1, 1}},
                                            {"large (8,16,96,96) k2", {m.normal({8, 16, 96, 96})}, {true}, {2, 0, 0, 0}}};
                 },
                 [](const std::vector<Tensor>& in, const Case& c) {
                   return one(max_pool2d(in[0], {.kernel_size = c.dims[0], .stride = c.dims[1], .padding = c.dims[2],
                                                 .ceil_mode = c.dims[3] != 0}));
                 }});
  ops.push_back({"avg_pool2d", "pool2d, pool2d backward", Check::Reduction,
                 [](DType dt) {
                   Maker m{Generator(seed_of("avgpool", dt)), dt};
                   return std::vector<Case>{{"(2,3,11,9) k3 s2 p1 exclude pad", {m.normal({2, 3, 11, 9})}, {true}, {0}},
                                            {"(2,3,11,9) k3 s2 p1 include pad", {m.normal({2, 3, 11, 9})}, {true}, {1}},
                                            {"large (8,16,96,96) k3 s2 p1", {m.normal({8, 16, 96, 96})}, {true}, {1}}};
                 },
                 [](const std::vector<Tensor>& in, const Case& c) {
                   return one(avg_pool2d(in[0], {.kernel_size = 3, .stride = 2, .padding = 1, .count_include_pad = c.dims[0] != 0}));
                 }});
  ops.push_back({"adaptive_avg_pool2d", "pool2d, pool2d backward", Check::Reduction,
                 [](DType dt) {
                   Maker m{Generator(seed_of("adaptive", dt)), dt};
                   return std::vector<Case>{{"(2,3,11,9) to (4,3)", {m.normal({2, 3, 11, 9})}, {true}, {4, 3}},
                                            {"(1,5,7,7) to (1,1)", {m.normal({1, 5, 7, 7})}, {true}, {1, 1}}};
                 },
                 [](const std::vector<Tensor>& in, const Case& c) {
                   return one(adaptive_avg_pool2d(in[0], {c.dims[0], c.dims[1]}));
                 }});
  add_training_cases(ops);
  return ops;
}

}  // namespace

int main(int argc, char** argv) {
  std::string only_op, only_dtype, uncovered;
  bool list = false, verbose = false;
  int shard = 0, shards = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-o" && i + 1 < argc) only_op = argv[++i];
    else if (a == "-t" && i + 1 < argc) only_dtype = argv[++i];
    else if (a == "--shard" && i + 1 < argc && std::sscanf(argv[i + 1], "%d/%d", &shard, &shards) == 2 && shards > 0 &&
             shard >= 0 && shard < shards)
      ++i;
    else if (a == "--uncovered" && i + 1 < argc) uncovered = argv[++i];
    else if (a == "--list") list = true;
    else if (a == "-v") verbose = true;
    else {
      std::fprintf(stderr, "usage: %s [-o SUBSTRING] [-t F32|F16|BF16|F64|I64] [--shard K/N] [--uncovered FILE] "
                   "[--list] [-v]\n  --shard K/N      only the ops whose index is K modulo N (CTest runs two shards side "
                   "by side)\n  --uncovered FILE the kernel slots that never ran, one per line (the shards' lists must "
                   "have no line in common)\n", argv[0]);
      return 2;
    }
  }
  const std::vector<OpCase> ops = op_cases();
  if (list) {
    for (const OpCase& op : ops) {
      std::printf("%s  [tables: %s]\n", op.name.c_str(), op.tables.c_str());
      for (const Case& c : op.cases(DType::F32)) std::printf("    %s\n", c.variant.c_str());
    }
    return 0;
  }
  std::printf("cuda versions: %s\n", cuda::version_info().c_str());
  if (!cuda::is_available()) {
    std::printf("no CUDA device: skipping (%s)\n", cuda::unavailable_reason().c_str());
    return 77;
  }
  const Device gpu = Device::cuda();
  int cases = 0, failed = 0;
  for (size_t k = 0; k < ops.size(); ++k) {
    const OpCase& op = ops[k];
    if (static_cast<int>(k % static_cast<size_t>(shards)) != shard) continue;
    if (!only_op.empty() && op.name.find(only_op) == std::string::npos) continue;
    const auto t0 = std::chrono::steady_clock::now();
    std::string line = op.name;
    line.resize(std::max<size_t>(line.size(), 36), ' ');
    for (DType dt : op.dtypes) {
      if (!only_dtype.empty() && only_dtype != dtype_name(dt)) continue;
      int ok = 0, n = 0;
      for (const Case& c : op.cases(dt)) {
        ++n;
        std::vector<std::string> fails;
        try {
          fails = run_case(op, c, gpu);
        } catch (const std::exception& e) {
          fails = {std::string("threw: ") + e.what()};
        }
        if (fails.empty()) ++ok;
        for (const std::string& f : fails)
          std::printf("FAIL %s %s %s: %s\n", op.name.c_str(), dtype_name(dt), c.variant.c_str(), f.c_str());
        if (verbose && fails.empty()) std::printf("  ok %s %s %s\n", op.name.c_str(), dtype_name(dt), c.variant.c_str());
      }
      cases += n;
      failed += n - ok;
      line += std::string(" ") + dtype_name(dt) + " " + std::to_string(ok) + "/" + std::to_string(n);
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s  (%.1f s)\n", line.c_str(), secs);
    std::fflush(stdout);
  }
  std::printf("backend ops: %d cases, %d passed, %d failed\n", cases, cases - failed, failed);
  const int never_ran = test::print_cuda_coverage();
  if (!uncovered.empty()) {
    std::FILE* f = std::fopen(uncovered.c_str(), "w");
    if (f == nullptr) {
      std::printf("FAILED: cannot write %s\n", uncovered.c_str());
      return 1;
    }
    for (const KernelCoverage& row : kernel_coverage(DeviceType::CUDA))
      for (DType t : row.missing) std::fprintf(f, "%s %s\n", row.table.c_str(), dtype_name(t));
    std::fclose(f);
  }
  if (only_op.empty() && only_dtype.empty() && shards == 1 && never_ran > 0) {
    std::printf("FAILED: %d registered CUDA kernel(s) have no case here: add one to tests/backend_ops/ (main.cpp or a family file)\n",
                never_ran);
    return 1;
  }
  return failed == 0 ? 0 : 1;
}
