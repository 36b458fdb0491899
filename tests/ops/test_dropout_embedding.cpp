// dropout: the mask's fraction, its 1/(1-p) scaling, its determinism for a seed (and that it is
// hg::rand's stream), the backward reusing the same mask, eval/p==0 passthrough and p==1.
// embedding: the gather, the scatter-add backward (repeats accumulate in F32, padding_idx gets
// nothing, thread-count independent), gradchecks and the errors.
#include <catch2/catch.hpp>

#include <omp.h>

#include <cmath>
#include <vector>

#include "autograd/gradcheck.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/reduce.h"
#include "test_util.h"

using namespace hg;
using Catch::Contains;
using test::randn_t;

namespace {

void require_gradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs) {
  const GradcheckResult r = gradcheck(f, inputs);
  INFO(r.message);
  REQUIRE(r.ok);
}

}  // namespace

// ---- dropout -----------------------------------------------------------------------------------

TEST_CASE("dropout keeps about 1-p of the elements and scales them by 1/(1-p)", "[dropout][cpu]") {
  for (double p : {0.1, 0.3, 0.5, 0.9}) {
    INFO("p " << p);
    const Tensor x = add(rand({200000}), 0.5);  // no zeros in x: a zero in y is a dropped element
    Generator gen(7);
    const std::vector<double> xv = x.to_vector<double>(), yv = dropout(x, {.p = p, .generator = &gen}).to_vector<double>();
    int64_t dropped = 0;
    for (size_t i = 0; i < xv.size(); ++i) {
      if (yv[i] == 0.0) ++dropped;
      else REQUIRE(yv[i] == Approx(xv[i] / (1 - p)).epsilon(1e-6));
    }
    const double frac = double(dropped) / double(xv.size());
    CHECK(std::fabs(frac - p) < 0.005);  // 5 standard deviations at n = 200000
  }
}

TEST_CASE("dropout is deterministic for a seed and its mask is hg::rand's stream", "[dropout][cpu]") {
  const Tensor x = ones({1001});
  Generator a(42), b(42), c(43);
  const std::vector<float> ya = dropout(x, {.p = 0.4, .generator = &a}).to_vector<float>();
  CHECK(ya == dropout(x, {.p = 0.4, .generator = &b}).to_vector<float>());
  CHECK(ya != dropout(x, {.p = 0.4, .generator = &c}).to_vector<float>());
  CHECK(ya != dropout(x, {.p = 0.4, .generator = &a}).to_vector<float>());  // the generator advanced
  // element i is kept when the F32 uniform that rand draws for element i at the same state is >= p
  Generator r(42);
  const std::vector<float> u = rand({1001}, {}, &r).to_vector<float>();
  for (size_t i = 0; i < u.size(); ++i) REQUIRE((ya[i] != 0.f) == (u[i] >= 0.4f));
  // the default generator: manual_seed fixes it
  manual_seed(5);
  const std::vector<float> d1 = dropout(x).to_vector<float>();
  manual_seed(5);
  CHECK(d1 == dropout(x).to_vector<float>());
}

TEST_CASE("dropout gives every dtype the same mask and F16/BF16 the rounded scaled values", "[dropout][cpu]") {
  const Tensor x = randn_t({3, 333}, DType::F64, 3);
  Generator g64(9);
  const std::vector<double> ref = dropout(x, {.p = 0.25, .generator = &g64}).to_vector<double>();
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    INFO(dt);
    Generator g(9);
    const Tensor xd = x.to(dt);
    const Tensor y = dropout(xd, {.p = 0.25, .generator = &g});
    REQUIRE(y.dtype() == dt);
    const std::vector<double> xv = xd.to_vector<double>(), yv = y.to_vector<double>();
    for (size_t i = 0; i < ref.size(); ++i) {
      REQUIRE((yv[i] == 0.0) == (ref[i] == 0.0));
      if (ref[i] != 0.0) REQUIRE(yv[i] == Approx(xv[i] / 0.75).epsilon(dt == DType::F32 ? 1e-6 : 1e-2));
    }
  }
}

TEST_CASE("dropout backward multiplies by the same mask and scale", "[dropout][gradcheck]") {
  Tensor x = add(rand({4, 50}), 1.0).requires_grad_();
  Generator gen(11);
  const Tensor y = dropout(x, {.p = 0.3, .generator = &gen});
  sum(y).backward();
  // with x >= 1, y / x is the mask times 1/(1-p), which is d sum(y) / dx
  const std::vector<double> g = x.grad().to_vector<double>(), yv = y.to_vector<double>(), xv = x.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) REQUIRE(g[i] == Approx(yv[i] / xv[i]).epsilon(1e-6));
  Tensor x64 = randn_t({5, 7}, DType::F64, 12).requires_grad_();
  require_gradcheck([](const std::vector<Tensor>& in) {
    Generator same(13);  // every evaluation draws the same mask
    return dropout(in[0], {.p = 0.5, .generator = &same});
  }, {x64});
}

TEST_CASE("dropout passes x through in eval or at p == 0, zeroes at p == 1 and rejects bad p", "[dropout][cpu]") {
  const Tensor x = randn_t({10}, DType::F32, 1);
  CHECK(dropout(x, {.p = 0.5, .training = false}).same(x));
  CHECK(dropout(x, {.p = 0.0}).same(x));
  for (double v : dropout(x, {.p = 1.0}).to_vector<double>()) CHECK(v == 0.0);
  const Tensor nan = from_vector(std::vector<float>{NAN, 1.f}, {2});
  CHECK(std::isnan(dropout(nan, {.p = 1.0}).to_vector<double>()[0]));  // torch: input * 0
  REQUIRE_THROWS_WITH(dropout(x, {.p = 1.5}), Contains("dropout: p=1.5"));
  REQUIRE_THROWS_WITH(dropout(x, {.p = -0.1}), Contains("p=-0.1"));
  REQUIRE_THROWS_WITH(dropout(x, {.p = NAN}), Contains("dropout"));
  REQUIRE_THROWS_WITH(dropout(zeros({2}, {.dtype = DType::I64})), Contains("dropout"));
}

// ---- embedding ---------------------------------------------------------------------------------

TEST_CASE("embedding gathers weight rows into indices.shape + (dim)", "[embedding][cpu]") {
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    INFO(dt);
    const Tensor w = randn_t({7, 5}, dt, 1);
    const Tensor idx = from_vector(std::vector<int64_t>{3, 0, 6, 3, 1, 1}, {2, 3}, {.dtype = DType::I64});
    const Tensor y = embedding(idx, w);
    REQUIRE(y.shape() == Shape{2, 3, 5});
    REQUIRE(y.dtype() == dt);
    const std::vector<double> wv = w.to_vector<double>(), yv = y.to_vector<double>();
    const std::vector<int64_t> iv = idx.to_vector<int64_t>();
    for (size_t i = 0; i < iv.size(); ++i)
      for (size_t k = 0; k < 5; ++k) REQUIRE(yv[i * 5 + k] == wv[static_cast<size_t>(iv[i]) * 5 + k]);
  }
  const Tensor scalar_idx = from_vector(std::vector<int64_t>{2}, {}, {.dtype = DType::I64});
  CHECK(embedding(scalar_idx, ones({4, 3})).shape() == Shape{3});
}

TEST_CASE("embedding backward scatter-adds repeated indices and skips padding_idx", "[embedding][gradcheck]") {
  const Tensor idx = from_vector(std::vector<int64_t>{2, 0, 2, 4, 2, 0}, {6}, {.dtype = DType::I64});
  Tensor w = randn_t({5, 3}, DType::F64, 2).requires_grad_();
  const Tensor dy = randn_t({6, 3}, DType::F64, 3);
  embedding(idx, w, {.padding_idx = 4}).backward(dy);
  const std::vector<double> g = w.grad().to_vector<double>(), dv = dy.to_vector<double>();
  for (size_t k = 0; k < 3; ++k) {
    CHECK(g[2 * 3 + k] == Approx(dv[0 * 3 + k] + dv[2 * 3 + k] + dv[4 * 3 + k]));
    CHECK(g[0 * 3 + k] == Approx(dv[1 * 3 + k] + dv[5 * 3 + k]));
    CHECK(g[1 * 3 + k] == 0.0);  // never looked up
    CHECK(g[4 * 3 + k] == 0.0);  // padding_idx
  }
  Tensor w2 = randn_t({5, 3}, DType::F64, 4).requires_grad_();
  require_gradcheck([&](const std::vector<Tensor>& in) { return embedding(idx.reshape({2, 3}), in[0]); }, {w2});
}

TEST_CASE("embedding accumulates F16/BF16 gradients in F32 and returns them in weight's dtype", "[embedding][cpu]") {
  for (DType dt : {DType::F16, DType::BF16}) {
    INFO(dt);
    // 4096 lookups of one row: an F16 running sum of ones stalls at 2048 (BF16 at 256)
    Tensor w = zeros({3, 2}, {.dtype = dt}).requires_grad_();
    const Tensor idx = full({4096}, 1.0, {.dtype = DType::I64});
    sum(embedding(idx, w)).backward();
    REQUIRE(w.grad().dtype() == dt);
    CHECK(w.grad().to_vector<double>() == std::vector<double>{0, 0, 4096, 4096, 0, 0});
  }
}

TEST_CASE("embedding backward of a large batch is the same on any thread count", "[embedding][cpu]") {
  Generator gen(5);
  const Tensor idx = mul(rand({20000}, {.dtype = DType::F64}, &gen), 100.0).to(DType::I64);
  const Tensor dy = randn_t({20000, 16}, DType::F32, 6);
  auto grad = [&] {
    Tensor w = zeros({100, 16}).requires_grad_();
    embedding(idx, w).backward(dy);
    return w.grad().to_vector<float>();
  };
  const std::vector<float> all = grad();
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const std::vector<float> one = grad();
  omp_set_num_threads(threads);
  CHECK(all == one);
}

TEST_CASE("embedding rejects bad indices, dtypes, shapes and padding_idx", "[embedding][cpu]") {
  const Tensor w = ones({10, 4});
  const Tensor bad = from_vector(std::vector<int64_t>{1, 10}, {2}, {.dtype = DType::I64});
  REQUIRE_THROWS_WITH(embedding(bad, w), Contains("index 10") && Contains("10 embeddings"));
  const Tensor neg = from_vector(std::vector<int64_t>{-1}, {1}, {.dtype = DType::I64});
  REQUIRE_THROWS_WITH(embedding(neg, w), Contains("index -1"));
  REQUIRE_THROWS_WITH(embedding(ones({2}), w), Contains("I64"));
  const Tensor ok = from_vector(std::vector<int64_t>{1}, {1}, {.dtype = DType::I64});
  REQUIRE_THROWS_WITH(embedding(ok, ones({10})), Contains("2-d"));
  REQUIRE_THROWS_WITH(embedding(ok, w, {.padding_idx = 10}), Contains("padding_idx=10"));
}
