// mlp_demo: a 2-layer MLP written with raw ops and manual SGD fits y = sin(3x) + noise, twice:
//   F32:  parameters, activations and gradients in F32;
//   F16:  parameters and activations in F16 with F32 master weights (the update runs on the masters
//         and re-rounds the F16 copy), loss computed in F32, loss scaling to keep F16 gradients from
//         underflowing.
// It prints both loss curves side by side.
//   mlp_demo [--steps N] [--hidden H] [--lr LR] [--seed S]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cli.h"
#include "halfgrad.h"

using namespace hg;

namespace {

struct Config {
  int steps = 2000, hidden = 64, batch = 256, every = 100;
  double lr = 0.05, loss_scale = 1024.0;
  uint64_t seed = 0;
};

struct Params {
  std::vector<Tensor> model;   // what the forward pass uses (F32 or F16)
  std::vector<Tensor> master;  // F32 copies the optimizer updates
};

// W1 (1,H), b1 (H), W2 (H,1), b2 (1); PyTorch-like uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)) init.
Params make_params(const Config& c, DType dt, Generator& gen) {
  auto uniform = [&](Shape s, double bound) { return rand(s, {}, &gen) * (2 * bound) - bound; };
  const double b2 = 1.0 / std::sqrt(static_cast<double>(c.hidden));
  Params p;
  p.master = {uniform({1, c.hidden}, 1.0), uniform({c.hidden}, 1.0), uniform({c.hidden, 1}, b2), uniform({1}, b2)};
  for (const Tensor& m : p.master) {
    Tensor t = m.to(dt).detach();
    t.requires_grad_();
    p.model.push_back(t);
  }
  return p;
}

Tensor forward(const Params& p, const Tensor& x) {
  const Tensor h = tanh(matmul(x, p.model[0]) + p.model[1]);
  return matmul(h, p.model[2]) + p.model[3];
}

// One SGD step on the masters; the model copy is re-rounded from them. Returns the F32 loss.
double train_step(Params& p, const Tensor& x, const Tensor& y, double lr, double scale) {
  const Tensor pred = forward(p, x.to(p.model[0].dtype()));
  const Tensor loss = mean(pow(pred.to(DType::F32) - y, 2.0));  // the loss in F32 whatever the model dtype
  (loss * scale).backward();
  NoGradGuard no_grad;
  for (size_t i = 0; i < p.model.size(); ++i) {
    const Tensor g = p.model[i].grad().to(DType::F32) / scale;  // unscale in F32
    p.master[i] = p.master[i] - g * lr;
    Tensor fresh = p.master[i].to(p.model[i].dtype()).detach();
    fresh.requires_grad_();
    p.model[i] = fresh;
  }
  return loss.item();
}

[[noreturn]] void usage(const std::string& problem) {
  example::exit_with_usage("mlp_demo", problem, "[--steps N] [--hidden H] [--lr LR] [--seed S]");
}

Config parse(int argc, char** argv) {
  Config c;
  auto on_value = [&](const std::string& f, const std::string& v) {
    // hidden: the MLP's width, an int in the example's code (its tensors are far smaller than that)
    if (f == "--steps") c.steps = example::parse_number<int>(v, 1);
    else if (f == "--hidden") c.hidden = example::parse_number<int>(v, 1, 1 << 20);
    else if (f == "--lr") c.lr = example::parse_positive(v);
    else if (f == "--seed") c.seed = example::parse_number<uint64_t>(v);
    else return false;
    return true;
  };
  example::parse_flags(argc, argv, [](const std::string&) { return false; }, on_value, usage);
  return c;
}

}  // namespace


int run(const Config& c) {
  Generator data_gen(c.seed + 1), g32(c.seed), g16(c.seed);
  Params p32 = make_params(c, DType::F32, g32), p16 = make_params(c, DType::F16, g16);
  std::printf("halfgrad mlp_demo: fit y = sin(3x) + 0.05*noise, MLP 1-%d-1 (tanh), batch %d, SGD lr %.3g\n", c.hidden,
              c.batch, c.lr);
  std::printf("  F16 run: F16 parameters/activations, F32 master weights, F32 loss, loss scale %.0f\n\n", c.loss_scale);
  std::printf("%8s  %14s  %14s  %10s\n", "step", "loss F32", "loss F16+mst", "ratio");
  double sum32 = 0, sum16 = 0;
  for (int step = 1; step <= c.steps; ++step) {
    // x ~ U(-2, 2); the target is computed on the host: halfgrad has no sin op (nor needs one here).
    const Tensor x = rand({c.batch, 1}, {}, &data_gen) * 4.0 - 2.0;
    const std::vector<float> xv = x.to_vector<float>(), nv = randn({c.batch, 1}, {}, &data_gen).to_vector<float>();
    std::vector<float> yv(xv.size());
    for (size_t i = 0; i < xv.size(); ++i) yv[i] = std::sin(3.0f * xv[i]) + 0.05f * nv[i];
    const Tensor y = from_vector(yv, {c.batch, 1});
    sum32 += train_step(p32, x, y, c.lr, 1.0);
    sum16 += train_step(p16, x, y, c.lr, c.loss_scale);
    if (step % c.every == 0 || step == c.steps) {
      const int n = step % c.every == 0 ? c.every : step % c.every;
      std::printf("%8d  %14.6f  %14.6f  %10.4f\n", step, sum32 / n, sum16 / n, sum16 / sum32);
      sum32 = sum16 = 0;
    }
  }
  std::printf("\n(each line: mean training MSE over the last steps; the noise floor is 0.0025)\n");
  std::printf("peak memory used by tensors: %.1f KiB\n", static_cast<double>(memory::peak_allocated(Device::cpu())) / 1024);
  return 0;
}

int main(int argc, char** argv) { return example::guarded_main("mlp_demo", [&] { return run(parse(argc, argv)); }); }
