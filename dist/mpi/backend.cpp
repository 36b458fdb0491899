// libhalfgrad_mpi: hg::dist's collectives on MPI (dist/api/backend.h), loaded by libhalfgrad with dlopen() at
// init_process_group. Every collective is non-blocking (MPI_I*), so the caller can wait with a deadline.
//
// An all-reduce is a reduce to rank 0 followed by a broadcast from it, not MPI_Iallreduce: the sum is computed
// once and every rank receives the same bits (an all-reduce algorithm may combine in a different order on each
// rank, and data-parallel replicas that differ in the last bit drift apart). F16 and BF16 are reduced by
// halfgrad's own MPI operations: each pair of values widened to F32, combined, rounded once to the dtype.
#include <mpi.h>

#include <string>

#include "core/dtype.h"
#include "core/half.h"
#include "dist/api/backend.h"
#include "dist/dist.h"

namespace hg::dist {
namespace {

struct Request {
  MPI_Request req = MPI_REQUEST_NULL;
  Collective c;
  MPI_Datatype type = MPI_DATATYPE_NULL;
  MPI_Op op = MPI_OP_NULL;
  bool bcast_next = false;  // an all-reduce whose reduce is running: the broadcast follows
};

MPI_Op half_ops[2][3];  // [f16, bf16][sum, max, min]
int world_rank = 0;     // this process's rank, read once at init

template <class H, int kOp>
void half_op(void* in, void* inout, int* len, MPI_Datatype*) {
  const H* a = static_cast<const H*>(in);
  H* b = static_cast<H*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = to_float(a[i]), y = to_float(b[i]);
    // as MPI's MAX and MIN on floats: a plain comparison (a NaN operand's result is unspecified, as there)
    const float r = kOp == 0 ? x + y : kOp == 1 ? (x > y ? x : y) : (x < y ? x : y);
    b[i] = from_float<H>(r);
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
  MPI_Op_create(&half_op<f16, 0>, 1, &half_ops[0][0]);
  MPI_Op_create(&half_op<f16, 1>, 1, &half_ops[0][1]);
  MPI_Op_create(&half_op<f16, 2>, 1, &half_ops[0][2]);
  MPI_Op_create(&half_op<bf16, 0>, 1, &half_ops[1][0]);
  MPI_Op_create(&half_op<bf16, 1>, 1, &half_ops[1][1]);
  MPI_Op_create(&half_op<bf16, 2>, 1, &half_ops[1][2]);
  return "";
}

void finalize() {
  for (auto& row : half_ops)
    for (MPI_Op& op : row)
      if (op != MPI_OP_NULL) MPI_Op_free(&op);
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
    default: return MPI_UINT16_T;  // F16, BF16: moved as 16-bit words, reduced by half_ops
  }
}

MPI_Op mpi_op(DType dt, ReduceOp op) {
  const int k = op == ReduceOp::Max ? 1 : op == ReduceOp::Min ? 2 : 0;  // Avg arrives as Sum
  if (dt == DType::F16) return half_ops[0][k];
  if (dt == DType::BF16) return half_ops[1][k];
  return k == 1 ? MPI_MAX : k == 2 ? MPI_MIN : MPI_SUM;
}

void* start(const Collective& c, std::string* error) {
  auto* r = new Request{.c = c};
  const DType dt = static_cast<DType>(c.dtype);
  r->type = mpi_type(dt);
  r->op = mpi_op(dt, static_cast<ReduceOp>(c.op));
  const int n = static_cast<int>(c.count);
  int rc = MPI_SUCCESS;
  switch (c.kind) {
    case Collective::AllReduce:
      rc = MPI_Ireduce(world_rank == 0 ? MPI_IN_PLACE : c.send, c.recv, n, r->type, r->op, 0, MPI_COMM_WORLD, &r->req);
      r->bcast_next = true;
      break;
    case Collective::Broadcast:
      rc = MPI_Ibcast(c.recv, n, r->type, c.root, MPI_COMM_WORLD, &r->req);
      break;
    case Collective::AllGather:
      rc = MPI_Iallgather(c.send, n, r->type, c.recv, n, r->type, MPI_COMM_WORLD, &r->req);
      break;
    case Collective::ReduceScatter:
      rc = MPI_Ireduce_scatter_block(c.send, c.recv, n, r->type, r->op, MPI_COMM_WORLD, &r->req);
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

int test(void* request, std::string* error) {
  auto* r = static_cast<Request*>(request);
  int flag = 0;
  int rc = MPI_Test(&r->req, &flag, MPI_STATUS_IGNORE);
  if (rc == MPI_SUCCESS && flag && r->bcast_next) {  // the reduce arrived on rank 0: send it to every rank
    r->bcast_next = false;
    rc = MPI_Ibcast(r->c.recv, static_cast<int>(r->c.count), r->type, 0, MPI_COMM_WORLD, &r->req);
    flag = 0;
  }
  if (rc != MPI_SUCCESS) {
    *error = mpi_error(rc);
    delete r;
    return -1;
  }
  if (!flag) return 0;
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

const BackendApi kApi{.abi = kBackendAbi, .init = &init, .finalize = &finalize, .abort = &abort_all,
                      .start = &start, .test = &test, .version = &version};

}  // namespace
}  // namespace hg::dist

extern "C" __attribute__((visibility("default"))) const hg::dist::BackendApi* hg_dist_backend_api() {
  return &hg::dist::kApi;
}
