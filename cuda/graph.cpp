// The backend's half of cuda/graph.h (the class itself is in libhalfgrad, cuda/api/graph.cpp): the CUDA
// runtime's stream capture, reached through BackendApi (cuda/register.cpp).
#include <functional>
#include <string>

#include "core/error.h"
#include "cuda/check.h"
#include "cuda/context.h"
#include "cuda/counters.h"

namespace hg::cuda {

void stream_synchronize(int device) {
  detail::count_sync();
  HG_CUDA_CHECK(cudaStreamSynchronize(context(device).stream));
}

void* graph_capture(int device, const std::function<void()>& body) {
  DeviceContext& ctx = context(device);
  // Made lazily elsewhere, but creating a handle allocates and synchronises, which would break the
  // capture: a body with an FP8 GEMM or a convolution finds its handle made. (Plans are cached at their
  // first eager use: warm up before capturing, as cuda/graph.h says.)
  (void)lt_handle(ctx);
#if !defined(HG_CUDA_EMULATE)  // (the emulated device runs convolutions without a cuDNN handle)
  (void)dnn_handle(ctx);
#endif
  HG_CUDA_CHECK(cudaStreamBeginCapture(ctx.stream, cudaStreamCaptureModeGlobal));
  std::string failure;
  try {
    body();
  } catch (const std::exception& e) {
    failure = e.what();
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(ctx.stream, &graph);
  if (graph && (!failure.empty() || end != cudaSuccess)) HG_CUDA_WARN(cudaGraphDestroy(graph));
  HG_CHECK(failure.empty(), "cuda::Graph::capture: the captured code failed: ", failure,
           "; a call that waits for the device or copies host memory (item(), to(cpu), to(cuda) of a CPU "
           "tensor, a sync) cannot be captured: move it out of the body");
  HG_CHECK(end == cudaSuccess, "cuda::Graph::capture: ending the capture failed with ", cudaGetErrorName(end), ": ",
           cudaGetErrorString(end), "; the body made a call that cannot be captured (a sync or a legacy-stream call)");
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  HG_CUDA_WARN(cudaGraphDestroy(graph));
  HG_CUDA_CHECK(inst);
  return exec;
}

void graph_launch(void* exec, int device) {
  detail::count_graph_launch();
  HG_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec), context(device).stream));
}

void graph_destroy(void* exec) { HG_CUDA_WARN(cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec))); }

}  // namespace hg::cuda
