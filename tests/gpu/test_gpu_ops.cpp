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

#include "halfgrad.h"
#include "ops/kernels/fp8.h"  // the native FP8 GEMM's contract
#include "test_util.h"

using namespace hg;

namespace {

const Device kGpu = Device::cuda();
const DType kTypes[] = {DType::F32, DType::F16, DType::BF16, DType::F64};

struct Tol {
  double rtol, atol;
};

Tol ew_tol(DType t) {
  switch (t) {
    case DType::F32: return {1e-5, 1e-6};
    case DType::F16: return {2e-3, 1e-5};
    case DType::BF16: return {1.6e-2, 1e-5};
    default: return {1e-10, 1e-13};
  }
}

Tol reduce_tol(DType t) {
  switch (t) {
    case DType::F32: return {1e-4, 1e-5};
    case DType::F16: return {4e-3, 2e-3};
    case DType::BF16: return {2e-2, 1e-2};
    default: return {1e-10, 1e-12};
  }
}

Tol exact() { return {0, 0}; }

Tensor gpu(const Tensor& t) { return t.to(kGpu); }

// Random normal values rounded to dt, made on the CPU (the same bits go to both devices).
Tensor rnd(Shape s, DType dt, double scale = 1.0, double shift = 0.0) {
  Tensor t = randn(std::move(s), {.dtype = DType::F64});
  return add(mul(t, scale), shift).to(dt);
}

// Positive values in [lo, lo + span) rounded to dt.
Tensor positive(Shape s, DType dt, double lo = 0.1, double span = 3.0) {
  return add(mul(rand(std::move(s), {.dtype = DType::F64}), span), lo).to(dt);
}

// Small integers in [-3, 3] (many ties, exactly representable in every dtype).
Tensor ints(Shape s, DType dt, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(-3, 3);
  std::vector<double> v(static_cast<size_t>(s.numel()));
  for (double& x : v) x = d(rng);
  return from_vector(v, std::move(s), {.dtype = dt});
}

std::string describe(const char* what, DType dt, const Shape& s) {
  std::ostringstream os;
  os << what << " dtype=" << dt << " shape=" << s;
  return os.str();
}

// Compares a CPU result with a GPU result element by element.
void check_close(const Tensor& cpu, const Tensor& cuda, Tol tol, const std::string& what) {
  INFO(what);
  REQUIRE(cpu.device().is_cpu());
  REQUIRE(cuda.device() == kGpu);
  REQUIRE(cpu.shape() == cuda.shape());
  REQUIRE(cpu.dtype() == cuda.dtype());
  const std::vector<double> a = cpu.to_vector<double>();
  const std::vector<double> b = cuda.to_vector<double>();
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < a.size(); ++i) {
    const bool same = (std::isnan(a[i]) && std::isnan(b[i])) || a[i] == b[i] ||
                      std::fabs(a[i] - b[i]) <= tol.atol + tol.rtol * std::fabs(a[i]);
    if (!same) {
      if (first < 0) first = static_cast<int64_t>(i);
      ++bad;
    }
  }
  // (an INFO inside an if would end with its block, before the CHECK it should explain)
  if (bad) UNSCOPED_INFO("first mismatch at " << first << ": cpu " << a[size_t(first)] << " gpu " << b[size_t(first)]);
  CHECK(bad == 0);
}

// ||gpu - cpu|| / ||cpu|| for a GEMM-like result (docs/ARCHITECTURE.md, "GPU tolerances").
void check_rel_norm(const Tensor& cpu, const Tensor& cuda, double bound, const std::string& what) {
  INFO(what);
  REQUIRE(cpu.shape() == cuda.shape());
  const std::vector<double> a = cpu.to_vector<double>();
  const std::vector<double> b = cuda.to_vector<double>();
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += a[i] * a[i];
  }
  const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  INFO("relative error " << rel << " bound " << bound);
  CHECK(rel <= bound);
}

double gemm_bound(DType t) { return test::dtype_tolerance(t); }

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
      {"pow2.5", [](const Tensor& x) { return pow(x, 2.5); }, true},
      {"pow3", [](const Tensor& x) { return pow(x, 3.0); }, false},
      {"clamp", [](const Tensor& x) { return clamp(x, -0.5, 0.75); }, false},
      {"add_scalar", [](const Tensor& x) { return x + 1.5; }, false},
      {"mul_scalar", [](const Tensor& x) { return x * -2.25; }, false},
      {"div_scalar", [](const Tensor& x) { return x / 3.0; }, false},
      {"rsub_scalar", [](const Tensor& x) { return 2.0 - x; }, false},
      {"rdiv_scalar", [](const Tensor& x) { return 2.0 / x; }, true},
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
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64}) {
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

TEST_CASE("gpu: comparisons and where", "[gpu]") {
  uint32_t seed = 1;
  for (DType dt : kTypes)
    for (const auto& [sa, sb] : broadcast_pairs()) {
      const Tensor a = ints(sa, dt, seed++), b = ints(sb, dt, seed++);
      for (const BinaryCase& op : comparison_cases())
        check_close(op.f(a, b), op.f(gpu(a), gpu(b)), exact(), describe(op.name, dt, sa) + " with " + sb.str());
      const Tensor cond = gt(a, zeros({}, {.dtype = dt}));
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
  const DType all[] = {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64, DType::F8E4M3, DType::F8E5M2};
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

// FP8 on the device is the host's integer code (core/fp8.h, HG_HD): every pattern widened, every F16 and
// BF16 pattern narrowed (non-saturating, as .to(dtype)), and 1-byte copies and fills.
TEST_CASE("gpu: FP8 casts give the host's bits: every FP8 pattern, every F16 and BF16 pattern", "[gpu]") {
  for (const DType f8 : {DType::F8E4M3, DType::F8E5M2}) {
    Tensor q = empty({256}, {.dtype = f8});
    for (uint32_t i = 0; i < 256; ++i) static_cast<uint8_t*>(q.data_ptr())[i] = static_cast<uint8_t>(i);
    for (const DType wide : {DType::F32, DType::F16, DType::BF16}) {
      const Tensor host = q.to(wide), dev = gpu(q).to(wide).to(Device::cpu());
      CHECK(std::memcmp(host.data_ptr(), dev.data_ptr(), host.nbytes()) == 0);
    }
    for (const DType src : {DType::F16, DType::BF16}) {
      Tensor h = empty({65536}, {.dtype = src});
      for (uint32_t i = 0; i < 65536; ++i) static_cast<uint16_t*>(h.data_ptr())[i] = static_cast<uint16_t>(i);
      const Tensor host = h.to(f8), dev = gpu(h).to(f8).to(Device::cpu());
      int64_t diff = 0;
      for (int64_t i = 0; i < 65536; ++i) {
        const uint8_t a = static_cast<const uint8_t*>(host.data_ptr())[i], b = static_cast<const uint8_t*>(dev.data_ptr())[i];
        if (a != b && diff++ < 5) UNSCOPED_INFO(dtype_name(src) << " 0x" << std::hex << i << ": host 0x" << int(a) << ", gpu 0x" << int(b));
      }
      CHECK(diff == 0);
    }
    // 1-byte fills and strided copies
    CHECK(full({3, 5}, 0.3, {.dtype = f8, .device = kGpu}).to(Device::cpu()).to_vector<float>() ==
          full({3, 5}, 0.3, {.dtype = f8}).to_vector<float>());
    const Tensor x = rnd({7, 9}, DType::F32).to(f8);
    check_close(x.transpose(0, 1), gpu(x).transpose(0, 1), exact(), describe("transpose", f8, x.shape()));
  }
}

// Per-tensor FP8 scaling (ops/fp8.h) on the device: the same amax, scales and bits as the CPU, for every
// source dtype, both formats and both overflow modes, and a delayed-scaling history over several steps.
TEST_CASE("gpu: FP8 amax, scaled casts and delayed scaling match the CPU bit for bit", "[gpu]") {
  for (DType dt : kTypes) {
    const Tensor x = cat({rnd({3000}, dt, 40.0), from_vector(std::vector<double>{0.0, -1e-9, 900.0, -70000.0}, {4}, {.dtype = dt})}, 0);
    const Tensor xg = gpu(x);
    check_close(amax(x), amax(xg), exact(), describe("amax", dt, x.shape()));
    for (const DType f8 : {DType::F8E4M3, DType::F8E5M2}) {
      const Tensor s = fp8_scale_from_amax(amax(x), f8, {.margin = 1.0f}), sg = fp8_scale_from_amax(amax(xg), f8, {.margin = 1.0f});
      check_close(s, sg, exact(), describe("fp8_scale_from_amax", f8, x.shape()));
      for (const bool sat : {true, false}) {
        const Tensor big = full({}, 3.0);  // pushes the extremes past the format's range
        Tensor acc = zeros({}), accg = zeros({}, {.device = kGpu});
        const Tensor q = fp8_quantize(x, f8, big, {.saturate = sat, .amax = acc});
        const Tensor qg = fp8_quantize(xg, f8, gpu(big), {.saturate = sat, .amax = accg});
        CHECK(std::memcmp(q.data_ptr(), qg.to(Device::cpu()).data_ptr(), q.nbytes()) == 0);
        check_close(acc, accg, exact(), "amax accumulated by fp8_quantize");
        const Tensor inv = full({}, 1.0 / 3.0);
        check_close(fp8_dequantize(q, inv, dt), fp8_dequantize(qg, gpu(inv), dt), exact(), describe("fp8_dequantize", dt, x.shape()));
      }
    }
  }
  Fp8DelayedScaling host(DType::F8E4M3, {.history_len = 4}), dev(DType::F8E4M3, {.history_len = 4}, kGpu);
  for (int step = 0; step < 7; ++step) {
    const Tensor x = rnd({500}, DType::F32, std::ldexp(1.0, step - 3));
    const Tensor q = host.quantize(x), qg = dev.quantize(gpu(x));
    CHECK(std::memcmp(q.data_ptr(), qg.to(Device::cpu()).data_ptr(), q.nbytes()) == 0);
    host.update();
    dev.update();
    check_close(host.amax_history(), dev.amax_history(), exact(), "amax history");
    check_close(host.scale(), dev.scale(), exact(), "delayed scale");
  }
}

// MX block scaling on the device: the same scales and element bytes as the CPU for every format and
// rule, along the last dim and dim 0, with a short last block, and an inf/NaN block.
TEST_CASE("gpu: MX block quantize and dequantize match the CPU bit for bit", "[gpu]") {
  Tensor x = rnd({9, 70}, DType::F32, 30.0);
  x.data<float>()[5] = INFINITY;
  x.data<float>()[100] = NAN;
  const Tensor xg = gpu(x);
  for (const MxFormat f : {MxFormat::MXFP8_E4M3, MxFormat::MXFP8_E5M2, MxFormat::MXFP4})
    for (const MxScaleRule r : {MxScaleRule::Floor, MxScaleRule::Up})
      for (const int64_t dim : {int64_t{-1}, int64_t{0}}) {
        const MxTensor h = mx_quantize(x, f, {.rule = r, .dim = dim}), d = mx_quantize(xg, f, {.rule = r, .dim = dim});
        const std::string what = std::string(mx_format_name(f)) + (r == MxScaleRule::Up ? " up" : " floor") +
                                 (dim == 0 ? " dim 0" : " last dim");
        INFO(what);
        CHECK(std::memcmp(h.data.data_ptr(), d.data.to(Device::cpu()).data_ptr(), h.data.nbytes()) == 0);
        CHECK(std::memcmp(h.scale.data_ptr(), d.scale.to(Device::cpu()).data_ptr(), h.scale.nbytes()) == 0);
        for (const DType out : kTypes)
          check_close(mx_dequantize(h, out), mx_dequantize(d, out), exact(), "mx_dequantize " + what);
      }
  // blocks along a middle dimension: outer and inner both above 1 (the grid's y and the columns)
  const Tensor x3 = rnd({3, 70, 5}, DType::F32, 20.0);
  const MxTensor h3 = mx_quantize(x3, MxFormat::MXFP8_E4M3, {.dim = 1}), d3 = mx_quantize(gpu(x3), MxFormat::MXFP8_E4M3, {.dim = 1});
  CHECK(std::memcmp(h3.data.data_ptr(), d3.data.to(Device::cpu()).data_ptr(), h3.data.nbytes()) == 0);
  CHECK(std::memcmp(h3.scale.data_ptr(), d3.scale.to(Device::cpu()).data_ptr(), h3.scale.nbytes()) == 0);
  check_close(mx_dequantize(h3), mx_dequantize(d3), exact(), "mx_dequantize along dim 1 of 3");
}

// One forward and backward of fp8_linear on each device from the same x, w, b and output gradient: the
// outputs and the x and w gradients agree to F32 rounding (the same casts, sums in another order).
static void fp8_linear_step(const std::shared_ptr<Fp8LinearState>& hs, const std::shared_ptr<Fp8LinearState>& ds,
                            const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& dy, const std::string& what) {
  Tensor xh = x.detach().requires_grad_(), wh = w.detach().requires_grad_(), bh = b.detach().requires_grad_();
  Tensor xd = gpu(x).requires_grad_(), wd = gpu(w).requires_grad_(), bd = gpu(b).requires_grad_();
  const Tensor yh = fp8_linear(xh, wh, bh, hs), yd = fp8_linear(xd, wd, bd, ds);
  sum(mul(yh, dy)).backward();
  sum(mul(yd, gpu(dy))).backward();
  check_close(yh, yd, {.rtol = 1e-5, .atol = 1e-5}, "fp8_linear " + what);
  check_close(xh.grad(), xd.grad(), {.rtol = 1e-5, .atol = 1e-5}, "fp8_linear dx " + what);
  check_close(wh.grad(), wd.grad(), {.rtol = 1e-5, .atol = 1e-5}, "fp8_linear dw " + what);
}

// The FP8 linear layer on the device: the same casts (bit for bit, so the same scales and histories) and
// the same exact products, summed in another order: forward and gradients agree to F32 rounding.
TEST_CASE("gpu: the FP8 linear layer matches the CPU for every scaling", "[gpu]") {
  for (const Fp8Scaling sc : {Fp8Scaling::Delayed, Fp8Scaling::Current, Fp8Scaling::Mx}) {
    const Fp8Recipe r{.scaling = sc, .amax_history_len = 3};
    auto host = std::make_shared<Fp8LinearState>(r), dev = std::make_shared<Fp8LinearState>(r, kGpu);
    const Tensor w = rnd({24, 70}, DType::F32, 0.2), b = rnd({24}, DType::F32);
    for (int step = 0; step < 3; ++step) {
      const std::string what = describe(r) + " step " + std::to_string(step);
      fp8_linear_step(host, dev, rnd({33, 70}, DType::F32, 3.0 * (step + 1)), w, b, rnd({33, 24}, DType::F32), what);
      if (sc == Fp8Scaling::Delayed)
        for (const Fp8Role role : {Fp8Role::Input, Fp8Role::Weight, Fp8Role::GradOutput})
          check_close(host->delayed(role).amax_history(), dev->delayed(role).amax_history(), exact(), "history " + what);
    }
    CHECK(dev->native_gemms() == 0);  // 33 rows, 70 inputs: not multiples of 16, so the decode route
    CHECK(host->native_gemms() == 0);
  }
}

// The same with m, n and k multiples of 16: on FP8 Tensor Cores (the emulated sm_90 has them) every GEMM runs
// natively (forward; dgrad and wgrad on transposed FP8 copies, E5M2 gradients), and agrees with the CPU's
// decode route to F32 rounding; a (batch, rows, in) input flattens to the same GEMMs.
TEST_CASE("gpu: the FP8 linear layer runs its GEMMs on FP8 Tensor Cores when the shape allows", "[gpu]") {
  for (const Fp8Scaling sc : {Fp8Scaling::Delayed, Fp8Scaling::Current}) {
    const Fp8Recipe r{.scaling = sc, .amax_history_len = 4};
    auto host = std::make_shared<Fp8LinearState>(r), dev = std::make_shared<Fp8LinearState>(r, kGpu);
    const Tensor w = rnd({48, 64}, DType::F32, 0.2), b = rnd({48}, DType::F32);
    const Tensor probe_scale = gpu(full(Shape{}, 1.0, {.dtype = DType::F32}));
    const bool fp8_cores = fp8_gemm_kernels().get(kGpu, DType::F8E4M3)(
        {.m = 32, .n = 48, .k = 64, .lda = 64, .ldb = 64, .scale_a = probe_scale.data<float>(),
         .scale_b = probe_scale.data<float>(), .ldc = 48, .query = true});
#if defined(HG_CUDA_EMULATE)
    REQUIRE(fp8_cores);
#endif
    for (int step = 0; step < 3; ++step) {
      const std::string what = describe(r) + " step " + std::to_string(step);
      fp8_linear_step(host, dev, rnd({2, 16, 64}, DType::F32, 2.0 * (step + 1)), w, b, rnd({2, 16, 48}, DType::F32), what);
      CHECK(dev->gemms() == 3 * (step + 1));
      CHECK(dev->native_gemms() == (fp8_cores ? 3 * (step + 1) : 0));
    }
    CHECK(host->native_gemms() == 0);  // the CPU has no FP8 GEMM: always the decode route
  }
}

// The native FP8 GEMM (ops/kernels/fp8.h; cuBLASLt on FP8 Tensor Cores): c = sa * sb * (a . b^T) for every
// pair of formats the hardware multiplies, against the products of the decoded values summed in F32 over k in
// order (the emulated cuBLASLt's order, so exact there; another order on a GPU). Shapes the kernel does not
// take (E5M2 x E5M2, dimensions not multiples of 16) are refused, and a query answers as the call does.
TEST_CASE("gpu: the native FP8 GEMM multiplies FP8 operands with their scales", "[gpu]") {
  const Fp8GemmKernel native = fp8_gemm_kernels().get(kGpu, DType::F8E4M3);
  const int64_t m = 48, n = 32, k = 80;
  const Tensor sa = gpu(full(Shape{}, 0.375, {.dtype = DType::F32})), sb = gpu(full(Shape{}, 3.0, {.dtype = DType::F32}));
  const auto args = [&](DType at, DType bt, int64_t mm) {
    return Fp8GemmArgs{.m = mm, .n = n, .k = k, .a_dtype = at, .b_dtype = bt, .lda = k, .ldb = k,
                       .scale_a = sa.data<float>(), .scale_b = sb.data<float>(), .ldc = n, .query = true};
  };
  const bool fp8_cores = native(args(DType::F8E4M3, DType::F8E4M3, m));
#if defined(HG_CUDA_EMULATE)
  REQUIRE(fp8_cores);  // the emulated device is an sm_90
#endif
  if (!fp8_cores) WARN("this GPU has no FP8 Tensor Cores (compute capability below 8.9): only the refusals run");
  CHECK_FALSE(native(args(DType::F8E5M2, DType::F8E5M2, m)));  // no Tensor Core multiplies E5M2 by E5M2
  CHECK_FALSE(native(args(DType::F8E4M3, DType::F8E4M3, 33)));  // m not a multiple of 16
  if (!fp8_cores) return;
  const std::pair<DType, DType> pairs[] = {{DType::F8E4M3, DType::F8E4M3}, {DType::F8E4M3, DType::F8E5M2},
                                           {DType::F8E5M2, DType::F8E4M3}};
  for (const auto& [at, bt] : pairs) {
    INFO(dtype_name(at) << " x " << dtype_name(bt));
    const Tensor a = rnd({m, k}, DType::F32, 4.0).to(at), b = rnd({n, k}, DType::F32, 4.0).to(bt);
    const Tensor ad = gpu(a), bd = gpu(b);
    Tensor c = gpu(full(Shape{m, n}, NAN, {.dtype = DType::F32}));
    Fp8GemmArgs g = args(at, bt, m);
    g.a = ad.data_ptr();
    g.b = bd.data_ptr();
    g.c = c.data<float>();
    g.query = false;
    REQUIRE(native(g));
    const std::vector<float> av = a.to(DType::F32).to_vector<float>(), bv = b.to(DType::F32).to_vector<float>();
    std::vector<float> ref(static_cast<size_t>(m * n));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        float acc = 0.0f;
        for (int64_t l = 0; l < k; ++l) acc += av[size_t(i * k + l)] * bv[size_t(j * k + l)];
        ref[size_t(i * n + j)] = (0.375f * 3.0f) * acc;
      }
#if defined(HG_CUDA_EMULATE)
    const Tol tol = exact();
#else
    const Tol tol{1e-5, 1e-5};
#endif
    check_close(from_vector(ref, {m, n}), c, tol, "native FP8 GEMM");
  }
}

TEST_CASE("gpu: stochastic rounding draws the host's bits from the same seed", "[gpu]") {
  const Tensor x = rnd({4099}, DType::F32, 5.0);
  for (const DType to : {DType::F16, DType::BF16, DType::F8E4M3, DType::F8E5M2}) {
    Generator a(5), b(5);
    const Tensor host = stochastic_round(x, to, &a), dev = stochastic_round(gpu(x), to, &b).to(Device::cpu());
    CHECK(std::memcmp(host.data_ptr(), dev.data_ptr(), host.nbytes()) == 0);
  }
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
  const Shape shapes[] = {{1000}, {7, 300, 5}, {64, 33}, {5, 1}};
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
