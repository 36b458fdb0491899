// Every op on the GPU against the CPU backend (the oracle), through the public API only:
// inputs are made on the CPU, moved with .to(Device::cuda()), the op runs on both devices, and the GPU
// result comes back with .to(Device::cpu()). F32, F16, BF16 and F64, with dtype tolerances:
//  * elementwise and softmax: per element, |gpu - cpu| <= atol + rtol |cpu| (torch.testing-like,
//    widened by an ulp or two for the transcendental functions, which differ between CUDA and glibc);
//  * reductions and matmul: per element with looser bounds (the order of the additions differs);
//  * casts, shape ops, max/min and their indices: exact.
// NaN matches NaN and inf matches inf of the same sign.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/graph.h"
#include "halfgrad.h"
#include "gpu/compare.h"
#include "test_util.h"

using namespace hg;
using namespace hg::gpu_test;

namespace {


using Unary = std::function<Tensor(const Tensor&)>;
struct UnaryCase {
  const char* name;
  Unary f;
  bool positive_only;
};

std::vector<UnaryCase> unary_cases() {
  return {
      {"neg", [](const Tensor& x) { return neg(x); }, false},
      {"exp", [](const Tensor& x) { return exp(x); }, false},
      {"log", [](const Tensor& x) { return log(x); }, true},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, true},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, true},
      {"abs", [](const Tensor& x) { return abs(x); }, false},
      {"relu", [](const Tensor& x) { return relu(x); }, false},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, false},
      {"tanh", [](const Tensor& x) { return tanh(x); }, false},
      {"gelu", [](const Tensor& x) { return gelu(x); }, false},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, GeluApprox::Tanh); }, false},
      {"silu", [](const Tensor& x) { return silu(x); }, false},
      {"erf", [](const Tensor& x) { return erf(x); }, false},
      {"pow2.5", [](const Tensor& x) { return pow(x, 2.5); }, true},
      {"pow3", [](const Tensor& x) { return pow(x, 3.0); }, false},
      {"clamp", [](const Tensor& x) { return clamp(x, -0.5, 0.75); }, false},
      {"add_scalar", [](const Tensor& x) { return x + 1.5; }, false},
      {"mul_scalar", [](const Tensor& x) { return x * -2.25; }, false},
      {"div_scalar", [](const Tensor& x) { return x / 3.0; }, false},
      {"rsub_scalar", [](const Tensor& x) { return 2.0 - x; }, false},
      {"rdiv_scalar", [](const Tensor& x) { return 2.0 / x; }, true},
      {"floor", [](const Tensor& x) { return floor(x.mul(3.0)); }, false},
      {"round", [](const Tensor& x) { return round(x.mul(3.0)); }, false},
      {"ceil", [](const Tensor& x) { return ceil(x); }, false},
      {"trunc", [](const Tensor& x) { return trunc(x); }, false},
  };
}

using Binary = std::function<Tensor(const Tensor&, const Tensor&)>;
struct BinaryCase {
  const char* name;
  Binary f;
};

std::vector<BinaryCase> binary_cases() {
  return {{"add", [](const Tensor& a, const Tensor& b) { return a + b; }},
          {"sub", [](const Tensor& a, const Tensor& b) { return a - b; }},
          {"mul", [](const Tensor& a, const Tensor& b) { return a * b; }},
          {"div", [](const Tensor& a, const Tensor& b) { return a / b; }},
          {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }},
          {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }}};
}

std::vector<BinaryCase> comparison_cases() {
  return {{"eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); }},
          {"ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); }},
          {"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); }},
          {"le", [](const Tensor& a, const Tensor& b) { return le(a, b); }},
          {"gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); }},
          {"ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); }}};
}

const std::vector<std::pair<Shape, Shape>>& broadcast_pairs() {
  static const std::vector<std::pair<Shape, Shape>> p = {
      {{1}, {1}},           {{1023}, {1023}},           {{4097}, {1}},        {{33, 17}, {33, 17}},
      {{4, 5}, {5}},        {{3, 1, 5}, {1, 4, 1}},     {{2, 3}, {}},         {{0, 3}, {3}},
      {{7, 1, 6}, {7, 9, 1}}, {{2, 1, 3, 1, 2}, {1, 4, 1, 5, 1}}};
  return p;
}

}  // namespace

TEST_CASE("gpu: to(cuda) and back is exact for every dtype", "[gpu]") {
  for (DType dt : kTypes) {
    const Tensor x = rnd({5, 77}, dt);
    check_close(x, gpu(x), exact(), describe("round trip", dt, x.shape()));
  }
  const Tensor i = arange(int64_t{1000}, {.dtype = DType::I64});
  const Tensor ig = gpu(i);
  CHECK(ig.device() == kGpu);
  CHECK(ig.to(Device::cpu()).to_vector<int64_t>() == i.to_vector<int64_t>());
  CHECK(gpu(zeros({0, 4})).numel() == 0);
}

TEST_CASE("gpu: zeros, ones and full are filled on the device with the CPU's values", "[gpu]") {
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64, DType::Bool}) {
    INFO(dtype_name(dt));
    CHECK(zeros({1000}, {.dtype = dt, .device = kGpu}).to(Device::cpu()).to_vector<double>() ==
          zeros({1000}, {.dtype = dt}).to_vector<double>());
    CHECK(ones({3, 7}, {.dtype = dt, .device = kGpu}).to(Device::cpu()).to_vector<double>() ==
          ones({3, 7}, {.dtype = dt}).to_vector<double>());
    CHECK(full({5}, -2.75, {.dtype = dt, .device = kGpu}).to(Device::cpu()).to_vector<double>() ==
          full({5}, -2.75, {.dtype = dt}).to_vector<double>());
  }
  CHECK(zeros({0}, {.device = kGpu}).numel() == 0);
}

TEST_CASE("gpu: unary elementwise ops and their gradients", "[gpu]") {
  const Shape shapes[] = {{1}, {1023}, {4097}, {33, 17}, {0, 5}};
  for (DType dt : kTypes)
    for (const UnaryCase& u : unary_cases())
      for (const Shape& s : shapes) {
        const Tensor x = u.positive_only ? positive(s, dt) : rnd(s, dt);
        const std::string what = describe(u.name, dt, s);
        check_close(u.f(x), u.f(gpu(x)), ew_tol(dt), what);

        // backward: d/dx of sum(f(x) * w) exercises the Grad mode of the same functor
        if (s.numel() == 0) continue;
        const Tensor w = rnd(s, dt);
        Tensor xc = x.detach().requires_grad_(true);
        Tensor xg = gpu(x).detach().requires_grad_(true);
        sum(mul(u.f(xc), w).to(DType::F64)).backward();
        sum(mul(u.f(xg), gpu(w)).to(DType::F64)).backward();
        REQUIRE(xc.grad().defined());
        REQUIRE(xg.grad().defined());
        check_close(xc.grad(), xg.grad(), reduce_tol(dt), what + " grad");
      }
}

TEST_CASE("gpu: binary elementwise ops with broadcasting and their gradients", "[gpu]") {
  for (DType dt : kTypes)
    for (const BinaryCase& op : binary_cases())
      for (const auto& [sa, sb] : broadcast_pairs()) {
        const Tensor a = rnd(sa, dt);
        const Tensor b = op.name == std::string("div") ? positive(sb, dt, 0.5) : rnd(sb, dt);
        const std::string what = describe(op.name, dt, sa) + " with " + sb.str();
        check_close(op.f(a, b), op.f(gpu(a), gpu(b)), ew_tol(dt), what);

        if (a.numel() == 0 || b.numel() == 0) continue;
        Tensor ac = a.detach().requires_grad_(true), bc = b.detach().requires_grad_(true);
        Tensor ag = gpu(a).detach().requires_grad_(true), bg = gpu(b).detach().requires_grad_(true);
        sum(op.f(ac, bc).to(DType::F64)).backward();
        sum(op.f(ag, bg).to(DType::F64)).backward();
        check_close(ac.grad(), ag.grad(), reduce_tol(dt), what + " grad a");
        check_close(bc.grad(), bg.grad(), reduce_tol(dt), what + " grad b");
      }
}

TEST_CASE("gpu: a 0-d CPU tensor meets a device tensor on its device and other CPU operands are refused", "[gpu]") {
  const Tensor x = rnd(Shape{3, 5}, DType::F16), scale = full({}, 0.1);
  const Tensor y = gpu(x) * scale;  // torch's CPU scalar: result on the device, in x's dtype (result_type)
  CHECK(y.is_cuda());
  CHECK(y.dtype() == DType::F16);
  CHECK(y.cpu().to_vector<double>() == (x * scale).to_vector<double>());
  CHECK((full({}, 2.0) + gpu(full({}, 1.0))).is_cuda());
  CHECK((gpu(x) < scale).is_cuda());
  CHECK_THROWS_WITH(gpu(x) * full({1}, 0.1), Catch::Contains("different devices"));
}

TEST_CASE("gpu: comparisons and where", "[gpu]") {
  uint32_t seed = 1;
  for (DType dt : kTypes)
    for (const auto& [sa, sb] : broadcast_pairs()) {
      const Tensor a = ints(sa, dt, seed++), b = ints(sb, dt, seed++);
      for (const BinaryCase& op : comparison_cases())
        check_close(op.f(a, b), op.f(gpu(a), gpu(b)), exact(), describe(op.name, dt, sa) + " with " + sb.str());
      const Tensor cond = gt(a, zeros({}, {.dtype = dt}));
      REQUIRE(cond.dtype() == DType::Bool);
      CHECK(gt(gpu(a), 0.0).dtype() == DType::Bool);
      check_close(cond.sum(), gpu(cond).sum(), exact(), describe("sum of a Bool mask", dt, sa));
      check_close(cond & (a < 3.0), gpu(cond) & (gpu(a) < 3.0), exact(), describe("logical_and", dt, sa));
      if (a.ndim() > 0)
        check_close(a.index({cond}), gpu(a).index({gpu(cond)}), exact(), describe("index by a Bool mask", dt, sa));
      const Tensor x = rnd(sb, dt), y = rnd(sa, dt);
      check_close(where(cond, x, y), where(gpu(cond), gpu(x), gpu(y)), exact(), describe("where", dt, sa));

      if (cond.numel() == 0) continue;
      Tensor xc = x.detach().requires_grad_(true), yc = y.detach().requires_grad_(true);
      Tensor xg = gpu(x).detach().requires_grad_(true), yg = gpu(y).detach().requires_grad_(true);
      sum(where(cond, xc, yc).to(DType::F64)).backward();
      sum(where(gpu(cond), xg, yg).to(DType::F64)).backward();
      check_close(xc.grad(), xg.grad(), reduce_tol(dt), describe("where grad x", dt, sa));
      check_close(yc.grad(), yg.grad(), reduce_tol(dt), describe("where grad y", dt, sa));
    }
}

TEST_CASE("gpu: mixed-dtype binary ops promote like on the CPU", "[gpu]") {
  const Tensor a = rnd({17, 9}, DType::F16), b = rnd({9}, DType::BF16), c = rnd({17, 1}, DType::F64);
  check_close(a + b, gpu(a) + gpu(b), ew_tol(DType::F32), "f16 + bf16");
  check_close(a * c, gpu(a) * gpu(c), ew_tol(DType::F64), "f16 * f64");
}

TEST_CASE("gpu: casts among every dtype pair are bit-exact", "[gpu]") {
  const DType all[] = {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64, DType::F8E4M3, DType::F8E5M2, DType::Bool};
  for (DType from : all)
    for (DType to : all) {
      // values inside every type's range; I64 sources hold integers, float -> I64 truncates
      Tensor x = from == DType::I64 ? ints({1000}, DType::F64, 9).to(DType::I64) : rnd({1000}, from, 300.0);
      if (from != DType::I64 && to != DType::I64) {
        const Tensor extremes = from_vector(std::vector<double>{1e-8, -6e-8, 65504, 70000, -1e30, 3.0e38, NAN,
                                                                INFINITY, -INFINITY, 0.0, -0.0, 1.0 / 3.0},
                                            {12}, {.dtype = from});
        x = cat({x, extremes}, 0);
      }
      const std::string what = std::string("cast ") + dtype_name(from) + " -> " + dtype_name(to);
      check_close(x.to(to), gpu(x).to(to), exact(), what);
    }
}

// The device converts F16 with the hardware's cvt instructions (core/half.h), the host with integer code or
// F16C: the same bits for every F16 pattern widened, and for F32 values at and beside every rounding
// boundary of F16 (midpoints between neighbours, one F32 ulp either side), overflow and NaN payloads.
TEST_CASE("gpu: F16 <-> F32 casts give the host's bits: every F16 pattern, every F16 midpoint, NaN payloads", "[gpu]") {
  Tensor h = empty({65536}, {.dtype = DType::F16});
  for (uint32_t i = 0; i < 65536; ++i) h.data<f16>()[i].bits = static_cast<uint16_t>(i);
  const Tensor wide_host = h.to(DType::F32), wide_gpu = gpu(h).to(DType::F32).to(Device::cpu());
  int64_t wide_diff = 0;
  for (int64_t i = 0; i < 65536; ++i) {
    uint32_t a, b;
    std::memcpy(&a, wide_host.data<float>() + i, 4);
    std::memcpy(&b, wide_gpu.data<float>() + i, 4);
    if (a != b && wide_diff++ < 5) UNSCOPED_INFO("widen 0x" << std::hex << i << ": host 0x" << a << ", gpu 0x" << b);
  }
  CHECK(wide_diff == 0);

  std::vector<uint32_t> bits = {0x7f800000u, 0xff800000u, 0x7f800001u, 0x7fc00000u, 0x7fffffffu, 0xffa02000u,
                                0x7f802000u, 0x7fbfe000u, 0x477fefffu, 0x477ff000u, 0x00000001u, 0x33000000u,
                                0x33000001u, 0x32ffffffu};
  for (uint32_t p = 0; p < 0x7c00u; ++p) {  // finite positive F16 values and the midpoint to the next one
    const float a = f16_bits_to_float(static_cast<uint16_t>(p)), b = p + 1 == 0x7c00u ? 65536.0f
                                                                       : f16_bits_to_float(static_cast<uint16_t>(p + 1));
    uint32_t va, mid;
    const float m = (a + b) / 2;  // exact: F16's 11 significant bits fit F32's 24
    std::memcpy(&va, &a, 4);
    std::memcpy(&mid, &m, 4);
    for (uint32_t v : {va, mid - 1, mid, mid + 1}) bits.insert(bits.end(), {v, v | 0x80000000u});
  }
  Tensor x = empty({static_cast<int64_t>(bits.size())}, {.dtype = DType::F32});
  std::memcpy(x.data<float>(), bits.data(), bits.size() * 4);
  const Tensor narrow_host = x.to(DType::F16), narrow_gpu = gpu(x).to(DType::F16).to(Device::cpu());
  int64_t narrow_diff = 0;
  for (size_t i = 0; i < bits.size(); ++i) {
    const uint16_t a = narrow_host.data<f16>()[i].bits, b = narrow_gpu.data<f16>()[i].bits;
    if (a != b && narrow_diff++ < 5)
      UNSCOPED_INFO("narrow 0x" << std::hex << bits[i] << ": host 0x" << a << ", gpu 0x" << b);
  }
  CHECK(narrow_diff == 0);
  CHECK(bits.size() > 250000);
}

TEST_CASE("gpu: transpose, permute, slice, cat and clone are exact", "[gpu]") {
  for (DType dt : kTypes) {
    const Tensor x = rnd({6, 35, 4}, dt);
    const Tensor xg = gpu(x);
    check_close(transpose(x, 0, 1), transpose(xg, 0, 1), exact(), describe("transpose01", dt, x.shape()));
    check_close(transpose(x, 0, 2), transpose(xg, 0, 2), exact(), describe("transpose02", dt, x.shape()));
    check_close(permute(x, {2, 0, 1}), permute(xg, {2, 0, 1}), exact(), describe("permute", dt, x.shape()));
    check_close(slice(x, 1, 3, 30, 4), slice(xg, 1, 3, 30, 4), exact(), describe("slice", dt, x.shape()));
    check_close(slice(x, 2, 1, 3), slice(xg, 2, 1, 3), exact(), describe("slice last", dt, x.shape()));
    const Tensor y = rnd({6, 5, 4}, dt);
    check_close(cat({x, y}, 1), cat({xg, gpu(y)}, 1), exact(), describe("cat1", dt, x.shape()));
    check_close(cat({x, x}, 0), cat({xg, xg}, 0), exact(), describe("cat0", dt, x.shape()));
    check_close(clone(x), clone(xg), exact(), describe("clone", dt, x.shape()));
    check_close(x.reshape({35, 24}), xg.reshape({35, 24}), exact(), describe("reshape", dt, x.shape()));
  }
  // I64 (8-byte elements) through the same copy kernel
  const Tensor i = arange(int64_t{24}, {.dtype = DType::I64}).reshape({4, 6});
  CHECK(transpose(gpu(i), 0, 1).to_vector<int64_t>() == transpose(i, 0, 1).to_vector<int64_t>());
}

TEST_CASE("gpu: sum, mean, var", "[gpu]") {
  // {3, 70, 40} and {600, 257}: sums over dims that are not the last, by the column kernel (several
  // column tiles, a partial last one, rows longer than a block's height)
  const Shape shapes[] = {{1000}, {7, 300, 5}, {64, 33}, {3, 0, 2}, {1, 1}, {3, 70, 40}, {600, 257}};
  for (DType dt : kTypes)
    for (const Shape& s : shapes) {
      const Tensor x = rnd(s, dt);
      const Tensor xg = gpu(x);
      const Tol t = reduce_tol(dt);
      check_close(sum(x), sum(xg), t, describe("sum all", dt, s));
      check_close(mean(x), mean(xg), t, describe("mean all", dt, s));
      for (int64_t d = 0; d < x.ndim(); ++d) {
        check_close(sum(x, {d}), sum(xg, {d}), t, describe("sum dim", dt, s));
        check_close(mean(x, {d}, {.keepdim = true}), mean(xg, {d}, {.keepdim = true}), t,
                    describe("mean dim keepdim", dt, s));
        const std::vector<int64_t> dim{d};
        if (s[d] > 1) check_close(var(x, dim), var(xg, dim), t, describe("var dim", dt, s));
      }
      if (x.ndim() == 3) check_close(sum(x, {0, 2}), sum(xg, {0, 2}), t, describe("sum dims 0,2", dt, s));
      const VarOptions population{.correction = 0};
      if (x.numel() > 1) check_close(var(x, {}, population), var(xg, {}, population), t, describe("var", dt, s));
    }
}

TEST_CASE("gpu: sums of few long rows are split over blocks and added once", "[gpu]") {
  // rows of 70000 and 60000 elements: several chunks per row, partial sums in F32 (F64 for F64), one
  // rounding at the end; a mean of 0.25 keeps the sums far from zero and inside F16's range
  const Shape shapes[] = {{70000}, {2, 60000}, {60000, 3}};
  for (DType dt : kTypes)
    for (const Shape& s : shapes) {
      const Tensor x = rnd(s, dt, 1.0, 0.25);
      const Tensor xg = gpu(x);
      const Tol t = reduce_tol(dt);
      check_close(sum(x), sum(xg), t, describe("long sum all", dt, s));
      check_close(mean(x), mean(xg), t, describe("long mean all", dt, s));
      const int64_t last = x.ndim() - 1;
      check_close(sum(x, {last}), sum(xg, {last}), t, describe("long sum last dim", dt, s));
      check_close(sum(x, {0}), sum(xg, {0}), t, describe("long sum dim 0", dt, s));
    }
}

TEST_CASE("gpu: max, min, argmax with indices (first occurrence, NaN wins)", "[gpu]") {
  // {70000} and {3, 20000}: few long rows, split in chunks whose results a second launch picks among
  const Shape shapes[] = {{1000}, {7, 300, 5}, {64, 33}, {5, 1}, {70000}, {3, 20000}};
  uint32_t seed = 100;
  for (DType dt : kTypes)
    for (const Shape& s : shapes)
      for (int ties = 0; ties < 2; ++ties) {
        const Tensor x = ties ? ints(s, dt, seed++) : rnd(s, dt);
        const Tensor xg = gpu(x);
        check_close(max(x), max(xg), exact(), describe("max all", dt, s));
        check_close(min(x), min(xg), exact(), describe("min all", dt, s));
        check_close(argmax(x), argmax(xg), exact(), describe("argmax all", dt, s));
        for (int64_t d = 0; d < x.ndim(); ++d) {
          const ValuesIndices c = max(x, d), g = max(xg, d);
          check_close(c.values, g.values, exact(), describe("max dim values", dt, s));
          check_close(c.indices, g.indices, exact(), describe("max dim indices", dt, s));
          const ValuesIndices cm = min(x, d, {.keepdim = true}), gm = min(xg, d, {.keepdim = true});
          check_close(cm.values, gm.values, exact(), describe("min dim values", dt, s));
          check_close(cm.indices, gm.indices, exact(), describe("min dim indices", dt, s));
          check_close(argmax(x, d), argmax(xg, d), exact(), describe("argmax dim", dt, s));
        }
      }
  // NaN propagates and its first position is the argmax
  for (DType dt : kTypes) {
    const Tensor x = from_vector(std::vector<double>{1, NAN, 5, NAN, 2}, {5}, {.dtype = dt});
    CHECK(std::isnan(max(gpu(x)).item<double>()));
    CHECK(argmax(gpu(x)).item<int64_t>() == 1);
    std::vector<double> v(70000, 1.0);
    v[45000] = v[60000] = NAN;  // in later chunks than the first maximum's ties
    v[100] = v[50000] = 3.0;
    const Tensor big = from_vector(v, {70000}, {.dtype = dt});
    CHECK(argmax(gpu(big)).item<int64_t>() == 45000);
    v[45000] = v[60000] = 1.0;
    CHECK(argmax(gpu(from_vector(v, {70000}, {.dtype = dt}))).item<int64_t>() == 100);
    CHECK(argmin(gpu(from_vector(v, {70000}, {.dtype = dt}))).item<int64_t>() == 0);
  }
  // max backward routes the gradient to the first maximum
  for (DType dt : kTypes) {
    const Tensor x = ints({6, 40}, dt, 77);
    Tensor xc = x.detach().requires_grad_(true), xg = gpu(x).detach().requires_grad_(true);
    sum(max(xc, 1).values.to(DType::F64)).backward();
    sum(max(xg, 1).values.to(DType::F64)).backward();
    check_close(xc.grad(), xg.grad(), exact(), describe("max grad", dt, x.shape()));
  }
}

TEST_CASE("gpu: softmax and log_softmax, forward and backward", "[gpu]") {
  const Shape shapes[] = {{8, 37, 5}, {4, 1000}, {3, 1}};
  for (DType dt : kTypes)
    for (const Shape& s : shapes)
      for (int64_t d = -1; d < s.ndim() - 1; ++d)
        for (bool is_log : {false, true}) {
          const auto f = [&](const Tensor& t) { return is_log ? log_softmax(t, d) : softmax(t, d); };
          const Tensor x = rnd(s, dt, 3.0);
          const std::string what = describe(is_log ? "log_softmax" : "softmax", dt, s) + " dim " + std::to_string(d);
          check_close(f(x), f(gpu(x)), reduce_tol(dt), what);

          const Tensor w = rnd(s, dt);
          Tensor xc = x.detach().requires_grad_(true), xg = gpu(x).detach().requires_grad_(true);
          sum(mul(f(xc), w).to(DType::F64)).backward();
          sum(mul(f(xg), gpu(w)).to(DType::F64)).backward();
          check_close(xc.grad(), xg.grad(), reduce_tol(dt), what + " grad");
        }
}

TEST_CASE("gpu: matmul 2-D, batched, broadcast, every transpose flag", "[gpu]") {
  struct Dims {
    int64_t m, n, k;
  };
  const Dims dims[] = {{1, 1, 1}, {33, 17, 65}, {64, 64, 64}, {5, 130, 7}, {128, 8, 512}};
  for (DType dt : kTypes)
    for (const Dims& d : dims)
      for (Trans ta : {Trans::N, Trans::T})
        for (Trans tb : {Trans::N, Trans::T}) {
          const MatmulOptions o{.trans_a = ta, .trans_b = tb};
          const auto shape_a = [&](int64_t batch) {
            return ta == Trans::N ? Shape{batch, d.m, d.k} : Shape{batch, d.k, d.m};
          };
          const auto shape_b = [&](int64_t batch) {
            return tb == Trans::N ? Shape{batch, d.k, d.n} : Shape{batch, d.n, d.k};
          };
          std::ostringstream os;
          os << "matmul " << dt << " m=" << d.m << " n=" << d.n << " k=" << d.k << " ta=" << int(ta)
             << " tb=" << int(tb);
          const double bound = gemm_bound(dt);
          // 2-D
          const Tensor a2 = rnd(shape_a(1), dt).reshape({-1, ta == Trans::N ? d.k : d.m});
          const Tensor b2 = rnd(shape_b(1), dt).reshape({-1, tb == Trans::N ? d.n : d.k});
          check_rel_norm(matmul(a2, b2, o), matmul(gpu(a2), gpu(b2), o), bound, os.str() + " 2-D");
          // batched, and each side broadcast (batch of 1, or 2-D)
          const Tensor a3 = rnd(shape_a(3), dt), b3 = rnd(shape_b(3), dt);
          check_rel_norm(matmul(a3, b3, o), matmul(gpu(a3), gpu(b3), o), bound, os.str() + " batched");
          const Tensor a1 = rnd(shape_a(1), dt);
          check_rel_norm(matmul(a1, b3, o), matmul(gpu(a1), gpu(b3), o), bound, os.str() + " a batch 1");
          check_rel_norm(matmul(a3, b2, o), matmul(gpu(a3), gpu(b2), o), bound, os.str() + " b 2-D");
          // backward through the transpose flags
          Tensor ac = a3.detach().requires_grad_(true), bc = b3.detach().requires_grad_(true);
          Tensor ag = gpu(a3).detach().requires_grad_(true), bg = gpu(b3).detach().requires_grad_(true);
          const Tensor w = rnd({3, d.m, d.n}, dt);
          sum(mul(matmul(ac, bc, o), w).to(DType::F64)).backward();
          sum(mul(matmul(ag, bg, o), gpu(w)).to(DType::F64)).backward();
          check_rel_norm(ac.grad(), ag.grad(), bound * 2, os.str() + " grad a");
          check_rel_norm(bc.grad(), bg.grad(), bound * 2, os.str() + " grad b");
        }
  // k == 0 gives zeros; an empty output is fine
  const Tensor e = matmul(gpu(zeros({4, 0})), gpu(zeros({0, 3})));
  CHECK(e.to_vector<double>() == std::vector<double>(12, 0.0));
}

// linear's bias, bias + ReLU and bias gradient from the GEMM's epilogue (cuBLASLt; ops/kernels/gemm.h), against
// the CPU and against the separate route (set_linear_epilogues(false)) on the same device. On the emulated
// device the two routes compute the same operations in the same order, so the forward and dx, dw agree bit for
// bit; on a GPU they are different kernels, held to the GEMM's bound.
TEST_CASE("gpu: linear and linear + ReLU through the GEMM's epilogue match the CPU and the separate route", "[gpu]") {
#if defined(HG_CUDA_EMULATE)
  constexpr bool kEmulated = true;
#else
  constexpr bool kEmulated = false;
#endif
  struct Dims {
    int64_t m, in, out;
  };
  const Dims dims[] = {{1, 1, 1}, {33, 65, 17}, {64, 784, 256}, {5, 7, 130}, {16, 128, 10}};
  struct Run {
    Tensor y, dx, dw, db;
    cuda::Counters forward, backward;
  };
  const auto run = [](const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& r, Activation act) {
    Run out;
    const Tensor xx = x.detach().requires_grad_(true), ww = w.detach().requires_grad_(true);
    const Tensor bb = b.detach().requires_grad_(true);
    const bool on_gpu = x.device() == kGpu;
    if (on_gpu) cuda::synchronize(0);
    cuda::Counters c0 = cuda::counters();
    out.y = linear(xx, ww, bb, act);
    out.forward = cuda::counters() - c0;
    const Tensor loss = sum(mul(out.y, r).to(DType::F64));
    if (on_gpu) cuda::synchronize(0);
    c0 = cuda::counters();
    loss.backward();
    out.backward = cuda::counters() - c0;
    out.dx = xx.grad();
    out.dw = ww.grad();
    out.db = bb.grad();
    return out;
  };
  for (DType dt : {DType::F32, DType::F16, DType::BF16})
    for (const Dims& d : dims)
      for (Activation act : {Activation::None, Activation::Relu}) {
        std::ostringstream os;
        os << "linear " << dt << " m=" << d.m << " in=" << d.in << " out=" << d.out
           << (act == Activation::Relu ? " relu" : "");
        INFO(os.str());
        const Tensor x = rnd({d.m, d.in}, dt), w = rnd({d.out, d.in}, dt, 0.2), b = rnd({d.out}, dt, 0.5);
        const Tensor r = rnd({d.m, d.out}, dt);
        const Run cpu = run(x, w, b, r, act);
        set_linear_epilogues(true);
        const Run fused = run(gpu(x), gpu(w), gpu(b), gpu(r), act);
        set_linear_epilogues(false);
        const Run separate = run(gpu(x), gpu(w), gpu(b), gpu(r), act);
        set_linear_epilogues(true);
        const double bound = gemm_bound(dt);
        for (const Run* g : {&fused, &separate}) {
          check_rel_norm(cpu.y, g->y, bound, os.str() + " y");
          check_rel_norm(cpu.dx, g->dx, bound * 2, os.str() + " dx");
          check_rel_norm(cpu.dw, g->dw, bound * 2, os.str() + " dw");
          check_rel_norm(cpu.db, g->db, bound * 2, os.str() + " db");
        }
        // the separate route: the bias copy, the GEMM and (for ReLU) one pass; the fused one: the GEMM alone
        CHECK(separate.forward.library_calls == 1);
        CHECK(separate.forward.kernels == (act == Activation::Relu ? 2 : 1));
        if (kEmulated || d.m == 64) {  // a GPU's cuBLASLt has an algorithm for the aligned MLP shape at least
          CHECK(fused.forward.library_calls == 1);
          CHECK(fused.forward.kernels == 0);
          CHECK(fused.backward.kernels < separate.backward.kernels);  // db came with dw
          CHECK(fused.backward.library_calls == separate.backward.library_calls);
        }
        if (kEmulated) {
          CHECK(fused.y.to_vector<double>() == separate.y.to_vector<double>());
          CHECK(fused.dx.to_vector<double>() == separate.dx.to_vector<double>());
          CHECK(fused.dw.to_vector<double>() == separate.dw.to_vector<double>());
        }
      }
  // F64 has no epilogue: the separate route, same results
  const Tensor x = rnd({9, 13}, DType::F64), w = rnd({5, 13}, DType::F64), b = rnd({5}, DType::F64);
  check_rel_norm(linear(x, w, b, Activation::Relu), linear(gpu(x), gpu(w), gpu(b), Activation::Relu), 1e-12,
                 "linear F64 relu");
}

// Autocast's weight casts narrow F32 leaves; their backward widens each gradient back, exactly. The engine runs
// those widenings together at the end of the backward: one launch per source dtype (cast_batch_kernels).
TEST_CASE("gpu: the widening backward of leaf casts runs in one launch per source dtype", "[gpu]") {
  const Tensor w1 = rnd({33, 17}, DType::F32), w2 = rnd({65}, DType::F32), w3 = rnd({9, 4}, DType::F32);
  const Tensor w4 = rnd({5, 7}, DType::F64);
  const auto run = [&](Device d, int64_t* widen_launches) {
    std::vector<Tensor> p;
    for (const Tensor* t : {&w1, &w2, &w3, &w4}) p.push_back(t->to(d).detach().requires_grad_(true));
    const Tensor loss = sum(mul(p[0].to(DType::F16), 3.0)).to(DType::F32) + sum(p[1].to(DType::F16)).to(DType::F32) +
                        sum(mul(p[2].to(DType::BF16), -2.0)).to(DType::F32) + sum(p[3].to(DType::F32)) +
                        sum(mul(p[0], p[0]));  // p[0] also used directly: its two gradients add
    if (d == kGpu) cuda::synchronize(0);
    const cuda::Counters c0 = cuda::counters();
    loss.backward();
    if (widen_launches) *widen_launches = (cuda::counters() - c0).kernels;
    return std::vector<Tensor>{p[0].grad(), p[1].grad(), p[2].grad(), p[3].grad()};
  };
  int64_t kernels = 0;
  const std::vector<Tensor> on_cpu = run(Device::cpu(), nullptr), on_gpu = run(kGpu, &kernels);
  for (size_t k = 0; k < on_cpu.size(); ++k) {
    INFO("parameter " << k);
    REQUIRE(on_gpu[k].dtype() == on_cpu[k].dtype());
    check_close(on_cpu[k], on_gpu[k], exact(), "widened gradient");
  }
  CHECK(kernels > 0);
  // the batched call itself: three F16 gradients and a BF16 one, two launches
  const std::vector<Tensor> g = {gpu(rnd({7}, DType::F16)), gpu(rnd({300, 3}, DType::F16)), gpu(rnd({1}, DType::F16)),
                                 gpu(rnd({5, 5}, DType::BF16))};
  cuda::synchronize(0);
  const cuda::Counters c0 = cuda::counters();
  const std::vector<Tensor> wide = grads_widened(g, {DType::F32, DType::F64, DType::F32, DType::F32});
  CHECK((cuda::counters() - c0).kernels == 2);
  for (size_t k = 0; k < g.size(); ++k) {
    CHECK(wide[k].dtype() == (k == 1 ? DType::F64 : DType::F32));
    CHECK(wide[k].to_vector<double>() == g[k].to_vector<double>());
  }
  CHECK_THROWS_AS(grads_widened({gpu(rnd({3}, DType::F32))}, {DType::F16}), Error);  // a narrowing is refused
}

TEST_CASE("gpu: flip (negative strides), roll, repeat, tril, expand, chunk, one_hot, index_select and gather match the CPU", "[gpu]") {
  for (DType dt : kTypes) {
    INFO(dt);
    const Tensor x = rnd({3, 4, 5}, dt);
    const Tensor g = gpu(x);
    check_close(flip(x, {0, 2}), flip(g, {0, 2}), exact(), "flip");
    check_close(roll(x, -3, 2), roll(g, -3, 2), exact(), "roll");
    check_close(repeat(x, {2, 1, 1, 3}), repeat(g, {2, 1, 1, 3}), exact(), "repeat");
    check_close(tril(x, 1), tril(g, 1), exact(), "tril");
    check_close(x.select(1, 2).unsqueeze(1).expand({3, 4, 5}), g.select(1, 2).unsqueeze(1).expand({3, 4, 5}), exact(),
                "expand");
    check_close(x.chunk(2, 2)[1], g.chunk(2, 2)[1], exact(), "chunk");
    check_close(stack({x, x}, 1), stack({g, g}, 1), exact(), "stack");
  }
  const Tensor idx = from_vector(std::vector<int64_t>{3, 0, 2, 2}, {2, 2});
  check_close(one_hot(idx, 5), one_hot(gpu(idx), 5), exact(), "one_hot");
  const Tensor x = rnd({4, 5}, DType::F32);
  check_close(index_select(x, 1, idx.reshape({4})), index_select(gpu(x), 1, gpu(idx).reshape({4})), exact(), "index_select");
  check_close(gather(x, 0, idx), gather(gpu(x), 0, gpu(idx)), exact(), "gather");
  CHECK_THROWS_WITH(one_hot(gpu(idx), 3), Catch::Contains("index 3 is not smaller than num_classes=3"));
}

TEST_CASE("gpu: ops read views (transposed, stepped, selected) as they read contiguous tensors and in-place ops write through views", "[gpu]") {
  for (DType dt : kTypes) {
    INFO(dt);
    const Tensor big = rnd({6, 8, 10}, dt);
    const auto view_of = [](const Tensor& t) { return t.slice(0, 1, 6).slice(1, 0, 8, 2).slice(2, 2, 8).transpose(0, 2); };
    const Tensor v = view_of(big), gv = view_of(gpu(big));
    REQUIRE_FALSE(gv.is_contiguous());
    const Tensor gc = gv.contiguous();
    check_close(v.contiguous(), gc, exact(), "contiguous");
    const auto same = [](const Tensor& a, const Tensor& b, const char* what) { check_close(a.cpu(), b, exact(), what); };
    // on the GPU, an op on the view equals the op on its contiguous copy bit for bit
    same(exp(gv), exp(gc), "exp");
    same(gv + gv.select(0, 1), gc + gc.select(0, 1), "add broadcast");
    same(gv.sum(1), gc.sum(1), "sum");
    same(softmax(gv, 2), softmax(gc, 2), "softmax");
    same(matmul(gv, gv.transpose(1, 2)), matmul(gc, gc.transpose(1, 2).contiguous()), "matmul");
    same(matmul(gv.select(0, 0), gv.select(0, 1).t()), matmul(gc.select(0, 0), gc.select(0, 1).t().contiguous()),
         "matmul 2-D of views");
    // and the CPU agrees; a transposed contiguous operand goes to the GEMM with its transpose flag
    check_close(exp(v), exp(gv), ew_tol(dt), "exp on a view");
    const Tensor a = rnd({7, 9}, dt), b = rnd({5, 9}, dt);
    check_close(matmul(a, b.t()), matmul(gpu(a), gpu(b).t()), reduce_tol(dt), "matmul(a, b.t())");
    // in-place through a view writes into the base
    Tensor cb = big.clone(), gb = gpu(big);
    cb.t().narrow(0, 1, 3).mul_(2.0);
    gb.t().narrow(0, 1, 3).mul_(2.0);
    cb.select(1, 0).zero_();
    gb.select(1, 0).zero_();
    cb += cb.select(2, 3).unsqueeze(2);
    gb += gb.select(2, 3).unsqueeze(2);
    check_close(cb, gb, exact(), "in-place through views");
    // torch::indexing: views, an index tensor and a mask, read and written
    using namespace hg::indexing;
    const Tensor ids = from_vector(std::vector<int64_t>{3, 0, 3}, {3});
    check_close(big.index({Slice(1, 4), None, "...", 2}), gpu(big).index({Slice(1, 4), None, "...", 2}), exact(),
                "index with views");
    check_close(big.index({Slice(), ids}), gpu(big).index({Slice(), gpu(ids)}), exact(), "index with a tensor");
    const Tensor mask = big.select(0, 0) > 0.0;
    check_close(big.index({2, mask}), gpu(big).index({2, gpu(mask)}), exact(), "index with a mask");
    Tensor cp = big.clone(), gp = gpu(big);
    cp.index_put_({Slice(), mask}, 7);
    gp.index_put_({Slice(), gpu(mask)}, 7);
    check_close(cp, gp, exact(), "index_put_ with a mask");
    // the row adds of index_add and scatter_add (embedding's backward kernel), and cumsum, sort, topk
    const Tensor sidx = from_vector(std::vector<int64_t>{2, 0, 1, 0, 0, 2, 1, 1}, {2, 4});
    const Tensor src = rnd({2, 4}, dt);
    check_close(zeros({3, 4}, {.dtype = dt}).scatter_add(0, sidx, src),
                zeros({3, 4}, {.dtype = dt, .device = kGpu}).scatter_add(0, gpu(sidx), gpu(src)), reduce_tol(dt), "scatter_add");
    check_close(big.index_add(1, ids, big.index({Slice(), ids})), gpu(big).index_add(1, gpu(ids), gpu(big).index({Slice(), gpu(ids)})),
                reduce_tol(dt), "index_add");
    check_close(big.cumsum(2), gpu(big).cumsum(2), reduce_tol(dt), "cumsum");
    check_close(std::get<0>(big.topk(3, 1)), std::get<0>(gpu(big).topk(3, 1)), exact(), "topk");
    Tensor gh = zeros({3, 4}, {.dtype = dt, .device = kGpu});
    gh.t().copy_(rnd({4, 3}, DType::F64));  // across devices and dtypes into a transposed view
    CHECK(gh.version() == 1);
    // a recorded write into a view rewrites its base's history (CopySlices): the same gradients on both devices
    const auto grads = [](const Tensor& x0, const Tensor& w0) {
      const Tensor x = x0.detach().requires_grad_(), w = w0.detach().requires_grad_();
      Tensor b = x * 1.0;
      b.t().narrow(0, 1, 3).mul_(w);
      b.select(1, 0).zero_();
      sum(b * b).backward();
      return std::pair{x.grad(), w.grad()};
    };
    const Tensor xs = rnd({4, 5}, dt), ws = rnd({3, 1}, dt);
    const auto [cx, cw] = grads(xs, ws);
    const auto [gx, gw] = grads(gpu(xs), gpu(ws));
    check_close(cx, gx, reduce_tol(dt), "CopySlices: the base's gradient");
    check_close(cw, gw, reduce_tol(dt), "CopySlices: the written value's gradient");
  }
}

TEST_CASE("gpu: backward of a small network matches the CPU", "[gpu]") {
  for (DType dt : kTypes) {
    manual_seed(42);
    const Tensor x = rnd({16, 24}, dt), w1 = rnd({24, 32}, dt, 0.2), b1 = rnd({32}, dt, 0.1);
    const Tensor w2 = rnd({40, 10}, dt, 0.2), target = softmax(rnd({16, 10}, DType::F32), 1);
    const DType ld = dt == DType::F64 ? DType::F64 : DType::F32;  // the loss runs in fp32 (fp64 for F64)
    const auto loss = [&](const Tensor& xx, const Tensor& ww1, const Tensor& bb1, const Tensor& ww2, const Tensor& t) {
      const Tensor h = gelu(matmul(xx, ww1) + bb1);
      const Tensor hh = cat({h, slice(transpose(h, 0, 1), 0, 0, 8).t()}, 1);  // (16, 40)
      const Tensor z = log_softmax(matmul(tanh(hh), ww2).to(ld), 1);
      return neg(mean(sum(z * t, {1}))) + mean(sigmoid(hh)).to(ld) * 0.1 + var(h).to(ld);
    };
    std::vector<Tensor> pc, pg;
    for (const Tensor* p : {&x, &w1, &b1, &w2}) {
      pc.push_back(p->detach().requires_grad_(true));
      pg.push_back(gpu(*p).detach().requires_grad_(true));
    }
    const Tensor lc = loss(pc[0], pc[1], pc[2], pc[3], target);
    const Tensor lg = loss(pg[0], pg[1], pg[2], pg[3], gpu(target));
    check_close(lc, lg, reduce_tol(ld == DType::F64 ? ld : dt), describe("network loss", dt, x.shape()));
    lc.backward();
    lg.backward();
    const char* names[] = {"x", "w1", "b1", "w2"};
    const double bound = dt == DType::F64 ? 1e-10 : dt == DType::F32 ? 1e-4 : dt == DType::F16 ? 2e-2 : 6e-2;
    for (size_t i = 0; i < pc.size(); ++i)
      check_rel_norm(pc[i].grad(), pg[i].grad(), bound, describe("network grad", dt, pc[i].shape()) + " " + names[i]);
  }
}

TEST_CASE("gpu: a gradient flows back across .to(device)", "[gpu]") {
  Tensor x = rnd({5, 6}, DType::F32).detach().requires_grad_(true);
  sum(mul(gpu(x), 3.0)).backward();
  REQUIRE(x.grad().defined());
  CHECK(x.grad().device().is_cpu());
  CHECK(x.grad().to_vector<double>() == std::vector<double>(30, 3.0));
}

TEST_CASE("gpu: memory statistics grow with tensors and drop when they are freed", "[gpu]") {
  const Device d = kGpu;
  (void)gpu(ones({1}));  // the backend is loaded
  const int64_t base = memory::allocated(d);
  memory::reset_peak(d);
  CHECK(memory::peak_allocated(d) == base);
  const int64_t bytes = int64_t{4} << 20;
  {
    const Tensor big = gpu(zeros({bytes / 4}));
    CHECK(memory::allocated(d) == base + bytes);
    CHECK(memory::peak_allocated(d) >= base + bytes);
    const Tensor twice = big * 2.0;  // a kernel's output is accounted too
    CHECK(memory::allocated(d) == base + 2 * bytes);
    CHECK(twice.to_vector<float>()[12345] == 0.0f);
  }
  CHECK(memory::allocated(d) == base);
  CHECK(memory::peak_allocated(d) >= base + 2 * bytes);
  memory::reset_peak(d);
  CHECK(memory::peak_allocated(d) == base);
  // the pool reuses freed memory: the same size allocated again usually gets the same block
  const void* first = nullptr;
  {
    const Tensor t = gpu(zeros({1000}));
    first = t.data_ptr();
  }
  const Tensor again = gpu(zeros({1000}));
  if (again.data_ptr() != first) WARN("the stream-ordered pool did not hand back the freed block");
}

TEST_CASE("gpu: misuse throws hg::Error", "[gpu]") {
  const Tensor a = rnd({3, 4}, DType::F32);
  CHECK_THROWS_AS(matmul(gpu(a), a.t()), Error);  // devices differ
  CHECK_THROWS_AS(add(gpu(a), a), Error);
  if (cuda::device_count() < 2) CHECK_THROWS_AS(a.to(Device::cuda(cuda::device_count())), Error);
}

TEST_CASE("gpu: allow_tf32 (off by default) rounds the inputs of F32 matmul and conv2d to TF32", "[gpu]") {
  REQUIRE_FALSE(cuda::allow_tf32());
  auto rounded = [](const Tensor& t) {  // t with every element rounded to TF32, on the CPU
    std::vector<float> v = t.to_vector<float>();
    for (float& x : v) x = round_to_tf32(x);
    return from_vector(v, t.shape());
  };
  auto rel = [](const Tensor& x, const Tensor& ref) {
    const std::vector<double> a = x.to_vector<double>(), b = ref.to_vector<double>();
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) num += (a[i] - b[i]) * (a[i] - b[i]), den += b[i] * b[i];
    return std::sqrt(num / den);
  };
  const Tensor a = randn({64, 256}), b = randn({256, 48});
  const Tensor x = randn({2, 32, 12, 12}), w = randn({32, 32, 3, 3});
  const Tensor mm = matmul(a, b), cv = conv2d(x, w, Tensor(), {.padding = 1});  // the CPU's F32
  const Tensor mm_tf32 = matmul(rounded(a), rounded(b)), cv_tf32 = conv2d(rounded(x), rounded(w), Tensor(), {.padding = 1});
  auto on_gpu = [&] {
    return std::pair{matmul(gpu(a), gpu(b)).to(Device::cpu()),
                     conv2d(gpu(x), gpu(w), Tensor(), {.padding = 1}).to(Device::cpu())};
  };
  const auto [mm_off, cv_off] = on_gpu();
  cuda::set_allow_tf32(true);
  const auto [mm_on, cv_on] = on_gpu();
  cuda::set_allow_tf32(false);
  INFO("matmul: off " << rel(mm_off, mm) << ", on " << rel(mm_on, mm) << " (against the F32 product)");
  INFO("conv2d: off " << rel(cv_off, cv) << ", on " << rel(cv_on, cv));
  CHECK(rel(mm_off, mm) < 1e-6);  // true fp32
  CHECK(rel(cv_off, cv) < 1e-6);
  // TF32: a 10-bit mantissa on the inputs, F32 accumulation: between F16-like and F32-like accuracy
  CHECK(rel(mm_on, mm) > 1e-5);
  CHECK(rel(mm_on, mm) < 3e-3);
  // cuDNN decides: TF32 only makes its tensor-core engines eligible, and its first plan may be another
  CHECK(rel(cv_on, cv) < 3e-3);
#if defined(HG_CUDA_EMULATE)
  // the emulator rounds exactly as documented: the CPU's product of the rounded inputs (for the
  // convolution, when cuDNN's first plan is a tensor-core engine, else the F32 one)
  CHECK(rel(mm_on, mm_tf32) < 1e-6);
  CHECK(std::min(rel(cv_on, cv_tf32), rel(cv_on, cv)) < 1e-6);
#else
  (void)mm_tf32;
  (void)cv_tf32;
#endif
}
