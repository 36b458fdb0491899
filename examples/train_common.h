#pragma once
// What the Fashion-MNIST examples share: command-line flags, data loading, the training loop with a
// progress bar, evaluation and the one-line JSON summary. Each example only builds its model and
// optimizer.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

#include "data/dataloader.h"
#include "data/idx.h"
#include "halfgrad.h"
#include "nn/nn.h"
#include "ops/loss.h"
#include "optim/optimizer.h"

namespace example {

struct Args {
  std::string name = {};
  int epochs = 1;
  int64_t batch = 64;
  double lr = 0.01;
  uint64_t seed = 0;
  int threads = 0;  // 0: keep OMP_NUM_THREADS / all cores
  std::string device = "cpu";
  std::string data = {};  // empty: $HG_FASHION_MNIST_DIR or /usr/share/datasets/fashion-mnist
  int64_t limit = 0;     // >0: train on the first `limit` samples only (quick runs)
  int64_t max_steps = 0; // >0: stop each epoch after this many steps (timing runs)
  std::string amp = "off";  // off | fp16 | bf16: autocast dtype for forward and loss (fp16 adds a GradScaler)
};

[[noreturn]] inline void usage(const Args& a, const std::string& problem) {
  std::fprintf(stderr,
               "%s: %s\nusage: %s [--epochs N] [--batch N] [--lr X] [--seed N] [--threads N] [--device cpu|cuda]\n"
               "          [--data DIR] [--limit N] [--max-steps N] [--amp off|fp16|bf16]\n"
               "defaults: --epochs %d --batch %lld --lr %g --seed 0 --device cpu\n",
               a.name.c_str(), problem.c_str(), a.name.c_str(), a.epochs, static_cast<long long>(a.batch), a.lr);
  std::exit(2);
}

// Parses flags over the example's defaults; a bad flag prints the usage and exits with status 2.
inline Args parse_args(int argc, char** argv, Args a) {
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (f == "--help" || f == "-h") usage(a, "help");
    if (i + 1 >= argc) usage(a, "flag " + f + " needs a value");
    const std::string v = argv[++i];
    try {
      if (f == "--epochs") a.epochs = std::stoi(v);
      else if (f == "--batch") a.batch = std::stoll(v);
      else if (f == "--lr") a.lr = std::stod(v);
      else if (f == "--seed") a.seed = std::stoull(v);
      else if (f == "--threads") a.threads = std::stoi(v);
      else if (f == "--device") a.device = v;
      else if (f == "--data") a.data = v;
      else if (f == "--limit") a.limit = std::stoll(v);
      else if (f == "--max-steps") a.max_steps = std::stoll(v);
      else if (f == "--amp") a.amp = v;
      else usage(a, "unknown flag " + f);
    } catch (const std::logic_error&) {
      usage(a, "bad value '" + v + "' for " + f);
    }
  }
  if (a.epochs < 1 || a.batch < 1 || a.lr <= 0) usage(a, "epochs, batch and lr must be positive");
  if (a.device != "cpu" && a.device != "cuda") usage(a, "device must be cpu or cuda, got " + a.device);
  if (a.amp != "off" && a.amp != "fp16" && a.amp != "bf16") usage(a, "amp must be off, fp16 or bf16, got " + a.amp);
  return a;
}

inline hg::Device device_of(const Args& a) { return a.device == "cuda" ? hg::Device::cuda() : hg::Device::cpu(); }

struct Data {
  hg::data::TensorDataset train, test;
};

// Fashion-MNIST as (N,1,28,28) F32 images normalised with the dataset's mean/std, I64 labels.
inline Data load_data(const Args& a) {
  using namespace hg::data;
  const std::string dir = a.data.empty() ? fashion_mnist_dir() : a.data;
  MnistSplit tr = load_fashion_mnist(dir, Split::Train), te = load_fashion_mnist(dir, Split::Test);
  normalize_(tr.images, {kFashionMnistMean}, {kFashionMnistStd});
  normalize_(te.images, {kFashionMnistMean}, {kFashionMnistStd});
  if (a.limit > 0 && a.limit < tr.images.size(0)) {
    tr.images = tr.images.slice(0, 0, a.limit);
    tr.labels = tr.labels.slice(0, 0, a.limit);
  }
  return {{tr.images, tr.labels}, {te.images, te.labels}};
}

// One line that redraws itself on a terminal, or a line per quarter epoch in a log.
class ProgressBar {
 public:
  ProgressBar(int epoch, int epochs, int64_t steps) : epoch_(epoch), epochs_(epochs), steps_(steps) {
    tty_ = isatty(fileno(stdout)) != 0;
  }
  void update(int64_t step, double steps_per_s, double running_loss) {
    const bool quarter = steps_ >= 4 && step % (steps_ / 4) == 0;
    if (!(tty_ ? step % 10 == 0 || step == steps_ : quarter || step == steps_)) return;
    constexpr int kWidth = 24;
    const int filled = static_cast<int>(kWidth * step / std::max<int64_t>(steps_, 1));
    std::printf("%sepoch %d/%d [%s%s] %lld/%lld  %.0f steps/s  loss %.4f%s", tty_ ? "\r" : "", epoch_, epochs_,
                std::string(static_cast<size_t>(filled), '#').c_str(),
                std::string(static_cast<size_t>(kWidth - filled), '-').c_str(), static_cast<long long>(step),
                static_cast<long long>(steps_), steps_per_s, running_loss, tty_ ? "" : "\n");
    std::fflush(stdout);
  }
  void finish() {
    if (tty_) std::printf("\n");
  }

 private:
  int epoch_, epochs_;
  int64_t steps_;
  bool tty_ = false;
};

// Fraction of test samples whose argmax logit is the label (eval mode, no autograd).
inline double evaluate(hg::nn::Module& model, const hg::data::TensorDataset& test, hg::Device dev) {
  hg::NoGradGuard ng;
  model.eval();
  hg::data::DataLoader loader(test, {.batch_size = 1000, .shuffle = false, .prefetch = false});
  int64_t correct = 0;
  for (auto& [x, y] : loader) {
    const auto pred = hg::argmax(model.forward(x.to(dev)), 1).to_vector<int64_t>();
    const auto lab = y.to_vector<int64_t>();
    for (size_t i = 0; i < pred.size(); ++i) correct += pred[i] == lab[i];
  }
  model.train();
  return static_cast<double>(correct) / static_cast<double>(test.size());
}

struct Summary {
  double accuracy = 0, ms_per_step_median = 0, total_s = 0;
  int64_t steps = 0, peak_bytes = 0;  // peak tensor bytes above the datasets'
  int64_t skipped = 0;                 // steps the GradScaler skipped (inf/NaN gradients)
  double final_scale = 1.0;
};

// The loss of one batch, under autocast when --amp asks for it (the torch.autocast recipe: forward and
// loss inside the region, backward outside).
inline hg::Tensor batch_loss(const Args& a, hg::nn::Module& model, const hg::Tensor& x, const hg::Tensor& y) {
  std::optional<hg::amp::Autocast> ac;
  if (a.amp != "off") ac.emplace(x.device().type, a.amp == "fp16" ? hg::DType::F16 : hg::DType::BF16);
  return hg::cross_entropy(model.forward(x), y);
}

// Trains with cross-entropy, prints a progress bar per epoch, then the test accuracy. With --amp fp16 a
// dynamic GradScaler scales the loss and skips steps whose gradients overflow.
inline Summary train(const Args& a, hg::nn::Module& model, hg::optim::Optimizer& opt, const Data& d) {
  using clock = std::chrono::steady_clock;
  const hg::Device dev = device_of(a);
  hg::amp::GradScaler scaler({.enabled = a.amp == "fp16"});
  hg::data::DataLoader loader(d.train, {.batch_size = a.batch, .shuffle = true, .seed = a.seed});
  std::vector<double> step_ms;
  Summary s;
  hg::memory::reset_peak(dev);
  const int64_t baseline = hg::memory::allocated(dev);  // the datasets (on the CPU) are not training memory
  const auto t_start = clock::now();
  for (int e = 1; e <= a.epochs; ++e) {
    const int64_t steps = a.max_steps > 0 ? std::min(a.max_steps, loader.size()) : loader.size();
    ProgressBar bar(e, a.epochs, steps);
    double running = 0;
    int64_t step = 0;
    const auto t_epoch = clock::now();
    auto t_prev = t_epoch;
    for (auto& [x, y] : loader) {
      const hg::Tensor loss = batch_loss(a, model, x.to(dev), y.to(dev));
      opt.zero_grad();
      scaler.scale(loss).backward();
      s.skipped += scaler.step(opt).stepped ? 0 : 1;
      scaler.update();
      const double l = loss.item();
      running = step == 0 ? l : 0.98 * running + 0.02 * l;
      const auto now = clock::now();
      step_ms.push_back(std::chrono::duration<double, std::milli>(now - t_prev).count());
      t_prev = now;
      ++step;
      bar.update(step, step / std::chrono::duration<double>(now - t_epoch).count(), running);
      if (step == steps) break;
    }
    bar.finish();
  }
  s.total_s = std::chrono::duration<double>(clock::now() - t_start).count();
  s.steps = static_cast<int64_t>(step_ms.size());
  s.final_scale = scaler.is_enabled() ? scaler.get_scale() : 1.0;
  s.peak_bytes = hg::memory::peak_allocated(dev) - baseline;
  std::nth_element(step_ms.begin(), step_ms.begin() + static_cast<int64_t>(step_ms.size() / 2), step_ms.end());
  s.ms_per_step_median = step_ms.empty() ? 0 : step_ms[step_ms.size() / 2];
  s.accuracy = evaluate(model, d.test, dev);
  std::printf("test accuracy %.4f after %d epoch(s)\n", s.accuracy, a.epochs);
  return s;
}

inline void print_summary(const Args& a, const Summary& s) {
  std::printf("{\"example\": \"%s\", \"epochs\": %d, \"batch\": %lld, \"lr\": %g, \"seed\": %llu, \"threads\": %d, "
              "\"device\": \"%s\", \"test_accuracy\": %.4f, \"steps\": %lld, \"ms_per_step_median\": %.4f, "
              "\"total_seconds\": %.2f, \"peak_memory_bytes\": %lld, \"amp\": \"%s\", \"skipped_steps\": %lld, "
              "\"final_scale\": %g}\n",
              a.name.c_str(), a.epochs, static_cast<long long>(a.batch), a.lr,
              static_cast<unsigned long long>(a.seed), hg::get_num_threads(), a.device.c_str(), s.accuracy,
              static_cast<long long>(s.steps), s.ms_per_step_median, s.total_s, static_cast<long long>(s.peak_bytes),
              a.amp.c_str(), static_cast<long long>(s.skipped), s.final_scale);
}

// Parses flags, seeds, sets threads, loads data; returns nonzero on a clear error (printed).
inline int run_example(int argc, char** argv, Args defaults,
                       const std::function<Summary(const Args&, const Data&)>& body) {
  try {
    const Args a = parse_args(argc, argv, std::move(defaults));
    if (a.threads > 0) hg::set_num_threads(a.threads);
    hg::manual_seed(a.seed);
    const Data d = load_data(a);
    std::printf("%s: %lld train / %lld test samples, %d thread(s), device %s\n", a.name.c_str(),
                static_cast<long long>(d.train.size()), static_cast<long long>(d.test.size()), hg::get_num_threads(),
                a.device.c_str());
    print_summary(a, body(a, d));
    return 0;
  } catch (const hg::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

}  // namespace example
