#pragma once
// What the Fashion-MNIST examples share: command-line flags, data loading, the training loop with a
// progress bar, evaluation and the one-line JSON summary. Each example only builds its model and
// optimizer.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <unistd.h>

#include "benchmarks/bench_util.h"
#include "cli.h"
#include "data/dataloader.h"
#include "data/idx.h"
#include "cuda/graph.h"
#include "halfgrad.h"
#include "nn/checkpoint.h"
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
  std::string amp = {};        // off | fp16 | bf16; empty: fp16 when --opt-level is O1-O3, else off
  std::string opt_level = {};  // O0 | O1 | O2 | O3 (amp::initialize); empty: O1 with --amp fp16|bf16, else O0
  bool compare = false;        // train once per precision mode and print one table
  std::string save = {};       // write a training checkpoint here after every epoch
  std::string resume = {};     // continue the run saved in this checkpoint
  std::string inspect = {};    // the first step through PrecisionTrace and MemoryLedger, written here
  bool graph = false;          // CUDA: capture the training step once and replay it (cuda/graph.h)
  bool ddp = false;            // data-parallel over the ranks of mpirun (nn::DistributedDataParallel); --batch is global
  std::string ddp_hook = {};   // --ddp's communication hook: empty (the default average), fp16 or bf16 compression
  bool zero = false;           // --ddp with the optimizer's state sharded over the ranks (ZeroRedundantOptimizer)
};

// The precision a run trains in, resolved from --amp and --opt-level.
struct Mode {
  hg::amp::OptLevel level = hg::amp::OptLevel::O0;
  hg::DType dtype = hg::DType::F32;  // the low precision (F32 for O0)
  std::string label() const {
    if (level == hg::amp::OptLevel::O0) return "fp32";
    return std::string(dtype == hg::DType::BF16 ? "bf16" : "fp16") + "-O" + std::to_string(static_cast<int>(level));
  }
};

// The rows of --compare: FP32, FP16 under O1 (autocast), O2 (F16 weights, FP32 masters) and O3 (pure F16),
// and BF16 autocast.
inline std::vector<Mode> compare_modes() {
  using hg::amp::OptLevel;
  using hg::DType;
  return {{OptLevel::O0, DType::F32}, {OptLevel::O1, DType::F16}, {OptLevel::O2, DType::F16},
          {OptLevel::O3, DType::F16}, {OptLevel::O1, DType::BF16}};
}

[[noreturn]] inline void usage(const Args& a, const std::string& problem) {
  std::fprintf(stderr,
               "%s: %s\nusage: %s [--epochs N] [--batch N] [--lr X] [--seed N] [--threads N] [--device cpu|cuda]\n"
               "          [--data DIR] [--limit N] [--max-steps N] [--amp off|fp16|bf16] [--opt-level O0|O1|O2|O3]\n"
               "          [--compare] [--save FILE] [--resume FILE] [--inspect DIR] [--graph] [--ddp [--ddp-hook fp16|bf16] [--zero]]\n"
               "defaults: --epochs %d --batch %lld --lr %g --seed 0 --device cpu (FP32)\n"
               "  --amp fp16|bf16   mixed precision; alone it means --opt-level O1 (autocast; fp16 adds a GradScaler)\n"
               "  --opt-level O2    F16 weights (batch norm F32) with FP32 master weights; O3 pure F16, no masters\n"
               "  --compare         train FP32, FP16 O1/O2/O3 and BF16 O1 in turn and print one table\n"
               "  --save FILE       checkpoint (model, optimizer, scaler, RNG, epoch) after every epoch\n"
               "  --resume FILE     continue from such a checkpoint up to --epochs (same flags as the saved run)\n"
               "  --inspect DIR     print the first step's precision trace and memory ledger; write them to DIR/<mode>\n"
               "  --graph           (with --device cuda) capture the step after two eager ones and replay it: one launch per\n"
               "                    step; the last partial batch of an epoch is dropped, the loss is read every 50 steps,\n"
               "                    skipped steps are not counted (-1)\n"
               "  --ddp             under mpirun: every rank trains on its share of each batch (--batch is the global\n"
               "                    batch, split over the ranks) and the gradients are averaged (DistributedDataParallel);\n"
               "                    the same steps as one process with that batch; one thread per rank unless --threads\n"
               "  --ddp-hook H      average the gradients in F16 (fp16) or BF16 (bf16): half the bytes sent\n"
               "  --zero            with --ddp: each rank keeps the optimizer state and masters of 1/N of the parameters\n"
               "                    (ZeRO stage 1) and sends the ones it updated to the others\n",
               a.name.c_str(), problem.c_str(), a.name.c_str(), a.epochs, static_cast<long long>(a.batch), a.lr);
  std::exit(2);
}

inline Mode mode_of(const Args& a) {
  Mode m;
  if (a.opt_level.empty()) m.level = a.amp.empty() || a.amp == "off" ? hg::amp::OptLevel::O0 : hg::amp::OptLevel::O1;
  else m.level = static_cast<hg::amp::OptLevel>(a.opt_level[1] - '0');
  if (m.level != hg::amp::OptLevel::O0) m.dtype = a.amp == "bf16" ? hg::DType::BF16 : hg::DType::F16;
  return m;
}

// An on_switch for parse_flags that knows one switch: seeing `name` sets `target`.
inline std::function<bool(const std::string&)> switch_flag(std::string name, bool& target) {
  return [name = std::move(name), &target](const std::string& f) {
    if (f != name) return false;
    target = true;
    return true;
  };
}

// The flags the teaching examples (amp_master_weights, pure_bf16, fp8_training, gradient_penalty) share: an
// example's Options derives from it, sets its own defaults and reads these with parse_lesson_flags.
struct LessonFlags {
  explicit LessonFlags(int64_t default_steps) : steps(default_steps) {}
  std::string data;        // --data DIR (empty: the installed Fashion-MNIST)
  int threads = 1;         // --threads N
  int64_t steps;           // --steps N: the example's default until given
  uint64_t seed = 0;       // --seed N
  bool quick = false;      // --quick: a smoke run
  bool steps_set = false;  // --steps was given (a --quick default does not override it)
};

// Reads --data, --threads, --steps, --seed and --quick into o, and every other "--flag VALUE" through own(flag,
// value), which returns false for a flag it does not know either; a bad flag prints the usage and exits with 2.
inline void parse_lesson_flags(int argc, char** argv, LessonFlags& o,
                               const std::function<bool(const std::string&, const std::string&)>& own,
                               const std::function<void(const std::string&)>& usage) {
  auto on_value = [&](const std::string& f, const std::string& v) {
    if (f == "--data") o.data = v;
    else if (f == "--threads") o.threads = parse_number<int>(v, 1, hg::max_num_threads());
    else if (f == "--steps") o.steps = parse_number<int64_t>(v, 1), o.steps_set = true;
    else if (f == "--seed") o.seed = parse_number<uint64_t>(v);
    else return own(f, v);
    return true;
  };
  parse_flags(argc, argv, switch_flag("--quick", o.quick), on_value, usage);
}

// Parses flags over the example's defaults; a bad flag prints the usage and exits with status 2.
inline Args parse_args(int argc, char** argv, Args a) {
  auto on_value = [&](const std::string& f, const std::string& v) {
    if (f == "--epochs") a.epochs = parse_number<int>(v, 1);
    else if (f == "--batch") a.batch = parse_number<int64_t>(v, 1);
    else if (f == "--lr") a.lr = parse_positive(v);
    else if (f == "--seed") a.seed = parse_number<uint64_t>(v);
    else if (f == "--threads") a.threads = parse_number<int>(v, 1, hg::max_num_threads());
    else if (f == "--device") a.device = v;
    else if (f == "--data") a.data = v;
    else if (f == "--limit") a.limit = parse_number<int64_t>(v, 1);
    else if (f == "--max-steps") a.max_steps = parse_number<int64_t>(v, 1);
    else if (f == "--amp") a.amp = v;
    else if (f == "--opt-level") a.opt_level = v;
    else if (f == "--save") a.save = v;
    else if (f == "--resume") a.resume = v;
    else if (f == "--inspect") a.inspect = v;
    else if (f == "--ddp-hook") a.ddp_hook = v;
    else return false;
    return true;
  };
  const auto compare = switch_flag("--compare", a.compare), graph = switch_flag("--graph", a.graph),
             ddp = switch_flag("--ddp", a.ddp), zero = switch_flag("--zero", a.zero);
  parse_flags(argc, argv, [&](const std::string& f) { return compare(f) || graph(f) || ddp(f) || zero(f); }, on_value,
              [&](const std::string& problem) { usage(a, problem); });
  if (!a.ddp_hook.empty() && !a.ddp) usage(a, "--ddp-hook picks how --ddp averages; add --ddp");
  if (a.zero && !a.ddp) usage(a, "--zero shards the optimizer over the ranks of --ddp; add --ddp");
  if (!a.ddp_hook.empty() && a.ddp_hook != "fp16" && a.ddp_hook != "bf16")
    usage(a, "ddp-hook must be fp16 or bf16, got " + a.ddp_hook);
  if (a.ddp && a.graph)  // a captured step cannot wait for other processes: the all-reduce polls from the host
    usage(a, "--graph captures one process's step, and --ddp's all-reduces wait for the other ranks; drop one");
  if (a.ddp && !a.inspect.empty()) usage(a, "--inspect looks at one process's step; drop --ddp or --inspect");
  if (a.graph && a.device != "cuda") usage(a, "--graph captures CUDA work; add --device cuda");
  if (a.graph && !a.inspect.empty()) usage(a, "--inspect looks at an eager step; drop --graph or --inspect");
  if (a.device != "cpu" && a.device != "cuda") usage(a, "device must be cpu or cuda, got " + a.device);
  if (!a.amp.empty() && a.amp != "off" && a.amp != "fp16" && a.amp != "bf16")
    usage(a, "amp must be off, fp16 or bf16, got " + a.amp);
  if (!a.opt_level.empty() && (a.opt_level.size() != 2 || a.opt_level[0] != 'O' || a.opt_level[1] < '0' ||
                               a.opt_level[1] > '3'))
    usage(a, "opt-level must be O0, O1, O2 or O3, got " + a.opt_level);
  if (a.amp == "off" && !a.opt_level.empty() && a.opt_level != "O0")
    usage(a, "--amp off trains in FP32 (O0); drop it, or pick --amp fp16|bf16 for --opt-level " + a.opt_level);
  if (a.opt_level == "O0" && (a.amp == "fp16" || a.amp == "bf16"))
    usage(a, "--opt-level O0 is pure FP32; drop --amp " + a.amp + " or pick O1-O3");
  if (a.compare && (!a.amp.empty() || !a.opt_level.empty() || !a.save.empty() || !a.resume.empty()))
    usage(a, "--compare runs every precision itself; it takes no --amp, --opt-level, --save or --resume");
  // a report folder that cannot be made is found now, not after the first step
  if (!a.inspect.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(a.inspect, ec);
    if (ec || !std::filesystem::is_directory(a.inspect))
      usage(a, "--inspect: cannot make the folder '" + a.inspect + "': " +
                   (ec ? ec.message() : std::string("it exists and is not a folder")) + "; pass a folder path");
  }
  // a checkpoint that cannot be written is found now, not after the first epoch
  if (!a.save.empty()) {
    try {
      hg::check_writable("--save", a.save);
    } catch (const hg::Error& e) {
      usage(a, e.what());
    }
  }
  return a;
}

// --device cuda: cuda:0, or under --ddp on a machine with several GPUs cuda:<local rank % GPUs> (torch's one GPU per
// rank, which NCCL needs; ranks on one GPU share it, their CUDA tensors staged through MPI)
inline hg::Device device_of(const Args& a) {
  if (a.device != "cuda") return hg::Device::cpu();
  if (!a.ddp) return hg::Device::cuda();
  static const int index = [] {
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");  // Open MPI's mpirun
    const int gpus = std::max(1, hg::cuda::device_count());
    return (local != nullptr ? std::atoi(local) : hg::dist::get_rank()) % gpus;
  }();
  return hg::Device::cuda(index);
}

struct Data {
  hg::data::TensorDataset train, test;
  int64_t bytes_before_model = 0;  // tensor bytes on the training device before the model was built
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
  return {{tr.images, tr.labels}, {te.images, te.labels}, 0};
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

// How a batch runs: what amp::initialize resolved for the run.
struct Precision {
  bool autocast = false;             // O1: forward and loss under amp::Autocast(device, dtype)
  std::optional<hg::DType> input;    // O2/O3: the model's parameters are this dtype; inputs are cast to it
  hg::DType dtype = hg::DType::F32;
  explicit Precision(const hg::amp::Properties& p) : autocast(p.autocast), dtype(p.dtype) {
    if (p.cast_model) input = p.dtype;
  }
  // f() under amp::Autocast(dev, dtype) when the run autocasts (O1), else as it is.
  template <class F>
  hg::Tensor region(hg::Device dev, F&& f) const {
    std::optional<hg::amp::Autocast> ac;
    if (autocast) ac.emplace(dev.type, dtype);
    return f();
  }
  // The model's logits for x (Apex O2/O3 cast the inputs to the model's dtype; O1 runs under autocast).
  hg::Tensor forward(hg::nn::Module& model, const hg::Tensor& x) const {
    return region(x.device(), [&] { return model.forward(input ? x.to(*input) : x); });
  }
  // The batch loss (the torch.autocast recipe: forward and loss inside the region, backward outside).
  hg::Tensor loss(hg::nn::Module& model, const hg::Tensor& x, const hg::Tensor& y) const {
    return region(x.device(), [&] { return hg::cross_entropy(model.forward(input ? x.to(*input) : x), y); });
  }
};

// Fraction of test samples whose argmax logit is the label (eval mode, no autograd), in the precision
// the model trained in.
inline double evaluate(hg::nn::Module& model, const hg::data::TensorDataset& test, hg::Device dev, const Precision& p) {
  hg::NoGradGuard ng;
  model.eval();
  hg::data::DataLoader loader(test, {.batch_size = 1000, .shuffle = false, .prefetch = false});
  int64_t correct = 0;
  for (auto& [x, y] : loader) {
    const auto pred = hg::argmax(p.forward(model, x.to(dev)), 1).to_vector<int64_t>();
    const auto lab = y.to_vector<int64_t>();
    for (size_t i = 0; i < pred.size(); ++i) correct += pred[i] == lab[i];
  }
  model.train();
  return static_cast<double>(correct) / static_cast<double>(test.size());
}

// Samples per second of the run: this process's, or under --ddp every rank's (printed by rank 0, one line each) and
// the job's (every rank's samples over the slowest rank's time), which it returns.
inline double throughput(int64_t samples, double seconds, bool ddp) {
  if (!ddp) return static_cast<double>(samples) / seconds;
  const int world = hg::dist::get_world_size();
  const hg::Tensor mine = hg::from_vector(std::vector<double>{static_cast<double>(samples), seconds}, {2},
                                          {.dtype = hg::DType::F64});
  const hg::Tensor all = hg::empty({2 * world}, {.dtype = hg::DType::F64});
  hg::dist::all_gather_into_tensor(all, mine);
  const std::vector<double> v = all.to_vector<double>();
  double total = 0, slowest = 0;
  for (int r = 0; r < world; ++r) {
    std::printf("rank %d: %.0f samples in %.2f s, %.0f samples/s\n", r, v[2 * r], v[2 * r + 1], v[2 * r] / v[2 * r + 1]);
    total += v[2 * r];
    slowest = std::max(slowest, v[2 * r + 1]);
  }
  std::printf("all %d ranks: %.0f samples/s\n", world, total / slowest);
  return total / slowest;
}

struct Summary {
  std::string mode = "fp32";  // Mode::label()
  double accuracy = 0, ms_per_step_median = 0, ms_per_step_min = 0, ms_per_step_max = 0, total_s = 0;
  int64_t steps = 0, peak_bytes = 0;  // peak tensor bytes while training: parameters, masters, gradients,
                                       // optimizer state, activations (not the datasets)
  int64_t skipped = 0;                 // steps the GradScaler skipped (inf/NaN gradients); -1: not counted (--graph)
  double final_scale = 1.0;            // the loss scale at the end (1: no scaling)
  std::optional<hg::amp::inspect::LedgerSnapshot> inspected = {};  // --inspect: the first step's ledger after forward
  double syncs_per_step = 0;           // times the host waited for a GPU while training, per step (cuda/counters.h)
  int world_size = 1;                  // ranks (--ddp)
  double samples_per_s = 0;            // training samples per second, of all ranks together
};

// The checkpoint of --save: model, optimizer (masters and moments included), scaler, RNG, the global
// step and the epoch just finished; the metadata names the example and the precision mode so --resume
// can refuse a file from another run.
inline void save_run(const Args& a, const Mode& m, hg::nn::Module& model, hg::optim::Optimizer& opt,
                     const hg::amp::GradScaler& scaler, int epoch, int64_t step) {
  hg::nn::save_checkpoint(a.save, model, opt,
                          {.step = step, .scaler = scaler.state_dict(),
                           .extra = {{"epoch", hg::full(hg::Shape{}, epoch, {.dtype = hg::DType::I64})}},
                           .metadata = {{"example", a.name}, {"mode", m.label()}}});
}

// Restores a --save checkpoint into model, optimizer, scaler and loader; returns the epoch it finished
// and sets step to its global step.
inline int resume_run(const Args& a, const Mode& m, hg::nn::Module& model, hg::optim::Optimizer& opt,
                      hg::amp::GradScaler& scaler, hg::data::DataLoader& loader, int64_t& step) {
  const hg::nn::Checkpoint head = hg::nn::read_checkpoint(a.resume);
  const auto meta = [&](const char* k) { return head.metadata.count(k) ? head.metadata.at(k) : "(none)"; };
  HG_CHECK(meta("example") == a.name && meta("mode") == m.label(), "--resume: '", a.resume, "' was saved by ",
           meta("example"), " in mode ", meta("mode"), ", this run is ", a.name, " in mode ", m.label(),
           "; resume with the flags of the saved run");
  HG_CHECK(head.extra.count("epoch"), "--resume: '", a.resume, "' has no extra.epoch; it was not written by --save");
  const hg::nn::Checkpoint ck = hg::nn::load_checkpoint(a.resume, model, opt);
  if (scaler.is_enabled()) scaler.load_state_dict(ck.scaler);
  const int done = static_cast<int>(ck.extra.at("epoch").item<int64_t>());
  HG_CHECK(done < a.epochs, "--resume: '", a.resume, "' already finished epoch ", done, " of --epochs ", a.epochs,
           "; ask for more epochs");
  loader.set_epoch(static_cast<uint64_t>(done));
  step = ck.step;
  std::printf("resumed from %s after epoch %d (step %lld, loss scale %g)\n", a.resume.c_str(), done,
              static_cast<long long>(step), scaler.get_scale());
  return done;
}

// The examples' Fashion-MNIST MLP, 784-256-128-10 with ReLU: fashion_mnist_mlp and the AMP teaching programs
// train this one network (built right after manual_seed, the same initial weights), so their numbers compare.
inline std::shared_ptr<hg::nn::Sequential> fashion_mnist_mlp() {
  namespace nn = hg::nn;
  return std::make_shared<nn::Sequential>(nn::Flatten(), nn::Linear(784, 256), nn::ReLU(), nn::Linear(256, 128),
                                          nn::ReLU(), nn::Linear(128, 10));
}

// --inspect DIR: the run's first training step seen through the inspectors (amp/inspect): the precision trace
// of its forward (each op's dtypes, policy, casts and kernel math) and the memory ledger after forward and
// after backward. Printed, and written to DIR/<mode>/trace.json and ledger.csv.
class Inspection {
 public:
  Inspection(const Args& a, const Mode& m, hg::nn::Module& model, hg::optim::Optimizer& opt)
      : dir_(std::filesystem::path(a.inspect) / m.label()), trace_(std::in_place, &model),
        ledger_({.model = &model, .optimizer = &opt, .device = device_of(a)}) {
    std::filesystem::create_directories(dir_);
    ledger_.begin_forward();
  }
  void after_forward() {
    std::printf("\nPrecision trace of the first step's forward:\n");
    trace_->print(std::cout);
    trace_->write_json((dir_ / "trace.json").string());
    trace_.reset();
    forward_ = ledger_.snapshot("after forward");
  }
  // The ledger after forward, labelled with the mode (--compare --inspect puts every mode's side by side).
  hg::amp::inspect::LedgerSnapshot forward(const std::string& mode) const {
    hg::amp::inspect::LedgerSnapshot f = forward_;
    f.label = mode;
    return f;
  }
  void after_backward() {
    const hg::amp::inspect::LedgerSnapshot backward = ledger_.snapshot("after backward");
    std::printf("\nMemory ledger of the first step:\n");
    hg::amp::inspect::print_ledgers(std::cout, {forward_, backward});
    hg::amp::inspect::write_ledgers_csv((dir_ / "ledger.csv").string(), {forward_, backward});
    std::printf("(wrote %s and %s)\n\n", (dir_ / "trace.json").c_str(), (dir_ / "ledger.csv").c_str());
  }

 private:
  std::filesystem::path dir_;
  std::optional<hg::amp::inspect::PrecisionTrace> trace_;
  hg::amp::inspect::MemoryLedger ledger_;
  hg::amp::inspect::LedgerSnapshot forward_;
};

// --graph: the training step captured once, after kEagerSteps eager ones made the optimizer state, the masters
// and the scaler's device state, and replayed (cuda/graph.h); each batch is uploaded into the captured step's
// input buffers first (through the staging ring: no wait), and the loss is copied into a fixed scalar.
struct GraphedStep {
  static constexpr int kEagerSteps = 2;
  int eager_steps = 0;
  hg::Tensor x, y, loss;  // the captured step's inputs and its loss (F32, 0-d)
  std::optional<hg::cuda::Graph> graph;

  template <class Body>
  void capture(hg::Device dev, const hg::Tensor& xb, const hg::Tensor& yb, hg::optim::Optimizer& opt, Body&& body) {
    x = hg::empty(xb.shape(), {.dtype = xb.dtype(), .device = dev});
    y = hg::empty(yb.shape(), {.dtype = yb.dtype(), .device = dev});
    loss = hg::zeros(hg::Shape{}, {.device = dev});
    opt.zero_grad();  // a capture may not free what was allocated outside it
    hg::cuda::synchronize(dev.index);
    graph.emplace(hg::cuda::Graph::capture(dev.index, [&] {
      const hg::Tensor l = body(x, y).to(hg::DType::F32);
      hg::copy_bytes(loss.data_ptr(), dev, l.data_ptr(), dev, sizeof(float));
      opt.zero_grad();  // what the graph allocates it frees
    }));
  }
  void run(hg::Device dev, const hg::Tensor& xb, const hg::Tensor& yb) {
    hg::copy_bytes(x.data_ptr(), dev, xb.data_ptr(), hg::Device::cpu(), xb.nbytes());
    hg::copy_bytes(y.data_ptr(), dev, yb.data_ptr(), hg::Device::cpu(), yb.nbytes());
    graph->launch();
  }
};

// Trains with cross-entropy in the precision of --amp/--opt-level (amp::initialize converts the model and
// sets the optimizer's master weights; a GradScaler scales the loss when the level asks for it and skips
// steps whose gradients overflow), prints a progress bar per epoch, then the test accuracy.
inline Summary train(const Args& a, hg::nn::Module& model, hg::optim::Optimizer& given, const Data& d) {
  using clock = std::chrono::steady_clock;
  // --zero: a copy of the example's optimizer over each rank's shard (optim/zero.h), before amp::initialize sets
  // its master weights
  std::optional<hg::optim::ZeroRedundantOptimizer> zero;
  if (a.zero) zero.emplace(model.parameters(), given);
  hg::optim::Optimizer& opt = zero ? static_cast<hg::optim::Optimizer&>(*zero) : given;
  const hg::Device dev = device_of(a);
  const Mode m = mode_of(a);
  hg::amp::Overrides ov{.verbose = !a.compare && m.level != hg::amp::OptLevel::O0};
  if (m.level != hg::amp::OptLevel::O0) ov.dtype = m.dtype;
  if (m.dtype == hg::DType::BF16) ov.loss_scale = 1.0;  // BF16 has F32's range: no scaling (torch's recipe)
  const hg::amp::Properties props = hg::amp::initialize(model, opt, m.level, ov);
  const Precision prec(props);
  hg::amp::GradScaler scaler(props.scaler_options());
  // --ddp: the model wrapped after amp::initialize converted it (the buckets take the parameters' final dtypes);
  // every rank built the same model from the same seed, and the wrapper checks that and broadcasts rank 0's
  std::optional<hg::nn::DistributedDataParallel> ddp;
  if (a.ddp) {
    ddp.emplace(std::shared_ptr<hg::nn::Module>(&model, [](hg::nn::Module*) {}),
                hg::nn::DDPOptions{.gradient_as_bucket_view = true});
    if (a.ddp_hook == "fp16") ddp->register_comm_hook(hg::nn::ddp_comm_hooks::fp16_compress_hook());
    if (a.ddp_hook == "bf16") ddp->register_comm_hook(hg::nn::ddp_comm_hooks::bf16_compress_hook());
    if (dev.is_cuda())  // decided by the wrapper's first broadcast
      std::printf("--ddp: CUDA tensors through %s\n", hg::dist::device_backend().c_str());
  }
  hg::nn::Module& net = ddp ? static_cast<hg::nn::Module&>(*ddp) : model;
  const int world = a.ddp ? hg::dist::get_world_size() : 1;
  HG_CHECK(a.batch % world == 0, "--ddp: --batch ", a.batch, " (the global batch) does not split evenly over ", world,
           " ranks; pick a multiple of ", world);
  // a captured step has fixed shapes: --graph drops the last partial batch. --ddp: each rank reads its share of
  // the same shuffled order (DistributedSampler), batch/world at a time, so the ranks' k-th batches together are
  // one process's k-th batch
  std::optional<hg::data::DistributedSampler> sampler;
  if (a.ddp) sampler.emplace(d.train.size(), hg::data::DistributedSamplerOptions{.seed = a.seed});
  // --inspect: no prefetch thread, whose next batch would land in the ledger's activations of the inspected step
  hg::data::DataLoader loader(d.train, {.batch_size = a.batch / world, .shuffle = !a.ddp, .seed = a.seed,
                                        .drop_last = a.graph, .prefetch = a.inspect.empty(), .sampler = sampler});
  GraphedStep graphed;
  int64_t global_step = 0;
  const int done = a.resume.empty() ? 0 : resume_run(a, m, model, opt, scaler, loader, global_step);
  const int64_t first_global_step = global_step;
  hg::bench::StepTimer steps_timer(dev);  // benchmarks/bench_util.h: the device synchronized at each lap
  // On a GPU the loop waits for the device only every `window` steps: it reads the window's losses and
  // skip decisions then, in one download, and laps the timer. On the CPU every step is a window: nothing to
  // wait for. The run's first step (it makes the plans, buffers and optimizer state) is timed by no sample.
  const int64_t window = dev.is_cpu() ? 1 : 50;
  std::vector<hg::Tensor> window_losses;
  std::vector<hg::amp::StepResult> window_results;
  Summary s{.mode = m.label()};
  int64_t samples = 0;  // this rank's
  hg::memory::reset_peak(dev);
  const auto t_start = clock::now();
  const hg::cuda::Counters counted_from = hg::cuda::counters();
  for (int e = done + 1; e <= a.epochs; ++e) {
    const int64_t steps = a.max_steps > 0 ? std::min(a.max_steps, loader.size()) : loader.size();
    ProgressBar bar(e, a.epochs, steps);
    double running = 0;
    int64_t step = 0, lapped = 0;
    const auto t_epoch = clock::now();
    steps_timer.start();
    // the end of a window: the losses of the steps since the last one (eager: all of them; graphed: the
    // last, which the captured step copied out) and the skips, read at once; one lap for those steps
    const auto end_window = [&](bool graphed_step) {
      if (graphed_step) {
        const double l = graphed.loss.item();
        running = lapped == 0 ? l : 0.9 * running + 0.1 * l;
      } else if (!window_losses.empty()) {
        const std::vector<double> ls = hg::stack(window_losses).to_vector<double>();  // one download
        for (size_t i = 0; i < ls.size(); ++i) running = lapped == 0 && i == 0 ? ls[i] : 0.98 * running + 0.02 * ls[i];
        hg::amp::StepResult::read_all(window_results);  // one download, not one per step
        for (const hg::amp::StepResult& r : window_results) s.skipped += r.stepped() ? 0 : 1;
      }
      window_losses.clear();
      window_results.clear();
      if (global_step == first_global_step + 1) steps_timer.skip(step - lapped);
      else steps_timer.lap(step - lapped);
      lapped = step;
    };
    const auto window_ends = [&] {
      return step == steps || step % window == 0 || global_step == first_global_step + 1;
    };
    for (auto& [x, y] : loader) {
      if (a.graph && graphed.eager_steps == GraphedStep::kEagerSteps) {  // the captured step: one launch
        if (!graphed.graph) {
          graphed.capture(dev, x, y, opt, [&](const hg::Tensor& xg, const hg::Tensor& yg) {
            const hg::Tensor loss = prec.loss(net, xg, yg);
            scaler.scale(loss).backward();
            scaler.step(opt);
            scaler.update();
            return loss;
          });
        }
        graphed.run(dev, x, y);
        samples += x.size(0);
        s.skipped = -1;
        ++step, ++global_step;
        if (window_ends()) end_window(true);
        bar.update(step, step / std::chrono::duration<double>(clock::now() - t_epoch).count(), running);
        if (step == steps) break;
        continue;
      }
      if (a.graph) ++graphed.eager_steps;
      const hg::Tensor xb = x.to(dev), yb = y.to(dev);
      std::optional<Inspection> inspection;
      if (!a.inspect.empty() && e == done + 1 && step == 0) inspection.emplace(a, m, model, opt);
      const hg::Tensor loss = prec.loss(net, xb, yb);
      samples += xb.size(0);
      if (inspection) inspection->after_forward();
      opt.zero_grad();
      scaler.scale(loss).backward();
      if (inspection) {
        inspection->after_backward();
        s.inspected = inspection->forward(m.label());
      }
      window_results.push_back(scaler.step(opt));
      scaler.update();
      window_losses.push_back(loss.detach());
      ++step, ++global_step;
      if (window_ends()) end_window(false);
      bar.update(step, step / std::chrono::duration<double>(clock::now() - t_epoch).count(), running);
      if (step == steps) break;
    }
    bar.finish();
    if (zero && !a.save.empty()) zero->consolidate_state_dict(0);  // every rank's shard of the state, on rank 0
    if (!a.save.empty() && (!a.ddp || hg::dist::get_rank() == 0)) save_run(a, m, model, opt, scaler, e, global_step);
    if (a.ddp && !a.save.empty()) hg::dist::barrier();  // the file is whole before any rank goes on
  }
  s.total_s = std::chrono::duration<double>(clock::now() - t_start).count();
  s.world_size = world;
  s.samples_per_s = throughput(samples, s.total_s, a.ddp);
  s.steps = steps_timer.steps();
  if (s.steps > 0) s.syncs_per_step = static_cast<double>((hg::cuda::counters() - counted_from).syncs) / s.steps;
  s.final_scale = scaler.is_enabled() ? scaler.get_scale() : 1.0;
  s.peak_bytes = hg::memory::peak_allocated(dev) - d.bytes_before_model;
  const hg::bench::Timing st = steps_timer.summary();
  s.ms_per_step_median = st.median * 1e3;
  s.ms_per_step_min = st.min * 1e3;
  s.ms_per_step_max = st.max * 1e3;
  s.accuracy = evaluate(model, d.test, dev, prec);
  std::printf("test accuracy %.4f after %d epoch(s) [%s]\n", s.accuracy, a.epochs, s.mode.c_str());
  return s;
}

inline void print_summary(const Args& a, const Summary& s) {
  std::printf("{\"example\": \"%s\", \"mode\": \"%s\", \"epochs\": %d, \"batch\": %lld, \"lr\": %g, \"seed\": %llu, "
              "\"threads\": %d, \"device\": \"%s\", \"test_accuracy\": %.4f, \"steps\": %lld, "
              "\"ms_per_step_median\": %.4f, \"ms_per_step_min\": %.4f, \"ms_per_step_max\": %.4f, "
              "\"total_seconds\": %.2f, \"peak_memory_bytes\": %lld, "
              "\"skipped_steps\": %lld, \"final_scale\": %g, \"syncs_per_step\": %.3f, \"world_size\": %d, "
              "\"samples_per_s\": %.1f}\n",
              a.name.c_str(), s.mode.c_str(), a.epochs, static_cast<long long>(a.batch), a.lr,
              static_cast<unsigned long long>(a.seed), hg::get_num_threads(), a.device.c_str(), s.accuracy,
              static_cast<long long>(s.steps), s.ms_per_step_median, s.ms_per_step_min, s.ms_per_step_max, s.total_s, static_cast<long long>(s.peak_bytes),
              static_cast<long long>(s.skipped), s.final_scale, s.syncs_per_step, s.world_size, s.samples_per_s);
}

// The --compare table: one row per precision mode, accuracy also as points against the FP32 row.
inline void print_table(const std::vector<Summary>& rows) {
  std::printf("\n%-9s %9s %10s %9s %10s %8s %12s\n", "mode", "test acc", "vs fp32", "ms/step", "peak MB", "skipped",
              "final scale");
  for (const Summary& r : rows)
    std::printf("%-9s %9.4f %+9.2fp %9.3f %10.2f %8lld %12g\n", r.mode.c_str(), r.accuracy,
                100.0 * (r.accuracy - rows.front().accuracy), r.ms_per_step_median,
                static_cast<double>(r.peak_bytes) / 1e6, static_cast<long long>(r.skipped), r.final_scale);
  std::printf("fp16-O1: autocast F16 + dynamic loss scaling; fp16-O2: F16 weights, FP32 masters; fp16-O3: pure F16 "
              "(no masters, no scaling); bf16-O1: autocast BF16, no scaling. Peak: tensor bytes while training.\n");
}

// --ddp: joins the ranks mpirun started; only rank 0 prints (the others' stdout goes to /dev/null; errors still
// reach stderr); without --threads each rank takes its share of this machine's cores.
inline void start_ranks(const Args& a) {
  hg::dist::init_process_group();
  if (hg::dist::get_rank() != 0 && std::freopen("/dev/null", "w", stdout) == nullptr)
    throw std::runtime_error("--ddp: cannot silence rank " + std::to_string(hg::dist::get_rank()) + "'s output");
  if (a.threads == 0) {
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");  // ranks on this machine (Open MPI's mpirun)
    const int here = local != nullptr ? std::max(1, std::atoi(local)) : hg::dist::get_world_size();
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    hg::set_num_threads(std::max(1, cores / here));
  }
  std::printf("--ddp: %d ranks (%s), %d thread(s) each\n", hg::dist::get_world_size(), hg::dist::backend_version().c_str(),
              hg::get_num_threads());
}

// Parses flags, seeds, sets threads, loads data; returns nonzero on a clear error (printed). body builds
// the model and optimizer for the given flags and trains them (with train()).
inline int run_example(int argc, char** argv, Args defaults,
                       const std::function<Summary(const Args&, const Data&)>& body) {
  const std::string defaults_name = defaults.name;
  try {
    const Args a = parse_args(argc, argv, std::move(defaults));
    if (a.ddp) start_ranks(a);
    if (a.threads > 0) hg::set_num_threads(a.threads);
    Data d = load_data(a);
    d.bytes_before_model = hg::memory::allocated(device_of(a));
    std::printf("%s: %lld train / %lld test samples, %d thread(s), device %s\n", a.name.c_str(),
                static_cast<long long>(d.train.size()), static_cast<long long>(d.test.size()), hg::get_num_threads(),
                a.device.c_str());
    if (!a.compare) {
      hg::manual_seed(a.seed);
      print_summary(a, body(a, d));
      if (a.ddp) hg::dist::destroy_process_group();
      return 0;
    }
    std::vector<Summary> rows;
    for (const Mode& m : compare_modes()) {
      Args am = a;
      // GCC 12 -Wrestrict misfires on "O" + string
      am.opt_level = {'O', static_cast<char>('0' + static_cast<int>(m.level))};
      am.amp = m.level == hg::amp::OptLevel::O0 ? "off" : m.dtype == hg::DType::BF16 ? "bf16" : "fp16";
      std::printf("\n== %s ==\n", m.label().c_str());
      hg::manual_seed(a.seed);  // the same initial weights and data order in every row
      rows.push_back(body(am, d));
      print_summary(am, rows.back());
    }
    print_table(rows);
    if (!a.inspect.empty()) {  // what each precision keeps in memory at the same point of the same step
      std::vector<hg::amp::inspect::LedgerSnapshot> forwards;
      for (const Summary& r : rows)
        if (r.inspected) forwards.push_back(*r.inspected);
      std::printf("\nMemory ledger after the first step's forward, every mode:\n");
      hg::amp::inspect::print_ledgers(std::cout, forwards);
    }
    if (a.ddp) hg::dist::destroy_process_group();
    return 0;
  } catch (const std::exception& e) {  // hg::Error, std::filesystem::filesystem_error, std::bad_alloc...
    std::fprintf(stderr, "%s: error: %s\n", defaults_name.c_str(), e.what());
  } catch (...) {
    std::fprintf(stderr, "%s: error: an unknown exception\n", defaults_name.c_str());
  }
  return 1;
}

}  // namespace example
