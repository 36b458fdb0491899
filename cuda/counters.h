#pragma once
// What halfgrad has enqueued on its CUDA devices, and how often the host waited for one, counted since the
// process started (all devices together; no CUDA headers here, nothing is loaded to read them). A small
// model's step is bound by launches and waits rather than by arithmetic, so these are its cost model:
//   const cuda::Counters before = cuda::counters();
//   train_step();
//   const cuda::Counters step = cuda::counters() - before;   // step.launches(), step.syncs
// The counts are the same on every GPU and on the emulated device (HG_CUDA=EMULATE): they count halfgrad's
// calls, not what a library does inside one. A call recorded by a graph capture counts once when recorded;
// a replay counts as one graph launch.
#include <cstdint>

namespace hg::cuda {

struct Counters {
  int64_t kernels = 0;         // halfgrad's own kernels (cuda/launch.h) and memsets
  int64_t library_calls = 0;   // cuBLAS, cuBLASLt and cuDNN calls that enqueue work (one GEMM, one convolution)
  int64_t copies = 0;          // memory copies enqueued: host to device, device to host, device to device
  int64_t graph_launches = 0;  // cuda::Graph::launch
  int64_t syncs = 0;           // the host waited for a device: a download (item(), to(cpu)), an upload from
                               // pageable memory, cuda::synchronize, a full upload ring
  // Everything enqueued: each is one launch the CPU pays for.
  int64_t launches() const { return kernels + library_calls + copies + graph_launches; }
  Counters operator-(const Counters& o) const {
    return {kernels - o.kernels, library_calls - o.library_calls, copies - o.copies, graph_launches - o.graph_launches,
            syncs - o.syncs};
  }
};

// A snapshot of the counts so far.
Counters counters();

namespace detail {
// Called by the CUDA backend where it enqueues or waits (cuda/launch.h, cuda/allocator.cpp, cuda/blas*.cpp,
// cuda/dnn_device.cpp, cuda/graph.cpp).
void count_kernel();
void count_library_call();
void count_copy();
void count_graph_launch();
void count_sync();
}  // namespace detail

}  // namespace hg::cuda
