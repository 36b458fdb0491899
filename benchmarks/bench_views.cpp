// bench_views: what a view costs an op. matmul(a, b.t()) reads the transposed operand through the GEMM's
// transpose flag, so it should take as long as matmul(a, c) with c contiguous, and less than
// matmul(a, b.t().contiguous()), which is what a copying transpose costs. Also an elementwise op and a
// reduction on a transposed view against the same op on a contiguous tensor. Prints ms per call (median of
// interleaved samples, the device synchronized around each on a GPU) and each row's ratio to its baseline.
//   bench_views [--quick] [--device cpu|cuda] [--n SIZE] [--dtype f32|f16|bf16]
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "benchmarks/bench_util.h"
#include "examples/cli.h"
#include "halfgrad.h"

using namespace hg;

int main(int argc, char** argv) {
  int64_t n = 1024;
  int samples = 7;
  double min_s = 0.2;
  Device dev = Device::cpu();
  DType dt = DType::F32;
  auto on_switch = [&](const std::string& f) {
    if (f != "--quick") return false;
    samples = 3, min_s = 0.05;
    return true;
  };
  auto on_value = [&](const std::string& f, const std::string& v) {
    if (f == "--n") n = example::parse_number<int64_t>(v, 16, 16384);
    else if (f == "--device") dev = Device::parse(v);
    else if (f == "--dtype") dt = v == "f16" ? DType::F16 : v == "bf16" ? DType::BF16 : v == "f32" ? DType::F32 : throw Error("bench_views: --dtype takes f32, f16 or bf16");
    else return false;
    return true;
  };
  example::parse_flags(argc, argv, on_switch, on_value, [](const std::string& problem) {
    example::exit_with_usage("bench_views", problem, "[--quick] [--device cpu|cuda] [--n SIZE] [--dtype f32|f16|bf16]");
  });
  std::printf("bench_views on %s, device %s, %d threads, n = %lld, %s\n", cpu_summary().c_str(),
              dev.str().c_str(), get_num_threads(), static_cast<long long>(n), dtype_name(dt));
  NoGradGuard no_grad;
  Generator g(1);
  const TensorOptions o{.dtype = DType::F32};
  const Tensor a = randn({n, n}, o, &g).to(dt).to(dev), b = randn({n, n}, o, &g).to(dt).to(dev);
  const Tensor c = b.t().contiguous();  // the same values as b.t(), stored densely
  struct Row {
    const char* name;
    const char* baseline;  // the row it is compared with
    std::function<void()> run;
  };
  const std::vector<Row> rows = {
      {"matmul(a, c), c contiguous", nullptr, [&] { (void)matmul(a, c); }},
      {"matmul(a, b.t()), a view", "matmul(a, c), c contiguous", [&] { (void)matmul(a, b.t()); }},
      {"matmul(a, b.t().contiguous())", "matmul(a, c), c contiguous", [&] { (void)matmul(a, b.t().contiguous()); }},
      {"a + c", nullptr, [&] { (void)(a + c); }},
      {"a + b.t()", "a + c", [&] { (void)(a + b.t()); }},
      {"c.sum(1)", nullptr, [&] { (void)c.sum(1); }},
      {"b.t().sum(1)", "c.sum(1)", [&] { (void)b.t().sum(1); }},
  };
  // interleave the samples of all rows so that a busy spell of the machine hits them alike
  std::vector<std::vector<double>> per(rows.size());
  for (int s = 0; s < samples; ++s)
    for (size_t r = 0; r < rows.size(); ++r)
      per[r].push_back(bench::time_calls(rows[r].run, {.warmup = s == 0 ? 2 : 0, .samples = 1, .min_seconds = min_s,
                                                        .device = dev}).median);
  std::printf("%-32s %10s %8s %10s\n", "op", "ms", "spread", "ratio");
  std::vector<double> med(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    const bench::Timing t = bench::timing_of(per[r]);
    med[r] = t.median;
    double ratio = 1.0;
    for (size_t q = 0; q < rows.size(); ++q)
      if (rows[r].baseline && std::string(rows[q].name) == rows[r].baseline) ratio = t.median / med[q];
    std::printf("%-32s %10.3f %7.0f%% %10.2f\n", rows[r].name, t.median * 1e3, t.spread() * 100, ratio);
  }
  std::printf("(ratio: ms over the baseline row above it; 1.00 means the view costs nothing)\n");
  return 0;
}
