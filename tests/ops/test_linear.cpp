// linear (fused bias GEMM) and flatten.
#include <catch2/catch.hpp>

#include "autograd/gradcheck.h"
#include "core/rng.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/reduce.h"
#include "ops/shape.h"
#include "test_util.h"

using namespace hg;

namespace {
// y = x w^T + b through matmul and broadcasting add: the reference linear must agree with.
Tensor linear_reference(const Tensor& x, const Tensor& w, const Tensor& b) {
  Tensor y = matmul(x.reshape({-1, x.size(-1)}), w, {.trans_b = Trans::T});
  if (b.defined()) y = y + b;
  Shape s = x.shape();
  s[s.ndim() - 1] = w.size(0);
  return y.reshape(s);
}
double max_abs_diff(const Tensor& a, const Tensor& b) {
  const auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  REQUIRE(va.size() == vb.size());
  double m = 0;
  for (size_t i = 0; i < va.size(); ++i) m = std::max(m, std::abs(va[i] - vb[i]));
  return m;
}
}  // namespace

TEST_CASE("linear matches matmul plus bias in every dtype", "[linear][cpu]") {
  manual_seed(3);
  const Tensor x64 = randn({2, 5, 7}, {.dtype = DType::F64});
  const Tensor w64 = randn({4, 7}, {.dtype = DType::F64});
  const Tensor b64 = randn({4}, {.dtype = DType::F64});
  const Tensor ref = linear_reference(x64, w64, b64);
  for (DType dt : {DType::F64, DType::F32, DType::F16, DType::BF16}) {
    const Tensor x = x64.to(dt), w = w64.to(dt), b = b64.to(dt);
    const Tensor y = linear(x, w, b);
    CHECK(y.dtype() == dt);
    CHECK(y.shape() == Shape{2, 5, 4});
    const double scale = max(abs(ref)).item();
    CHECK(max_abs_diff(y, linear_reference(x.to(DType::F64), w.to(DType::F64), b.to(DType::F64))) <=
          4 * test::dtype_tolerance(dt) * scale);
  }
  CHECK(max_abs_diff(linear(x64, w64), linear_reference(x64, w64, Tensor())) < 1e-12);
}

TEST_CASE("linear gradcheck with and without bias, 1-D to 3-D inputs", "[linear][gradcheck]") {
  manual_seed(4);
  const TensorOptions o{.dtype = DType::F64, .requires_grad = true};
  for (Shape xs : {Shape{7}, Shape{3, 7}, Shape{2, 3, 7}}) {
    const Tensor x = randn(xs, o), w = randn({5, 7}, o), b = randn({5}, o);
    auto r = gradcheck([](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); }, {x, w, b});
    CHECK(r.ok);
    INFO(r.message);
    auto r2 = gradcheck([](const std::vector<Tensor>& in) { return linear(in[0], in[1]); }, {x, w});
    CHECK(r2.ok);
  }
}

TEST_CASE("linear gives F32 gradients in F32 and skips unneeded ones", "[linear][cpu]") {
  const Tensor x = randn({4, 3});
  const Tensor w = randn({2, 3}, {.requires_grad = true});
  const Tensor b = zeros({2}, {.requires_grad = true});
  sum(linear(x, w, b)).backward();
  REQUIRE(w.grad().defined());
  CHECK(w.grad().dtype() == DType::F32);
  // db = column sums of dy = ones -> number of rows
  for (float v : b.grad().to_vector<float>()) CHECK(v == 4.f);
  // dw[o][i] = sum over rows of x[:, i]
  const auto xs = sum(x, {0}).to_vector<float>();
  const auto gw = w.grad().to_vector<float>();
  for (int o = 0; o < 2; ++o)
    for (int i = 0; i < 3; ++i) CHECK(gw[o * 3 + i] == Approx(xs[i]).epsilon(1e-5));
}

TEST_CASE("linear with Activation::Relu is relu(linear) bit for bit, gradients included", "[linear][cpu]") {
  for (DType dt : {DType::F32, DType::BF16, DType::F16, DType::F64}) {
    INFO(dt);
    manual_seed(7);
    const Tensor x0 = randn({6, 5, 9}, {.dtype = dt}), w0 = randn({7, 9}, {.dtype = dt}), b0 = randn({7}, {.dtype = dt});
    const Tensor r = randn({6, 5, 7}, {.dtype = dt});
    Tensor grads[2][3], ys[2];
    for (int fused = 0; fused < 2; ++fused) {
      const Tensor x = x0.detach().requires_grad_(true), w = w0.detach().requires_grad_(true);
      const Tensor b = b0.detach().requires_grad_(true);
      ys[fused] = fused ? linear(x, w, b, Activation::Relu) : relu(linear(x, w, b));
      sum(mul(ys[fused], r).to(DType::F64)).backward();
      grads[fused][0] = x.grad();
      grads[fused][1] = w.grad();
      grads[fused][2] = b.grad();
    }
    CHECK(ys[0].to_vector<double>() == ys[1].to_vector<double>());
    for (int k = 0; k < 3; ++k) CHECK(grads[0][k].to_vector<double>() == grads[1][k].to_vector<double>());
    CHECK(ys[1].dtype() == dt);
    CHECK(ys[1].shape() == Shape{6, 5, 7});
  }
  // gradcheck through the fused op, away from ReLU's kink
  const Tensor x = randn({4, 3}, {.dtype = DType::F64}).requires_grad_(true);
  const Tensor w = randn({5, 3}, {.dtype = DType::F64}).requires_grad_(true);
  const Tensor b = add(randn({5}, {.dtype = DType::F64}), 0.3).detach().requires_grad_(true);
  const auto res = gradcheck([](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2], Activation::Relu); },
                             {x, w, b});
  INFO(res.message);
  CHECK(res.ok);
}

// The backward of a layer with a bias holds one weight gradient at a time: a CPU backward that allocated buffers for
// an epilogue the backend lacks, then the fallback's own, held two (the MLP's training peak rose by a dW).
TEST_CASE("linear's backward holds one weight gradient at a time", "[linear][cpu]") {
  Generator g(3);
  const Tensor x = randn({64, 784}, {}, &g);
  const Tensor w = randn({256, 784}, {}, &g).requires_grad_(), b = randn({256}, {}, &g).requires_grad_();
  const Tensor y = linear(x, w, b);
  const Tensor loss = (y * y).sum();
  const int64_t dw_bytes = w.numel() * 4;
  const int64_t before = memory::allocated(Device::cpu());
  memory::reset_peak(Device::cpu());
  loss.backward();
  const int64_t grown = memory::peak_allocated(Device::cpu()) - before;
  INFO("peak grew by " << grown << " bytes during backward; dW is " << dw_bytes);
  CHECK(grown >= dw_bytes);              // the gradient itself
  CHECK(grown < dw_bytes + dw_bytes / 2);  // but not twice
  CHECK(w.grad().defined());
  CHECK(b.grad().defined());
}

TEST_CASE("linear rejects mismatched shapes with the values", "[linear][cpu]") {
  CHECK_THROWS_WITH(linear(zeros({2, 3}), zeros({4, 5})), Catch::Contains("x.shape[-1]=3 but w.shape[1]=5"));
  CHECK_THROWS_WITH(linear(zeros({2, 3}), zeros({4, 3}), zeros({3})), Catch::Contains("b must be (4)"));
  CHECK_THROWS_WITH(linear(zeros({2, 3}), zeros({3})), Catch::Contains("w must be 2-D"));
}

TEST_CASE("flatten merges a dim range and shares storage", "[linear][cpu]") {
  const Tensor x = arange(120).reshape({2, 3, 4, 5});
  CHECK(flatten(x).shape() == Shape{120});
  CHECK(flatten(x, 1).shape() == Shape{2, 60});
  CHECK(flatten(x, 1, 2).shape() == Shape{2, 12, 5});
  CHECK(flatten(x, -2, -1).shape() == Shape{2, 3, 20});
  CHECK(flatten(x, 1).data_ptr() == x.data_ptr());
  CHECK(flatten(zeros({})).shape() == Shape{1});
  CHECK_THROWS_WITH(flatten(x, 2, 1), Catch::Contains("start_dim 2 comes after end_dim 1"));
}
