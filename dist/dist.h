#pragma once
// hg::dist: collectives across processes, as torch.distributed names them. A process group spans the ranks
// an MPI launcher started (`mpirun -np 2 ./program`); CPU tensors go through MPI, and CUDA tensors too, staged
// through host memory (copied to the host, which waits for the device, reduced there, copied back once the
// collective finished: NCCL is not built yet). The MPI backend is its
// own library, libhalfgrad_mpi, which libhalfgrad loads with dlopen() at init_process_group: a program that
// never calls it needs no MPI library, and halfgrad builds without MPI (dist/api/loader.cpp says why then).
//
//   hg::dist::init_process_group();                 // rank and world size from the launcher
//   hg::dist::all_reduce(grad, hg::dist::ReduceOp::Avg);
//   hg::dist::Work w = hg::dist::all_reduce(t, hg::dist::ReduceOp::Sum, /*async_op=*/true);  ... w.wait();
//
// Collectives act in place on contiguous tensors (CPU or CUDA) of one dtype (F32, F16, BF16, F64, I64) and give every rank
// the same bits: each element is reduced once, by one rank, in rank order (rank 0's value + rank 1's + ...; F16/BF16
// summed in F32 and rounded once; Avg is the sum divided by the world size, rounded once), so the result does not
// depend on how a tensor is split into calls or on MPI's algorithms (dist/mpi/backend.cpp). Every wait has a deadline
// (InitOptions::timeout): a rank that never joins a collective turns into an hg::Error on the others naming
// the collective, the missing ranks and the fix, not a hang. The missing ranks come from a roll call at the
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

}  // namespace hg::dist
