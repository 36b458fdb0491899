// Losses against double references written here (torch.nn.functional's definitions): cross_entropy
// and nll_loss over (C), (N,C) and (N,C,d...) with every reduction, ignore_index and label smoothing;
// mse, l1 and BCE-with-logits with pos_weight. Gradchecks in F64, F16/BF16 inputs giving F32 losses,
// and the errors.
#include <catch2/catch.hpp>

#include <omp.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "autograd/gradcheck.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "ops/elementwise.h"
#include "ops/loss.h"
#include "ops/reduce.h"
#include "test_util.h"

using namespace hg;
using Catch::Contains;
using test::randn_t;
using test::require_close;

namespace {

const Reduction kReductions[] = {Reduction::Mean, Reduction::Sum, Reduction::None};
const char* rname(Reduction r) { return r == Reduction::Mean ? "mean" : r == Reduction::Sum ? "sum" : "none"; }

// Random class indices in [0, classes), about `ignore_frac` of them replaced by ignore.
Tensor random_targets(Shape s, int64_t classes, uint64_t seed, double ignore_frac = 0.0, int64_t ignore = -100) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> v(static_cast<size_t>(s.numel()));
  for (auto& t : v) {
    t = static_cast<int64_t>(rng() % static_cast<uint64_t>(classes));
    if (std::uniform_real_distribution<double>(0, 1)(rng) < ignore_frac) t = ignore;
  }
  return from_vector(v, std::move(s), {.dtype = DType::I64});
}

// The (outer, classes, inner) view of a (C), (N,C) or (N,C,d...) shape.
struct View {
  int64_t outer = 1, classes = 1, inner = 1;
};
View view_of(const Shape& s) {
  View v;
  v.outer = s.ndim() == 1 ? 1 : s[0];
  v.classes = s.ndim() == 1 ? s[0] : s[1];
  for (int64_t d = 2; d < s.ndim(); ++d) v.inner *= s[d];
  return v;
}

// torch's per-row cross-entropy in double, written as the definition: -logp_t mixed with the uniform
// smoothing term, logp from a max-shifted log-softmax; ignored rows give 0. log_probs: x already holds
// log-probabilities (nll_loss).
std::vector<double> ref_rows(const Tensor& x, const Tensor& target, int64_t ignore, double eps, bool log_probs = false) {
  const std::vector<double> xv = x.to_vector<double>();
  const std::vector<int64_t> tv = target.to_vector<int64_t>();
  const View v = view_of(x.shape());
  std::vector<double> out(tv.size(), 0.0);
  for (int64_t r = 0; r < static_cast<int64_t>(tv.size()); ++r) {
    if (tv[static_cast<size_t>(r)] == ignore) continue;
    const int64_t o = r / v.inner, j = r % v.inner;
    auto at = [&](int64_t k) { return xv[static_cast<size_t>((o * v.classes + k) * v.inner + j)]; };
    double m = -INFINITY, s = 0;
    for (int64_t k = 0; k < v.classes; ++k) m = std::max(m, at(k));
    for (int64_t k = 0; k < v.classes; ++k) s += std::exp(at(k) - m);
    const double lse = log_probs ? 0.0 : m + std::log(s);
    double smooth = 0;
    for (int64_t k = 0; k < v.classes; ++k) smooth += -(at(k) - lse);
    const double nll = -(at(tv[static_cast<size_t>(r)]) - lse);
    out[static_cast<size_t>(r)] = (1 - eps) * nll + eps / double(v.classes) * smooth;
  }
  return out;
}

// The reduced reference: mean over the non-ignored rows (torch), sum, or the rows.
std::vector<double> ref_reduce(const std::vector<double>& rows, const Tensor& target, int64_t ignore, Reduction r) {
  if (r == Reduction::None) return rows;
  double s = 0;
  int64_t count = 0;
  const std::vector<int64_t> tv = target.to_vector<int64_t>();
  for (size_t i = 0; i < rows.size(); ++i) {
    s += rows[i];
    count += tv[i] != ignore;
  }
  return {r == Reduction::Sum ? s : s / double(count)};
}

void require_gradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs) {
  const GradcheckResult r = gradcheck(f, inputs);
  INFO(r.message);
  REQUIRE(r.ok);
}

const Shape kClassShapes[] = {{7, 5}, {3, 4, 2, 3}, {6}, {5, 1}};

}  // namespace

// ---- cross_entropy / nll_loss ------------------------------------------------------------------

TEST_CASE("cross_entropy matches the torch definition in F64 for every shape and reduction", "[loss][cpu]") {
  for (const Shape& s : kClassShapes)
    for (double eps : {0.0, 0.1, 1.0})
      for (double ignore_frac : {0.0, 0.3})
        for (Reduction red : kReductions) {
          INFO("shape " << s << " eps " << eps << " ignore " << ignore_frac << " " << rname(red));
          const Tensor x = randn_t(s, DType::F64, 3, 2.0);
          std::vector<int64_t> ts(s.dims());
          if (s.ndim() == 1) ts.clear();
          else ts.erase(ts.begin() + 1);
          const Tensor t = random_targets(Shape(ts), view_of(s).classes, 5, ignore_frac, 2);
          const Tensor loss = cross_entropy(x, t, {.reduction = red, .ignore_index = 2, .label_smoothing = eps});
          CHECK(loss.dtype() == DType::F64);
          CHECK(loss.shape() == (red == Reduction::None ? t.shape() : Shape{}));
          require_close(loss.to_vector<double>(), ref_reduce(ref_rows(x, t, 2, eps), t, 2, red), 1e-12, 1e-12);
        }
}

TEST_CASE("cross_entropy equals -log_softmax gathered at the target, and nll_loss of log_softmax", "[loss][cpu]") {
  const Tensor x = randn_t({16, 10}, DType::F64, 11, 3.0);
  const Tensor t = random_targets({16}, 10, 12);
  const std::vector<double> lsm = log_softmax(x, 1).to_vector<double>();
  const std::vector<int64_t> tv = t.to_vector<int64_t>();
  std::vector<double> want;
  for (int64_t r = 0; r < 16; ++r) want.push_back(-lsm[static_cast<size_t>(r * 10 + tv[static_cast<size_t>(r)])]);
  require_close(cross_entropy(x, t, {.reduction = Reduction::None}).to_vector<double>(), want, 1e-12, 1e-12);
  require_close(nll_loss(log_softmax(x, 1), t, {.reduction = Reduction::None}).to_vector<double>(), want, 1e-12,
                1e-12);
  // and the gradients agree with the composed path
  Tensor a = x.detach().clone().requires_grad_(), b = x.detach().clone().requires_grad_();
  cross_entropy(a, t).backward();
  nll_loss(log_softmax(b, 1), t).backward();
  require_close(a.grad().to_vector<double>(), b.grad().to_vector<double>(), 1e-10, 1e-14);
}

TEST_CASE("cross_entropy mean divides by the non-ignored targets, all ignored gives NaN and zero grads", "[loss][cpu]") {
  const Tensor x = randn_t({4, 3}, DType::F64, 1);
  const Tensor t = from_vector(std::vector<int64_t>{0, -100, 2, -100}, {4}, {.dtype = DType::I64});
  const std::vector<double> rows = cross_entropy(x, t, {.reduction = Reduction::None}).to_vector<double>();
  CHECK(rows[1] == 0.0);
  CHECK(rows[3] == 0.0);
  CHECK(cross_entropy(x, t).item() == Approx((rows[0] + rows[2]) / 2).epsilon(1e-14));
  Tensor xg = x.detach().clone().requires_grad_();
  const Tensor none = from_vector(std::vector<int64_t>{-100, -100, -100, -100}, {4}, {.dtype = DType::I64});
  const Tensor l = cross_entropy(xg, none);
  CHECK(std::isnan(l.item()));  // torch: 0 / 0
  l.backward();
  for (double g : xg.grad().to_vector<double>()) CHECK(g == 0.0);
}

TEST_CASE("cross_entropy of an empty batch: NaN mean, zero sum, empty rows", "[loss][cpu]") {
  Tensor x = zeros({0, 5}).requires_grad_();
  const Tensor t = zeros({0}, {.dtype = DType::I64});
  CHECK(std::isnan(cross_entropy(x, t).item()));  // torch: mean of nothing
  CHECK(cross_entropy(x, t, {.reduction = Reduction::Sum}).item() == 0.0);
  CHECK(cross_entropy(x, t, {.reduction = Reduction::None}).shape() == Shape{0});
  cross_entropy(x, t, {.reduction = Reduction::Sum}).backward();
  CHECK(x.grad().shape() == Shape{0, 5});
  // no classes at all: only ignored targets are possible
  const Tensor ignored = full({3}, -100.0, {.dtype = DType::I64});
  CHECK(cross_entropy(zeros({3, 0}), ignored, {.reduction = Reduction::Sum}).item() == 0.0);
}

TEST_CASE("cross_entropy and nll_loss with class weights give torch's values", "[loss][cpu]") {
  // reference values printed by PyTorch 1.13 (F.cross_entropy / F.nll_loss with weight=[1, 2, 0.5]) for these inputs
  const Tensor x = from_vector(std::vector<float>{1.0f, 2.0f, 0.5f, -1.0f, 0.3f, 2.5f, 0.0f, 0.1f, -0.2f, 3.0f, 1.5f,
                                                  -2.0f}, {4, 3});
  const Tensor y = from_vector(std::vector<int64_t>{0, 2, -100, 1}, {4});
  const Tensor w = from_vector(std::vector<float>{1.0f, 2.0f, 0.5f}, {3});
  const auto near = [](const Tensor& t, const std::vector<double>& want) {
    const std::vector<double> got = t.to(DType::F64).reshape({-1}).to_vector<double>();
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(1e-6).margin(1e-7));
  };
  near(cross_entropy(x, y, {.weight = w}), {1.41261017});  // sum of w[y] * nll over the non-ignored w[y]
  near(cross_entropy(x, y, {.reduction = Reduction::Sum, .weight = w}), {4.94413567});
  near(cross_entropy(x, y, {.reduction = Reduction::None, .weight = w}), {1.46436882, 0.0659527555, 0, 3.41381407});
  near(cross_entropy(x, y, {.label_smoothing = 0.1, .weight = w}), {1.44240749});
  near(cross_entropy(x, y, {.reduction = Reduction::None, .label_smoothing = 0.1, .weight = w}),
       {1.43044162, 0.33807981, 0, 3.27990508});
  near(nll_loss(log_softmax(x, 1), y, {.weight = w}), {1.41261017});
  const Tensor p = softmax(from_vector(std::vector<float>{0.1f, 0.2f, 0.3f, 1, 0, 0, 0.5f, 0.5f, 0, 2, 1, 0}, {4, 3}), 1);
  near(cross_entropy(x, p, {.weight = w}), {1.67948914});  // probability targets: the mean over the batch
  near(cross_entropy(x, p, {.reduction = Reduction::Sum, .label_smoothing = 0.2, .weight = w}), {6.81545591});
  near(cross_entropy(x.reshape({2, 3, 2}), from_vector(std::vector<int64_t>{0, 2, 1, -100}, {2, 2}), {.weight = w}),
       {1.4488579});
  Tensor xr = x.detach().requires_grad_(true);
  cross_entropy(xr, y, {.label_smoothing = 0.1, .weight = w}).backward();
  near(xr.grad(), {-0.199501619, 0.163525864, 0.0359757468, -0.00523888646, -0.00332496548, 0.00856385846, 0, 0, 0,
                   0.435742646, -0.433980912, -0.00176172249});
  // all weights 1: the fused kernel's values
  CHECK(cross_entropy(x, y, {.weight = ones({3})}).item<double>() ==
        Approx(cross_entropy(x, y).item<double>()).epsilon(1e-6));
  CHECK_THROWS_WITH(cross_entropy(x, y, {.weight = ones({4})}), Catch::Contains("one weight per class"));
  CHECK_THROWS_WITH(cross_entropy(x, from_vector(std::vector<int64_t>{0, 3, 1, 1}, {4}), {.weight = w}),
                    Catch::Contains("target 3 is out of bounds for 3 classes"));
}

TEST_CASE("cross_entropy backward is softmax minus the smoothed one-hot, scaled per row", "[loss][cpu]") {
  const Tensor x = randn_t({5, 4}, DType::F64, 21);
  const Tensor t = from_vector(std::vector<int64_t>{3, 0, -100, 1, 2}, {5}, {.dtype = DType::I64});
  const double eps = 0.2;
  Tensor xg = x.detach().clone().requires_grad_();
  cross_entropy(xg, t, {.label_smoothing = eps}).backward();
  const std::vector<double> p = softmax(x, 1).to_vector<double>(), g = xg.grad().to_vector<double>();
  const std::vector<int64_t> tv = t.to_vector<int64_t>();
  for (int64_t r = 0; r < 5; ++r)
    for (int64_t k = 0; k < 4; ++k) {
      const size_t e = static_cast<size_t>(r * 4 + k);
      const int64_t tr = tv[static_cast<size_t>(r)];
      const double want = tr < 0 ? 0.0 : (p[e] - ((k == tr ? 1 - eps : 0.0) + eps / 4)) / 4.0;  // 4 non-ignored
      CHECK(g[e] == Approx(want).margin(1e-14));
    }
}

TEST_CASE("cross_entropy and nll_loss pass gradcheck in every mode", "[loss][gradcheck]") {
  for (const Shape& s : kClassShapes)
    for (Reduction red : kReductions)
      for (double eps : {0.0, 0.15})
        for (double ignore_frac : {0.0, 0.4}) {
          INFO("shape " << s << " " << rname(red) << " eps " << eps << " ignore " << ignore_frac);
          std::vector<int64_t> ts(s.dims());
          if (s.ndim() == 1) ts.clear();
          else ts.erase(ts.begin() + 1);
          const Tensor t = random_targets(Shape(ts), view_of(s).classes, 8, ignore_frac, -1);
          Tensor x = randn_t(s, DType::F64, 9).requires_grad_();
          require_gradcheck([&](const std::vector<Tensor>& in) {
            return cross_entropy(in[0], t, {.reduction = red, .ignore_index = -1, .label_smoothing = eps});
          }, {x});
          if (eps == 0.0)
            require_gradcheck([&](const std::vector<Tensor>& in) {
              return nll_loss(in[0], t, {.reduction = red, .ignore_index = -1});
            }, {x});
        }
}

TEST_CASE("nll_loss picks -x at the target with ignore_index and torch's mean", "[loss][cpu]") {
  const Tensor x = randn_t({6, 3, 2}, DType::F64, 4);
  const Tensor t = random_targets({6, 2}, 3, 5, 0.3, 7);
  for (Reduction red : kReductions) {
    INFO(rname(red));
    const Tensor l = nll_loss(x, t, {.reduction = red, .ignore_index = 7});
    require_close(l.to_vector<double>(), ref_reduce(ref_rows(x, t, 7, 0.0, true), t, 7, red), 1e-14, 1e-12);
  }
}

TEST_CASE("cross_entropy on F16/BF16 logits returns an F32 loss and a gradient in the logits dtype", "[loss][cpu]") {
  for (DType dt : {DType::F32, DType::F16, DType::BF16})
    for (Reduction red : kReductions)
      for (double eps : {0.0, 0.1}) {
        INFO(dt << " " << rname(red) << " eps " << eps);
        const Tensor x = randn_t({64, 10}, dt, 31, 3.0);
        const Tensor t = random_targets({64}, 10, 32, 0.1);
        Tensor xg = x.detach().clone().requires_grad_();
        const Tensor loss = cross_entropy(xg, t, {.reduction = red, .label_smoothing = eps});
        REQUIRE(loss.dtype() == DType::F32);
        const Tensor x64 = x.to(DType::F64);  // the same rounded inputs, in double
        require_close(loss.to_vector<double>(), ref_reduce(ref_rows(x64, t, -100, eps), t, -100, red), 1e-5, 1e-6);
        sum(loss).backward();
        REQUIRE(xg.grad().dtype() == dt);
        Tensor x64g = x64.detach().clone().requires_grad_();
        sum(cross_entropy(x64g, t, {.reduction = red, .label_smoothing = eps})).backward();
        // one rounding of each gradient element to dt
        // (F16 stores |g| < 6.1e-5 as subnormals spaced 6e-8 apart: an absolute bound covers them)
        require_close(xg.grad().to_vector<double>(), x64g.grad().to_vector<double>(), test::dtype_tolerance(dt), 1e-7);
      }
}

TEST_CASE("cross_entropy is stable for huge logits and handles a -inf class", "[loss][cpu]") {
  const Tensor x = from_vector(std::vector<double>{1000, 0, -1000, 1e4, 1e4 - 1, 5}, {2, 3}, {.dtype = DType::F32});
  const Tensor t = from_vector(std::vector<int64_t>{1, 0}, {2}, {.dtype = DType::I64});
  const std::vector<double> l = cross_entropy(x, t, {.reduction = Reduction::None}).to_vector<double>();
  CHECK(l[0] == Approx(1000.0));
  CHECK(l[1] == Approx(std::log1p(std::exp(-1.0))).epsilon(1e-5));
  // a masked class (-inf) does not make the unsmoothed loss NaN
  const Tensor m = from_vector(std::vector<float>{-INFINITY, 0.f, 0.f}, {1, 3});
  const Tensor t1 = from_vector(std::vector<int64_t>{1}, {1}, {.dtype = DType::I64});
  CHECK(cross_entropy(m, t1).item() == Approx(std::log(2.0)));
  Tensor nan = from_vector(std::vector<float>{NAN, 0.f, 0.f}, {1, 3});
  CHECK(std::isnan(cross_entropy(nan, t1).item()));
}

TEST_CASE("cross_entropy of a large batch is the same on any thread count", "[loss][cpu]") {
  const Tensor x = randn_t({4096, 33}, DType::F32, 41);
  const Tensor t = random_targets({4096}, 33, 42, 0.05);
  Tensor a = x.detach().clone().requires_grad_();
  const Tensor la = cross_entropy(a, t, {.label_smoothing = 0.1});
  la.backward();
  require_close({la.item()}, ref_reduce(ref_rows(x.to(DType::F64), t, -100, 0.1), t, -100, Reduction::Mean), 1e-5,
                1e-12);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  Tensor b = x.detach().clone().requires_grad_();
  const Tensor lb = cross_entropy(b, t, {.label_smoothing = 0.1});
  lb.backward();
  omp_set_num_threads(threads);
  CHECK(la.item() == lb.item());
  CHECK(a.grad().to_vector<float>() == b.grad().to_vector<float>());
}

TEST_CASE("cross_entropy over long rows and strided class dims matches the reference", "[loss][cpu]") {
  // one row per block (classes > the CPU kernel's block), and (N,C,H,W) read in place through the
  // inner stride, both large enough for the parallel path
  const Shape shapes[] = {{24, 2000}, {4, 21, 24, 20}};
  for (const Shape& s : shapes)
    for (DType dt : {DType::F32, DType::BF16}) {
      INFO("shape " << s << " " << dt);
      std::vector<int64_t> ts(s.dims());
      ts.erase(ts.begin() + 1);
      const Tensor x = randn_t(s, dt, 91, 2.0);
      const Tensor t = random_targets(Shape(ts), s[1], 92, 0.1);
      Tensor xg = x.detach().clone().requires_grad_();
      const Tensor l = cross_entropy(xg, t, {.reduction = Reduction::Sum, .label_smoothing = 0.05});
      const Tensor x64 = x.to(DType::F64);
      require_close({l.item()}, ref_reduce(ref_rows(x64, t, -100, 0.05), t, -100, Reduction::Sum), 1e-5, 1e-12);
      l.backward();
      Tensor x64g = x64.detach().clone().requires_grad_();
      cross_entropy(x64g, t, {.reduction = Reduction::Sum, .label_smoothing = 0.05}).backward();
      require_close(xg.grad().to_vector<double>(), x64g.grad().to_vector<double>(), test::dtype_tolerance(dt), 1e-7);
    }
}

TEST_CASE("cross_entropy and nll_loss reject bad targets, shapes and options", "[loss][cpu]") {
  const Tensor x = randn_t({3, 10}, DType::F32, 1);
  const Tensor bad = from_vector(std::vector<int64_t>{1, 12, 0}, {3}, {.dtype = DType::I64});
  REQUIRE_THROWS_WITH(cross_entropy(x, bad), Contains("target 12") && Contains("10 classes"));
  const Tensor neg = from_vector(std::vector<int64_t>{1, -1, 0}, {3}, {.dtype = DType::I64});
  REQUIRE_THROWS_WITH(nll_loss(x, neg), Contains("nll_loss") && Contains("target -1"));
  CHECK_NOTHROW(nll_loss(x, neg, {.ignore_index = -1}));
  REQUIRE_THROWS_WITH(cross_entropy(x, ones({3})), Contains("I64"));
  const Tensor t4 = random_targets({4}, 10, 1);
  REQUIRE_THROWS_WITH(cross_entropy(x, t4), Contains("target shape [4]") && Contains("[3, 10]"));
  REQUIRE_THROWS_WITH(cross_entropy(x, random_targets({3}, 10, 1), {.label_smoothing = 1.5}),
                      Contains("label_smoothing=1.5"));
  REQUIRE_THROWS_WITH(cross_entropy(full({}, 1.0), random_targets({}, 1, 1)), Contains("0-d"));
}

// ---- mse / l1 ----------------------------------------------------------------------------------

TEST_CASE("mse_loss and l1_loss match their definitions for every reduction and dtype", "[loss][cpu]") {
  for (DType dt : {DType::F64, DType::F32, DType::F16, DType::BF16})
    for (Reduction red : kReductions) {
      INFO(dt << " " << rname(red));
      const Tensor x = randn_t({4, 5, 3}, dt, 51), y = randn_t({4, 5, 3}, dt, 52);
      const std::vector<double> xv = x.to_vector<double>(), yv = y.to_vector<double>();
      std::vector<double> sq, ab;
      for (size_t i = 0; i < xv.size(); ++i) {
        sq.push_back((xv[i] - yv[i]) * (xv[i] - yv[i]));
        ab.push_back(std::fabs(xv[i] - yv[i]));
      }
      const Tensor ids = zeros({4, 5, 3}, {.dtype = DType::I64});  // nothing ignored: plain mean
      const Tensor m = mse_loss(x, y, {.reduction = red}), l = l1_loss(x, y, {.reduction = red});
      const DType want = dt == DType::F64 ? DType::F64 : DType::F32;
      CHECK(m.dtype() == want);
      CHECK(l.dtype() == want);
      const double rtol = dt == DType::F64 ? 1e-12 : 1e-5;
      require_close(m.to_vector<double>(), ref_reduce(sq, ids, -100, red), rtol, 1e-6);
      require_close(l.to_vector<double>(), ref_reduce(ab, ids, -100, red), rtol, 1e-6);
    }
}

TEST_CASE("mse_loss and l1_loss pass gradcheck for input and target", "[loss][gradcheck]") {
  for (Reduction red : kReductions) {
    INFO(rname(red));
    Tensor x = randn_t({3, 4}, DType::F64, 61).requires_grad_(), y = randn_t({3, 4}, DType::F64, 62).requires_grad_();
    require_gradcheck([&](const std::vector<Tensor>& in) { return mse_loss(in[0], in[1], {.reduction = red}); }, {x, y});
    require_gradcheck([&](const std::vector<Tensor>& in) { return l1_loss(in[0], in[1], {.reduction = red}); }, {x, y});
  }
}

TEST_CASE("mse_loss, l1_loss and BCE reject a target of another shape", "[loss][cpu]") {
  REQUIRE_THROWS_WITH(mse_loss(ones({3, 2}), ones({3})), Contains("mse_loss") && Contains("[3, 2]") && Contains("[3]"));
  REQUIRE_THROWS_WITH(l1_loss(ones({4}), ones({2, 2})), Contains("l1_loss"));
  REQUIRE_THROWS_WITH(binary_cross_entropy_with_logits(ones({4}), ones({1})), Contains("binary_cross_entropy"));
  REQUIRE_THROWS_WITH(binary_cross_entropy_with_logits(ones({2, 3}), ones({2, 3}), {.pos_weight = ones({2})}),
                      Contains("pos_weight"));
}

// ---- BCE with logits ---------------------------------------------------------------------------

namespace {
// torch's definition in double: (1 - t) x + (1 + (pw - 1) t) log(1 + exp(-x)), log1p for accuracy.
double ref_bce(double x, double t, double pw) {
  const double softplus_neg = std::max(-x, 0.0) + std::log1p(std::exp(-std::fabs(x)));
  return (1 - t) * x + (1 + (pw - 1) * t) * softplus_neg;
}
}  // namespace

TEST_CASE("binary_cross_entropy_with_logits matches the definition, with and without pos_weight", "[loss][cpu]") {
  const Tensor x = randn_t({6, 3}, DType::F64, 71, 4.0);
  Generator gen(72);
  const Tensor t = rand({6, 3}, {.dtype = DType::F64}, &gen);  // soft targets are allowed
  const Tensor pw = from_vector(std::vector<double>{0.5, 2.0, 3.0}, {3}, {.dtype = DType::F64});
  const std::vector<double> xv = x.to_vector<double>(), tv = t.to_vector<double>();
  for (bool weighted : {false, true})
    for (Reduction red : kReductions) {
      INFO("pos_weight " << weighted << " " << rname(red));
      std::vector<double> rows;
      for (size_t i = 0; i < xv.size(); ++i) rows.push_back(ref_bce(xv[i], tv[i], weighted ? (i % 3 == 0 ? 0.5 : i % 3 == 1 ? 2.0 : 3.0) : 1.0));
      const Tensor l = binary_cross_entropy_with_logits(x, t, {.reduction = red, .pos_weight = weighted ? pw : Tensor()});
      require_close(l.to_vector<double>(), ref_reduce(rows, zeros({6, 3}, {.dtype = DType::I64}), -100, red), 1e-12,
                    1e-12);
    }
}

TEST_CASE("binary_cross_entropy_with_logits passes gradcheck, also for pos_weight", "[loss][gradcheck]") {
  for (Reduction red : kReductions) {
    INFO(rname(red));
    Tensor x = randn_t({4, 3}, DType::F64, 81, 3.0).requires_grad_();
    Generator gen(82);
    Tensor t = rand({4, 3}, {.dtype = DType::F64}, &gen).requires_grad_();
    Tensor pw = add(rand({3}, {.dtype = DType::F64}, &gen), 0.5).requires_grad_();
    require_gradcheck([&](const std::vector<Tensor>& in) {
      return binary_cross_entropy_with_logits(in[0], in[1], {.reduction = red});
    }, {x, t});
    require_gradcheck([&](const std::vector<Tensor>& in) {
      return binary_cross_entropy_with_logits(in[0], in[1], {.reduction = red, .pos_weight = in[2]});
    }, {x, t, pw});
  }
}

TEST_CASE("binary_cross_entropy_with_logits is stable at large logits and exact at zero logits", "[loss][cpu]") {
  const Tensor x = from_vector(std::vector<float>{100.f, -100.f, 0.f, 0.f}, {4});
  const Tensor t = from_vector(std::vector<float>{0.f, 1.f, 1.f, 0.f}, {4});
  Tensor xg = x.detach().clone().requires_grad_();
  const Tensor l = binary_cross_entropy_with_logits(xg, t, {.reduction = Reduction::None});
  const std::vector<double> lv = l.to_vector<double>();
  CHECK(lv[0] == Approx(100.0));
  CHECK(lv[1] == Approx(100.0));
  CHECK(lv[2] == Approx(std::log(2.0)));
  sum(l).backward();
  // d/dx = sigmoid(x) - t: at x == 0 (a zero-initialised output layer) that is 0.5 - t, not 0
  const std::vector<double> g = xg.grad().to_vector<double>();
  CHECK(g[0] == Approx(1.0));
  CHECK(g[1] == Approx(-1.0));
  CHECK(g[2] == Approx(-0.5));
  CHECK(g[3] == Approx(0.5));
  const Tensor h = binary_cross_entropy_with_logits(x.to(DType::F16), t.to(DType::BF16));
  CHECK(h.dtype() == DType::F32);
  CHECK(h.item() == Approx((100.0 + 100.0 + 2 * std::log(2.0)) / 4).epsilon(1e-5));
}
