// amp_underflow: why F16 training needs loss scaling (Micikevicius et al., ICLR 2018, sec. 3.2, fig. 3).
//   ./build/amp_underflow [--data DIR] [--threads N] [--out DIR] [--steps N] [--seed N] [--grad-shift K] [--quick]
//
// --grad-shift K makes underflow hurt on purpose: every run multiplies its loss by 2^-K before backward and
// its SGD learning rate by 2^K. Powers of two are exact, so the F32 run (gradients, momentum, updates)
// does the same arithmetic at a lower exponent and trains as without the shift, while every gradient of
// the F16 runs sits K binades lower, closer to and below 2^-24. Sweeping K shows how much signal the
// unscaled run can lose before it costs accuracy, and that loss scaling (which starts at 2^16 and grows
// every 2000 clean steps) gives it back.
//
// Part 1 trains the Fashion-MNIST MLP for 3 epochs (784-256-128-10, ReLU, SGD momentum 0.9, lr 0.01, batch 64, mean
// cross-entropy: the usual recipe) in F32 and, over its last few batches, records with GradientHistogram
// the activation gradients (the gradient reaching each layer's output) and the weight gradients. Per
// layer it prints the fraction of the nonzero values below 2^-24, F16's smallest subnormal (they would
// flush to zero or round up to 2^-24 if stored in F16), as they are (loss scale 1), at the scale the
// dynamic GradScaler of part 2 settled at, and at 2^16 (its initial scale).
//
// Part 2 trains three runs from the same initial weights and data order:
//   fp32            the reference;
//   fp16-unscaled   amp::initialize O2 with Overrides{.loss_scale = 1}: F16 weights (FP32 masters), so the
//                   forward and backward of every layer store F16 and every activation gradient is an F16
//                   tensor -- with scale 1 the small ones flush. (O1 would keep F16 activation gradients
//                   too, but O2 is the paper's setup: F16 weights, activations and gradients.)
//   fp16-dynamic    the same with the dynamic GradScaler (init 2^16, back off on inf/NaN).
// For each it prints test accuracy, final loss and, on a fixed probe batch, the fraction of the nonzero
// activation gradients that F16 flushes at the run's loss scale (computed from the same batch's F32
// gradients with the run's final weights, rounded as core/half.h rounds).
//
// Files under --out (default ./amp_out/amp_underflow): hist.csv/hist.json (part 1, GradientHistogram),
// layers.csv (a legend name per recorded layer),
// curves.csv (series,step,value: loss of the three runs, mean over windows of 10 steps, and their test
// accuracy at 6 points), summary.json.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include "amp/inspect/histogram.h"
#include "amp/inspect/text_file.h"
#include "core/atomic_file.h"
#include "optim/sgd.h"
#include "hist_labels.h"
#include "train_common.h"

namespace {

namespace nn = hg::nn;
namespace insp = hg::amp::inspect;
using hg::Tensor;

struct Options {
  std::string data, out = "amp_out/amp_underflow";
  // One thread by default: the MLP's GEMMs are small, so a second thread gains little, and OpenMP threads
  // spin-waiting on cores that other processes use can make a step 10x slower.
  int threads = 1;
  int64_t steps = 2814;  // training steps per run: 3 epochs of batch 64
  int64_t hist_batches = 4;
  uint64_t seed = 0;
  bool quick = false;  // 512 training samples, 1000 test samples, 24 steps: a smoke run
  int grad_shift = 0;  // --grad-shift K: loss x 2^-K, lr x 2^K
};

[[noreturn]] void usage(const std::string& problem) {
  std::fprintf(stderr,
               "amp_underflow: %s\nusage: amp_underflow [--data DIR] [--threads N] [--out DIR] [--steps N] "
               "[--seed N] [--grad-shift K] [--quick]\n"
               "  --data DIR   Fashion-MNIST IDX files (default $HG_FASHION_MNIST_DIR or\n"
               "               /usr/share/datasets/fashion-mnist)\n"
               "  --threads N  OpenMP threads (default 1)\n"
               "  --out DIR    where the CSV/JSON go (default amp_out/amp_underflow)\n"
               "  --steps N    training steps per run, batch 64 (default 2814 = 3 epochs)\n"
               "  --grad-shift K  multiply the loss by 2^-K and the learning rate by 2^K (0..60, default 0):\n"
               "               F32 trains the same, F16's gradients sit K binades lower\n"
               "  --quick      512 training samples, 24 steps, 1000 test samples (a smoke test)\n",
               problem.c_str());
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  bool steps_set = false;
  auto on_switch = [&](const std::string& f) {
    if (f != "--quick") return false;
    o.quick = true;
    return true;
  };
  auto on_value = [&](const std::string& f, const std::string& v) {
    if (f == "--data") o.data = v;
    else if (f == "--out") o.out = v;
    else if (f == "--threads") o.threads = example::parse_number<int>(v, 1, hg::max_num_threads());
    else if (f == "--steps") o.steps = example::parse_number<int64_t>(v, 1), steps_set = true;
    else if (f == "--seed") o.seed = example::parse_number<uint64_t>(v);
    else if (f == "--grad-shift") o.grad_shift = example::parse_number<int>(v, 0, 60);
    else return false;
    return true;
  };
  example::parse_flags(argc, argv, on_switch, on_value, usage);
  if (o.quick && !steps_set) o.steps = 24;
  if (o.out.empty()) usage("--out must name a directory");
  o.hist_batches = std::min<int64_t>(o.hist_batches, o.steps);
  return o;
}

// Fraction of the nonzero finite values that are below 2^-24 once multiplied by 2^log2_scale. Exact from the
// log2 bins: bin e holds [2^e, 2^(e+1)), all below 2^-24 after scaling iff e + log2_scale <= -25.
double below_f16_subnormal(const insp::LayerStats& s, int log2_scale) {
  int64_t n = 0;
  for (int e = insp::kMinExponent; e <= -25 - log2_scale && e <= insp::kMaxExponent; ++e) n += s.bin(e);
  return s.fraction(n + s.below_range);
}

int log2_of(double scale) {
  const int k = static_cast<int>(std::lround(std::log2(scale)));
  HG_CHECK(std::ldexp(1.0, k) == scale, "amp_underflow: loss scale ", scale, " is not a power of two");
  return k;
}

struct Run {
  std::string label = {};
  hg::amp::OptLevel level = hg::amp::OptLevel::O0;
  std::optional<double> static_scale = {};  // set: a static scale (1 = no scaling)
  // results
  std::vector<double> losses = {};
  std::vector<std::pair<int64_t, double>> accuracies = {};  // (step, test accuracy), kEvals points
  double accuracy = 0, final_loss = 0, final_scale = 1, seconds = 0;
  int64_t skipped = 0;
  std::shared_ptr<nn::Sequential> model = {};
  hg::amp::Properties props = {};
};

struct RunContext {
  const Options& o;
  const example::Data& d;
  insp::GradientHistogram* hist = nullptr;  // watches the last hist_batches steps (fp32 run)
};

double mean_tail(const std::vector<double>& v, size_t n) {
  n = std::min(n, v.size());
  double s = 0;
  for (size_t i = v.size() - n; i < v.size(); ++i) s += v[i];
  return n ? s / static_cast<double>(n) : 0.0;
}

constexpr int64_t kEvals = 6;  // test-accuracy points per run (the last one is the final accuracy)

// One training run from the seed's initial weights; the histogram (when given) watches the last steps.
void train_run(Run& r, const RunContext& c) {
  const auto t0 = std::chrono::steady_clock::now();
  hg::manual_seed(c.o.seed);
  r.model = example::fashion_mnist_mlp();
  const double shift = std::ldexp(1.0, -c.o.grad_shift);  // the loss's factor; the lr's is its inverse
  hg::optim::SGD opt(r.model->parameters(), {.lr = 0.01 / shift, .momentum = 0.9});
  hg::amp::Overrides ov{.loss_scale = r.static_scale, .verbose = false};
  if (r.level != hg::amp::OptLevel::O0) ov.dtype = hg::DType::F16;
  r.props = hg::amp::initialize(*r.model, opt, r.level, ov);
  const example::Precision prec(r.props);
  hg::amp::GradScaler scaler(r.props.scaler_options());
  hg::data::DataLoader loader(c.d.train, {.batch_size = 64, .shuffle = true, .seed = c.o.seed});
  for (int64_t step = 0, epoch = 0; step < c.o.steps; loader.set_epoch(static_cast<uint64_t>(++epoch))) {
    for (auto& [x, y] : loader) {
      const bool watch = c.hist && step == c.o.steps - c.o.hist_batches;
      if (watch) c.hist->watch(*r.model, {.activations = false});
      const Tensor loss = prec.loss(*r.model, x, y);
      opt.zero_grad();
      // the shift in F32 (an F16 loss times 2^-K could underflow itself): the gradient entering the F16
      // graph is S x 2^-K
      if (c.o.grad_shift) (scaler.scale(loss).to(hg::DType::F32) * shift).backward();
      else scaler.scale(loss).backward();
      if (c.hist && step >= c.o.steps - c.o.hist_batches) c.hist->record_weight_grads(*r.model);
      r.skipped += scaler.step(opt).stepped() ? 0 : 1;
      scaler.update();
      r.losses.push_back(loss.item());
      ++step;
      if (step * kEvals / c.o.steps != (step - 1) * kEvals / c.o.steps)
        r.accuracies.emplace_back(step, example::evaluate(*r.model, c.d.test, hg::Device::cpu(), prec));
      if (step == c.o.steps) break;
    }
  }
  if (c.hist) c.hist->unwatch();
  r.final_scale = scaler.is_enabled() ? scaler.get_scale() : 1.0;
  r.final_loss = mean_tail(r.losses, 20);
  r.accuracy = r.accuracies.back().second;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Activation gradients of the probe batch, in F32, with r's final weights, judged at r's loss scale: the
// fraction F16 would flush (round to 0) and the fraction below 2^-24, over all watched layers.
struct ProbeResult {
  double flushed = 0, below = 0;
  int64_t nonzero = 0;
};

ProbeResult probe(const Run& r, const Tensor& x, const Tensor& y, int grad_shift) {
  auto m = example::fashion_mnist_mlp();
  nn::StateDict sd = r.model->state_dict();
  for (auto& [k, v] : sd) v = v.to(hg::DType::F32);  // the F16 runs' weights, exactly widened
  m->load_state_dict(sd);
  insp::GradientHistogram h;
  h.set_loss_scale(r.final_scale);
  h.watch(*m, {.activations = false});
  (hg::cross_entropy((*m)(x), y) * std::ldexp(1.0, -grad_shift)).backward();
  h.unwatch();
  int64_t flush = 0, below = 0;
  ProbeResult p;
  for (const auto& [name, kind] : h.keys()) {
    const insp::LayerStats& s = h.at(name, kind);
    flush += s.f16.flush, below += s.f16.below_min_subnormal, p.nonzero += s.nonzero();
  }
  p.flushed = insp::LayerStats::ratio(flush, p.nonzero);
  p.below = insp::LayerStats::ratio(below, p.nonzero);
  return p;
}

// An upper bound on the share of the activation gradients' L1 mass (sum of |g|) that lies below 2^-24 at
// loss scale 1, from the log2 bins: bin e holds magnitudes in [2^e, 2^(e+1)), so the flushed bins carry at
// most 2^(e+1) each and every bin at least 2^e. Many flushed values can still be a tiny share of the signal.
double act_grad_mass_below_bound(const insp::GradientHistogram& h) {
  double below = 0, total = 0;
  for (const auto& [name, kind] : h.keys()) {
    if (kind != insp::Kind::ActivationGrad) continue;
    const insp::LayerStats& s = h.at(name, kind);
    for (int e = insp::kMinExponent; e <= insp::kMaxExponent; ++e) {
      const double n = static_cast<double>(s.bin(e));
      total += n * std::ldexp(1.0, e);
      if (e <= -25) below += n * std::ldexp(1.0, e + 1);
    }
  }
  return total > 0 ? std::min(1.0, below / total) : 0.0;
}

void print_part1(const insp::GradientHistogram& h, const nn::Module& model, double settled) {
  const int ks = log2_of(settled);
  std::printf("\n== part 1: F32 gradients of the last %s, fraction of nonzero values below 2^-24 (F16 flush) ==\n",
              "training batches");
  std::printf("%-22s %-16s %10s %10s %12s %11s %7s %8s %6s\n", "layer", "kind", "nonzero", "scale 1",
              ("settled 2^" + std::to_string(ks)).c_str(), "init 2^16", "min e", "zeros", "max e");
  for (const auto& [name, kind] : h.keys()) {
    const insp::LayerStats& s = h.at(name, kind);
    HG_CHECK(s.f16.below_min_subnormal == std::llround(below_f16_subnormal(s, 0) * static_cast<double>(s.nonzero())),
             "amp_underflow: the bins and GradientHistogram's own count disagree for ", name);
    int emin = 0, emax = 0;
    for (int e = insp::kMinExponent; e <= insp::kMaxExponent; ++e)
      if (s.bin(e) > 0) {
        emin = e;
        break;
      }
    for (int e = insp::kMaxExponent; e >= insp::kMinExponent; --e)
      if (s.bin(e) > 0) {
        emax = e;
        break;
      }
    const std::string label = kind == insp::Kind::ActivationGrad ? example::layer_label(model, name) : name;
    std::printf("%-22s %-16s %10lld %9.4f%% %11.4f%% %10.4f%% %7d %7.2f%% %6d\n", label.c_str(), insp::kind_name(kind),
                static_cast<long long>(s.nonzero()), 100 * below_f16_subnormal(s, 0), 100 * below_f16_subnormal(s, ks),
                100 * below_f16_subnormal(s, 16), emin, 100 * insp::LayerStats::ratio(s.zeros, s.count), emax);
  }
  std::printf("(min e / max e: the smallest / largest nonzero magnitude is in [2^e, 2^(e+1)); 2^-24 = 5.96e-8 is F16's smallest "
              "subnormal; settled: the dynamic scaler's scale at the end of part 2, init: its initial scale;\n"
              " zeros: the share of all values that are exactly 0 already in F32 (a ReLU's inactive units), which "
              "no format loses)\n");
  std::printf("the activation gradients below 2^-24 at scale 1 carry at most %.2g of their L1 mass (sum of |g|, "
              "bounded from the log2 bins)\n", act_grad_mass_below_bound(h));
}

// layer,label: a legend name for each recorded layer of the histogram (plot.py --labels; examples/hist_labels.h).
void write_labels(const std::string& path, const insp::GradientHistogram& h, const nn::Module& model) {
  hg::write_file_atomic("amp_underflow", path, example::hist_labels_csv(h, model));
}

// series,step,value: each run's loss as the mean of windows of 10 steps (step = the window's last step), and
// its test accuracy at kEvals points.
void write_curves(const std::string& path, const std::vector<Run>& runs) {
  std::ostringstream os;
  os << "series,step,value\n";
  for (const Run& r : runs)
    for (size_t i = 0; i < r.losses.size(); i += 10) {
      const size_t n = std::min<size_t>(10, r.losses.size() - i);
      double s = 0;
      for (size_t j = i; j < i + n; ++j) s += r.losses[j];
      os << "loss/" << r.label << "," << i + n << "," << insp::json_number(s / static_cast<double>(n)) << "\n";
    }
  for (const Run& r : runs)
    for (const auto& [step, acc] : r.accuracies)
      os << "acc/" << r.label << "," << step << "," << insp::json_number(acc) << "\n";
  hg::write_file_atomic("amp_underflow", path, os.str());
}

void write_summary(const std::string& path, const std::vector<Run>& runs, const std::vector<ProbeResult>& probes) {
  std::ostringstream os;
  os << "{\"example\": \"amp_underflow\", \"runs\": [";
  for (size_t i = 0; i < runs.size(); ++i) {
    const Run& r = runs[i];
    os << (i ? ", " : "") << "{\"run\": " << insp::json_string(r.label) << ", \"test_accuracy\": "
       << insp::json_number(r.accuracy) << ", \"final_loss\": " << insp::json_number(r.final_loss)
       << ", \"final_scale\": " << insp::json_number(r.final_scale) << ", \"skipped_steps\": " << r.skipped
       << ", \"act_grad_flushed_fraction\": " << insp::json_number(probes[i].flushed)
       << ", \"act_grad_below_2^-24_fraction\": " << insp::json_number(probes[i].below)
       << ", \"steps\": " << r.losses.size() << ", \"seconds\": " << insp::json_number(r.seconds) << "}";
  }
  os << "]}\n";
  hg::write_file_atomic("amp_underflow", path, os.str());
}

void print_part2(const std::vector<Run>& runs, const std::vector<ProbeResult>& probes, double mass_below) {
  std::printf("\n== part 2: same init and data order, %zu steps each ==\n", runs.front().losses.size());
  std::printf("%-15s %9s %10s %8s %12s %18s %14s %7s\n", "run", "test acc", "final loss", "skipped", "final scale",
              "act grads flushed", "below 2^-24", "time");
  for (size_t i = 0; i < runs.size(); ++i) {
    const Run& r = runs[i];
    std::printf("%-15s %9.4f %10.4f %8lld %12g %17.4f%% %13.4f%% %6.1fs\n", r.label.c_str(), r.accuracy, r.final_loss,
                static_cast<long long>(r.skipped), r.final_scale, 100 * probes[i].flushed, 100 * probes[i].below,
                r.seconds);
  }
  std::printf("final loss: mean of the last 20 training batches. act grads flushed: on one probe batch, the share of "
              "the nonzero activation gradients (F32, this run's final weights) that round to 0 in F16 at this run's "
              "loss scale (fp32: what F16 without scaling would lose; fp32 itself loses none).\n");
  const double unscaled = 100 * (runs[1].accuracy - runs[0].accuracy);
  const double dynamic = 100 * (runs[2].accuracy - runs[0].accuracy);
  std::printf("accuracy vs fp32: fp16-unscaled %+.2f points, fp16-dynamic %+.2f points.\n", unscaled, dynamic);
  std::printf("reading: without scaling F16 flushes %.2f%% of the activation gradients; the dynamic scaler (scale %g) "
              "keeps all but %.4f%%.\n", 100 * probes[1].flushed, runs[2].final_scale, 100 * probes[2].flushed);
  if (std::abs(unscaled) < 0.5)
    std::printf("In this short run the flushed values are the smallest gradients (a logit gradient (p - y)/64 is "
                "tiny where the softmax already matches the label): many values, but at most %.2g of the gradients' "
                "L1 mass (part 1), and losing them did not cost accuracy (|%+.2f| < 0.5 points). What matters is the "
                "signal below 2^-24, not the count: --grad-shift K moves every gradient K binades lower to find where "
                "losing it costs accuracy.\n", mass_below, unscaled);
  else
    std::printf("Losing them cost %.2f accuracy points in this run.\n", -unscaled);
}

int run(const Options& o) {
  hg::set_num_threads(o.threads);
  example::Args a{.name = "amp_underflow", .data = o.data, .limit = o.quick ? 512 : 0};
  example::Data d = example::load_data(a);
  if (o.quick) d.test = {d.test.inputs.slice(0, 0, 1000), d.test.targets.slice(0, 0, 1000)};
  std::printf("amp_underflow: %lld train / %lld test samples, %d thread(s), %lld steps per run\n",
              static_cast<long long>(d.train.size()), static_cast<long long>(d.test.size()), hg::get_num_threads(),
              static_cast<long long>(o.steps));
  if (o.grad_shift)
    std::printf("--grad-shift %d: every loss x 2^-%d before backward, lr 0.01 x 2^%d: F32 trains the same, every F16 "
                "gradient sits %d binades lower\n", o.grad_shift, o.grad_shift, o.grad_shift, o.grad_shift);
  std::vector<Run> runs = {{.label = "fp32"},
                           {.label = "fp16-unscaled", .level = hg::amp::OptLevel::O2, .static_scale = 1.0},
                           {.label = "fp16-dynamic", .level = hg::amp::OptLevel::O2}};
  insp::GradientHistogram hist;
  for (Run& r : runs) {
    std::printf("training %s ...\n", r.label.c_str());
    std::fflush(stdout);
    train_run(r, {.o = o, .d = d, .hist = r.label == "fp32" ? &hist : nullptr});
  }
  print_part1(hist, *runs[0].model, runs[2].final_scale);
  const Tensor px = d.test.inputs.slice(0, 0, 256), py = d.test.targets.slice(0, 0, 256);
  std::vector<ProbeResult> probes;
  for (const Run& r : runs) probes.push_back(probe(r, px, py, o.grad_shift));
  print_part2(runs, probes, act_grad_mass_below_bound(hist));
  std::filesystem::create_directories(o.out);
  const std::string dir = std::filesystem::path(o.out).string() + "/";
  hist.write_csv(dir + "hist.csv");
  hist.write_json(dir + "hist.json");
  write_labels(dir + "layers.csv", hist, *runs[0].model);
  write_curves(dir + "curves.csv", runs);
  write_summary(dir + "summary.json", runs, probes);
  std::printf("\nwrote %shist.csv, %shist.json, %slayers.csv, %scurves.csv, %ssummary.json\nplot them with:\n",
              dir.c_str(), dir.c_str(), dir.c_str(), dir.c_str(), dir.c_str());
  std::printf("  python3 scripts/plot.py histogram %shist.csv -o %shist.png --logy --labels %slayers.csv --scale %g "
              "--title \"F32 gradients vs F16 limits, at scale 1 and at the scaler's\"\n", dir.c_str(), dir.c_str(),
              dir.c_str(), runs[2].final_scale);
  std::printf("  python3 scripts/plot.py curves %scurves.csv -o %scurves.png --title \"test accuracy and "
              "training loss: fp32 vs fp16 unscaled vs fp16 dynamic scaling\"\n", dir.c_str(), dir.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return example::guarded_main("amp_underflow", [&] { return run(parse(argc, argv)); });
}
