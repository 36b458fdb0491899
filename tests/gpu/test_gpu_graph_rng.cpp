// Random draws in a captured CUDA graph (core/rng.h's PhiloxDraw, cuda/graph.h): each replay takes the next
// numbers of the generator's stream, the ones the same eager calls would have taken, so dropout draws a new
// mask at every replay and a replayed training run equals the eager one bit for bit.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "cuda/graph.h"
#include "halfgrad.h"
#include "test_util.h"

using namespace hg;

namespace {

std::vector<float> host(const Tensor& t) { return t.to(Device::cpu()).to(DType::F32).to_vector<float>(); }

}  // namespace

TEST_CASE("GPU: each replay of a captured dropout and stochastic rounding draws what the eager call would", "[gpu]") {
  const Device dev = Device::cuda();
  manual_seed(3);
  const Tensor x = randn({1000}).to(dev);
  Tensor mask = zeros({1000}, {.device = dev}), rounded = zeros({1000}, {.dtype = DType::BF16, .device = dev});
  (void)dropout(x, {.p = 0.5});  // warm up: the kernels' first use
  cuda::synchronize(0);
  const GeneratorState start = default_generator().state();

  // eager: two dropouts and two stochastic roundings from `start`
  std::vector<std::vector<float>> want_mask, want_rounded;
  for (int k = 0; k < 2; ++k) {
    want_mask.push_back(host(dropout(x, {.p = 0.5})));
    want_rounded.push_back(host(stochastic_round(x, DType::BF16)));
  }
  const GeneratorState after_eager = default_generator().state();

  default_generator().set_state(start);
  cuda::Graph g = cuda::Graph::capture(0, [&] {
    const Tensor y = dropout(x, {.p = 0.5});
    copy_bytes(mask.data_ptr(), dev, y.data_ptr(), dev, y.nbytes());
    const Tensor r = stochastic_round(x, DType::BF16);
    copy_bytes(rounded.data_ptr(), dev, r.data_ptr(), dev, r.nbytes());
  });
  CHECK(default_generator().state().offset == start.offset);  // capturing draws nothing
  for (int k = 0; k < 2; ++k) {
    INFO("replay " << k);
    g.launch();
    CHECK(host(mask) == want_mask[static_cast<size_t>(k)]);
    CHECK(host(rounded) == want_rounded[static_cast<size_t>(k)]);
  }
  CHECK(want_mask[0] != want_mask[1]);  // a new mask at every replay
  CHECK(default_generator().state().offset == after_eager.offset);  // the replays advanced the stream as the eager calls did
}

TEST_CASE("GPU: a captured training step with dropout replays bit for bit like eager steps", "[gpu]") {
  const Device dev = Device::cuda();
  struct Run {
    std::shared_ptr<nn::Sequential> model;
    std::unique_ptr<optim::SGD> opt;
    explicit Run(Device d) {
      manual_seed(11);
      model = std::make_shared<nn::Sequential>(nn::Linear(32, 64), nn::ReLU(), nn::Dropout(0.3), nn::Linear(64, 10));
      model->to(d);
      opt = std::make_unique<optim::SGD>(model->parameters(), optim::SGDArgs{.lr = 0.1, .momentum = 0.9});
    }
    void step(const Tensor& x, const Tensor& y) {
      opt->zero_grad();
      cross_entropy((*model)(x), y).backward();
      opt->step();
    }
  };
  manual_seed(5);
  const Tensor x = randn({16, 32}).to(dev);
  const Tensor y = test::class_labels(16, 10, dev);
  Run eager(dev), graphed(dev);
  const GeneratorState warm = default_generator().state();
  for (Run* r : {&eager, &graphed}) {  // state and kernels made outside the capture, with the same mask
    default_generator().set_state(warm);
    r->step(x, y);
  }
  graphed.opt->zero_grad();
  cuda::synchronize(0);

  const GeneratorState start = default_generator().state();
  for (int k = 0; k < 4; ++k) eager.step(x, y);
  default_generator().set_state(start);
  cuda::Graph g = cuda::Graph::capture(0, [&] {
    graphed.step(x, y);
    graphed.opt->zero_grad();  // what the graph allocates it frees
  });
  for (int k = 0; k < 4; ++k) g.launch();
  const std::vector<Tensor> pe = eager.model->parameters(), pg = graphed.model->parameters();
  for (size_t i = 0; i < pe.size(); ++i) {
    INFO("parameter " << i);
    const Tensor a = pe[i].to(Device::cpu()), b = pg[i].to(Device::cpu());
    CHECK(std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0);  // the same masks, the same kernels
  }
}
