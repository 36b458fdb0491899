// libhalfgrad_mpi: hg::dist's collectives on MPI (dist/api/backend.h), loaded by libhalfgrad with dlopen() at
// init_process_group. Every collective is non-blocking (MPI_I*), so the caller can wait with a deadline.
//
// Reductions are halfgrad's, in a fixed order, not MPI's reduction operations: an all-reduce cuts the tensor into one
// slice per rank, sends every rank the others' copies of its slice (MPI_Ialltoallv), combines them in rank order
// (rank 0's + rank 1's + ... ; F16 and BF16 in F32, rounded once at the end) and gathers the reduced slices on every
// rank (MPI_Iallgatherv). So every rank holds the same bits (each element is reduced once, by one rank), and the
// bits do not depend on how a tensor was cut into calls (DDP's bucket sizes), on MPI's choice of algorithm or on its
// version; the order is the one a single process summing the ranks' values in a loop would use. A reduce-scatter is
// the first half of that.
//
// MPI needs every rank to start the collectives of a communicator in the same order. An all-reduce's gather starts
// when its exchange has finished, which a rank notices whenever it happens to poll; so the gathers run on a
// communicator of their own, and start strictly in the order the all-reduces did (a queue: a gather waits for the
// gathers of the all-reduces started before it), which is the same on every rank.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "core/convert.h"
#include "core/dtype.h"
#include "core/half.h"
#include "dist/api/backend.h"
#include "dist/dist.h"
namespace hg::dist {
namespace {

int world_rank = 0, world_size = 1;  // read once at init
MPI_Comm gather_comm = MPI_COMM_NULL;  // the all-reduces' gathers (a duplicate of MPI_COMM_WORLD)
MPI_Comm roll_comm = MPI_COMM_NULL;    // roll calls after a timeout (another duplicate)
int64_t started = 0;                   // collectives this rank has started
int64_t last_kind = -1;                // the kind of the last one
constexpr int kAsk = 1, kReply = 2;    // roll_comm's tags

// An all-reduce's or reduce-scatter's slices: rank j owns elements [displ[j], displ[j] + counts[j]).
struct Slices {
  std::vector<int> counts, displs;
  Slices(int64_t n, int ranks) : counts(ranks), displs(ranks) {
    const int64_t base = n / ranks, rem = n % ranks;
    for (int j = 0; j < ranks; ++j) {
      counts[j] = static_cast<int>(base + (j < rem ? 1 : 0));
      displs[j] = static_cast<int>(j * base + std::min<int64_t>(j, rem));
    }
  }
};

struct Request {
  MPI_Request req = MPI_REQUEST_NULL;
  Collective c;
  MPI_Datatype type = MPI_DATATYPE_NULL;
  int phase = 0;              // AllReduce: 0 slices exchanged, 1 reduced slices gathered; ReduceScatter: 0 only
  std::vector<char> scratch;  // every rank's copy of this rank's slice, in rank order
  std::vector<int> counts, displs;  // AllReduce's slices (Slices), kept for the gather
  std::string failed;               // set when MPI failed it while it waited in the queue
};

std::deque<Request*> exchanging;  // all-reduces in their exchange, in the order they started

// out[i] = in_0[i] op in_1[i] op ... op in_{ranks-1}[i], left to right; `in` holds the ranks' slices one after
// another (stride n). Halves are combined in F32 and rounded once. In chunks that stay in the L1 cache, a rank at a
// time (a loop the compiler vectorizes); each element still sees the ranks in order.
template <class T, class Acc, ReduceOp kOp>
void combine_as(const T* src, T* dst, int64_t n, int ranks) {
  constexpr int64_t kChunk = 2048;
  constexpr bool kHalf = std::is_same_v<T, f16> || std::is_same_v<T, bf16>;
  Acc acc[kChunk], wide[kHalf ? kChunk : 1];
  // halves widened and rounded by libhalfgrad's vector conversions (core/convert.h), exact and round-to-nearest-even
  const auto widen = [&](const T* in, Acc* out, int64_t m) {
    if constexpr (std::is_same_v<T, f16>) convert_f16_to_f32(in, out, m);
    else if constexpr (std::is_same_v<T, bf16>) convert_bf16_to_f32(in, out, m);
    else std::memcpy(out, in, static_cast<size_t>(m) * sizeof(T));
  };
  for (int64_t at = 0; at < n; at += kChunk) {
    const int64_t m = std::min(kChunk, n - at);
    widen(src + at, acc, m);
    for (int r = 1; r < ranks; ++r) {
      const Acc* in = wide;
      if constexpr (kHalf) widen(src + r * n + at, wide, m);
      else in = src + r * n + at;
      for (int64_t i = 0; i < m; ++i) {
        // max and min as a plain comparison (a NaN operand's result is unspecified, as with MPI's MAX and MIN)
        if constexpr (kOp == ReduceOp::Sum) acc[i] = acc[i] + in[i];
        else if constexpr (kOp == ReduceOp::Max) acc[i] = in[i] > acc[i] ? in[i] : acc[i];
        else acc[i] = in[i] < acc[i] ? in[i] : acc[i];
      }
    }
    if constexpr (std::is_same_v<T, f16>) convert_f32_to_f16(acc, dst + at, m);
    else if constexpr (std::is_same_v<T, bf16>) convert_f32_to_bf16(acc, dst + at, m);
    else std::memcpy(dst + at, acc, static_cast<size_t>(m) * sizeof(T));
  }
}

template <class T, class Acc>
void combine_typed(const void* in, void* out, int64_t n, int ranks, ReduceOp op) {
  const T* src = static_cast<const T*>(in);
  T* dst = static_cast<T*>(out);
  if (op == ReduceOp::Max) combine_as<T, Acc, ReduceOp::Max>(src, dst, n, ranks);
  else if (op == ReduceOp::Min) combine_as<T, Acc, ReduceOp::Min>(src, dst, n, ranks);
  else combine_as<T, Acc, ReduceOp::Sum>(src, dst, n, ranks);
}

void combine(DType dt, const void* in, void* out, int64_t n, int ranks, ReduceOp op) {
  switch (dt) {
    case DType::F32: return combine_typed<float, float>(in, out, n, ranks, op);
    case DType::F64: return combine_typed<double, double>(in, out, n, ranks, op);
    case DType::I64: return combine_typed<int64_t, int64_t>(in, out, n, ranks, op);
    case DType::F16: return combine_typed<f16, float>(in, out, n, ranks, op);
    default: return combine_typed<bf16, float>(in, out, n, ranks, op);
  }
}

std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int n = 0;
  MPI_Error_string(code, text, &n);
  return std::string(text, static_cast<size_t>(n));
}

std::string init(int* rank, int* size) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    // only the thread that called init_process_group calls MPI (OpenMP workers never do)
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS) return "MPI_Init_thread failed: " + mpi_error(rc);
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);  // errors come back as codes, not an abort
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, size);
  world_rank = *rank;
  world_size = *size;
  for (MPI_Comm* c : {&gather_comm, &roll_comm})
    if (*c == MPI_COMM_NULL) {
      const int rc = MPI_Comm_dup(MPI_COMM_WORLD, c);
      if (rc != MPI_SUCCESS) return "MPI_Comm_dup failed: " + mpi_error(rc);
      MPI_Comm_set_errhandler(*c, MPI_ERRORS_RETURN);
    }
  return "";
}

void finalize() {
  for (MPI_Comm* c : {&gather_comm, &roll_comm})
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void abort_all(int code) { MPI_Abort(MPI_COMM_WORLD, code); }

MPI_Datatype mpi_type(DType dt) {
  switch (dt) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::I64: return MPI_INT64_T;
    default: return MPI_UINT16_T;  // F16, BF16: moved as 16-bit words, combined by halfgrad
  }
}

void* start(const Collective& c, std::string* error) {
  auto* r = new Request;
  r->c = c;
  ++started;
  last_kind = c.kind;
  if (world_size == 1) {  // nothing to exchange: a reduction of one rank is its value; a gather, a copy
    if ((c.kind == Collective::AllGather || c.kind == Collective::ReduceScatter) && c.send != c.recv)
      std::memcpy(c.recv, c.send, static_cast<size_t>(c.count) * dtype_size(static_cast<DType>(c.dtype)));
    r->phase = 1;  // done: its req stays MPI_REQUEST_NULL, which MPI_Test reports finished
    return r;
  }
  const DType dt = static_cast<DType>(c.dtype);
  r->type = mpi_type(dt);
  const int n = static_cast<int>(c.count);
  const size_t esize = dtype_size(dt);
  int rc = MPI_SUCCESS;
  switch (c.kind) {
    case Collective::AllReduce: {
      const Slices s(c.count, world_size);
      const int mine = s.counts[world_rank];
      r->scratch.resize(static_cast<size_t>(mine) * world_size * esize);
      std::vector<int> rcounts(world_size, mine), rdispls(world_size);
      for (int j = 0; j < world_size; ++j) rdispls[j] = j * mine;
      rc = MPI_Ialltoallv(c.send, s.counts.data(), s.displs.data(), r->type, r->scratch.data(), rcounts.data(),
                          rdispls.data(), r->type, MPI_COMM_WORLD, &r->req);
      r->counts = s.counts;
      r->displs = s.displs;
      if (rc == MPI_SUCCESS) exchanging.push_back(r);
      break;
    }
    case Collective::Broadcast:
      rc = MPI_Ibcast(c.recv, n, r->type, c.root, MPI_COMM_WORLD, &r->req);
      break;
    case Collective::AllGather:
      rc = MPI_Iallgather(c.send, n, r->type, c.recv, n, r->type, MPI_COMM_WORLD, &r->req);
      break;
    case Collective::ReduceScatter:
      r->scratch.resize(static_cast<size_t>(n) * world_size * esize);
      rc = MPI_Ialltoall(c.send, n, r->type, r->scratch.data(), n, r->type, MPI_COMM_WORLD, &r->req);
      break;
    case Collective::Barrier:
      rc = MPI_Ibarrier(MPI_COMM_WORLD, &r->req);
      break;
  }
  if (rc != MPI_SUCCESS) {
    *error = mpi_error(rc);
    delete r;
    return nullptr;
  }
  return r;
}

// Moves the queue of all-reduces on: the first one whose exchange finished has its slice reduced and its gather
// started, then the next; stops at the first still exchanging.
void advance_exchanges() {
  while (!exchanging.empty()) {
    Request* r = exchanging.front();
    int flag = 0;
    const int rc = MPI_Test(&r->req, &flag, MPI_STATUS_IGNORE);
    if (rc == MPI_SUCCESS && !flag) return;
    exchanging.pop_front();
    if (rc != MPI_SUCCESS) {
      r->failed = mpi_error(rc);
      continue;
    }
    const Collective& c = r->c;
    const DType dt = static_cast<DType>(c.dtype);
    const int mine = r->counts[world_rank];
    char* out = static_cast<char*>(c.recv) + static_cast<size_t>(r->displs[world_rank]) * dtype_size(dt);
    combine(dt, r->scratch.data(), out, mine, world_size, static_cast<ReduceOp>(c.op));
    r->scratch = {};
    r->phase = 1;
    const int rc2 = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, c.recv, r->counts.data(), r->displs.data(),
                                    r->type, gather_comm, &r->req);
    if (rc2 != MPI_SUCCESS) r->failed = mpi_error(rc2);
  }
}

// Replies to every roll call that has arrived: {collectives started, the last one's kind} (a small message: MPI
// sends it eagerly, and the asker waits for it).
void answer_roll_calls() {
  if (roll_comm == MPI_COMM_NULL) return;
  for (;;) {
    int flag = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kAsk, roll_comm, &flag, &st) != MPI_SUCCESS || !flag) return;
    int64_t ask = 0;
    if (MPI_Recv(&ask, 1, MPI_INT64_T, st.MPI_SOURCE, kAsk, roll_comm, MPI_STATUS_IGNORE) != MPI_SUCCESS) return;
    int64_t reply[2] = {started, last_kind};
    MPI_Send(reply, 2, MPI_INT64_T, st.MPI_SOURCE, kReply, roll_comm);
  }
}

void roll_call(int64_t* answers, int grace_ms) {
  static int64_t ask = 0;  // the asks' buffer outlives their sends, which are never waited for (a rank may be gone)
  std::vector<int64_t> got(static_cast<size_t>(2 * world_size), -1);
  std::vector<MPI_Request> replies(static_cast<size_t>(world_size), MPI_REQUEST_NULL);
  for (int r = 0; r < world_size; ++r) {
    if (r == world_rank) continue;
    MPI_Request send = MPI_REQUEST_NULL;
    if (MPI_Isend(&ask, 1, MPI_INT64_T, r, kAsk, roll_comm, &send) == MPI_SUCCESS) MPI_Request_free(&send);
    MPI_Irecv(&got[static_cast<size_t>(2 * r)], 2, MPI_INT64_T, r, kReply, roll_comm, &replies[static_cast<size_t>(r)]);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(grace_ms);
  for (;;) {
    answer_roll_calls();  // ranks that time out together ask each other
    int done = 0;
    MPI_Testall(world_size, replies.data(), &done, MPI_STATUSES_IGNORE);
    if (done || std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  for (int r = 0; r < world_size; ++r) {
    MPI_Request& q = replies[static_cast<size_t>(r)];
    if (q == MPI_REQUEST_NULL) continue;
    MPI_Status st;
    MPI_Cancel(&q);  // no answer yet: withdrawn (unless it arrives meanwhile)
    MPI_Wait(&q, &st);
    int cancelled = 0;
    MPI_Test_cancelled(&st, &cancelled);
    if (cancelled) got[static_cast<size_t>(2 * r)] = got[static_cast<size_t>(2 * r + 1)] = -1;
  }
  got[static_cast<size_t>(2 * world_rank)] = started;
  got[static_cast<size_t>(2 * world_rank + 1)] = last_kind;
  std::copy(got.begin(), got.end(), answers);
}

int test(void* request, std::string* error) {
  auto* r = static_cast<Request*>(request);
  answer_roll_calls();
  advance_exchanges();
  if (!r->failed.empty()) {
    *error = r->failed;
    std::erase(exchanging, r);
    delete r;
    return -1;
  }
  const Collective& c = r->c;
  if (c.kind == Collective::AllReduce && r->phase == 0) return 0;  // still exchanging (or queued behind another)
  int flag = 0;
  const int rc = MPI_Test(&r->req, &flag, MPI_STATUS_IGNORE);
  if (rc != MPI_SUCCESS) {
    *error = mpi_error(rc);
    delete r;
    return -1;
  }
  if (!flag) return 0;
  if (c.kind == Collective::ReduceScatter && world_size > 1)
    combine(static_cast<DType>(c.dtype), r->scratch.data(), c.recv, c.count, world_size, static_cast<ReduceOp>(c.op));
  delete r;
  return 1;
}

std::string version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int n = 0;
  MPI_Get_library_version(text, &n);
  std::string v(text, static_cast<size_t>(n));
  const size_t cut = v.find_first_of(",\n");
  return cut == std::string::npos ? v : v.substr(0, cut);
}

// A collective on another transport (NCCL): counted, so roll calls see where this rank is.
void count(int kind) {
  ++started;
  last_kind = kind;
}

const BackendApi kApi{.abi = kBackendAbi, .init = &init, .finalize = &finalize, .abort = &abort_all,
                      .start = &start, .test = &test, .version = &version, .roll_call = &roll_call,
                      .count = &count, .answer = &answer_roll_calls};

}  // namespace
}  // namespace hg::dist

extern "C" __attribute__((visibility("default"))) const hg::dist::BackendApi* hg_dist_backend_api() {
  return &hg::dist::kApi;
}
