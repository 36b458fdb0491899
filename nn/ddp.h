#pragma once
// nn::DistributedDataParallel: data parallelism as torch.nn.parallel.DistributedDataParallel does it. Every rank
// holds the whole model and trains on its own share of each batch (data::DistributedSampler); the gradients are
// averaged across ranks during the backward, so every rank's optimizer takes the same step.
//
//   hg::dist::init_process_group();                      // mpirun -np 2 ./program
//   auto model = std::make_shared<nn::Sequential>(...);
//   nn::DistributedDataParallel ddp(model);              // rank 0's parameters and buffers copied to every rank
//   optim::SGD opt(model->parameters(), {.lr = 0.1});
//   Tensor loss = nn::functional::cross_entropy(ddp(x), y);
//   loss.backward();                                     // returns with every rank's grads averaged
//   opt.step();
//
// How: at construction the model is checked to be the same on every rank (an error names the first parameter
// that differs), and rank 0's parameters and buffers are broadcast. The parameters are split into buckets of
// about bucket_cap_mb (25 MB, torch's default) in reverse registration order, the order the backward produces
// their gradients. A post-accumulate-grad hook on every parameter copies its gradient into its bucket; a full
// bucket's all-reduce starts at once, while the backward goes on with earlier layers, and buckets start in
// order (index 0 first) on every rank. At the end of the backward (autograd::queue_callback) every bucket is
// waited for and the averages are written into the parameters' grad. CPU tensors go through MPI; a module on a CUDA
// device too, its buckets staged through host memory (hg::dist without NCCL).
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dist/dist.h"
#include "nn/module.h"

namespace hg::nn {

// One bucket of gradients as a communication hook receives it (torch's dist.GradBucket).
struct GradBucket {
  int index = 0;                   // buckets are reduced in index order; 0 holds the last-registered parameters
  int num_buckets = 0;
  Tensor buffer;                   // the gradients of `parameters`, flattened and concatenated, in their dtype
  std::vector<Tensor> parameters;  // in the order their gradients sit in buffer (registration order)
  std::vector<int64_t> offsets;    // where each one starts in buffer, in elements
  bool is_last() const { return index == num_buckets - 1; }
};

// A bucket's communication in flight (torch's Future from a comm hook): wait() blocks until the collective is done,
// then runs `then` once, which leaves the bucket's result in bucket.buffer.
class CommFuture {
 public:
  CommFuture() = default;
  explicit CommFuture(dist::Work work, std::function<void()> then = {})
      : work_(std::move(work)), then_(std::move(then)) {}
  bool is_completed();  // polls (advancing the collective); runs `then` when it finds it done
  void wait();

 private:
  void finish();  // done: runs `then` once
  dist::Work work_;
  std::function<void()> then_;
  bool done_ = false;
};

// Starts the communication of one bucket; the averaged gradients must be in bucket.buffer once the future is done.
using CommHook = std::function<CommFuture(GradBucket& bucket)>;

// The built-in hooks of torch.distributed.algorithms.ddp_comm_hooks.default_hooks.
namespace ddp_comm_hooks {
// buffer /= world size, then all_reduce(Sum): the average.
CommHook allreduce_hook();
// The bucket cast to F16 (BF16), divided by the world size in F16 (BF16) before the sum, so that a sum of W ranks'
// values cannot overflow where one rank's value did not; all_reduce(Sum) of the 16-bit copy (half the bytes), then
// cast back into buffer. The gradients lose F16's (BF16's) precision on the way: the saving is in bytes sent.
CommHook fp16_compress_hook();
CommHook bf16_compress_hook();
}  // namespace ddp_comm_hooks

struct DDPOptions {
  // Buckets are cut once they reach this size (torch's bucket_cap_mb; MiB). As torch, the bucket formed first (the
  // first-registered parameters, reduced last) is cut at 1 MiB, so the end of the backward waits on less.
  double bucket_cap_mb = 25;
  // false: every parameter must get a gradient in every backward (an error names those that did not). true: the
  // forward's graph is searched for the parameters it does not reach; they count as ready (their gradient, if any,
  // from earlier no_sync steps, or zero) and a parameter no rank used keeps its grad untouched (torch's).
  bool find_unused_parameters = false;
  bool broadcast_buffers = true;  // rank 0's buffers (batch norm's statistics) copied to every rank each forward
  // true: after the backward each parameter's grad is a view into its bucket (torch's gradient_as_bucket_view), which
  // saves a copy per step; a grad kept across steps then changes with the next averaging backward
  bool gradient_as_bucket_view = false;
};

class DistributedDataParallel : public Module {
 public:
  // Needs hg::dist::init_process_group() first; every rank constructs it with the same model.
  explicit DistributedDataParallel(std::shared_ptr<Module> module, DDPOptions options = {});
  ~DistributedDataParallel() override;
  DistributedDataParallel(DistributedDataParallel&&) = default;
  DistributedDataParallel& operator=(DistributedDataParallel&&) = default;

  std::string type_name() const override { return "DistributedDataParallel"; }
  std::string extra_repr() const override;
  // The wrapped module's forward; with grad mode on and outside no_sync, the next backward averages the gradients.
  Tensor forward(const Tensor& x) override;
  Module& module() const;  // the wrapped module (its state_dict has no "module." prefix)

  // Gradient accumulation without communication (torch's no_sync): backwards of forwards run while the guard lives
  // only accumulate into grad; the first backward after it averages everything accumulated.
  class NoSync {
   public:
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    friend class DistributedDataParallel;
    explicit NoSync(DistributedDataParallel* d);
    DistributedDataParallel* ddp_;
    bool prev_;
  };
  [[nodiscard]] NoSync no_sync();

  // Replaces the default (gradients times 1/world size while copied into the bucket, then all_reduce Sum). Once,
  // before the first backward, as torch.
  void register_comm_hook(CommHook hook);

  // The buckets, in reduction order, by parameter name.
  std::vector<std::vector<std::string>> bucket_parameter_names() const;

  // What the backwards did, for benchmarks and tests.
  struct Stats {
    int64_t backwards = 0;                  // backwards that averaged gradients
    int64_t buckets = 0;                    // buckets reduced in them
    int64_t buckets_started_in_backward = 0;  // of those, started before the backward's last node ran
    double wait_seconds = 0;                // spent at the backward's end waiting for communication
  };
  const Stats& stats() const;
  void reset_stats();

  struct State;  // nn/ddp.cpp

 private:
  std::shared_ptr<Module> module_;
  std::shared_ptr<State> s_;  // the parameters' hooks hold it weakly
};

}  // namespace hg::nn
