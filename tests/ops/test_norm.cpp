// batch_norm and layer_norm against double references written here: training statistics, the running
// statistics' update (torch's momentum rule, unbiased variance), eval mode, F16/BF16 x with F32
// parameters, gradchecks in F64 (training, eval, with and without affine) and the errors. The fused
// kernels (forward and backward) against the composed formula they replaced, in F64 through autograd,
// for every dtype, and the same bits on any thread count.
#include <catch2/catch.hpp>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "autograd/gradcheck.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "ops/elementwise.h"
#include "ops/norm.h"
#include "ops/reduce.h"
#include "test_util.h"

using namespace hg;
using Catch::Contains;
using test::randn_t;
using test::require_close;

namespace {

// Per-channel statistics of x viewed as (N, C, S) in double: mean and biased variance.
struct ChannelStats {
  std::vector<double> mean, var;
  int64_t n = 0;
};
ChannelStats channel_stats(const Tensor& x) {
  const std::vector<double> v = x.to_vector<double>();
  const int64_t N = x.shape()[0], C = x.shape()[1], S = x.numel() / (N * C);
  ChannelStats st{std::vector<double>(static_cast<size_t>(C)), std::vector<double>(static_cast<size_t>(C)), N * S};
  for (int64_t c = 0; c < C; ++c) {
    double s = 0, q = 0;
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < S; ++j) s += v[static_cast<size_t>((i * C + c) * S + j)];
    const double m = s / double(st.n);
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < S; ++j) q += std::pow(v[static_cast<size_t>((i * C + c) * S + j)] - m, 2);
    st.mean[static_cast<size_t>(c)] = m;
    st.var[static_cast<size_t>(c)] = q / double(st.n);
  }
  return st;
}

// (x - mean_c) / sqrt(var_c + eps) * w_c + b_c in double.
std::vector<double> ref_affine_norm(const Tensor& x, const std::vector<double>& mean, const std::vector<double>& var,
                                    const std::vector<double>& w, const std::vector<double>& b, double eps) {
  const std::vector<double> v = x.to_vector<double>();
  const int64_t N = x.shape()[0], C = x.shape()[1], S = x.numel() / (N * C);
  std::vector<double> y(v.size());
  for (int64_t i = 0; i < N; ++i)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t j = 0; j < S; ++j) {
        const size_t e = static_cast<size_t>((i * C + c) * S + j), k = static_cast<size_t>(c);
        y[e] = (v[e] - mean[k]) / std::sqrt(var[k] + eps) * (w.empty() ? 1.0 : w[k]) + (b.empty() ? 0.0 : b[k]);
      }
  return y;
}

void require_gradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs) {
  const GradcheckResult r = gradcheck(f, inputs);
  INFO(r.message);
  REQUIRE(r.ok);
}

const Shape kBnShapes[] = {{8, 3}, {4, 3, 5, 2}, {2, 3, 7}};

}  // namespace

TEST_CASE("batch_norm in training normalises with the batch statistics", "[norm][cpu]") {
  for (const Shape& s : kBnShapes)
    for (bool affine : {false, true})
      for (DType dt : {DType::F64, DType::F32}) {
        INFO("shape " << s << " affine " << affine << " " << dt);
        const Tensor x = randn_t(s, dt, 1, 2.0, 0.5);
        const Tensor w = affine ? randn_t({3}, dt, 2) : Tensor(), b = affine ? randn_t({3}, dt, 3) : Tensor();
        const Tensor y = batch_norm(x, Tensor(), Tensor(), w, b, {.training = true, .eps = 1e-5});
        REQUIRE(y.dtype() == dt);
        REQUIRE(y.shape() == s);
        const ChannelStats st = channel_stats(x);
        const std::vector<double> wv = affine ? w.to_vector<double>() : std::vector<double>{};
        const std::vector<double> bv = affine ? b.to_vector<double>() : std::vector<double>{};
        require_close(y.to_vector<double>(), ref_affine_norm(x, st.mean, st.var, wv, bv, 1e-5),
                      dt == DType::F64 ? 1e-12 : 1e-5, dt == DType::F64 ? 1e-12 : 1e-5);
      }
}

TEST_CASE("batch_norm updates the running statistics with momentum and the unbiased variance", "[norm][cpu]") {
  const Tensor x = randn_t({4, 3, 5}, DType::F32, 11, 3.0, 1.0);
  Tensor rm = from_vector(std::vector<float>{0.5f, -1.f, 2.f}, {3});
  Tensor rv = from_vector(std::vector<float>{1.f, 2.f, 0.5f}, {3});
  const ChannelStats st = channel_stats(x);
  std::vector<double> want_m{0.5, -1, 2}, want_v{1, 2, 0.5};
  for (int step = 0; step < 2; ++step) {
    batch_norm(x, rm, rv, Tensor(), Tensor(), {.training = true, .momentum = 0.2});
    for (size_t c = 0; c < 3; ++c) {
      want_m[c] = 0.8 * want_m[c] + 0.2 * st.mean[c];
      want_v[c] = 0.8 * want_v[c] + 0.2 * st.var[c] * double(st.n) / double(st.n - 1);
    }
    require_close(rm.to_vector<double>(), want_m, 1e-5, 1e-6);
    require_close(rv.to_vector<double>(), want_v, 1e-5, 1e-6);
  }
  // the update is not recorded: the running statistics never join the graph
  CHECK_FALSE(rm.requires_grad());
  Tensor xg = x.detach().clone().requires_grad_();
  batch_norm(xg, rm, rv, Tensor(), Tensor());
  CHECK_FALSE(rm.requires_grad());
}

TEST_CASE("batch_norm in eval mode uses the running statistics and leaves them alone", "[norm][cpu]") {
  const Tensor x = randn_t({5, 3, 4}, DType::F64, 21);
  const Tensor rm = from_vector(std::vector<double>{0.1, -0.3, 0.7}, {3}, {.dtype = DType::F64});
  const Tensor rv = from_vector(std::vector<double>{1.5, 0.2, 3.0}, {3}, {.dtype = DType::F64});
  const Tensor w = randn_t({3}, DType::F64, 22), b = randn_t({3}, DType::F64, 23);
  const Tensor y = batch_norm(x, rm, rv, w, b, {.training = false, .eps = 1e-3});
  require_close(y.to_vector<double>(),
                ref_affine_norm(x, rm.to_vector<double>(), rv.to_vector<double>(), w.to_vector<double>(),
                                b.to_vector<double>(), 1e-3),
                1e-12, 1e-12);
  CHECK(rm.to_vector<double>() == std::vector<double>{0.1, -0.3, 0.7});
  CHECK(rv.to_vector<double>() == std::vector<double>{1.5, 0.2, 3.0});
}

TEST_CASE("batch_norm passes gradcheck in training and eval, with and without affine", "[norm][gradcheck]") {
  for (const Shape& s : kBnShapes) {
    INFO("shape " << s);
    Tensor x = randn_t(s, DType::F64, 31, 1.5, 0.3).requires_grad_();
    Tensor w = randn_t({3}, DType::F64, 32).requires_grad_(), b = randn_t({3}, DType::F64, 33).requires_grad_();
    const Tensor rm = randn_t({3}, DType::F64, 34), rv = add(rand({3}, {.dtype = DType::F64}), 0.5);
    require_gradcheck([](const std::vector<Tensor>& in) {
      return batch_norm(in[0], Tensor(), Tensor(), in[1], in[2], {.training = true});
    }, {x, w, b});
    require_gradcheck([](const std::vector<Tensor>& in) {
      return batch_norm(in[0], Tensor(), Tensor(), Tensor(), Tensor(), {.training = true});
    }, {x});
    require_gradcheck([&](const std::vector<Tensor>& in) {
      return batch_norm(in[0], rm, rv, in[1], in[2], {.training = false});
    }, {x, w, b});
  }
}

TEST_CASE("batch_norm on F16/BF16 x with F32 parameters keeps x's dtype and F32 statistics", "[norm][cpu]") {
  for (DType dt : {DType::F16, DType::BF16}) {
    INFO(dt);
    const Tensor x = randn_t({16, 4, 3, 3}, dt, 41, 2.0, 5.0);
    Tensor w = randn_t({4}, DType::F32, 42).requires_grad_(), b = randn_t({4}, DType::F32, 43).requires_grad_();
    Tensor rm = zeros({4}), rv = ones({4});
    Tensor xg = x.detach().clone().requires_grad_();
    const Tensor y = batch_norm(xg, rm, rv, w, b);
    REQUIRE(y.dtype() == dt);
    const ChannelStats st = channel_stats(x);  // of the rounded inputs
    require_close(y.to_vector<double>(),
                  ref_affine_norm(x, st.mean, st.var, w.to_vector<double>(), b.to_vector<double>(), 1e-5),
                  test::dtype_tolerance(dt), test::dtype_tolerance(dt));
    CHECK(rm.dtype() == DType::F32);
    for (size_t c = 0; c < 4; ++c) CHECK(rm.to_vector<double>()[c] == Approx(0.1 * st.mean[c]).epsilon(1e-5));
    sum(mul(y, y)).backward();
    CHECK(xg.grad().dtype() == dt);
    CHECK(w.grad().dtype() == DType::F32);
    CHECK(b.grad().dtype() == DType::F32);
  }
}

TEST_CASE("batch_norm rejects bad shapes, a single value per channel and eval without statistics", "[norm][cpu]") {
  REQUIRE_THROWS_WITH(batch_norm(ones({1, 3}), Tensor(), Tensor(), Tensor(), Tensor()),
                      Contains("more than 1 value per channel"));
  REQUIRE_THROWS_WITH(batch_norm(ones({4, 3}), Tensor(), Tensor(), ones({4}), Tensor()),
                      Contains("weight") && Contains("[4]") && Contains("[3]"));
  REQUIRE_THROWS_WITH(batch_norm(ones({4, 3}), Tensor(), Tensor(), Tensor(), Tensor(), {.training = false}),
                      Contains("running_mean"));
  REQUIRE_THROWS_WITH(batch_norm(ones({4}), Tensor(), Tensor(), Tensor(), Tensor()), Contains("(N,C)"));
  CHECK_NOTHROW(batch_norm(ones({1, 3}), zeros({3}), ones({3}), Tensor(), Tensor(), {.training = false}));
}

// ---- layer_norm --------------------------------------------------------------------------------

namespace {
// layer_norm over the last `k` elements (the flattened normalized shape) in double.
std::vector<double> ref_layer_norm(const Tensor& x, int64_t k, const std::vector<double>& w,
                                   const std::vector<double>& b, double eps) {
  const std::vector<double> v = x.to_vector<double>();
  std::vector<double> y(v.size());
  for (size_t r = 0; r < v.size() / static_cast<size_t>(k); ++r) {
    double m = 0, q = 0;
    for (int64_t j = 0; j < k; ++j) m += v[r * k + j];
    m /= double(k);
    for (int64_t j = 0; j < k; ++j) q += std::pow(v[r * k + j] - m, 2);
    const double inv = 1 / std::sqrt(q / double(k) + eps);
    for (int64_t j = 0; j < k; ++j) {
      const size_t ju = static_cast<size_t>(j);
      y[r * k + j] = (v[r * k + j] - m) * inv * (w.empty() ? 1.0 : w[ju]) + (b.empty() ? 0.0 : b[ju]);
    }
  }
  return y;
}
}  // namespace

TEST_CASE("layer_norm normalises over the trailing dims, with and without affine", "[norm][cpu]") {
  for (DType dt : {DType::F64, DType::F32, DType::F16, DType::BF16})
    for (bool two_dims : {false, true})
      for (bool affine : {false, true}) {
        INFO(dt << " two dims " << two_dims << " affine " << affine);
        const Tensor x = randn_t({3, 4, 6}, dt, 51, 2.0, 1.0);
        const std::vector<int64_t> ns = two_dims ? std::vector<int64_t>{4, 6} : std::vector<int64_t>{6};
        const Shape ps(ns);
        const Tensor w = affine ? randn_t(ps, DType::F32, 52) : Tensor(), b = affine ? randn_t(ps, DType::F32, 53) : Tensor();
        const Tensor y = layer_norm(x, ns, w, b, {.eps = 1e-4});
        REQUIRE(y.dtype() == dt);
        const double t = dt == DType::F64 ? 1e-5 : test::dtype_tolerance(dt);  // F32 weights in the F64 case
        require_close(y.to_vector<double>(),
                      ref_layer_norm(x, ps.numel(), affine ? w.to_vector<double>() : std::vector<double>{},
                                     affine ? b.to_vector<double>() : std::vector<double>{}, 1e-4),
                      t, t);
      }
}

TEST_CASE("layer_norm passes gradcheck with and without affine", "[norm][gradcheck]") {
  Tensor x = randn_t({3, 2, 5}, DType::F64, 61, 1.5).requires_grad_();
  Tensor w1 = randn_t({5}, DType::F64, 62).requires_grad_(), b1 = randn_t({5}, DType::F64, 63).requires_grad_();
  Tensor w2 = randn_t({2, 5}, DType::F64, 64).requires_grad_(), b2 = randn_t({2, 5}, DType::F64, 65).requires_grad_();
  require_gradcheck([](const std::vector<Tensor>& in) { return layer_norm(in[0], {5}, in[1], in[2]); }, {x, w1, b1});
  require_gradcheck([](const std::vector<Tensor>& in) { return layer_norm(in[0], {2, 5}, in[1], in[2]); }, {x, w2, b2});
  require_gradcheck([](const std::vector<Tensor>& in) { return layer_norm(in[0], {5}); }, {x});
  require_gradcheck([](const std::vector<Tensor>& in) { return layer_norm(in[0], {2, 5}); }, {x});
}

TEST_CASE("layer_norm rejects a normalized_shape that is not x's trailing shape", "[norm][cpu]") {
  REQUIRE_THROWS_WITH(layer_norm(ones({3, 4}), {3}), Contains("normalized_shape [3]") && Contains("[3, 4]"));
  REQUIRE_THROWS_WITH(layer_norm(ones({3, 4}), {}), Contains("layer_norm"));
  REQUIRE_THROWS_WITH(layer_norm(ones({3, 4}), {4}, ones({3})), Contains("weight"));
}

// ---- the fused kernels against the composed formula --------------------------------------------

namespace {

// The composed formula the fused kernels replaced, in F64 through differentiable ops on the same
// (rounded) inputs: the reference for y and, through autograd, for dx, dweight and dbias. `dims` are
// the reduced dims, `pshape` the shape weight/bias/statistics broadcast as.
struct NormRef {
  std::vector<double> y, dx, dw, db;
};
NormRef ref_norm(const Tensor& x, const Tensor& w, const Tensor& b, const std::vector<int64_t>& dims,
                 const Shape& pshape, double eps, const Tensor& dy, const Tensor& rm = {}, const Tensor& rv = {}) {
  Tensor xr = x.to(DType::F64).detach().requires_grad_();
  Tensor wr = w.defined() ? w.to(DType::F64).detach().requires_grad_() : Tensor();
  Tensor br = b.defined() ? b.to(DType::F64).detach().requires_grad_() : Tensor();
  Tensor y;
  if (rm.defined()) {  // eval: the running statistics are constants
    y = mul(sub(xr, rm.to(DType::F64).reshape(pshape)), rsqrt(add(rv.to(DType::F64).reshape(pshape), eps)));
  } else {
    const Tensor mu = mean(xr, dims, {.keepdim = true});
    const Tensor d = sub(xr, mu);
    y = mul(d, rsqrt(add(mean(mul(d, d), dims, {.keepdim = true}), eps)));
  }
  if (wr.defined()) y = mul(y, wr.reshape(pshape));
  if (br.defined()) y = add(y, br.reshape(pshape));
  y.backward(dy.to(DType::F64));
  auto grad = [](const Tensor& t) { return t.defined() ? t.grad().to_vector<double>() : std::vector<double>{}; };
  return {y.to_vector<double>(), grad(xr), grad(wr), grad(br)};
}

// |got - want| <= tol * (|want| + max |want|): relative to the tensor's scale, since dx and the
// parameter gradients are differences of sums that may cancel.
void check_scaled(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == want.size());
  double scale = 0;
  for (double v : want) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << " want " << want[i] << " scale " << scale);
    REQUIRE(std::fabs(got[i] - want[i]) <= tol * (std::fabs(want[i]) + scale));
  }
}

std::vector<double> grad_values(const Tensor& t) {
  return t.defined() ? t.grad().to_vector<double>() : std::vector<double>{};
}

// Runs f(x, w, b) forward and backward with dy; checks y, dx, dw, db against the reference (y and dx in
// x's dtype, dw and db in the parameters' dtype, all within x's dtype tolerance).
template <class F>
void check_fused(const F& f, const Tensor& x0, const Tensor& w0, const Tensor& b0, const Tensor& dy,
                 const NormRef& want) {
  Tensor x = x0.detach().clone().requires_grad_();
  Tensor w = w0.defined() ? w0.detach().clone().requires_grad_() : Tensor();
  Tensor b = b0.defined() ? b0.detach().clone().requires_grad_() : Tensor();
  const Tensor y = f(x, w, b);
  REQUIRE(y.dtype() == x.dtype());
  REQUIRE(y.shape() == x.shape());
  y.backward(dy);
  REQUIRE(x.grad().dtype() == x.dtype());
  const double tol = x.dtype() == DType::F64 ? 1e-10 : x.dtype() == DType::F32 ? 2e-5 : test::dtype_tolerance(x.dtype());
  check_scaled(y.to_vector<double>(), want.y, tol);
  check_scaled(grad_values(x), want.dx, tol);
  if (w.defined()) CHECK(w.grad().dtype() == w.dtype());
  check_scaled(grad_values(w), want.dw, x.dtype() == DType::F64 ? 1e-10 : 1e-4);
  check_scaled(grad_values(b), want.db, x.dtype() == DType::F64 ? 1e-10 : 1e-4);
}

DType param_dtype(DType x) { return x == DType::F64 ? DType::F64 : DType::F32; }

std::vector<int64_t> bn_dims(const Shape& s) {
  std::vector<int64_t> d{0};
  for (int64_t i = 2; i < s.ndim(); ++i) d.push_back(i);
  return d;
}
Shape bn_pshape(const Shape& s) {
  std::vector<int64_t> p(static_cast<size_t>(s.ndim()), 1);
  p[1] = s[1];
  return Shape(p);
}

// The CPU kernel's two layouts: bands of channels for runs shorter than its 16 lanes ((N,C), a single
// spatial element, 2x3 maps, several bands, threaded) and a channel per task for longer runs (not a
// multiple of the lanes; threaded).
const Shape kFusedBnShapes[] = {{6, 5},       {5, 2, 1, 1},  {4, 3, 2, 3},  {16, 70, 2, 2}, {128, 300},
                                {4, 3, 5, 7}, {3, 4, 37},    {8, 6, 33, 33}};

}  // namespace

TEST_CASE("batch_norm's fused kernels match the composed formula in every dtype", "[norm][cpu]") {
  for (const Shape& s : kFusedBnShapes)
    for (DType dt : {DType::F64, DType::F32, DType::F16, DType::BF16})
      for (bool affine : {false, true}) {
        INFO("shape " << s << " " << dt << " affine " << affine);
        const int64_t c = s[1];
        const Tensor x = randn_t(s, dt, 101, 2.0, 3.0), dy = randn_t(s, dt, 102);
        const Tensor w = affine ? randn_t({c}, param_dtype(dt), 103) : Tensor();
        const Tensor b = affine ? randn_t({c}, param_dtype(dt), 104) : Tensor();
        const NormRef want = ref_norm(x, w, b, bn_dims(s), bn_pshape(s), 1e-5, dy);
        check_fused([](const Tensor& xi, const Tensor& wi, const Tensor& bi) {
          return batch_norm(xi, Tensor(), Tensor(), wi, bi);
        }, x, w, b, dy, want);
        // eval mode: the running statistics are constants of the backward
        const Tensor rm = randn_t({c}, DType::F32, 105), rv = add(rand({c}), 0.5);
        const NormRef want_eval = ref_norm(x, w, b, bn_dims(s), bn_pshape(s), 1e-5, dy, rm, rv);
        check_fused([&](const Tensor& xi, const Tensor& wi, const Tensor& bi) {
          return batch_norm(xi, rm, rv, wi, bi, {.training = false});
        }, x, w, b, dy, want_eval);
      }
}

TEST_CASE("batch_norm updates running statistics of another dtype than x, rounded once", "[norm][cpu]") {
  const Tensor x = randn_t({6, 3, 4, 5}, DType::F32, 111, 1.5, -2.0);
  const ChannelStats st = channel_stats(x);
  for (DType rdt : {DType::F64, DType::BF16, DType::F16}) {
    INFO(rdt);
    Tensor rm = from_vector(std::vector<double>{0.25, -1, 2}, {3}, {.dtype = rdt});
    Tensor rv = from_vector(std::vector<double>{1, 0.5, 4}, {3}, {.dtype = rdt});
    const std::vector<double> m0 = rm.to_vector<double>(), v0 = rv.to_vector<double>();
    batch_norm(x, rm, rv, Tensor(), Tensor(), {.momentum = 0.3});
    REQUIRE(rm.dtype() == rdt);
    std::vector<double> want_m(3), want_v(3);
    for (size_t c = 0; c < 3; ++c) {
      want_m[c] = from_vector(std::vector<double>{0.7 * m0[c] + 0.3 * st.mean[c]}, {1}, {.dtype = rdt}).item();
      want_v[c] = 0.7 * v0[c] + 0.3 * st.var[c] * double(st.n) / double(st.n - 1);
    }
    const double tol = rdt == DType::F64 ? 1e-6 : test::dtype_tolerance(rdt);
    require_close(rm.to_vector<double>(), want_m, tol, tol);
    require_close(rv.to_vector<double>(), want_v, tol, tol);
  }
}

TEST_CASE("layer_norm's fused kernels match the composed formula in every dtype", "[norm][cpu]") {
  struct Case {
    Shape x;
    std::vector<int64_t> ns;
  };
  // one element per row (y = bias), short and long rows, two normalized dims, and enough rows for the
  // threaded path and every row block of the weight gradient
  const Case cases[] = {{{50, 1}, {1}}, {{3, 4, 6}, {6}}, {{3, 4, 6}, {4, 6}}, {{7, 1000}, {1000}},
                        {{2000, 33}, {33}}};
  for (const Case& cs : cases)
    for (DType dt : {DType::F64, DType::F32, DType::F16, DType::BF16})
      for (bool affine : {false, true}) {
        const Shape ps(cs.ns);
        INFO("x " << cs.x << " normalized " << ps << " " << dt << " affine " << affine);
        const Tensor x = randn_t(cs.x, dt, 121, 2.0, -1.0), dy = randn_t(cs.x, dt, 122);
        const Tensor w = affine ? randn_t(ps, param_dtype(dt), 123) : Tensor();
        const Tensor b = affine ? randn_t(ps, param_dtype(dt), 124) : Tensor();
        std::vector<int64_t> dims, pshape(static_cast<size_t>(cs.x.ndim() - ps.ndim()), 1);
        for (int64_t d = cs.x.ndim() - ps.ndim(); d < cs.x.ndim(); ++d) dims.push_back(d);
        pshape.insert(pshape.end(), cs.ns.begin(), cs.ns.end());
        const NormRef want = ref_norm(x, w, b, dims, Shape(pshape), 1e-5, dy);
        check_fused([&](const Tensor& xi, const Tensor& wi, const Tensor& bi) { return layer_norm(xi, cs.ns, wi, bi); },
                    x, w, b, dy, want);
      }
}

TEST_CASE("batch_norm and layer_norm give the same bits on any thread count", "[norm][cpu]") {
  auto run = [](int threads) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    Tensor x = randn_t({8, 6, 33, 33}, DType::F32, 131).requires_grad_();
    Tensor w = randn_t({6}, DType::F32, 132).requires_grad_(), b = randn_t({6}, DType::F32, 133).requires_grad_();
    Tensor rm = zeros({6}), rv = ones({6});
    const Tensor y = batch_norm(x, rm, rv, w, b);
    y.backward(randn_t(y.shape(), DType::F32, 134));
    Tensor v = randn_t({128, 300}, DType::F32, 139).requires_grad_();  // bands of channels
    const Tensor yv = batch_norm(v, Tensor(), Tensor(), Tensor(), Tensor());
    yv.backward(randn_t(yv.shape(), DType::F32, 140));
    Tensor u = randn_t({2000, 33}, DType::BF16, 135).requires_grad_();
    Tensor lw = randn_t({33}, DType::F32, 136).requires_grad_(), lb = randn_t({33}, DType::F32, 137).requires_grad_();
    const Tensor z = layer_norm(u, {33}, lw, lb);
    z.backward(randn_t(z.shape(), DType::BF16, 138));
    omp_set_num_threads(saved);
    std::vector<std::vector<double>> out;
    for (const Tensor& t : {y, x.grad(), w.grad(), b.grad(), rm, rv, yv, v.grad(), z, u.grad(), lw.grad(), lb.grad()})
      out.push_back(t.to_vector<double>());
    return out;
  };
  CHECK(run(1) == run(std::max(2, omp_get_max_threads())));
}

TEST_CASE("batch_norm and layer_norm of empty batches, and single values per channel", "[norm][cpu]") {
  // eval mode normalises an empty batch; the parameters' gradients are zero sums
  Tensor w = ones({3}).requires_grad_(), b = zeros({3}).requires_grad_();
  const Tensor y = batch_norm(zeros({0, 3, 4, 4}), zeros({3}), ones({3}), w, b, {.training = false});
  REQUIRE(y.shape() == Shape{0, 3, 4, 4});
  sum(y).backward();
  CHECK(w.grad().to_vector<double>() == std::vector<double>{0, 0, 0});
  CHECK(b.grad().to_vector<double>() == std::vector<double>{0, 0, 0});
  Tensor lw = ones({5}).requires_grad_();
  const Tensor z = layer_norm(zeros({0, 5}), {5}, lw);
  REQUIRE(z.shape() == Shape{0, 5});
  sum(z).backward();
  CHECK(lw.grad().to_vector<double>() == std::vector<double>(5, 0.0));
  // training needs more than one value per channel, whatever the layout (torch's rule)
  for (const Shape& s : {Shape{1, 3, 1, 1}, Shape{0, 3, 4, 4}, Shape{1, 2, 1}})
    REQUIRE_THROWS_WITH(batch_norm(ones(s), Tensor(), Tensor(), Tensor(), Tensor()),
                        Contains("batch_norm: expected more than 1 value per channel when training"));
  CHECK_NOTHROW(batch_norm(randn({2, 3, 1, 1}), Tensor(), Tensor(), Tensor(), Tensor()));
  CHECK_NOTHROW(batch_norm(randn({1, 3, 2, 1}), Tensor(), Tensor(), Tensor(), Tensor()));
}

TEST_CASE("batch_norm and layer_norm name the mismatched parameter and its shapes", "[norm][cpu]") {
  REQUIRE_THROWS_WITH(batch_norm(ones({4, 3, 2, 2}), zeros({4}), ones({3}), Tensor(), Tensor()),
                      Contains("batch_norm: running_mean has shape [4]") && Contains("needs [3]"));
  REQUIRE_THROWS_WITH(batch_norm(ones({4, 3, 2, 2}), zeros({3}), ones({2}), Tensor(), Tensor()),
                      Contains("running_var has shape [2]"));
  REQUIRE_THROWS_WITH(batch_norm(ones({4, 3}), Tensor(), Tensor(), Tensor(), zeros({3, 1})),
                      Contains("bias has shape [3, 1]"));
  REQUIRE_THROWS_WITH(batch_norm(ones({4, 3}), Tensor(), Tensor(), ones({3}, {.dtype = DType::I64}), Tensor()),
                      Contains("batch_norm"));
  REQUIRE_THROWS_WITH(batch_norm(ones({4, 3}, {.dtype = DType::I64}), Tensor(), Tensor(), Tensor(), Tensor()),
                      Contains("batch_norm"));
  REQUIRE_THROWS_WITH(layer_norm(ones({3, 4}), {4}, ones({4}), zeros({3})),
                      Contains("layer_norm: bias has shape [3]") && Contains("needs [4]"));
  REQUIRE_THROWS_WITH(layer_norm(ones({3, 4}), {2, 4}), Contains("normalized_shape [2, 4]"));
}

TEST_CASE("batch_norm and layer_norm pass gradcheck with only a weight or only a bias", "[norm][gradcheck]") {
  Tensor x = randn_t({4, 3, 3, 2}, DType::F64, 141, 1.3, 0.7).requires_grad_();
  Tensor w = randn_t({3}, DType::F64, 142).requires_grad_(), b = randn_t({3}, DType::F64, 143).requires_grad_();
  require_gradcheck([](const std::vector<Tensor>& in) {
    return batch_norm(in[0], Tensor(), Tensor(), in[1], Tensor());
  }, {x, w});
  require_gradcheck([](const std::vector<Tensor>& in) {
    return batch_norm(in[0], Tensor(), Tensor(), Tensor(), in[1]);
  }, {x, b});
  Tensor u = randn_t({5, 7}, DType::F64, 144).requires_grad_();
  Tensor lw = randn_t({7}, DType::F64, 145).requires_grad_();
  require_gradcheck([](const std::vector<Tensor>& in) { return layer_norm(in[0], {7}, in[1]); }, {u, lw});
}
