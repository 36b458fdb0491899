// cuda/graph.h in libhalfgrad: forwards to the backend (cuda/graph.cpp), loading it on first use; and
// cuda/available.h's TF32 switch, which lives here so that setting it loads nothing.
#include "cuda/graph.h"

#include <atomic>
#include <utility>

#include "core/error.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "cuda/api/backend.h"
#include "cuda/available.h"

namespace hg::cuda {

void synchronize(int device) { backend_api().synchronize(device); }

namespace {
std::atomic<bool> g_allow_tf32{false};
}  // namespace
void set_allow_tf32(bool allow) { g_allow_tf32.store(allow, std::memory_order_relaxed); }
bool allow_tf32() { return g_allow_tf32.load(std::memory_order_relaxed); }

struct Graph::Rng {
  Tensor state;                        // 2 * kMaxGenerators I64 words on the device: {seed, base offset} per slot
  std::vector<rng_capture::Use> uses;  // slot k's generator and what one replay draws from it
};

Graph Graph::capture(int device, const std::function<void()>& body) {
  // made before the capture starts: an allocation inside it would belong to the graph
  auto rng = std::make_shared<Rng>();
  rng->state = zeros({2 * rng_capture::kMaxGenerators}, {.dtype = DType::I64, .device = Device::cuda(device)});
  rng_capture::begin(device, static_cast<uint64_t*>(rng->state.data_ptr()));
  void* exec = nullptr;
  try {
    exec = backend_api().graph_capture(device, body);
  } catch (...) {
    rng_capture::end();
    throw;
  }
  rng->uses = rng_capture::end();
  return Graph(exec, device, std::move(rng));
}

void Graph::launch() {
  HG_CHECK(exec_ != nullptr, "cuda::Graph::launch: this graph was moved from; launch the one it was moved to");
  if (rng_ && !rng_->uses.empty()) {
    // this replay's draws: the next blocks of each generator's stream, as eager steps would take them
    uint64_t words[2 * rng_capture::kMaxGenerators] = {};
    for (size_t k = 0; k < rng_->uses.size(); ++k) {
      const auto [seed, offset] = reserve_blocks(*rng_->uses[k].generator, rng_->uses[k].blocks);
      words[2 * k] = seed;
      words[2 * k + 1] = offset;
    }
    // ordered before the graph on the device's stream (and after the previous replay, which read the old values)
    copy_bytes(rng_->state.data_ptr(), Device::cuda(device_), words, Device::cpu(), 2 * sizeof(uint64_t) * rng_->uses.size());
  }
  backend_api().graph_launch(exec_, device_);
}

Graph& Graph::operator=(Graph&& o) noexcept {
  if (this != &o) {
    std::swap(exec_, o.exec_);
    std::swap(device_, o.device_);
    std::swap(rng_, o.rng_);
  }
  return *this;
}

// A graph exists only when the backend loaded, so backend_api() cannot throw here.
Graph::~Graph() {
  if (exec_) backend_api().graph_destroy(exec_);
}

}  // namespace hg::cuda
