// bench_fp8: one linear layer's training step (forward and backward) in F32, BF16, and FP8 with delayed, current
// and MXFP8 scaling, on the CPU or a GPU, as ms per step and as a ratio to BF16 in the same process.
//   bench_fp8 [--quick] [--device cpu|cuda]
//
// Why FP8 is slower than BF16 on a CPU: no CPU has FP8 arithmetic, so an FP8 GEMM is the BF16 GEMM on values
// decoded exactly from FP8 (ops/fp8_linear.h). On a GPU with FP8 Tensor Cores (sm_89 and later) the per-tensor
// recipes run cuBLASLt's FP8 GEMM when m, n and k are multiples of 16 (every shape below is); the table says
// per row how many of its GEMMs ran natively.
// What FP8 adds is the casts: per tensor an amax pass (current scaling), the quantize pass, a decode pass to BF16,
// and an F32 result scaled by the inverse scales; MXFP8 also quantizes x, w and dy a second time along the other
// dimension for backward. The last columns split the FP8 forward into casts and the GEMM to show where the time
// goes. On hardware with FP8 Tensor Cores the GEMM itself would run at about twice BF16's rate and the casts
// would be fused into neighbouring kernels.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "benchmarks/bench_util.h"
#include "examples/cli.h"
#include "halfgrad.h"
#include "cpu/gemm.h"

using namespace hg;

namespace {

struct Shape3 {
  int64_t m, in, out;
};

}  // namespace

int main(int argc, char** argv) {
  int samples = 5;
  double min_s = 0.2;
  std::string device = "cpu";
  auto on_switch = [&](const std::string& f) {
    if (f != "--quick") return false;
    samples = 3, min_s = 0.05;
    return true;
  };
  auto on_value = [&](const std::string& f, const std::string& v) {
    if (f != "--device") return false;
    if (v != "cpu" && v != "cuda") return false;
    device = v;
    return true;
  };
  example::parse_flags(argc, argv, on_switch, on_value, [](const std::string& problem) {
    example::exit_with_usage("bench_fp8", problem, "[--quick] [--device cpu|cuda]");
  });
  const Device dev = device == "cuda" ? Device::cuda() : Device::cpu();
  std::printf("bench_fp8 on %s, %d thread(s), device %s, gemm engine (BF16): %s\n", cpu_summary().c_str(),
              get_num_threads(), device.c_str(), cpu::gemm_engine(DType::BF16).c_str());
  std::printf("one linear layer, forward + backward (dx, dw, db); ms per step and the ratio to BF16\n");
  std::printf("%-18s %8s %8s %8s %8s %8s %8s %8s %8s | %9s %9s | %s\n", "m x in -> out", "F32", "BF16", "delayed",
              "current", "mxfp8", "del/BF16", "cur/BF16", "mx/BF16", "fwd casts", "fwd GEMM", "FP8 GEMMs native, spread");
  const Shape3 shapes[] = {{64, 784, 256}, {256, 1024, 1024}, {1024, 2048, 2048}};
  for (const Shape3& s : shapes) {
    const Tensor x32 = randn({s.m, s.in}, {.device = dev});
    const Tensor w32 = mul(randn({s.out, s.in}, {.device = dev}), 0.03), b32 = zeros({s.out}, {.device = dev});
    const Tensor dy = mul(randn({s.m, s.out}, {.device = dev}), 1e-3);
    auto step = [&](const Tensor& x, const Tensor& w, const Tensor& b, auto&& fwd) {
      Tensor wl = w.detach().requires_grad_(), bl = b.detach().requires_grad_();
      const Tensor y = fwd(x, wl, bl);
      y.backward(dy.to(y.dtype()));
    };
    auto plain = [](const Tensor& x, const Tensor& w, const Tensor& b) { return linear(x, w, b); };
    const Tensor x16 = x32.to(DType::BF16), w16 = w32.to(DType::BF16), b16 = b32.to(DType::BF16);
    double spread = 0;  // the row's largest (max - min) / median over its timings' samples
    const auto time_it = [&](auto&& body) {
      const bench::Timing t = bench::time_calls(body, {.samples = samples, .min_seconds = min_s, .device = dev});
      spread = std::max(spread, t.spread());
      return t.median;
    };
    const double f32 = time_it([&] { step(x32, w32, b32, plain); });
    const double bf16 = time_it([&] { step(x16, w16, b16, plain); });
    double fp8[3];
    double native = 0.0;  // the share of the delayed recipe's GEMMs that ran on FP8 Tensor Cores
    const Fp8Scaling kinds[3] = {Fp8Scaling::Delayed, Fp8Scaling::Current, Fp8Scaling::Mx};
    for (int k = 0; k < 3; ++k) {
      auto st = std::make_shared<Fp8LinearState>(Fp8Recipe{.scaling = kinds[k], .amax_history_len = 1024}, dev);
      fp8[k] = time_it(
          [&] { step(x32, w32, b32, [&](const Tensor& x, const Tensor& w, const Tensor& b) { return fp8_linear(x, w, b, st); }); });
      if (k == 0 && st->gemms() > 0) native = double(st->native_gemms()) / double(st->gemms());
    }
    // the delayed forward split: its casts (quantize x and w, decode both to BF16) against the GEMM alone
    Fp8DelayedScaling dx(DType::F8E4M3, {}, dev), dw(DType::F8E4M3, {}, dev);
    const double casts = time_it([&] {
      (void)dx.quantize(x32).to(DType::BF16);
      (void)dw.quantize(w32).to(DType::BF16);
    });
    NoGradGuard ng;
    const double gemm = time_it([&] { (void)linear(x16, w16); });
    char name[32];
    std::snprintf(name, sizeof name, "%lldx%lld->%lld", static_cast<long long>(s.m), static_cast<long long>(s.in),
                  static_cast<long long>(s.out));
    std::printf("%-18s %8.3f %8.3f %8.3f %8.3f %8.3f %8.2f %8.2f %8.2f | %8.3fms %8.3fms | %3.0f%%  %4.1f%%\n", name,
                f32 * 1e3, bf16 * 1e3, fp8[0] * 1e3, fp8[1] * 1e3, fp8[2] * 1e3, fp8[0] / bf16, fp8[1] / bf16,
                fp8[2] / bf16, casts * 1e3, gemm * 1e3, 100.0 * native, 100.0 * spread);
  }
  std::printf("(ratio > 1: slower than BF16. Where no GEMM ran natively, FP8 is emulated: its GEMM is BF16's on decoded\n"
              " values, plus the casts; 'fwd casts' and 'fwd GEMM' split that route's forward. Each time is the median of\n"
              " its samples (benchmarks/bench_util.h; the device synchronized around each); spread: the row's largest\n"
              " (slowest - fastest) / median)\n");
  return 0;
}
