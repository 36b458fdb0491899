// hg::dist, DistributedDataParallel and ZeroRedundantOptimizer with CUDA tensors, which go through MPI staged in
// host memory (NCCL is not built): CTest runs this under mpirun with 2 ranks on the emulated device (label
// emulator; tests/CMakeLists.txt) and, where one is present, on a real GPU. Exits 77 without a CUDA device.
//   mpirun -np 2 dist_cuda
// Every collective of a CUDA tensor gives the bits of the same collective of a CPU tensor; DDP's averaged
// gradients of a model on the device are their definition's bit for bit (every rank's local gradients, computed on
// the device, times 1/W, summed in rank order); under ZeRO's sharded gradients the GradScaler's device path agrees
// on an inf only one rank's shard holds.
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "dist_check.h"
#include "halfgrad.h"

using namespace hg;
using dist_check::check;
using dist_check::failures;
using dist_check::identical;

namespace {

// (rank + 1) * [0, 1, ..., n-1] - n/2 in dtype dt, on the CPU
Tensor ramp(int64_t n, int rank, DType dt) {
  return ((arange(n, {.dtype = DType::F64}) - static_cast<double>(n / 2)) * static_cast<double>(rank + 1)).to(dt);
}

void collectives_match_the_cpu() {
  const int rank = dist::get_rank(), world = dist::get_world_size();
  const Device gpu = Device::cuda();
  const int64_t n = 37;
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64}) {
    const std::string name = dtype_name(dt);
    std::vector<dist::ReduceOp> ops{dist::ReduceOp::Sum, dist::ReduceOp::Max};
    if (dt != DType::I64) ops.push_back(dist::ReduceOp::Avg);
    for (dist::ReduceOp op : ops) {
      const Tensor c = ramp(n, rank, dt), d = c.to(gpu);
      dist::all_reduce(c, op);
      dist::Work w = dist::all_reduce(d, op, /*async_op=*/true);
      w.wait();
      check(d.is_cuda() && identical(d, c), name + " all_reduce " + dist::reduce_op_name(op) + " of a CUDA tensor");
    }
    {
      const Tensor c = ramp(n, rank, dt), d = c.to(gpu);
      dist::broadcast(c, world - 1);
      dist::broadcast(d, world - 1);
      check(identical(d, c), name + " broadcast of a CUDA tensor");
    }
    {
      const Tensor in = ramp(n, rank, dt), out_c = empty({world * n}, {.dtype = dt}),
                   out_d = empty({world * n}, {.dtype = dt, .device = gpu});
      dist::all_gather_into_tensor(out_c, in);
      dist::all_gather_into_tensor(out_d, in.to(gpu));
      check(identical(out_d, out_c), name + " all_gather_into_tensor of CUDA tensors");
      std::vector<Tensor> outs;
      for (int r = 0; r < world; ++r) outs.push_back(empty({n}, {.dtype = dt, .device = gpu}));
      dist::all_gather(outs, in.to(gpu));
      bool ok = true;
      for (int r = 0; r < world; ++r) ok = ok && identical(outs[r], out_c.narrow(0, r * n, n));
      check(ok, name + " all_gather into CUDA tensors");
    }
    {
      const Tensor in = ramp(world * n, rank, dt), out_c = empty({n}, {.dtype = dt}),
                   out_d = empty({n}, {.dtype = dt, .device = gpu});
      dist::reduce_scatter_tensor(out_c, in);
      dist::reduce_scatter_tensor(out_d, in.to(gpu));
      check(identical(out_d, out_c), name + " reduce_scatter_tensor of CUDA tensors");
    }
  }
}

std::shared_ptr<nn::Sequential> make_model(Device dev) {
  manual_seed(5);
  auto m = std::make_shared<nn::Sequential>(nn::Linear(16, 32), nn::ReLU(), nn::Linear(32, 4));
  m->to(dev);
  return m;
}

struct Batch {
  Tensor x, y;
};
Batch rank_batch(int q, Device dev) {  // rank q's 6 rows of the step's global batch
  Generator g(static_cast<uint64_t>(100 + q));
  const Tensor x = randn({6, 16}, {}, &g);
  return {x.to(dev), std::get<1>(x.narrow(1, 0, 4).max(1)).to(dev)};
}

void ddp_gradients_on_the_device() {
  const int rank = dist::get_rank(), world = dist::get_world_size();
  const Device gpu = Device::cuda();
  const auto plain = make_model(gpu), model = make_model(gpu);
  // the definition: every rank's local gradients on the device, times 1/W, summed in rank order (F32)
  std::vector<Tensor> expected;
  for (int q = 0; q < world; ++q) {
    plain->zero_grad();
    const Batch b = rank_batch(q, gpu);
    cross_entropy((*plain)(b.x), b.y).backward();
    const auto ps = plain->parameters();
    for (size_t i = 0; i < ps.size(); ++i) {
      const Tensor term = ps[i].grad().cpu() * (1.0 / world);
      if (q == 0) expected.push_back(term);
      else expected[i] = expected[i] + term;
    }
  }
  nn::DistributedDataParallel ddp(model, {});
  const Batch mine = rank_batch(rank, gpu);
  cross_entropy(ddp(mine.x), mine.y).backward();
  const auto ps = model->parameters();
  bool ok = true;
  for (size_t i = 0; i < ps.size(); ++i) ok = ok && ps[i].grad().is_cuda() && identical(ps[i].grad(), expected[i]);
  check(ok, "DDP of a model on the device: the averaged gradients are not their definition's bit for bit");
}

void zero_consensus_on_the_device() {
  const int rank = dist::get_rank(), world = dist::get_world_size();
  const Device gpu = Device::cuda();
  const auto model = make_model(gpu);
  optim::SGD like(model->parameters(), {.lr = 0.1});
  optim::ZeroRedundantOptimizer opt(model->parameters(), like, {.reduce_scatter_gradients = true});
  amp::GradScaler scaler({.init_scale = 1024});
  const Tensor w = model->parameters()[0];  // fc1's weight, the largest: rank 0's
  HookHandle h;
  if (rank == world - 1)  // an inf in this rank's local gradient of a parameter another rank owns
    h = w.register_hook([](const Tensor& g) {
      Tensor r = g.clone();
      r.narrow(0, 0, 1).fill_(std::numeric_limits<double>::infinity());
      return r;
    });
  const Tensor before = w.detach().cpu();
  const Batch mine = rank_batch(rank, gpu);
  scaler.scale(cross_entropy((*model)(mine.x), mine.y)).backward();
  check(opt.owner(0) == 0 && (world == 1 || rank == 0 || !w.grad().defined()), "fc1's weight is rank 0's shard");
  const amp::StepResult r = scaler.step(opt);
  scaler.update();
  check(scaler.on_device(), "the scaler of a CUDA loss runs on the device");
  check(!r.stepped(), "sharded gradients on the device: the step with an inf in rank 0's shard was not skipped here");
  check(identical(w, before), "a skipped step changed the parameters");
  check(scaler.get_scale() == 512, "the scale did not back off to 512 on this rank");
}

}  // namespace

int main() {
  try {
    dist::init_process_group({.timeout = std::chrono::minutes(2)});
    const int rank = dist::get_rank();
    if (!cuda::is_available()) {
      if (rank == 0) std::printf("dist_cuda: no CUDA device (%s): skipped\n", cuda::unavailable_reason().c_str());
      dist::destroy_process_group();
      return 77;
    }
    collectives_match_the_cpu();
    ddp_gradients_on_the_device();
    zero_consensus_on_the_device();
    dist::destroy_process_group();
    if (failures) return 1;
    if (rank == 0) std::printf("dist_cuda: every check passed\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dist_cuda: %s\n", e.what());
    return 1;
  }
}
