// The FP8 and MX paths on the GPU against the CPU (the oracle): FP8 casts, per-tensor scaling and delayed
// scaling bit for bit, MX block scaling bit for bit, the FP8 linear layer (decode route and, on FP8 Tensor
// Cores, the native GEMM), the native FP8 GEMM itself, and stochastic rounding from the same seed.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gpu/compare.h"
#include "halfgrad.h"
#include "ops/kernels/fp8.h"  // the native FP8 GEMM's contract

using namespace hg;
using namespace hg::gpu_test;

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
// outputs and the x and w gradients agree to F32 rounding (the same casts, sums in another order), or, where
// the device's GEMMs ran on real FP8 Tensor Cores (native), within their accumulation bound (compare.h).
static void fp8_linear_step(const std::shared_ptr<Fp8LinearState>& hs, const std::shared_ptr<Fp8LinearState>& ds,
                            const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& dy, const std::string& what,
                            bool native = false) {
  Tensor xh = x.detach().requires_grad_(), wh = w.detach().requires_grad_(), bh = b.detach().requires_grad_();
  Tensor xd = gpu(x).requires_grad_(), wd = gpu(w).requires_grad_(), bd = gpu(b).requires_grad_();
  const Tensor yh = fp8_linear(xh, wh, bh, hs), yd = fp8_linear(xd, wd, bd, ds);
  sum(mul(yh, dy)).backward();
  sum(mul(yd, gpu(dy))).backward();
  if (native) {  // each result's sum of |products| from the unquantized values, 1.25x for the FP8 roundings
    const int64_t in = w.size(1), out = w.size(0), rows = x.numel() / in;
    const Tensor ax = abs(x).reshape({rows, in}), aw = abs(w), ag = abs(dy).reshape({rows, out});
    const Tensor my = mul(add(matmul(ax, transpose(aw, 0, 1)), abs(b)), 1.25).reshape(yh.shape());
    check_fp8_accumulation(yh, yd, my, in, "fp8_linear " + what);
    check_fp8_accumulation(xh.grad(), xd.grad(), mul(matmul(ag, aw), 1.25).reshape(x.shape()), out, "fp8_linear dx " + what);
    check_fp8_accumulation(wh.grad(), wd.grad(), mul(matmul(transpose(ag, 0, 1), ax), 1.25), rows, "fp8_linear dw " + what);
#if !defined(HG_CUDA_EMULATE)
    return;  // real FP8 Tensor Cores: that bound is the check (the emulator also keeps F32 rounding's below)
#endif
  }
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
        {.dtype = DType::F8E4M3, .trans_a = Trans::N, .trans_b = Trans::T, .m = 32, .n = 48, .k = 64, .lda = 64,
         .ldb = 64, .ldc = 48, .c_f32 = true, .scale_a = probe_scale.data<float>(),
         .scale_b = probe_scale.data<float>(), .query = true});
#if defined(HG_CUDA_EMULATE)
    REQUIRE(fp8_cores);
#endif
    for (int step = 0; step < 3; ++step) {
      const std::string what = describe(r) + " step " + std::to_string(step);
      fp8_linear_step(host, dev, rnd({2, 16, 64}, DType::F32, 2.0 * (step + 1)), w, b, rnd({2, 16, 48}, DType::F32), what,
                      fp8_cores);
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
    return GemmArgs{.dtype = at, .trans_a = Trans::N, .trans_b = Trans::T, .m = mm, .n = n, .k = k, .lda = k, .ldb = k,
                    .ldc = n, .c_f32 = true, .b_dtype = bt, .scale_a = sa.data<float>(), .scale_b = sb.data<float>(),
                    .query = true};
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
    GemmArgs g = args(at, bt, m);
    g.a = ad.data_ptr();
    g.b = bd.data_ptr();
    g.c = c.data<float>();
    g.query = false;
    REQUIRE(native(g));
    const std::vector<float> av = a.to(DType::F32).to_vector<float>(), bv = b.to(DType::F32).to_vector<float>();
    std::vector<float> ref(static_cast<size_t>(m * n)), mag(ref.size());
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        float acc = 0.0f, abs_acc = 0.0f;
        for (int64_t l = 0; l < k; ++l) {
          acc += av[size_t(i * k + l)] * bv[size_t(j * k + l)];
          abs_acc += std::fabs(av[size_t(i * k + l)] * bv[size_t(j * k + l)]);
        }
        ref[size_t(i * n + j)] = (0.375f * 3.0f) * acc;
        mag[size_t(i * n + j)] = (0.375f * 3.0f) * abs_acc;
      }
#if defined(HG_CUDA_EMULATE)
    // the emulated cuBLASLt sums the exact products in F32 in k order, as the reference does: bit for bit
    check_close(from_vector(ref, {m, n}), c, exact(), "native FP8 GEMM");
#endif
    check_fp8_accumulation(from_vector(ref, {m, n}), c, from_vector(mag, {m, n}), k, "native FP8 GEMM");
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

