// The emulated device's NCCL (HG_CUDA=EMULATE): a stand-in for libnccl.so.2 with the functions of
// cuda/nccl_api.h, across the processes of one host, checking NCCL's documented contract where a real NCCL
// would hang, corrupt memory or fail later:
//
// - ncclCommInitRank: every rank joins within 2 minutes, with the same rank count, each rank once, each on its
//   own GPU (two ranks on one device are refused, as NCCL refuses them: "duplicate GPU"); the id must come from
//   this stand-in's ncclGetUniqueId.
// - A collective: a live communicator, a known data type and operation, a root among the ranks, buffers that
//   lie in emulated device memory with the extents the call implies, in place only as NCCL defines it (an
//   all-gather's send buffer is rank r's part of its receive buffer, a reduce-scatter's receive buffer rank r's
//   part of its send buffer; other overlaps refused), not during a graph capture (not emulated). When it runs,
//   every rank must have called the same collective with the same count, type, operation and root.
//
// Semantics: the collective is held on the caller's stream (hg::emu::hold) until every rank has posted its part,
// so the work behind it on that stream, and the events recorded there, wait for it as on a GPU. Reductions are in
// the buffer's type, in rank order, each addition rounded (as NCCL's rings and trees reduce: a F16 sum of many
// ranks is rounded at every step, unlike hg::dist's MPI path, which sums halves in F32 and rounds once), and every
// rank computes the same bits. Avg is the sum divided by the rank count.
//
// Transport: POSIX shared memory. The communicator's control block (/hgnccl-ID) holds each rank's device, how many
// collectives it has posted and finished, and whether it aborted; each collective of each rank is a segment of its
// own (/hgnccl-ID-RANK-SEQ: what was called and the send buffer's bytes), removed by its owner once every rank has
// finished that collective. ncclCommAbort ends this rank's collectives (their results undefined) and makes the
// others' collectives fail with ncclRemoteError, as a real abort leaves the peers' kernels to time out.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "core/half.h"
#include "cuda/emulator/runtime.h"
#include "cuda/nccl_api.h"

namespace hg::cuda::nccl {

namespace {

constexpr int kMaxRanks = 64;
constexpr int kDeviceChars = 96;
constexpr const char* kIdPrefix = "hgemu-nccl ";
constexpr auto kInitTimeout = std::chrono::minutes(2);

struct Slot {
  std::atomic<int> joined;
  std::atomic<int> aborted;
  std::atomic<int64_t> posted;  // the last collective whose segment this rank wrote
  std::atomic<int64_t> taken;   // the last collective this rank finished (read every rank's segment)
  char device[kDeviceChars];
  char why[512];  // what failed on this rank before it aborted (written before `aborted`)
};

struct Control {
  std::atomic<int> nranks;
  Slot slot[kMaxRanks];
};

enum Kind { kAllReduce, kBroadcast, kAllGather, kReduceScatter };

// What a rank called, at the head of its segment; then `bytes` of its send buffer.
struct Desc {
  int kind = 0, type = 0, op = 0, root = 0;
  int64_t count = 0, bytes = 0;
};

const char* kind_name(int k) {
  static const char* names[] = {"ncclAllReduce", "ncclBroadcast", "ncclAllGather", "ncclReduceScatter"};
  return k >= 0 && k < 4 ? names[k] : "?";
}

const char* type_name(int t) {
  static const char* names[] = {"ncclInt8",   "ncclUint8",   "ncclInt32",   "ncclUint32",  "ncclInt64",
                                "ncclUint64", "ncclFloat16", "ncclFloat32", "ncclFloat64", "ncclBfloat16"};
  return t >= 0 && t < 10 ? names[t] : "?";
}

size_t type_size(int t) {
  static const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
  return sizes[t];
}

const char* op_name(int op) {
  static const char* names[] = {"sum", "prod", "max", "min", "avg"};
  return op >= 0 && op < 5 ? names[op] : "?";
}

thread_local std::string last_error;  // ncclGetLastError's

ncclResult_t fail(ncclResult_t r, const std::string& why) {
  last_error = why;
  return r;
}

struct State {
  std::string name;  // "/hgnccl-ID"
  Control* control = nullptr;
  int rank = 0, nranks = 1;
  int64_t seq = 0;                // collectives enqueued
  bool aborted = false;           // ncclCommAbort
  ncclResult_t async = ncclSuccess;  // ncclCommGetAsyncError's
  std::string error;                 // the first failure's words
  std::deque<int64_t> own;        // this rank's segments not yet removed
  ~State() {
    if (control != nullptr) munmap(control, sizeof(Control));
  }
  std::string segment(int r, int64_t s) const { return name + "-" + std::to_string(r) + "-" + std::to_string(s); }
  // Removes this rank's segments every rank has finished with (all of them when `all`).
  void reclaim(bool all) {
    int64_t done = INT64_MAX;
    for (int r = 0; r < nranks; ++r)
      if (!control->slot[r].aborted.load()) done = std::min<int64_t>(done, control->slot[r].taken.load());
    while (!own.empty() && (all || own.front() <= done)) {
      shm_unlink(segment(rank, own.front()).c_str());
      own.pop_front();
    }
  }
  void set_async(ncclResult_t r, const std::string& why) {
    last_error = why;
    if (async != ncclSuccess) return;  // the first failure is the one reported
    async = r;
    error = why;
    std::fprintf(stderr, "halfgrad emulator: NCCL stand-in, rank %d: %s\n", rank, why.c_str());
  }
};

// Maps a shared-memory object of `bytes` (created when `create`); nullptr when it does not exist.
void* map(const std::string& name, size_t bytes, bool create) {
  const int fd = shm_open(name.c_str(), create ? O_CREAT | O_RDWR : O_RDONLY, 0600);
  if (fd < 0) return nullptr;
  if (create && ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    close(fd);
    return nullptr;
  }
  void* p = mmap(nullptr, bytes, create ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  return p == MAP_FAILED ? nullptr : p;
}

// x op y in one type W
template <class W>
W apply(W x, W y, int op) {
  return op == ncclProd ? x * y : op == ncclMax ? (y > x ? y : x) : op == ncclMin ? (y < x ? y : x) : x + y;
}

// out = a op b in T, rounded to T (halves through float; integer sums and products wrap, as NCCL's do)
template <class T>
T combine(T a, T b, int op) {
  if constexpr (std::is_same_v<T, f16>) return f16{float_to_f16_bits(apply(to_float(a), to_float(b), op))};
  else if constexpr (std::is_same_v<T, bf16>) return bf16{float_to_bf16_bits(apply(to_float(a), to_float(b), op))};
  else if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    if (op == ncclMax || op == ncclMin) return apply(a, b, op);
    return static_cast<T>(apply(static_cast<U>(a), static_cast<U>(b), op));
  } else {
    return apply(a, b, op);
  }
}

template <class T>
T divide(T v, int n) {
  if constexpr (std::is_same_v<T, f16>) return f16{float_to_f16_bits(to_float(v) / static_cast<float>(n))};
  else if constexpr (std::is_same_v<T, bf16>) return bf16{float_to_bf16_bits(to_float(v) / static_cast<float>(n))};
  else return static_cast<T>(v / static_cast<T>(n));
}

// out[i] = parts[0][at + i] op parts[1][at + i] op ... (rank order), i < n
template <class T>
void reduce_typed(const std::vector<const char*>& parts, int64_t at, int64_t n, int op, void* out) {
  T* o = static_cast<T*>(out);
  const int ranks = static_cast<int>(parts.size());
  for (int64_t i = 0; i < n; ++i) {
    T acc;
    std::memcpy(&acc, parts[0] + (at + i) * static_cast<int64_t>(sizeof(T)), sizeof(T));
    for (int r = 1; r < ranks; ++r) {
      T v;
      std::memcpy(&v, parts[static_cast<size_t>(r)] + (at + i) * static_cast<int64_t>(sizeof(T)), sizeof(T));
      acc = combine(acc, v, op == ncclAvg ? ncclSum : op);
    }
    if (op == ncclAvg) acc = divide(acc, ranks);
    std::memcpy(o + i, &acc, sizeof(T));
  }
}

void reduce(int type, const std::vector<const char*>& parts, int64_t at, int64_t n, int op, void* out) {
  switch (type) {
    case ncclInt8: return reduce_typed<int8_t>(parts, at, n, op, out);
    case ncclUint8: return reduce_typed<uint8_t>(parts, at, n, op, out);
    case ncclInt32: return reduce_typed<int32_t>(parts, at, n, op, out);
    case ncclUint32: return reduce_typed<uint32_t>(parts, at, n, op, out);
    case ncclInt64: return reduce_typed<int64_t>(parts, at, n, op, out);
    case ncclUint64: return reduce_typed<uint64_t>(parts, at, n, op, out);
    case ncclFloat16: return reduce_typed<f16>(parts, at, n, op, out);
    case ncclFloat32: return reduce_typed<float>(parts, at, n, op, out);
    case ncclFloat64: return reduce_typed<double>(parts, at, n, op, out);
    default: return reduce_typed<bf16>(parts, at, n, op, out);
  }
}

std::string describe(const Desc& d) {
  std::string s = std::string(kind_name(d.kind)) + " of " + std::to_string(d.count) + " x " + type_name(d.type);
  if (d.kind == kAllReduce || d.kind == kReduceScatter) s += std::string(" (") + op_name(d.op) + ")";
  if (d.kind == kBroadcast) s += " from root " + std::to_string(d.root);
  return s;
}

// Writes this rank's part of collective `seq` (its call and send buffer) and marks it posted.
bool post(State& st, int64_t seq, const Desc& d, const void* send) {
  const size_t bytes = sizeof(Desc) + static_cast<size_t>(d.bytes);
  const std::string name = st.segment(st.rank, seq);
  void* p = map(name, bytes, true);
  if (p == nullptr) {
    st.set_async(ncclSystemError, "could not create the shared memory " + name + ": " + std::strerror(errno));
    return false;
  }
  std::memcpy(p, &d, sizeof(Desc));
  if (d.bytes > 0) std::memcpy(static_cast<char*>(p) + sizeof(Desc), send, static_cast<size_t>(d.bytes));
  munmap(p, bytes);
  st.own.push_back(seq);
  st.control->slot[st.rank].posted.store(seq);
  return true;
}

// The error of a collective whose peer `r` aborted its communicator, quoting what failed there.
std::string remote_abort(const State& st, int r, const Desc& d, int64_t seq) {
  const char* after = st.control->slot[r].why;
  return std::string(kind_name(d.kind)) + " (collective " + std::to_string(seq) + "): rank " + std::to_string(r) +
         " aborted its communicator" + (*after != '\0' ? std::string(" after: ") + after : std::string());
}

// Runs collective `seq` once every rank posted it: reads every rank's part, checks they called the same
// collective, writes this rank's result.
void run(State& st, int64_t seq, const Desc& mine, void* recv) {
  std::vector<void*> maps(static_cast<size_t>(st.nranks), nullptr);
  std::vector<size_t> sizes(static_cast<size_t>(st.nranks), 0);
  std::vector<const char*> data(static_cast<size_t>(st.nranks), nullptr);
  std::string error;
  bool remote = false;  // the error is another rank's abort
  for (int r = 0; r < st.nranks && error.empty(); ++r) {
    const std::string name = st.segment(r, seq);
    Desc d;
    void* head = map(name, sizeof(Desc), false);
    // A rank that found a mismatch first and aborted removes its parts, maybe between these two maps: say so
    // (comm_abort sets `aborted` before it removes them).
    const auto missing = [&] {
      remote = st.control->slot[r].aborted.load() != 0;
      error = remote ? remote_abort(st, r, mine, seq)
                     : "rank " + std::to_string(r) + "'s part of collective " + std::to_string(seq) + " is missing (" +
                           name + ")";
    };
    if (head == nullptr) {
      missing();
      break;
    }
    std::memcpy(&d, head, sizeof(Desc));
    munmap(head, sizeof(Desc));
    if (d.kind != mine.kind || d.type != mine.type || d.count != mine.count ||
        ((d.kind == kAllReduce || d.kind == kReduceScatter) && d.op != mine.op) ||
        (d.kind == kBroadcast && d.root != mine.root)) {
      error = "collective " + std::to_string(seq) + " of the communicator: rank " + std::to_string(st.rank) +
              " called " + describe(mine) + " but rank " + std::to_string(r) + " called " + describe(d) +
              "; every rank must call the same collectives in the same order with the same count, type, "
              "operation and root (a real NCCL hangs or corrupts memory here)";
      break;
    }
    sizes[static_cast<size_t>(r)] = sizeof(Desc) + static_cast<size_t>(d.bytes);
    maps[static_cast<size_t>(r)] = map(name, sizes[static_cast<size_t>(r)], false);
    if (maps[static_cast<size_t>(r)] == nullptr) {
      missing();
      break;
    }
    data[static_cast<size_t>(r)] = static_cast<const char*>(maps[static_cast<size_t>(r)]) + sizeof(Desc);
  }
  if (error.empty()) {
    const size_t esize = type_size(mine.type);
    const int64_t n = mine.count;
    switch (mine.kind) {
      case kAllReduce: reduce(mine.type, data, 0, n, mine.op, recv); break;
      case kReduceScatter: reduce(mine.type, data, st.rank * n, n, mine.op, recv); break;
      case kBroadcast:
        if (n > 0) std::memcpy(recv, data[static_cast<size_t>(mine.root)], static_cast<size_t>(n) * esize);
        break;
      case kAllGather:
        for (int r = 0; r < st.nranks && n > 0; ++r)
          std::memcpy(static_cast<char*>(recv) + static_cast<size_t>(r * n) * esize, data[static_cast<size_t>(r)],
                      static_cast<size_t>(n) * esize);
        break;
    }
  } else {
    st.set_async(remote ? ncclRemoteError : ncclInvalidUsage, error);
  }
  for (int r = 0; r < st.nranks; ++r)
    if (maps[static_cast<size_t>(r)] != nullptr) munmap(maps[static_cast<size_t>(r)], sizes[static_cast<size_t>(r)]);
  st.control->slot[st.rank].taken.store(seq);
  st.reclaim(false);
}

// Whether [a, a + an) and [b, b + bn) overlap (empty ranges never do).
bool overlap(const void* a, size_t an, const void* b, size_t bn) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return an > 0 && bn > 0 && x < y + bn && y < x + an;
}

}  // namespace

struct ncclComm {
  std::shared_ptr<State> state;
};

namespace {

ncclResult_t get_version(int* version) {
  if (version == nullptr) return fail(ncclInvalidArgument, "ncclGetVersion: version is NULL");
  *version = 22700;  // the API cuda/nccl_api.h declares: NCCL 2.27
  return ncclSuccess;
}

ncclResult_t get_unique_id(ncclUniqueId* id) {
  if (id == nullptr) return fail(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  std::random_device rd;
  const uint64_t r = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(getpid());
  std::memset(id->internal, 0, sizeof(id->internal));
  std::snprintf(id->internal, sizeof(id->internal), "%s%016llx", kIdPrefix, static_cast<unsigned long long>(r));
  return ncclSuccess;
}

ncclResult_t comm_init_rank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  if (comm == nullptr) return fail(ncclInvalidArgument, "ncclCommInitRank: comm is NULL");
  if (nranks < 1 || nranks > kMaxRanks)
    return fail(ncclInvalidArgument, "ncclCommInitRank: nranks " + std::to_string(nranks) + " (the stand-in takes 1 to " +
                                         std::to_string(kMaxRanks) + ")");
  if (rank < 0 || rank >= nranks)
    return fail(ncclInvalidArgument, "ncclCommInitRank: rank " + std::to_string(rank) + " is not in [0, " +
                                         std::to_string(nranks) + ")");
  if (std::strncmp(id.internal, kIdPrefix, std::strlen(kIdPrefix)) != 0)
    return fail(ncclInvalidArgument, "ncclCommInitRank: the unique id was not made by ncclGetUniqueId (every rank "
                                     "must receive rank 0's)");
  char bus[32] = {0}, host[64] = {0};
  if (cudaDeviceGetPCIBusId(bus, sizeof(bus), 0) != cudaSuccess) return fail(ncclUnhandledCudaError, "no device");
  gethostname(host, sizeof(host) - 1);
  auto st = std::make_shared<State>();
  st->name = std::string("/hgnccl-") + (id.internal + std::strlen(kIdPrefix));
  st->rank = rank;
  st->nranks = nranks;
  st->control = static_cast<Control*>(map(st->name, sizeof(Control), true));
  if (st->control == nullptr)
    return fail(ncclSystemError, "ncclCommInitRank: shared memory " + st->name + ": " + std::strerror(errno));
  int expected = 0;
  if (!st->control->nranks.compare_exchange_strong(expected, nranks) && expected != nranks)
    return fail(ncclInvalidUsage, "ncclCommInitRank: rank " + std::to_string(rank) + " says " + std::to_string(nranks) +
                                      " ranks but another rank said " + std::to_string(expected));
  Slot& me = st->control->slot[rank];
  std::snprintf(me.device, sizeof(me.device), "%s/%s", host, bus);
  if (me.joined.exchange(1) != 0)
    return fail(ncclInvalidUsage, "ncclCommInitRank: rank " + std::to_string(rank) + " joined twice");
  const auto deadline = std::chrono::steady_clock::now() + kInitTimeout;
  for (int r = 0; r < nranks; ++r)
    while (st->control->slot[r].joined.load() == 0) {
      if (std::chrono::steady_clock::now() > deadline)
        return fail(ncclSystemError, "ncclCommInitRank: rank " + std::to_string(r) + " did not join within 2 minutes");
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  if (rank == 0) shm_unlink(st->name.c_str());  // every rank has it mapped: nobody opens it again
  for (int a = 0; a < nranks; ++a)
    for (int b = a + 1; b < nranks; ++b)
      if (std::strcmp(st->control->slot[a].device, st->control->slot[b].device) == 0)
        return fail(ncclInvalidUsage, "ncclCommInitRank: duplicate GPU detected: rank " + std::to_string(a) +
                                          " and rank " + std::to_string(b) + " are both on the device at " +
                                          st->control->slot[a].device + "; NCCL needs one device per rank");
  *comm = new ncclComm{st};
  return ncclSuccess;
}

ncclResult_t collective(Kind kind, const void* send, void* recv, size_t count, int type, int op, int root,
                        ncclComm_t comm, cudaStream_t stream) {
  const char* fn = kind_name(kind);
  if (comm == nullptr || comm->state == nullptr) return fail(ncclInvalidArgument, std::string(fn) + ": comm is NULL");
  State& st = *comm->state;
  if (st.async != ncclSuccess)
    return fail(st.async, std::string(fn) + ": the communicator failed earlier (" + last_error + "); abort it");
  if (type < 0 || type > 9) return fail(ncclInvalidArgument, std::string(fn) + ": unknown datatype " + std::to_string(type));
  if ((kind == kAllReduce || kind == kReduceScatter) && (op < 0 || op > 4))
    return fail(ncclInvalidArgument, std::string(fn) + ": unknown reduction " + std::to_string(op));
  if (kind == kBroadcast && (root < 0 || root >= st.nranks))
    return fail(ncclInvalidArgument, std::string(fn) + ": root " + std::to_string(root) + " is not a rank of the " +
                                         std::to_string(st.nranks));
  const size_t esize = type_size(type), n = count, w = static_cast<size_t>(st.nranks);
  const size_t send_n = kind == kReduceScatter ? n * w : (kind == kBroadcast && st.rank != root) ? 0 : n;
  const size_t recv_n = kind == kAllGather ? n * w : n;
  const size_t send_bytes = send_n * esize, recv_bytes = recv_n * esize;
  if (send_bytes > 0 && !hg::emu::is_device_range(send, send_bytes))
    return fail(ncclInvalidArgument, std::string(fn) + ": sendbuff " + hg::emu::hex(send) + " is not " +
                                         std::to_string(send_bytes) + " bytes of device memory");
  if (recv_bytes > 0 && !hg::emu::is_device_range(recv, recv_bytes))
    return fail(ncclInvalidArgument, std::string(fn) + ": recvbuff " + hg::emu::hex(recv) + " is not " +
                                         std::to_string(recv_bytes) + " bytes of device memory");
  // in place only as NCCL defines it
  const char* in_place = static_cast<const char*>(send);
  const char* r0 = static_cast<const char*>(recv);
  bool legal = true;
  if (kind == kAllGather) legal = in_place == r0 + st.rank * n * esize || !overlap(send, send_bytes, recv, recv_bytes);
  else if (kind == kReduceScatter)
    legal = r0 == in_place + st.rank * n * esize || !overlap(send, send_bytes, recv, recv_bytes);
  else legal = in_place == r0 || !overlap(send, send_bytes, recv, recv_bytes);
  if (!legal)
    return fail(ncclInvalidArgument, std::string(fn) + ": sendbuff and recvbuff overlap but not in place (NCCL's "
                                                       "in-place rule for this collective)");
  if (hg::emu::capturing())
    return fail(ncclInvalidUsage, std::string(fn) + ": NCCL inside a CUDA graph capture is not emulated");
  const Desc d{.kind = kind, .type = type, .op = op, .root = root, .count = static_cast<int64_t>(count),
               .bytes = static_cast<int64_t>(send_bytes)};
  const int64_t seq = ++st.seq;
  std::shared_ptr<State> keep = comm->state;
  bool posted = false;
  const cudaError_t e = hg::emu::hold(stream, [keep, seq, d, send, recv, posted]() mutable {
    State& s = *keep;
    if (s.aborted || s.async != ncclSuccess) return true;  // ended: the results are undefined
    if (!posted) {
      if (!post(s, seq, d, send)) return true;
      posted = true;
    }
    for (int r = 0; r < s.nranks; ++r) {
      if (r != s.rank && s.control->slot[r].aborted.load()) {
        s.set_async(ncclRemoteError, remote_abort(s, r, d, seq));
        return true;
      }
      if (s.control->slot[r].posted.load() < seq) return false;
    }
    run(s, seq, d, recv);
    return true;
  });
  if (e != cudaSuccess)
    return fail(ncclUnhandledCudaError, std::string(fn) + ": the stream refused the work: " + cudaGetErrorName(e));
  return ncclSuccess;
}

ncclResult_t all_reduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                        ncclComm_t comm, cudaStream_t stream) {
  return collective(kAllReduce, send, recv, count, type, op, 0, comm, stream);
}
ncclResult_t broadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                       cudaStream_t stream) {
  return collective(kBroadcast, send, recv, count, type, ncclSum, root, comm, stream);
}
ncclResult_t all_gather(const void* send, void* recv, size_t count, ncclDataType_t type, ncclComm_t comm,
                        cudaStream_t stream) {
  return collective(kAllGather, send, recv, count, type, ncclSum, 0, comm, stream);
}
ncclResult_t reduce_scatter(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                            ncclComm_t comm, cudaStream_t stream) {
  return collective(kReduceScatter, send, recv, count, type, op, 0, comm, stream);
}

ncclResult_t comm_abort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  State& st = *comm->state;
  st.aborted = true;
  Slot& me = st.control->slot[st.rank];
  std::snprintf(me.why, sizeof(me.why), "%s", st.error.c_str());
  me.aborted.store(1);
  st.reclaim(true);
  delete comm;  // held work keeps the state until its stream lets it go
  return ncclSuccess;
}

ncclResult_t comm_destroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  State& st = *comm->state;
  if (st.control->slot[st.rank].taken.load() < st.seq && !st.aborted && st.async == ncclSuccess)
    return fail(ncclInvalidUsage, "ncclCommDestroy: " + std::to_string(st.seq - st.control->slot[st.rank].taken.load()) +
                                      " collective(s) still in flight; wait for them (or ncclCommAbort)");
  // the others may still read this rank's last parts: wait (a while) until they finished them
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    st.reclaim(false);
    if (st.own.empty() || std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  st.reclaim(true);
  delete comm;
  return ncclSuccess;
}

ncclResult_t get_async_error(ncclComm_t comm, ncclResult_t* r) {
  if (comm == nullptr || r == nullptr) return fail(ncclInvalidArgument, "ncclCommGetAsyncError: NULL argument");
  *r = comm->state->async;
  return ncclSuccess;
}

const char* error_string(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
  }
  return "unknown result code";
}

const char* get_last_error(ncclComm_t) { return last_error.c_str(); }

}  // namespace

const Library& emulated_library() {
  static const Library lib{.ncclGetVersion = &get_version,
                           .ncclGetUniqueId = &get_unique_id,
                           .ncclCommInitRank = &comm_init_rank,
                           .ncclCommDestroy = &comm_destroy,
                           .ncclCommAbort = &comm_abort,
                           .ncclCommGetAsyncError = &get_async_error,
                           .ncclGetErrorString = &error_string,
                           .ncclGetLastError = &get_last_error,
                           .ncclAllReduce = &all_reduce,
                           .ncclBroadcast = &broadcast,
                           .ncclAllGather = &all_gather,
                           .ncclReduceScatter = &reduce_scatter};
  return lib;
}

}  // namespace hg::cuda::nccl
