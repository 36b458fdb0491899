// The public hg::cuda functions, in libhalfgrad: they load the CUDA backend (cuda/api/backend.h) the first
// time a CUDA device is asked for. The backend file is found next to libhalfgrad (the build folder or the
// install's lib/), or wherever HG_CUDA_LIBRARY points.
#include <string>

#include "core/allocator.h"
#include "core/error.h"
#include "core/plugin.h"
#include "cuda/api/backend.h"
#include "cuda/available.h"

namespace hg::cuda {
namespace {

struct Backend {
  const BackendApi* api = nullptr;
  std::string error;  // why api is null
};

#if HG_CUDA_BACKEND
Backend load() {
  const Plugin p = load_plugin(HG_CUDA_BACKEND_FILE, "HG_CUDA_LIBRARY", "hg_cuda_backend_api");
  if (p.entry == nullptr && p.error.rfind("no symbol", 0) != 0) {
    return {nullptr, "the CUDA backend " + p.path + " could not be loaded (" + p.error +
                         "); install the CUDA 13 runtime, cuBLAS and cuDNN 9 where the dynamic loader finds them, "
                         "or set HG_CUDA_LIBRARY to the path of " HG_CUDA_BACKEND_FILE};
  }
  auto entry = reinterpret_cast<const BackendApi* (*)()>(p.entry);
  const BackendApi* api = entry != nullptr ? entry() : nullptr;
  if (api == nullptr || api->abi != kBackendAbi) {
    return {nullptr, p.path + " is not a CUDA backend of this halfgrad (no hg_cuda_backend_api, or ABI " +
                         std::to_string(api ? api->abi : 0) + " where " + std::to_string(kBackendAbi) +
                         " is expected); install the " HG_CUDA_BACKEND_FILE " built with this libhalfgrad"};
  }
  return {api, ""};
}
#else
Backend load() {
  return {nullptr, "this halfgrad was built without the CUDA backend (HG_CUDA=OFF or no nvcc); rebuild with "
                   "-DHG_CUDA=ON"};
}
#endif

// Loaded once per process and never unloaded: kernels, handles and graphs point into it.
const Backend& backend() {
  static const Backend b = load();
  return b;
}

}  // namespace

bool is_available() { return device_count() > 0; }

int device_count() {
  const Backend& b = backend();
  return b.api != nullptr ? b.api->device_count() : 0;
}

std::string unavailable_reason() {
  const Backend& b = backend();
  return b.api != nullptr ? b.api->unavailable_reason() : b.error;
}

std::string version_info() {
  const Backend& b = backend();
  return b.api != nullptr ? b.api->versions() : "no CUDA backend: " + b.error;
}

const BackendApi& backend_api() {
  const Backend& b = backend();
  HG_CHECK(b.api != nullptr, "cuda: no CUDA device is available: ", b.error, "; or keep tensors on Device::cpu()");
  return *b.api;
}

// The CUDA backend's registration, as core sees it: load the library, then its register_kernels().
// core's load_backend runs it once, the first time a CUDA tensor is made or reaches a table.
void register_backend() { backend_api().register_kernels(); }

namespace {
const BackendRegistration g_cuda{DeviceType::CUDA, &register_backend};
}  // namespace

}  // namespace hg::cuda
