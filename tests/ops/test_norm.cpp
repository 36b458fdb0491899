// batch_norm and layer_norm against double references written here: training statistics, the running
// statistics' update (torch's momentum rule, unbiased variance), eval mode, F16/BF16 x with F32
// parameters, gradchecks in F64 (training, eval, with and without affine) and the errors.
#include <catch2/catch.hpp>

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

namespace {

Tensor randn_t(Shape s, DType dt, uint64_t seed, double scale = 1.0, double shift = 0.0) {
  Generator gen(seed);
  return add(mul(randn(std::move(s), {.dtype = DType::F64}, &gen), scale), shift).to(dt);
}

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

void check_close(const std::vector<double>& got, const std::vector<double>& want, double rtol, double atol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << " want " << want[i]);
    REQUIRE(std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i]));
  }
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
        check_close(y.to_vector<double>(), ref_affine_norm(x, st.mean, st.var, wv, bv, 1e-5),
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
    check_close(rm.to_vector<double>(), want_m, 1e-5, 1e-6);
    check_close(rv.to_vector<double>(), want_v, 1e-5, 1e-6);
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
  check_close(y.to_vector<double>(),
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
    check_close(y.to_vector<double>(),
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
        check_close(y.to_vector<double>(),
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
