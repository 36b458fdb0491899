// bench_reduce_cuda: halfgrad's sums on a CUDA device, F32, F16 and BF16, in GB/s of input read, next to
// a device-to-device copy of the same bytes timed in the same run (the ratio is the share of the copy's
// bandwidth the reduction reaches; a copy reads and writes, so a reduction near its read bandwidth can
// pass 1.0). The shapes are a Linear's bias gradient (a sum over the batch: a non-last dim, the column
// kernel), the same bytes summed over the last dim (rows), and a full sum of a large tensor (split
// over blocks).
//   bench_reduce_cuda [--quick]
#include <algorithm>
#include <functional>
#include <cstdio>
#include <string>
#include <vector>

#include "benchmarks/bench_util.h"
#include "cuda/graph.h"
#include "examples/cli.h"
#include "halfgrad.h"

using namespace hg;

int main(int argc, char** argv) {
  return example::guarded_main("bench_reduce_cuda", [&] {
    int samples = 7;
    auto on_switch = [&](const std::string& f) {
      if (f != "--quick") return false;
      samples = 3;
      return true;
    };
    auto on_value = [](const std::string&, const std::string&) { return false; };
    example::parse_flags(argc, argv, on_switch, on_value, [](const std::string& problem) {
      example::exit_with_usage("bench_reduce_cuda", problem, "[--quick]");
    });
    if (!cuda::is_available()) throw std::runtime_error("no CUDA device: " + cuda::unavailable_reason());
    std::printf("bench_reduce_cuda: %s\n", cuda::version_info().c_str());
    std::printf("GB/s = input bytes / time (median of %d timed batches); copy = clone of the same bytes\n", samples);
    std::printf("%-28s %-6s %10s %10s %10s %8s\n", "sum", "dtype", "us/call", "GB/s", "copy GB/s", "of copy");
    NoGradGuard no_grad;
    const Device dev = Device::cuda();
    struct Shape2 {
      const char* name;
      Shape shape;
      std::vector<int64_t> dims;
    };
    const std::vector<Shape2> cases = {{"(512,4096) over dim 0", {512, 4096}, {0}},
                                       {"(4096,512) over dim 1", {4096, 512}, {1}},
                                       {"(64,65536) over dim 0", {64, 65536}, {0}},
                                       {"(16M) all", {int64_t{1} << 24}, {}}};
    auto time_us = [&](const std::function<void()>& f, double) {
      return bench::time_calls(f, {.samples = samples, .min_seconds = 0.02, .device = Device::cuda()}).median * 1e6;
    };
    for (const Shape2& c : cases) {
      for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
        const Tensor x = randn(c.shape).to(dt).to(dev);
        const double bytes = static_cast<double>(x.numel() * dtype_size(dt));
        const double us = time_us([&] { (void)(c.dims.empty() ? sum(x) : sum(x, c.dims)); }, bytes);
        const double copy_us = time_us([&] { (void)x.clone(); }, bytes);
        std::printf("%-28s %-6s %10.2f %10.1f %10.1f %8.2f\n", c.name, dtype_name(dt), us, bytes / us / 1e3,
                    bytes / copy_us / 1e3, copy_us / us);
        std::fflush(stdout);
      }
    }
    return 0;
  });
}
