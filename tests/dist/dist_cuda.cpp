// hg::dist, DistributedDataParallel and ZeroRedundantOptimizer with CUDA tensors, through either transport: MPI
// staged in host memory, or NCCL. CTest runs this under mpirun with 2 ranks on the emulated device (label emulator;
// tests/CMakeLists.txt): dist_cuda_2 with the ranks sharing one emulated GPU (so "auto" stages through MPI),
// dist_nccl_2 with a GPU per process (HG_EMU_GPU_PER_PROCESS=1) through the NCCL stand-in, and dist_nccl_timeout;
// where a GPU is present, on it. Exits 77 without a CUDA device.
//   mpirun -np 2 dist_cuda [--device-backend auto|nccl|mpi] [--expect nccl|staging] [--timeout]
// Every collective of a CUDA tensor gives the bits of the same collective of a CPU tensor (the values are small
// integers, exact in any order of summation, so NCCL's order gives them too); DDP's averaged gradients of a model on
// the device are their definition's bit for bit (every rank's local gradients, computed on the device, times 1/W,
// summed: with 2 ranks one addition, the same in any order); under ZeRO's sharded gradients the GradScaler's
// device path agrees on an inf only one rank's shard holds. Through the NCCL stand-in also: ranks that call
// different collectives get an error naming both calls (a real NCCL would hang), and --timeout: a rank that joins
// late turns into the timeout error on the other, whose abort then fails the late rank's collective.
#include <cstdio>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
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

// Through the emulator's NCCL stand-in only (a real NCCL hangs): rank 0 all-reduces 8 elements, the others 9.
void mismatch_is_an_error() {
  const int rank = dist::get_rank();
  const Tensor t = ones({rank == 0 ? 8 : 9}, {.device = Device::cuda()});
  // the rank that finds the mismatch second may see the other's abort first: its error then quotes the other's
  dist_check::expect_error([&] { dist::all_reduce(t); }, rank == 0 ? "ncclAllReduce of 9" : "ncclAllReduce of 8",
                           "ranks all-reducing 8 and 9 elements through NCCL");
  dist_check::expect_error([&] { dist::all_reduce(t); }, "the communicator was aborted",
                           "a collective after NCCL failed");
}

// Rank 1 joins an all-reduce 3 s late, past rank 0's 1 s timeout: rank 0's wait fails naming the collective and
// rank 1 (not answering), and aborts its communicator; rank 1's all-reduce then fails too.
void late_rank_times_out() {
  const int rank = dist::get_rank();
  const Tensor t = ones({64}, {.device = Device::cuda()});
  dist::all_reduce(t);  // the communicator is made (and the transport decided) with both ranks present
  if (rank == 0) {
    dist_check::expect_error([&] { dist::all_reduce(t); }, "rank 1 does not answer",
                             "rank 0's all_reduce while rank 1 computes");
  } else {
    std::this_thread::sleep_for(std::chrono::seconds(3));
    dist_check::expect_error([&] { dist::all_reduce(t); }, "rank 0 aborted its communicator",
                             "rank 1's all_reduce after rank 0 aborted");
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string device_backend = "auto", expect;
    bool timeout = false;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--device-backend" && i + 1 < argc) device_backend = argv[++i];
      else if (a == "--expect" && i + 1 < argc) expect = argv[++i];
      else if (a == "--timeout") timeout = true;
      else throw std::runtime_error("unknown argument " + a);
    }
    dist::init_process_group({.timeout = timeout ? std::chrono::milliseconds(1000) : std::chrono::minutes(2),
                              .device_backend = device_backend});
    const int rank = dist::get_rank();
    if (!cuda::is_available()) {
      if (rank == 0) std::printf("dist_cuda: no CUDA device (%s): skipped\n", cuda::unavailable_reason().c_str());
      dist::destroy_process_group();
      return 77;
    }
    if (timeout) {
      late_rank_times_out();
      dist::destroy_process_group();
      return failures ? 1 : 0;
    }
    collectives_match_the_cpu();
    const std::string how = dist::device_backend();
    if (rank == 0) std::printf("dist_cuda: CUDA tensors through %s\n", how.c_str());
    if (expect == "nccl") check(how.rfind("NCCL", 0) == 0 || how.find("NCCL stand-in") != std::string::npos,
                                "CUDA tensors should go through NCCL, not " + how);
    if (expect == "staging") check(how.rfind("host staging", 0) == 0, "CUDA tensors should be staged, not " + how);
    ddp_gradients_on_the_device();
    zero_consensus_on_the_device();
    if (how.find("stand-in") != std::string::npos && dist::get_world_size() == 2) mismatch_is_an_error();
    dist::destroy_process_group();
    if (failures) return 1;
    if (rank == 0) std::printf("dist_cuda: every check passed\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dist_cuda: %s\n", e.what());
    return 1;
  }
}
