// fp8_training: the Fashion-MNIST MLP trained with its Linear layers in FP8 (ops/fp8_linear.h), next to FP32 and
// BF16 autocast, and the configurations that break FP8.
//   ./build/fp8_training [--model mlp|cnn] [--data DIR] [--steps N] [--seed N] [--threads N] [--csv DIR] [--quick]
//                        [--device cpu|cuda]
//
// Every run starts from the same initial weights and data order (MLP 784-256-128-10, ReLU, batch 64, SGD lr 0.05
// momentum 0.9, cross-entropy in F32):
//   fp32            the reference;
//   bf16            BF16 autocast (amp::Autocast on the CPU);
//   fp8-delayed     Transformer Engine's default recipe: HYBRID (E4M3 forward, E5M2 gradients), delayed scaling
//                   from an amax history of 1024 steps, "max";
//   fp8-current     HYBRID, the scale from each tensor's own amax;
//   mxfp8           MXFP8: one power-of-two scale per 32 values (rounded up, as TE), E4M3/E5M2 elements;
// and what breaks:
//   fp8-unscaled    HYBRID with every scale 1: weights (~0.03) and gradients (~1e-5) are below or at the bottom
//                   of E4M3's and E5M2's range and flush to zero;
//   fp8-margin-8    delayed scaling with margin -8: scales 256x too large, so the largest values saturate;
//   fp8-e4m3-grads  current scaling with E4M3 gradients (TE's E4M3 format): one exponent bit fewer for dy
//                   (it spans 2^17.8 instead of E5M2's 2^31.8);
//   fp8-history-1   delayed scaling with a one-step history: each cast uses the last step's amax.
// --model cnn trains the examples' CNN (conv 32, conv 64, linear 3136-128-10) instead, 600 steps, the first five
// runs: FP8 applies to its Linear layers (nn::convert_to_fp8 swaps them for nn::Fp8Linear), as Transformer
// Engine's does (it has no FP8 convolution), and its convolutions run under BF16 autocast in the FP8 runs.
// Per run: test accuracy, training loss, ms per step, and, over the steps the statistics were sampled on (every 50),
// the mean fractions of elements saturated and flushed to zero per tensor role, and the bytes of FP8 state.
// --csv DIR writes the data of docs/AMP.md's FP8 figures (scripts/make_figures.sh): fp8_stats.csv (run, step, layer,
// role, amax, scale, saturated, flushed, every 50 steps); curves.csv (the second Linear layer's input and output gradient:
// amax x scale over the format's largest value per run every 50 steps, and for the delayed runs, every step of a
// 200-step window from step 1000 (half the run if shorter; not timed), dy's amax against fmax/scale, the amax the
// scale was made for); hist.csv (GradientHistogram of the fp32 run's last 20 steps: activations, their gradients,
// weights, weight gradients, the unscaled values an FP8 cast would get) and layers.csv (its layers' legend names).
//
// On a CPU, FP8 is emulated: the casts are extra passes over each tensor, and the GEMM is the BF16 one (FP8 values
// decoded exactly to BF16), so an FP8 step costs more than a BF16 step; the timing column shows by how much.
// --device cuda trains on the GPU (autocast for CUDA); on FP8 Tensor Cores (sm_89+) a GEMM whose m, n and k are
// multiples of 16 runs natively (cuBLASLt), and the "native" column gives the share of the FP8 GEMMs that did (the
// MLP's last layer has 10 outputs, so its GEMMs take the decode route).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "amp/inspect/histogram.h"
#include "benchmarks/bench_util.h"
#include "optim/sgd.h"
#include "hist_labels.h"
#include "train_common.h"

namespace {

namespace nn = hg::nn;
using hg::Fp8Recipe;
using hg::Fp8Role;
using hg::Fp8Scaling;
using hg::DType;
using hg::Tensor;

struct Options : example::LessonFlags {
  Options() : LessonFlags(2000) {}  // --model cnn and --quick pick other counts unless --steps is given
  std::string csv, model = "mlp";
  hg::Device device = hg::Device::cpu();
};

[[noreturn]] void usage(const std::string& problem) {
  example::exit_with_usage("fp8_training", problem,
                           "[--model mlp|cnn] [--data DIR] [--steps N] [--seed N] [--threads N] [--csv DIR] [--quick]\n"
                           "       [--device cpu|cuda]\n"
                           "  --model mlp|cnn    the MLP (default, nine runs) or the CNN (five runs, FP8 in its Linear layers)\n"
                           "  --steps N          training steps per run, batch 64 (default 2000, CNN 600; --quick: 300, CNN 100)\n"
                           "  --csv DIR          write DIR/fp8_stats.csv (amax, scale, saturated, flushed per step)\n"
                           "  --quick            4096 training samples, 300 steps: a smoke run\n"
                           "  --device cpu|cuda  where the runs train (default cpu)");
}

Options parse(int argc, char** argv) {
  Options o;
  example::parse_lesson_flags(argc, argv, o, [&](const std::string& f, const std::string& v) {
    if (f == "--model" && (v == "mlp" || v == "cnn")) o.model = v;
    else if (f == "--csv") o.csv = v;
    else if (f == "--device" && (v == "cpu" || v == "cuda")) o.device = v == "cuda" ? hg::Device::cuda() : hg::Device::cpu();
    else return false;
    return true;
  }, usage);
  if (!o.steps_set) o.steps = o.model == "cnn" ? (o.quick ? 100 : 600) : (o.quick ? 300 : 2000);
  return o;
}

struct Run {
  std::string label;
  enum Kind { F32, BF16, FP8 } kind = FP8;
  Fp8Recipe recipe = {};
  // results
  double acc = 0, loss = 0, ms_per_step = 0;
  double saturated[3] = {0, 0, 0}, flushed[3] = {0, 0, 0};  // mean over the sampled steps and layers, per role
  int64_t state_bytes = 0;
  int64_t gemms = 0, native_gemms = 0;  // the training steps' FP8 GEMMs, and those run on FP8 Tensor Cores
};

constexpr int64_t kSampleEvery = 50;
constexpr int64_t kHistSteps = 20;  // the fp32 run's last steps go into hist.csv

// What --csv collects: fp8_stats.csv and curves.csv are kept in memory and written atomically at the end
// (core/atomic_file.h: a failed write leaves the previous files as they were), hist.csv by the histogram.
struct Figures {
  std::ostringstream stats, curves;
  hg::amp::inspect::GradientHistogram hist;
  std::string hist_labels;  // layers.csv: the histogram's layers named (examples/hist_labels.h)
};

// The upper panels of the scaling figure (delayed scaling's lag: dy's amax against the amax its scale was made
// for) take every step of a window, where a step-by-step view shows the lag; those steps are not timed.
constexpr int64_t kLagSteps = 200;
int64_t lag_from(int64_t steps) { return std::min<int64_t>(1000, steps / 2); }

std::vector<nn::Fp8Linear*> fp8_layers(nn::Module& m) {
  std::vector<nn::Fp8Linear*> out;
  for (const auto& [name, mod] : m.named_modules())
    if (auto* l = dynamic_cast<nn::Fp8Linear*>(mod.get())) out.push_back(l);
  return out;
}

bool shows_lag(const Run& r) { return r.label == "fp8-delayed" || r.label == "fp8-history-1"; }

// curves.csv rows of one step of the second Linear layer: its input's (x, after a ReLU) and output gradient's (dy)
// scaled amax at a sampled step (scaled), dy's amax against the amax its scale was made for in the lag window (lag).
void write_curves(std::ostringstream& out, const Run& r, const nn::Fp8Linear& layer, int64_t step, bool scaled,
                  bool lag, int64_t lag_start) {
  const hg::Fp8LinearState& st = layer.fp8_state();
  // the panels name the layer ("Linear 256->128") and say in words what is plotted
  const std::string name = "Linear " + std::to_string(layer.in_features) + "->" + std::to_string(layer.out_features);
  for (const Fp8Role role : {Fp8Role::Input, Fp8Role::GradOutput}) {
    const hg::Fp8CastStats& s = st.stats(role);
    const bool x = role == Fp8Role::Input;
    const DType f8 = x ? st.recipe().forward_dtype() : st.recipe().backward_dtype();
    const double fmax = f8 == DType::F8E4M3 ? hg::kF8E4M3Max : hg::kF8E5M2Max;
    // no slash in a panel name: it ends the name in curves.csv
    const std::string panel = name + (x ? " input x" : " output gradient dy") +
                              ": scaled amax as a share of the format's largest value";
    if (scaled && r.recipe.scaling != Fp8Scaling::Mx)
      out << panel << "/" << r.label << "," << step << "," << double(s.amax) * s.scale / fmax << "\n";
    if (lag && !x) {  // dy's amax against the scale's, every step of the window
      const std::string p2 = name + " dy amax in steps " + std::to_string(lag_start) + "-" +
                             std::to_string(lag_start + kLagSteps - 1) + " (" + r.label +
                             "): the amax against the largest value its scale keeps";
      out << p2 << "/" << r.label << ": amax this step," << step << "," << s.amax << "\n";
      out << p2 << "/" << r.label << ": fmax over scale," << step << "," << fmax / s.scale << "\n";
    }
  }
}

void train(const Options& o, const example::Data& d, Run& r, Figures* fig) {
  hg::manual_seed(o.seed);
  const hg::Device dev = o.device;
  std::shared_ptr<nn::Sequential> model =
      o.model == "cnn" ? std::make_shared<nn::Sequential>(
                             nn::Conv2d(1, 32, 3, {.padding = 1}), nn::ReLU(), nn::MaxPool2d({.kernel_size = 2}),
                             nn::Conv2d(32, 64, 3, {.padding = 1}), nn::ReLU(), nn::MaxPool2d({.kernel_size = 2}),
                             nn::Flatten(), nn::Linear(64 * 7 * 7, 128), nn::ReLU(), nn::Linear(128, 10))
                       : example::fashion_mnist_mlp();
  model->to(dev);
  if (r.kind == Run::FP8) nn::convert_to_fp8(*model, r.recipe);  // its Linear layers become nn::Fp8Linear
  hg::optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});
  hg::data::DataLoader loader(d.train, {.batch_size = 64, .shuffle = true, .seed = o.seed});
  const std::vector<nn::Fp8Linear*> layers = fp8_layers(*model);
  double loss_sum = 0, samples = 0;
  int64_t loss_n = 0, step = 0;
  // the steps that sampled no statistics (those copy tensors to the host), the device synchronized around each
  hg::bench::StepTimer timer(dev);
  auto forward = [&](const Tensor& x) {
    std::optional<hg::amp::Autocast> ac;
    std::optional<hg::amp::Fp8Autocast> fp8;
    if (r.kind == Run::BF16 || (r.kind == Run::FP8 && o.model == "cnn")) ac.emplace(dev.type, hg::DType::BF16);
    if (r.kind == Run::FP8) fp8.emplace(r.recipe);
    return model->forward(x).to(hg::DType::F32);
  };
  const int64_t lag0 = lag_from(o.steps);  // the first step of the lag panels' window
  for (int64_t epoch = 0; step < o.steps; loader.set_epoch(static_cast<uint64_t>(++epoch))) {
    for (auto& [xh, yh] : loader) {
      const Tensor x = xh.to(dev), y = yh.to(dev);
      const bool sample = r.kind == Run::FP8 && step % kSampleEvery == 0 && step > 0;
      const bool lag = fig != nullptr && shows_lag(r) && step >= lag0 && step < lag0 + kLagSteps;
      const bool hist = fig != nullptr && r.kind == Run::F32 && step >= o.steps - kHistSteps;
      if (hist && step == o.steps - kHistSteps) fig->hist.watch(*model);
      for (size_t li = 0; li < layers.size(); ++li) layers[li]->fp8_state().track_stats = sample || (lag && li == 1);
      timer.start();
      opt.zero_grad();
      const Tensor loss = hg::cross_entropy(forward(x), y);
      loss.backward();
      if (hist) {
        fig->hist.record_weight_grads(*model);
        fig->hist.record_weights(*model);
      }
      opt.step();
      const float lv = loss.item<float>();
      if (!sample && !lag) timer.lap();
      if (o.steps - step <= 100) loss_sum += std::isfinite(lv) ? lv : 1e9, ++loss_n;
      if (sample) {
        samples += 1;
        for (size_t li = 0; li < layers.size(); ++li)
          for (int role = 0; role < 3; ++role) {
            const hg::Fp8CastStats& s = layers[li]->fp8_state().stats(static_cast<Fp8Role>(role));
            r.saturated[role] += s.saturated / static_cast<double>(layers.size());
            r.flushed[role] += s.flushed / static_cast<double>(layers.size());
            if (fig != nullptr)
              fig->stats << r.label << "," << step << "," << li << "," << hg::fp8_role_name(static_cast<Fp8Role>(role))
                         << "," << s.amax << "," << s.scale << "," << s.saturated << "," << s.flushed << "\n";
          }
      }
      if (fig != nullptr && (sample || lag)) write_curves(fig->curves, r, *layers[1], step, sample, lag, lag0);
      if (++step == o.steps) break;
    }
  }
  if (fig != nullptr && r.kind == Run::F32) {
    fig->hist.unwatch();
    fig->hist_labels = example::hist_labels_csv(fig->hist, *model);
  }
  for (int role = 0; role < 3; ++role) {
    r.saturated[role] /= std::max(samples, 1.0);
    r.flushed[role] /= std::max(samples, 1.0);
  }
  for (nn::Fp8Linear* l : layers) r.gemms += l->fp8_state().gemms(), r.native_gemms += l->fp8_state().native_gemms();
  r.ms_per_step = 1000.0 * timer.summary().median;
  r.loss = loss_sum / static_cast<double>(std::max<int64_t>(loss_n, 1));
  for (nn::Fp8Linear* l : layers)
    for (const auto& [k, t] : l->extra_state()) r.state_bytes += t.nbytes();
  // evaluation in the run's own precision
  hg::NoGradGuard ng;
  model->eval();
  hg::data::DataLoader test(d.test, {.batch_size = 1000, .shuffle = false, .prefetch = false});
  int64_t correct = 0;
  for (auto& [x, y] : test) {
    const auto pred = hg::argmax(forward(x.to(dev)), 1).to_vector<int64_t>();
    const auto lab = y.to_vector<int64_t>();
    for (size_t i = 0; i < pred.size(); ++i) correct += pred[i] == lab[i];
  }
  r.acc = static_cast<double>(correct) / static_cast<double>(d.test.size());
}

int run(const Options& o) {
  hg::set_num_threads(o.threads);
  example::Args a;
  a.data = o.data;
  if (o.quick) a.limit = 4096;
  const example::Data d = example::load_data(a);
  std::printf("fp8_training: %lld train / %lld test samples, %s, SGD lr 0.05 momentum 0.9, batch 64, "
              "%lld steps, seed %llu, %d thread(s) on %s, device %s\n", static_cast<long long>(d.train.size()),
              static_cast<long long>(d.test.size()),
              o.model == "cnn" ? "CNN conv32-conv64-3136-128-10 (FP8 runs: Linear in FP8, convolutions in BF16)"
                               : "MLP 784-256-128-10",
              static_cast<long long>(o.steps),
              static_cast<unsigned long long>(o.seed), hg::get_num_threads(), hg::cpu_summary().c_str(),
              o.device.is_cpu() ? "cpu" : hg::cuda::version_info().c_str());
  std::vector<Run> runs = {
      {.label = "fp32", .kind = Run::F32},
      {.label = "bf16", .kind = Run::BF16},
      {.label = "fp8-delayed", .recipe = {.scaling = Fp8Scaling::Delayed}},
      {.label = "fp8-current", .recipe = {.scaling = Fp8Scaling::Current}},
      {.label = "mxfp8", .recipe = {.scaling = Fp8Scaling::Mx}},
      {.label = "fp8-unscaled", .recipe = {.scaling = Fp8Scaling::Unscaled}},
      {.label = "fp8-margin-8", .recipe = {.scaling = Fp8Scaling::Delayed, .margin = -8.0f}},
      {.label = "fp8-e4m3-grads", .recipe = {.scaling = Fp8Scaling::Current, .format = hg::Fp8Format::E4M3}},
      {.label = "fp8-history-1", .recipe = {.scaling = Fp8Scaling::Delayed, .amax_history_len = 1}},
  };
  if (o.model == "cnn") runs.resize(5);  // fp32, bf16, delayed, current, MXFP8
  std::unique_ptr<Figures> fig;
  if (!o.csv.empty()) {
    std::filesystem::create_directories(o.csv);
    fig = std::make_unique<Figures>();
    (void)hg::atomic_write_target("fp8_training", o.csv + "/fp8_stats.csv");  // a directory there: the error now, not after the runs
    fig->stats << "run,step,layer,role,amax,scale,saturated,flushed\n";
    fig->curves << "series,step,value\n";
  }
  for (Run& r : runs) {
    train(o, d, r, fig.get());
    std::printf("  %-15s done: %s\n", r.label.c_str(),
                r.kind == Run::FP8 ? hg::describe(r.recipe).c_str() : r.kind == Run::BF16 ? "BF16 autocast" : "F32");
    std::fflush(stdout);
  }
  std::printf("\n%-15s %9s %9s %10s %8s %8s %8s %8s %8s %8s %8s %9s %7s\n", "run", "test acc", "vs bf16", "last loss",
              "ms/step", "sat x", "sat w", "sat dy", "flush x", "flush w", "flush dy", "fp8 state", "native");
  const double bf16_acc = runs[1].acc;
  for (const Run& r : runs) {
    std::printf("%-15s %9.4f %+8.2fp %10.4f %8.2f", r.label.c_str(), r.acc, 100.0 * (r.acc - bf16_acc), r.loss, r.ms_per_step);
    if (r.kind == Run::FP8)
      std::printf(" %7.3f%% %7.3f%% %7.3f%% %7.2f%% %7.2f%% %7.2f%% %8lldB %6.0f%%\n", 100 * r.saturated[0],
                  100 * r.saturated[1], 100 * r.saturated[2], 100 * r.flushed[0], 100 * r.flushed[1], 100 * r.flushed[2],
                  static_cast<long long>(r.state_bytes), 100.0 * double(r.native_gemms) / double(std::max<int64_t>(r.gemms, 1)));
    else
      std::printf(" %8s %8s %8s %8s %8s %8s %9s %7s\n", "-", "-", "-", "-", "-", "-", "-", "-");
  }
  std::printf("sat/flush: mean share of a tensor's elements that saturated (past the format's largest value after "
              "scaling) or were flushed to zero (non-zero, FP8 value 0), over the layers and the steps sampled every %lld "
              "(x: layer inputs, w: weights, dy: output gradients). fp8 state: the amax histories and scales a "
              "checkpoint keeps (delayed scaling only). last loss: mean of the last 100 training steps. native: share of "
              "the training steps' FP8 GEMMs run on FP8 Tensor Cores (0%% on a CPU: FP8 decoded to BF16).\n",
              static_cast<long long>(kSampleEvery));
  if (fig) {
    hg::write_file_atomic("fp8_training", o.csv + "/fp8_stats.csv", fig->stats.str());
    hg::write_file_atomic("fp8_training", o.csv + "/curves.csv", fig->curves.str());
    fig->hist.write_csv(o.csv + "/hist.csv");
    hg::write_file_atomic("fp8_training", o.csv + "/layers.csv", fig->hist_labels);
    std::printf("wrote %s/fp8_stats.csv, curves.csv, hist.csv, layers.csv\n", o.csv.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return example::guarded_main("fp8_training", [&] { return run(parse(argc, argv)); });
}
