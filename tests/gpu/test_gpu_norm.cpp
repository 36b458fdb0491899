// batch_norm and layer_norm on the GPU against the CPU kernels (the oracle, themselves tested against the
// composed F64 formula in tests/ops/test_norm.cpp): y, dx, dweight, dbias and the running statistics,
// training and eval, every dtype, F32 parameters with F16/BF16 x. The sums run in another order on the
// GPU, so results agree within a tolerance relative to each tensor's scale.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "halfgrad.h"
#include "test_util.h"

using namespace hg;

namespace {

const Device kGpu = Device::cuda();

// max |cpu - gpu| over max |cpu| (plus one: values near zero are compared absolutely).
double scaled_error(const Tensor& cpu, const Tensor& cuda) {
  REQUIRE(cuda.device() == kGpu);
  REQUIRE(cpu.shape() == cuda.shape());
  REQUIRE(cpu.dtype() == cuda.dtype());
  const std::vector<double> a = cpu.to_vector<double>(), b = cuda.to_vector<double>();
  double err = 0, scale = 1;
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, std::fabs(a[i] - b[i]));
    scale = std::max(scale, std::fabs(a[i]));
  }
  return err / scale;
}

Tensor rnd(const Shape& s, DType dt, uint64_t seed, double scale = 1, double shift = 0) {
  Generator gen(seed);
  return add(mul(randn(s, {.dtype = DType::F64}, &gen), scale), shift).to(dt);
}

using NormFn = std::function<Tensor(const Tensor& x, const Tensor& w, const Tensor& b)>;

// f on both devices from the same values, forward and backward: y and the three gradients agree.
void check_devices(const NormFn& f, const Tensor& x0, const Tensor& w0, const Tensor& b0, const Tensor& dy) {
  auto run = [&](Device dev) {
    auto leaf = [dev](const Tensor& t) { return t.to(dev).detach().clone().requires_grad_(); };
    Tensor x = leaf(x0), w = leaf(w0), b = leaf(b0);
    const Tensor y = f(x, w, b);
    y.backward(dy.to(dev));
    return std::vector<Tensor>{y, x.grad(), w.grad(), b.grad()};
  };
  const std::vector<Tensor> c = run(Device::cpu()), g = run(kGpu);
  const double tol = x0.dtype() == DType::F64 ? 1e-10 : x0.dtype() == DType::F32 ? 1e-4 : test::dtype_tolerance(x0.dtype());
  const char* names[] = {"y", "dx", "dweight", "dbias"};
  for (size_t i = 0; i < c.size(); ++i) {
    INFO(names[i]);
    CHECK(scaled_error(c[i], g[i]) <= tol);
  }
}

DType param_dtype(DType x) { return x == DType::F64 ? DType::F64 : DType::F32; }

}  // namespace

TEST_CASE("gpu: batch_norm forward, backward and running statistics match the CPU", "[gpu]") {
  for (const Shape& s : {Shape{64, 7}, Shape{8, 5, 9, 11}, Shape{32, 16, 28, 28}})
    for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
      INFO("shape " << s << " " << dt);
      const int64_t c = s[1];
      const Tensor x = rnd(s, dt, 1, 2.0, 3.0), dy = rnd(s, dt, 2);
      const Tensor w = rnd({c}, param_dtype(dt), 3), b = rnd({c}, param_dtype(dt), 4);
      const Tensor rm0 = rnd({c}, DType::F32, 5), rv0 = add(rand({c}), 0.5);
      Tensor rm_cpu = rm0.clone(), rv_cpu = rv0.clone(), rm_gpu = rm0.to(kGpu), rv_gpu = rv0.to(kGpu);
      check_devices([&](const Tensor& xi, const Tensor& wi, const Tensor& bi) {
        const bool on_gpu = xi.device() == kGpu;
        return batch_norm(xi, on_gpu ? rm_gpu : rm_cpu, on_gpu ? rv_gpu : rv_cpu, wi, bi, {.momentum = 0.2});
      }, x, w, b, dy);
      CHECK(scaled_error(rm_cpu, rm_gpu) <= 1e-5);
      CHECK(scaled_error(rv_cpu, rv_gpu) <= 1e-5);
      check_devices([&](const Tensor& xi, const Tensor& wi, const Tensor& bi) {
        const Device dev = xi.device();
        return batch_norm(xi, rm0.to(dev), rv0.to(dev), wi, bi, {.training = false});
      }, x, w, b, dy);
    }
}

TEST_CASE("gpu: layer_norm forward and backward match the CPU", "[gpu]") {
  struct Case {
    Shape x;
    std::vector<int64_t> ns;
  };
  const Case cases[] = {{{50, 1}, {1}}, {{3, 4, 6}, {4, 6}}, {{7, 1000}, {1000}}, {{2000, 33}, {33}}};
  for (const Case& cs : cases)
    for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
      const Shape ps(cs.ns);
      INFO("x " << cs.x << " normalized " << ps << " " << dt);
      const Tensor x = rnd(cs.x, dt, 11, 2.0, -1.0), dy = rnd(cs.x, dt, 12);
      check_devices([&](const Tensor& xi, const Tensor& wi, const Tensor& bi) { return layer_norm(xi, cs.ns, wi, bi); },
                    x, rnd(ps, param_dtype(dt), 13), rnd(ps, param_dtype(dt), 14), dy);
    }
}
