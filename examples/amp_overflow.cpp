// amp_overflow: what dynamic loss scaling does when a step's gradients overflow F16. The Fashion-MNIST
// MLP (784-256-128-10, SGD momentum 0.9, as fashion_mnist_mlp) trains one epoch under FP16 O1 (autocast
// F16 + a dynamic GradScaler whose growth interval is short enough, 200, for growth to show). At chosen
// steps an overflow is injected. The program shows, with numbers it checks:
//   * each injected step is skipped: found_inf is set and every parameter is bit-identical before and
//     after the step (a clean control step does change them, so the comparison can fail);
//   * the scale halves at each injected step and grows again after growth-interval clean steps;
//   * training goes on: the final test accuracy matches a run without injections (same seed, same data
//     order) within the seed-to-seed spread of such clean runs;
//   * where each skipped step's inf came from: the step is re-run (same batch, same weights, the scale it
//     ran at, no optimizer step) inside amp::inspect::NonFiniteOrigin, which names the first op or backward
//     node that turned finite values into inf/NaN. The re-run touches no state the run depends on (RNG,
//     scaler, parameters, momentum; the gradients are zeroed by the next step), and must reproduce the
//     step's loss bit for bit.
// It writes timeline.csv (the injected run's ScalerTimeline), timeline_clean.csv, curves.csv (running
// loss and log2 scale of both runs) and summary.json under --out, and prints the plot commands.
//   ./build/amp_overflow [--inject 300,301,600] [--growth-interval 200] [--quick] [--out DIR]
// Exit status: 0 every check held, 2 bad flags, 1 an error (e.g. no data), 3 a check failed.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "amp/inspect/nonfinite.h"
#include "amp/inspect/timeline.h"
#include "optim/sgd.h"
#include "train_common.h"

namespace {

namespace nn = hg::nn;
namespace ins = hg::amp::inspect;

// How the overflow is injected: the scaled loss is multiplied by 2^60 before backward. The product stays
// finite in F32 (loss * scale * 2^60 stays far below F32's 2^128 at the scales a run reaches), so the
// forward pass and the printed loss are untouched, and the overflow happens where real ones do: when the
// backward pass casts the gradient of the F32 cross-entropy down to F16 for the autocast linear layers,
// values beyond 65504 become inf, and the inf/NaN reaches the weight gradients through the real F16
// kernels. Writing an inf into one .grad() would only test the scaler's finite check; this tests the
// whole path. 2^60 overflows at any scale: even at a scale of 1, a logit gradient of 2^-20 becomes 2^40.
constexpr double kInjectFactor = 1152921504606846976.0;  // 2^60

struct Options {
  std::string data, out = "./amp_out/amp_overflow";
  int threads = 0;
  bool quick = false;
  std::vector<int64_t> inject = {300, 301, 600};
  int64_t growth_interval = 200;
  int epochs = 1;
  uint64_t seed = 0;
  int noise_seeds = 4;  // extra clean runs (seeds seed+1..) to measure the seed-to-seed accuracy spread
  bool inject_set = false, growth_set = false, noise_set = false;
};

[[noreturn]] void usage(const std::string& problem) {
  std::fprintf(stderr,
               "amp_overflow: %s\n"
               "usage: amp_overflow [--data DIR] [--threads N] [--out DIR] [--quick] [--inject A,B,...]\n"
               "                    [--growth-interval N] [--epochs N] [--seed N] [--noise-seeds N]\n"
               "  --inject A,B,...     0-based global steps whose gradients overflow (default 300,301,600;\n"
               "                       --quick: 5,6,10)\n"
               "  --growth-interval N  clean steps before the scale doubles (default 200; --quick: 3)\n"
               "  --noise-seeds N      extra clean runs with other seeds for the accuracy spread (default 4: five seeds in all)\n"
               "  --quick              1024 training / 1000 test samples, for a smoke test in seconds\n"
               "  --out DIR            where the CSV/JSON files go (default ./amp_out/amp_overflow)\n",
               problem.c_str());
  std::exit(2);
}

std::vector<int64_t> parse_steps(const std::string& v) {
  std::vector<int64_t> steps;
  std::stringstream ss(v);
  for (std::string item; std::getline(ss, item, ',');) {
    const auto s = example::parse_number<int64_t>(item, 0);
    steps.push_back(s);
  }
  std::set<int64_t> uniq(steps.begin(), steps.end());
  if (steps.empty() || uniq.size() != steps.size()) throw std::invalid_argument("expected distinct steps, e.g. 300,301,600");
  return {uniq.begin(), uniq.end()};
}

Options parse_options(int argc, char** argv) {
  Options o;
  auto on_value = [&](const std::string& f, const std::string& v) {
    if (f == "--data") o.data = v;
    else if (f == "--out") o.out = v;
    else if (f == "--threads") o.threads = example::parse_number<int>(v, 0, hg::max_num_threads());
    else if (f == "--inject") o.inject = parse_steps(v), o.inject_set = true;
    else if (f == "--growth-interval") o.growth_interval = example::parse_number<int64_t>(v, 1), o.growth_set = true;
    else if (f == "--epochs") o.epochs = example::parse_number<int>(v, 1);
    else if (f == "--seed") o.seed = example::parse_number<uint64_t>(v);
    else if (f == "--noise-seeds") o.noise_seeds = example::parse_number<int>(v, 0), o.noise_set = true;
    else return false;
    return true;
  };
  example::parse_flags(argc, argv, example::switch_flag("--quick", o.quick), on_value, usage);
  if (o.quick && !o.inject_set) o.inject = {5, 6, 10};
  if (o.quick && !o.growth_set) o.growth_interval = 3;
  if (o.quick && !o.noise_set) o.noise_seeds = 1;
  if (o.out.empty()) usage("--out needs a directory");
  return o;
}

// One copy of every parameter's values, compared by their bits (a NaN equals itself).
std::vector<std::vector<float>> snapshot(const std::vector<hg::Tensor>& params) {
  std::vector<std::vector<float>> s;
  for (const hg::Tensor& p : params) s.push_back(p.to_vector<float>());
  return s;
}

int64_t count_changed(const std::vector<std::vector<float>>& before, const std::vector<std::vector<float>>& after) {
  int64_t changed = 0;
  for (size_t i = 0; i < before.size(); ++i)
    for (size_t j = 0; j < before[i].size(); ++j)
      changed += std::memcmp(&before[i][j], &after[i][j], sizeof(float)) != 0;
  return changed;
}

// A step whose parameters were compared before and after: the injected ones and one clean control.
struct Watched {
  int64_t step = 0;
  bool injected = false, found_inf = false, skipped = false;
  int64_t changed = 0, total = 0;  // parameter values whose bits changed, of all
  double scale = 0, next_scale = 0;
};

// Where a skipped step's first non-finite value came from (its re-run inside NonFiniteOrigin).
struct Origin {
  int64_t step = 0;
  bool injected = false, found = false, same_loss = false;  // same_loss: the re-run's loss has the step's bits
  std::string where = {};                                     // NonFiniteFinding::describe()
};

struct RunResult {
  std::string label;
  double accuracy = 0;
  int64_t steps = 0, skipped = 0, natural_overflows = 0;  // natural: found_inf on a step not injected
  double seconds = 0;
  std::vector<double> running_loss = {};
  ins::ScalerTimeline timeline = {};
  std::vector<Watched> watched = {};
  std::vector<Origin> origins = {};  // one per skipped step
};

struct StepOutcome {
  hg::amp::StepResult result;
  double loss = 0;
};

// One iteration of the O1 recipe. The scaled loss is multiplied by loss_factor before backward: 1 for a
// normal step, kInjectFactor to inject an overflow.
StepOutcome train_step(const example::Precision& prec, nn::Module& model, hg::optim::Optimizer& opt,
                       hg::amp::GradScaler& scaler, const hg::Tensor& x, const hg::Tensor& y, double loss_factor) {
  const hg::Tensor loss = prec.loss(model, x, y);
  opt.zero_grad();
  hg::Tensor scaled = scaler.scale(loss);
  if (loss_factor != 1.0) scaled = scaled * loss_factor;
  scaled.backward();
  const hg::amp::StepResult r = scaler.step(opt);
  scaler.update();
  return {r, loss.item()};
}

// Re-runs a skipped step's forward and backward (same batch, same weights, the scale the step ran at, times
// loss_factor as the step did; no scaler call, no optimizer step) inside NonFiniteOrigin. The default
// generator's state is restored (a model with dropout would draw from it); the gradients it leaves are
// dropped by the next step's zero_grad, as the skipped step's own were.
Origin explain_skip(const example::Precision& prec, nn::Module& model, hg::optim::Optimizer& opt, const hg::Tensor& x,
                    const hg::Tensor& y, double scale, double loss_factor, double step_loss) {
  const hg::GeneratorState rng = hg::default_generator().state();
  Origin o;
  {
    ins::NonFiniteOrigin origin(&model);
    const hg::Tensor loss = prec.loss(model, x, y);
    opt.zero_grad();
    hg::Tensor scaled = loss * scale;  // GradScaler::scale's host path: mul(loss, scale)
    if (loss_factor != 1.0) scaled = scaled * loss_factor;
    scaled.backward();
    const double l = loss.item();
    o.found = origin.found();
    o.same_loss = std::memcmp(&l, &step_loss, sizeof l) == 0;
    o.where = origin.describe();
  }
  opt.zero_grad();
  hg::default_generator().set_state(rng);
  return o;
}

hg::amp::GradScaler make_scaler(const hg::amp::Properties& props, int64_t growth_interval) {
  hg::amp::GradScalerOptions so = props.scaler_options();
  so.growth_interval = growth_interval;
  return hg::amp::GradScaler(so);
}

// Trains one run from seed (initial weights and data order); injects at the steps in `inject`.
RunResult train_run(const Options& o, const example::Data& d, const std::set<int64_t>& inject, uint64_t seed,
                    std::string label) {
  const auto t0 = std::chrono::steady_clock::now();
  hg::manual_seed(seed);
  const std::shared_ptr<nn::Sequential> net = example::fashion_mnist_mlp();
  hg::optim::SGD opt(net->parameters(), {.lr = 0.01, .momentum = 0.9});
  const hg::amp::Properties props =
      hg::amp::initialize(*net, opt, hg::amp::OptLevel::O1, {.dtype = hg::DType::F16, .verbose = false});
  const example::Precision prec(props);
  hg::amp::GradScaler scaler = make_scaler(props, o.growth_interval);
  hg::data::DataLoader loader(d.train, {.batch_size = 64, .shuffle = true, .seed = seed});
  const std::vector<hg::Tensor> params = net->parameters();
  RunResult r{.label = std::move(label)};
  bool control_done = false;  // the first clean step is the control: it must change the parameters
  for (int e = 0; e < o.epochs; ++e) {
    for (auto& [x, y] : loader) {
      const bool inj = inject.count(r.steps) > 0, watch = inj || (!control_done && !inject.empty());
      control_done = control_done || (watch && !inj);
      const auto before = watch ? snapshot(params) : std::vector<std::vector<float>>{};
      const StepOutcome out = train_step(prec, *net, opt, scaler, x, y, inj ? kInjectFactor : 1.0);
      r.timeline.record(r.steps, scaler, out.result);
      const ins::TimelineRow& row = r.timeline.rows().back();
      if (row.skipped) {
        r.origins.push_back(explain_skip(prec, *net, opt, x, y, row.scale, inj ? kInjectFactor : 1.0, out.loss));
        r.origins.back().step = r.steps, r.origins.back().injected = inj;
      }
      if (watch)
        r.watched.push_back({r.steps, inj, row.found_inf, row.skipped, count_changed(before, snapshot(params)),
                             net->num_parameters(), row.scale, row.next_scale});
      r.skipped += row.skipped;
      r.natural_overflows += row.found_inf && !inj;
      r.running_loss.push_back(r.running_loss.empty() ? out.loss : 0.98 * r.running_loss.back() + 0.02 * out.loss);
      ++r.steps;
    }
  }
  r.accuracy = example::evaluate(*net, d.test, hg::Device::cpu(), prec);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("trained %-8s (seed %llu): %lld steps, %lld skipped, test accuracy %.4f, %.1f s\n", r.label.c_str(),
              static_cast<unsigned long long>(seed), static_cast<long long>(r.steps), static_cast<long long>(r.skipped),
              r.accuracy, r.seconds);
  std::fflush(stdout);
  return r;
}

// --- the checks and what they print -------------------------------------------------------------------

struct Checks {
  int failed = 0;
  void expect(bool ok, const std::string& what) {
    if (ok) return;
    ++failed;
    std::printf("CHECK FAILED: %s\n", what.c_str());
  }
};

std::string pow2(double v) {
  if (!(v > 0) || !std::isfinite(v)) return std::to_string(v);
  const double e = std::log2(v);
  char buf[64];
  if (e == std::floor(e)) std::snprintf(buf, sizeof buf, "%.0f (2^%.0f)", v, e);
  else std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

void report_watched(const RunResult& r, Checks& c) {
  for (const Watched& w : r.watched) {
    const std::string s = std::to_string(w.step);
    if (w.injected) {
      std::printf("injected step %lld: found_inf %d, %s, parameters %s (%lld of %lld values changed), scale %s -> %s\n",
                  static_cast<long long>(w.step), int{w.found_inf}, w.skipped ? "skipped" : "STEPPED",
                  w.changed == 0 ? "bit-identical" : "CHANGED", static_cast<long long>(w.changed),
                  static_cast<long long>(w.total), pow2(w.scale).c_str(), pow2(w.next_scale).c_str());
      c.expect(w.found_inf && w.skipped, "injected step " + s + " was not skipped");
      c.expect(w.changed == 0, "injected step " + s + " changed the parameters");
      c.expect(w.next_scale == w.scale * 0.5, "the scale did not halve at injected step " + s);
    } else {
      std::printf("control step %lld (clean): %s, parameters changed (%lld of %lld values) -- the comparison "
                  "can see a step\n",
                  static_cast<long long>(w.step), w.skipped ? "SKIPPED" : "stepped", static_cast<long long>(w.changed),
                  static_cast<long long>(w.total));
      c.expect(!w.skipped && w.changed > 0, "the clean control step " + s + " did not change the parameters");
    }
  }
}

// One line per skipped step of a run: where its first inf/NaN came from, from the step's re-run.
void report_origins(const RunResult& r, Checks& c) {
  std::printf("where the skipped steps of the %s run overflowed (each re-run inside NonFiniteOrigin):\n",
              r.label.c_str());
  for (const Origin& o : r.origins) {
    const std::string s = std::to_string(o.step);
    std::printf("step %lld%s: %s\n", static_cast<long long>(o.step), o.injected ? "" : " (natural)", o.where.c_str());
    c.expect(o.found, r.label + " run step " + s + ": the re-run found no non-finite value");
    c.expect(o.same_loss, r.label + " run step " + s + ": the re-run's loss differs from the step's");
  }
  if (r.origins.empty()) std::printf("  (none)\n");
}

// The first growth of the scale after the last injected step.
void report_growth(const RunResult& r, const std::set<int64_t>& inject, const Options& o, Checks& c) {
  const int64_t last = *inject.rbegin();
  for (const ins::TimelineRow& row : r.timeline.rows()) {
    if (row.step <= last || row.next_scale <= row.scale) continue;
    std::printf("growth resumed: after the last injection (step %lld) the scale grew %s -> %s at step %lld "
                "(%lld clean steps later; growth interval %lld)\n",
                static_cast<long long>(last), pow2(row.scale).c_str(), pow2(row.next_scale).c_str(),
                static_cast<long long>(row.step), static_cast<long long>(row.step - last),
                static_cast<long long>(o.growth_interval));
    return;
  }
  c.expect(false, "the scale never grew after the last injection at step " + std::to_string(last) +
                      "; train longer (--epochs) or inject earlier");
}

// Accuracy of the injected run against the clean run with the same seed, and the spread over seeds.
void report_accuracy(const RunResult& clean, const RunResult& injected, const std::vector<double>& seed_accs,
                     const Options& o) {
  const auto [lo, hi] = std::minmax_element(seed_accs.begin(), seed_accs.end());
  const double diff = 100.0 * (injected.accuracy - clean.accuracy), spread = 100.0 * (*hi - *lo);
  std::printf("test accuracy: clean %.4f, injected %.4f, difference %+.2f points\n", clean.accuracy,
              injected.accuracy, diff);
  if (seed_accs.size() < 2) {
    std::printf("seed-to-seed spread: not measured (--noise-seeds 0)\n");
    return;
  }
  std::printf("seed-to-seed spread of clean runs (seeds %llu..%llu): %.4f..%.4f, %.2f points -> the injected run "
              "is %s\n",
              static_cast<unsigned long long>(o.seed), static_cast<unsigned long long>(o.seed + seed_accs.size() - 1),
              *lo, *hi, spread, std::fabs(diff) <= spread ? "within noise" : "OUTSIDE the seed-to-seed spread");
}

// --- files ---------------------------------------------------------------------------------------------

// Atomically (core/atomic_file.h): a failed write leaves the previous file as it was.
void write_text(const std::string& path, const std::string& text) { hg::write_file_atomic("amp_overflow", path, text); }

// Skipped steps go in the scale panel as events (plot.py draws a series named "@..." as markers), injected
// overflows apart from natural ones (the scale outgrowing the gradients).
void write_curves(const std::string& path, const std::vector<const RunResult*>& runs) {
  std::ostringstream os;
  os.precision(9);
  os << "series,step,value\n";
  for (const RunResult* r : runs)
    for (size_t i = 0; i < r->running_loss.size(); ++i)
      os << "loss/" << r->label << ',' << i << ',' << r->running_loss[i] << '\n';
  for (const RunResult* r : runs)
    for (const ins::TimelineRow& row : r->timeline.rows())
      os << "log2_scale/" << r->label << ',' << row.step << ',' << std::log2(row.scale) << '\n';
  for (const RunResult* r : runs)
    for (const ins::TimelineRow& row : r->timeline.rows()) {
      if (!row.skipped) continue;
      const bool injected = std::any_of(r->watched.begin(), r->watched.end(),
                                        [&](const Watched& w) { return w.step == row.step && w.injected; });
      os << "log2_scale/@" << r->label << ": skipped (" << (injected ? "injected" : "natural") << " overflow),"
         << row.step << ',' << std::log2(row.scale) << '\n';
    }
  write_text(path, os.str());
}

void write_summary(const std::string& path, const RunResult& clean, const RunResult& injected,
                   const std::vector<double>& seed_accs, const Options& o, int failed) {
  std::ostringstream os;
  os << "{\"example\": \"amp_overflow\", \"mode\": \"fp16-O1\", \"steps\": " << injected.steps
     << ", \"growth_interval\": " << o.growth_interval << ", \"inject_factor_log2\": 60, \"injected_steps\": [";
  for (size_t i = 0; i < o.inject.size(); ++i) os << (i ? ", " : "") << o.inject[i];
  os << "], \"injected_skipped\": [";
  bool first = true;
  for (const Watched& w : injected.watched)
    if (w.injected) os << (first ? "" : ", ") << (w.skipped && w.changed == 0 ? "true" : "false"), first = false;
  os << "], \"skipped_injected_run\": " << injected.skipped << ", \"skipped_clean_run\": " << clean.skipped
     << ", \"natural_overflows\": " << injected.natural_overflows << ", \"accuracy_clean\": " << clean.accuracy
     << ", \"accuracy_injected\": " << injected.accuracy << ", \"accuracy_seeds\": [";
  for (size_t i = 0; i < seed_accs.size(); ++i) os << (i ? ", " : "") << seed_accs[i];
  os << "], \"final_scale_clean\": " << clean.timeline.rows().back().next_scale
     << ", \"final_scale_injected\": " << injected.timeline.rows().back().next_scale
     << ", \"checks_failed\": " << failed << "}\n";
  write_text(path, os.str());
}

example::Data load(const Options& o) {
  example::Args a{.name = "amp_overflow", .data = o.data, .limit = o.quick ? 1024 : 0};
  example::Data d = example::load_data(a);
  if (o.quick) d.test = {d.test.inputs.slice(0, 0, 1000), d.test.targets.slice(0, 0, 1000)};
  return d;
}

void print_files(const std::string& out) {
  std::printf("\nwrote %s/timeline.csv (injected run, one row per step), %s/timeline_clean.csv, %s/curves.csv "
              "(running loss and log2 scale of both runs), %s/summary.json\n",
              out.c_str(), out.c_str(), out.c_str(), out.c_str());
  std::printf("plot them with:\n  python3 scripts/plot.py timeline %s/timeline.csv -o %s/timeline.png "
              "--title 'FP16 O1, injected overflows'\n",
              out.c_str(), out.c_str());
  std::printf("  python3 scripts/plot.py curves %s/curves.csv -o %s/curves.png --title 'clean vs injected'\n",
              out.c_str(), out.c_str());
  std::printf("  python3 scripts/plot.py timeline %s/timeline_clean.csv -o %s/timeline_clean.png "
              "--title 'FP16 O1, no injection'\n",
              out.c_str(), out.c_str());
}

// Prints what the runs show and checks it; returns the number of failed checks.
int report(const Options& o, const std::set<int64_t>& inject, const RunResult& clean, const RunResult& injected,
           const std::vector<double>& seed_accs) {
  std::printf("\n");
  Checks c;
  report_watched(injected, c);
  report_origins(injected, c);
  report_origins(clean, c);
  report_growth(injected, inject, o, c);
  std::printf("skipped steps: injected run %lld (%zu injected + %lld natural overflows), clean run %lld%s\n",
              static_cast<long long>(injected.skipped), inject.size(),
              static_cast<long long>(injected.natural_overflows), static_cast<long long>(clean.skipped),
              clean.skipped > 0 ? " (natural overflows: the scale grew until a batch overflowed F16)" : "");
  c.expect(injected.skipped == static_cast<int64_t>(inject.size()) + injected.natural_overflows,
           "skipped steps != injected + natural overflows");
  std::printf("final scale: clean %s, injected %s; final running loss: clean %.4f, injected %.4f\n",
              pow2(clean.timeline.rows().back().next_scale).c_str(),
              pow2(injected.timeline.rows().back().next_scale).c_str(), clean.running_loss.back(),
              injected.running_loss.back());
  report_accuracy(clean, injected, seed_accs, o);
  return c.failed;
}

int run(const Options& o) {
  if (o.threads > 0) hg::set_num_threads(o.threads);
  const example::Data d = load(o);
  const std::set<int64_t> inject(o.inject.begin(), o.inject.end());
  const int64_t steps = o.epochs * ((d.train.size() + 63) / 64);
  HG_CHECK(*inject.rbegin() < steps, "amp_overflow: --inject step ", *inject.rbegin(), " is past the last step ",
           steps - 1, " (", o.epochs, " epoch(s) of ", d.train.size(), " samples, batch 64); inject earlier");
  std::printf("amp_overflow: %lld train / %lld test samples, %d thread(s), FP16 O1 (autocast F16 + dynamic "
              "GradScaler, growth interval %lld), %lld steps\n",
              static_cast<long long>(d.train.size()), static_cast<long long>(d.test.size()), hg::get_num_threads(),
              static_cast<long long>(o.growth_interval), static_cast<long long>(steps));
  std::printf("injecting overflows at steps");
  for (int64_t s : o.inject) std::printf(" %lld", static_cast<long long>(s));
  std::printf(" (scaled loss x 2^60 before backward: F16 gradients overflow to inf)\n");
  const RunResult clean = train_run(o, d, {}, o.seed, "clean");
  const RunResult injected = train_run(o, d, inject, o.seed, "injected");
  std::vector<double> seed_accs = {clean.accuracy};
  for (int k = 1; k <= o.noise_seeds; ++k) seed_accs.push_back(train_run(o, d, {}, o.seed + k, "seed").accuracy);
  const int failed = report(o, inject, clean, injected, seed_accs);
  std::filesystem::create_directories(o.out);
  injected.timeline.write_csv(o.out + "/timeline.csv");
  clean.timeline.write_csv(o.out + "/timeline_clean.csv");
  write_curves(o.out + "/curves.csv", {&clean, &injected});
  write_summary(o.out + "/summary.json", clean, injected, seed_accs, o, failed);
  print_files(o.out);
  if (failed) std::printf("amp_overflow: %d check(s) failed\n", failed);
  return failed ? 3 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  return example::guarded_main("amp_overflow", [&] { return run(parse_options(argc, argv)); });
}
