#pragma once
// The contract between libhalfgrad and its CUDA backend, libhalfgrad_cuda.so (every other file under
// cuda/ and cuda/kernels/). libhalfgrad links no CUDA library: the first time a CUDA device is asked for,
// cuda/api/loader.cpp dlopen()s the backend, which links libhalfgrad, cudart, cuBLAS(Lt) and cuDNN, and
// calls its one exported function for this table. So a CPU-only program never loads a CUDA library, and
// one installed package serves machines with and without CUDA. No CUDA headers here.
#include <functional>
#include <string>

namespace hg::dist {
struct DeviceBackendApi;  // dist/api/backend.h
}

namespace hg::cuda {

// Bump whenever BackendApi changes: the loader refuses a backend built against another layout.
constexpr int kBackendAbi = 2;

struct BackendApi {
  int abi = kBackendAbi;
  int (*device_count)() = nullptr;                // never throws: 0 without a device or a usable driver
  std::string (*unavailable_reason)() = nullptr;  // why device_count() is 0; "" when it is not
  void (*register_kernels)() = nullptr;           // the allocator and the dispatch tables; throws hg::Error
  std::string (*versions)() = nullptr;            // CUDA runtime, driver, cuBLAS and cuDNN versions
  void (*synchronize)(int device) = nullptr;      // cuda/graph.h
  void* (*graph_capture)(int device, const std::function<void()>& body) = nullptr;  // a cudaGraphExec_t
  void (*graph_launch)(void* exec, int device) = nullptr;
  void (*graph_destroy)(void* exec) = nullptr;  // never throws
  const hg::dist::DeviceBackendApi* (*nccl)() = nullptr;  // hg::dist's NCCL transport (cuda/nccl.cpp)
};

// libhalfgrad's side (cuda/api/loader.cpp): the backend's table, loaded on first call; throws hg::Error
// naming what is missing (the backend file, a CUDA library) and the fix.
const BackendApi& backend_api();

}  // namespace hg::cuda

// Defined by the backend (cuda/register.cpp) and looked up with dlsym by this name.
extern "C" const hg::cuda::BackendApi* hg_cuda_backend_api();
