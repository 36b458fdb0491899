// Data-parallel scaling: how many samples per second N ranks of nn::DistributedDataParallel train, against one rank
// alone, and how much of the gradients' all-reduce the backward hides. Run under mpirun, one thread per rank:
//   mpirun -np 2 ./build/bench_ddp [--workload mlp|cnn|all] [--steps N] [--repeats N] [--threads N] [--hook fp16|bf16]
// Synthetic data of the real shapes (bench_train's workloads, benchmarks/workloads.h, each rank with the workload's
// batch: weak scaling). Four phases per workload, each `repeats` times `steps` steps, medians over the repeats:
//   alone      rank 0 trains without DDP while the other ranks wait (the 1-rank baseline)
//   together   every rank trains without DDP at once (what sharing the machine costs, before any communication)
//   ddp        every rank trains with DDP (the slowest rank's time)
//   comm       every rank all-reduces its buckets one after another, blocking (the communication a step needs)
// The exposed communication is the DDP step's wait at the end of its backward on the rank that waited least (the
// last to arrive: the others also wait for it).
// and prints, per workload, one table row and one JSON line: samples/s alone and with DDP, the scaling efficiency
// (DDP samples/s over N times alone), the efficiency sharing alone allows (alone over together), and the share of
// the communication hidden behind the backward (1 - the DDP step's wait at the end of its backward / comm).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "benchmarks/workloads.h"
#include "core/cpu_features.h"
#include "examples/cli.h"
#include "halfgrad.h"

namespace {

using hg::Tensor;
using clock_type = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
double spread(const std::vector<double>& v) {
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return (*hi - *lo) / median(v);
}

// The largest (smallest) value over the ranks.
double over_ranks(double v, hg::dist::ReduceOp op) {
  const Tensor t = hg::full({1}, v, {.dtype = hg::DType::F64});
  hg::dist::all_reduce(t, op);
  return t.item();
}
double max_over_ranks(double v) { return over_ranks(v, hg::dist::ReduceOp::Max); }

struct Result {
  double alone = 0, together = 0, ddp = 0, comm = 0, wait = 0;  // seconds per step (medians)
  double ddp_spread = 0;
};

Result run(const hg::bench::Workload& w, int steps, int repeats, const std::string& hook) {
  const int rank = hg::dist::get_rank();
  hg::manual_seed(0);
  const auto plain = w.model();
  hg::manual_seed(0);
  const auto wrapped = w.model();
  auto opt_plain = w.optimizer(*plain);
  auto opt_ddp = w.optimizer(*wrapped);
  hg::nn::DistributedDataParallel ddp(wrapped, {.gradient_as_bucket_view = true});
  if (hook == "fp16") ddp.register_comm_hook(hg::nn::ddp_comm_hooks::fp16_compress_hook());
  if (hook == "bf16") ddp.register_comm_hook(hg::nn::ddp_comm_hooks::bf16_compress_hook());
  hg::Generator g(static_cast<uint64_t>(100 + rank));  // each rank its own batch
  const Tensor x = hg::randn(w.input, {}, &g);
  const int64_t batch = w.input[0];
  std::vector<int64_t> labels(static_cast<size_t>(batch));
  for (int64_t i = 0; i < batch; ++i) labels[static_cast<size_t>(i)] = (i * 7 + rank) % w.classes;
  const Tensor y = hg::from_vector(labels, {batch}, {.dtype = hg::DType::I64});
  const auto step = [&](hg::nn::Module& m, hg::optim::Optimizer& opt) {
    opt.zero_grad();
    hg::cross_entropy(m(x), y).backward();
    opt.step();
  };
  // per step, `repeats` times: the median
  const auto timed = [&](const std::function<void()>& body, bool everyone) {
    std::vector<double> per_step;
    for (int r = 0; r < repeats; ++r) {
      hg::dist::barrier();
      double t = 0;
      if (everyone || rank == 0) {
        const auto t0 = clock_type::now();
        for (int k = 0; k < steps; ++k) body();
        t = std::chrono::duration<double>(clock_type::now() - t0).count() / steps;
      }
      hg::dist::barrier();  // the others wait here while rank 0 runs alone
      per_step.push_back(everyone ? max_over_ranks(t) : max_over_ranks(rank == 0 ? t : 0));
    }
    return per_step;
  };
  for (int k = 0; k < 3; ++k) step(*plain, *opt_plain);  // warm-up: plans, optimizer state, pages
  for (int k = 0; k < 3; ++k) step(ddp, *opt_ddp);
  Result r;
  r.alone = median(timed([&] { step(*plain, *opt_plain); }, false));
  r.together = median(timed([&] { step(*plain, *opt_plain); }, true));
  ddp.reset_stats();
  const std::vector<double> d = timed([&] { step(ddp, *opt_ddp); }, true);
  r.ddp = median(d);
  r.ddp_spread = spread(d);
  // a rank that finished its backward first also waits for the others to reach theirs: the last to arrive waits only
  // for the communication its backward did not hide
  r.wait = over_ranks(ddp.stats().wait_seconds / static_cast<double>(ddp.stats().backwards), hg::dist::ReduceOp::Min);
  // the same bytes as DDP's buckets (in the hook's dtype), all-reduced one after another, blocking
  std::vector<Tensor> buckets;
  for (const auto& names : ddp.bucket_parameter_names()) {
    int64_t n = 0;
    for (const auto& [name, p] : wrapped->named_parameters())
      if (std::find(names.begin(), names.end(), name) != names.end()) n += p.numel();
    buckets.push_back(hg::zeros({n}, {.dtype = hook == "fp16" ? hg::DType::F16 : hook == "bf16" ? hg::DType::BF16
                                                                                               : hg::DType::F32}));
  }
  r.comm = median(timed([&] { for (const Tensor& b : buckets) hg::dist::all_reduce(b); }, true));
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::string which = "all", hook;
  int steps = 0, repeats = 5, threads = 1;
  try {
    hg::dist::init_process_group();
    const int rank = hg::dist::get_rank(), world = hg::dist::get_world_size();
    example::parse_flags(
        argc, argv, [](const std::string&) { return false; },
        [&](const std::string& f, const std::string& v) {
          if (f == "--workload") which = v;
          else if (f == "--steps") steps = example::parse_number<int>(v, 1);
          else if (f == "--repeats") repeats = example::parse_number<int>(v, 1);
          else if (f == "--threads") threads = example::parse_number<int>(v, 1, hg::max_num_threads());
          else if (f == "--hook") hook = v;
          else return false;
          return true;
        },
        [&](const std::string& problem) {
          if (rank == 0)
            std::fprintf(stderr, "bench_ddp: %s\nusage: mpirun -np N bench_ddp [--workload mlp|cnn|all] [--steps N] "
                                 "[--repeats N] [--threads N] [--hook fp16|bf16]\n", problem.c_str());
          hg::dist::destroy_process_group();
          std::exit(2);
        });
    HG_CHECK(which == "mlp" || which == "cnn" || which == "all", "bench_ddp: --workload must be mlp, cnn or all, got ",
             which);
    HG_CHECK(hook.empty() || hook == "fp16" || hook == "bf16", "bench_ddp: --hook must be fp16 or bf16, got ", hook);
    hg::set_num_threads(threads);
    if (rank == 0) {
      std::printf("bench_ddp: %d rank(s) x %d thread(s), %s, %s; CPU: %s\n", world, threads,
                  hg::dist::backend_version().c_str(), hook.empty() ? "F32 all-reduce" : (hook + " compression").c_str(),
                  hg::cpu_summary().c_str());
      std::printf("%-9s %6s %12s %12s %10s %14s %12s %9s %9s %8s\n", "workload", "batch", "alone smp/s", "DDP smp/s",
                  "scaling", "sharing allows", "comm ms", "wait ms", "hidden", "spread");
    }
    for (const hg::bench::Workload& w : hg::bench::fp32_workloads()) {
      if (w.name != "mlp" && w.name != "cnn") continue;
      if (which != "all" && which != w.name) continue;
      const int n = steps > 0 ? steps : w.name == "mlp" ? 100 : 8;
      const Result r = run(w, n, repeats, hook);
      const double b = static_cast<double>(w.input[0]);
      const double alone = b / r.alone, ddp = world * b / r.ddp;
      const double scaling = ddp / (world * alone), sharing = r.alone / r.together;
      const double hidden = r.comm > 0 ? 1.0 - r.wait / r.comm : 0.0;
      if (rank == 0) {
        std::printf("%-9s %6.0f %12.0f %12.0f %9.2fx %13.2fx %12.3f %9.3f %8.0f%% %7.0f%%\n", w.name.c_str(), b, alone,
                    ddp, scaling * world, sharing * world, r.comm * 1e3, r.wait * 1e3, 100 * hidden, 100 * r.ddp_spread);
        std::printf("{\"bench\": \"ddp\", \"workload\": \"%s\", \"ranks\": %d, \"threads\": %d, \"hook\": \"%s\", "
                    "\"batch_per_rank\": %.0f, \"steps\": %d, \"repeats\": %d, \"alone_samples_per_s\": %.1f, "
                    "\"ddp_samples_per_s\": %.1f, \"speedup\": %.3f, \"efficiency\": %.3f, \"sharing_speedup\": %.3f, "
                    "\"comm_ms\": %.4f, \"wait_ms\": %.4f, \"hidden\": %.3f, \"ddp_spread\": %.3f}\n",
                    w.name.c_str(), world, threads, hook.c_str(), b, n, repeats, alone, ddp, scaling * world, scaling,
                    sharing * world, r.comm * 1e3, r.wait * 1e3, hidden, r.ddp_spread);
        std::fflush(stdout);
      }
    }
    if (rank == 0)
      std::printf("scaling: DDP samples/s over one rank alone's (ideal: the rank count); sharing allows: the same "
                  "for ranks training without communication; hidden: 1 - wait / comm\n");
    hg::dist::destroy_process_group();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_ddp: %s\n", e.what());
    return 1;
  }
}
