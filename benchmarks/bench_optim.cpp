// bench_optim: one optimizer step (every parameter's fused update kernel) per optimizer, parameter dtype
// and store, on the Fashion-MNIST MLP's parameters (784-256-128-10: six small tensors, where per-call
// costs show) and on one 4M-element tensor (where the loop's speed and the threads show). Prints the
// median microseconds per step, the spread of the samples and a checksum of the parameters, masters and
// buffers after five steps from a fixed start: two builds (or two commits) that print the same checksums
// update bit for bit alike, and their times compare when both run in one script on one machine.
// With --device cuda the parameters live on the GPU (or the emulated device: HG_CUDA=EMULATE) and every sample
// synchronizes it (benchmarks/bench_util.h).
//   bench_optim [--quick] [--filter TEXT] [--device cpu|cuda]
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "benchmarks/bench_util.h"
#include "examples/cli.h"
#include "halfgrad.h"

using namespace hg;

namespace {

struct Store {
  const char* name;
  DType dtype;
  optim::MasterWeights masters;
  ParamRounding rounding;
};

struct OptimizerCase {
  const char* name;
  std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)> make;
};

// FNV-1a over the bytes of each tensor (on the CPU).
uint64_t checksum(const std::vector<Tensor>& ts) {
  uint64_t h = 1469598103934665603ull;
  for (const Tensor& t : ts) {
    if (!t.defined()) continue;
    const Tensor c = t.to(Device::cpu());
    const auto* b = static_cast<const unsigned char*>(c.data_ptr());
    for (size_t i = 0; i < c.nbytes(); ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
  return h;
}

// Parameters of these shapes in `dtype`, each with a fixed gradient.
std::vector<Tensor> make_params(const std::vector<Shape>& shapes, DType dtype, Device dev) {
  manual_seed(7);
  std::vector<Tensor> ps;
  for (const Shape& s : shapes) {
    Tensor p = (randn(s) * 0.05).to(dtype).to(dev);
    p.requires_grad_(true);
    p.set_grad((randn(s) * 0.01).to(dtype).to(dev));
    ps.push_back(p);
  }
  return ps;
}

}  // namespace

int main(int argc, char** argv) {
  int samples = 7;
  double min_s = 0.2;
  std::string filter;
  Device dev = Device::cpu();
  auto on_switch = [&](const std::string& f) {
    if (f != "--quick") return false;
    samples = 3, min_s = 0.05;
    return true;
  };
  auto on_value = [&](const std::string& f, const std::string& v) {
    if (f == "--filter") filter = v;
    else if (f == "--device" && (v == "cpu" || v == "cuda")) dev = v == "cuda" ? Device::cuda() : Device::cpu();
    else return false;
    return true;
  };
  example::parse_flags(argc, argv, on_switch, on_value, [](const std::string& problem) {
    example::exit_with_usage("bench_optim", problem, "[--quick] [--filter TEXT] [--device cpu|cuda]");
  });

  const std::pair<const char*, std::vector<Shape>> models[] = {
      {"mlp", {{256, 784}, {256}, {128, 256}, {128}, {10, 128}, {10}}},
      {"4M", {{4 << 20}}},
  };
  const Store stores[] = {
      {"F32", DType::F32, optim::MasterWeights::Auto, ParamRounding::Nearest},
      {"BF16+master", DType::BF16, optim::MasterWeights::Auto, ParamRounding::Nearest},
      {"F16 stochastic", DType::F16, optim::MasterWeights::Off, ParamRounding::Stochastic},
      {"BF16 kahan", DType::BF16, optim::MasterWeights::Off, ParamRounding::Kahan},
      {"F64", DType::F64, optim::MasterWeights::Auto, ParamRounding::Nearest},
  };
  const OptimizerCase optimizers[] = {
      {"SGD", [](std::vector<Tensor> p) { return std::make_unique<optim::SGD>(std::move(p), optim::SGDArgs{.lr = 0.01}); }},
      {"SGD nesterov wd",
       [](std::vector<Tensor> p) {
         return std::make_unique<optim::SGD>(
             std::move(p), optim::SGDArgs{.lr = 0.01, .momentum = 0.9, .weight_decay = 1e-4, .nesterov = true});
       }},
      {"Adam", [](std::vector<Tensor> p) { return std::make_unique<optim::Adam>(std::move(p), optim::AdamArgs{}); }},
      {"AdamW amsgrad",
       [](std::vector<Tensor> p) { return std::make_unique<optim::AdamW>(std::move(p), optim::AdamWArgs{.amsgrad = true}); }},
  };

  std::printf("bench_optim on %s, %d OpenMP threads, parameters on %s\n", cpu_summary().c_str(), get_num_threads(),
              dev.str().c_str());
  std::printf("%-6s %-16s %-16s %12s %8s %18s\n", "params", "store", "optimizer", "us/step", "spread", "checksum");
  for (const auto& [model, shapes] : models) {
    for (const Store& st : stores) {
      for (const OptimizerCase& oc : optimizers) {
        const std::string name = std::string(model) + " " + st.name + " " + oc.name;
        if (!filter.empty() && name.find(filter) == std::string::npos) continue;
        const std::vector<Tensor> ps = make_params(shapes, st.dtype, dev);
        auto opt = oc.make(ps);
        opt->set_master_weights(st.masters);
        if (st.rounding != ParamRounding::Nearest) opt->set_param_rounding(st.rounding, 11);
        for (int k = 0; k < 5; ++k) opt->step();
        std::vector<Tensor> all = ps;
        for (size_t i = 0; i < ps.size(); ++i) {
          all.push_back(opt->master(i));
          all.push_back(opt->compensation(i));
          for (const Tensor& b : opt->state_buffers(i)) all.push_back(b);
        }
        const uint64_t sum = checksum(all);
        const bench::Timing t = bench::time_calls([&] { opt->step(); }, {.samples = samples, .min_seconds = min_s, .device = dev});
        std::printf("%-6s %-16s %-16s %12.2f %7.1f%% %016llx\n", model, st.name, oc.name, t.median * 1e6,
                    t.spread() * 100, static_cast<unsigned long long>(sum));
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
