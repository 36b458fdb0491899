// What an all-reduce of one DDP bucket costs on this machine, whoever runs it: hg::dist's all_reduce against Open
// MPI's own blocking MPI_Allreduce and non-blocking MPI_Iallreduce, and a reduction through an MPI-3 shared-memory
// window (every rank's buffer in one node-wide window, each rank sums its slice of all of them in rank order, then
// copies every slice back), for the same F32 count. The floor under DDP's scaling on a machine where the ranks fill
// the cores: the all-reduce's copies and sums run on the cores that train. Built with the MPI backend only.
//   mpirun -np 2 ./build/bench_allreduce_floor [--count N] [--calls N] [--repeats N]
// Prints one line per method: microseconds per all-reduce, the median of --repeats samples of --calls calls (each
// sample the slowest rank's), and the spread of the samples ((max - min) / median).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "dist/dist.h"
#include "halfgrad.h"

namespace {

struct Timing {
  double median_us = 0, spread = 0;
};

Timing timed(const std::function<void()>& body, int calls, int repeats) {
  for (int k = 0; k < 20; ++k) body();  // warm-up: buffers, protocol set-up
  std::vector<double> us;
  for (int r = 0; r < repeats; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < calls; ++k) body();
    double t = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / calls;
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    us.push_back(t);
  }
  std::sort(us.begin(), us.end());
  const double median = us[us.size() / 2];
  return {median, median > 0 ? (us.back() - us.front()) / median : 0.0};
}

int parse(const char* flag, const char* value) {
  char* end = nullptr;
  const long v = value ? std::strtol(value, &end, 10) : 0;
  HG_CHECK(value && *end == '\0' && v > 0 && v < (1L << 30), "bench_allreduce_floor: ", flag,
           " needs a positive integer, got '", value ? value : "", "'");
  return static_cast<int>(v);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    hg::dist::init_process_group();  // MPI_Init through the MPI backend: the same libmpi as this program's calls
    int count = 235146, calls = 300, repeats = 7;  // count: the MLP workload's parameters, one 0.94 MB bucket
    for (int i = 1; i < argc; i += 2) {
      const std::string f = argv[i];
      const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
      if (f == "--count") count = parse("--count", v);
      else if (f == "--calls") calls = parse("--calls", v);
      else if (f == "--repeats") repeats = parse("--repeats", v);
      else HG_FAIL("bench_allreduce_floor: unknown flag '", f, "'; use --count N, --calls N, --repeats N");
    }
    const int rank = hg::dist::get_rank(), world = hg::dist::get_world_size();
    const hg::Tensor t = hg::ones({count});
    std::vector<float> in(static_cast<size_t>(count), 1.0f), out(static_cast<size_t>(count));
    std::vector<std::pair<std::string, Timing>> rows;
    rows.emplace_back("hg::dist::all_reduce", timed([&] { hg::dist::all_reduce(t); }, calls, repeats));
    rows.emplace_back("MPI_Allreduce", timed([&] {
      MPI_Allreduce(in.data(), out.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }, calls, repeats));
    rows.emplace_back("MPI_Iallreduce + MPI_Wait", timed([&] {
      MPI_Request req;
      MPI_Iallreduce(in.data(), out.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
      MPI_Wait(&req, MPI_STATUS_IGNORE);
    }, calls, repeats));
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    int node_size = 0;
    MPI_Comm_size(node, &node_size);
    if (node_size == world) {  // every rank on this node: one window holds every rank's buffer and its slice's sum
      float* mine = nullptr;
      MPI_Win win;
      MPI_Win_allocate_shared(static_cast<MPI_Aint>(2 * static_cast<size_t>(count) * sizeof(float)), sizeof(float),
                              MPI_INFO_NULL, node, &mine, &win);
      std::vector<float*> base(static_cast<size_t>(world));
      for (int r = 0; r < world; ++r) {
        MPI_Aint size;
        int unit;
        MPI_Win_shared_query(win, r, &size, &unit, &base[static_cast<size_t>(r)]);
      }
      MPI_Win_lock_all(MPI_MODE_NOCHECK, win);
      const auto sync = [&] {
        MPI_Win_sync(win);
        MPI_Barrier(node);
        MPI_Win_sync(win);
      };
      const int per = (count + world - 1) / world;
      rows.emplace_back("MPI-3 shared window", timed([&] {
        std::memcpy(mine, in.data(), static_cast<size_t>(count) * sizeof(float));
        sync();
        const int lo = std::min(count, rank * per), hi = std::min(count, lo + per);
        float* sum = base[static_cast<size_t>(rank)] + count;
        for (int i = lo; i < hi; ++i) {
          float s = base[0][i];
          for (int r = 1; r < world; ++r) s += base[static_cast<size_t>(r)][i];
          sum[i] = s;
        }
        sync();
        for (int r = 0; r < world; ++r) {
          const int l = std::min(count, r * per), h = std::min(count, l + per);
          std::memcpy(out.data() + l, base[static_cast<size_t>(r)] + count + l, static_cast<size_t>(h - l) * 4);
        }
        sync();  // nobody overwrites its buffer while another still reads it
      }, calls, repeats));
      MPI_Win_unlock_all(win);
      MPI_Win_free(&win);
    }
    MPI_Comm_free(&node);
    if (rank == 0) {
      std::printf("bench_allreduce_floor: %d rank(s), %s, %d F32 (%.2f MB), %d calls x %d samples; CPU: %s\n", world,
                  hg::dist::backend_version().c_str(), count, count * 4.0 / 1e6, calls, repeats,
                  hg::cpu_summary().c_str());
      for (const auto& [name, tm] : rows)
        std::printf("%-28s %9.1f us per all-reduce   spread %4.0f%%\n", name.c_str(), tm.median_us, 100 * tm.spread);
    }
    hg::dist::destroy_process_group();
  } catch (const hg::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
