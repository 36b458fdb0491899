// conv2d against a direct-loop F64 reference written here (forward, dx, dw, db), in every floating
// dtype; gradchecks; the oneDNN kernels against the im2col kernels; shapes and errors.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "autograd/gradcheck.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "ops/conv.h"
#include "cpu/conv.h"
#include "ops/kernels/conv.h"
#include "test_util.h"

using namespace hg;
using Catch::Contains;
using test::check_close_scaled;
using test::randn_t;

namespace {

const DType kFloatTypes[] = {DType::F32, DType::F16, DType::BF16, DType::F64};

struct Cfg {
  int64_t n, c, h, w, k, r, s;
  Conv2dFuncOptions o;
  bool bias = true;
  int64_t oh() const { return (h + 2 * o.padding.h - o.dilation.h * (r - 1) - 1) / o.stride.h + 1; }
  int64_t ow() const { return (w + 2 * o.padding.w - o.dilation.w * (s - 1) - 1) / o.stride.w + 1; }
  Shape x_shape() const { return {n, c, h, w}; }
  Shape w_shape() const { return {k, c / o.groups, r, s}; }
  Shape y_shape() const { return {n, k, oh(), ow()}; }
};

// Strides, padding, dilation, groups (depthwise too), 1x1, non-square, rows left over by the stride.
const Cfg kCfgs[] = {
    {2, 3, 7, 6, 4, 3, 3, {}},
    {3, 4, 8, 9, 6, 3, 2, {.stride = 2, .padding = 1}},
    {2, 4, 9, 8, 4, 3, 3, {.stride = {2, 3}, .padding = {1, 2}, .dilation = {2, 1}, .groups = 2}, false},
    {1, 6, 5, 5, 6, 3, 3, {.padding = 1, .groups = 6}},
    {2, 8, 4, 5, 4, 1, 1, {}, false},
    {2, 6, 5, 7, 9, 1, 1, {.stride = 2, .groups = 3}},
    {2, 1, 10, 10, 5, 5, 5, {.stride = 3, .padding = 2, .dilation = 2}},
};

// Calls f(x index, w index, y index) for every product x*w that the convolution sums.
template <class F>
void for_each_term(const Cfg& g, F&& f) {
  const int64_t cg = g.c / g.o.groups, kg = g.k / g.o.groups, oh = g.oh(), ow = g.ow();
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t k = 0; k < g.k; ++k)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t x = 0; x < ow; ++x)
          for (int64_t cl = 0; cl < cg; ++cl)
            for (int64_t i = 0; i < g.r; ++i)
              for (int64_t j = 0; j < g.s; ++j) {
                const int64_t ih = y * g.o.stride.h - g.o.padding.h + i * g.o.dilation.h;
                const int64_t iw = x * g.o.stride.w - g.o.padding.w + j * g.o.dilation.w;
                if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
                const int64_t c = k / kg * cg + cl;
                f(((n * g.c + c) * g.h + ih) * g.w + iw, ((k * cg + cl) * g.r + i) * g.s + j,
                  ((n * g.k + k) * oh + y) * ow + x);
              }
}

// A result and, per element, the sum of |terms| it adds up: the scale its rounding error is measured
// against (an output near 0 may be a large cancelling sum).
struct Ref {
  std::vector<double> val, mag;
  explicit Ref(int64_t n) : val(static_cast<size_t>(n), 0.0), mag(static_cast<size_t>(n), 0.0) {}
  void add(int64_t i, double v) {
    val[static_cast<size_t>(i)] += v;
    mag[static_cast<size_t>(i)] += std::fabs(v);
  }
};

struct Refs {
  Ref y, dx, dw, db;
};

Refs reference(const Cfg& g, const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& b,
               const std::vector<double>& dy) {
  Refs r{Ref(g.y_shape().numel()), Ref(g.x_shape().numel()), Ref(g.w_shape().numel()), Ref(g.k)};
  auto at = [](const std::vector<double>& v, int64_t i) { return v[static_cast<size_t>(i)]; };
  for_each_term(g, [&](int64_t xi, int64_t wi, int64_t yi) {
    r.y.add(yi, at(x, xi) * at(w, wi));
    r.dx.add(xi, at(dy, yi) * at(w, wi));
    r.dw.add(wi, at(dy, yi) * at(x, xi));
  });
  const int64_t plane = g.oh() * g.ow();
  for (int64_t i = 0; i < g.y_shape().numel(); ++i) {
    const int64_t k = i / plane % g.k;
    if (!b.empty()) r.y.add(i, at(b, k));
    r.db.add(k, at(dy, i));
  }
  return r;
}

// The least magnitude an error is measured against: t * max(mag, kMinMag).
constexpr double kMinMag = 1e-3;

struct Inputs {
  Tensor x, w, b, dy;
};
Inputs make_inputs(const Cfg& g, DType dt, uint64_t seed) {
  return {randn_t(g.x_shape(), dt, seed), randn_t(g.w_shape(), dt, seed + 1),
          g.bias ? randn_t({g.k}, dt, seed + 2) : Tensor(), randn_t(g.y_shape(), dt, seed + 3)};
}

Refs reference(const Cfg& g, const Inputs& in) {
  return reference(g, in.x.to_vector<double>(), in.w.to_vector<double>(),
                   in.b.defined() ? in.b.to_vector<double>() : std::vector<double>(), in.dy.to_vector<double>());
}

std::string describe(const Cfg& g) {
  return "x " + g.x_shape().str() + " w " + g.w_shape().str() + " stride " + std::to_string(g.o.stride.h) + "," +
         std::to_string(g.o.stride.w) + " pad " + std::to_string(g.o.padding.h) + "," +
         std::to_string(g.o.padding.w) + " dil " + std::to_string(g.o.dilation.h) + "," +
         std::to_string(g.o.dilation.w) + " groups " + std::to_string(g.o.groups) + (g.bias ? " bias" : "");
}

}  // namespace

TEST_CASE("conv2d forward and backward match a direct-loop reference in every dtype", "[cpu][conv]") {
  // The tolerance scales with the sum of |terms|: F32 accumulation of C*R*S (or N*OH*OW) products
  // errs by ~sqrt(terms) * 2^-24 of that sum, and the one final rounding to F16/BF16 by 2^-11/2^-8 of
  // |result| <= the sum. So the shared dtype tolerance holds without loosening it for BF16.
  for (DType dt : kFloatTypes)
    for (const Cfg& g : kCfgs) {
      INFO(dt << " " << describe(g));
      Inputs in = make_inputs(g, dt, 17);
      in.x.requires_grad_();
      in.w.requires_grad_();
      if (in.b.defined()) in.b.requires_grad_();
      const Tensor y = conv2d(in.x, in.w, in.b, g.o);
      REQUIRE(y.shape() == g.y_shape());
      REQUIRE(y.dtype() == dt);
      y.backward(in.dy);
      const Refs r = reference(g, in);
      const double t = test::dtype_tolerance(dt);
      check_close_scaled("y", y.to_vector<double>(), r.y.val, r.y.mag, t, kMinMag);
      check_close_scaled("dx", in.x.grad().to_vector<double>(), r.dx.val, r.dx.mag, t, kMinMag);
      check_close_scaled("dw", in.w.grad().to_vector<double>(), r.dw.val, r.dw.mag, t, kMinMag);
      if (g.bias) check_close_scaled("db", in.b.grad().to_vector<double>(), r.db.val, r.db.mag, t, kMinMag);
    }
}

TEST_CASE("conv2d gradcheck in F64", "[cpu][conv][gradcheck]") {
  for (const Cfg& g : kCfgs) {
    INFO(describe(g));
    Inputs in = make_inputs(g, DType::F64, 5);
    std::vector<Tensor> args{in.x.requires_grad_(), in.w.requires_grad_()};
    if (g.bias) args.push_back(in.b.requires_grad_());
    const GradcheckResult res = gradcheck(
        [&](const std::vector<Tensor>& v) { return conv2d(v[0], v[1], v.size() > 2 ? v[2] : Tensor(), g.o); }, args);
    INFO(res.message);
    CHECK(res.ok);
  }
}

TEST_CASE("conv2d computes only the gradients that are needed", "[cpu][conv]") {
  const Cfg g = kCfgs[1];
  Inputs in = make_inputs(g, DType::F64, 3);
  in.b.requires_grad_();  // only the bias: db is the sum of dy over N, OH, OW
  conv2d(in.x, in.w, in.b, g.o).backward(in.dy);
  const Refs r = reference(g, in);
  check_close_scaled("db", in.b.grad().to_vector<double>(), r.db.val, r.db.mag, 1e-12, kMinMag);
  CHECK_FALSE(in.w.grad().defined());
  Inputs in2 = make_inputs(g, DType::F64, 3);
  in2.x.requires_grad_();  // only x
  conv2d(in2.x, in2.w, in2.b, g.o).backward(in2.dy);
  check_close_scaled("dx", in2.x.grad().to_vector<double>(), r.dx.val, r.dx.mag, 1e-12, kMinMag);
}

TEST_CASE("conv2d oneDNN kernels agree with the im2col kernels", "[cpu][conv]") {
  INFO("engine for F32: " << cpu::conv_engine(DType::F32));
  for (DType dt : kFloatTypes)
    for (const Cfg& g : kCfgs) {
      INFO(dt << " " << describe(g));
      const Inputs in = make_inputs(g, dt, 29);
      const Refs r = reference(g, in);
      const ConvArgs base{.dtype = dt, .n = g.n, .c = g.c, .h = g.h, .w = g.w, .k = g.k, .r = g.r, .s = g.s,
                          .oh = g.oh(), .ow = g.ow(), .stride_h = g.o.stride.h, .stride_w = g.o.stride.w,
                          .pad_h = g.o.padding.h, .pad_w = g.o.padding.w, .dil_h = g.o.dilation.h,
                          .dil_w = g.o.dilation.w, .groups = g.o.groups};
      // Output buffers start as NaN: a kernel that skips an element (or adds instead of writing) fails.
      auto nan_like = [&](Shape s) { return full(std::move(s), NAN, {.dtype = dt}); };
      using Kernels = std::array<ConvKernel, 3>;
      const Kernels dispatched{conv2d_forward_kernels().get(Device::cpu(), dt),
                               conv2d_backward_data_kernels().get(Device::cpu(), dt),
                               conv2d_backward_weight_kernels().get(Device::cpu(), dt)};
      const Kernels im2col{&cpu::conv2d_forward_im2col, &cpu::conv2d_backward_data_im2col,
                           &cpu::conv2d_backward_weight_im2col};
      std::vector<std::vector<double>> results[2];
      for (int e = 0; e < 2; ++e) {
        const Kernels& ks = e == 0 ? dispatched : im2col;
        Tensor y = nan_like(g.y_shape()), dx = nan_like(g.x_shape()), dw = nan_like(g.w_shape()), db = nan_like({g.k});
        ConvArgs a = base;
        a.x = in.x.data_ptr(), a.wt = in.w.data_ptr(), a.b = g.bias ? in.b.data_ptr() : nullptr;
        a.dy = in.dy.data_ptr(), a.y = y.data_ptr(), a.dx = dx.data_ptr(), a.dw = dw.data_ptr(), a.db = db.data_ptr();
        ks[0](a);
        ks[1](a);
        ks[2](a);
        results[e] = {y.to_vector<double>(), dx.to_vector<double>(), dw.to_vector<double>(), db.to_vector<double>()};
      }
      const double t = test::dtype_tolerance(dt);
      const Ref* refs[] = {&r.y, &r.dx, &r.dw, &r.db};
      const char* names[] = {"y", "dx", "dw", "db"};
      for (int i = 0; i < 4; ++i) {
        const std::vector<double>& by_dispatch = results[0][static_cast<size_t>(i)];
        const std::vector<double>& by_im2col = results[1][static_cast<size_t>(i)];
        // the dispatched kernel against im2col's result, with the reference's scale
        check_close_scaled(names[i], by_dispatch, by_im2col, refs[i]->mag, t, kMinMag);
        check_close_scaled(names[i], by_im2col, refs[i]->val, refs[i]->mag, t, kMinMag);
      }
    }
}

TEST_CASE("conv2d takes unbatched (C,H,W) input and promotes mixed dtypes", "[cpu][conv]") {
  const Cfg g{1, 3, 6, 5, 4, 3, 3, {.padding = 1}};
  const Inputs in = make_inputs(g, DType::F32, 41);
  const Tensor y4 = conv2d(in.x, in.w, in.b, g.o);
  const Tensor x3 = in.x.reshape({3, 6, 5}).detach().requires_grad_();
  const Tensor y3 = conv2d(x3, in.w, in.b, g.o);
  REQUIRE(y3.shape() == Shape{4, 6, 5});
  CHECK(y3.to_vector<float>() == y4.to_vector<float>());
  y3.backward(ones_like(y3));
  CHECK(x3.grad().shape() == x3.shape());

  const Tensor y64 = conv2d(in.x, in.w.to(DType::F64), in.b, g.o);
  CHECK(y64.dtype() == DType::F64);
  const Tensor ymix = conv2d(in.x.to(DType::BF16), in.w.to(DType::F16), Tensor(), g.o);
  CHECK(ymix.dtype() == DType::F32);  // F16 with BF16 promotes to F32, as in torch
}

TEST_CASE("conv2d with an empty batch gives an empty output and zero weight gradients", "[cpu][conv]") {
  const Tensor x = zeros({0, 2, 5, 5});
  const Tensor w = randn_t({3, 2, 3, 3}, DType::F32, 1).requires_grad_();
  const Tensor b = zeros({3}).requires_grad_();
  const Tensor y = conv2d(x, w, b);
  REQUIRE(y.shape() == Shape{0, 3, 3, 3});
  y.backward(zeros_like(y));
  CHECK(w.grad().to_vector<double>() == std::vector<double>(54, 0.0));
  CHECK(b.grad().to_vector<double>() == std::vector<double>(3, 0.0));
}

TEST_CASE("conv2d rejects bad shapes and options with messages that name the values", "[cpu][conv]") {
  const Tensor x = zeros({2, 4, 8, 8}), w = zeros({6, 4, 3, 3});
  REQUIRE_THROWS_WITH(conv2d(zeros({4, 8}), w), Contains("x has shape [4, 8]") && Contains("4-D"));
  REQUIRE_THROWS_WITH(conv2d(x, zeros({6, 4, 3})), Contains("w has shape [6, 4, 3]"));
  REQUIRE_THROWS_WITH(conv2d(x, zeros({6, 3, 3, 3})), Contains("w.shape[1]=3") && Contains("C/groups=4"));
  REQUIRE_THROWS_WITH(conv2d(x, zeros({6, 4, 3, 3}), Tensor(), {.groups = 3}), Contains("C=4") &&
                                                                                    Contains("groups=3"));
  REQUIRE_THROWS_WITH(conv2d(x, zeros({5, 2, 3, 3}), Tensor(), {.groups = 2}), Contains("K=5"));
  REQUIRE_THROWS_WITH(conv2d(x, w, zeros({5})), Contains("b has shape [5]") && Contains("(6)"));
  REQUIRE_THROWS_WITH(conv2d(x, zeros({6, 4, 9, 9})), Contains("smaller than the dilated kernel"));
  REQUIRE_THROWS_WITH(conv2d(x, w, Tensor(), {.dilation = 5}), Contains("dilation 5"));
  REQUIRE_THROWS_WITH(conv2d(x, w, Tensor(), {.stride = 0}), Contains("stride=(0, 0)"));
  REQUIRE_THROWS_WITH(conv2d(x, w, Tensor(), {.padding = {-1, 0}}), Contains("padding=(-1, 0)"));
  REQUIRE_THROWS_WITH(conv2d(x, w, Tensor(), {.groups = 0}), Contains("groups=0"));
  REQUIRE_THROWS_WITH(conv2d(zeros({2, 4, 8, 8}, {.dtype = DType::I64}), w), Contains("conv2d"));
}
