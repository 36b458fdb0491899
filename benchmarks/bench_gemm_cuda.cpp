// bench_gemm_cuda: halfgrad's GEMM on a CUDA device (cuBLAS through cuda/blas.cpp), F32, TF32 (F32
// tensors with cuda::set_allow_tf32(true)), F16 and BF16, and the native FP8 GEMM (E4M3 x E4M3 -> F32 with
// scale pointers, cuBLASLt through cuda/blas_lt.cpp, on sm_89 and later), in TFLOP/s (the median of timed
// batches of calls, synchronised around each batch), and as a share of the device's dense peak when it is
// given (--peak F32=67,TF32=495,F16=989,BF16=989,FP8=1979: published TFLOP/s, which scripts/gpu-check.sh
// passes for the GPUs it knows).
//   bench_gemm_cuda [--quick] [--size N] [--peak F32=X,TF32=W,F16=Y,BF16=Z,FP8=V]
#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "benchmarks/bench_util.h"
#include "cuda/graph.h"
#include "examples/cli.h"
#include "halfgrad.h"
#include "ops/kernels/fp8.h"  // the native FP8 GEMM's table

using namespace hg;

namespace {

// "F32=67,F16=989" -> {F32: 67, F16: 989}
std::map<std::string, double> parse_peaks(const std::string& v) {
  std::map<std::string, double> peaks;
  std::stringstream ss(v);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos) throw std::invalid_argument("expected DTYPE=TFLOPS pairs, e.g. F32=67,TF32=495,BF16=989");
    peaks[item.substr(0, eq)] = example::parse_positive(item.substr(eq + 1));
  }
  return peaks;
}

}  // namespace

int main(int argc, char** argv) {
  return example::guarded_main("bench_gemm_cuda", [&] {
    std::vector<int64_t> sizes = {2048, 4096, 8192};
    std::map<std::string, double> peaks;
    int samples = 5;
    auto on_switch = [&](const std::string& f) {
      if (f != "--quick") return false;
      sizes = {4096};
      samples = 3;
      return true;
    };
    auto on_value = [&](const std::string& f, const std::string& v) {
      if (f == "--size") sizes = {example::parse_number<int64_t>(v, 16, 32768)};
      else if (f == "--peak") peaks = parse_peaks(v);
      else return false;
      return true;
    };
    example::parse_flags(argc, argv, on_switch, on_value, [](const std::string& problem) {
      example::exit_with_usage("bench_gemm_cuda", problem, "[--quick] [--size N] [--peak F32=X,TF32=W,F16=Y,BF16=Z,FP8=V]");
    });
    if (!cuda::is_available()) throw std::runtime_error("no CUDA device: " + cuda::unavailable_reason());
    std::printf("bench_gemm_cuda: %s\n", cuda::version_info().c_str());
    std::printf("C = A @ B, all three N x N, row-major; TFLOP/s = 2 N^3 / time (median of %d timed batches)\n",
                samples);
    std::printf("%-8s %-6s %10s %10s %9s\n", "N", "dtype", "ms/call", "TFLOP/s", "of peak");
    NoGradGuard no_grad;
    const Device dev = Device::cuda();
    for (int64_t n : sizes) {
      for (const char* name : {"F32", "TF32", "F16", "BF16", "FP8"}) {
        const std::string label = name;
        const bool fp8 = label == "FP8";
        const DType dt = label == "F16" ? DType::F16 : label == "BF16" ? DType::BF16 : fp8 ? DType::F8E4M3 : DType::F32;
        cuda::set_allow_tf32(label == "TF32");
        const Tensor a = randn({n, n}).to(dt).to(dev), b = randn({n, n}).to(dt).to(dev);
        // FP8: C (F32) = sa * sb * A B^T on FP8 Tensor Cores, both operands K-major as cuBLASLt wants them
        const Tensor scale = full(Shape{}, 1.0, {.dtype = DType::F32, .device = dev});
        Tensor c8 = fp8 ? empty(Shape{n, n}, {.dtype = DType::F32, .device = dev}) : Tensor();
        const GemmArgs g{.dtype = DType::F8E4M3, .trans_a = Trans::N, .trans_b = Trans::T, .m = n, .n = n, .k = n,
                         .a = a.data_ptr(), .lda = n, .b = b.data_ptr(), .ldb = n,
                         .c = fp8 ? c8.data<float>() : nullptr, .ldc = n, .c_f32 = true,
                         .scale_a = scale.data<float>(), .scale_b = scale.data<float>()};
        const Fp8GemmKernel native =
            fp8 && fp8_gemm_kernels().has(dev, DType::F8E4M3) ? fp8_gemm_kernels().get(dev, DType::F8E4M3) : nullptr;
        const auto call = [&] {
          if (!fp8) return (void)matmul(a, b);
          if (!native(g)) throw std::runtime_error("the native FP8 GEMM refused an aligned square problem");
        };
        GemmArgs query = g;
        query.query = true;
        if (fp8 && !(native && native(query))) {
          std::printf("%-8lld %-6s %10s %10s %9s  (no FP8 Tensor Cores: compute capability below 8.9)\n",
                      static_cast<long long>(n), name, "-", "-", "-");
          continue;
        }
        const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
        // the first call makes the handle, the workspace and cuBLAS's heuristics (the helper's warm-up);
        // samples of about 50 ms hide the launch and the sync
        const double s = bench::time_calls(call, {.samples = samples, .min_seconds = 0.05, .device = dev}).median;
        const double tflops = flops / s / 1e12;
        cuda::set_allow_tf32(false);
        const auto peak = peaks.find(label);
        char share[32] = "-";
        if (peak != peaks.end()) std::snprintf(share, sizeof share, "%.0f%%", 100.0 * tflops / peak->second);
        std::printf("%-8lld %-6s %10.3f %10.1f %9s\n", static_cast<long long>(n), name, s * 1e3, tflops,
                    share);
        std::fflush(stdout);
      }
    }
    std::printf("F32 is true fp32 (halfgrad's default); TF32 rounds the F32 inputs to a 10-bit mantissa; all "
                "accumulate in F32, F16/BF16/TF32/FP8 on Tensor Cores; FP8 is E4M3 x E4M3 -> F32, C = A B^T\n");
    return 0;
  });
}
