// Training-step speed of the workloads benchmarks/compare_pytorch compares with PyTorch (the same
// shapes, optimizers and steps as benchmarks/torch/train_workloads.py). Synthetic data of the real
// shapes, so data loading is not timed; each step is zero_grad + forward + loss + backward + step (with
// mlp_fp16: F16 autocast and a GradScaler, Apex O1).
//   ./build/bench_train --workload mlp|cnn|bn_cnn|recipe|tiny|all [--steps N] [--threads N] [--device cpu|cuda] [--graph]
// Prints one JSON line per workload: median and mean ms per step; on a CUDA device (or the emulated one)
// also the launches, library calls, copies and host syncs of one step (cuda/counters.h), counted over
// five more steps. --graph (CUDA): the step is captured once after the warm-up (cuda/graph.h) and replayed;
// the scheduler steps between replays, outside the graph.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "benchmarks/bench_util.h"
#include "benchmarks/workloads.h"
#include "cuda/graph.h"
#include "examples/cli.h"
#include "halfgrad.h"
#include "nn/nn.h"
#include "cpu/gemm.h"
#include "ops/loss.h"
#include "optim/adam.h"
#include "optim/lr_scheduler.h"
#include "optim/sgd.h"

namespace {

namespace nn = hg::nn;
using hg::Tensor;
using hg::bench::Workload;
using hg::bench::fp32_workloads;

// The FP32 workloads, then recipe_bf16, cnn_bf16 and bn_cnn_bf16: the same under BF16 autocast; then
// mlp_fp16: the MLP under F16 autocast with a dynamic GradScaler.
std::vector<Workload> workloads() {
  std::vector<Workload> all = fp32_workloads();
  for (size_t i = 0, n = all.size(); i < n; ++i) {
    if (all[i].name != "recipe" && all[i].name != "cnn" && all[i].name != "bn_cnn") continue;
    Workload w = all[i];
    w.name += "_bf16";
    w.bf16 = true;
    all.push_back(w);
  }
  for (size_t i = 0, n = all.size(); i < n; ++i) {
    if (all[i].name != "mlp") continue;
    Workload w = all[i];
    w.name += "_fp16";
    w.fp16_scaler = true;
    all.push_back(w);
  }
  return all;
}

constexpr int kCountedSteps = 5;  // on a CUDA device: the steps whose launches and syncs are counted

void run(const Workload& w, int steps, hg::Device dev, bool graphed) {
  hg::manual_seed(0);
  auto model = w.model();
  model->to(dev);
  auto opt = w.optimizer(*model);
  hg::amp::GradScaler scaler({.enabled = w.fp16_scaler});
  const int warmup = std::max(3, steps / 10);
  std::unique_ptr<hg::optim::LRScheduler> sched;
  if (w.schedule == Workload::Schedule::OneCycle)
    sched = std::make_unique<hg::optim::OneCycleLR>(
        *opt, hg::optim::OneCycleLROptions{.max_lr = opt->lr(0), .total_steps = 2 * warmup + steps + kCountedSteps});
  const Tensor x = hg::randn(w.input).to(dev);
  const int64_t batch = w.input[0];
  Tensor target;
  if (w.classes > 0) {
    std::vector<int64_t> labels(static_cast<size_t>(batch));
    for (int64_t i = 0; i < batch; ++i) labels[static_cast<size_t>(i)] = (i * 7) % w.classes;
    target = hg::from_vector(labels, {batch}, {.dtype = hg::DType::I64}).to(dev);
  } else {
    target = hg::randn(w.input).to(dev);
  }
  auto body = [&] {  // forward, loss, backward, update; the gradients are dropped before (eager) or after (graph)
    Tensor loss;
    {
      std::optional<hg::amp::Autocast> ac;
      if (w.bf16 || w.fp16_scaler) ac.emplace(dev.type, w.bf16 ? hg::DType::BF16 : hg::DType::F16);
      const Tensor y = model->forward(x);
      loss = w.classes > 0 ? hg::cross_entropy(y, target, {.label_smoothing = w.label_smoothing})
                           : hg::mse_loss(y, target);
    }
    if (w.fp16_scaler) {
      scaler.scale(loss).backward();
      scaler.step(*opt);
      scaler.update();
    } else {
      loss.backward();
      opt->step();
    }
  };
  std::optional<hg::cuda::Graph> graph;
  auto step = [&] {
    if (graph) {
      graph->launch();
    } else {
      opt->zero_grad();
      body();
    }
    if (sched) sched->step();
  };
  if (graphed) {  // warm up eagerly (state, masters, plans, the scaler's device state), then capture one step
    for (int k = 0; k < warmup; ++k) step();
    opt->zero_grad();  // a capture may not free what was allocated outside it
    hg::cuda::synchronize(dev.index);
    graph.emplace(hg::cuda::Graph::capture(dev.index, [&] {
      body();
      opt->zero_grad();  // what the graph allocates it frees
    }));
  }
  // each step timed on its own (the helper's samples of one call, the device synchronized around it),
  // after the warm-up steps
  const hg::bench::Timing t =
      hg::bench::time_calls(step, {.warmup = warmup, .samples = steps, .min_seconds = 0, .device = dev});
  std::string counts;
  if (dev.is_cuda()) {  // what one step enqueues and waits for, without the timing's synchronizations
    const hg::cuda::Counters before = hg::cuda::counters();
    for (int k = 0; k < kCountedSteps; ++k) step();
    const hg::cuda::Counters c = hg::cuda::counters() - before;
    hg::cuda::synchronize(dev.index);
    auto per_step = [&](int64_t n) { return static_cast<double>(n) / kCountedSteps; };
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  ", \"launches_per_step\": %.1f, \"kernels_per_step\": %.1f, \"library_calls_per_step\": %.1f, "
                  "\"copies_per_step\": %.1f, \"syncs_per_step\": %.1f",
                  per_step(c.launches()), per_step(c.kernels), per_step(c.library_calls), per_step(c.copies),
                  per_step(c.syncs));
    counts = buf;
  }
  std::printf("{\"framework\": \"halfgrad\", \"workload\": \"%s\", \"device\": \"%s\", \"graph\": %s, \"threads\": %d, "
              "\"steps\": %d, \"ms_per_step_median\": %.4f, \"ms_per_step_mean\": %.4f, \"ms_per_step_min\": %.4f, "
              "\"ms_per_step_max\": %.4f%s}\n",
              w.name.c_str(), dev.str().c_str(), graphed ? "true" : "false", hg::get_num_threads(), steps, t.median * 1e3, t.mean * 1e3,
              t.min * 1e3, t.max * 1e3, counts.c_str());
  std::fflush(stdout);
}

}  // namespace

int run_all(const std::string& which, int steps, hg::Device dev, bool graphed);

[[noreturn]] void usage(const std::string& problem) {
  example::exit_with_usage("bench_train", problem, "[--workload tiny|mlp|recipe|cnn|bn_cnn|recipe_bf16|cnn_bf16|bn_cnn_bf16|mlp_fp16|all] [--steps N] [--threads N] "
                         "[--device cpu|cuda] [--graph]");
}

int main(int argc, char** argv) {
  std::string which = "all";
  int steps = 0;
  hg::Device dev = hg::Device::cpu();
  bool graphed = false;
  auto on_switch = [&](const std::string& f) {
    if (f != "--graph") return false;
    graphed = true;
    return true;
  };
  auto on_value = [&](const std::string& f, const std::string& v) {
    if (f == "--workload") which = v;
    else if (f == "--steps") steps = example::parse_number<int>(v, 1);
    else if (f == "--threads") hg::set_num_threads(example::parse_number<int>(v, 1, hg::max_num_threads()));
    else if (f == "--device" && (v == "cpu" || v == "cuda")) dev = v == "cuda" ? hg::Device::cuda() : hg::Device::cpu();
    else return false;
    return true;
  };
  example::parse_flags(argc, argv, on_switch, on_value, usage);
  if (graphed && !dev.is_cuda()) usage("--graph captures CUDA work: add --device cuda");
  return example::guarded_main("bench_train", [&] { return run_all(which, steps, dev, graphed); });
}

int run_all(const std::string& which, int steps, hg::Device dev, bool graphed) {
  // the header on stderr: stdout is one JSON line per workload (benchmarks/compare_pytorch reads it)
  std::fprintf(stderr, "bench_train on %s; GEMM engines F32 %s, BF16 %s\n", hg::cpu_summary().c_str(),
               hg::cpu::gemm_engine(hg::DType::F32).c_str(), hg::cpu::gemm_engine(hg::DType::BF16).c_str());
  bool found = false;
  for (const Workload& w : workloads()) {
    if (which != "all" && which != w.name) continue;
    found = true;
    run(w, steps > 0 ? steps : w.default_steps, dev, graphed);
  }
  if (!found) {
    std::fprintf(stderr, "bench_train: unknown workload '%s' (tiny, mlp, recipe, cnn, bn_cnn, recipe_bf16, cnn_bf16, bn_cnn_bf16, mlp_fp16 or all)\n", which.c_str());
    return 2;
  }
  return 0;
}
