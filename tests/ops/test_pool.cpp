// max_pool2d, avg_pool2d and adaptive_avg_pool2d against direct-loop references written here (torch's
// window rules), in every floating dtype; gradchecks; NaN propagation; ceil_mode shapes; the gather
// form of the backward (what the CUDA kernels run) against the CPU kernels; errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "autograd/gradcheck.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "ops/pool.h"
#include "ops/pool_math.h"
#include "test_util.h"

using namespace hg;
using Catch::Contains;
using test::check_same_or_close_scaled;
using test::randn_t;

namespace {

const DType kFloatTypes[] = {DType::F32, DType::F16, DType::BF16, DType::F64};
const double kNaN = std::numeric_limits<double>::quiet_NaN();

struct PoolCfg {
  PoolKind kind;
  Shape x;
  Pool2dOptions o;
  Size2 out = 0;  // adaptive only
};

const PoolCfg kCfgs[] = {
    {PoolKind::Max, {2, 3, 8, 8}, {.kernel_size = 2}},
    {PoolKind::Max, {2, 2, 7, 8}, {.kernel_size = 2}},  // odd height: the last row is left out
    {PoolKind::Max, {2, 2, 6, 7}, {.kernel_size = 2}},  // odd width: the general path
    {PoolKind::Max, {1, 2, 7, 7}, {.kernel_size = 3, .stride = 2}},
    {PoolKind::Max, {1, 2, 6, 6}, {.kernel_size = 3, .stride = 1, .padding = 1}},
    {PoolKind::Max, {2, 2, 7, 9}, {.kernel_size = {3, 2}, .stride = {2, 1}, .padding = 1}},
    {PoolKind::Max, {1, 3, 9, 10}, {.kernel_size = 3, .stride = 2, .padding = 1, .dilation = 2}},
    {PoolKind::Max, {2, 2, 5, 6}, {.kernel_size = 2, .stride = 2, .padding = 1, .ceil_mode = true}},
    {PoolKind::Max, {1, 2, 6, 7}, {.kernel_size = 3, .stride = 2, .ceil_mode = true}},
    {PoolKind::Avg, {2, 3, 8, 8}, {.kernel_size = 2}},
    {PoolKind::Avg, {2, 2, 7, 9}, {.kernel_size = 3, .stride = 2, .padding = 1}},
    {PoolKind::Avg, {2, 2, 7, 9}, {.kernel_size = 3, .stride = 2, .padding = 1, .count_include_pad = false}},
    {PoolKind::Avg, {1, 2, 6, 7}, {.kernel_size = {3, 2}, .stride = 2, .padding = 1, .ceil_mode = true}},
    {PoolKind::Avg, {1, 2, 6, 7}, {.kernel_size = 3, .stride = 2, .ceil_mode = true, .count_include_pad = false}},
    {PoolKind::AdaptiveAvg, {2, 3, 7, 9}, {}, {3, 4}},
    {PoolKind::AdaptiveAvg, {1, 2, 5, 4}, {}, 1},
    {PoolKind::AdaptiveAvg, {1, 2, 3, 2}, {}, {5, 3}},  // more outputs than inputs: windows overlap
};

Tensor run_pool(const PoolCfg& c, const Tensor& x) {
  if (c.kind == PoolKind::Max) return max_pool2d(x, c.o);
  if (c.kind == PoolKind::Avg) return avg_pool2d(x, c.o);
  return adaptive_avg_pool2d(x, c.out);
}

std::string describe(const PoolCfg& c) {
  const char* kinds[] = {"max", "avg", "adaptive"};
  return std::string(kinds[static_cast<int>(c.kind)]) + " x " + c.x.str() + " k " +
         std::to_string(c.o.kernel_size.h) + "," + std::to_string(c.o.kernel_size.w) + " s " +
         std::to_string(c.o.stride.h) + " p " + std::to_string(c.o.padding.h) + " d " +
         std::to_string(c.o.dilation.h) + (c.o.ceil_mode ? " ceil" : "") +
         (c.o.count_include_pad ? "" : " exclude_pad") + " out " + std::to_string(c.out.h) + "," +
         std::to_string(c.out.w);
}

// torch's output size, written from its documentation with floating-point floor/ceil.
int64_t ref_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const double q = static_cast<double>(in + 2 * p - d * (k - 1) - 1) / static_cast<double>(s);
  auto out = static_cast<int64_t>(ceil_mode ? std::ceil(q) : std::floor(q)) + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

// One plane's pooling as terms: output o takes weight * x[i]. Max has one term per output (the first
// maximum, NaN first), avg one per window member.
struct Term {
  int64_t o, i;
  double weight;
};

struct Plane {
  int64_t oh, ow;
  std::vector<Term> terms;
};

// The window of output o along one axis: the taps inside the input, and avg pooling's padded size.
struct Taps {
  std::vector<int64_t> at;
  int64_t padded = 0;
};
Taps taps(const PoolCfg& c, bool height, int64_t o, int64_t in, int64_t out) {
  Taps t;
  if (c.kind == PoolKind::AdaptiveAvg) {
    const auto lo = static_cast<int64_t>(std::floor(double(o * in) / double(out)));
    const auto hi = static_cast<int64_t>(std::ceil(double((o + 1) * in) / double(out)));
    for (int64_t i = lo; i < hi; ++i) t.at.push_back(i);
    return t;
  }
  const int64_t k = height ? c.o.kernel_size.h : c.o.kernel_size.w;
  const int64_t s = (height ? c.o.stride.h : c.o.stride.w) == 0 ? k : (height ? c.o.stride.h : c.o.stride.w);
  const int64_t p = height ? c.o.padding.h : c.o.padding.w, d = height ? c.o.dilation.h : c.o.dilation.w;
  const int64_t start = o * s - p;
  t.padded = std::min(start + k, in + p) - start;
  for (int64_t j = 0; j < k; ++j)
    if (start + j * d >= 0 && start + j * d < in) t.at.push_back(start + j * d);
  return t;
}

Plane ref_plane(const PoolCfg& c, const double* x) {
  const int64_t h = c.x[c.x.ndim() - 2], w = c.x[c.x.ndim() - 1];
  Plane pl;
  if (c.kind == PoolKind::AdaptiveAvg) {
    pl.oh = c.out.h, pl.ow = c.out.w;
  } else {
    const Size2 k = c.o.kernel_size, s{c.o.stride.h ? c.o.stride.h : k.h, c.o.stride.w ? c.o.stride.w : k.w};
    pl.oh = ref_out(h, k.h, s.h, c.o.padding.h, c.o.dilation.h, c.o.ceil_mode);
    pl.ow = ref_out(w, k.w, s.w, c.o.padding.w, c.o.dilation.w, c.o.ceil_mode);
  }
  for (int64_t oh = 0; oh < pl.oh; ++oh)
    for (int64_t ow = 0; ow < pl.ow; ++ow) {
      const Taps th = taps(c, true, oh, h, pl.oh), tw = taps(c, false, ow, w, pl.ow);
      const int64_t o = oh * pl.ow + ow;
      if (c.kind == PoolKind::Max) {
        int64_t best = -1;
        for (int64_t ih : th.at)
          for (int64_t iw : tw.at) {
            const double v = x[ih * w + iw];
            if (best < 0 || (std::isnan(v) && !std::isnan(x[best])) || (!std::isnan(x[best]) && v > x[best]))
              best = ih * w + iw;
          }
        pl.terms.push_back({o, best, 1.0});
        continue;
      }
      const bool padded = c.kind == PoolKind::Avg && c.o.count_include_pad;
      const double n = padded ? double(th.padded * tw.padded) : double(th.at.size() * tw.at.size());
      for (int64_t ih : th.at)
        for (int64_t iw : tw.at) pl.terms.push_back({o, ih * w + iw, 1.0 / n});
    }
  return pl;
}

struct PoolRef {
  Shape y_shape;
  std::vector<double> y, dx, dx_mag;
};

PoolRef reference(const PoolCfg& c, const std::vector<double>& x, const std::vector<double>& dy) {
  const int64_t h = c.x[c.x.ndim() - 2], w = c.x[c.x.ndim() - 1], planes = c.x.numel() / (h * w);
  PoolRef r;
  r.dx.assign(x.size(), 0.0);
  r.dx_mag.assign(x.size(), 0.0);
  for (int64_t p = 0; p < planes; ++p) {
    const Plane pl = ref_plane(c, x.data() + p * h * w);
    const int64_t out = pl.oh * pl.ow;
    if (r.y.empty()) r.y.assign(static_cast<size_t>(planes * out), 0.0);
    for (const Term& t : pl.terms) {
      r.y[static_cast<size_t>(p * out + t.o)] += t.weight * x[static_cast<size_t>(p * h * w + t.i)];
      if (dy.empty()) continue;
      const double g = t.weight * dy[static_cast<size_t>(p * out + t.o)];
      r.dx[static_cast<size_t>(p * h * w + t.i)] += g;
      r.dx_mag[static_cast<size_t>(p * h * w + t.i)] += std::fabs(g);
    }
    std::vector<int64_t> ys(c.x.dims().begin(), c.x.dims().end() - 2);
    ys.push_back(pl.oh);
    ys.push_back(pl.ow);
    r.y_shape = Shape(ys);
  }
  return r;
}

}  // namespace

TEST_CASE("pooling forward and backward match direct-loop references in every dtype", "[cpu][pool]") {
  for (DType dt : kFloatTypes)
    for (const PoolCfg& c : kCfgs) {
      INFO(dt << " " << describe(c));
      const Tensor x = randn_t(c.x, dt, 3).requires_grad_();
      const Tensor y = run_pool(c, x);
      const Tensor dy = randn_t(y.shape(), dt, 4);
      y.backward(dy);
      const PoolRef r = reference(c, x.to_vector<double>(), dy.to_vector<double>());
      REQUIRE(y.shape() == r.y_shape);
      REQUIRE(y.dtype() == dt);
      // A maximum is copied, so it is exact; averages and gradient sums round once from F32.
      const double t = c.kind == PoolKind::Max ? 0.0 : test::dtype_tolerance(dt);
      check_same_or_close_scaled("y", y.to_vector<double>(), r.y, {}, t);
      check_same_or_close_scaled("dx", x.grad().to_vector<double>(), r.dx, r.dx_mag, test::dtype_tolerance(dt));
    }
}

TEST_CASE("pooling gradcheck in F64", "[cpu][pool][gradcheck]") {
  for (const PoolCfg& c : kCfgs) {
    INFO(describe(c));
    const Tensor x = randn_t(c.x, DType::F64, 8).requires_grad_();
    const GradcheckResult res = gradcheck([&](const std::vector<Tensor>& v) { return run_pool(c, v[0]); }, {x});
    INFO(res.message);
    CHECK(res.ok);
  }
}

TEST_CASE("pooling matches torch on small hand-checked examples", "[cpu][pool]") {
  const Tensor x = arange(0.0, 9.0, 1.0).reshape({1, 1, 3, 3});
  CHECK(avg_pool2d(x, {.kernel_size = 2, .stride = 2, .padding = 1}).to_vector<double>() ==
        std::vector<double>{0, 0.75, 2.25, 6});
  CHECK(avg_pool2d(x, {.kernel_size = 2, .stride = 2, .padding = 1, .count_include_pad = false}).to_vector<double>() ==
        std::vector<double>{0, 1.5, 4.5, 6});
  // ceil_mode: the last window sticks out of the input and divides by its clipped size 1 (torch)
  CHECK(avg_pool2d(x, {.kernel_size = 2, .ceil_mode = true}).to_vector<double>() ==
        std::vector<double>{2, 3.5, 6.5, 8});
  const Tensor x4 = arange(0.0, 16.0, 1.0).reshape({1, 1, 4, 4});
  CHECK(max_pool2d(x4, {.kernel_size = 2}).to_vector<double>() == std::vector<double>{5, 7, 13, 15});
  CHECK(adaptive_avg_pool2d(x4, 1).to_vector<double>() == std::vector<double>{7.5});
  CHECK(adaptive_avg_pool2d(x, 2).to_vector<double>() == std::vector<double>{2, 3, 5, 6});
}

TEST_CASE("pool output shapes follow torch, ceil_mode included", "[cpu][pool]") {
  const Tensor x5 = zeros({2, 3, 5, 6});
  CHECK(max_pool2d(x5, {.kernel_size = 2}).shape() == Shape{2, 3, 2, 3});
  CHECK(max_pool2d(x5, {.kernel_size = 2, .ceil_mode = true}).shape() == Shape{2, 3, 3, 3});
  // ceil would give 4 rows, but the 4th window would start in the right padding: torch drops it
  CHECK(max_pool2d(x5, {.kernel_size = 2, .stride = 2, .padding = 1, .ceil_mode = true}).shape() == Shape{2, 3, 3, 4});
  CHECK(avg_pool2d(zeros({1, 1, 6, 6}), {.kernel_size = 3, .stride = 2, .padding = 1, .ceil_mode = true}).shape() ==
        Shape{1, 1, 4, 4});
  CHECK(max_pool2d(zeros({1, 1, 9, 9}), {.kernel_size = 3, .dilation = 2}).shape() == Shape{1, 1, 2, 2});
  CHECK(adaptive_avg_pool2d(x5, {4, 7}).shape() == Shape{2, 3, 4, 7});
  CHECK(max_pool2d(zeros({3, 5, 6}), {.kernel_size = 2}).shape() == Shape{3, 2, 3});  // unbatched
  CHECK(avg_pool2d(zeros({0, 3, 5, 6}), {.kernel_size = 2}).shape() == Shape{0, 3, 2, 3});
  for (int64_t in = 1; in <= 12; ++in)
    for (int64_t k = 1; k <= 4; ++k)
      for (int64_t s = 1; s <= 3; ++s)
        for (int64_t p = 0; p <= k / 2; ++p)
          for (bool ceil_mode : {false, true}) {
            const int64_t want = ref_out(in, k, s, p, 1, ceil_mode);
            if (want < 1) continue;
            INFO("in " << in << " k " << k << " s " << s << " p " << p << " ceil " << ceil_mode);
            CHECK(pool_out_size(in, k, s, p, 1, ceil_mode) == want);
          }
}

TEST_CASE("max_pool2d propagates NaN and sends its gradient to the first maximum", "[cpu][pool]") {
  for (DType dt : kFloatTypes) {
    INFO(dt);
    const double inf = std::numeric_limits<double>::infinity();
    const Tensor x = from_vector(std::vector<double>{1, kNaN, 3, 3, 2, 2, -inf, -inf, 5, kNaN, kNaN, 0, -inf, -inf,
                                                     5, 4},
                                 {1, 1, 4, 4}, {.dtype = dt})
                         .requires_grad_();
    // windows: {1,nan,2,2} {3,3,-inf,-inf} {5,nan,-inf,-inf} {nan,0,5,4}
    const Tensor y = max_pool2d(x, {.kernel_size = 2});
    const std::vector<double> v = y.to_vector<double>();
    CHECK(std::isnan(v[0]));
    CHECK(v[1] == 3);
    CHECK(std::isnan(v[2]));
    CHECK(std::isnan(v[3]));
    y.backward(from_vector(std::vector<double>{1, 2, 3, 4}, {1, 1, 2, 2}, {.dtype = dt}));
    const std::vector<double> g = x.grad().to_vector<double>();
    CHECK(g == std::vector<double>{0, 1, 2, 0, 0, 0, 0, 0, 0, 3, 4, 0, 0, 0, 0, 0});
    const Tensor all_inf = full({1, 1, 2, 2}, -inf, {.dtype = dt});
    CHECK(max_pool2d(all_inf, {.kernel_size = 2}).item() == -inf);
  }
}

TEST_CASE("max_pool2d breaks ties toward the first position, -0 equal to +0", "[cpu][pool]") {
  // The same windows through the 2x2 stride-2 path, and (3x3 windows, padded) the general one.
  const std::vector<double> v{1, 3, -0.0, 0.0, 3, 2, 0.0, -0.0};  // windows [[1,3],[3,2]] and [[-0,0],[0,-0]]
  const Tensor x = from_vector(v, {1, 1, 2, 4}).requires_grad_();
  const Tensor y = max_pool2d(x, {.kernel_size = 2});
  y.backward(ones_like(y));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 1, 1, 0, 0, 0, 0, 0});
  CHECK(std::signbit(y.to_vector<double>()[1]));  // the first zero, -0, is the result
  const Tensor x3 = from_vector(std::vector<double>{2, 5, 5, 5, 1, 5, 0, 5, 5}, {1, 1, 3, 3}).requires_grad_();
  const Tensor y3 = max_pool2d(x3, {.kernel_size = 3, .stride = 1, .padding = 1});
  y3.backward(ones_like(y3));
  CHECK(x3.grad().to_vector<double>() == std::vector<double>{0, 6, 0, 2, 0, 1, 0, 0, 0});
}

TEST_CASE("the gather form of the pool backward agrees with the CPU kernels", "[cpu][pool]") {
  // The CUDA kernels compute dx with max_pool_grad_at / avg_pool_grad_at (one thread per input);
  // the CPU scatters max gradients. Both must give the same sums.
  for (const PoolCfg& c : kCfgs) {
    INFO(describe(c));
    const Tensor x = randn_t(c.x, DType::F32, 12);
    const Tensor y = run_pool(c, x.detach());
    const int64_t h = c.x[2], w = c.x[3], oh = y.shape()[2], ow = y.shape()[3], planes = c.x[0] * c.x[1];
    const Tensor dy = randn_t(y.shape(), DType::F32, 13);
    const Tensor xg = x.detach().requires_grad_();
    run_pool(c, xg).backward(dy);
    const std::vector<float> dx = xg.grad().to_vector<float>(), dyv = dy.to_vector<float>(),
                             xv = x.to_vector<float>();
    const Size2 k = c.o.kernel_size;
    PoolGeom g{.kind = c.kind,
               .h = {.in = h, .out = oh, .k = k.h, .s = c.o.stride.h ? c.o.stride.h : k.h, .p = c.o.padding.h,
                     .d = c.o.dilation.h},
               .w = {.in = w, .out = ow, .k = k.w, .s = c.o.stride.w ? c.o.stride.w : k.w, .p = c.o.padding.w,
                     .d = c.o.dilation.w},
               .count_include_pad = c.o.count_include_pad};
    size_t bad = 0;
    for (int64_t p = 0; p < planes; ++p) {
      std::vector<int64_t> idx(static_cast<size_t>(oh * ow));
      for (int64_t o = 0; o < oh * ow; ++o)
        if (c.kind == PoolKind::Max) (void)max_pool_at(g, xv.data() + p * h * w, o / ow, o % ow, idx[size_t(o)]);
      for (int64_t i = 0; i < h * w; ++i) {
        const float* dyp = dyv.data() + p * oh * ow;
        const float want = c.kind == PoolKind::Max ? max_pool_grad_at(g, dyp, idx.data(), i / w, i % w)
                                                   : avg_pool_grad_at(g, dyp, i / w, i % w);
        if (want != dx[size_t(p * h * w + i)]) ++bad;
      }
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("pooling rejects bad arguments with messages that name the values", "[cpu][pool]") {
  const Tensor x = zeros({2, 3, 8, 8});
  REQUIRE_THROWS_WITH(max_pool2d(zeros({8, 8}), {.kernel_size = 2}), Contains("max_pool2d: x has shape [8, 8]"));
  REQUIRE_THROWS_WITH(max_pool2d(x, {}), Contains("kernel_size=(0, 0)"));
  REQUIRE_THROWS_WITH(max_pool2d(x, {.kernel_size = 2, .stride = -1}), Contains("stride=(-1, -1)"));
  REQUIRE_THROWS_WITH(avg_pool2d(x, {.kernel_size = 3, .padding = 2}),
                      Contains("padding=(2, 2)") && Contains("half of kernel_size=(3, 3)"));
  REQUIRE_THROWS_WITH(avg_pool2d(x, {.kernel_size = 2, .dilation = 2}), Contains("avg_pool2d: dilation=(2, 2)"));
  REQUIRE_THROWS_WITH(max_pool2d(x, {.kernel_size = 9}), Contains("output of 0x0"));
  REQUIRE_THROWS_WITH(max_pool2d(x, {.kernel_size = 2, .dilation = 0}), Contains("dilation=(0, 0)"));
  REQUIRE_THROWS_WITH(adaptive_avg_pool2d(x, {0, 2}), Contains("output_size=(0, 2)"));
  REQUIRE_THROWS_WITH(adaptive_avg_pool2d(zeros({1, 1, 0, 3}), 2), Contains("height and width"));
  REQUIRE_THROWS_WITH(avg_pool2d(zeros({2, 3, 8, 8}, {.dtype = DType::I64}), {.kernel_size = 2}),
                      Contains("avg_pool2d"));
}
