// amp_master_weights: why F16 training keeps FP32 master weights (Micikevicius et al., ICLR 2018, sec. 3.1).
//   ./build/amp_master_weights [--data DIR] [--threads N] [--out DIR] [--steps N] [--lr X] [--seed N] [--quick]
//
// Three runs of the Fashion-MNIST MLP (784-256-128-10, ReLU, batch 64, mean cross-entropy) from the same initial
// weights and data order, plain SGD (no momentum, no weight decay):
//   fp32      amp::initialize O0: F32 weights, the reference;
//   fp16-O2   O2: F16 weights, FP32 master weights in the optimizer, dynamic loss scaling;
//   fp16-O3   O3: pure F16 weights, no masters. Apex's O3 uses loss scale 1; here it gets the same dynamic
//             GradScaler as O2 so that gradient underflow is not what separates the two runs -- only masters do.
// Every --measure-every steps it measures, with amp::inspect::GradientHistogram::record_update, the fraction of
// the nonzero weight updates u that F16 swamps: exactly, fl16(fl16(w) + u) == fl16(w), and by the rule of thumb
// |w| >= 2048 |u|.
//   fp16-O3: u is the update the optimizer computed (-lr * g / scale in F32, as ops/kernels/optim.h does) and w the F16
//            weight it was added to; it also counts what really happened: the F16 weights that did not change.
//   fp16-O2, fp32: u = master after - master before (F32), w = master before: what WOULD be lost if u were added
//            to F16 weights; the F32 master keeps it, so the sum of many small updates still moves the weight.
// The default learning rate is small (1e-3, plain SGD) on purpose: with the usual recipe (lr 0.01, momentum 0.9,
// issue 4) the updates are large next to the weights and O3 loses nothing. The program prints the numbers as
// measured; nothing is chosen after the fact.
//
// Files under --out (default ./amp_out/amp_master_weights): curves.csv (series,step,value: training loss per
// interval and test accuracy per run), swamping.csv (series,step,value[,updates,swamped]: the fraction swamped
// per interval, series "exact/<run>", "rule/<run>" and "unchanged/fp16-O3"), update_ulp16.csv (layer,kind,bin,
// count: per run and parameter the measured updates by log2(|u| / ulp16(w)), the F16 spacing at the weight;
// bins <= -2 are swamped), summary.json.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>

#include "amp/inspect/histogram.h"
#include "amp/inspect/text_file.h"
#include "core/atomic_file.h"
#include "optim/sgd.h"
#include "train_common.h"

namespace {

namespace nn = hg::nn;
namespace insp = hg::amp::inspect;
using hg::Tensor;
using hg::amp::OptLevel;

// threads 1: the MLP's GEMMs are small, a second thread gains little on a shared 2-core machine
struct Options : example::LessonFlags {
  std::string out = "amp_out/amp_master_weights";
  double lr = 1e-3;       // plain SGD
  int64_t measure_every = 5;   // swamping is measured on every k-th step (each costs a host copy of the weights)
  int64_t log_every = 100;     // interval of the curves and the swamping CSV
  int64_t evals = 5;           // test-accuracy points per run (the last one is the final accuracy)
  // training steps per run (batch 64; 938 steps = 1 epoch); --quick: 512 training samples, 1000 test samples,
  // 150 steps, a smoke run
  Options() : LessonFlags(2000) {}
};

[[noreturn]] void usage(const std::string& problem) {
  std::fprintf(stderr,
               "amp_master_weights: %s\nusage: amp_master_weights [--data DIR] [--threads N] [--out DIR] [--steps N] "
               "[--lr X] [--seed N] [--measure-every K] [--quick]\n"
               "  --data DIR         Fashion-MNIST IDX files (default $HG_FASHION_MNIST_DIR or\n"
               "                     /usr/share/datasets/fashion-mnist)\n"
               "  --threads N        OpenMP threads (default 1)\n"
               "  --out DIR          where the CSV/JSON go (default amp_out/amp_master_weights)\n"
               "  --steps N          training steps per run, batch 64 (default 2000; --quick: 150)\n"
               "  --lr X             plain SGD learning rate (default 1e-3; try 0.1 to see the effect vanish)\n"
               "  --measure-every K  measure swamping on every K-th step (default 5)\n"
               "  --quick            512 training samples, 1000 test samples, 150 steps (a smoke test)\n",
               problem.c_str());
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  example::parse_lesson_flags(argc, argv, o, [&](const std::string& f, const std::string& v) {
    if (f == "--out") o.out = v;
    else if (f == "--lr") o.lr = example::parse_positive(v);
    else if (f == "--measure-every") o.measure_every = example::parse_number<int64_t>(v, 1);
    else return false;
    return true;
  }, usage);
  if (o.quick && !o.steps_set) o.steps = 150;
  if (o.quick) o.log_every = 25;
  if (o.out.empty()) usage("--out must name a directory");
  return o;
}

// Swamping counts over the measured steps of one interval (or a whole run).
struct Swamp {
  int64_t updates = 0, exact = 0, rule = 0;  // nonzero updates; swamped exactly; by |w| >= 2048 |u|
  int64_t intended = 0, unchanged = 0;       // fp16-O3: nonzero intended updates; F16 weights that did not move
  void add(const Swamp& s) {
    updates += s.updates, exact += s.exact, rule += s.rule, intended += s.intended, unchanged += s.unchanged;
  }
};

struct Interval {
  int64_t step = 0;  // the interval's last step
  double loss = 0;   // mean training loss over the interval
  Swamp swamp = {};
};

struct Run {
  std::string label = {};
  OptLevel level = OptLevel::O0;
  // results
  std::vector<Interval> intervals = {};
  std::vector<std::pair<int64_t, double>> acc = {};  // (step, test accuracy)
  Swamp total = {};
  std::map<std::string, std::vector<int64_t>> ulp_bins = {};  // per parameter: log2(|u| / ulp16(w)) over the run
  double seconds = 0, final_scale = 1;
  int64_t skipped = 0;
};

// The weights the update is judged against, per parameter name, taken before opt.step(): F16 weights for
// fp16-O3, the F32 masters for fp16-O2 (the parameter widened before its first step, which is what the master
// is made from), the F32 weights for fp32.
insp::WeightSnapshot weights_before(const Run& r, const nn::Module& m, const hg::optim::Optimizer& opt) {
  if (r.level != OptLevel::O2) return insp::snapshot_weights(m);
  insp::WeightSnapshot s;
  size_t i = 0;
  for (const auto& [name, p] : m.named_parameters()) {
    const Tensor master = opt.master(i++);
    s[name] = master.defined() ? master.clone() : p.to(hg::DType::F32);
  }
  return s;
}

insp::WeightSnapshot masters_after(const nn::Module& m, const hg::optim::Optimizer& opt) {
  insp::WeightSnapshot s;
  size_t i = 0;
  for (const auto& [name, p] : m.named_parameters()) {
    const Tensor master = opt.master(i++);
    HG_CHECK(master.defined() && master.numel() == p.numel(), "amp_master_weights: parameter ", name,
             " has no F32 master after a step; O2 must set the optimizer's master weights");
    s[name] = master.clone();
  }
  return s;
}

// fp16-O3: the update plain SGD computed for each F16 weight, -lr * (g * (1/scale)) in F32 as
// ops/kernels/optim_rules.h's SgdRule does, recorded against the weight it was added to; and, counted directly, how
// many F16 weights with a nonzero update kept their value.
Swamp record_o3(insp::GradientHistogram& h, const insp::WeightSnapshot& before, const nn::Module& m, double lr,
                double scale) {
  const float neg_lr = static_cast<float>(-lr), inv = static_cast<float>(1.0 / scale);
  Swamp s;
  for (const auto& [name, p] : m.named_parameters()) {
    if (!p.grad().defined()) continue;
    const std::vector<float> g = p.grad().to(hg::DType::F32).to_vector<float>();
    const std::vector<float> w0 = before.at(name).to(hg::DType::F32).to_vector<float>();
    const std::vector<float> w1 = p.to(hg::DType::F32).to_vector<float>();
    std::vector<float> u(g.size());
    for (size_t k = 0; k < g.size(); ++k) {
      u[k] = neg_lr * (g[k] * inv);
      if (u[k] == 0.0f) continue;
      ++s.intended;
      s.unchanged += w1[k] == w0[k];
    }
    h.record_update(name, before.at(name), hg::from_vector(u, p.shape()));
  }
  return s;
}

// The histogram's swamping counts over every parameter (and its |u| / ulp16(w) bins, added to the run's),
// then cleared for the next measurement.
Swamp take_counts(insp::GradientHistogram& h, Run& r) {
  Swamp s;
  for (const auto& [name, kind] : h.keys()) {
    if (kind != insp::Kind::Update) continue;
    const insp::LayerStats& st = h.at(name, kind);
    s.updates += st.updates, s.exact += st.f16_swamped, s.rule += st.f16_swamped_rule;
    std::vector<int64_t>& bins = r.ulp_bins[name];
    if (bins.empty()) bins.assign(insp::kNumExponentBins, 0);
    for (int e = insp::kMinExponent; e <= insp::kMaxExponent; ++e)
      bins[static_cast<size_t>(e - insp::kMinExponent)] += st.ulp_bin(e);
  }
  h.clear();
  return s;
}

struct Trainer {
  const Options& o;
  const example::Data& d;
  Run& r;
  std::shared_ptr<nn::Sequential> model = example::fashion_mnist_mlp();  // right after manual_seed: one init
  hg::optim::SGD opt{model->parameters(), {.lr = o.lr}};
  hg::amp::Properties props = {};
  std::unique_ptr<example::Precision> prec = {};
  std::unique_ptr<hg::amp::GradScaler> scaler = {};
  insp::GradientHistogram hist = {};

  void setup() {
    hg::amp::Overrides ov{.verbose = false};
    if (r.level != OptLevel::O0) ov.dtype = hg::DType::F16;
    props = hg::amp::initialize(*model, opt, r.level, ov);
    prec = std::make_unique<example::Precision>(props);
    hg::amp::GradScalerOptions so = props.scaler_options();
    if (r.level == OptLevel::O3) so = {.enabled = true, .dynamic = true};  // O2's dynamic scaler (see top)
    scaler = std::make_unique<hg::amp::GradScaler>(so);
  }

  // One training step; on a measured step, the swamping counts of its update.
  Swamp train_step(const Tensor& x, const Tensor& y, bool measure, double& loss_out) {
    insp::WeightSnapshot before;
    if (measure) before = weights_before(r, *model, opt);
    const Tensor loss = prec->loss(*model, x, y);
    opt.zero_grad();
    scaler->scale(loss).backward();
    const hg::amp::StepResult res = scaler->step(opt);
    scaler->update();
    loss_out = loss.item();
    if (!res.stepped()) {
      ++r.skipped;
      return {};
    }
    if (!measure) return {};
    Swamp extra;
    if (r.level == OptLevel::O3) extra = record_o3(hist, before, *model, o.lr, res.scale());
    else if (r.level == OptLevel::O2) hist.record_updates(before, masters_after(*model, opt));
    else hist.record_updates(before, *model);
    Swamp s = take_counts(hist, r);
    s.intended = extra.intended, s.unchanged = extra.unchanged;
    return s;
  }

  void close_interval(int64_t step, double loss_sum, int64_t n, const Swamp& s) {
    r.intervals.push_back({.step = step, .loss = loss_sum / static_cast<double>(n), .swamp = s});
    r.total.add(s);
  }

  void evaluate_at(int64_t step) {
    if (r.acc.empty() || r.acc.back().first != step)
      r.acc.emplace_back(step, example::evaluate(*model, d.test, hg::Device::cpu(), *prec));
  }

  void train() {
    setup();
    hg::data::DataLoader loader(d.train, {.batch_size = 64, .shuffle = true, .seed = o.seed});
    const int64_t eval_every = std::max<int64_t>(1, o.steps / o.evals);
    Swamp iv;
    double loss_sum = 0;
    int64_t n = 0, step = 0;
    for (int64_t epoch = 0; step < o.steps; loader.set_epoch(static_cast<uint64_t>(++epoch))) {
      for (auto& [x, y] : loader) {
        double l = 0;
        iv.add(train_step(x, y, step % o.measure_every == 0, l));
        loss_sum += l, ++n, ++step;
        if (step % o.log_every == 0 || step == o.steps) {
          close_interval(step, loss_sum, n, iv);
          iv = {}, loss_sum = 0, n = 0;
        }
        if (step % eval_every == 0 || step == o.steps) evaluate_at(step);
        if (step == o.steps) break;
      }
    }
    r.final_scale = scaler->get_scale();
  }
};

}  // namespace

namespace {

double pct(int64_t n, int64_t d) { return 100.0 * insp::LayerStats::ratio(n, d); }

const Run& find_run(const std::vector<Run>& runs, OptLevel level) {
  for (const Run& r : runs)
    if (r.level == level) return r;
  HG_CHECK(false, "amp_master_weights: no run at this opt level");
  return runs.front();
}

void print_setting(const Options& o, const example::Data& d) {
  std::printf("amp_master_weights: %lld train / %lld test samples, %d thread(s), %lld steps per run\n",
              static_cast<long long>(d.train.size()), static_cast<long long>(d.test.size()), hg::get_num_threads(),
              static_cast<long long>(o.steps));
  std::printf("setting: MLP 784-256-128-10, plain SGD lr %g (no momentum, no weight decay), batch 64, seed %llu; "
              "swamping measured on every %lld-th step.\n", o.lr, static_cast<unsigned long long>(o.seed),
              static_cast<long long>(o.measure_every));
  if (o.lr != Options{}.lr)
    std::printf("note: --lr %g is not the default 1e-3; the 'rule' column below shows whether most updates are "
                "still below |w|/2048 at this rate.\n", o.lr);
  std::printf("why: a small plain-SGD step makes lr*|grad| smaller than half an F16 ulp of most weights "
              "(|w| >= 2048 |u|), the paper's second reason for FP32 masters (sec. 3.1); with the usual recipe (lr 0.01, "
              "momentum 0.9: ~100x larger steps) O3 loses nothing. Both F16 runs use a dynamic loss scaler (init 2^16), "
              "so gradient underflow is not the cause of any gap: only the FP32 masters differ.\n");
}

void print_curves_table(const std::vector<Run>& runs) {
  const Run &f32 = find_run(runs, OptLevel::O0), &o2 = find_run(runs, OptLevel::O2), &o3 = find_run(runs, OptLevel::O3);
  std::printf("\n== training loss per interval and the share of updates F16 swamps (exact) ==\n");
  std::printf("%7s %10s %10s %10s %16s %16s\n", "step", "loss fp32", "loss O2", "loss O3", "O3 swamped", "O2 as F16");
  const size_t n = f32.intervals.size(), every = std::max<size_t>(1, n / 10);
  for (size_t i = 0; i < n; ++i) {
    if (i % every != 0 && i + 1 != n) continue;
    const Swamp &s3 = o3.intervals[i].swamp, &s2 = o2.intervals[i].swamp;
    std::printf("%7lld %10.4f %10.4f %10.4f %15.2f%% %15.2f%%\n", static_cast<long long>(f32.intervals[i].step),
                f32.intervals[i].loss, o2.intervals[i].loss, o3.intervals[i].loss, pct(s3.exact, s3.updates),
                pct(s2.exact, s2.updates));
  }
}

void print_summary(const std::vector<Run>& runs) {
  std::printf("\n== summary (same initial weights and data order) ==\n");
  std::printf("%-9s %9s %10s %8s %11s %11s %10s %10s %12s %7s\n", "run", "test acc", "final loss", "skipped",
              "final scale", "updates", "swamped", "rule", "F16 w kept", "time");
  for (const Run& r : runs) {
    const Swamp& s = r.total;
    char kept[32] = "-";
    if (r.level == OptLevel::O3) std::snprintf(kept, sizeof kept, "%.2f%%", pct(s.unchanged, s.intended));
    std::printf("%-9s %9.4f %10.4f %8lld %11g %11lld %9.2f%% %9.2f%% %12s %6.1fs\n", r.label.c_str(),
                r.acc.back().second, r.intervals.back().loss, static_cast<long long>(r.skipped), r.final_scale,
                static_cast<long long>(s.updates), pct(s.exact, s.updates), pct(s.rule, s.updates), kept,
                r.seconds);
  }
  std::printf("updates: nonzero weight updates on the measured steps. swamped: fl16(fl16(w)+u) == fl16(w) "
              "(fp16-O3: what happened to its F16 weights; fp16-O2/fp32: what would be lost if the master's update "
              "were added to F16 weights -- the F32 master keeps it). rule: |w| >= 2048 |u|. F16 w kept: fp16-O3's "
              "F16 weights with a nonzero update that did not change, counted directly. final loss: the last "
              "interval's mean training loss.\n");
}

void print_reading(const std::vector<Run>& runs) {
  const Run &f32 = find_run(runs, OptLevel::O0), &o2 = find_run(runs, OptLevel::O2), &o3 = find_run(runs, OptLevel::O3);
  const double a32 = f32.acc.back().second, a2 = o2.acc.back().second, a3 = o3.acc.back().second;
  std::printf("\nreading: pure F16 (O3) lost %.2f%% of its weight updates to swamping (%.2f%% of its F16 weights did "
              "not move); with FP32 masters (O2) %.2f%% of the updates would have been lost on F16 weights but "
              "accumulate in the master. Test accuracy fp32 %.4f, fp16-O2 %.4f, fp16-O3 %.4f: O2 - O3 = %+.2f "
              "points, fp32 - O2 = %+.2f points.\n",
              pct(o3.total.exact, o3.total.updates), pct(o3.total.unchanged, o3.total.intended),
              pct(o2.total.exact, o2.total.updates), a32, a2, a3, 100 * (a2 - a3), 100 * (a32 - a2));
  if (100 * (a2 - a3) < 1.0)
    std::printf("At this setting the masters made less than 1 point of difference: the updates are large enough "
                "next to the weights for F16 to keep most of them.\n");
  else
    std::printf("The swamped updates are the small ones; without a master they are dropped every step, so O3 "
                "learns more slowly than O2, which follows fp32.\n");
}

// series,step,value: loss/<run> per interval (mean training loss) and acc/<run> at each evaluation.
void write_curves(const std::string& path, const std::vector<Run>& runs) {
  std::ostringstream os;
  os << "series,step,value\n";
  for (const Run& r : runs) {
    for (const Interval& iv : r.intervals)
      os << "loss/" << r.label << "," << iv.step << "," << insp::json_number(iv.loss) << "\n";
    for (const auto& [step, acc] : r.acc)
      os << "acc/" << r.label << "," << step << "," << insp::json_number(acc) << "\n";
  }
  hg::write_file_atomic("amp_master_weights", path, os.str());
}

// series,step,value,updates,swamped: per interval the fraction of the measured nonzero updates F16 swamps,
// exactly (exact/<run>) and by the rule (rule/<run>), and fp16-O3's unchanged F16 weights (unchanged/fp16-O3).
void write_swamping(const std::string& path, const std::vector<Run>& runs) {
  std::ostringstream os;
  os << "series,step,value,updates,swamped\n";
  const auto row = [&](const std::string& series, int64_t step, int64_t n, int64_t d) {
    os << series << "," << step << "," << insp::json_number(insp::LayerStats::ratio(n, d)) << "," << d << "," << n
       << "\n";
  };
  for (const Run& r : runs)
    for (const Interval& iv : r.intervals) {
      row("exact/" + r.label, iv.step, iv.swamp.exact, iv.swamp.updates);
      row("rule/" + r.label, iv.step, iv.swamp.rule, iv.swamp.updates);
      if (r.level == OptLevel::O3) row("unchanged/" + r.label, iv.step, iv.swamp.unchanged, iv.swamp.intended);
    }
  hg::write_file_atomic("amp_master_weights", path, os.str());
}

// layer,kind,bin,count (plot.py's histogram input): per run (kind) and parameter (layer), the measured
// updates by log2(|u| / ulp16(w)); bins e <= -2 are below half an F16 spacing, where F16 drops the update.
void write_update_ratio(const std::string& path, const std::vector<Run>& runs) {
  std::ostringstream os;
  os << "layer,kind,bin,count\n";
  for (const Run& r : runs) {
    const std::string kind = r.level == OptLevel::O3   ? r.label + ": updates to its F16 weights"
                             : r.level == OptLevel::O2 ? r.label + ": master updates, judged against F16 weights"
                                                       : r.label + ": F32 updates, judged against F16 weights";
    for (const auto& [name, bins] : r.ulp_bins)
      for (int e = insp::kMinExponent; e <= insp::kMaxExponent; ++e)
        if (const int64_t n = bins[static_cast<size_t>(e - insp::kMinExponent)]; n > 0)
          os << insp::csv_field(name) << "," << insp::csv_field(kind) << "," << e << "," << n << "\n";
  }
  hg::write_file_atomic("amp_master_weights", path, os.str());
}

void write_summary(const std::string& path, const Options& o, const std::vector<Run>& runs) {
  std::ostringstream os;
  os << "{\"example\": \"amp_master_weights\", \"lr\": " << insp::json_number(o.lr) << ", \"steps\": " << o.steps
     << ", \"batch\": 64, \"momentum\": 0, \"seed\": " << o.seed << ", \"measure_every\": " << o.measure_every
     << ", \"runs\": [";
  for (size_t i = 0; i < runs.size(); ++i) {
    const Run& r = runs[i];
    const Swamp& s = r.total;
    os << (i ? ", " : "") << "{\"run\": " << insp::json_string(r.label)
       << ", \"test_accuracy\": " << insp::json_number(r.acc.back().second)
       << ", \"final_loss\": " << insp::json_number(r.intervals.back().loss) << ", \"skipped_steps\": " << r.skipped
       << ", \"final_scale\": " << insp::json_number(r.final_scale) << ", \"updates_measured\": " << s.updates
       << ", \"swamped_fraction\": " << insp::json_number(insp::LayerStats::ratio(s.exact, s.updates))
       << ", \"swamped_rule_fraction\": " << insp::json_number(insp::LayerStats::ratio(s.rule, s.updates));
    if (r.level == OptLevel::O3)
      os << ", \"f16_weights_unchanged_fraction\": "
         << insp::json_number(insp::LayerStats::ratio(s.unchanged, s.intended));
    os << ", \"seconds\": " << insp::json_number(r.seconds) << "}";
  }
  os << "]}\n";
  hg::write_file_atomic("amp_master_weights", path, os.str());
}

void write_outputs(const Options& o, const std::vector<Run>& runs) {
  std::filesystem::create_directories(o.out);
  const std::string dir = std::filesystem::path(o.out).string() + "/";
  write_curves(dir + "curves.csv", runs);
  write_swamping(dir + "swamping.csv", runs);
  write_update_ratio(dir + "update_ulp16.csv", runs);
  write_summary(dir + "summary.json", o, runs);
  std::printf("\nwrote %scurves.csv, %sswamping.csv, %supdate_ulp16.csv, %ssummary.json\nplot them with:\n",
              dir.c_str(), dir.c_str(), dir.c_str(), dir.c_str());
  std::printf("  python3 scripts/plot.py curves %scurves.csv -o %scurves.png --title \"fp32 vs fp16-O2 (FP32 masters) "
              "vs fp16-O3 (pure F16), SGD lr %g\"\n", dir.c_str(), dir.c_str(), o.lr);
  std::printf("  python3 scripts/plot.py curves %sswamping.csv -o %sswamping.png --title \"share of weight updates "
              "swamped in F16\"\n", dir.c_str(), dir.c_str());
  std::printf("  python3 scripts/plot.py histogram %supdate_ulp16.csv -o %supdate_ulp16.png --markers ulp --logy "
              "--title \"weight updates against the F16 spacing of their weight\"\n", dir.c_str(), dir.c_str());
}

int run(const Options& o) {
  hg::set_num_threads(o.threads);
  example::Args a{.name = "amp_master_weights", .data = o.data, .limit = o.quick ? 512 : 0};
  example::Data d = example::load_data(a);
  if (o.quick) d.test = {d.test.inputs.slice(0, 0, 1000), d.test.targets.slice(0, 0, 1000)};
  print_setting(o, d);
  std::vector<Run> runs = {{.label = "fp32", .level = OptLevel::O0},
                           {.label = "fp16-O2", .level = OptLevel::O2},
                           {.label = "fp16-O3", .level = OptLevel::O3}};
  for (Run& r : runs) {
    std::printf("training %s ...\n", r.label.c_str());
    std::fflush(stdout);
    const auto t0 = std::chrono::steady_clock::now();
    hg::manual_seed(o.seed);  // the same initial weights (rounded to F16 for O2/O3) and data order
    Trainer t{.o = o, .d = d, .r = r};
    t.train();
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  print_curves_table(runs);
  print_summary(runs);
  print_reading(runs);
  write_outputs(o, runs);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return example::guarded_main("amp_master_weights", [&] { return run(parse(argc, argv)); });
}
