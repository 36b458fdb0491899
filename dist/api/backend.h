#pragma once
// The contract between libhalfgrad's hg::dist (dist/api/dist.cpp) and its MPI backend, libhalfgrad_mpi.so
// (dist/mpi/), which links libhalfgrad and MPI and is loaded with dlopen() at init_process_group: a program
// that never calls it loads no MPI library. No MPI headers here.
#include <cstdint>
#include <string>

namespace hg::dist {

// Bump whenever BackendApi or Collective changes: the loader refuses a backend built against another layout.
constexpr int kBackendAbi = 3;

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
};

}  // namespace hg::dist

// Defined by the backend (dist/mpi/backend.cpp) and looked up with dlsym by this name.
extern "C" const hg::dist::BackendApi* hg_dist_backend_api();
