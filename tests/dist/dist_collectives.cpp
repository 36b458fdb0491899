// hg::dist's collectives across real MPI ranks: CTest runs this program under mpirun with 1, 2 and 3 ranks
// (tests/CMakeLists.txt). Every rank checks what it received against what the definition says; the program
// exits 1 naming the first failed check.
//   mpirun -np 2 dist_collectives              # the collectives, their dtypes, async handles and misuse
//   mpirun -np 2 dist_collectives --timeout    # rank 1 joins an all_reduce late: rank 0's wait times out
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "dist_check.h"
#include "halfgrad.h"

using namespace hg;
using dist_check::check;
using dist_check::expect_error;
using dist_check::failures;

namespace {


std::vector<double> vals(const Tensor& t) { return t.to(DType::F64).contiguous().to_vector<double>(); }

// t = (rank + 1) * [0, 1, ..., n-1] in dtype dt
Tensor ramp(int64_t n, double factor, DType dt) {
  return (arange(n, {.dtype = DType::F64}) * factor).to(dt);
}

void collectives() {
  const int rank = dist::get_rank(), world = dist::get_world_size();
  const double total = world * (world + 1) / 2.0;  // sum over ranks of (rank + 1)
  const int64_t n = 1000;
  for (DType dt : {DType::F32, DType::F64, DType::I64, DType::F16, DType::BF16}) {
    const std::string name = dtype_name(dt);
    // sums of up to 3 ranks stay integers every dtype holds exactly: F16 up to 2048, BF16 up to 256
    const int64_t m = dt == DType::BF16 ? 32 : dt == DType::F16 ? 256 : n;
    Tensor t = ramp(m, rank + 1, dt);
    dist::all_reduce(t);
    check(vals(t) == vals(ramp(m, total, DType::F64)), name + " all_reduce sum");
    Tensor mx = ramp(m, rank + 1, dt);
    dist::all_reduce(mx, dist::ReduceOp::Max);
    check(vals(mx) == vals(ramp(m, world, DType::F64)), name + " all_reduce max");
    Tensor mn = ramp(m, rank + 1, dt);
    dist::all_reduce(mn, dist::ReduceOp::Min);
    check(vals(mn) == vals(ramp(m, 1, DType::F64)), name + " all_reduce min");
    Tensor b = full({m}, rank == world - 1 ? 7.0 : -1.0, {.dtype = dt});
    dist::broadcast(b, world - 1);
    check(vals(b) == vals(full({m}, 7.0, {.dtype = DType::F64})), name + " broadcast from the last rank");
    // all_gather: rank r sends r, r+1, r+2
    const Tensor in = (arange(3, {.dtype = DType::F64}) + rank).to(dt);
    Tensor out = zeros({3 * world}, {.dtype = dt});
    dist::all_gather_into_tensor(out, in);
    std::vector<double> want;
    for (int r = 0; r < world; ++r)
      for (int i = 0; i < 3; ++i) want.push_back(r + i);
    check(vals(out) == want, name + " all_gather_into_tensor");
    std::vector<Tensor> outs;
    for (int r = 0; r < world; ++r) outs.push_back(zeros({3}, {.dtype = dt}));
    dist::all_gather(outs, in);
    for (int r = 0; r < world; ++r) check(vals(outs[r]) == std::vector<double>{double(r), r + 1.0, r + 2.0}, name + " all_gather");
    // reduce_scatter: every rank sends (rank + 1) * [0 .. 2*world); rank r gets block r of the sum
    const Tensor src = ramp(2 * world, rank + 1, dt);
    Tensor blk = zeros({2}, {.dtype = dt});
    dist::reduce_scatter_tensor(blk, src);
    check(vals(blk) == std::vector<double>{2.0 * rank * total, (2.0 * rank + 1) * total}, name + " reduce_scatter_tensor");
  }
  // Avg: the sum divided by the world size, rounded once (F16: the same as torch's F32 division then rounding)
  Tensor avg = full({5}, double(rank), {.dtype = DType::F16});
  dist::all_reduce(avg, dist::ReduceOp::Avg);
  check(vals(avg) == vals(full({5}, (world - 1) / 2.0, {.dtype = DType::F16})), "F16 all_reduce avg");
  // every rank receives the same bits, even for sums that round
  Generator g(static_cast<uint64_t>(100 + rank));
  Tensor r = randn({4096}, {}, &g);
  dist::all_reduce(r);
  Tensor all = zeros({4096 * world}, {});
  dist::all_gather_into_tensor(all, r);
  const std::vector<float> a = all.to_vector<float>();
  bool same = true;
  for (int q = 1; q < world; ++q) same = same && std::memcmp(&a[0], &a[4096 * q], 4096 * sizeof(float)) == 0;
  check(same, "every rank holds the same bits after an all_reduce of random F32 values");
  // ... and they are the sum in rank order (rank 0's + rank 1's + ...; F16 in F32, rounded once), whatever pieces the
  // tensor is reduced in: every rank computes the expected sum from the other ranks' seeds
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    const auto ranks_values = [&](int q) {
      Generator gq(static_cast<uint64_t>(200 + q));
      return randn({4099}, {}, &gq).to(dt);
    };
    std::vector<float> expect(4099, 0.0f);
    for (int q = 0; q < world; ++q) {
      const std::vector<float> v = ranks_values(q).to(DType::F32).to_vector<float>();
      for (size_t i = 0; i < v.size(); ++i) expect[i] = q == 0 ? v[i] : expect[i] + v[i];
    }
    const Tensor want = dt == DType::F32 ? from_vector(expect, {4099}) : from_vector(expect, {4099}).to(dt);
    Tensor whole = ranks_values(rank), pieces = ranks_values(rank);
    dist::all_reduce(whole);
    for (int64_t at = 0; at < 4099; at += 1000) dist::all_reduce(pieces.narrow(0, at, std::min<int64_t>(1000, 4099 - at)));
    check(vals(whole) == vals(want), std::string(dtype_name(dt)) + " all_reduce is the sum in rank order");
    check(vals(pieces) == vals(whole), std::string(dtype_name(dt)) + " all_reduce in pieces gives the same bits");
  }
  // async: two collectives in flight, waited for in the other order
  Tensor x = full({100000}, 1.0, {}), y = full({100000}, 2.0, {});
  dist::Work wx = dist::all_reduce(x, dist::ReduceOp::Sum, true);
  dist::Work wy = dist::all_reduce(y, dist::ReduceOp::Sum, true);
  wy.wait();
  wx.wait();
  check(wx.is_completed() && vals(x)[99999] == world && vals(y)[0] == 2.0 * world, "async all_reduce");
  dist::barrier();
  // broadcast_bytes: any length (not a multiple of 8; empty), the others' own bytes replaced
  for (const size_t n : {size_t{13}, size_t{0}, size_t{64}}) {
    std::vector<uint8_t> bytes(rank == world - 1 ? n : 5 + static_cast<size_t>(rank), 0xEE);
    if (rank == world - 1)
      for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<uint8_t>(3 * i + 1);
    dist::broadcast_bytes(bytes, world - 1);
    bool same = bytes.size() == n;
    for (size_t i = 0; same && i < n; ++i) same = bytes[i] == static_cast<uint8_t>(3 * i + 1);
    check(same, "broadcast_bytes of " + std::to_string(n) + " bytes from the last rank");
  }
  // misuse: the same on every rank, so no rank is left waiting
  expect_error([] { dist::all_reduce(zeros({4, 4}).t()); }, "not contiguous", "a transposed view");
  expect_error([] { dist::all_reduce(zeros({4}, {.dtype = DType::I64}), dist::ReduceOp::Avg); }, "Avg of an I64",
               "Avg of I64");
  expect_error([&] { dist::broadcast(zeros({4}), world); }, "is not a rank", "broadcast from a rank out of range");
  expect_error([&] {
    std::vector<uint8_t> b(3);
    dist::broadcast_bytes(b, -1);
  }, "is not a rank", "broadcast_bytes from a rank out of range");
  if (world > 1)
    expect_error([&] { dist::all_gather_into_tensor(zeros({3}), zeros({3})); }, "are gathered",
                 "all_gather into a tensor of the wrong size");
  expect_error([] { dist::init_process_group(); }, "already initialized", "a second init_process_group");
  // a DistributedSampler made without rank and replicas takes this group's
  const data::DistributedSampler sampler(10);
  check(sampler.options().rank == rank && sampler.options().num_replicas == world, "DistributedSampler's defaults");
}

void late_rank() {
  // rank 1 joins 1.6 s late; rank 0 waits 1 s: its wait must end in an error naming the collective and the rank,
  // and the group refuses further collectives; the late all_reduce then finishes inside destroy_process_group,
  // which waits up to twice the timeout for it
  const int rank = dist::get_rank();
  Tensor t = full({10}, 1.0, {});
  if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1600));
  if (rank == 0) {
    expect_error([&] { dist::all_reduce(t); }, "did not finish on rank 0 within 1000 ms: rank 1 does not answer", "a late rank");
    expect_error([] { dist::barrier(); }, "broken", "a collective after a timeout");
  } else {
    dist::all_reduce(t);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool timeout_test = argc > 1 && std::string(argv[1]) == "--timeout";
  try {
    dist::init_process_group({.timeout = timeout_test ? std::chrono::milliseconds(1000) : std::chrono::seconds(60)});
    if (timeout_test && dist::get_world_size() < 2) {
      std::printf("dist_collectives --timeout needs 2 ranks\n");
      return 2;
    }
    if (dist::get_rank() == 0)
      std::printf("dist_collectives: %d rank(s), %s\n", dist::get_world_size(), dist::backend_version().c_str());
    if (timeout_test) late_rank();
    else collectives();
    check(dist::device_backend().rfind("not decided yet", 0) == 0,  // only CPU tensors so far
          "device_backend() before any CUDA collective: " + dist::device_backend());
    const int rank = dist::get_rank();
    dist::destroy_process_group();
    std::printf("rank %d: %s\n", rank, failures == 0 ? "all checks passed" : "FAILED");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dist_collectives: %s\n", e.what());
    return 1;
  }
  return failures == 0 ? 0 : 1;
}
