// cuda/graph.h in libhalfgrad: forwards to the backend (cuda/graph.cpp), loading it on first use; and
// cuda/available.h's TF32 switch, which lives here so that setting it loads nothing.
#include "cuda/graph.h"

#include <atomic>
#include <utility>

#include "core/error.h"
#include "cuda/api/backend.h"
#include "cuda/available.h"

namespace hg::cuda {

void synchronize(int device) { backend_api().synchronize(device); }

namespace {
std::atomic<bool> g_allow_tf32{false};
}  // namespace
void set_allow_tf32(bool allow) { g_allow_tf32.store(allow, std::memory_order_relaxed); }
bool allow_tf32() { return g_allow_tf32.load(std::memory_order_relaxed); }

Graph Graph::capture(int device, const std::function<void()>& body) {
  return Graph(backend_api().graph_capture(device, body), device);
}

void Graph::launch() {
  HG_CHECK(exec_ != nullptr, "cuda::Graph::launch: this graph was moved from; launch the one it was moved to");
  backend_api().graph_launch(exec_, device_);
}

Graph& Graph::operator=(Graph&& o) noexcept {
  if (this != &o) {
    std::swap(exec_, o.exec_);
    std::swap(device_, o.device_);
  }
  return *this;
}

// A graph exists only when the backend loaded, so backend_api() cannot throw here.
Graph::~Graph() {
  if (exec_) backend_api().graph_destroy(exec_);
}

}  // namespace hg::cuda
