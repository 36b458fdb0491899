// nn::DistributedDataParallel across real MPI ranks: CTest runs this program under mpirun with 1, 2 and 3 ranks
// (tests/CMakeLists.txt). Every rank can compute every other rank's local gradients (same model, the other ranks'
// batches), so the averaged gradients are checked bit for bit against their definitions. Exits 1 naming the first
// failed check.
//   mpirun -np 2 ddp_train              # equivalence with one process, buckets, hooks, no_sync, unused, scaler
//   mpirun -np 2 ddp_train --timeout    # rank 1 reaches its backward late: rank 0's backward times out
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "dist_check.h"
#include "halfgrad.h"

using namespace hg;
using dist_check::check;
using dist_check::expect_error;
using dist_check::failures;
using dist_check::identical;

namespace {


std::vector<float> floats(const Tensor& t) { return t.to(DType::F32).contiguous().to_vector<float>(); }
bool same_bits(const Tensor& a, const Tensor& b) {
  const auto x = floats(a), y = floats(b);
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

bool identical(const StateDict& a, const StateDict& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [k, t] : a) {
    const auto it = b.find(k);
    if (it == b.end() || !dist_check::identical(t, it->second)) return false;
  }
  return true;
}

// 64 -> 512 -> 512 -> 10: fc2's weight is 1 MiB, so the first bucket (cut at 1 MiB, as torch) holds fc1 and fc2's
// weight; the rest is a second bucket at the default 25 MB, or a bucket each at a small bucket_cap_mb. `smooth`: tanh
// in place of ReLU, for comparisons over many steps (a ReLU whose input is near 0 flips on a last-bit difference, and
// the runs part by a learning rate times a gradient there).
std::shared_ptr<nn::Sequential> make_model(uint64_t seed, int64_t hidden = 512, bool smooth = false) {
  manual_seed(seed);
  if (smooth)
    return std::make_shared<nn::Sequential>(nn::Linear(64, 512), nn::Tanh(), nn::Linear(512, hidden), nn::Tanh(),
                                            nn::Linear(hidden, 10));
  return std::make_shared<nn::Sequential>(nn::Linear(64, 512), nn::ReLU(), nn::Linear(512, hidden), nn::ReLU(),
                                          nn::Linear(hidden, 10));
}

constexpr int64_t kGlobalBatch = 24;  // divisible by 1, 2 and 3 ranks

struct Batch {
  Tensor x, y;
};
// The global batch of step `step`; rows [r * n / W, (r + 1) * n / W) are rank r's.
Batch global_batch(int step) {
  Generator g(static_cast<uint64_t>(1000 + step));
  const Tensor x = randn({kGlobalBatch, 64}, {}, &g);
  return {x, std::get<1>(x.narrow(1, 0, 10).max(1))};  // learnable: the largest of the first 10 inputs
}
Batch shard(const Batch& b, int rank, int world) {
  const int64_t n = kGlobalBatch / world;
  return {b.x.narrow(0, rank * n, n).contiguous(), b.y.narrow(0, rank * n, n).contiguous()};
}

// Rank q's local gradients for batch b, from a plain copy of the model (no DDP): what DDP averages.
std::vector<Tensor> local_grads(nn::Module& plain, const Batch& b) {
  plain.zero_grad();
  cross_entropy(plain(b.x), b.y).backward();
  std::vector<Tensor> g;
  for (const Tensor& p : plain.parameters()) g.push_back(p.grad().clone());
  return g;
}

void copy_params(nn::Module& dst, const nn::Module& src) { dst.load_state_dict(src.state_dict()); }

// The definitions: per parameter, the ranks' local gradients combined in rank order.
enum class Reduce { Default, AllreduceHook, Fp16, Bf16 };
std::vector<Tensor> expected_average(const std::vector<std::vector<Tensor>>& per_rank, Reduce how) {
  const int world = static_cast<int>(per_rank.size());
  std::vector<Tensor> out;
  for (size_t i = 0; i < per_rank[0].size(); ++i) {
    Tensor acc;
    for (int q = 0; q < world; ++q) {
      const Tensor& g = per_rank[q][i];
      Tensor term;
      switch (how) {
        case Reduce::Default: term = g * (1.0 / world); break;        // torch's reducer: times 1/W into the bucket
        case Reduce::AllreduceHook: term = g / double(world); break;  // allreduce_hook: div_ by W
        case Reduce::Fp16: term = (g.to(DType::F16) / double(world)).to(DType::F32); break;
        case Reduce::Bf16: term = (g.to(DType::BF16) / double(world)).to(DType::F32); break;
      }
      acc = q == 0 ? term : acc + term;  // rank order, left to right (halves: in F32, rounded once below)
    }
    if (how == Reduce::Fp16) acc = acc.to(DType::F16).to(DType::F32);
    if (how == Reduce::Bf16) acc = acc.to(DType::BF16).to(DType::F32);
    out.push_back(acc);
  }
  return out;
}

// Pre-division: a gradient of 40000 on every rank is 40000 after fp16_compress_hook. Summed first, two or more
// ranks' 40000s would pass F16's largest finite value (65504) and arrive as inf: a step skipped for nothing.
void compression_divides_before_the_sum() {
  const int world = dist::get_world_size();
  manual_seed(3);
  auto m = std::make_shared<nn::Linear>(4, 1, false);
  nn::DistributedDataParallel ddp(m, {});
  ddp.register_comm_hook(nn::ddp_comm_hooks::fp16_compress_hook());
  (ddp(ones({1, 4})) * 40000.0).sum().backward();  // d/dw = 40000 for every weight, on every rank
  const std::vector<float> g = floats(m->weight.grad());
  check(std::all_of(g.begin(), g.end(), [](float v) { return v == 40000.0f; }),
        "fp16_compress_hook: " + std::to_string(world) + " ranks' 40000 averaged to " + std::to_string(g[0]));
  if (world > 1) {  // the same sum without the division overflows F16
    const Tensor sum = full({1}, 40000.0, {.dtype = DType::F16});
    dist::all_reduce(sum);
    check(std::isinf(sum.item()), "an F16 all_reduce of " + std::to_string(world) + " x 40000 did not overflow");
  }
}

double over_ranks_sum(double v) {
  const Tensor t = full({1}, v, {.dtype = DType::F64});
  dist::all_reduce(t);
  return t.item();
}

using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;
const MakeOptimizer kSgd = [](std::vector<Tensor> ps) -> std::unique_ptr<optim::Optimizer> {
  return std::make_unique<optim::SGD>(std::move(ps), optim::SGDArgs{.lr = 0.05, .momentum = 0.9});
};
const MakeOptimizer kAdam = [](std::vector<Tensor> ps) -> std::unique_ptr<optim::Optimizer> {
  return std::make_unique<optim::Adam>(std::move(ps), optim::AdamArgs{.lr = 1e-3});
};

// One training run: a model with its optimizer (and, under O2, its GradScaler); `ddp` when it averages through DDP
// (else the optimizer reduces: ZeroRedundantOptimizer's reduce_scatter_gradients).
struct Run {
  std::shared_ptr<nn::Sequential> model;
  optim::Optimizer* opt = nullptr;
  std::optional<amp::GradScaler> scaler;
  std::optional<nn::DistributedDataParallel> ddp;
  Run(std::shared_ptr<nn::Sequential> m, optim::Optimizer& o, bool o2) : model(std::move(m)), opt(&o) {
    if (o2) scaler.emplace(amp::initialize(*model, o, amp::OptLevel::O2).scaler_options());  // F16, F32 masters
  }
  // steps [from, to) of the global batches; returns whether each step was taken
  std::vector<bool> train(int from, int to) {
    const int rank = dist::get_rank(), world = dist::get_world_size();
    std::vector<bool> stepped;
    for (int step = from; step < to; ++step) {
      const Batch mine = shard(global_batch(step), rank, world);
      opt->zero_grad();
      const Tensor x = scaler ? mine.x.to(DType::F16) : mine.x;
      const Tensor loss = cross_entropy(ddp ? (*ddp)(x) : (*model)(x), mine.y);
      if (scaler) {
        scaler->scale(loss).backward();
        stepped.push_back(scaler->step(*opt).stepped());
        scaler->update();
      } else {
        loss.backward();
        opt->step();
        stepped.push_back(true);
      }
    }
    return stepped;
  }
};

bool same_params(nn::Module& a, nn::Module& b) {
  const auto pa = a.parameters(), pb = b.parameters();
  bool same = pa.size() == pb.size();
  for (size_t i = 0; same && i < pa.size(); ++i) same = same_bits(pa[i], pb[i]);
  return same;
}

// ZeRO-1: each rank updates its shard and all-gathers it; the steps are plain DDP's bit for bit (SGD with momentum,
// Adam, and O2's F16 parameters with F32 masters under a GradScaler), and each rank holds only its shard's state.
// The consolidated state dict is the plain optimizer's, bit for bit, and the plain optimizer's state dict loaded
// into a new ZeroRedundantOptimizer (whatever the world size: it is re-sharded) continues as the plain one does.
void zero_matches_ddp() {
  const int rank = dist::get_rank(), world = dist::get_world_size();
  for (const bool o2 : {false, true}) {
    for (const auto& [name, make] : {std::pair<const char*, MakeOptimizer>{"SGD", kSgd}, {"Adam", kAdam}}) {
      const std::string what = std::string(name) + (o2 ? " O2" : "");
      const auto a = make_model(37, 64), b = make_model(37, 64);
      const auto plain = make(a->parameters());
      optim::ZeroRedundantOptimizer zero(b->parameters(), *make(b->parameters()));
      Run ra(a, *plain, o2), rb(b, zero, o2);
      ra.ddp.emplace(a, nn::DDPOptions{});
      rb.ddp.emplace(b, nn::DDPOptions{});
      ra.train(0, 20);
      rb.train(0, 20);
      const auto pa = a->parameters(), pb = b->parameters();
      bool state_ok = true;
      int64_t mine = 0, total = 0;
      for (size_t i = 0; i < pa.size(); ++i) {
        total += pb[i].numel();
        const bool owned = zero.owner(i) == rank;
        if (owned) mine += pb[i].numel();
        state_ok = state_ok && zero.state_buffers(i).empty() != owned && zero.master(i).defined() == (owned && o2);
        if (owned && o2) state_ok = state_ok && same_bits(zero.master(i), plain->master(i));
      }
      check(same_params(*a, *b), what + ": ZeroRedundantOptimizer's steps are not plain DDP's bit for bit");
      // the memory ledger counts this rank's shard: optimizer state and masters a 1/world share, about
      const amp::inspect::LedgerSnapshot full = amp::inspect::MemoryLedger({.model = a.get(), .optimizer = plain.get()}).snapshot("plain");
      const amp::inspect::LedgerSnapshot part = amp::inspect::MemoryLedger({.model = b.get(), .optimizer = &zero}).snapshot("zero");
      using amp::inspect::Role;
      const int64_t f = full.role_bytes(Role::OptimizerState) + full.role_bytes(Role::Masters);
      const int64_t z = part.role_bytes(Role::OptimizerState) + part.role_bytes(Role::Masters);
      const int64_t z_all = static_cast<int64_t>(over_ranks_sum(static_cast<double>(z)));
      if (rank == 0)
        std::printf("%s, %d rank(s): optimizer state and masters %lld bytes per rank with ZeRO, %lld without\n",
                    what.c_str(), world, static_cast<long long>(z), static_cast<long long>(f));
      check(z_all == f && (world == 1 || z < f), what + ": the ledger's ZeRO shards (" + std::to_string(z) +
                                                    " bytes here) do not add up to the plain optimizer's " + std::to_string(f));
      check(state_ok, what + ": a rank holds state (or masters) outside its shard, or lacks them inside it");
      check(world == 1 || mine < total, what + ": this rank's shard is the whole model");

      // checkpoints: consolidated on the last rank, the plain optimizer's state dict
      const int to = world - 1;
      zero.consolidate_state_dict(to);
      if (rank == to)
        check(identical(zero.state_dict(), plain->state_dict()), what + ": the consolidated state dict is not the "
                                                                         "plain optimizer's bit for bit");
      else
        expect_error([&] { (void)zero.state_dict(); }, "consolidated on rank", what + ": state_dict off rank `to`");
      // resumed from the plain optimizer's state: a new model and ZeroRedundantOptimizer go on as the plain one
      const auto c = make_model(99, 64);
      optim::ZeroRedundantOptimizer resumed(c->parameters(), *make(c->parameters()));
      Run rc(c, resumed, o2);
      copy_params(*c, *a);
      resumed.load_state_dict(plain->state_dict());
      if (o2) rc.scaler->load_state_dict(ra.scaler->state_dict());
      rc.ddp.emplace(c, nn::DDPOptions{});
      resumed.consolidate_state_dict(0);
      ra.train(20, 25);
      rc.train(20, 25);
      check(same_params(*a, *c), what + ": resumed from the plain optimizer's state dict, the steps differ");
      if (rank == 0)
        expect_error([&] { (void)resumed.state_dict(); }, "consolidate again", what + ": a stale consolidation");
    }
  }
  const auto m = make_model(43, 64);
  optim::ZeroRedundantOptimizer zero(m->parameters(), *kSgd(m->parameters()));
  expect_error([&] { (void)zero.state_dict(); }, "consolidate_state_dict(to) on every rank", "ZeRO's state_dict");
  // torch's partition: largest first, each to the rank with the fewest elements so far (the 512x64 weights first)
  check(zero.owner(0) == 0 && (world == 1 || zero.owner(2) == 1), "the partition is torch's (largest first)");
  {  // a state dict of other parameters changes nothing on any rank
    const auto other = std::make_shared<nn::Linear>(3, 3);
    optim::SGD o(other->parameters(), {.lr = 0.1, .momentum = 0.9});
    (*other)(ones({1, 3})).sum().backward();
    o.step();
    expect_error([&] { zero.load_state_dict(o.state_dict()); }, "belongs to other parameters", "a foreign state dict");
    StateDict sd = kSgd(m->parameters())->state_dict();
    sd["state.4.momentum_buffer"] = zeros({7});  // parameter 4 (fc3's weight, 10x64) with a wrong shape
    const int owner = zero.owner(4);
    expect_error([&] { zero.load_state_dict(sd); }, rank == owner ? "momentum_buffer" : "rejected its shard",
                 "a bad entry of one rank's shard");
  }
  if (world > 6) return;
  auto tiny = std::make_shared<nn::Linear>(2, 2, false);  // one parameter for `world` ranks
  if (world > 1)
    expect_error([&] { optim::ZeroRedundantOptimizer z(tiny->parameters(), *kSgd(tiny->parameters())); },
                 "every rank needs at least one", "fewer parameters than ranks");
}

// ZeRO with sharded gradients (no DDP): the backward's end reduce-scatters, each rank holds its shard's averaged
// gradients only, bit for bit DDP's; 20 steps bit for bit plain DDP's, in F32 and O2, with an inf injected on one
// rank into a gradient another rank owns at step 7 (only that rank finds it: the scaler's consensus must skip the
// step everywhere, as DDP's average does).
void zero_reduce_scatter_matches_ddp() {
  const int rank = dist::get_rank(), world = dist::get_world_size();
  for (const bool o2 : {false, true}) {
    for (const auto& [name, make] : {std::pair<const char*, MakeOptimizer>{"SGD", kSgd}, {"Adam", kAdam}}) {
      const std::string what = std::string("reduce-scatter ") + name + (o2 ? " O2" : "");
      const auto a = make_model(41, 64), b = make_model(41, 64);
      const auto plain = make(a->parameters());
      optim::ZeroRedundantOptimizer zero(b->parameters(), *make(b->parameters()), {.reduce_scatter_gradients = true});
      check(zero.gradients_sharded() == (world > 1), what + ": gradients_sharded()");
      Run ra(a, *plain, o2), rb(b, zero, o2);
      ra.ddp.emplace(a, nn::DDPOptions{});
      // the gradients after one backward: this rank's shard averaged as DDP averages, the others' dropped
      for (Run* r : {&ra, &rb}) {
        const Batch mine = shard(global_batch(0), rank, world);
        const Tensor x = o2 ? mine.x.to(DType::F16) : mine.x;
        cross_entropy(r->ddp ? (*r->ddp)(x) : (*r->model)(x), mine.y).backward();
      }
      const auto pa = a->parameters(), pb = b->parameters();
      bool grads_ok = true;
      for (size_t i = 0; i < pa.size(); ++i)
        grads_ok = grads_ok && (zero.owner(i) == rank ? same_bits(pb[i].grad(), pa[i].grad())
                                                      : world > 1 && !pb[i].grad().defined());
      check(grads_ok, what + ": the reduce-scattered gradients are not DDP's average of this rank's shard");
      // an inf on the last rank in the gradient of a parameter rank 0 owns (fc1's weight: the largest)
      const int64_t target = 0;
      check(zero.owner(static_cast<size_t>(target)) == 0, what + ": fc1's weight is rank 0's");
      std::vector<HookHandle> hooks;
      int step_now = 0;
      if (o2 && rank == world - 1)
        for (const Tensor& p : {pa[target], pb[target]})
          hooks.push_back(p.register_hook([&step_now](const Tensor& g) {
            if (step_now != 7) return Tensor();
            Tensor r = g.clone();
            r.narrow(0, 0, 1).fill_(std::numeric_limits<double>::infinity());
            return r;
          }));
      std::vector<bool> sa, sb;
      for (step_now = 0; step_now < 20; ++step_now) {
        sa.push_back(ra.train(step_now, step_now + 1)[0]);
        sb.push_back(rb.train(step_now, step_now + 1)[0]);
      }
      check(same_params(*a, *b), what + ": the steps are not plain DDP's bit for bit");
      check(sa == sb && (!o2 || !sb[7]), what + ": the steps taken differ from DDP's (step 7 holds an inf on rank " +
                                             std::to_string(world - 1) + ")");
      if (o2) check(ra.scaler->get_scale() == rb.scaler->get_scale(), what + ": the loss scale differs from DDP's");
    }
  }
}

// Sharded gradients accumulate over several backwards (each reduces what it added), and clip_grad_norm_(opt)
// clips by the norm of every rank's gradients together: against DDP with no_sync over the first micro-batch.
void zero_reduce_scatter_accumulates_and_clips() {
  const int rank = dist::get_rank(), world = dist::get_world_size();
  const auto a = make_model(47, 64, true), b = make_model(47, 64, true);
  optim::SGD plain(a->parameters(), {.lr = 0.05});
  optim::SGD like(b->parameters(), {.lr = 0.05});
  optim::ZeroRedundantOptimizer zero(b->parameters(), like, {.reduce_scatter_gradients = true});
  nn::DistributedDataParallel ddp(a, {});
  double worst_norm = 0;
  for (int step = 0; step < 5; ++step) {
    const Batch first = shard(global_batch(2 * step), rank, world), second = shard(global_batch(2 * step + 1), rank, world);
    plain.zero_grad();
    zero.zero_grad();
    {
      auto guard = ddp.no_sync();
      cross_entropy(ddp(first.x), first.y).backward();
    }
    cross_entropy(ddp(second.x), second.y).backward();
    cross_entropy((*b)(first.x), first.y).backward();
    cross_entropy((*b)(second.x), second.y).backward();
    const double na = optim::clip_grad_norm_(plain, 0.5), nb = optim::clip_grad_norm_(zero, 0.5);
    worst_norm = std::max(worst_norm, std::abs(na - nb) / na);
    plain.step();
    zero.step();
  }
  check(worst_norm < 1e-6, "reduce-scatter: the clipped norm differs from DDP's by " + std::to_string(worst_norm) +
                               " (relative)");
  float largest = 0, diff = 0;
  const auto pa = a->parameters(), pb = b->parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    const auto x = floats(pa[i]), y = floats(pb[i]);
    for (size_t k = 0; k < x.size(); ++k) {
      largest = std::max(largest, std::abs(x[k]));
      diff = std::max(diff, std::abs(x[k] - y[k]));
    }
  }
  check(diff <= 1e-6f * largest, "reduce-scatter: accumulated and clipped, the weights part from DDP's by " +
                                     std::to_string(diff / largest) + " of the largest");
}

void averaged_gradients_match_their_definitions() {
  const int rank = dist::get_rank(), world = dist::get_world_size();
  const Batch b = global_batch(0);
  const auto plain = make_model(7);
  std::vector<std::vector<Tensor>> per_rank;
  for (int q = 0; q < world; ++q) per_rank.push_back(local_grads(*plain, shard(b, q, world)));
  const struct {
    Reduce how;
    const char* name;
    nn::CommHook hook;
  } cases[] = {{Reduce::Default, "the default reduction", nullptr},
               {Reduce::AllreduceHook, "allreduce_hook", nn::ddp_comm_hooks::allreduce_hook()},
               {Reduce::Fp16, "fp16_compress_hook", nn::ddp_comm_hooks::fp16_compress_hook()},
               {Reduce::Bf16, "bf16_compress_hook", nn::ddp_comm_hooks::bf16_compress_hook()}};
  for (const auto& c : cases) {
    for (double cap : {25.0, 0.001}) {
      const auto model = make_model(7);
      nn::DistributedDataParallel ddp(model, {.bucket_cap_mb = cap});
      if (c.hook) ddp.register_comm_hook(c.hook);
      const Batch mine = shard(b, rank, world);
      cross_entropy(ddp(mine.x), mine.y).backward();
      const std::vector<Tensor> want = expected_average(per_rank, c.how);
      const std::vector<Tensor> params = model->parameters();
      bool ok = true;
      for (size_t i = 0; i < params.size(); ++i) ok = ok && same_bits(params[i].grad(), want[i]);
      check(ok, std::string(c.name) + ", bucket_cap_mb " + std::to_string(cap) + ": the averaged gradients are not "
                "the definition's bits");
      const size_t buckets = ddp.bucket_parameter_names().size();
      check(buckets == (cap == 25.0 ? 2u : 4u), "bucket_cap_mb " + std::to_string(cap) + " gave " +
                                                    std::to_string(buckets) + " buckets");
      check(ddp.stats().backwards == 1 && ddp.stats().buckets_started_in_backward == static_cast<int64_t>(buckets),
            std::string(c.name) + ": every bucket starts during the backward");
    }
  }
  // reverse registration order: the last layer's parameters are reduced first
  const auto model = make_model(7);
  nn::DistributedDataParallel ddp(model, {.bucket_cap_mb = 0.001});
  auto names = ddp.bucket_parameter_names();
  check(names.size() == 4 && names[0] == std::vector<std::string>{"4.bias"} &&
            names[3] == std::vector<std::string>{"0.weight", "0.bias", "2.weight"},
        "buckets in reverse registration order, the first formed cut at 1 MiB");
  // after the first backward they are re-formed in the order the gradients arrived (torch's rebuild): the first
  // bucket, cut at 1 MiB, holds the last layer and fc2's weight, so it starts before fc1's backward
  const Batch mine = shard(b, rank, world);
  cross_entropy(ddp(mine.x), mine.y).backward();
  (void)ddp(mine.x);  // the rebuild happens at the next forward
  names = ddp.bucket_parameter_names();
  std::string got;
  for (const auto& bucket : names) {
    got += "[";
    for (const auto& n : bucket) got += n + " ";
    got += "]";
  }
  check(names.size() == 4 && names[0].size() == 3 && names[0][0].rfind("4.", 0) == 0 && names[0][2] == "2.weight",
        "the buckets rebuilt in gradient order (first: the last layer and 2.weight), got " + got);
}

// Training: 2 and 3 ranks against one process with the global batch, and bucket sizes bit for bit.
void training_matches_one_process() {
  const int rank = dist::get_rank(), world = dist::get_world_size();
  const auto single = make_model(11, 512, true), big = make_model(11, 512, true), small = make_model(11, 512, true);
  nn::DistributedDataParallel ddp_big(big, {}), ddp_small(small, {.bucket_cap_mb = 0.001});
  optim::SGD opt_single(single->parameters(), {.lr = 0.05, .momentum = 0.9});
  optim::SGD opt_big(big->parameters(), {.lr = 0.05, .momentum = 0.9});
  optim::SGD opt_small(small->parameters(), {.lr = 0.05, .momentum = 0.9});
  // the definition replayed in this process: every rank's local gradients, times 1/W, summed in rank order
  const auto replay = make_model(11, 512, true);
  optim::SGD opt_replay(replay->parameters(), {.lr = 0.05, .momentum = 0.9});
  for (int step = 0; step < 100; ++step) {
    const Batch b = global_batch(step), mine = shard(b, rank, world);
    for (auto* o : {&opt_single, &opt_big, &opt_small}) o->zero_grad();
    cross_entropy((*single)(b.x), b.y).backward();
    cross_entropy(ddp_big(mine.x), mine.y).backward();
    cross_entropy(ddp_small(mine.x), mine.y).backward();
    std::vector<std::vector<Tensor>> per_rank;
    for (int q = 0; q < world; ++q) per_rank.push_back(local_grads(*replay, shard(b, q, world)));
    const std::vector<Tensor> avg = expected_average(per_rank, Reduce::Default);
    std::vector<Tensor> rp = replay->parameters();
    for (size_t i = 0; i < rp.size(); ++i) rp[i].set_grad(avg[i]);
    for (auto* o : {&opt_single, &opt_big, &opt_small, &opt_replay}) o->step();
  }
  double worst = 0, scale = 0;
  bool bits = true, replayed = true;
  const auto ps = single->parameters(), pb = big->parameters(), pm = small->parameters(), pr = replay->parameters();
  for (size_t i = 0; i < ps.size(); ++i) {
    const auto s = floats(ps[i]), d = floats(pb[i]);
    for (size_t k = 0; k < s.size(); ++k) {
      worst = std::max(worst, std::abs(double(s[k]) - d[k]));
      scale = std::max(scale, std::abs(double(s[k])));
    }
    bits = bits && same_bits(pb[i], pm[i]);
    replayed = replayed && same_bits(pb[i], pr[i]);
  }
  if (rank == 0) std::printf("F32, %d rank(s), 100 SGD steps: max |DDP - one process| / max |w| = %.3g\n", world, worst / scale);
  check(worst <= 1e-6 * scale, "F32 DDP after 100 steps differs from one process by " + std::to_string(worst / scale) +
                                   " (relative to the largest weight), more than 1e-6");
  check(bits, "DDP with 25 MB buckets and with 4 buckets are not equal bit for bit");
  check(replayed, "100 DDP steps are not the definition's (replayed in one process) bit for bit");
  // every rank holds the same parameters
  const Tensor mine = pb[2].contiguous();
  const Tensor all = empty({world * mine.numel()});
  dist::all_gather_into_tensor(all, mine.view({-1}));
  bool same = true;
  for (int q = 1; q < world; ++q) same = same && same_bits(all.narrow(0, q * mine.numel(), mine.numel()), mine.view({-1}));
  check(same, "every rank holds the same parameters after training");
}

// Mixed precision: autocast BF16 with a GradScaler, and F16 with the scaler, against one process (reduction order
// apart, the losses agree), and the scaler's state equal on every rank.
void amp_matches_one_process() {
  const int rank = dist::get_rank(), world = dist::get_world_size();
  for (DType dt : {DType::BF16, DType::F16}) {
    const auto single = make_model(13, 64), model = make_model(13, 64);
    nn::DistributedDataParallel ddp(model, {});
    optim::SGD opt_single(single->parameters(), {.lr = 0.05, .momentum = 0.9});
    optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});
    amp::GradScaler sc_single({.init_scale = 1024, .growth_interval = 10}), sc({.init_scale = 1024, .growth_interval = 10});
    double loss_single = 0, loss_ddp = 0;
    for (int step = 0; step < 60; ++step) {
      const Batch b = global_batch(step), mine = shard(b, rank, world);
      opt_single.zero_grad();
      opt.zero_grad();
      Tensor l1, l2;
      {
        amp::Autocast ac(DeviceType::CPU, dt);
        l1 = cross_entropy((*single)(b.x), b.y);
        l2 = cross_entropy(ddp(mine.x), mine.y);
      }
      sc_single.scale(l1).backward();
      sc.scale(l2).backward();
      sc_single.step(opt_single);
      sc.step(opt);
      sc_single.update();
      sc.update();
      if (step >= 50) {
        loss_single += l1.item();
        Tensor l = l2.detach().to(DType::F32).contiguous().clone();
        dist::all_reduce(l, dist::ReduceOp::Avg);
        loss_ddp += l.item();
      }
    }
    const std::string name = dtype_name(dt);
    if (rank == 0)
      std::printf("%s autocast, %d rank(s): mean loss of steps 50-59 %.5f (DDP) vs %.5f (one process)\n", name.c_str(),
                  world, loss_ddp / 10, loss_single / 10);
    check(std::abs(loss_ddp - loss_single) / 10 < 0.02 * std::abs(loss_single / 10),
          name + " autocast: the DDP run's loss is not within 2% of one process's");
    Tensor s = full({1}, sc.get_scale(), {.dtype = DType::F64});
    Tensor mx = s.clone(), mn = s.clone();
    dist::all_reduce(mx, dist::ReduceOp::Max);
    dist::all_reduce(mn, dist::ReduceOp::Min);
    check(mx.item() == mn.item(), name + ": the loss scale differs across ranks");
  }
}

// An inf in one rank's gradient reaches every rank through the average: every rank skips the step and backs off.
void inf_on_one_rank_skips_every_rank() {
  const int rank = dist::get_rank(), world = dist::get_world_size();
  const auto model = make_model(17, 64);
  nn::DistributedDataParallel ddp(model, {});
  optim::SGD opt(model->parameters(), {.lr = 0.05});
  amp::GradScaler scaler({.init_scale = 1024});
  const Tensor w = model->parameters()[0];
  HookHandle h;
  if (rank == world - 1)
    h = w.register_hook([](const Tensor& g) {
      Tensor r = g.clone();
      r.narrow(0, 0, 1).fill_(std::numeric_limits<double>::infinity());
      return r;
    });
  const Tensor before = w.detach().clone();
  const Batch mine = shard(global_batch(0), rank, world);
  scaler.scale(cross_entropy(ddp(mine.x), mine.y)).backward();
  const amp::StepResult r = scaler.step(opt);
  scaler.update();
  check(!r.stepped(), "the step with an inf on rank " + std::to_string(world - 1) + " was not skipped on this rank");
  check(same_bits(w, before), "a skipped step changed the parameters");
  check(scaler.get_scale() == 512, "the scale did not back off to 512 on this rank");
}

// no_sync: local accumulation, then one average of everything accumulated.
void no_sync_accumulates() {
  const int rank = dist::get_rank(), world = dist::get_world_size();
  const auto plain = make_model(19, 64), model = make_model(19, 64);
  nn::DistributedDataParallel ddp(model, {});
  std::vector<std::vector<Tensor>> per_rank;
  for (int q = 0; q < world; ++q) {
    plain->zero_grad();
    for (int step : {1, 2}) {
      const Batch s = shard(global_batch(step), q, world);
      cross_entropy((*plain)(s.x), s.y).backward();
    }
    std::vector<Tensor> g;
    for (const Tensor& p : plain->parameters()) g.push_back(p.grad().clone());
    per_rank.push_back(g);
  }
  {
    auto guard = ddp.no_sync();
    const Batch s = shard(global_batch(1), rank, world);
    cross_entropy(ddp(s.x), s.y).backward();
  }
  check(ddp.stats().backwards == 0, "a backward under no_sync averaged");
  const Batch s = shard(global_batch(2), rank, world);
  cross_entropy(ddp(s.x), s.y).backward();
  const auto want = expected_average(per_rank, Reduce::Default);
  const auto params = model->parameters();
  bool ok = true;
  for (size_t i = 0; i < params.size(); ++i) ok = ok && same_bits(params[i].grad(), want[i]);
  check(ok, "no_sync then a synced backward: not the average of the accumulated gradients");
}

// A layer the forward does not use on some ranks (rank 0 only uses `extra`).
struct Branchy : nn::Module {
  std::shared_ptr<nn::Linear> body = register_module("body", std::make_shared<nn::Linear>(8, 4));
  std::shared_ptr<nn::Linear> extra = register_module("extra", std::make_shared<nn::Linear>(4, 4));
  std::shared_ptr<nn::Linear> never = register_module("never", std::make_shared<nn::Linear>(4, 4));
  bool use_extra = false;
  std::string type_name() const override { return "Branchy"; }
  Tensor forward(const Tensor& x) override {
    Tensor h = (*body)(x);
    return use_extra ? (*extra)(h) : h;
  }
};

void unused_parameters() {
  const int rank = dist::get_rank(), world = dist::get_world_size();
  manual_seed(23);
  auto m = std::make_shared<Branchy>();
  {
    nn::DistributedDataParallel ddp(m, {});
    Tensor x = ones({2, 8});
    expect_error([&] { ddp(x).sum().backward(); }, "find_unused_parameters", "a parameter without a gradient");
  }
  m->zero_grad();
  m->use_extra = rank == 0;
  nn::DistributedDataParallel ddp(m, {.find_unused_parameters = true});
  Tensor x = ones({2, 8});
  ddp(x).sum().backward();
  check(!m->never->weight.grad().defined(), "a parameter no rank used was given a gradient");
  check(m->extra->weight.grad().defined(), "a parameter rank 0 used has no averaged gradient on this rank");
  // rank 0's gradient of `extra`, averaged with the other ranks' zeros
  manual_seed(23);
  Branchy ref;
  ref.use_extra = true;
  ref(ones({2, 8})).sum().backward();
  check(same_bits(m->extra->weight.grad(), ref.extra->weight.grad() * (1.0 / world)),
        "the partly used parameter's gradient is not rank 0's times 1/world size");
}

void misuse() {
  const int rank = dist::get_rank(), world = dist::get_world_size();
  if (world > 1) {
    const auto m = make_model(29, rank == world - 1 ? 32 : 64);  // the last rank built another model
    expect_error([&] { nn::DistributedDataParallel ddp(m, {}); }, "parameter 2 ('2.weight' here) is F32 [64, 512] on "
                 "rank 0 but F32 [32, 512] on rank " + std::to_string(world - 1), "a model that differs across ranks");
  }
  const auto m = make_model(29, 64);
  expect_error([&] { nn::DistributedDataParallel ddp(m, {.bucket_cap_mb = 0}); }, "bucket_cap_mb 0", "a zero bucket");
  nn::DistributedDataParallel ddp(m, {});
  const Batch mine = shard(global_batch(0), rank, world);
  cross_entropy(ddp(mine.x), mine.y).backward();
  expect_error([&] { ddp.register_comm_hook(nn::ddp_comm_hooks::fp16_compress_hook()); }, "before the first backward",
               "a hook after a backward");
  // grad mode off at the forward: the backward (here of a fresh forward) is not averaged, and nothing hangs
  {
    NoGradGuard ng;
    (void)ddp(mine.x);
  }
  check(ddp.stats().backwards == 1, "a forward without grad mode changed the statistics");
}

void timeout_case() {
  const int rank = dist::get_rank();
  const auto m = make_model(31, 64);
  nn::DistributedDataParallel ddp(m, {});
  const Batch mine = shard(global_batch(0), rank, 2);
  if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // about twice the timeout
  if (rank == 0)
    expect_error([&] { cross_entropy(ddp(mine.x), mine.y).backward(); }, "did not finish on rank 0 within 1300 ms: rank 1 does not answer",
                 "a backward whose all-reduce rank 1 joins late");
  else
    cross_entropy(ddp(mine.x), mine.y).backward();
}

}  // namespace

int main(int argc, char** argv) {
  const bool timeout = argc > 1 && std::string(argv[1]) == "--timeout";
  try {
    dist::init_process_group({.timeout = timeout ? std::chrono::milliseconds(1300) : std::chrono::minutes(2)});
    if (timeout) {
      if (dist::get_world_size() != 2) {
        std::fprintf(stderr, "--timeout needs 2 ranks\n");
        return 2;
      }
      timeout_case();
    } else {
      averaged_gradients_match_their_definitions();
      compression_divides_before_the_sum();
      training_matches_one_process();
      amp_matches_one_process();
      inf_on_one_rank_skips_every_rank();
      no_sync_accumulates();
      zero_matches_ddp();
      zero_reduce_scatter_matches_ddp();
      zero_reduce_scatter_accumulates_and_clips();
      unused_parameters();
      misuse();
    }
    const int rank = dist::get_rank();
    dist::destroy_process_group();
    if (failures) return 1;
    if (rank == 0) std::printf("ddp_train: every check passed\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp_train: %s\n", e.what());
    return 1;
  }
}
