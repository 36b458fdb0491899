// cuda/graph.h over the CUDA runtime's stream capture.
#include "cuda/graph.h"

#include <string>
#include <utility>

#include "core/error.h"
#include "cuda/check.h"
#include "cuda/context.h"

namespace hg::cuda {

void synchronize(int device) { HG_CUDA_CHECK(cudaStreamSynchronize(context(device).stream)); }

Graph Graph::capture(int device, const std::function<void()>& body) {
  DeviceContext& ctx = context(device);
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
           "; a call that waits for the device (item(), to(cpu), a sync) cannot be captured: move it out of "
           "the body");
  HG_CHECK(end == cudaSuccess, "cuda::Graph::capture: ending the capture failed with ", cudaGetErrorName(end), ": ",
           cudaGetErrorString(end), "; the body made a call that cannot be captured (a sync or a legacy-stream call)");
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  HG_CUDA_WARN(cudaGraphDestroy(graph));
  HG_CUDA_CHECK(inst);
  return Graph(exec, device);
}

void Graph::launch() {
  HG_CHECK(exec_ != nullptr, "cuda::Graph::launch: this graph was moved from; launch the one it was moved to");
  HG_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), context(device_).stream));
}

Graph& Graph::operator=(Graph&& o) noexcept {
  if (this != &o) {
    std::swap(exec_, o.exec_);
    std::swap(device_, o.device_);
  }
  return *this;
}

Graph::~Graph() {
  if (exec_) HG_CUDA_WARN(cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_)));
}

}  // namespace hg::cuda
