// pure_bf16: training with BF16 weights and no FP32 master copy, and the two ways to keep the small updates
// that round-to-nearest drops (the "Revisiting BFloat16 Training" lesson, Zamirai et al. 2020).
//   ./build/pure_bf16 [--data DIR] [--steps N] [--lr X] [--seed N] [--threads N] [--quick]
//
// Five runs of the Fashion-MNIST MLP (784-256-128-10, ReLU, batch 64, plain SGD) from the same initial weights
// and data order:
//   fp32             F32 weights: the reference;
//   bf16-masters     BF16 weights with FP32 masters in the optimizer (Apex O2 with BF16);
//   bf16-nearest     BF16 weights, no masters, every update rounded to nearest into the weight (Apex O3);
//   bf16-stochastic  BF16 weights, no masters, stochastic rounding of each update (optim: ParamRounding::Stochastic);
//   bf16-kahan       BF16 weights, no masters, Kahan-compensated updates (a BF16 compensation buffer).
// BF16 has 8 significand bits: a weight w keeps an update u only if |u| is above about |w| / 512. Plain SGD at
// the default lr makes most updates smaller than that, so bf16-nearest stalls while the other two BF16 runs
// should follow bf16-masters. "Kept" measures it: per weight, the movement the optimizer intended, I = the sum
// over the steps of -lr * g (in F32), against the movement that happened, A = w_end - w_start; kept =
// sum(A * I) / sum(I * I) over all weights (1: every intended update arrived, 0: none did; the updates of each
// run from its own gradients). Memory is the bytes per parameter the weights, masters and compensation take
// (gradients and activations are the same in every BF16 run).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "optim/sgd.h"
#include "train_common.h"

namespace {

namespace nn = hg::nn;
using hg::Tensor;
using hg::ParamRounding;

struct Options : example::LessonFlags {
  double lr = 0.01;
  Options() : LessonFlags(3000) {}  // batch 64: 938 steps = 1 epoch
};

[[noreturn]] void usage(const std::string& problem) {
  example::exit_with_usage("pure_bf16", problem,
                           "[--data DIR] [--steps N] [--lr X] [--seed N] [--threads N] [--quick]\n"
                           "  --steps N          training steps per run, batch 64 (default 3000; --quick: 200)\n"
                           "  --lr X             plain SGD learning rate (default 0.01)\n"
                           "  --quick            2048 training samples, 200 steps: a smoke run");
}

Options parse(int argc, char** argv) {
  Options o;
  example::parse_lesson_flags(argc, argv, o, [&](const std::string& f, const std::string& v) {
    if (f != "--lr") return false;
    o.lr = example::parse_positive(v);
    return true;
  }, usage);
  if (o.quick && !o.steps_set) o.steps = 200;
  return o;
}

struct Run {
  std::string label;
  bool bf16 = true, masters = false;
  ParamRounding rounding = ParamRounding::Nearest;
  // results
  double acc = 0, loss = 0, seconds = 0, bytes_per_param = 0, kept = 0;
};

// The weights of every parameter, widened to F32, in one flat vector.
std::vector<float> flat_weights(const nn::Module& m) {
  std::vector<float> out;
  for (const auto& [name, p] : m.named_parameters()) {
    const std::vector<float> w = p.to(hg::DType::F32).to_vector<float>();
    out.insert(out.end(), w.begin(), w.end());
  }
  return out;
}

// intended += -lr * g for every weight (plain SGD's update, in F32).
void add_intended(const nn::Module& m, double lr, std::vector<float>& intended) {
  size_t k = 0;
  const float neg_lr = static_cast<float>(-lr);
  for (const auto& [name, p] : m.named_parameters()) {
    const std::vector<float> g = p.grad().to(hg::DType::F32).to_vector<float>();
    for (const float x : g) intended[k++] += neg_lr * x;
  }
}

void train(const Options& o, const example::Data& d, Run& r) {
  hg::manual_seed(o.seed);
  std::shared_ptr<nn::Sequential> model = example::fashion_mnist_mlp();
  hg::optim::SGD opt(model->parameters(), {.lr = o.lr});
  const hg::amp::OptLevel level = !r.bf16 ? hg::amp::OptLevel::O0 : r.masters ? hg::amp::OptLevel::O2 : hg::amp::OptLevel::O3;
  hg::amp::Overrides ov{.verbose = false};
  if (r.bf16) ov.dtype = hg::DType::BF16;
  const hg::amp::Properties props = hg::amp::initialize(*model, opt, level, ov);
  if (r.rounding != ParamRounding::Nearest) opt.set_param_rounding(r.rounding, o.seed + 1);
  const example::Precision prec(props);
  hg::data::DataLoader loader(d.train, {.batch_size = 64, .shuffle = true, .seed = o.seed});
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<float> w_start = flat_weights(*model);
  std::vector<float> intended(w_start.size(), 0.0f);
  double loss_sum = 0;
  int64_t loss_n = 0, step = 0;
  for (int64_t epoch = 0; step < o.steps; loader.set_epoch(static_cast<uint64_t>(++epoch))) {
    for (auto& [x, y] : loader) {
      opt.zero_grad();
      const Tensor loss = prec.loss(*model, x, y);  // BF16 logits, F32 loss; BF16 needs no loss scaling
      loss.backward();
      opt.step();
      add_intended(*model, o.lr, intended);
      if (o.steps - step <= 100) loss_sum += loss.item(), ++loss_n;
      if (++step == o.steps) break;
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::vector<float> w_end = flat_weights(*model);
  double ai = 0, ii = 0;
  for (size_t i = 0; i < w_end.size(); ++i) {
    ai += (static_cast<double>(w_end[i]) - w_start[i]) * intended[i];
    ii += static_cast<double>(intended[i]) * intended[i];
  }
  r.kept = ii > 0 ? ai / ii : 0.0;
  r.loss = loss_sum / static_cast<double>(std::max<int64_t>(loss_n, 1));
  r.acc = example::evaluate(*model, d.test, hg::Device::cpu(), prec);
  int64_t params = 0, bytes = 0;
  const std::vector<Tensor> ps = opt.parameters();
  for (size_t i = 0; i < ps.size(); ++i) {
    params += ps[i].numel();
    bytes += ps[i].nbytes();
    if (const Tensor m = opt.master(i); m.defined()) bytes += m.nbytes();
    if (const Tensor c = opt.compensation(i); c.defined()) bytes += c.nbytes();
  }
  r.bytes_per_param = static_cast<double>(bytes) / static_cast<double>(params);
}

int run(const Options& o) {
  hg::set_num_threads(o.threads);
  example::Args a;
  a.data = o.data;
  if (o.quick) a.limit = 2048;
  const example::Data d = example::load_data(a);
  std::printf("pure_bf16: %lld train / %lld test samples, MLP 784-256-128-10, plain SGD lr %g, batch 64, %lld steps, "
              "seed %llu, %d thread(s) on %s\n", static_cast<long long>(d.train.size()),
              static_cast<long long>(d.test.size()), o.lr, static_cast<long long>(o.steps),
              static_cast<unsigned long long>(o.seed), hg::get_num_threads(), hg::cpu_summary().c_str());
  std::vector<Run> runs = {{.label = "fp32", .bf16 = false},
                           {.label = "bf16-masters", .masters = true},
                           {.label = "bf16-nearest"},
                           {.label = "bf16-stochastic", .rounding = ParamRounding::Stochastic},
                           {.label = "bf16-kahan", .rounding = ParamRounding::Kahan}};
  for (Run& r : runs) {
    train(o, d, r);
    std::printf("  %-16s done in %.1f s\n", r.label.c_str(), r.seconds);
    std::fflush(stdout);
  }
  std::printf("\n%-16s %9s %9s %10s %9s %9s %12s %8s\n", "run", "test acc", "vs fp32", "last loss", "kept",
              "lost", "bytes/param", "time");
  for (const Run& r : runs)
    std::printf("%-16s %9.4f %+8.2fp %10.4f %8.1f%% %8.1f%% %12.1f %7.1fs\n", r.label.c_str(), r.acc,
                100.0 * (r.acc - runs[0].acc), r.loss, 100.0 * r.kept, std::max(0.0, 100.0 * (1.0 - r.kept)), r.bytes_per_param,
                r.seconds);
  std::printf("kept: sum(A * I) / sum(I * I) over all weights, A the movement of a weight over the run and I the sum "
              "of the updates -lr * g the optimizer computed for it (in F32); lost = 1 - kept, the share of the "
              "intended movement that never reached the weights. bytes/param: weights + FP32 masters + Kahan "
              "compensation (plain SGD keeps no other state). last loss: mean training loss of the last 100 steps.\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return example::guarded_main("pure_bf16", [&] { return run(parse(argc, argv)); });
}
