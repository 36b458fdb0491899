// Higher-order gradients: autograd::grad (torch.autograd.grad) and backward(create_graph). Second derivatives of
// every op that supports them are checked against central differences of the first derivatives (gradgradcheck);
// the ops that do not are refused with an error naming them; a gradient penalty under a GradScaler equals the
// unscaled one.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "halfgrad.h"
#include "test_util.h"

using namespace hg;
using Catch::Contains;

namespace {

Tensor f64(std::vector<double> v, Shape s, bool grad = true) {
  return from_vector(v, s, {.dtype = DType::F64, .requires_grad = grad});
}
Tensor scalar(double v) { return f64({v}, {}); }
Tensor rand64(Shape s, uint64_t seed, bool grad = true, double lo = -1, double hi = 1) {
  Generator gen(seed);
  Tensor t = rand(s, {.dtype = DType::F64}, &gen);
  t = (t * (hi - lo) + lo).detach();
  t.requires_grad_(grad);
  return t;
}

void require_gradgrad(const GradcheckFn& f, const std::vector<Tensor>& in) {
  const GradcheckResult r = gradgradcheck(f, in);
  INFO(r.message);
  REQUIRE(r.ok);
}

}  // namespace

TEST_CASE("autograd::grad: first and second derivatives of x^3, and create_graph's graph", "[autograd][double]") {
  const Tensor x = scalar(3);
  const Tensor y = pow(x, 3.0);
  const std::vector<Tensor> g = autograd::grad({y}, {x}, {}, {.create_graph = true});
  REQUIRE(g.size() == 1);
  CHECK(g[0].item() == 27);  // 3 x^2
  CHECK(g[0].requires_grad());
  CHECK_FALSE(x.grad().defined());  // grad() never accumulates into .grad
  const std::vector<Tensor> g2 = autograd::grad({g[0]}, {x}, {}, {.create_graph = true});
  CHECK(g2[0].item() == 18);  // 6 x
  const std::vector<Tensor> g3 = autograd::grad({g2[0]}, {x});
  CHECK(g3[0].item() == 6);
  CHECK_FALSE(g3[0].requires_grad());  // without create_graph the result is a constant
}

TEST_CASE("backward(create_graph): .grad carries a graph and a second backward accumulates into it",
          "[autograd][double]") {
  Tensor x = scalar(3);
  // the first backward(create_graph) of the process (CTest runs each case alone; no earlier case in this binary makes
  // one) warns about the reference cycle, once, as torch does
  const std::string err = hg::test::capture_stderr([&] { pow(x, 3.0).backward({}, {.create_graph = true}); });
  CHECK_THAT(err, Contains("reference cycle") && Contains("autograd::grad"));
  REQUIRE(x.grad().defined());
  CHECK(x.grad().item() == 27);
  CHECK(x.grad().requires_grad());
  x.grad().backward();  // d(3x^2)/dx = 18 accumulated, as torch: 27 + 18
  CHECK(x.grad().item() == 45);
  x.zero_grad();
  CHECK(hg::test::capture_stderr([&] { pow(x, 3.0).backward({}, {.create_graph = true}); }).empty());  // once
  CHECK(x.grad().item() == 27);
  x.zero_grad();  // drops the gradient and with it the graph it held (a reference cycle through x otherwise)
}

TEST_CASE("autograd::grad: several outputs and inputs, grad_outputs, non-leaf inputs, allow_unused",
          "[autograd][double]") {
  const Tensor a = f64({1, 2}, {2}), b = f64({3, -1}, {2}), unused = f64({5}, {1});
  const Tensor h = a * b;  // a non-leaf input
  const Tensor y1 = sum(h * h), y2 = sum(a);
  // d(y1 + 2 y2)/da = 2 h b + 2, d/dh = 2 h, and no .grad touched
  const std::vector<Tensor> g = autograd::grad({y1, y2}, {a, h}, {scalar(1).detach(), scalar(2).detach()},
                                               {.retain_graph = true});
  CHECK(g[0].to_vector<double>() == std::vector<double>{2 * 3 * 3 + 2, 2 * -2 * -1 + 2});
  CHECK(g[1].to_vector<double>() == std::vector<double>{6, -4});
  CHECK_FALSE(a.grad().defined());
  CHECK_FALSE(b.grad().defined());
  REQUIRE_THROWS_WITH(autograd::grad({y2}, {a, unused}, {}, {.retain_graph = true}),
                      Contains("input 1") && Contains("allow_unused"));
  const std::vector<Tensor> u = autograd::grad({y2}, {a, unused}, {}, {.retain_graph = true, .allow_unused = true});
  CHECK(u[0].to_vector<double>() == std::vector<double>{1, 1});
  CHECK_FALSE(u[1].defined());
  REQUIRE_THROWS_WITH(autograd::grad({y2}, {a, a}), Contains("appears twice"));
  REQUIRE_THROWS_WITH(autograd::grad({y2}, {f64({1}, {1}, false)}), Contains("does not require grad"));
  REQUIRE_THROWS_WITH(autograd::grad({h}, {a}), Contains("one-element outputs"));
  // without retain_graph (and without create_graph) the graph is freed
  const Tensor z = sum(exp(a));
  autograd::grad({z}, {a});
  REQUIRE_THROWS_WITH(autograd::grad({z}, {a}), Contains("second time"));
  // create_graph retains it by default
  const Tensor w = sum(exp(a));
  autograd::grad({w}, {a}, {}, {.create_graph = true});
  CHECK_NOTHROW(autograd::grad({w}, {a}));
}

TEST_CASE("autograd::grad runs only the part of the graph that leads to its inputs", "[autograd][double]") {
  const Tensor a = f64({0.5, -0.25}, {2});
  Generator gen(4);
  const Tensor b = randn({2, 16}, {}, &gen).requires_grad_(), w = randn({3, 16}, {}, &gen);
  const auto st = std::make_shared<Fp8LinearState>(Fp8Recipe{});
  // fp8_linear has no differentiable backward: a create_graph grad through it is refused, one that does not need
  // it is not
  const Tensor y = sum(pow(fp8_linear(b, w, Tensor(), st), 2.0)).to(DType::F64) + sum(a * a);
  const std::vector<Tensor> g = autograd::grad({y}, {a}, {}, {.create_graph = true});
  CHECK(g[0].to_vector<double>() == std::vector<double>{1.0, -0.5});
  REQUIRE_THROWS_WITH(autograd::grad({y}, {b}, {}, {.create_graph = true}),
                      Contains("'fp8_linear'") && Contains("no differentiable backward"));
  // its input detached, it is a constant there
  const Tensor z = sum(fp8_linear(b.detach(), w, Tensor(), st)).to(DType::F64) * sum(a);
  CHECK_NOTHROW(autograd::grad({z}, {a}, {}, {.create_graph = true}));
}

TEST_CASE("gradgradcheck: unary ops", "[autograd][double]") {
  const Tensor pos = rand64({5}, 1, true, 0.5, 2.0), any = rand64({5}, 2);
  const std::vector<std::pair<const char*, std::function<Tensor(const Tensor&)>>> ops{
      {"exp", [](const Tensor& x) { return exp(x); }},
      {"log", [](const Tensor& x) { return log(x); }},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }},
      {"tanh", [](const Tensor& x) { return tanh(x); }},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }},
      {"silu", [](const Tensor& x) { return silu(x); }},
      {"erf", [](const Tensor& x) { return erf(x) * x; }},
      {"pow 3", [](const Tensor& x) { return pow(x, 3.0); }},
      {"pow 2.5", [](const Tensor& x) { return pow(x, 2.5); }},
      {"pow -1.5", [](const Tensor& x) { return pow(x, -1.5); }},
      {"rdiv", [](const Tensor& x) { return 2.0 / x; }},
      {"scalar ops", [](const Tensor& x) { return ((x + 1.5) * 3.0 - 0.5) / 4.0 * x; }},
      {"rsub, neg", [](const Tensor& x) { return (1.0 - x) * (-x) * x; }},
      // kinks away from the points: the second derivative of the product is the masked one
      {"relu", [](const Tensor& x) { return relu(x) * x; }},
      {"abs", [](const Tensor& x) { return abs(x) * x; }},
      {"clamp", [](const Tensor& x) { return clamp(x, 0.7, 1.8) * x; }},
  };
  for (const auto& [name, fn] : ops) {
    INFO(name);
    require_gradgrad([fn = fn](const std::vector<Tensor>& in) { return fn(in[0]); }, {pos});
  }
  require_gradgrad([](const std::vector<Tensor>& in) { return tanh(in[0]) * sigmoid(in[0]); }, {any});
  require_gradgrad([](const std::vector<Tensor>& in) { return gelu(in[0], GeluApprox::Tanh) * in[0]; }, {any});
}

TEST_CASE("gradgradcheck: binary ops with broadcasting, reductions, softmax", "[autograd][double]") {
  const Tensor a = rand64({3, 4}, 3), b = rand64({4}, 4, true, 0.5, 1.5), c = rand64({3, 1}, 5);
  require_gradgrad([](const std::vector<Tensor>& in) { return in[0] * in[1] + in[2] * in[0] - in[1]; }, {a, b, c});
  require_gradgrad([](const std::vector<Tensor>& in) { return in[0] / in[1] * in[0]; }, {a, b});
  // maximum/minimum away from ties (a in [-1, 1], b in [0.5, 1.5] shifted apart), and a tie's even split
  require_gradgrad([](const std::vector<Tensor>& in) {
    return maximum(in[0], in[1] - 0.25) * in[0] + minimum(in[0] * in[0], in[1]) * in[1];
  }, {a, b});
  const Tensor t = f64({2.0}, {1});
  const std::vector<Tensor> tie = autograd::grad({sum(maximum(t * t, t * 2.0))}, {t}, {}, {.create_graph = true});
  CHECK(tie[0].item() == 3);  // half of d(t^2)/dt = 4 plus half of d(2t)/dt = 2, at t = 2 where both are 4
  CHECK(autograd::grad({tie[0]}, {t})[0].item() == 1);  // half of the second derivative 2, plus 0
  require_gradgrad([](const std::vector<Tensor>& in) { return (in[1] - in[0] * in[0]) / (in[1] * in[1]); }, {a, b});
  require_gradgrad([](const std::vector<Tensor>& in) { return sum(in[0] * in[0], {1}) * mean(in[0]); }, {a});
  require_gradgrad([](const std::vector<Tensor>& in) { return mean(pow(in[0], 3.0), {0}, {.keepdim = true}); }, {a});
  require_gradgrad([](const std::vector<Tensor>& in) { return softmax(in[0], 1); }, {a});
  require_gradgrad([](const std::vector<Tensor>& in) { return log_softmax(in[0], 0); }, {a});
}

TEST_CASE("gradgradcheck: shape ops and casts", "[autograd][double]") {
  const Tensor a = rand64({2, 3}, 6), b = rand64({2, 3}, 7);
  require_gradgrad([](const std::vector<Tensor>& in) {
    const Tensor t = in[0].reshape({3, 2}).transpose(0, 1) * in[1];
    return cat({t, flip(t, {1})}, 0) * cat({in[0], in[1]}, 0);
  }, {a, b});
  require_gradgrad([](const std::vector<Tensor>& in) {
    return expand(in[0].reshape({2, 1, 3}), {2, 4, 3}).contiguous() * unsqueeze(in[1], 1) * in[0].clone().unsqueeze(1);
  }, {a, b});
  // through F32 and back: the cast's backward casts the gradient back, differentiably (loose: F32 rounding)
  const GradcheckResult r = gradgradcheck([](const std::vector<Tensor>& in) {
    const Tensor x = in[0].to(DType::F32);
    return (x * x * x).to(DType::F64);
  }, {a}, {.eps = 1e-3, .atol = 1e-3, .rtol = 1e-2});
  INFO(r.message);
  CHECK(r.ok);
}

TEST_CASE("gradgradcheck: matmul (2-D, batched, shared, transposed) and linear (+bias, +ReLU)", "[autograd][double]") {
  const Tensor a = rand64({3, 4}, 8), b = rand64({4, 2}, 9), ba = rand64({2, 3, 4}, 10), bb = rand64({2, 4, 2}, 11);
  require_gradgrad([](const std::vector<Tensor>& in) { return matmul(in[0], in[1]) * matmul(in[0], in[1]); }, {a, b});
  require_gradgrad([](const std::vector<Tensor>& in) { return pow(matmul(in[0], in[1]), 2.0); }, {ba, bb});
  require_gradgrad([](const std::vector<Tensor>& in) { return pow(matmul(in[0], in[1]), 2.0); }, {a, bb});  // shared a
  const Tensor at = rand64({4, 3}, 12), bt = rand64({2, 4}, 13);
  require_gradgrad([](const std::vector<Tensor>& in) {
    return pow(matmul(in[0], in[1], {.trans_a = Trans::T, .trans_b = Trans::T}), 2.0);
  }, {at, bt});
  const Tensor x = rand64({5, 4}, 14), w = rand64({3, 4}, 15), bias = rand64({3}, 16);
  require_gradgrad([](const std::vector<Tensor>& in) { return tanh(linear(in[0], in[1], in[2])); }, {x, w, bias});
  // ReLU fused: away from its kink, the square keeps a second derivative
  require_gradgrad([](const std::vector<Tensor>& in) { return pow(linear(in[0], in[1], in[2], Activation::Relu), 2.0); },
                   {x, w, bias});
  const Tensor x3 = rand64({2, 5, 4}, 17);  // leading dims flattened
  require_gradgrad([](const std::vector<Tensor>& in) { return sigmoid(linear(in[0], in[1])); }, {x3, w});
}

TEST_CASE("gradgradcheck: cross_entropy, nll_loss and mse_loss in every reduction", "[autograd][double]") {
  const Tensor x = rand64({4, 5}, 18, true, -2, 2);
  const Tensor t = from_vector(std::vector<int64_t>{1, 0, 4, 2}, {4}, {.dtype = DType::I64});
  const Tensor t_ignored = from_vector(std::vector<int64_t>{1, -100, 4, 2}, {4}, {.dtype = DType::I64});
  for (const Reduction red : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    INFO(static_cast<int>(red));
    require_gradgrad([&](const std::vector<Tensor>& in) {
      return cross_entropy(in[0] * in[0], t, {.reduction = red});
    }, {x});
    require_gradgrad([&](const std::vector<Tensor>& in) {
      return cross_entropy(in[0] * in[0], t_ignored, {.reduction = red, .label_smoothing = 0.1});
    }, {x});
    require_gradgrad([&](const std::vector<Tensor>& in) {
      return nll_loss(log_softmax(in[0] * in[0], 1), t_ignored, {.reduction = red});
    }, {x});
    const Tensor y = rand64({4, 5}, 19, false);
    require_gradgrad([&](const std::vector<Tensor>& in) { return mse_loss(tanh(in[0]), y, {.reduction = red}); }, {x});
  }
  // with class weights (composed of log_softmax, gather and index_select), probabilities as targets, BCE, L1
  const Tensor cw = from_vector(std::vector<double>{0.5, 1.0, 2.0, 1.5, 0.25}, {5}, {.dtype = DType::F64});
  require_gradgrad([&](const std::vector<Tensor>& in) {
    return cross_entropy(in[0] * in[0], t_ignored, {.label_smoothing = 0.2, .weight = cw});
  }, {x});
  require_gradgrad([&](const std::vector<Tensor>& in) {
    return nll_loss(log_softmax(in[0] * in[0], 1), t, {.reduction = Reduction::Sum, .weight = cw});
  }, {x});
  const Tensor probs = softmax(rand64({4, 5}, 23, false), 1);
  require_gradgrad([&](const std::vector<Tensor>& in) { return cross_entropy(in[0] * in[0], probs); }, {x});
  const Tensor bits = gt(rand64({4, 5}, 24, false), 0.0).to(DType::F64);
  require_gradgrad([&](const std::vector<Tensor>& in) {
    return binary_cross_entropy_with_logits(in[0] * in[0], bits) + l1_loss(in[0] * in[0], bits);
  }, {x});
  // class dims after the classes: (N, C, d)
  const Tensor x3 = rand64({2, 3, 2}, 20);
  const Tensor t3 = from_vector(std::vector<int64_t>{0, 2, 1, 1}, {2, 2}, {.dtype = DType::I64});
  require_gradgrad([&](const std::vector<Tensor>& in) { return cross_entropy(in[0] * in[0], t3); }, {x3});
}

TEST_CASE("gradgradcheck: where, embedding (padding_idx), gather and index_select", "[autograd][double]") {
  const Tensor a = rand64({3, 4}, 25), b = rand64({3, 4}, 26);
  const Tensor cond = gt(rand64({3, 4}, 27, false), 0.0);
  require_gradgrad([&](const std::vector<Tensor>& in) { return where(cond, in[0] * in[1], in[1] * in[1]); }, {a, b});
  const Tensor table = rand64({5, 3}, 28);
  const Tensor idx = from_vector(std::vector<int64_t>{4, 0, 2, 0, 1}, {5}, {.dtype = DType::I64});
  require_gradgrad([&](const std::vector<Tensor>& in) {
    return pow(embedding(idx, in[0], {.padding_idx = 2}), 2.0);
  }, {table});
  const Tensor cols = from_vector(std::vector<int64_t>{3, 0, 3}, {3}, {.dtype = DType::I64});
  const Tensor gi = from_vector(std::vector<int64_t>{1, 3, 0, 0, 2, 2}, {3, 2}, {.dtype = DType::I64});
  require_gradgrad([&](const std::vector<Tensor>& in) {
    return pow(gather(in[0], 1, gi), 3.0) + sum(pow(index_select(in[0], 1, cols), 2.0));
  }, {a});
}

TEST_CASE("create_graph refuses an op without a differentiable backward, naming it", "[autograd][double]") {
  // fp8_linear's backward runs FP8 GEMMs of quantized copies: refused rather than a silently wrong second derivative
  Generator g(21);
  const Tensor x = randn({4, 16}, {}, &g).requires_grad_(), w = mul(randn({3, 16}, {}, &g), 0.1).requires_grad_();
  const auto st = std::make_shared<Fp8LinearState>(Fp8Recipe{});
  const Tensor y = sum(pow(fp8_linear(x, w, Tensor(), st), 2.0));
  REQUIRE_THROWS_WITH(autograd::grad({y}, {w}, {}, {.create_graph = true}),
                      Contains("op 'fp8_linear'") && Contains("Higher-order gradients"));
  // the same graph differentiates once without create_graph
  CHECK(autograd::grad({sum(pow(fp8_linear(x, w, Tensor(), st), 2.0))}, {w})[0].shape() == w.shape());
}

TEST_CASE("gradgradcheck: exact gelu, slices and selects, in-place writes into views", "[autograd][double]") {
  const Tensor a = rand64({3, 4}, 31, true, -2, 2), b = rand64({3, 2}, 32);
  require_gradgrad([](const std::vector<Tensor>& in) { return gelu(in[0]) * in[0]; }, {a});
  require_gradgrad([](const std::vector<Tensor>& in) { return gelu(gelu(in[0])); }, {a});  // gelu_derivative's own backward
  require_gradgrad([](const std::vector<Tensor>& in) {
    const Tensor rows = in[0].select(0, 2).narrow(0, 1, 2) * in[0].select(1, 0).narrow(0, 0, 2);
    return pow(in[0].slice(1, 1, 4, 2), 2.0) * in[1] + sum(rows * rows);
  }, {a, b});
  // a value written into a slice of a non-leaf: CopySlices' gradients, both sides
  require_gradgrad([](const std::vector<Tensor>& in) {
    Tensor t = in[0] * in[0];
    t.slice(1, 0, 2).copy_(pow(in[1], 3.0));
    return t * in[0];
  }, {a, b});
  // a fill of one row keeps no dependence there: a zero gradient that differentiates to zero
  require_gradgrad([](const std::vector<Tensor>& in) {
    Tensor t = in[0] * in[0];
    t.select(0, 1).fill_(2.0);
    return t * in[0];
  }, {a});
}

TEST_CASE("gradgradcheck: max/min with and without dim, norm, dropout", "[autograd][double]") {
  const Tensor a = rand64({3, 4}, 33);
  require_gradgrad([](const std::vector<Tensor>& in) {
    // each reduction's output read nonlinearly, so the gradient it routes depends on x
    return max(in[0] * in[0], 1).values * min(in[0], 0, {.keepdim = true}).values.sum() + pow(max(pow(in[0], 3.0)), 2.0);
  }, {a});
  require_gradgrad([](const std::vector<Tensor>& in) { return norm(in[0]) * in[0]; }, {a});
  // a fixed mask (the generator re-seeded each call): dropout is linear, so the product's second derivative
  require_gradgrad([](const std::vector<Tensor>& in) {
    Generator gen(7);
    return dropout(in[0] * in[0], {.p = 0.4, .generator = &gen}) * in[0];
  }, {a});
}

TEST_CASE("stochastic_round passes the gradient straight through, to second order too", "[autograd][double]") {
  // y = sum(q^2) with q = round(x^2) to F16: the gradient 4 q x reads q, and straight through d q / d x = 2x, so the
  // second derivative of y is 8 x^2 + 4 q (q the rounded values); the part through q is an F16 tensor's gradient,
  // rounded to F16 on its way (as torch's), hence the 1e-3
  const Tensor x = rand64({6}, 53, true, 0.5, 2.0);
  Generator gen(3);
  const Tensor q = stochastic_round(x * x, DType::F16, &gen).to(DType::F64);
  const Tensor g = autograd::grad({sum(q * q)}, {x}, {}, {.create_graph = true})[0];
  const std::vector<double> h = autograd::grad({sum(g)}, {x})[0].to_vector<double>();
  const std::vector<double> xv = x.to_vector<double>(), qv = q.to_vector<double>();
  REQUIRE(h.size() == xv.size());
  for (size_t i = 0; i < h.size(); ++i) CHECK(h[i] == Approx(8 * xv[i] * xv[i] + 4 * qv[i]).epsilon(1e-3));
}

TEST_CASE("gradgradcheck: conv2d (stride, padding, dilation, groups, bias) and pooling", "[autograd][double]") {
  const Tensor x = rand64({2, 4, 5, 5}, 34), w = rand64({6, 2, 3, 3}, 35), bias = rand64({6}, 36);
  for (const Conv2dFuncOptions o : {Conv2dFuncOptions{}, Conv2dFuncOptions{.stride = 2, .padding = 1, .groups = 2},
                                    Conv2dFuncOptions{.padding = 2, .dilation = 2, .groups = 1}}) {
    INFO(o.stride.h << " " << o.padding.h << " " << o.dilation.h << " " << o.groups);
    const Tensor wo = o.groups == 1 ? rand64({3, 4, 3, 3}, 37) : w;
    require_gradgrad([o](const std::vector<Tensor>& in) { return pow(conv2d(in[0], in[1], in[2], o), 2.0); },
                     {x, wo, o.groups == 1 ? rand64({3}, 38) : bias});
  }
  // pooling between nonlinearities: the one after makes the pool's incoming gradient depend on x, so its backward
  // (the routing to the argmax, the spreading of the average pools) is differentiated
  require_gradgrad([](const std::vector<Tensor>& in) {
    return pow(max_pool2d(pow(in[0], 3.0), {.kernel_size = 2, .padding = 1}), 2.0);
  }, {x});
  // windows that cover no input (padding with dilation): index -1, -inf out, nothing routed back at first or second order
  const Tensor thin = rand64({1, 2, 1, 3}, 52);
  require_gradgrad([](const std::vector<Tensor>& in) {
    const Tensor y = max_pool2d(pow(in[0], 3.0), {.kernel_size = {2, 1}, .padding = {1, 0}, .dilation = {2, 1}});
    return pow(where(isinf(y), zeros({}, {.dtype = DType::F64}), y), 2.0) +
           pow(max_pool2d(pow(in[0], 3.0), {.kernel_size = {1, 2}}), 2.0).sum();
  }, {thin});
  require_gradgrad([](const std::vector<Tensor>& in) {
    const Tensor t = pow(in[0], 2.0);
    return pow(avg_pool2d(t, {.kernel_size = 3, .stride = 2, .padding = 1, .count_include_pad = false}), 2.0).sum() *
           pow(adaptive_avg_pool2d(t, {2, 3}), 3.0);
  }, {x});
  require_gradgrad([](const std::vector<Tensor>& in) {  // 3-D input (C,H,W)
    return pow(max_pool2d(in[0].select(0, 1), {.kernel_size = 3, .stride = 2}), 2.0);
  }, {x});
}

TEST_CASE("gradgradcheck: batch_norm (training and eval) and layer_norm, with and without affine", "[autograd][double]") {
  const Tensor x = rand64({3, 2, 4}, 39), w = rand64({2}, 40, true, 0.5, 1.5), b = rand64({2}, 41);
  const Tensor lw = rand64({2, 4}, 42, true, 0.5, 1.5), lb = rand64({2, 4}, 43);
  const Tensor proj = rand64({3, 2, 4}, 44, false);  // a nonlinear read of y, so the second derivative is not 0
  for (const bool training : {true, false}) {
    INFO("training " << training);
    const Tensor rm = rand64({2}, 45, false), rv = rand64({2}, 46, false, 0.5, 1.5);
    require_gradgrad([&](const std::vector<Tensor>& in) {
      const Tensor y = batch_norm(in[0], rm.clone(), rv.clone(), in[1], in[2], {.training = training});
      return pow(y, 2.0) * proj;
    }, {x, w, b});
    require_gradgrad([&](const std::vector<Tensor>& in) {
      return pow(batch_norm(in[0], rm.clone(), rv.clone(), Tensor(), Tensor(), {.training = training}), 3.0);
    }, {x});
  }
  require_gradgrad([&](const std::vector<Tensor>& in) { return pow(layer_norm(in[0], {2, 4}, in[1], in[2]), 2.0) * proj; },
                   {x, lw, lb});
  require_gradgrad([&](const std::vector<Tensor>& in) { return pow(layer_norm(in[0], {4}), 3.0); }, {x});
  require_gradgrad([&](const std::vector<Tensor>& in) {  // normalized over every dim: no leading dims to sum over
    return pow(layer_norm(in[0].select(0, 0), {2, 4}, in[1], Tensor()), 2.0);
  }, {x, lw});
}

TEST_CASE("gradient penalty of a CNN (WGAN-GP): conv, batch norm, ReLU, pooling, dropout, linear", "[autograd][double]") {
  // || d critic(x) / dx ||, differentiated with respect to the parameters: every op's double backward on one graph,
  // against central differences of the penalty itself (gradcheck of the penalty in F64)
  const Tensor x = rand64({2, 2, 4, 4}, 47);
  const std::vector<Tensor> params{rand64({3, 2, 3, 3}, 48), rand64({3}, 49), rand64({3}, 50, true, 0.5, 1.5),
                                   rand64({1, 12}, 51)};
  const auto penalty = [&](const std::vector<Tensor>& in) {
    EnableGradGuard grad_on;  // gradcheck evaluates f without grad for its differences; the penalty needs one
    const Tensor xi = x.detach().requires_grad_();
    Generator gen(11);
    Tensor h = conv2d(xi, in[0], in[1], {.padding = 1});
    h = relu(batch_norm(h, Tensor(), Tensor(), in[2], Tensor(), {.training = true}));
    h = max_pool2d(gelu(h), {.kernel_size = 2});
    h = dropout(h.reshape({2, -1}), {.p = 0.25, .generator = &gen});
    const Tensor critic = sum(linear(h, in[3]));
    const Tensor gx = autograd::grad({critic}, {xi}, {}, {.create_graph = true})[0];
    return pow(sqrt(sum(gx * gx)) - 1.0, 2.0);
  };
  const GradcheckResult r = gradcheck(penalty, params);
  INFO(r.message);
  CHECK(r.ok);
  // and it is not trivially zero: the parameters' gradients exist and move the penalty
  const std::vector<Tensor> g = autograd::grad({penalty(params)}, params);
  double total = 0;
  for (const Tensor& t : g) total += sum(abs(t)).item();
  CHECK(total > 1e-3);
}

TEST_CASE("a CNN penalty through F16 and BF16 activations with F32 norm parameters is close to F64's",
          "[autograd][double][amp]") {
  // the mixed-precision case of the create_graph paths: conv and pooling in the activations' dtype, batch_norm
  // with F16/BF16 x and F32 weight and bias (statistics in F32, gradients back in each parameter's dtype)
  const Tensor x = rand64({2, 2, 6, 6}, 54, false);
  const std::vector<Tensor> params{rand64({3, 2, 3, 3}, 55), rand64({3}, 56, true, 0.5, 1.5), rand64({3}, 57)};
  const Tensor c = rand64({2, 3, 3, 3}, 58, false);
  const auto grads = [&](DType act, DType param) {
    const Tensor xi = x.to(act).detach().requires_grad_();
    Tensor h = conv2d(xi, params[0].to(act), Tensor(), {.padding = 1});
    h = relu(batch_norm(h, Tensor(), Tensor(), params[1].to(param), params[2].to(param), {.training = true}));
    h = max_pool2d(h, {.kernel_size = 2});
    const Tensor critic = sum(pow(h.to(param), 2.0) * c.to(param));
    const Tensor gx = autograd::grad({critic}, {xi}, {}, {.create_graph = true})[0];
    return autograd::grad({sum(pow(gx.to(param), 2.0))}, params);
  };
  const std::vector<Tensor> ref = grads(DType::F64, DType::F64);
  for (const auto& [act, tol] : {std::pair{DType::F16, 2e-2}, std::pair{DType::BF16, 8e-2}}) {
    INFO(dtype_name(act));
    const std::vector<Tensor> got = grads(act, DType::F32);
    for (size_t k = 0; k < ref.size(); ++k) {
      REQUIRE(got[k].dtype() == DType::F64);  // back through the casts to the F64 leaves
      const std::vector<double> r = ref[k].to_vector<double>(), g = got[k].to_vector<double>();
      double scale = 0;
      for (double v : r) scale = std::max(scale, std::fabs(v));
      REQUIRE(scale > 1e-3);
      for (size_t i = 0; i < r.size(); ++i) CHECK(std::fabs(g[i] - r[i]) <= tol * scale);
    }
  }
}

TEST_CASE("gradient penalty under a GradScaler: the scaled recipe gives the unscaled gradients", "[autograd][double][amp]") {
  // torch.amp's recipe (docs/AMP.md, section 10): the penalty's gradients come from autograd.grad of the scaled
  // loss, are unscaled by hand, and the penalised loss is scaled again for backward; the step's unscale then sees
  // the true gradients. Under F16 autocast the same recipe is close to the F32 result.
  const auto run = [](bool scaled, bool f16) {
    manual_seed(3);
    nn::Sequential model(nn::Linear(4, 8), nn::Tanh(), nn::Linear(8, 1));
    optim::SGD opt(model.parameters(), {.lr = 0.1});
    amp::GradScaler scaler({.init_scale = 1024.0, .enabled = scaled});
    Generator gen(5);
    const Tensor x = randn({6, 4}, {}, &gen), y = randn({6, 1}, {}, &gen);
    const std::vector<Tensor> params = model.parameters();
    Tensor loss;
    {
      amp::Autocast ac(DeviceType::CPU, DType::F16, {.enabled = f16});
      loss = mse_loss(model(x), y);
    }
    std::vector<Tensor> grads = autograd::grad({scaler.scale(loss)}, params, {}, {.create_graph = true});
    const double inv = 1.0 / scaler.get_scale();
    Tensor norm2 = zeros({});
    for (Tensor& g : grads) norm2 = norm2 + sum(pow(g * inv, 2.0));
    Tensor total;
    {
      amp::Autocast ac(DeviceType::CPU, DType::F16, {.enabled = f16});
      total = loss + sqrt(norm2);
    }
    opt.zero_grad();
    scaler.scale(total).backward();
    const amp::StepResult r = scaler.step(opt);
    CHECK(r.stepped());
    std::vector<std::vector<float>> out;
    for (const Tensor& p : params) {
      REQUIRE(p.grad().defined());
      CHECK_FALSE(p.grad().requires_grad());  // backward without create_graph: plain gradients
      out.push_back(p.grad().to_vector<float>());
    }
    return out;
  };
  const auto plain = run(false, false), with_scaler = run(true, false), f16 = run(true, true);
  REQUIRE(plain.size() == with_scaler.size());
  for (size_t k = 0; k < plain.size(); ++k)
    for (size_t i = 0; i < plain[k].size(); ++i) {
      CHECK(with_scaler[k][i] == Approx(plain[k][i]).epsilon(1e-5).margin(1e-7));
      CHECK(f16[k][i] == Approx(plain[k][i]).epsilon(2e-2).margin(2e-3));
    }
}
