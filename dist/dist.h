#pragma once
// hg::dist: collectives across processes, as torch.distributed names them. A process group spans the ranks
// an MPI launcher started (`mpirun -np 2 ./program`). CPU tensors go through MPI; CUDA tensors through NCCL when
// every rank has a GPU of its own and NCCL loads (libnccl.so.2, opened at run time by the CUDA backend), else
// through MPI staged in host memory (copied to the host, which waits for the device, reduced there, copied back
// once the collective finished): InitOptions::device_backend chooses. The MPI backend is its own library,
// libhalfgrad_mpi, which libhalfgrad loads with dlopen() at init_process_group: a program that never calls it
// needs no MPI library, and halfgrad builds without MPI or NCCL (dist/api/dist.cpp says why then).
//
//   hg::dist::init_process_group();                 // rank and world size from the launcher
//   hg::dist::all_reduce(grad, hg::dist::ReduceOp::Avg);
//   hg::dist::Work w = hg::dist::all_reduce(t, hg::dist::ReduceOp::Sum, /*async_op=*/true);  ... w.wait();
//
// Collectives act in place on contiguous tensors (CPU or CUDA) of one dtype (F32, F16, BF16, F64, I64). Through
// MPI every rank gets the same bits: each element is reduced once, by one rank, in rank order (rank 0's value +
// rank 1's + ...; F16/BF16 summed in F32 and rounded once; Avg is the sum divided by the world size, rounded once),
// so the result does not depend on how a tensor is split into calls or on MPI's algorithms (dist/mpi/backend.cpp).
// Through NCCL every rank gets the same bits too, but the order of the sum is NCCL's (its rings and trees) and
// F16/BF16 sums are rounded at every step (Avg is still the sum divided by the world size, rounded once).
// Every wait has a deadline (InitOptions::timeout): a rank that never joins a collective turns into an hg::Error
// on the others naming the collective, the missing ranks and the fix, not a hang (an NCCL communicator is then
// aborted, which ends its kernels). The missing ranks come from a roll call at the
// timeout: every rank that waits in a collective answers with the number of collectives it has started, so the
// error names the ranks that do not answer (dead, hung, computing) and those behind or ahead of this one. Not differentiable (as torch.distributed's are not). Call
// every function from the thread that called init_process_group (MPI is initialized MPI_THREAD_FUNNELED, and
// the group's state has no lock); halfgrad's own worker threads never call it.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace hg::dist {

enum class ReduceOp { Sum, Avg, Max, Min };
const char* reduce_op_name(ReduceOp op);

struct InitOptions {
  std::string backend = "mpi";                       // the one backend for CPU tensors
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};  // torch's default is 30 min (NCCL 10)
  // CUDA tensors: "auto" (NCCL when it loads on every rank and no two ranks share a GPU, else MPI with host
  // staging), "nccl" (an hg::Error at the first CUDA collective when NCCL cannot be used), "mpi" (host staging).
  // Decided at the first collective of a CUDA tensor, the same way on every rank.
  std::string device_backend = "auto";
};

// Joins the process group the launcher started (every rank calls it once); throws hg::Error when the MPI
// backend cannot be loaded or the process was not started by an MPI launcher (a world of 1 is allowed: a
// program run without mpirun is rank 0 of 1).
void init_process_group(const InitOptions& options = {});
bool is_initialized();
int get_rank();        // this process's rank in [0, world size)
int get_world_size();  // the number of ranks
std::chrono::milliseconds timeout();
std::string backend_version();  // the MPI library's, e.g. "Open MPI v4.1.4"
// How CUDA tensors travel: "NCCL 2.27.3", "host staging through MPI (why not NCCL)", or "not decided yet" before the
// first collective of a CUDA tensor.
std::string device_backend();
// Leaves the group; init_process_group may not be called again in this process (MPI's rule). A collective that
// timed out is given up to twice the timeout more to finish; if it does not, every rank is ended (MPI_Abort).
void destroy_process_group();

// A collective's handle: returned done unless async_op was true. wait() blocks until the collective finished
// on this rank (or its deadline passed: hg::Error); the tensors must stay alive and untouched until then.
class Work {
 public:
  struct State;
  Work() = default;
  explicit Work(std::shared_ptr<State> s) : state_(std::move(s)) {}
  bool is_completed();  // polls; never blocks
  void wait();
  ~Work();              // an unfinished collective is waited for (errors then are reported to stderr)
  Work(Work&&) noexcept = default;
  Work& operator=(Work&&) noexcept = default;

 private:
  std::shared_ptr<State> state_;
};

Work all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::Sum, bool async_op = false);
Work broadcast(const Tensor& tensor, int src, bool async_op = false);
// output (world * n elements, contiguous) = every rank's input (n elements) in rank order
Work all_gather_into_tensor(const Tensor& output, const Tensor& input, bool async_op = false);
// outputs[r] = rank r's input (torch.distributed.all_gather's list form)
Work all_gather(const std::vector<Tensor>& outputs, const Tensor& input, bool async_op = false);
// output (n elements) = the reduction over ranks of input's r-th slice of n elements, r this rank
Work reduce_scatter_tensor(const Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::Sum,
                           bool async_op = false);
void barrier();
// Every rank's `bytes` becomes a copy of src's (any length; two broadcasts: the length, then the bytes), as
// torch.distributed.broadcast_object_list does for one pickled object. For a checkpoint's state or an id made on
// one rank; CPU only.
void broadcast_bytes(std::vector<uint8_t>& bytes, int src);

}  // namespace hg::dist
