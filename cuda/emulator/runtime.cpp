// The emulated CUDA runtime (HG_CUDA=EMULATE): the subset of libcudart that halfgrad calls, with the
// real headers' signatures, for one emulated Hopper GPU (the H200 measured on a lent machine: sm_90,
// 132 SMs, tests/cuda/fixtures/h200_sm90.json) whose memory is host memory.
//
// - Streams are in order; work runs when it is enqueued (runtime.h). While a stream is captured, work
//   is recorded into the graph instead, and any call that would wait for the device, or allocate or
//   copy synchronously, fails with cudaErrorStreamCaptureUnsupported and invalidates the capture, as
//   the driver does in cudaStreamCaptureModeGlobal. cudaStreamEndCapture then reports
//   cudaErrorStreamCaptureInvalidated.
// - Memory: every allocation starts filled with 0xFF bytes (a NaN in every floating dtype), so a kernel
//   that reads what nobody wrote shows; a freed block is filled again and kept out of reuse for a while
//   (a quarantine), so a use after free reads NaN instead of someone else's data. Copies check that
//   their device side is a live allocation.
// - A broken rule inside a kernel (executor.cpp) makes the error sticky, as a fault does on a GPU.
// - Work that waits on other processes (the NCCL stand-in's collectives, cuda/emulator/nccl.cpp) is held on its
//   stream (hold()) instead of run: events recorded behind it complete, and streams told to wait for those events
//   (cudaStreamWaitEvent) go on, once it is ready; a kernel or copy enqueued behind it waits for it on the host.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "cuda/emulator/runtime.h"

namespace hg::emu {
struct Held {  // work held on a stream until ready() says it is done (hold())
  std::function<bool()> ready;
  bool done = false;
};
using HeldList = std::vector<std::shared_ptr<Held>>;
}  // namespace hg::emu

struct CUstream_st {
  unsigned flags = 0;
  bool capturing = false;
  bool invalidated = false;
  cudaGraph_t graph = nullptr;  // being recorded
  hg::emu::HeldList held;       // in order; the work enqueued behind them waits
};

// Graph memory as the driver has it: an allocation node's address is fixed for the graph's life. An
// allocation the graph also frees lives only inside each launch. One it does not free "escapes": each
// launch hands it to the program, which frees it with cudaFree(Async) like any other, and a relaunch
// while the previous launch's allocation is still unfreed fails (cudaErrorInvalidValue; the driver's
// cudaGraphInstantiateFlagAutoFreeOnLaunch is not emulated). Destroying the executable graph leaves an
// escaped allocation the program still holds alive, as an ordinary one.
struct CUgraph_st {
  std::vector<std::function<void()>> nodes;
  std::vector<void*> owned;  // allocations made during the capture
  std::vector<void*> freed;  // those the capture also freed
};

struct CUgraphExec_st {
  std::shared_ptr<const std::vector<std::function<void()>>> nodes;
  std::vector<void*> owned;
  std::vector<void*> escaping;  // owned, never freed by the graph
};

struct CUevent_st {
  unsigned flags = 0;
  hg::emu::HeldList after;  // recorded behind held work: complete once these are done
};

struct CUmemPoolHandle_st {
  uint64_t release_threshold = 0;
};

namespace hg::emu {
namespace {

constexpr unsigned char kPoison = 0xFF;
constexpr size_t kAlign = 256;                       // cudaMalloc's alignment
constexpr size_t kQuarantineBytes = size_t{64} << 20;  // freed bytes kept out of reuse
constexpr size_t kTotalMemory = 150109880320;        // the H200's totalGlobalMem

struct Allocation {
  size_t bytes = 0;
  bool graph_owned = false;  // made by an allocation node: the address stays reserved for its graph
  bool held = false;         // a graph-owned allocation a launch handed to the program, not yet freed
};

struct State {
  std::mutex mu;
  std::map<uintptr_t, Allocation> live;  // by start address
  std::deque<std::pair<void*, size_t>> quarantine;
  size_t quarantined = 0;
  size_t in_use = 0;
  cudaError_t last = cudaSuccess;    // cudaGetLastError's
  cudaError_t sticky = cudaSuccess;  // a fault: every call returns it from then on
  std::map<uintptr_t, size_t> pinned;  // cudaHostAlloc'd host memory, by start address
  std::atomic<long> stream_syncs{0};    // host waits for a whole stream or the device
  std::vector<CUstream_st*> captures;  // streams being captured
  std::vector<CUstream_st*> holding;   // streams with held work
  CUstream_st legacy;                // the default stream (0 / cudaStreamLegacy)
  CUmemPoolHandle_st pool;
};

State& st() {
  static State* s = new State;  // never destroyed: GPU tensors may be freed after static destructors
  return *s;
}

cudaError_t ret(cudaError_t e) {
  if (e != cudaSuccess) st().last = e;
  return e;
}

// The queries that answer one int.
cudaError_t put(int* out, int v) {
  if (out == nullptr) return ret(cudaErrorInvalidValue);
  *out = v;
  return cudaSuccess;
}

CUstream_st* stream_of(cudaStream_t s) {
  if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) return &st().legacy;
  return s;
}

// A call that waits for the device, or allocates/copies synchronously, during a global-mode capture.
bool refuse_in_capture(cudaError_t& e) {
  State& S = st();
  if (S.captures.empty()) return false;
  // The driver invalidates every capture in progress (global mode): the capture sequence is broken.
  for (CUstream_st* q : S.captures) q->invalidated = true;
  e = ret(cudaErrorStreamCaptureUnsupported);
  return true;
}

void* allocate(size_t bytes, bool graph_owned) {
  const size_t n = std::max<size_t>((bytes + kAlign - 1) / kAlign * kAlign, kAlign);
  void* p = std::aligned_alloc(kAlign, n);
  if (p == nullptr) return nullptr;
  std::memset(p, kPoison, n);
  State& S = st();
  std::lock_guard<std::mutex> lock(S.mu);
  S.live[reinterpret_cast<uintptr_t>(p)] = Allocation{bytes, graph_owned};
  S.in_use += bytes;
  return p;
}

// Poisons and quarantines a live allocation; false when p is not the start of one.
bool release(void* p) {
  State& S = st();
  std::lock_guard<std::mutex> lock(S.mu);
  auto it = S.live.find(reinterpret_cast<uintptr_t>(p));
  if (it == S.live.end()) return false;
  const size_t bytes = it->second.bytes;
  S.in_use -= bytes;
  S.live.erase(it);
  std::memset(p, kPoison, std::max(bytes, size_t{1}));
  S.quarantine.emplace_back(p, bytes);
  S.quarantined += bytes;
  while (S.quarantined > kQuarantineBytes && !S.quarantine.empty()) {
    std::free(S.quarantine.front().first);
    S.quarantined -= S.quarantine.front().second;
    S.quarantine.pop_front();
  }
  return true;
}

// Graph memory (see CUgraph_st). What a free outside a capture found at p.
enum class GraphFree { NotGraphOwned, Freed, NotHeld };
GraphFree free_graph_allocation(void* p) {
  State& S = st();
  std::lock_guard<std::mutex> lock(S.mu);
  auto it = S.live.find(reinterpret_cast<uintptr_t>(p));
  if (it == S.live.end() || !it->second.graph_owned) return GraphFree::NotGraphOwned;
  if (!it->second.held) return GraphFree::NotHeld;
  it->second.held = false;
  std::memset(p, kPoison, std::max(it->second.bytes, size_t{1}));
  return GraphFree::Freed;
}

// A launch hands the escaping allocations to the program, uninitialised (poisoned) each time; false
// (and nothing handed) when one from the last launch is still held.
bool hand_out(const std::vector<void*>& escaping) {
  State& S = st();
  std::lock_guard<std::mutex> lock(S.mu);
  for (void* p : escaping)
    if (S.live.at(reinterpret_cast<uintptr_t>(p)).held) return false;
  for (void* p : escaping) {
    Allocation& a = S.live.at(reinterpret_cast<uintptr_t>(p));
    a.held = true;
    std::memset(p, kPoison, std::max(a.bytes, size_t{1}));
  }
  return true;
}

// The executable graph is destroyed: what the program holds becomes an ordinary allocation.
void disown(const std::vector<void*>& owned) {
  std::vector<void*> unheld;
  {
    State& S = st();
    std::lock_guard<std::mutex> lock(S.mu);
    for (void* p : owned) {
      Allocation& a = S.live.at(reinterpret_cast<uintptr_t>(p));
      if (a.held) a = Allocation{a.bytes, false, false};
      else unheld.push_back(p);
    }
  }
  for (void* p : unheld) release(p);
}

const char* error_name(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureWrongThread: return "cudaErrorStreamCaptureWrongThread";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    default: return "cudaErrorUnknown";
  }
}

const char* error_string(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorLaunchFailure: return "unspecified launch failure (the emulated device: see the message above)";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureWrongThread: return "attempt to terminate a thread-local capture sequence from another thread";
    case cudaErrorIllegalState: return "the operation is not permitted in the current state";
    case cudaErrorNotSupported: return "operation not supported";
    default: return "unknown error";
  }
}

// The device side of a copy or memset must be a live allocation.
cudaError_t check_device(const void* p, size_t bytes, const char* what, const char* side) {
  if (bytes == 0 || is_device_range(p, bytes)) return cudaSuccess;
  std::fprintf(stderr, "halfgrad emulator: %s: the %s %p (%zu bytes) is not inside a live device allocation\n", what,
               side, p, bytes);
  return ret(cudaErrorInvalidValue);
}

}  // namespace

namespace {
// Whether every task of `tasks` is done: polled in order, each only once the ones before it are done.
bool settle(HeldList& tasks) {
  for (auto& t : tasks) {
    if (t->done) continue;
    if (!t->ready()) return false;
    t->done = true;
  }
  tasks.clear();
  return true;
}

bool settle_stream(CUstream_st* q) {
  if (q->held.empty()) return true;
  if (!settle(q->held)) return false;
  std::erase(st().holding, q);
  return true;
}
// The host polls until done() (held work finishes on other threads or in other processes).
template <class Done>
void poll_until(Done done) {
  while (!done()) std::this_thread::sleep_for(std::chrono::microseconds(50));
}
// The host waits for q's held work (as a GPU stream runs its work in order).
void wait_stream(CUstream_st* q) {
  poll_until([q] { return settle_stream(q); });
}
}  // namespace

cudaError_t hold(cudaStream_t s, std::function<bool()> ready) {
  State& S = st();
  if (S.sticky != cudaSuccess) return S.sticky;
  CUstream_st* q = stream_of(s);
  if (q->capturing) {
    q->invalidated = true;
    return ret(cudaErrorStreamCaptureUnsupported);
  }
  if (q->held.empty()) S.holding.push_back(q);
  q->held.push_back(std::make_shared<Held>(Held{std::move(ready)}));
  return cudaSuccess;
}

cudaError_t enqueue(cudaStream_t s, const char* what, std::function<void()> work) {
  State& S = st();
  if (S.sticky != cudaSuccess) return S.sticky;
  CUstream_st* q = stream_of(s);
  if (q->capturing) {
    q->graph->nodes.push_back(std::move(work));
    return cudaSuccess;
  }
  (void)what;
  wait_stream(q);
  work();
  return S.sticky;
}

// Whether [p, p + bytes) lies inside one block of `blocks` (by start address; size_of gives its bytes).
template <class Blocks, class SizeOf>
bool inside_one_block(const Blocks& blocks, const void* p, size_t bytes, SizeOf size_of) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto it = blocks.upper_bound(a);
  if (it == blocks.begin()) return false;
  --it;
  const uintptr_t start = it->first, end = start + size_of(it->second);
  return a >= start && a <= end && bytes <= end - a;
}

bool is_device_range(const void* p, size_t bytes) {
  State& S = st();
  std::lock_guard<std::mutex> lock(S.mu);
  return inside_one_block(S.live, p, bytes, [](const Allocation& a) { return a.bytes; });
}

bool is_pinned(const void* p, size_t bytes) {
  State& S = st();
  std::lock_guard<std::mutex> lock(S.mu);
  return inside_one_block(S.pinned, p, bytes, [](size_t n) { return n; });
}

long stream_syncs() { return st().stream_syncs.load(); }

void fail_sticky(const std::string& why) {
  State& S = st();
  std::fprintf(stderr, "halfgrad emulator: device fault: %s\n", why.c_str());
  S.sticky = cudaErrorLaunchFailure;
  S.last = cudaErrorLaunchFailure;
}

void clear_fault() {
  st().sticky = cudaSuccess;
  st().last = cudaSuccess;
}

bool capturing() { return !st().captures.empty(); }

}  // namespace hg::emu

using hg::emu::st;

extern "C" {

// ---- errors and versions ----
cudaError_t cudaGetLastError(void) {
  auto& S = st();
  const cudaError_t e = S.sticky != cudaSuccess ? S.sticky : S.last;
  S.last = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError(void) { return st().sticky != cudaSuccess ? st().sticky : st().last; }
const char* cudaGetErrorName(cudaError_t e) { return hg::emu::error_name(e); }
const char* cudaGetErrorString(cudaError_t e) { return hg::emu::error_string(e); }
cudaError_t cudaRuntimeGetVersion(int* v) { return hg::emu::put(v, CUDART_VERSION); }
cudaError_t cudaDriverGetVersion(int* v) { return hg::emu::put(v, CUDART_VERSION); }

// ---- the device: the measured H200's properties ----
cudaError_t cudaGetDeviceCount(int* n) { return hg::emu::put(n, 1); }
cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : hg::emu::ret(cudaErrorInvalidDevice); }
cudaError_t cudaGetDevice(int* d) { return hg::emu::put(d, 0); }
// Where the device sits: one GPU that every process on this host shares, or with HG_EMU_GPU_PER_PROCESS=1 one of
// its own per process (a machine with a GPU per rank, as NCCL needs).
cudaError_t cudaDeviceGetPCIBusId(char* id, int len, int device) {
  if (id == nullptr || len <= 0) return hg::emu::ret(cudaErrorInvalidValue);
  if (device != 0) return hg::emu::ret(cudaErrorInvalidDevice);
  const char* per = std::getenv("HG_EMU_GPU_PER_PROCESS");
  const bool own = per != nullptr && std::strcmp(per, "1") == 0;
  std::snprintf(id, static_cast<size_t>(len), "%08X:%02X:00.0", own ? static_cast<unsigned>(getpid()) : 0u, 0x18);
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) {
  if (value == nullptr) return hg::emu::ret(cudaErrorInvalidValue);
  if (device != 0) return hg::emu::ret(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrMultiProcessorCount: *value = 132; break;
    case cudaDevAttrMemoryPoolsSupported: *value = 1; break;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; break;
    case cudaDevAttrMaxThreadsPerBlock: *value = 1024; break;
    case cudaDevAttrWarpSize: *value = 32; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = 48 << 10; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = 232448; break;
    case cudaDevAttrMaxGridDimX: *value = 2147483647; break;
    case cudaDevAttrMaxGridDimY: *value = 65535; break;
    case cudaDevAttrMaxGridDimZ: *value = 65535; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *value = 2048; break;
    case cudaDevAttrL2CacheSize: *value = 62914560; break;
    default:
      std::fprintf(stderr, "halfgrad emulator: cudaDeviceGetAttribute: attribute %d is not emulated\n",
                   static_cast<int>(attr));
      return hg::emu::ret(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  if (free_bytes == nullptr || total == nullptr) return hg::emu::ret(cudaErrorInvalidValue);
  *total = hg::emu::kTotalMemory;
  *free_bytes = hg::emu::kTotalMemory - std::min(hg::emu::kTotalMemory, st().in_use);
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
  cudaError_t e;
  if (hg::emu::refuse_in_capture(e)) return e;
  while (!st().holding.empty()) hg::emu::wait_stream(st().holding.front());
  ++st().stream_syncs;
  return st().sticky;
}

// ---- streams and capture ----
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int flags) {
  if (s == nullptr) return hg::emu::ret(cudaErrorInvalidValue);
  *s = new CUstream_st;
  (*s)->flags = flags;
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (s == nullptr || s->capturing) return hg::emu::ret(cudaErrorInvalidResourceHandle);
  hg::emu::wait_stream(s);  // the driver lets its work finish first
  delete s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  CUstream_st* q = hg::emu::stream_of(s);
  if (q->capturing) {
    q->invalidated = true;
    return hg::emu::ret(cudaErrorStreamCaptureUnsupported);
  }
  cudaError_t e;
  if (hg::emu::refuse_in_capture(e)) return e;
  hg::emu::wait_stream(q);
  ++st().stream_syncs;
  return st().sticky;
}
cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode) {
  CUstream_st* q = hg::emu::stream_of(s);
  if (q == &st().legacy) return hg::emu::ret(cudaErrorStreamCaptureUnsupported);  // the legacy stream cannot be captured
  if (q->capturing) return hg::emu::ret(cudaErrorIllegalState);
  if (mode != cudaStreamCaptureModeGlobal) {
    std::fprintf(stderr, "halfgrad emulator: only cudaStreamCaptureModeGlobal is emulated\n");
    return hg::emu::ret(cudaErrorNotSupported);
  }
  q->capturing = true;
  q->invalidated = false;
  q->graph = new CUgraph_st;
  st().captures.push_back(q);
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph) {
  CUstream_st* q = hg::emu::stream_of(s);
  if (graph == nullptr) return hg::emu::ret(cudaErrorInvalidValue);
  if (!q->capturing) return hg::emu::ret(cudaErrorIllegalState);
  q->capturing = false;
  std::erase(st().captures, q);
  cudaGraph_t g = q->graph;
  q->graph = nullptr;
  if (q->invalidated) {
    for (void* p : g->owned) hg::emu::release(p);
    delete g;
    *graph = nullptr;
    return hg::emu::ret(cudaErrorStreamCaptureInvalidated);
  }
  *graph = g;
  return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus* status) {
  if (status == nullptr) return hg::emu::ret(cudaErrorInvalidValue);
  const CUstream_st* q = hg::emu::stream_of(s);
  *status = !q->capturing ? cudaStreamCaptureStatusNone
            : q->invalidated ? cudaStreamCaptureStatusInvalidated
                             : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

// ---- graphs ----
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  if (exec == nullptr || graph == nullptr) return hg::emu::ret(cudaErrorInvalidValue);
  auto* x = new CUgraphExec_st;
  x->nodes = std::make_shared<const std::vector<std::function<void()>>>(graph->nodes);
  for (void* p : graph->owned)
    if (std::find(graph->freed.begin(), graph->freed.end(), p) == graph->freed.end()) x->escaping.push_back(p);
  x->owned = std::move(graph->owned);  // the executable graph keeps the captured allocations alive
  graph->owned.clear();
  *exec = x;
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  if (graph == nullptr) return hg::emu::ret(cudaErrorInvalidValue);
  for (void* p : graph->owned) hg::emu::release(p);
  delete graph;
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
  if (exec == nullptr) return hg::emu::ret(cudaErrorInvalidValue);
  if (st().sticky != cudaSuccess) return st().sticky;
  if (!hg::emu::hand_out(exec->escaping)) {
    std::fprintf(stderr, "halfgrad emulator: cudaGraphLaunch: an allocation the graph's last launch handed out "
                 "is still unfreed (the driver refuses the relaunch)\n");
    return hg::emu::ret(cudaErrorInvalidValue);
  }
  auto nodes = exec->nodes;
  return hg::emu::enqueue(s, "cudaGraphLaunch", [nodes] {
    for (const auto& n : *nodes) {
      if (st().sticky != cudaSuccess) return;
      n();
    }
  });
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  if (exec == nullptr) return hg::emu::ret(cudaErrorInvalidValue);
  hg::emu::disown(exec->owned);
  delete exec;
  return cudaSuccess;
}

// ---- memory ----
cudaError_t cudaMalloc(void** p, size_t bytes) {
  if (p == nullptr) return hg::emu::ret(cudaErrorInvalidValue);
  cudaError_t e;
  if (hg::emu::refuse_in_capture(e)) return e;
  if (st().sticky != cudaSuccess) return st().sticky;
  if (bytes > hg::emu::kTotalMemory - std::min(hg::emu::kTotalMemory, st().in_use)) {
    return hg::emu::ret(cudaErrorMemoryAllocation);
  }
  *p = hg::emu::allocate(bytes, false);
  return *p != nullptr ? cudaSuccess : hg::emu::ret(cudaErrorMemoryAllocation);
}
cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t s) {
  if (p == nullptr) return hg::emu::ret(cudaErrorInvalidValue);
  if (st().sticky != cudaSuccess) return st().sticky;
  if (bytes > hg::emu::kTotalMemory - std::min(hg::emu::kTotalMemory, st().in_use)) {
    return hg::emu::ret(cudaErrorMemoryAllocation);
  }
  CUstream_st* q = hg::emu::stream_of(s);
  *p = hg::emu::allocate(bytes, q->capturing);
  if (*p == nullptr) return hg::emu::ret(cudaErrorMemoryAllocation);
  if (q->capturing) q->graph->owned.push_back(*p);  // an allocation node: the address is fixed for the graph
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  if (p == nullptr) return cudaSuccess;
  cudaError_t e;
  if (hg::emu::refuse_in_capture(e)) return e;
  const hg::emu::GraphFree g = hg::emu::free_graph_allocation(p);
  if (g == hg::emu::GraphFree::Freed) return cudaSuccess;
  if (g == hg::emu::GraphFree::NotHeld || !hg::emu::release(p)) {
    std::fprintf(stderr, "halfgrad emulator: cudaFree(%p): not a live allocation (a double free?)\n", p);
    return hg::emu::ret(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}
cudaError_t cudaFreeAsync(void* p, cudaStream_t s) {
  if (p == nullptr) return cudaSuccess;
  if (!hg::emu::is_device_range(p, 0)) {
    std::fprintf(stderr, "halfgrad emulator: cudaFreeAsync(%p): not a live allocation (a double free?)\n", p);
    return hg::emu::ret(cudaErrorInvalidValue);
  }
  CUstream_st* q = hg::emu::stream_of(s);
  if (q->capturing) {
    // A free node: memory the graph allocated stays its own (poisoned at each replay's free); memory
    // allocated before the capture would be freed by the first replay, which halfgrad never does.
    auto& owned = q->graph->owned;
    if (std::find(owned.begin(), owned.end(), p) == owned.end()) {
      std::fprintf(stderr, "halfgrad emulator: cudaFreeAsync(%p) during capture of memory allocated before it\n", p);
      q->invalidated = true;
      return hg::emu::ret(cudaErrorStreamCaptureUnsupported);
    }
    size_t bytes = 0;
    {
      std::lock_guard<std::mutex> lock(st().mu);
      bytes = st().live[reinterpret_cast<uintptr_t>(p)].bytes;
    }
    q->graph->nodes.push_back([p, bytes] { std::memset(p, hg::emu::kPoison, bytes); });
    q->graph->freed.push_back(p);
    std::memset(p, hg::emu::kPoison, bytes);
    return cudaSuccess;
  }
  // Work runs when it is enqueued, so the free happens (or is refused) now.
  return hg::emu::enqueue(s, "cudaFreeAsync", [p] {
    switch (hg::emu::free_graph_allocation(p)) {
      case hg::emu::GraphFree::Freed: break;
      case hg::emu::GraphFree::NotGraphOwned: hg::emu::release(p); break;
      case hg::emu::GraphFree::NotHeld:  // its graph made it, but no launch handed it out
        std::fprintf(stderr, "halfgrad emulator: cudaFreeAsync(%p): a graph's allocation that no launch handed out\n", p);
        hg::emu::fail_sticky("cudaFreeAsync of an unheld graph allocation");
        break;
    }
  });
}
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  if (pool == nullptr) return hg::emu::ret(cudaErrorInvalidValue);
  if (device != 0) return hg::emu::ret(cudaErrorInvalidDevice);
  *pool = &st().pool;
  return cudaSuccess;
}
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr attr, void* value) {
  if (pool == nullptr || value == nullptr) return hg::emu::ret(cudaErrorInvalidValue);
  if (attr == cudaMemPoolAttrReleaseThreshold) pool->release_threshold = *static_cast<uint64_t*>(value);
  return cudaSuccess;
}
cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t) {
  return pool == nullptr ? hg::emu::ret(cudaErrorInvalidValue) : cudaSuccess;
}
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes* a, const void* p) {
  if (a == nullptr) return hg::emu::ret(cudaErrorInvalidValue);
  *a = cudaPointerAttributes{};
  if (hg::emu::is_device_range(p, 1)) {
    a->type = cudaMemoryTypeDevice;
    a->device = 0;
    a->devicePointer = const_cast<void*>(p);
  } else {
    a->type = cudaMemoryTypeUnregistered;
    a->device = -2;
  }
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s) {
  const bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDeviceToHost && kind != cudaMemcpyDeviceToDevice) {
    std::fprintf(stderr, "halfgrad emulator: cudaMemcpyAsync: only HostToDevice, DeviceToHost and DeviceToDevice are emulated\n");
    return hg::emu::ret(cudaErrorInvalidValue);
  }
  if (dst_dev) {
    if (const cudaError_t e = hg::emu::check_device(dst, n, "cudaMemcpyAsync", "destination"); e != cudaSuccess) return e;
  }
  if (src_dev) {
    if (const cudaError_t e = hg::emu::check_device(src, n, "cudaMemcpyAsync", "source"); e != cudaSuccess) return e;
  }
  if (kind != cudaMemcpyDeviceToDevice && hg::emu::stream_of(s)->capturing &&
      !hg::emu::is_pinned(kind == cudaMemcpyHostToDevice ? src : dst, n)) {
    // pageable host memory: the copy is synchronous, which a capture cannot record (a pinned buffer's
    // copy is recorded, and each replay reads or writes that buffer again)
    hg::emu::stream_of(s)->invalidated = true;
    return hg::emu::ret(cudaErrorStreamCaptureUnsupported);
  }
  if (n == 0) return cudaSuccess;
  return hg::emu::enqueue(s, "cudaMemcpyAsync", [dst, src, n] { std::memmove(dst, src, n); });
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, enum cudaMemcpyKind kind) {
  cudaError_t e;
  if (hg::emu::refuse_in_capture(e)) return e;
  return cudaMemcpyAsync(dst, src, n, kind, nullptr);
}
cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, size_t n, cudaStream_t s) {
  if (dst_device != 0 || src_device != 0) return hg::emu::ret(cudaErrorInvalidDevice);
  return cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, s);
}
// ---- pinned host memory ----
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned int) {
  if (p == nullptr) return hg::emu::ret(cudaErrorInvalidValue);
  cudaError_t e;
  if (hg::emu::refuse_in_capture(e)) return e;
  *p = std::malloc(std::max<size_t>(bytes, 1));
  if (*p == nullptr) return hg::emu::ret(cudaErrorMemoryAllocation);
  std::lock_guard<std::mutex> lock(st().mu);
  st().pinned[reinterpret_cast<uintptr_t>(*p)] = bytes;
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void* p) {
  if (p == nullptr) return cudaSuccess;
  cudaError_t e;
  if (hg::emu::refuse_in_capture(e)) return e;
  {
    std::lock_guard<std::mutex> lock(st().mu);
    if (st().pinned.erase(reinterpret_cast<uintptr_t>(p)) == 0) return hg::emu::ret(cudaErrorInvalidValue);
  }
  std::free(p);
  return cudaSuccess;
}

// ---- events: work runs when it is enqueued, so a recorded event has completed unless held work is before it ----
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* ev, unsigned int flags) {
  if (ev == nullptr) return hg::emu::ret(cudaErrorInvalidValue);
  *ev = new CUevent_st{flags, {}};
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t ev) {
  if (ev == nullptr) return hg::emu::ret(cudaErrorInvalidResourceHandle);
  delete ev;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t s) {
  if (ev == nullptr) return hg::emu::ret(cudaErrorInvalidResourceHandle);
  CUstream_st* q = hg::emu::stream_of(s);
  ev->after.clear();
  if (!q->capturing && !hg::emu::settle_stream(q)) {  // behind held work: completes with it
    ev->after = q->held;
    return st().sticky;
  }
  return hg::emu::enqueue(s, "cudaEventRecord", [] {});
}
cudaError_t cudaEventQuery(cudaEvent_t ev) {
  if (ev == nullptr) return hg::emu::ret(cudaErrorInvalidResourceHandle);
  if (st().sticky != cudaSuccess) return st().sticky;
  return hg::emu::settle(ev->after) ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaEventSynchronize(cudaEvent_t ev) {
  if (ev == nullptr) return hg::emu::ret(cudaErrorInvalidResourceHandle);
  cudaError_t e;
  if (hg::emu::refuse_in_capture(e)) return e;
  hg::emu::poll_until([ev] { return hg::emu::settle(ev->after); });
  return st().sticky;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t ev, unsigned int flags) {
  if (ev == nullptr || flags != 0) return hg::emu::ret(ev == nullptr ? cudaErrorInvalidResourceHandle
                                                                     : cudaErrorInvalidValue);
  if (hg::emu::settle(ev->after)) return st().sticky;  // complete: nothing to wait for
  hg::emu::HeldList after = ev->after;
  return hg::emu::hold(s, [after]() mutable { return hg::emu::settle(after); });
}

cudaError_t cudaMemsetAsync(void* p, int value, size_t n, cudaStream_t s) {
  if (const cudaError_t e = hg::emu::check_device(p, n, "cudaMemsetAsync", "destination"); e != cudaSuccess) return e;
  if (n == 0) return cudaSuccess;
  return hg::emu::enqueue(s, "cudaMemsetAsync", [p, value, n] { std::memset(p, value, n); });
}

}  // extern "C"
