#pragma once
// CUDA graph capture of a device's stream (only in builds with the CUDA backend; this header needs no
// CUDA headers). Everything halfgrad enqueues on a device goes to that device's one stream
// (cuda/context.h), so capturing that stream records whole training steps: kernels, cuBLAS/cuDNN calls
// and stream-ordered allocations. Capture runs in global mode, so any call that would make the host wait
// (a copy to the host, item(), a stream sync) fails the capture instead of silently syncing: the test
// that the AMP loop is sync-free (tests/gpu/test_gpu_amp.cpp).
//   cuda::synchronize(0);                                    // warm up first: caches, masters, scaler state
//   cuda::Graph g = cuda::Graph::capture(0, [&] { for (int k = 0; k < 50; ++k) train_step(k); });
//   g.launch();                                              // runs the 50 recorded steps (capturing ran nothing)
// Memory allocated before the capture must not be freed inside it, and tensors the body allocates are
// replayed at the same addresses: keep the body's inputs in tensors made before the capture.
// Random draws (dropout, stochastic rounding) follow their generator: a replay takes the next numbers of
// the generator's stream, exactly those the same eager step would have taken, so each replay draws a new
// dropout mask and a replayed run equals an eager one bit for bit (core/rng.h's PhiloxDraw). A generator
// the body draws from must outlive the graph.
#include <functional>
#include <memory>

namespace hg::cuda {

// Waits until everything enqueued on the device's stream has finished.
void synchronize(int device = 0);

class Graph {
 public:
  // Runs body while the device's stream is captured, then instantiates the recording. When body throws,
  // or a call in it could not be captured, the capture is ended and hg::Error says which call failed.
  static Graph capture(int device, const std::function<void()>& body);
  // Enqueues the recorded work on the device's stream (asynchronously, like any kernel); first, when the body
  // drew random numbers, the generators' next offsets (an upload, no wait), and advances the generators.
  void launch();

  Graph(Graph&& o) noexcept : exec_(o.exec_), device_(o.device_), rng_(std::move(o.rng_)) { o.exec_ = nullptr; }
  Graph& operator=(Graph&& o) noexcept;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph();

 private:
  struct Rng;  // the generators the body drew from and their device-side slots (cuda/api/graph.cpp)
  Graph(void* exec, int device, std::shared_ptr<Rng> rng) : exec_(exec), device_(device), rng_(std::move(rng)) {}
  void* exec_ = nullptr;  // cudaGraphExec_t
  int device_ = 0;
  std::shared_ptr<Rng> rng_;
};

}  // namespace hg::cuda
