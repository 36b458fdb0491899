// hg::dist's NCCL transport for CUDA tensors (dist/api/backend.h's DeviceBackendApi), in the CUDA backend.
// NCCL is opened at run time, never linked: libnccl.so.2 from $HG_NCCL_LIBRARY, else wherever the dynamic loader
// finds it (PyPI's nvidia-nccl-cu13 puts it in site-packages/nvidia/nccl/lib: set HG_NCCL_LIBRARY or
// LD_LIBRARY_PATH); on the emulated device the stand-in of cuda/emulator/nccl.cpp fills the same table.
//
// A communicator has a stream of its own. A collective first makes that stream wait for what the device's stream
// (DeviceContext::stream) has enqueued so far (an event), so it reads the gradients the backward wrote; it is
// then enqueued there, and an event recorded behind it. test() polls that event (and the communicator's
// asynchronous error) and, once it completed, makes the device's stream wait for it, so what reads the result
// later is ordered after it without the host waiting for the device.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "cuda/check.h"
#include "cuda/context.h"
#include "cuda/nccl_api.h"
#include "dist/api/backend.h"
#include "dist/dist.h"

namespace hg::cuda {
namespace {

using namespace nccl;

struct Loaded {
  Library lib;
  std::string error;  // why NCCL is not available ("" when it is)
};

#if !HG_CUDA_EMULATE
// dlsym's `name` into `field`; false (error set) when the library lacks it
template <class F>
bool symbol(void* handle, const char* name, F& field, const std::string& path, std::string& error) {
  field = reinterpret_cast<F>(dlsym(handle, name));
  if (field == nullptr) error = path + " has no " + name + " (not NCCL 2.x?)";
  return field != nullptr;
}
#endif

const Loaded& loaded() {
  static const Loaded l = [] {
    Loaded l;
#if HG_CUDA_EMULATE
    l.lib = emulated_library();
#else
    const char* env = std::getenv("HG_NCCL_LIBRARY");
    const std::string path = env != nullptr && *env != '\0' ? env : "libnccl.so.2";
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const char* why = dlerror();
      l.error = path + " could not be loaded (" + (why ? why : "?") +
                "); install NCCL (pip install nvidia-nccl-cu13) and set HG_NCCL_LIBRARY to its lib/libnccl.so.2";
      return l;
    }
    Library& b = l.lib;
    std::string& e = l.error;
    (void)(symbol(h, "ncclGetVersion", b.ncclGetVersion, path, e) &&
           symbol(h, "ncclGetUniqueId", b.ncclGetUniqueId, path, e) &&
           symbol(h, "ncclCommInitRank", b.ncclCommInitRank, path, e) &&
           symbol(h, "ncclCommDestroy", b.ncclCommDestroy, path, e) &&
           symbol(h, "ncclCommAbort", b.ncclCommAbort, path, e) &&
           symbol(h, "ncclCommGetAsyncError", b.ncclCommGetAsyncError, path, e) &&
           symbol(h, "ncclGetErrorString", b.ncclGetErrorString, path, e) &&
           symbol(h, "ncclGetLastError", b.ncclGetLastError, path, e) &&
           symbol(h, "ncclAllReduce", b.ncclAllReduce, path, e) &&
           symbol(h, "ncclBroadcast", b.ncclBroadcast, path, e) &&
           symbol(h, "ncclAllGather", b.ncclAllGather, path, e) &&
           symbol(h, "ncclReduceScatter", b.ncclReduceScatter, path, e));
#endif
    return l;
  }();
  return l;
}

const Library& lib() { return loaded().lib; }

struct Comm {
  ncclComm_t comm = nullptr;
  int device = 0;
  cudaStream_t stream = nullptr;  // the collectives'
};

struct Request {
  cudaEvent_t done = nullptr;
};

// "ncclInvalidUsage (invalid usage): what the library said last"
std::string why(ncclResult_t r, ncclComm_t comm) {
  std::string s = std::string(lib().ncclGetErrorString(r)) + " (NCCL result " + std::to_string(static_cast<int>(r)) + ")";
  const char* last = lib().ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') s += ": " + std::string(last);
  return s;
}

ncclDataType_t nccl_type(int dtype) {
  switch (static_cast<DType>(dtype)) {
    case DType::F32: return ncclFloat32;
    case DType::F64: return ncclFloat64;
    case DType::F16: return ncclFloat16;
    case DType::BF16: return ncclBfloat16;
    case DType::I64: return ncclInt64;
    default: HG_FAIL("dist: NCCL takes F32, F64, F16, BF16 and I64 tensors, not ", static_cast<DType>(dtype));
  }
}

ncclRedOp_t nccl_op(int op) {
  switch (static_cast<dist::ReduceOp>(op)) {
    case dist::ReduceOp::Max: return ncclMax;
    case dist::ReduceOp::Min: return ncclMin;
    default: return ncclSum;  // Avg arrives as Sum (the caller divides)
  }
}

std::string available() { return loaded().error; }

std::string version() {
  int v = 0;
  if (!available().empty() || lib().ncclGetVersion(&v) != ncclSuccess) return "NCCL (not loaded)";
  // NCCL 2.9 and later: 10000 * major + 100 * minor + patch
  const std::string n = std::to_string(v / 10000) + "." + std::to_string(v % 10000 / 100) + "." +
                        std::to_string(v % 100);
#if HG_CUDA_EMULATE
  return "the emulated device's NCCL stand-in (NCCL " + n + "'s API)";
#else
  return "NCCL " + n;
#endif
}

std::string device_id(int device) {
  context(device);
  char bus[32] = {0}, host[256] = {0};
  HG_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof(bus), device));
  gethostname(host, sizeof(host) - 1);
  return std::string(host) + "/" + bus;
}

std::string unique_id(std::string* error) {
  ncclUniqueId id;
  const ncclResult_t r = lib().ncclGetUniqueId(&id);
  if (r != ncclSuccess) {
    *error = "ncclGetUniqueId failed: " + why(r, nullptr);
    return "";
  }
  return std::string(id.internal, sizeof(id.internal));
}

void* init(const std::string& id, int rank, int size, int device, std::string* error) {
  HG_CHECK(id.size() == static_cast<size_t>(kUniqueIdBytes), "dist: an NCCL unique id has ", kUniqueIdBytes,
           " bytes, not ", id.size());
  context(device);  // the device current on this thread, its context made
  auto* c = new Comm;
  c->device = device;
  HG_CUDA_CHECK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
  ncclUniqueId u;
  id.copy(u.internal, sizeof(u.internal));
  const ncclResult_t r = lib().ncclCommInitRank(&c->comm, size, u, rank);
  if (r != ncclSuccess) {
    *error = "ncclCommInitRank (rank " + std::to_string(rank) + " of " + std::to_string(size) + ", cuda:" +
             std::to_string(device) + ") failed: " + why(r, nullptr);
    HG_CUDA_WARN(cudaStreamDestroy(c->stream));
    delete c;
    return nullptr;
  }
  return c;
}

void* start(void* comm, const dist::Collective& k, std::string* error) {
  auto* c = static_cast<Comm*>(comm);
  DeviceContext& ctx = context(c->device);
  // the collective's stream waits for the work that produced its input
  cudaEvent_t ready = nullptr;
  HG_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  HG_CUDA_CHECK(cudaEventRecord(ready, ctx.stream));
  HG_CUDA_CHECK(cudaStreamWaitEvent(c->stream, ready, 0));
  HG_CUDA_CHECK(cudaEventDestroy(ready));
  const ncclDataType_t t = nccl_type(k.dtype);
  const auto n = static_cast<size_t>(k.count);
  ncclResult_t r = ncclSuccess;
  switch (k.kind) {
    case dist::Collective::AllReduce:
      r = lib().ncclAllReduce(k.send, k.recv, n, t, nccl_op(k.op), c->comm, c->stream);
      break;
    case dist::Collective::Broadcast:
      r = lib().ncclBroadcast(k.send, k.recv, n, t, k.root, c->comm, c->stream);
      break;
    case dist::Collective::AllGather:
      r = lib().ncclAllGather(k.send, k.recv, n, t, c->comm, c->stream);
      break;
    case dist::Collective::ReduceScatter:
      r = lib().ncclReduceScatter(k.send, k.recv, n, t, nccl_op(k.op), c->comm, c->stream);
      break;
    case dist::Collective::Barrier:
      HG_FAIL("dist: a barrier goes through MPI, not NCCL");
  }
  if (r != ncclSuccess) {
    *error = why(r, c->comm);
    return nullptr;
  }
  auto* q = new Request;
  HG_CUDA_CHECK(cudaEventCreateWithFlags(&q->done, cudaEventDisableTiming));
  HG_CUDA_CHECK(cudaEventRecord(q->done, c->stream));
  return q;
}

void release(void* request) {
  auto* q = static_cast<Request*>(request);
  if (q == nullptr) return;
  HG_CUDA_WARN(cudaEventDestroy(q->done));
  delete q;
}

int test(void* comm, void* request, std::string* error) {
  auto* c = static_cast<Comm*>(comm);
  auto* q = static_cast<Request*>(request);
  const cudaError_t e = cudaEventQuery(q->done);
  ncclResult_t async = ncclSuccess;
  const ncclResult_t r = lib().ncclCommGetAsyncError(c->comm, &async);
  if (r != ncclSuccess || (async != ncclSuccess && async != ncclInProgress)) {  // the communicator failed
    *error = why(r != ncclSuccess ? r : async, c->comm);
    release(q);
    return -1;
  }
  if (e == cudaSuccess) {
    // what reads the result, enqueued on the device's stream from now on, runs after the collective
    const cudaError_t w = cudaStreamWaitEvent(context(c->device).stream, q->done, 0);
    release(q);
    if (w != cudaSuccess) {
      *error = std::string("cudaStreamWaitEvent failed: ") + cudaGetErrorName(w);
      return -1;
    }
    return 1;
  }
  if (e != cudaErrorNotReady) {
    (void)cudaGetLastError();
    *error = std::string("the device failed: ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
    release(q);
    return -1;
  }
  return 0;
}

void abort_comm(void* comm) {
  auto* c = static_cast<Comm*>(comm);
  (void)lib().ncclCommAbort(c->comm);  // ends the kernels in flight; nothing to do when it fails
  HG_CUDA_WARN(cudaStreamDestroy(c->stream));
  delete c;
}

void destroy(void* comm) {
  auto* c = static_cast<Comm*>(comm);
  const ncclResult_t r = lib().ncclCommDestroy(c->comm);
  if (r != ncclSuccess) std::fprintf(stderr, "halfgrad: warning: ncclCommDestroy failed: %s\n", why(r, nullptr).c_str());
  HG_CUDA_WARN(cudaStreamDestroy(c->stream));
  delete c;
}

}  // namespace

const dist::DeviceBackendApi* nccl_api() {
  static const dist::DeviceBackendApi api{.available = &available,
                                          .version = &version,
                                          .device_id = &device_id,
                                          .unique_id = &unique_id,
                                          .init = &init,
                                          .start = &start,
                                          .test = &test,
                                          .abort = &abort_comm,
                                          .destroy = &destroy,
                                          .release = &release};
  return &api;
}

}  // namespace hg::cuda
