#pragma once
// The contracts between libhalfgrad's hg::dist (dist/api/dist.cpp) and its two transports: the MPI backend,
// libhalfgrad_mpi.so (dist/mpi/), which links libhalfgrad and MPI and is loaded with dlopen() at
// init_process_group (a program that never calls it loads no MPI library), and NCCL for CUDA tensors, which the
// CUDA backend (cuda/nccl.cpp) loads at run time and hands over as DeviceBackendApi. No MPI, NCCL or CUDA headers.
#include <cstdint>
#include <string>

namespace hg::dist {

// Bump whenever BackendApi or Collective changes: the loader refuses a backend built against another layout.
constexpr int kBackendAbi = 4;

// One collective over count elements of elem_size bytes; dtype is a DType as int, op a ReduceOp as int (Avg is
// done by the caller: the backend sums).
struct Collective {
  enum Kind { AllReduce, Broadcast, AllGather, ReduceScatter, Barrier } kind = Barrier;
  int dtype = 0, op = 0, root = 0;
  const void* send = nullptr;  // AllReduce, Broadcast: send == recv, in place
  void* recv = nullptr;
  int64_t count = 0;  // AllReduce, Broadcast: elements; AllGather: per rank sent; ReduceScatter: per rank received
};

struct BackendApi {
  int abi = kBackendAbi;
  // Joins the launcher's world; "" on success, else what went wrong (and rank/size untouched).
  std::string (*init)(int* rank, int* size) = nullptr;
  void (*finalize)() = nullptr;  // after every request finished
  void (*abort)(int code) = nullptr;  // ends every rank (MPI_Abort): a request that can never finish
  // Starts a collective; nullptr with *error set when MPI refuses it.
  void* (*start)(const Collective& c, std::string* error) = nullptr;
  // Advances a request: 1 finished (and freed), 0 pending, -1 failed (*error set, freed).
  int (*test)(void* request, std::string* error) = nullptr;
  std::string (*version)() = nullptr;  // "Open MPI v4.1.4, ..." (MPI_Get_library_version)
  // After a timeout: asks every other rank how many collectives it has started and the kind of its last
  // (Collective::Kind); answers[2 r] and [2 r + 1] are rank r's, -1 when it did not answer within grace_ms. A rank
  // answers while it waits for a collective (test() answers every roll call that has arrived) or runs one itself.
  void (*roll_call)(int64_t* answers, int grace_ms) = nullptr;
  // A collective that runs on another transport (NCCL) counts as started, so roll calls see it.
  void (*count)(int kind) = nullptr;
  // Answers the roll calls that have arrived (while this rank waits on another transport).
  void (*answer)() = nullptr;
};

// NCCL for CUDA tensors (cuda/nccl.cpp, in the CUDA backend). A communicator spans the process group's ranks,
// one CUDA device each; its collectives run on a stream of their own that first waits for the work already
// enqueued on the device's stream, and a finished collective makes the device's stream wait for it.
struct DeviceBackendApi {
  // "" when NCCL was loaded (libnccl.so.2 from $HG_NCCL_LIBRARY or the loader's path; on the emulated device its
  // stand-in), else why not. Never throws.
  std::string (*available)() = nullptr;
  std::string (*version)() = nullptr;  // "NCCL 2.27.3" (or "the emulator's NCCL stand-in, NCCL 2.27 API")
  // Where the device is: "host/PCI bus id": two ranks on one device cannot share a communicator (NCCL refuses).
  std::string (*device_id)(int device) = nullptr;
  // Rank 0's ncclGetUniqueId, 128 bytes, broadcast by the caller to every rank; "" with *error set on failure.
  std::string (*unique_id)(std::string* error) = nullptr;
  // ncclCommInitRank on `device` (every rank at once); nullptr with *error set on failure.
  void* (*init)(const std::string& id, int rank, int size, int device, std::string* error) = nullptr;
  // Enqueues c (send/recv: device pointers on the communicator's device; Avg arrives as Sum); nullptr with *error
  // set when NCCL refuses it.
  void* (*start)(void* comm, const Collective& c, std::string* error) = nullptr;
  // 1 finished (the device's stream now waits for it; request freed), 0 pending, -1 failed (*error set, freed).
  int (*test)(void* comm, void* request, std::string* error) = nullptr;
  void (*abort)(void* comm) = nullptr;    // ncclCommAbort: ends what the communicator has in flight; frees it
  void (*destroy)(void* comm) = nullptr;  // ncclCommDestroy after every request finished
  void (*release)(void* request) = nullptr;  // frees a request that will never be tested (after abort)
};

}  // namespace hg::dist

// Defined by the backend (dist/mpi/backend.cpp) and looked up with dlsym by this name.
extern "C" const hg::dist::BackendApi* hg_dist_backend_api();
