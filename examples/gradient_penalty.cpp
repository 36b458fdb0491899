// gradient_penalty: input-gradient regularisation ("double backpropagation", Drucker & LeCun 1992) on a small
// Fashion-MNIST CNN, in F32 and under mixed precision, with PyTorch's gradient-penalty recipe for a GradScaler
// (docs/AMP.md, section 10; docs/API.md, "Higher-order gradients").
//   ./build/gradient_penalty [--data DIR] [--steps N] [--lambda X] [--epsilon X] [--seed N] [--threads N] [--quick]
//
// The loss of a batch of B images is L = mean_i l_i + lambda * P, with P = mean_i |d l_i / d x_i|^2 the squared
// norm of each sample's loss gradient with respect to its own pixels. P's gradient with respect to the weights is a
// second derivative: autograd::grad(L, x, create_graph) gives d L / d x as a graph, P is built from it, and the
// backward of L + lambda P runs through that graph (conv2d, ReLU, max pooling and linear, differentiated twice).
// Four runs of the same CNN from the same weights and data order (Adam, lr 1e-3, batch 64):
//   f32            F32, lambda = 0: the reference;
//   f32-penalty    F32 with the penalty;
//   f16-penalty    F16 autocast (O1) with a GradScaler: the input gradients of the *scaled* loss (so they do not
//                  underflow either), unscaled by hand, the penalty built in F32 outside the region, the penalised
//                  loss scaled again for backward; a step whose scaled gradients overflow is skipped as usual;
//   bf16-penalty   BF16 autocast, no scaler (BF16 has F32's range).
// Columns: test accuracy (in the run's precision); accuracy on FGSM-perturbed test images x + epsilon sign(d l / d x)
// (one gradient step against each image, Goodfellow et al. 2015; epsilon in units of the normalised pixels) and
// |dl/dx|, the mean norm of the per-sample input gradient on the test set, both taken in F32 for every run (the
// weights are F32 in all of them; F16 gradients of confident samples would underflow without a scaler); the
// penalty P over the last 100 steps; the logits' dtype in training; the GradScaler's final scale; the skipped
// steps; the time. The lesson: the penalty makes the model flatter around the data (|dl/dx| smaller: the smoke
// test asks for at most 0.7 times at lambda 5), which buys accuracy under the perturbation for some clean
// accuracy; the F16 (with the scaler recipe) and BF16 runs follow the F32 penalty run.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "optim/adam.h"
#include "train_common.h"

namespace {

namespace nn = hg::nn;
using hg::DType;
using hg::Tensor;

struct Options : example::LessonFlags {
  double lambda = 5.0;
  double epsilon = 0.1;
  Options() : LessonFlags(2000) {}  // batch 64: 938 steps = 1 epoch
};

[[noreturn]] void usage(const std::string& problem) {
  example::exit_with_usage(
      "gradient_penalty", problem,
      "[--data DIR] [--steps N] [--lambda X] [--epsilon X] [--seed N] [--threads N] [--quick]\n"
      "  --steps N          training steps per run, batch 64 (default 2000; --quick: 300)\n"
      "  --lambda X         weight of the input-gradient penalty (default 5)\n"
      "  --epsilon X        FGSM step on the normalised test images (default 0.1)\n"
      "  --quick            4096 training and 2000 test samples, 300 steps: a smoke run");
}

Options parse(int argc, char** argv) {
  Options o;
  example::parse_lesson_flags(argc, argv, o, [&](const std::string& f, const std::string& v) {
    if (f == "--lambda") o.lambda = example::parse_positive(v);
    else if (f == "--epsilon") o.epsilon = example::parse_positive(v);
    else return false;
    return true;
  }, usage);
  if (o.quick && !o.steps_set) o.steps = 300;
  return o;
}

struct Run {
  std::string label;
  bool penalty = true;
  std::optional<DType> autocast = std::nullopt;  // O1 in this dtype; F16 with a GradScaler
  // results
  double acc = 0, fgsm_acc = 0, grad_norm = 0, last_penalty = 0, seconds = 0, final_scale = 1;
  int64_t skipped = 0;
  DType logits_dtype = DType::F32;
};

// conv 1->8 3x3 pad 1, ReLU, maxpool 2, conv 8->16 3x3 pad 1, ReLU, maxpool 2, linear 784->10: small, since
// three of the four runs differentiate it twice every step.
std::shared_ptr<nn::Sequential> small_cnn() {
  return std::make_shared<nn::Sequential>(nn::Conv2d(1, 8, 3, {.padding = 1}), nn::ReLU(),
                                          nn::MaxPool2d({.kernel_size = 2}), nn::Conv2d(8, 16, 3, {.padding = 1}),
                                          nn::ReLU(), nn::MaxPool2d({.kernel_size = 2}), nn::Flatten(),
                                          nn::Linear(16 * 7 * 7, 10));
}

// The batch's logits under the run's autocast region (none for F32).
Tensor logits(nn::Module& model, const Tensor& x, const Run& r) {
  std::optional<hg::amp::Autocast> ac;
  if (r.autocast) ac.emplace(hg::DeviceType::CPU, *r.autocast);
  return model.forward(x);
}

// Per-sample input gradients of the test images (sum of the losses: each row is its own sample's d l_i / d x_i,
// eval mode, no coupling between samples), their mean norm, and the accuracy on x + epsilon sign(gradient), all in
// F32 (no autocast region: every run's weights are F32).
void evaluate_robustness(nn::Module& model, const hg::data::TensorDataset& test, Run& r, double epsilon) {
  const Run f32{.label = "f32 evaluation", .penalty = false};
  model.eval();
  hg::data::DataLoader loader(test, {.batch_size = 500, .shuffle = false, .prefetch = false});
  double norm_sum = 0;
  int64_t correct = 0, n = 0;
  for (auto& [x0, y] : loader) {
    const Tensor x = x0.detach().requires_grad_();
    const Tensor loss = hg::cross_entropy(logits(model, x, f32), y, {.reduction = hg::Reduction::Sum});
    const Tensor g = hg::autograd::grad({loss}, {x})[0];
    const std::vector<float> norms = hg::sqrt(hg::sum(g * g, {1, 2, 3})).to_vector<float>();
    for (const float v : norms) norm_sum += v;
    hg::NoGradGuard no_grad;
    const Tensor step = (hg::gt(g, 0.0).to(DType::F32) - hg::lt(g, 0.0).to(DType::F32)) * epsilon;  // sign(0) = 0
    const std::vector<int64_t> pred = hg::argmax(logits(model, x.detach() + step, f32), 1).to_vector<int64_t>();
    const std::vector<int64_t> lab = y.to_vector<int64_t>();
    for (size_t i = 0; i < pred.size(); ++i) correct += pred[i] == lab[i];
    n += static_cast<int64_t>(lab.size());
  }
  model.train();
  r.grad_norm = norm_sum / static_cast<double>(n);
  r.fgsm_acc = static_cast<double>(correct) / static_cast<double>(n);
}

void train(const Options& o, const example::Data& d, Run& r) {
  hg::manual_seed(o.seed);
  std::shared_ptr<nn::Sequential> model = small_cnn();
  hg::optim::Adam opt(model->parameters(), {.lr = 1e-3});
  // F16 needs a scaler; F32 and BF16 do not (enabled = false makes every call a pass-through, as torch's)
  hg::amp::GradScaler scaler({.enabled = r.autocast == DType::F16});
  hg::data::DataLoader loader(d.train, {.batch_size = 64, .shuffle = true, .seed = o.seed});
  const auto t0 = std::chrono::steady_clock::now();
  double penalty_sum = 0;
  int64_t penalty_n = 0, step = 0;
  for (int64_t epoch = 0; step < o.steps; loader.set_epoch(static_cast<uint64_t>(++epoch))) {
    for (auto& [x0, y] : loader) {
      opt.zero_grad();
      const Tensor x = x0.detach().requires_grad_(r.penalty);
      const Tensor out = logits(*model, x, r);
      r.logits_dtype = out.dtype();
      Tensor loss = hg::cross_entropy(out, y);
      if (r.penalty) {
        // d L / d x of the scaled loss as a graph; unscaled by hand (not a parameter's .grad: unscale_ never sees it)
        const Tensor gx = hg::autograd::grad({scaler.scale(loss)}, {x}, {}, {.create_graph = true})[0];
        const double inv_scale = 1.0 / scaler.get_scale();
        const double batch = static_cast<double>(x.size(0));
        // P = mean_i |d l_i / d x_i|^2 = B * sum (d L / d x)^2, since d L / d x_i = (1/B) d l_i / d x_i
        const Tensor p = hg::sum(hg::pow(gx.to(DType::F32) * inv_scale, 2.0)) * batch;
        if (o.steps - step <= 100) penalty_sum += p.item(), ++penalty_n;
        loss = loss + p * o.lambda;
      }
      scaler.scale(loss).backward();
      const hg::amp::StepResult res = scaler.step(opt);
      scaler.update();
      if (!res.stepped()) ++r.skipped;
      if (++step == o.steps) break;
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.final_scale = scaler.get_scale();
  r.last_penalty = penalty_n > 0 ? penalty_sum / static_cast<double>(penalty_n) : 0.0;
  example::Precision prec({});
  if (r.autocast) prec.autocast = true, prec.dtype = *r.autocast;
  r.acc = example::evaluate(*model, d.test, hg::Device::cpu(), prec);
  evaluate_robustness(*model, d.test, r, o.epsilon);
}

int run(const Options& o) {
  hg::set_num_threads(o.threads);
  example::Args a;
  a.data = o.data;
  if (o.quick) a.limit = 4096;
  example::Data d = example::load_data(a);
  if (o.quick) d.test = {d.test.inputs.slice(0, 0, 2000), d.test.targets.slice(0, 0, 2000)};
  std::printf("gradient_penalty: %lld train / %lld test samples, CNN 1-8-16 (3x3, max pool), Adam lr 1e-3, batch 64, "
              "%lld steps, lambda %g, FGSM epsilon %g, seed %llu, %d thread(s) on %s\n",
              static_cast<long long>(d.train.size()), static_cast<long long>(d.test.size()),
              static_cast<long long>(o.steps), o.lambda, o.epsilon, static_cast<unsigned long long>(o.seed),
              hg::get_num_threads(), hg::cpu_summary().c_str());
  std::vector<Run> runs = {{.label = "f32", .penalty = false},
                           {.label = "f32-penalty"},
                           {.label = "f16-penalty", .autocast = DType::F16},
                           {.label = "bf16-penalty", .autocast = DType::BF16}};
  for (Run& r : runs) {
    train(o, d, r);
    std::printf("  %-14s done in %.1f s\n", r.label.c_str(), r.seconds);
    std::fflush(stdout);
  }
  std::printf("\n%-14s %9s %9s %9s %9s %7s %9s %8s %7s\n", "run", "test acc", "fgsm acc", "|dl/dx|", "penalty",
              "logits", "scale", "skipped", "time");
  for (const Run& r : runs)
    std::printf("%-14s %9.4f %9.4f %9.4f %9.4f %7s %9g %8lld %6.1fs\n", r.label.c_str(), r.acc, r.fgsm_acc, r.grad_norm,
                r.last_penalty, hg::dtype_name(r.logits_dtype), r.final_scale, static_cast<long long>(r.skipped),
                r.seconds);
  std::printf("fgsm acc: accuracy on x + epsilon sign(d l / d x) (one gradient step against each test image); |dl/dx|: "
              "mean norm of each test sample's loss gradient with respect to its pixels (both in F32 for every run); "
              "penalty: mean_i |d l_i / d x_i|^2 over the last 100 training steps (0: not trained with it); logits: "
              "their dtype in training (the autocast region's); scale: the GradScaler's last (1: none); skipped: steps "
              "it skipped for an overflow.\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return example::guarded_main("gradient_penalty", [&] { return run(parse(argc, argv)); });
}
