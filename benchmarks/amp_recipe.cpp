// PyTorch's "Automatic Mixed Precision" recipe, in halfgrad: a stack of Linear+ReLU layers, MSE loss,
// SGD lr 1e-3 on random data, timed in default precision (F32) and under autocast (BF16, and F16).
//   ./build/amp_recipe [--width 1024] [--batch 256] [--layers 3] [--batches 20] [--epochs 2] [--full]
//                      [--runs N] [--threads N] [--device cpu|cuda] [--graph] [--ddp [--zero]]
// --full uses the recipe's own sizes (width 4096, batch 512, 3 layers, 50 batches, 3 epochs).
// Timing as benchmarks/torch/amp_recipe.py's: one untimed warm-up step, then the device synchronized before
// and after the timed epochs (benchmarks/bench_util.h). --runs N times the epochs N times over and prints
// the median with the fastest and slowest run (default 1, the PyTorch script's one run). --graph (CUDA): an
// epoch's steps are captured once after the warm-up step (cuda/graph.h) and each epoch is one replay.
// After the timed runs, one more (untimed) training step of each is taken apart by amp::inspect::MemoryLedger:
// bytes by role and dtype after forward and after backward, side by side.
// --ddp (under mpirun -np N): nn::DistributedDataParallel; --batch stays the global batch, each rank trains on its
// rows of the same random data (so the steps are one process's), rank 0 prints, and each precision's lines add every
// rank's samples per second and the job's (the slowest rank's time). --zero shards the optimizer (ZeroRedundantOptimizer).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "amp/inspect/memory.h"
#include "benchmarks/bench_util.h"
#include "cuda/graph.h"
#include "examples/cli.h"
#include "halfgrad.h"
#include "cpu/gemm.h"

namespace {

using hg::Tensor;

struct Config {
  int64_t width = 1024, batch = 256, layers = 3, batches = 20, epochs = 2;
  int runs = 1;
  hg::Device device = hg::Device::cpu();
  bool graph = false;  // replay a captured epoch (CUDA)
  bool ddp = false, zero = false;  // data-parallel over the ranks of mpirun; the optimizer sharded too
};

// The recipe's make_model: (layers - 1) x [Linear(w, w), ReLU] then Linear(w, w).
std::shared_ptr<hg::nn::Sequential> make_model(const Config& c) {
  auto m = std::make_shared<hg::nn::Sequential>();
  for (int64_t i = 0; i + 1 < c.layers; ++i) {
    m->push_back(hg::nn::Linear(c.width, c.width));
    m->push_back(hg::nn::ReLU());
  }
  m->push_back(hg::nn::Linear(c.width, c.width));
  m->to(c.device);
  return m;
}

using hg::amp::inspect::LedgerSnapshot;

struct Result {
  double seconds = 0;
  int64_t peak_bytes = 0;  // above the data and the parameters
  LedgerSnapshot forward, backward;  // the untimed ledger step's memory after forward and after backward
};

// Where one step's memory ledger goes: snapshots after forward (inside the autocast region, while the cast
// cache holds the weight copies) and after backward.
struct LedgerProbe {
  hg::amp::inspect::MemoryLedger& ledger;
  const char* name;
  Result& r;
};

// One training step of the recipe (autocast forward and loss, scaled backward, step, update), with a
// ledger probe for the untimed step after the timed loop.
void train_step(const Config& c, std::optional<hg::DType> amp, hg::nn::Module& net, hg::optim::Optimizer& opt,
                hg::amp::GradScaler& scaler, const Tensor& x, const Tensor& target, LedgerProbe* probe = nullptr) {
  if (probe) probe->ledger.begin_forward();
  Tensor loss;
  {
    std::optional<hg::amp::Autocast> ac;
    if (amp) ac.emplace(c.device.type, *amp);
    loss = hg::mse_loss(net.forward(x), target);
    if (probe) probe->r.forward = probe->ledger.snapshot(probe->name);
  }
  scaler.scale(loss).backward();
  if (probe) probe->r.backward = probe->ledger.snapshot(probe->name);
  scaler.step(opt);
  scaler.update();
  opt.zero_grad();
}

// Trains like the recipe and prints its two lines; amp is the autocast dtype, or none for F32. F16
// runs with a dynamic GradScaler, as the recipe does (BF16 has F32's range and needs none).
Result run(const Config& c, std::optional<hg::DType> amp, const char* label, const char* name) {
  hg::manual_seed(0);
  auto net = make_model(c);
  hg::optim::SGD sgd(net->parameters(), {.lr = 1e-3});
  std::optional<hg::optim::ZeroRedundantOptimizer> zero;
  if (c.zero) zero.emplace(net->parameters(), sgd);
  hg::optim::Optimizer& opt = zero ? static_cast<hg::optim::Optimizer&>(*zero) : sgd;
  std::shared_ptr<hg::nn::Module> model = net;
  if (c.ddp) model = std::make_shared<hg::nn::DistributedDataParallel>(net, hg::nn::DDPOptions{});
  hg::amp::GradScaler scaler({.enabled = amp == hg::DType::F16});
  const int rank = c.ddp ? hg::dist::get_rank() : 0, world = c.ddp ? hg::dist::get_world_size() : 1;
  const int64_t rows = c.batch / world;  // this rank's rows of each global batch
  std::vector<Tensor> data, targets;
  for (int64_t i = 0; i < c.batches; ++i) {
    data.push_back(hg::randn({c.batch, c.width}, {.device = c.device}).narrow(0, rank * rows, rows).contiguous());
    targets.push_back(hg::randn({c.batch, c.width}, {.device = c.device}).narrow(0, rank * rows, rows).contiguous());
  }
  hg::memory::reset_peak(c.device);
  const int64_t base = hg::memory::allocated(c.device);
  train_step(c, amp, *model, opt, scaler, data.front(), targets.front());  // warm-up: kernels chosen, handles made
  auto epoch = [&] {
    for (size_t i = 0; i < data.size(); ++i) train_step(c, amp, *model, opt, scaler, data[i], targets[i]);
  };
  std::optional<hg::cuda::Graph> graph;
  if (c.graph) {  // the warm-up made the state; every step ends with zero_grad, so the graph frees what it allocates
    hg::cuda::synchronize(c.device.index);
    graph.emplace(hg::cuda::Graph::capture(c.device.index, epoch));
  }
  const hg::bench::Timing t = hg::bench::time_calls(
      [&] {
        for (int64_t e = 0; e < c.epochs; ++e) graph ? graph->launch() : epoch();
      },
      {.warmup = 0, .samples = c.runs, .min_seconds = 0, .device = c.device});
  Result r;
  r.seconds = t.median;
  r.peak_bytes = hg::memory::peak_allocated(c.device) - base;
  std::printf("%s\nTotal execution time = %.3f sec\nMax memory used by tensors = %lld bytes\n", label, r.seconds,
              static_cast<long long>(r.peak_bytes));
  if (t.samples > 1) std::printf("(median of %d runs; fastest %.3f sec, slowest %.3f sec)\n", t.samples, t.min, t.max);
  if (c.ddp) {  // every rank's samples per second, and the job's (all ranks' samples over the slowest rank's time)
    const double samples = static_cast<double>(c.batches * c.epochs * rows);
    const Tensor each = hg::empty({world}, {.dtype = hg::DType::F64});
    hg::dist::all_gather_into_tensor(each, hg::full({1}, r.seconds, {.dtype = hg::DType::F64}));
    const std::vector<double> secs = each.to_vector<double>();
    std::printf("samples/s per rank:");
    for (int q = 0; q < world; ++q) std::printf(" %.0f", samples / secs[static_cast<size_t>(q)]);
    std::printf("; job (%d ranks) %.0f\n", world, samples * world / *std::max_element(secs.begin(), secs.end()));
  }
  // One more step, untimed and after the peak was read, taken apart by the memory ledger.
  hg::amp::inspect::MemoryLedger ledger({.model = net.get(), .optimizer = &opt, .device = c.device});
  hg::memory::reset_peak(c.device);
  LedgerProbe probe{ledger, name, r};
  train_step(c, amp, *model, opt, scaler, data.front(), targets.front(), &probe);
  return r;
}

double ratio(int64_t a, int64_t b) { return b > 0 ? static_cast<double>(a) / static_cast<double>(b) : 0.0; }

// The ledgers side by side, and where AMP saved memory and where it did not, in numbers.
void print_ledgers(const Result& f32, const Result& bf16, const Result& f16) {
  using hg::amp::inspect::Role;
  using hg::amp::inspect::format_bytes;
  std::printf("\nMemory ledger of one more training step (amp/inspect/memory.h), after forward:\n");
  hg::amp::inspect::print_ledgers(std::cout, {f32.forward, bf16.forward, f16.forward});
  std::printf("after backward:\n");
  hg::amp::inspect::print_ledgers(std::cout, {f32.backward, bf16.backward, f16.backward});
  const auto act = [](const Result& r, std::optional<hg::DType> dt = std::nullopt) {
    return dt ? r.forward.at(Role::Activations, *dt) : r.forward.role_bytes(Role::Activations);
  };
  std::printf("AMP saves: activations kept for backward, %s in F32 vs %s BF16 + %s F32 under autocast (%.2fx): "
              "the layers save half-size tensors; the F32 part is the loss's (policy Fp32).\n",
              format_bytes(act(f32)).c_str(), format_bytes(act(bf16, hg::DType::BF16)).c_str(),
              format_bytes(act(bf16, hg::DType::F32)).c_str(), ratio(act(bf16), act(f32)));
  std::printf("AMP does not: params (%s) and grads (%s) stay F32, the cast cache adds %s of BF16 weight copies, "
              "masters and optimizer state (none for plain SGD) stay F32.\n",
              format_bytes(bf16.backward.role_bytes(Role::Params)).c_str(),
              format_bytes(bf16.backward.role_bytes(Role::Grads)).c_str(),
              format_bytes(bf16.forward.role_bytes(Role::CastCache)).c_str());
}

}  // namespace

[[noreturn]] void usage(const std::string& problem) {
  example::exit_with_usage("amp_recipe", problem, "[--width N] [--batch N] [--layers N] [--batches N] [--epochs N] [--full] [--runs N] [--threads N] [--device cpu|cuda] [--graph] [--ddp [--zero]]");
}

int main(int argc, char** argv) {
  Config c;
  auto on_switch = [&](const std::string& f) {
    if (f == "--graph") c.graph = true;
    else if (f == "--ddp") c.ddp = true;
    else if (f == "--zero") c.zero = true;
    else if (f == "--full")
      c = {.width = 4096, .batch = 512, .layers = 3, .batches = 50, .epochs = 3, .runs = c.runs, .device = c.device,
           .graph = c.graph, .ddp = c.ddp, .zero = c.zero};
    else return false;
    return true;
  };
  auto on_value = [&](const std::string& f, const std::string& v) {
    using example::parse_number;
    if (f == "--width") c.width = parse_number<int64_t>(v, 1);
    else if (f == "--batch") c.batch = parse_number<int64_t>(v, 1);
    else if (f == "--layers") c.layers = parse_number<int64_t>(v, 1);
    else if (f == "--batches") c.batches = parse_number<int64_t>(v, 1);
    else if (f == "--epochs") c.epochs = parse_number<int64_t>(v, 1);
    else if (f == "--runs") c.runs = parse_number<int>(v, 1, 100);
    else if (f == "--threads") hg::set_num_threads(parse_number<int>(v, 1, hg::max_num_threads()));
    else if (f == "--device" && (v == "cpu" || v == "cuda")) c.device = v == "cuda" ? hg::Device::cuda() : hg::Device::cpu();
    else if (f == "--device") throw std::invalid_argument("expected cpu or cuda");
    else return false;
    return true;
  };
  example::parse_flags(argc, argv, on_switch, on_value, usage);
  if (c.graph && !c.device.is_cuda()) usage("--graph captures CUDA work: add --device cuda");
  if (c.zero && !c.ddp) usage("--zero shards the optimizer over the ranks of --ddp; add --ddp");
  if (c.ddp && c.graph) usage("--graph captures one process's CUDA work; drop --ddp");
  return example::guarded_main("amp_recipe", [&] {
    if (c.ddp) {
      hg::dist::init_process_group();
      const int world = hg::dist::get_world_size();
      HG_CHECK(c.batch % world == 0, "--ddp: --batch ", c.batch, " is the global batch and must divide evenly over ",
               world, " ranks; pass a multiple of ", world);
      if (hg::dist::get_rank() != 0 && std::freopen("/dev/null", "w", stdout) == nullptr)  // rank 0 prints
        throw hg::Error("--ddp: cannot silence stdout on the other ranks");
    }
    std::printf("amp_recipe on %s; BF16 GEMM engine %s\n", hg::cpu_summary().c_str(),
                hg::cpu::gemm_engine(hg::DType::BF16).c_str());
    std::printf("width %lld, batch %lld, %lld layers, %lld batches x %lld epochs, %d thread(s), %s%s\n",
                static_cast<long long>(c.width), static_cast<long long>(c.batch), static_cast<long long>(c.layers),
                static_cast<long long>(c.batches), static_cast<long long>(c.epochs), hg::get_num_threads(),
                c.device.is_cpu() ? "cpu" : "cuda", c.graph ? ", each epoch one graph replay" : "");
    if (c.ddp)
      std::printf("data-parallel over %d rank(s) (each %lld rows of a batch)%s\n", hg::dist::get_world_size(),
                  static_cast<long long>(c.batch / hg::dist::get_world_size()),
                  c.zero ? ", the optimizer sharded (ZeroRedundantOptimizer)" : "");
    const Result f32 = run(c, std::nullopt, "Default precision (F32):", "F32");
    const Result bf16 = run(c, hg::DType::BF16, "Mixed precision (autocast BF16):", "BF16");
    const Result f16 = run(c, hg::DType::F16, "Mixed precision (autocast F16):", "F16");
    std::printf("\nspeed-up over F32: BF16 %.2fx, F16 %.2fx\n", f32.seconds / bf16.seconds, f32.seconds / f16.seconds);
    std::printf("peak tensor memory vs F32: BF16 %.2fx, F16 %.2fx\n", ratio(bf16.peak_bytes, f32.peak_bytes),
                ratio(f16.peak_bytes, f32.peak_bytes));
    // Why autocast can need more: it keeps a low-precision copy of every F32 weight for the backward
    // and widens each weight gradient from BF16 to F32, while it shrinks only the activations the layers
    // save (those in BF16 take half the bytes; the loss's stay F32). When the weights outweigh a batch's
    // activations (width 1024 at batch 256: 4 MB vs 1 MB per layer) the copies win.
    std::printf("(autocast adds a BF16 copy of each weight and saves the layers' activations in BF16, half the\n"
                " bytes, while the loss runs in F32: the ledger below splits it)\n");
    print_ledgers(f32, bf16, f16);
    if (c.ddp) hg::dist::destroy_process_group();
    return 0;
  });
}
