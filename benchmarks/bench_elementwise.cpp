// bench_elementwise: memory-bound elementwise ops and reductions on 16M elements, F32 vs F16 vs BF16.
// Low-precision storage moves half the bytes, so with vectorised conversions F16/BF16 should be no
// slower than F32 (docs/ARCHITECTURE.md, "Benchmark method"). Prints ms per call, effective GB/s and the ratio to F32.
//   bench_elementwise [--quick] [--n ELEMENTS]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>

#include "benchmarks/bench_util.h"
#include "examples/cli.h"
#include "halfgrad.h"

using namespace hg;

namespace {

struct Case {
  const char* name;
  int tensors_moved;  // inputs + outputs of one call, for GB/s
  std::function<Tensor(const Tensor&, const Tensor&)> run;
};

}  // namespace

int main(int argc, char** argv) {
  int64_t n = 16 << 20;
  int samples = 7;
  double min_s = 0.2;
  auto on_switch = [&](const std::string& f) {
    if (f != "--quick") return false;
    samples = 3, min_s = 0.05;
    return true;
  };
  auto on_value = [&](const std::string& f, const std::string& v) {
    if (f != "--n") return false;
    n = example::parse_number<int64_t>(v, 1, int64_t{1} << 34);
    return true;
  };
  example::parse_flags(argc, argv, on_switch, on_value, [](const std::string& problem) {
    example::exit_with_usage("bench_elementwise", problem, "[--quick] [--n ELEMENTS]");
  });
  const Case cases[] = {
      {"relu", 2, [](const Tensor& a, const Tensor&) { return relu(a); }},
      {"add", 3, [](const Tensor& a, const Tensor& b) { return a + b; }},
      {"mul", 3, [](const Tensor& a, const Tensor& b) { return a * b; }},
      {"x*2+1", 2, [](const Tensor& a, const Tensor&) { return add(mul(a, 2.0), 1.0); }},
      {"sigmoid", 2, [](const Tensor& a, const Tensor&) { return sigmoid(a); }},
      {"gelu", 2, [](const Tensor& a, const Tensor&) { return gelu(a, GeluApprox::Tanh); }},
      {"exp", 2, [](const Tensor& a, const Tensor&) { return exp(a); }},
      {"sum", 1, [](const Tensor& a, const Tensor&) { return sum(a); }},
      {"softmax(-1)", 2, [](const Tensor& a, const Tensor&) { return softmax(a.reshape({-1, 1024}), -1); }},
  };
  std::printf("bench_elementwise on %s\n%lld elements, %d OpenMP threads, conversions: %s\n", cpu_summary().c_str(),
              static_cast<long long>(n), get_num_threads(), convert_isa());
  std::printf("%-12s %10s %10s %10s %10s %10s %10s %9s %9s\n", "op", "F32 ms", "GB/s", "F16 ms", "GB/s", "BF16 ms",
              "GB/s", "F16/F32", "BF16/F32");
  const Tensor a32 = randn({n}), b32 = randn({n});
  NoGradGuard no_grad;
  for (const Case& c : cases) {
    double ms[3], gbs[3];
    const DType dts[3] = {DType::F32, DType::F16, DType::BF16};
    for (int d = 0; d < 3; ++d) {
      const Tensor a = a32.to(dts[d]), b = b32.to(dts[d]);
      const double s = bench::median_seconds([&] { (void)c.run(a, b); }, samples, min_s);
      ms[d] = s * 1e3;
      gbs[d] = static_cast<double>(c.tensors_moved) * static_cast<double>(a.nbytes()) / s / 1e9;
    }
    std::printf("%-12s %10.2f %10.1f %10.2f %10.1f %10.2f %10.1f %9.2f %9.2f\n", c.name, ms[0], gbs[0], ms[1], gbs[1],
                ms[2], gbs[2], ms[1] / ms[0], ms[2] / ms[0]);
  }
  std::printf("(ratio < 1: the low-precision dtype is faster than F32)\n");
  return 0;
}
