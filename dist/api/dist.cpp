// hg::dist in libhalfgrad (dist/dist.h): argument checks, the process group's state, waiting with a deadline,
// the MPI backend (dist/api/backend.h) loaded on init_process_group, and the choice of transport for CUDA tensors
// (NCCL from the CUDA backend, or MPI with host staging) at the first collective of one.
#include "dist/dist.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "autograd/node.h"
#include "core/error.h"
#include "core/plugin.h"
#include "cuda/api/backend.h"
#include "dist/api/backend.h"

namespace hg::dist {

struct Work::State {
  void* request = nullptr;  // the backend's; nullptr once finished
  std::string what;         // "all_reduce (call 3 of this group, 1024 F32 elements)"
  Tensor avg;               // divided by the world size once the sum arrived (ReduceOp::Avg)
  std::vector<Tensor> keep;  // the tensors MPI reads and writes: alive until it is done, even if abandoned
  std::vector<std::pair<Tensor, Tensor>> copy_back;  // (a device tensor, its host copy): written back once done
  bool done = false;
  bool nccl = false;  // the request is the NCCL communicator's (else MPI's)
};

namespace {

struct Group {
  const BackendApi* api = nullptr;
  bool initialized = false, destroyed = false;
  int rank = 0, size = 1;
  std::chrono::milliseconds timeout{0};
  int64_t calls = 0;    // collectives started: names a call in errors
  std::string broken;   // why the group may not be used any more (a collective that timed out)
  std::vector<std::shared_ptr<Work::State>> abandoned;  // requests of timed-out collectives, still pending
  // CUDA tensors: InitOptions::device_backend, then what the first collective of a CUDA tensor decided
  std::string device_choice = "auto";
  enum class Transport { Undecided, Nccl, Staging } transport = Transport::Undecided;
  std::string transport_note;  // NCCL's version, or why CUDA tensors are staged
  const DeviceBackendApi* nccl_api = nullptr;
  void* nccl = nullptr;  // this rank's communicator
  int nccl_device = -1;
};

Group& group() {
  static Group g;
  return g;
}

const BackendApi* load_backend(std::string& error) {
#if HG_MPI_BACKEND
  const Plugin p = load_plugin(HG_MPI_BACKEND_FILE, "HG_MPI_LIBRARY", "hg_dist_backend_api");
  if (p.entry == nullptr && p.error.rfind("no symbol", 0) != 0) {
    error = "the MPI backend " + p.path + " could not be loaded (" + p.error +
            "); install Open MPI's runtime (Debian: openmpi-bin, libopenmpi3) or set HG_MPI_LIBRARY to the path of "
            HG_MPI_BACKEND_FILE;
    return nullptr;
  }
  const BackendApi* api = p.entry != nullptr ? reinterpret_cast<const BackendApi* (*)()>(p.entry)() : nullptr;
  if (api == nullptr || api->abi != kBackendAbi) {
    error = p.path + " is not an MPI backend of this halfgrad (no hg_dist_backend_api, or another ABI); install the "
            HG_MPI_BACKEND_FILE " built with this libhalfgrad";
    return nullptr;
  }
  return api;
#else
  error = "this halfgrad was built without the MPI backend (HG_MPI=OFF, or no MPI found at build time); install "
          "libopenmpi-dev and rebuild";
  return nullptr;
#endif
}

Group& joined(const char* op) {
  Group& g = group();
  HG_CHECK(g.initialized, "dist.", op, ": the process group is not initialized; call hg::dist::init_process_group() "
           "first (every rank, launched with mpirun)");
  return g;
}

// joined, and usable for collectives
Group& ready(const char* op) {
  Group& g = joined(op);
  HG_CHECK(g.broken.empty(), "dist.", op, ": the process group is broken: ", g.broken,
           "; a collective that timed out leaves the ranks out of step, so end the program (every rank)");
  return g;
}

// NCCL's communicator is unusable after an error: it is aborted, and the group broken.
void abandon_nccl(const std::string& what, const std::string& error) {
  Group& g = group();
  if (g.nccl == nullptr) return;
  g.nccl_api->abort(g.nccl);
  g.nccl = nullptr;
  g.broken = what + " failed on NCCL (" + error + "), and the communicator was aborted";
}

// Advances s; true once finished. Throws hg::Error when the backend reports a failure.
bool advance(Work::State& s) {
  if (s.done) return true;
  std::string error;
  const Group& g = group();
  if (s.nccl && g.nccl == nullptr) {  // its communicator was aborted after another collective failed
    g.nccl_api->release(s.request);
    s.request = nullptr;
    s.done = true;
    s.keep.clear();
    HG_FAIL("dist: ", s.what, " was given up: ", g.broken);
  }
  const int r = s.nccl ? g.nccl_api->test(g.nccl, s.request, &error) : g.api->test(s.request, &error);
  if (r == 0) return false;
  s.request = nullptr;
  s.done = true;
  s.keep.clear();
  if (r != 1 && s.nccl) abandon_nccl(s.what, error);
  HG_CHECK(r == 1, "dist: ", s.what, " failed", s.nccl ? " on NCCL: " : ": ", error);
  NoGradGuard no_grad;
  if (s.avg.defined()) {  // the sum arrived: the average, computed in the tensor's compute type, rounded once
    s.avg.div_(static_cast<double>(group().size));
    s.avg = Tensor();
  }
  for (auto& [device, host] : s.copy_back) device.copy_(host);  // host staging: the result to the device
  s.copy_back.clear();
  return true;
}

const char* kind_name(int64_t kind) {
  switch (kind) {
    case Collective::AllReduce: return "all_reduce";
    case Collective::Broadcast: return "broadcast";
    case Collective::AllGather: return "all_gather";
    case Collective::ReduceScatter: return "reduce_scatter";
    case Collective::Barrier: return "barrier";
    default: return "none";
  }
}

// After a timeout: which ranks are missing from the collective, from every rank's count of collectives started
// (the backend's roll call; a rank answers while it waits in a collective, so one that computes, hangs or died
// does not).
std::string roll_call(const Group& g) {
  const auto grace = std::clamp<int64_t>(g.timeout.count() / 4, 50, 2000);
  std::vector<int64_t> a(static_cast<size_t>(2 * g.size), -1);
  g.api->roll_call(a.data(), static_cast<int>(grace));
  const int64_t mine = a[static_cast<size_t>(2 * g.rank)];
  std::vector<std::string> silent, behind, ahead, waiting;
  for (int r = 0; r < g.size; ++r) {
    if (r == g.rank) continue;
    const int64_t n = a[static_cast<size_t>(2 * r)], kind = a[static_cast<size_t>(2 * r + 1)];
    const std::string who = "rank " + std::to_string(r);
    if (n < 0) silent.push_back(who);
    else if (n == mine) waiting.push_back(who);
    else (n < mine ? behind : ahead)
        .push_back(who + " (at call " + std::to_string(n) + ", a " + kind_name(kind) + ")");
  }
  const auto list = [](const std::vector<std::string>& v) {
    std::string o;
    for (size_t i = 0; i < v.size(); ++i) o += (i == 0 ? "" : i + 1 == v.size() ? " and " : ", ") + v[i];
    return o;
  };
  std::ostringstream o;
  if (!silent.empty())
    o << list(silent)
      << (silent.size() == 1 ? " does not answer (within " : " do not answer (within ") << grace
      << (silent.size() == 1 ? " ms): it died, hangs, or computes instead of joining. "
                             : " ms): they died, hang, or compute instead of joining. ");
  if (!behind.empty()) o << "Behind this rank: " << list(behind) << ". ";
  if (!ahead.empty()) o << "Ahead of it: " << list(ahead) << ". ";
  if (!waiting.empty()) o << "In the same collective: " << list(waiting);
  else o << "No other rank is in the same collective";
  return o.str();
}

void wait_for(const std::shared_ptr<Work::State>& s) {
  Group& g = group();
  const auto start = std::chrono::steady_clock::now(), deadline = start + g.timeout;
  while (!advance(*s)) {
    if (s->nccl) g.api->answer();  // MPI is not polled meanwhile: answer the roll calls here
    const auto now = std::chrono::steady_clock::now();
    if (now > deadline) {
      if (s->nccl) {  // NCCL can end its kernels: abort the communicator (every later request fails or is dropped)
        g.nccl_api->abort(g.nccl);
        g.nccl = nullptr;
      }
      g.abandoned.push_back(s);  // it may still finish; destroy_process_group waits for it
      g.broken = s->what + " did not finish on rank " + std::to_string(g.rank) + " within " +
                 std::to_string(g.timeout.count()) + " ms";
      HG_FAIL("dist: ", s->what, " did not finish on rank ", g.rank, " within ", g.timeout.count(), " ms: ",
              roll_call(g), "; every rank must call the same collectives in the same order. A slow rank needs a "
              "longer InitOptions::timeout");
    }
    // Busy (yielding) for the first 20 ms: a transfer between ranks needs both to poll, so a rank that sleeps
    // between polls adds its sleep to every step of the protocol. A rank waiting longer (for a slow rank) backs off.
    const auto waited = now - start;
    if (waited < std::chrono::milliseconds(20)) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(waited < std::chrono::seconds(1) ? 50 : 1000));
  }
}

DType checked(const Tensor& t, const char* op, const char* name) {
  HG_CHECK(t.defined(), "dist.", op, ": ", name, " is an undefined tensor");
  HG_CHECK(t.is_cpu() || t.is_cuda(), "dist.", op, ": ", name, " is on ", t.device().str(),
           "; collectives take CPU and CUDA tensors");
  HG_CHECK(t.is_contiguous(), "dist.", op, ": ", name, " is not contiguous (a view); collectives write in place into "
           "dense storage: pass t.contiguous() and copy the result back");
  const DType dt = t.dtype();
  HG_CHECK(dt == DType::F32 || dt == DType::F16 || dt == DType::BF16 || dt == DType::F64 || dt == DType::I64,
           "dist.", op, ": ", name, " is ", dt, "; collectives take F32, F16, BF16, F64 or I64 (cast with .to())");
  HG_CHECK(t.numel() <= std::numeric_limits<int>::max(), "dist.", op, ": ", name, " has ", t.numel(),
           " elements, more than MPI's int count allows; split it into pieces of at most 2^31-1 elements");
  return dt;
}

// The tensor MPI works on: t itself on the CPU; for a device tensor (no NCCL: staged through host memory) a host
// copy, holding t's values when `read`, and recorded in `back` when the collective writes it.
Tensor host_side(const Tensor& t, bool read, bool written, std::vector<std::pair<Tensor, Tensor>>& back) {
  if (t.is_cpu()) return t;
  NoGradGuard no_grad;
  Tensor h = read ? t.to(Device::cpu()) : empty(t.shape(), {.dtype = t.dtype()});
  if (written) back.emplace_back(t, h);
  return h;
}

// The backend's operation for r: Avg arrives as Sum (the caller divides), after refusing Avg of integers.
int backend_op(const char* op, ReduceOp r, DType dt) {
  HG_CHECK(!(r == ReduceOp::Avg && dt == DType::I64), "dist.", op, ": ReduceOp::Avg of an I64 tensor has no exact "
           "result; reduce with Sum and divide, or cast to F64 first");
  return static_cast<int>(r == ReduceOp::Avg ? ReduceOp::Sum : r);
}

// A gather's or scatter's two tensors: one dtype, the whole one (a gather's output, a scatter's input) holding
// one part per rank.
DType checked_pair(const char* op, const Tensor& output, const Tensor& input, bool gather) {
  const DType dt = checked(input, op, "input"), dto = checked(output, op, "output");
  const int size = ready(op).size;
  HG_CHECK(dt == dto, "dist.", op, ": output is ", dto, " but input is ", dt, "; use one dtype");
  HG_CHECK(output.device() == input.device(), "dist.", op, ": output is on ", output.device().str(), " but input on ",
           input.device().str(), "; put both on one device");
  const Tensor& whole = gather ? output : input;
  const Tensor& part = gather ? input : output;
  HG_CHECK(whole.numel() == part.numel() * size, "dist.", op, ": ", gather ? "output" : "input", " has ", whole.numel(),
           " elements but ", size, " ranks x ", part.numel(), " = ", part.numel() * size, " are ",
           gather ? "gathered" : "scattered");
  return dt;
}

Work start(Collective c, const char* op, std::vector<Tensor> keep, Tensor avg, bool async_op,
           std::vector<std::pair<Tensor, Tensor>> copy_back = {}, bool nccl = false) {
  Group& g = ready(op);
  auto s = std::make_shared<Work::State>();
  s->nccl = nccl;
  s->copy_back = std::move(copy_back);
  const Tensor shown = keep.empty() ? Tensor() : keep.front();
  s->keep = std::move(keep);
  s->what = std::string(op) + " (call " + std::to_string(++g.calls) + " of this process group, " +
            std::to_string(shown.defined() ? shown.numel() : 0) + " " +
            (shown.defined() ? dtype_name(shown.dtype()) : "") + " elements)";
  s->avg = std::move(avg);
  std::string error;
  if (nccl) {
    g.api->count(c.kind);  // roll calls count the collectives of both transports
    s->request = g.nccl_api->start(g.nccl, c, &error);
    if (s->request == nullptr) abandon_nccl(s->what, error);
  } else {
    s->request = g.api->start(c, &error);
  }
  HG_CHECK(s->request != nullptr, "dist: ", s->what, " could not start", nccl ? " on NCCL: " : ": ", error);
  if (!async_op) wait_for(s);
  return Work(std::move(s));
}

// The first collective of a CUDA tensor (on `device`) decides, the same way on every rank, how CUDA tensors travel:
// NCCL when device_backend allows it, NCCL loads on every rank and no two ranks share a GPU (NCCL refuses that),
// else MPI with host staging ("auto"; "nccl" makes it an error on every rank). Collective: every rank gathers each
// rank's verdict over MPI, then rank 0's NCCL unique id is broadcast and every rank joins the communicator.
void decide_transport(Group& g, int device, const char* op) {
  if (g.device_choice == "mpi") {
    g.transport = Group::Transport::Staging;
    g.transport_note = "host staging through MPI (InitOptions::device_backend \"mpi\")";
    return;
  }
  const DeviceBackendApi* api = cuda::backend_api().nccl();
  const std::string local = api->available();
  // each rank: [NCCL loads, 15 words of "host/PCI bus id"], gathered on every rank
  constexpr int64_t kWords = 16;
  const Tensor mine = zeros({kWords}, {.dtype = DType::I64}), all = empty({g.size * kWords}, {.dtype = DType::I64});
  const std::string where = local.empty() ? api->device_id(device) : "";
  mine.data<int64_t>()[0] = local.empty() ? 1 : 0;
  where.copy(reinterpret_cast<char*>(mine.data<int64_t>() + 1), std::min<size_t>(where.size(), (kWords - 1) * 8 - 1));
  all_gather_into_tensor(all, mine);
  std::string why;
  const auto text = [&](int r) { return std::string(reinterpret_cast<const char*>(all.data<int64_t>() + r * kWords + 1)); };
  for (int r = 0; r < g.size && why.empty(); ++r)
    if (all.data<int64_t>()[r * kWords] == 0)
      why = r == g.rank ? "NCCL is not available on rank " + std::to_string(r) + ": " + local
                        : "NCCL is not available on rank " + std::to_string(r);
  for (int a = 0; a < g.size && why.empty(); ++a)
    for (int b = a + 1; b < g.size && why.empty(); ++b)
      if (text(a) == text(b))
        why = "ranks " + std::to_string(a) + " and " + std::to_string(b) + " share one GPU (" + text(a) +
              "), which NCCL refuses";
  if (!why.empty()) {
    HG_CHECK(g.device_choice != "nccl", "dist.", op, ": InitOptions::device_backend is \"nccl\" but ", why,
             "; give each rank a GPU of its own (cuda:<local rank>) and NCCL (pip install nvidia-nccl-cu13, "
             "HG_NCCL_LIBRARY), or use device_backend \"auto\" or \"mpi\" (host staging)");
    g.transport = Group::Transport::Staging;
    g.transport_note = "host staging through MPI (" + why + ")";
    return;
  }
  // rank 0's unique id (128 bytes; none when it could not make one) to every rank
  std::string error;
  std::vector<uint8_t> id;
  if (g.rank == 0) {
    const std::string u = api->unique_id(&error);
    id.assign(u.begin(), u.end());
  }
  broadcast_bytes(id, 0);
  HG_CHECK(!id.empty(), "dist.", op, ": rank 0 could not make an NCCL unique id", error.empty() ? "" : ": ", error);
  const std::string u(id.begin(), id.end());
  g.nccl = api->init(u, g.rank, g.size, device, &error);
  if (g.nccl == nullptr) {
    g.broken = "NCCL's communicator could not be made on rank " + std::to_string(g.rank) + ": " + error;
    HG_FAIL("dist.", op, ": ", g.broken);
  }
  g.nccl_api = api;
  g.nccl_device = device;
  g.transport = Group::Transport::Nccl;
  g.transport_note = api->version();
}

// Whether t goes through NCCL (deciding on the first CUDA tensor); false for CPU tensors and host staging.
bool through_nccl(const Tensor& t, const char* op) {
  if (!t.is_cuda()) return false;
  Group& g = ready(op);
  if (g.transport == Group::Transport::Undecided) decide_transport(g, t.device().index, op);
  if (g.transport != Group::Transport::Nccl) return false;
  HG_CHECK(t.device().index == g.nccl_device, "dist.", op, ": this rank's NCCL communicator is on cuda:", g.nccl_device,
           " but the tensor is on ", t.device().str(), "; keep the collectives of a rank on one device");
  return true;
}

}  // namespace

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
  }
  return "?";
}

void init_process_group(const InitOptions& options) {
  Group& g = group();
  HG_CHECK(!g.initialized, "dist.init_process_group: the process group is already initialized (rank ", g.rank, " of ",
           g.size, "); call it once per process");
  HG_CHECK(!g.destroyed, "dist.init_process_group: the process group was destroyed; MPI cannot start again in the "
           "same process");
  HG_CHECK(options.backend == "mpi", "dist.init_process_group: backend '", options.backend,
           "' is not available; use \"mpi\" (CPU tensors; CUDA tensors take InitOptions::device_backend)");
  HG_CHECK(options.device_backend == "auto" || options.device_backend == "nccl" || options.device_backend == "mpi",
           "dist.init_process_group: device_backend '", options.device_backend, "' is not one of \"auto\", \"nccl\" "
           "or \"mpi\"");
  HG_CHECK(options.timeout.count() > 0, "dist.init_process_group: timeout ", options.timeout.count(),
           " ms must be positive");
  std::string error;
  if (g.api == nullptr) g.api = load_backend(error);
  HG_CHECK(g.api != nullptr, "dist.init_process_group: ", error);
  const std::string why = g.api->init(&g.rank, &g.size);
  HG_CHECK(why.empty(), "dist.init_process_group: ", why);
  g.timeout = options.timeout;
  g.device_choice = options.device_backend;
  g.initialized = true;
}

bool is_initialized() { return group().initialized; }
int get_rank() { return joined("get_rank").rank; }
int get_world_size() { return joined("get_world_size").size; }
std::chrono::milliseconds timeout() { return joined("timeout").timeout; }
std::string backend_version() { return joined("backend_version").api->version(); }
std::string device_backend() {
  const Group& g = joined("device_backend");
  return g.transport == Group::Transport::Undecided ? "not decided yet (no collective of a CUDA tensor so far)"
                                                    : g.transport_note;
}

void destroy_process_group() {
  Group& g = group();
  HG_CHECK(g.initialized, "dist.destroy_process_group: the process group is not initialized");
  // A collective that timed out may still finish (a slow rank): MPI must not finalize under it, so it gets up
  // to twice the timeout more before every rank is ended.
  const auto deadline = std::chrono::steady_clock::now() + 2 * g.timeout;
  for (auto& s : g.abandoned) {
    if (s->nccl) {  // its communicator was aborted: the request only needs freeing
      if (!s->done) g.nccl_api->release(s->request);
      s->done = true;
      continue;
    }
    while (!s->done) {
      std::string error;
      const int r = g.api->test(s->request, &error);
      if (r != 0) {
        s->done = true;
        s->keep.clear();
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        std::fprintf(stderr, "dist.destroy_process_group: %s never finished on rank %d; ending every rank\n",
                     s->what.c_str(), g.rank);
        g.api->abort(1);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  g.abandoned.clear();
  if (g.nccl != nullptr) g.nccl_api->destroy(g.nccl);
  g.nccl = nullptr;
  g.api->finalize();
  g.initialized = false;
  g.destroyed = true;
}

bool Work::is_completed() {
  if (!state_) return true;
  return advance(*state_);
}

void Work::wait() {
  if (state_ && !state_->done) wait_for(state_);
}

Work::~Work() {
  if (!state_ || state_->done || !group().initialized || !group().broken.empty()) return;
  try {
    wait_for(state_);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
  }
}

Work all_reduce(const Tensor& tensor, ReduceOp op, bool async_op) {
  const DType dt = checked(tensor, "all_reduce", "tensor");
  const int bop = backend_op("all_reduce", op, dt);
  const bool nccl = through_nccl(tensor, "all_reduce");
  std::vector<std::pair<Tensor, Tensor>> back;
  const Tensor h = nccl ? tensor : host_side(tensor, true, true, back);
  Collective c{.kind = Collective::AllReduce, .dtype = static_cast<int>(dt), .op = bop, .send = h.data_ptr(),
               .recv = h.data_ptr(), .count = h.numel()};
  return start(c, "all_reduce", {h}, op == ReduceOp::Avg ? h : Tensor(), async_op, std::move(back), nccl);
}

Work broadcast(const Tensor& tensor, int src, bool async_op) {
  const DType dt = checked(tensor, "broadcast", "tensor");
  const int size = ready("broadcast").size;
  HG_CHECK(src >= 0 && src < size, "dist.broadcast: src ", src, " is not a rank of this group (0..", size - 1, ")");
  const bool root = group().rank == src, nccl = through_nccl(tensor, "broadcast");
  std::vector<std::pair<Tensor, Tensor>> back;
  const Tensor h = nccl ? tensor : host_side(tensor, root, !root, back);
  Collective c{.kind = Collective::Broadcast, .dtype = static_cast<int>(dt), .root = src, .send = h.data_ptr(),
               .recv = h.data_ptr(), .count = h.numel()};
  return start(c, "broadcast", {h}, Tensor(), async_op, std::move(back), nccl);
}

void broadcast_bytes(std::vector<uint8_t>& bytes, int src) {
  const int size = ready("broadcast_bytes").size;
  HG_CHECK(src >= 0 && src < size, "dist.broadcast_bytes: src ", src, " is not a rank of this group (0..", size - 1,
           ")");
  const bool root = group().rank == src;
  const Tensor count = full({1}, root ? static_cast<double>(bytes.size()) : 0.0, {.dtype = DType::I64});
  broadcast(count, src);
  const auto n = static_cast<size_t>(count.data<int64_t>()[0]);
  if (n == 0) {
    bytes.clear();
    return;
  }
  const Tensor words = zeros({static_cast<int64_t>((n + 7) / 8)}, {.dtype = DType::I64});  // the tail word padded
  if (root) std::memcpy(words.data_ptr(), bytes.data(), n);
  broadcast(words, src);
  const auto* p = static_cast<const uint8_t*>(words.data_ptr());
  bytes.assign(p, p + n);
}

Work all_gather_into_tensor(const Tensor& output, const Tensor& input, bool async_op) {
  const DType dt = checked_pair("all_gather_into_tensor", output, input, true);
  const bool nccl = through_nccl(input, "all_gather_into_tensor");
  std::vector<std::pair<Tensor, Tensor>> back;
  const Tensor in = nccl ? input : host_side(input, true, false, back);
  const Tensor out = nccl ? output : host_side(output, false, true, back);
  Collective c{.kind = Collective::AllGather, .dtype = static_cast<int>(dt), .send = in.data_ptr(),
               .recv = out.data_ptr(), .count = in.numel()};
  return start(c, "all_gather_into_tensor", {in, out}, Tensor(), async_op, std::move(back), nccl);
}

Work all_gather(const std::vector<Tensor>& outputs, const Tensor& input, bool async_op) {
  const int size = ready("all_gather").size;
  HG_CHECK(static_cast<int>(outputs.size()) == size, "dist.all_gather: ", outputs.size(), " output tensors for ", size,
           " ranks; pass one per rank");
  for (const Tensor& o : outputs) {
    checked(o, "all_gather", "an output");
    HG_CHECK(o.dtype() == input.dtype() && o.numel() == input.numel(), "dist.all_gather: an output is ", o.dtype(),
             " with ", o.numel(), " elements but the input is ", input.dtype(), " with ", input.numel());
  }
  // gathered densely, then copied into the caller's tensors (which need not be adjacent)
  const Tensor flat = empty({static_cast<int64_t>(size) * input.numel()}, {.dtype = input.dtype(), .device = input.device()});
  Work w = all_gather_into_tensor(flat, input.is_contiguous() ? input : input.contiguous(), false);
  NoGradGuard no_grad;
  for (int r = 0; r < size; ++r)
    outputs[r].copy_(flat.narrow(0, r * input.numel(), input.numel()).view(outputs[r].shape()));
  (void)async_op;  // done already: the copies need the data
  return w;
}

Work reduce_scatter_tensor(const Tensor& output, const Tensor& input, ReduceOp op, bool async_op) {
  const DType dt = checked_pair("reduce_scatter_tensor", output, input, false);
  const int bop = backend_op("reduce_scatter_tensor", op, dt);
  const bool nccl = through_nccl(input, "reduce_scatter_tensor");
  std::vector<std::pair<Tensor, Tensor>> back;
  const Tensor in = nccl ? input : host_side(input, true, false, back);
  const Tensor out = nccl ? output : host_side(output, false, true, back);
  Collective c{.kind = Collective::ReduceScatter, .dtype = static_cast<int>(dt), .op = bop, .send = in.data_ptr(),
               .recv = out.data_ptr(), .count = out.numel()};
  return start(c, "reduce_scatter_tensor", {in, out}, op == ReduceOp::Avg ? out : Tensor(), async_op,
               std::move(back), nccl);
}

void barrier() { start(Collective{.kind = Collective::Barrier}, "barrier", {}, Tensor(), false); }

}  // namespace hg::dist
