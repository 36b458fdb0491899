// Reductions and softmax against double references written here, in every floating dtype: F16/BF16
// results are compared with the F64 result of the same rounded inputs. Plus gradchecks and errors.
#include <catch2/catch.hpp>

#include <omp.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "autograd/gradcheck.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "ops/elementwise.h"
#include "ops/reduce.h"
#include "test_util.h"

using namespace hg;
using test::check_same_or_close_scaled;
using test::randn_t;

namespace {

const DType kFloatTypes[] = {DType::F32, DType::F16, DType::BF16, DType::F64};
const double kNaN = std::numeric_limits<double>::quiet_NaN();

double tol(DType dt) { return test::dtype_tolerance(dt); }

enum class RefOp { Sum, Max, Min };

// The reduction of v (shape s) over mask, in double, with the keepdim output layout; mag is the sum
// of |x| per output (the scale a rounding error is measured against); idx the first extreme's
// position along the (single) reduced dim, NaN first as torch.max.
struct Ref {
  std::vector<double> val, mag;
  std::vector<int64_t> idx;
};

Ref ref_reduce(const std::vector<double>& v, const Shape& s, const std::vector<bool>& mask, RefOp op) {
  std::vector<int64_t> os;
  for (int64_t d = 0; d < s.ndim(); ++d) os.push_back(mask[static_cast<size_t>(d)] ? 1 : s[d]);
  const auto ost = contiguous_strides(Shape(os));
  const int64_t nout = Shape(os).numel();
  Ref r{std::vector<double>(static_cast<size_t>(nout), 0.0), std::vector<double>(static_cast<size_t>(nout), 0.0),
        std::vector<int64_t>(static_cast<size_t>(nout), -1)};
  for (int64_t i = 0; i < s.numel(); ++i) {
    int64_t rem = i, o = 0, pos = 0;
    for (int64_t d = s.ndim() - 1; d >= 0; --d) {
      const int64_t c = rem % s[d];
      rem /= s[d];
      if (mask[static_cast<size_t>(d)]) pos = c;
      else o += c * ost[static_cast<size_t>(d)];
    }
    const double x = v[static_cast<size_t>(i)];
    double& best = r.val[static_cast<size_t>(o)];
    int64_t& at = r.idx[static_cast<size_t>(o)];
    r.mag[static_cast<size_t>(o)] += std::fabs(x);
    if (op == RefOp::Sum) {
      best += x;
    } else if (at < 0 || (std::isnan(x) && !std::isnan(best)) ||
               (!std::isnan(best) && (op == RefOp::Max ? x > best : x < best))) {
      best = x;
      at = pos;
    }
  }
  return r;
}

std::vector<bool> make_mask(int64_t ndim, std::vector<int64_t> dims) {
  std::vector<bool> m(static_cast<size_t>(ndim), dims.empty());
  for (int64_t d : dims) m[static_cast<size_t>(d < 0 ? d + ndim : d)] = true;
  return m;
}

Shape out_shape(const Shape& s, const std::vector<bool>& mask, bool keepdim) {
  std::vector<int64_t> o;
  for (int64_t d = 0; d < s.ndim(); ++d)
    if (!mask[static_cast<size_t>(d)]) o.push_back(s[d]);
    else if (keepdim) o.push_back(1);
  return Shape(o);
}

GradcheckResult check_grad(const GradcheckFn& f, Shape s, uint64_t seed = 7) {
  Tensor x = randn_t(std::move(s), DType::F64, seed);
  x.requires_grad_();
  return gradcheck(f, {x});
}

// gradcheck of every function on one input shape, naming the one that fails.
void check_grads(const std::vector<GradcheckFn>& fns, const Shape& s) {
  for (size_t i = 0; i < fns.size(); ++i) {
    INFO("function " << i);
    const GradcheckResult r = check_grad(fns[i], s);
    INFO(r.message);
    REQUIRE(r.ok);
  }
}

}  // namespace

// ---- sum / mean ----------------------------------------------------------------------------------

TEST_CASE("sum and mean match a double reference over dims, keepdim and negative dims", "[cpu][reduce]") {
  const std::vector<std::vector<int64_t>> dim_sets = {{}, {0}, {1}, {-1}, {0, 2}, {1, 2}, {-3, -1}, {2, 0, 1}};
  const Shape shapes[] = {{5, 7, 33}, {3, 2500, 70}, {2, 1, 200001}};
  for (DType dt : kFloatTypes)
    for (const Shape& s : shapes) {
      const Tensor x = randn_t(s, dt, 11);
      const std::vector<double> xv = x.to_vector<double>();
      for (const auto& dims : dim_sets) {
        const auto mask = make_mask(s.ndim(), dims);
        const Ref r = ref_reduce(xv, s, mask, RefOp::Sum);
        const double n = static_cast<double>(s.numel()) / static_cast<double>(r.val.size());
        for (bool keepdim : {false, true})
          for (bool is_mean : {false, true}) {
            INFO(dt << " shape " << s << " dims " << dims.size() << (dims.empty() ? 0 : dims[0]) << " keepdim "
                    << keepdim << " mean " << is_mean);
            const Tensor y = is_mean ? mean(x, dims, {.keepdim = keepdim}) : sum(x, dims, {.keepdim = keepdim});
            REQUIRE(y.shape() == out_shape(s, mask, keepdim));
            REQUIRE(y.dtype() == dt);
            std::vector<double> want = r.val, mag = r.mag;
            if (is_mean)
              for (size_t i = 0; i < want.size(); ++i) want[i] /= n, mag[i] /= n;
            check_same_or_close_scaled(is_mean ? "mean" : "sum", y.to_vector<double>(), want, mag, tol(dt));
          }
      }
    }
}

TEST_CASE("sum and mean of every element give 0-d tensors", "[cpu][reduce]") {
  for (DType dt : kFloatTypes) {
    const Tensor x = randn_t({4, 9, 5}, dt, 3);
    const Ref r = ref_reduce(x.to_vector<double>(), x.shape(), make_mask(3, {}), RefOp::Sum);
    const Tensor s = sum(x), m = mean(x);
    REQUIRE(s.ndim() == 0);
    REQUIRE(m.ndim() == 0);
    CHECK(std::fabs(s.item() - r.val[0]) <= tol(dt) * r.mag[0]);
    CHECK(std::fabs(m.item() - r.val[0] / 180) <= tol(dt) * r.mag[0] / 180);
  }
  const Tensor scalar = full({}, 2.5);
  CHECK(sum(scalar).item() == 2.5);
  CHECK(sum(scalar, {0}).item() == 2.5);
  CHECK(sum(zeros({0, 3})).item() == 0.0);
  CHECK(sum(zeros({0, 3}), {0}).to_vector<double>() == std::vector<double>{0, 0, 0});
  CHECK(sum(zeros({0, 3, 2}), {0, 2}).to_vector<double>() == std::vector<double>{0, 0, 0});  // permuted path
  CHECK(std::isnan(mean(zeros({0})).item()));  // torch: mean of nothing is nan
}

TEST_CASE("F16 sums accumulate in F32 and round once", "[cpu][reduce]") {
  // naive F16 accumulation stalls at 2048 (2048 + 1 rounds back to 2048)
  CHECK(sum(ones({4096}, {.dtype = DType::F16})).item() == 4096.0);
  CHECK(sum(ones({64, 4096}, {.dtype = DType::BF16}), {1}).to_vector<double>() == std::vector<double>(64, 4096.0));
  CHECK(sum(ones({4096, 3}, {.dtype = DType::F16}), {0}).to_vector<double>() == std::vector<double>(3, 4096.0));
  Generator gen(5);
  const Tensor x = rand({1 << 20}, {.dtype = DType::F16}, &gen);
  const std::vector<double> v = x.to_vector<double>();
  double ref = 0;
  for (double e : v) ref += e;
  ref /= static_cast<double>(v.size());
  CHECK(std::fabs(mean(x).item() - ref) <= 1e-3 * ref);  // one F16 rounding of the exact mean
}

TEST_CASE("the all-reduce of 16M elements is pairwise and thread-count independent", "[cpu][reduce]") {
  // 2^24 + 1000 ones: sequential F32 accumulation stops at 2^24 = 16777216
  const Tensor x = ones({(int64_t{1} << 24) + 1000});
  CHECK(sum(x).item() == 16778216.0);
  const Tensor y = randn_t({3, 1 << 20}, DType::F32, 9);
  const int threads = omp_get_max_threads();
  const std::vector<float> all = sum(y).to_vector<float>(), rows = sum(y, {0}).to_vector<float>();
  omp_set_num_threads(1);
  const std::vector<float> all1 = sum(y).to_vector<float>(), rows1 = sum(y, {0}).to_vector<float>();
  omp_set_num_threads(threads);
  CHECK(all == all1);
  CHECK(rows == rows1);
}

// ---- max / min / argmax ----------------------------------------------------------------------------

TEST_CASE("max and min with dim return values and first indices", "[cpu][reduce]") {
  const Shape shapes[] = {{6, 9, 5}, {2, 70000}, {3, 40000, 3}};
  for (DType dt : kFloatTypes)
    for (const Shape& s : shapes) {
      // rounding to BF16 on a coarse grid makes many ties, so first-occurrence is exercised
      const Tensor x = (randn_t(s, DType::F32, 21) * 4.0).to(dt);
      const std::vector<double> xv = x.to_vector<double>();
      for (int64_t dim = -s.ndim(); dim < s.ndim(); ++dim)
        for (RefOp op : {RefOp::Max, RefOp::Min}) {
          const auto mask = make_mask(s.ndim(), {dim});
          const Ref r = ref_reduce(xv, s, mask, op);
          for (bool keepdim : {false, true}) {
            INFO(dt << " shape " << s << " dim " << dim << " keepdim " << keepdim << " max " << (op == RefOp::Max));
            const ValuesIndices vi =
                op == RefOp::Max ? max(x, dim, {.keepdim = keepdim}) : min(x, dim, {.keepdim = keepdim});
            REQUIRE(vi.values.shape() == out_shape(s, mask, keepdim));
            REQUIRE(vi.indices.shape() == vi.values.shape());
            REQUIRE(vi.indices.dtype() == DType::I64);
            CHECK(vi.values.to_vector<double>() == r.val);  // exact: a max is one of the inputs
            CHECK(vi.indices.to_vector<int64_t>() == r.idx);
          }
        }
    }
}

TEST_CASE("max/min: ties take the first index, NaN wins and propagates", "[cpu][reduce]") {
  for (DType dt : kFloatTypes) {
    const Tensor x = from_vector(std::vector<double>{1, 3, 3, 0, /**/ 2, kNaN, 5, kNaN, /**/ -1, -1, -1, -1},
                                 {3, 4}, {.dtype = dt});
    const ValuesIndices mx = max(x, 1), mn = min(x, -1);
    const auto mv = mx.values.to_vector<double>(), nv = mn.values.to_vector<double>();
    CHECK(mv[0] == 3);
    CHECK(std::isnan(mv[1]));
    CHECK(mv[2] == -1);
    CHECK(mx.indices.to_vector<int64_t>() == std::vector<int64_t>{1, 1, 0});
    CHECK(nv[0] == 0);
    CHECK(std::isnan(nv[1]));
    CHECK(mn.indices.to_vector<int64_t>() == std::vector<int64_t>{3, 1, 0});
    CHECK(std::isnan(max(x).item()));
    CHECK(std::isnan(min(x).item()));
    CHECK(argmax(x, 1).to_vector<int64_t>() == std::vector<int64_t>{1, 1, 0});
    CHECK(argmax(x).item<int64_t>() == 5);
  }
  // a NaN in a late split of a long row still wins, and ties across splits keep the first
  std::vector<double> v(200000, 1.0);
  v[150000] = 7;
  v[190000] = 7;
  CHECK(argmax(from_vector(v, {200000})).item<int64_t>() == 150000);
  v[199999] = kNaN;
  CHECK(argmax(from_vector(v, {1, 200000}), 1).item<int64_t>() == 199999);
  CHECK(std::isnan(max(from_vector(v, {200000})).item()));
}

TEST_CASE("all-reduce max/min and argmax", "[cpu][reduce]") {
  for (DType dt : kFloatTypes) {
    const Tensor x = randn_t({37, 1001}, dt, 4);
    const Ref mx = ref_reduce(x.to_vector<double>(), x.shape(), make_mask(2, {}), RefOp::Max);
    const Ref mn = ref_reduce(x.to_vector<double>(), x.shape(), make_mask(2, {}), RefOp::Min);
    CHECK(max(x).ndim() == 0);
    CHECK(max(x).item() == mx.val[0]);
    CHECK(min(x).item() == mn.val[0]);
    const Tensor am = argmax(x);
    CHECK(am.ndim() == 0);
    CHECK(am.dtype() == DType::I64);
    CHECK(x.to_vector<double>()[static_cast<size_t>(am.item<int64_t>())] == mx.val[0]);
    const Tensor ad = argmax(x, 0, {.keepdim = true});
    CHECK(ad.shape() == Shape{1, 1001});
    CHECK(ad.to_vector<int64_t>() == ref_reduce(x.to_vector<double>(), x.shape(), make_mask(2, {0}), RefOp::Max).idx);
  }
  CHECK(max(full({}, 3.0), 0).values.item() == 3.0);
  CHECK(max(full({}, 3.0), 0).indices.item<int64_t>() == 0);
}

// ---- var ----------------------------------------------------------------------------------------

TEST_CASE("var with correction 0 and 1 over one and several dims", "[cpu][reduce]") {
  const std::vector<std::vector<int64_t>> dim_sets = {{}, {1}, {-1}, {0, 2}};
  for (DType dt : kFloatTypes)
    for (const auto& dims : dim_sets)
      for (int64_t corr : {0, 1})
        for (bool keepdim : {false, true}) {
          INFO(dt << " dims " << dims.size() << " correction " << corr << " keepdim " << keepdim);
          const Shape s{6, 13, 7};
          const Tensor x = add(randn_t(s, dt, 8), 3.0);  // a nonzero mean: var must subtract it
          const Tensor v = var(x, dims, {.correction = corr, .keepdim = keepdim});
          const auto mask = make_mask(3, dims);
          REQUIRE(v.shape() == out_shape(s, mask, keepdim));
          REQUIRE(v.dtype() == dt);
          const std::vector<double> xv = x.to_vector<double>();
          Ref m = ref_reduce(xv, s, mask, RefOp::Sum);
          const double n = static_cast<double>(s.numel() / static_cast<int64_t>(m.val.size()));
          // second pass: squared deviations from the per-output mean
          std::vector<double> dev(xv.size());
          const Tensor mt = from_vector(m.val, out_shape(s, mask, true), {.dtype = DType::F64}) / n;
          const std::vector<double> mb = add(zeros(s, {.dtype = DType::F64}), mt).to_vector<double>();
          for (size_t i = 0; i < xv.size(); ++i) dev[i] = (xv[i] - mb[i]) * (xv[i] - mb[i]);
          Ref ss = ref_reduce(dev, s, mask, RefOp::Sum);
          for (double& e : ss.val) e /= (n - static_cast<double>(corr));
          check_same_or_close_scaled("var", v.to_vector<double>(), ss.val, ss.val, tol(dt));
        }
  CHECK(var(from_vector(std::vector<double>{1, 2, 3, 4}, {4})).item() == Approx(5.0 / 3.0));
  CHECK(var(from_vector(std::vector<double>{1, 2, 3, 4}, {4}), {}, {.correction = 0}).item() == Approx(1.25));
}

TEST_CASE("var with N - correction <= 0 divides by zero like torch", "[cpu][reduce]") {
  CHECK(std::isnan(var(full({1}, 2.0)).item()));                       // 0 / 0
  CHECK(std::isinf(var(from_vector(std::vector<double>{1, 2}, {2}), {}, {.correction = 2}).item()));  // 0.5 / 0
}

// ---- sum_to -------------------------------------------------------------------------------------

TEST_CASE("sum_to sums broadcast dims back", "[cpu][reduce]") {
  const Tensor x = randn_t({4, 3, 5, 2}, DType::F64, 2);
  const std::vector<double> xv = x.to_vector<double>();
  const Tensor a = sum_to(x, {3, 1, 2});
  REQUIRE(a.shape() == Shape{3, 1, 2});
  const Ref r = ref_reduce(xv, x.shape(), {true, false, true, false}, RefOp::Sum);
  check_same_or_close_scaled("sum_to", a.to_vector<double>(), r.val, r.mag, 1e-12);
  CHECK(sum_to(x, {}).item() == Approx(ref_reduce(xv, x.shape(), make_mask(4, {}), RefOp::Sum).val[0]));
  CHECK(sum_to(x, {1, 1, 5, 2}).shape() == Shape{1, 1, 5, 2});
  CHECK(sum_to(x, x.shape()).same(x));
}

// ---- softmax ------------------------------------------------------------------------------------

TEST_CASE("softmax and log_softmax match a double reference over any dim", "[cpu][reduce][softmax]") {
  const Shape s{4, 37, 6};
  for (DType dt : kFloatTypes)
    for (int64_t dim : {0, 1, 2, -1})
      for (bool log : {false, true}) {
        INFO(dt << " dim " << dim << " log " << log);
        const Tensor x = (randn_t(s, DType::F32, 31) * 3.0).to(dt);
        const Tensor y = log ? log_softmax(x, dim) : softmax(x, dim);
        REQUIRE(y.shape() == s);
        REQUIRE(y.dtype() == dt);
        const std::vector<double> xv = x.to_vector<double>();
        const auto mask = make_mask(3, {dim});
        const Ref mx = ref_reduce(xv, s, mask, RefOp::Max);
        const Tensor m = from_vector(mx.val, out_shape(s, mask, true), {.dtype = DType::F64});
        const Tensor e = exp(sub(x.to(DType::F64), m));
        const Tensor z = from_vector(ref_reduce(e.to_vector<double>(), s, mask, RefOp::Sum).val, m.shape(),
                                     {.dtype = DType::F64});
        const Tensor want = log ? sub(sub(x.to(DType::F64), m), hg::log(z)) : div(e, z);
        const std::vector<double> w = want.to_vector<double>();
        std::vector<double> scale(w.size(), 1.0);
        if (log) for (size_t i = 0; i < w.size(); ++i) scale[i] = std::fabs(w[i]);
        check_same_or_close_scaled(log ? "log_softmax" : "softmax", y.to_vector<double>(), w, scale, tol(dt));
        if (!log) {  // rows sum to 1
          const Ref rs = ref_reduce(y.to_vector<double>(), s, mask, RefOp::Sum);
          for (double v : rs.val) CHECK(v == Approx(1.0).epsilon(4 * tol(dt)));
        }
      }
}

TEST_CASE("softmax is stable for huge inputs and log_softmax equals log(softmax)", "[cpu][reduce][softmax]") {
  for (DType dt : kFloatTypes) {
    const Tensor x = from_vector(std::vector<double>{1000, 996, -1000, 0, /**/ -1000, -1004, -1000, -1008}, {2, 4},
                                 {.dtype = dt});
    const std::vector<double> p = softmax(x, 1).to_vector<double>();
    const std::vector<double> lp = log_softmax(x, -1).to_vector<double>();
    for (double v : p) CHECK(std::isfinite(v));
    for (double v : lp) CHECK(std::isfinite(v));
    CHECK(p[0] == Approx(1 / (1 + std::exp(-4.0))).epsilon(tol(dt)));
    CHECK(p[2] == 0.0);
    CHECK(lp[2] == Approx(-2000 - std::log1p(std::exp(-4.0))).epsilon(tol(dt)));
    const Tensor y = randn_t({5, 300}, dt, 6);
    const std::vector<double> a = log_softmax(y, 1).to_vector<double>();
    const std::vector<double> b = hg::log(softmax(y.to(DType::F64), 1)).to_vector<double>();
    std::vector<double> mag(b.size());
    for (size_t i = 0; i < b.size(); ++i) mag[i] = std::fabs(b[i]);
    check_same_or_close_scaled("log_softmax", a, b, mag, 2 * tol(dt));
    // a large max costs the small results nothing (torch's (x - max) - log(sum)): log(1/2) to the dtype's rounding,
    // where x - (max + log(sum)) in F32 gave -0.6914 at 6e4 and -0.6875 at 1e6
    const Tensor big = from_vector(std::vector<double>{60000, 60000, 1, 0, /**/ 1e6, 1e6, 0, 0}, {2, 4}, {.dtype = dt});
    const Tensor half = full({}, -std::log(2.0), {.dtype = dt});
    const std::vector<double> l = log_softmax(big, 1).to_vector<double>();
    for (const int i : dt == DType::F16 ? std::vector<int>{0, 1} : std::vector<int>{0, 1, 4, 5})  // 1e6 is inf in F16
      CHECK(l[static_cast<size_t>(i)] == half.item<double>());
  }
  const double inf = std::numeric_limits<double>::infinity();
  for (DType dt : kFloatTypes) {  // torch: a NaN poisons its row, -inf entries get exactly 0, all -inf is NaN
    const Tensor x = from_vector(std::vector<double>{1, kNaN, 2, /**/ -inf, 0, -inf, /**/ -inf, -inf, -inf}, {3, 3},
                                 {.dtype = dt});
    const std::vector<double> p = softmax(x, 1).to_vector<double>(), lp = log_softmax(x, 1).to_vector<double>();
    for (int i : {0, 1, 2, 6, 7, 8}) CHECK(std::isnan(p[static_cast<size_t>(i)]));
    CHECK(p[3] == 0.0);
    CHECK(p[4] == 1.0);
    CHECK(lp[3] == -inf);
    CHECK(lp[4] == 0.0);
  }
  // exp arguments down to -200: subnormal and zero probabilities still match the reference
  const Tensor wide = from_vector(std::vector<double>{0, -10, -50, -87, -88, -90, -100, -103, -104, -200}, {10});
  const std::vector<double> pw = softmax(wide, 0).to_vector<double>();
  double z = 0;
  for (double v : wide.to_vector<double>()) z += std::exp(v);
  for (size_t i = 0; i < pw.size(); ++i) {
    const double want = static_cast<double>(static_cast<float>(std::exp(wide.to_vector<double>()[i]) / z));
    CHECK(std::fabs(pw[i] - want) <= 1e-6 * want + 1.5e-45);  // within an ulp or so, subnormals included
  }
  const Tensor big = randn_t({2, 100000}, DType::F32, 1);  // long rows: pairwise sum, parallel rows
  const Ref rs = ref_reduce(softmax(big, 1).to_vector<double>(), big.shape(), make_mask(2, {1}), RefOp::Sum);
  for (double v : rs.val) CHECK(v == Approx(1.0).epsilon(1e-5));
}

// ---- gradients -----------------------------------------------------------------------------------

TEST_CASE("gradcheck: sum and mean", "[cpu][reduce][gradcheck]") {
  using V = std::vector<Tensor>;
  const std::vector<GradcheckFn> fns = {
      [](const V& x) { return sum(x[0]); },
      [](const V& x) { return sum(x[0], {1}); },
      [](const V& x) { return sum(x[0], {0, 2}, {.keepdim = true}); },
      [](const V& x) { return sum(x[0], {-1}, {.keepdim = true}); },
      [](const V& x) { return mean(x[0]); },
      [](const V& x) { return mean(x[0], {0, 1}); },
      [](const V& x) { return mean(x[0], {-2}, {.keepdim = true}); },
  };
  check_grads(fns, {3, 4, 5});
}

TEST_CASE("gradcheck: max/min with dim, all-reduce max, var, sum_to", "[cpu][reduce][gradcheck]") {
  using V = std::vector<Tensor>;
  const std::vector<GradcheckFn> fns = {
      [](const V& x) { return max(x[0], 1).values; },
      [](const V& x) { return min(x[0], 0, {.keepdim = true}).values; },
      [](const V& x) { return max(x[0], -1).values; },
      [](const V& x) { return max(x[0]); },
      [](const V& x) { return min(x[0]); },
      [](const V& x) { return var(x[0]); },
      [](const V& x) { return var(x[0], {1}, {.correction = 0}); },
      [](const V& x) { return var(x[0], {0, 2}, {.keepdim = true}); },
      [](const V& x) { return sum_to(x[0], {4, 1}); },
      [](const V& x) { return sum_to(x[0], {1, 5}); },
  };
  check_grads(fns, {3, 4, 5});
}

TEST_CASE("max/min backward: with dim to the index, all-reduce shared among ties", "[cpu][reduce]") {
  Tensor x = from_vector(std::vector<double>{1, 4, 4, 2, 4, 0}, {2, 3}, {.dtype = DType::F64, .requires_grad = true});
  max(x, 1).values.backward(from_vector(std::vector<double>{10, 20}, {2}));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 10, 0, 0, 20, 0});
  x.zero_grad();
  max(x).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 1.0 / 3, 1.0 / 3, 0, 1.0 / 3, 0});
  Tensor n = from_vector(std::vector<double>{1, kNaN, 3, kNaN}, {4}, {.dtype = DType::F64, .requires_grad = true});
  max(n).backward();  // torch: the gradient is shared by the NaNs
  CHECK(n.grad().to_vector<double>() == std::vector<double>{0, 0.5, 0, 0.5});
  Tensor h = from_vector(std::vector<double>{1, 4, 4, 2}, {4}, {.dtype = DType::F16, .requires_grad = true});
  min(h, 0).values.backward();
  CHECK(h.grad().dtype() == DType::F16);
  CHECK(h.grad().to_vector<double>() == std::vector<double>{1, 0, 0, 0});
  std::vector<double> v(3000, 0.0);  // index 2999 is not an F16 number: the routing compares in F64
  v[2999] = 1;
  Tensor b = from_vector(v, {1, 3000}, {.dtype = DType::F16, .requires_grad = true});
  sum(max(b, 1).values).backward();
  const std::vector<double> g = b.grad().to_vector<double>();
  CHECK(g[2999] == 1.0);
  CHECK(sum(b.grad()).item() == 1.0);
}

TEST_CASE("gradcheck: softmax and log_softmax over dims 0, -1 and the middle", "[cpu][reduce][softmax][gradcheck]") {
  for (int64_t dim : {0, 1, -1})
    for (bool log : {false, true}) {
      INFO("dim " << dim << " log " << log);
      const GradcheckResult r = check_grad(
          [dim, log](const std::vector<Tensor>& x) { return log ? log_softmax(x[0], dim) : softmax(x[0], dim); },
          {3, 4, 5});
      INFO(r.message);
      REQUIRE(r.ok);
    }
}

TEST_CASE("reduction backward keeps low-precision dtypes", "[cpu][reduce]") {
  for (DType dt : {DType::F16, DType::BF16}) {
    Tensor x = randn_t({3, 5}, dt, 2);
    x.requires_grad_();
    add(add(sum(sum(x, {1})), mean(x)), add(var(x), sum(log_softmax(x, 0)))).backward();
    REQUIRE(x.grad().dtype() == dt);
    REQUIRE(x.grad().shape() == x.shape());
  }
}

// ---- errors -------------------------------------------------------------------------------------

TEST_CASE("reductions reject bad dims, dtypes and empty extremes", "[cpu][reduce]") {
  const Tensor x = zeros({2, 3});
  const Tensor i64 = from_vector(std::vector<int64_t>{1, 2}, {2}, {.dtype = DType::I64});
  REQUIRE_THROWS_WITH(sum(x, {2}), Catch::Contains("sum: dim 2 is out of range"));
  REQUIRE_THROWS_WITH(mean(x, {-3}), Catch::Contains("mean: dim -3"));
  REQUIRE_THROWS_WITH(sum(x, {1, -1}), Catch::Contains("appears more than once"));
  CHECK(sum(i64).item<int64_t>() == 3);  // torch's I64 sum (through F64: exact to 2^53)
  CHECK(sum(i64).dtype() == DType::I64);
  CHECK(mean(i64).item() == 1.5);  // F32 (torch refuses an integer mean)
  // max/min/argmax of integers, as torch's: the values in I64, exact (through F64) below 2^53
  const Tensor big = from_vector(std::vector<int64_t>{(int64_t{1} << 52) + 1, -7, (int64_t{1} << 52) + 3}, {3});
  CHECK(max(big).item<int64_t>() == (int64_t{1} << 52) + 3);
  CHECK(max(big).dtype() == DType::I64);
  CHECK(min(big, 0).values.item<int64_t>() == -7);
  CHECK(argmax(big).item<int64_t>() == 2);
  CHECK(argmin(big, 0).item<int64_t>() == 1);
  REQUIRE_THROWS_WITH(var(i64), Catch::Contains("var: dtype I64"));
  REQUIRE_THROWS_WITH(softmax(i64, 0), Catch::Contains("softmax: dtype I64"));
  REQUIRE_THROWS_WITH(max(zeros({0, 3})), Catch::Contains("max: cannot reduce an empty tensor"));
  REQUIRE_THROWS_WITH(min(zeros({0})), Catch::Contains("min: cannot reduce an empty tensor"));
  REQUIRE_THROWS_WITH(argmax(zeros({0})), Catch::Contains("argmax: cannot reduce an empty tensor"));
  REQUIRE_THROWS_WITH(max(zeros({3, 0}), 1), Catch::Contains("max: cannot reduce over dim 1 of size 0"));
  REQUIRE_THROWS_WITH(min(zeros({3, 0}), -1), Catch::Contains("min: cannot reduce over dim 1 of size 0"));
  REQUIRE_THROWS_WITH(argmax(zeros({0, 2}), 0), Catch::Contains("argmax: cannot reduce over dim 0"));
  REQUIRE_THROWS_WITH(max(x, 2), Catch::Contains("max: dim 2 is out of range"));
  REQUIRE_THROWS_WITH(softmax(x, 2), Catch::Contains("softmax: dim 2"));
  REQUIRE_THROWS_WITH(log_softmax(x, -3), Catch::Contains("log_softmax: dim -3"));
  REQUIRE_THROWS_WITH(var(x, {5}), Catch::Contains("var: dim 5"));
  REQUIRE_THROWS_WITH(sum_to(x, {1, 2, 3}), Catch::Contains("sum_to: cannot sum shape [2, 3] to [1, 2, 3]"));
  REQUIRE_THROWS_WITH(sum_to(x, {2}), Catch::Contains("sum_to: cannot sum shape [2, 3] to [2]"));
  CHECK(max(zeros({0, 3}), 1).values.shape() == Shape{0});  // nothing to reduce per row: fine
}
