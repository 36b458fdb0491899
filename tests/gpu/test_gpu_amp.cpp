// The grad scaler's device path on a GPU (amp/grad_scaler.h, StepSkip::Kernel): (a) it skips, backs off
// and grows exactly as the host path on the CPU does, over steps with injected inf/NaN gradients, for F32
// and F16 parameters (with F32 masters), SGD and Adam; (b) a training loop (autocast F16 forward,
// scaler.scale(loss).backward(), scaler.step(opt), scaler.update()) captured into a CUDA graph in
// global capture mode, where any synchronising call invalidates the capture, gives the eager loop's
// parameters: the path is sync-free.
#include <catch2/catch.hpp>

#include <cmath>
#include <exception>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/graph.h"
#include "halfgrad.h"
#include "test_util.h"


using namespace hg;
using namespace hg::amp;
using Vec = std::vector<double>;

namespace {

const Device kGpu = Device::cuda();
const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

Tensor param_on(const Vec& v, DType dt, Device d) {
  Tensor p = from_vector(v, {static_cast<int64_t>(v.size())}, {.dtype = dt}).to(d);
  p.requires_grad_();
  return p;
}

void set_grad_on(const Tensor& p, const Vec& g) {
  Tensor q = p;
  q.set_grad(from_vector(g, p.shape(), {.dtype = p.dtype()}).to(p.device()));
}

void check_close(const Tensor& cpu, const Tensor& gpu, double rtol, const std::string& what) {
  INFO(what);
  const Vec a = cpu.to_vector<double>(), b = gpu.to(Device::cpu()).to_vector<double>();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("element " << i << ": cpu " << a[i] << " gpu " << b[i]);
    CHECK(std::fabs(a[i] - b[i]) <= rtol * std::fabs(a[i]) + 1e-7);
  }
}

struct Run {
  std::vector<std::string> rows;  // per iteration: the StepResult and the scaler's state, exactly
  Tensor a, b;
  std::unique_ptr<optim::Optimizer> opt;
  bool on_device = false;
};

// 14 iterations over an F32 parameter and one of dtype dt on device d; inf/NaN gradients on some,
// clipping after unscale_ on others.
Run run_on(Device d, bool adam, DType dt) {
  GradScaler s({.init_scale = 1024.0, .growth_interval = 2, .hysteresis = 2});
  Run r;
  r.a = param_on({0.5, -1.0, 2.0, 0.125}, dt, d);
  r.b = param_on({0.25, 4.0}, DType::F32, d);
  if (adam) r.opt = std::make_unique<optim::Adam>(std::vector<Tensor>{r.a, r.b}, optim::AdamOptions{.lr = 0.01});
  else r.opt = std::make_unique<optim::SGD>(std::vector<Tensor>{r.a, r.b}, optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  for (int k = 0; k < 14; ++k) {
    r.opt->zero_grad();
    const double sc = s.get_scale(), f = 1.0 + 0.1 * k;
    Vec ga = {0.3 * f * sc, -0.2 * f * sc, 0.7 * sc, 0.01 * sc}, gb = {-0.5 * sc, 0.1 * f * sc};
    if (k == 0 || k == 3 || k == 4 || k == 9) ga[1] = k == 4 ? kNaN : kInf;
    if (k == 11) gb[0] = kNaN;
    set_grad_on(r.a, ga);
    set_grad_on(r.b, gb);
    if (k % 3 == 1) {
      s.unscale_(*r.opt);
      optim::clip_grad_norm_(*r.opt, 0.5);
    }
    const StepResult res = s.step(*r.opt);
    s.update();
    std::ostringstream row;
    row << k << ": stepped " << res.stepped() << " found_inf " << res.found_inf() << " scale " << res.scale()
        << " -> " << s.get_scale() << " growth " << s.growth_tracker() << " hysteresis " << s.hysteresis_left();
    r.rows.push_back(row.str());
  }
  r.on_device = s.on_device();
  return r;
}

}  // namespace

TEST_CASE("GPU GradScaler: the device path skips, backs off and grows as the host path on the CPU", "[gpu][amp]") {
  for (bool adam : {false, true})
    for (DType dt : {DType::F32, DType::F16}) {
      INFO((adam ? "Adam " : "SGD ") << dt);
      const Run cpu = run_on(Device::cpu(), adam, dt);
      const Run gpu = run_on(kGpu, adam, dt);
      CHECK_FALSE(cpu.on_device);
      CHECK(gpu.on_device);  // a CUDA gradient chose the device path (Auto)
      REQUIRE(cpu.rows.size() == gpu.rows.size());
      for (size_t k = 0; k < cpu.rows.size(); ++k) CHECK(gpu.rows[k] == cpu.rows[k]);
      // FMA contraction on the GPU: the last bits may differ; an F16 parameter by one rounding
      const double rtol = dt == DType::F16 ? 2e-3 : 1e-5;
      check_close(cpu.a, gpu.a, rtol, "parameter a");
      check_close(cpu.b, gpu.b, 1e-5, "parameter b");
      if (dt == DType::F16) check_close(cpu.opt->master(0), gpu.opt->master(0), 1e-5, "master of a");
      if (adam)
        CHECK(gpu.opt->state_dict().at("state.0.step").item<double>() ==
              cpu.opt->state_dict().at("state.0.step").item<double>());
    }
}

namespace {

// A small MLP with Adam and a scaler on the GPU, built from a seed; batches made once, on the device.
struct Loop {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::Adam> opt;
  GradScaler scaler{{.init_scale = 65536.0, .growth_interval = 4}};
  std::vector<Tensor> xs, ys;

  explicit Loop(uint64_t s) {
    manual_seed(s);
    model = std::make_shared<nn::Sequential>(nn::Linear(16, 64), nn::ReLU(), nn::Linear(64, 8));
    model->to(kGpu);
    opt = std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions{.lr = 1e-3});
    Generator g(99);
    for (int k = 0; k < 8; ++k) {
      xs.push_back(randn({32, 16}, {}, &g).to(kGpu));
      ys.push_back(randn({32, 8}, {}, &g).to(kGpu));
    }
  }
  void step(int k) {
    opt->zero_grad();
    Tensor loss;
    {
      Autocast ac(kGpu, DType::F16);
      loss = mse_loss((*model)(xs[static_cast<size_t>(k) % xs.size()]), ys[static_cast<size_t>(k) % ys.size()]);
    }
    scaler.scale(loss).backward();  // the default seed: ones() is filled on the device
    scaler.step(*opt);
    scaler.update();
  }
};

}  // namespace

TEST_CASE("GPU GradScaler: 50 training steps captured in a CUDA graph equal 50 eager steps", "[gpu][amp]") {
  constexpr int kWarm = 3, kSteps = 50;
  Loop eager(5), graphed(5);
  for (int k = 0; k < kWarm; ++k) {  // the allocator's pool, masters, moments, step counters, flags exist now
    eager.step(k);
    graphed.step(k);
  }
  REQUIRE(graphed.scaler.on_device());
  graphed.opt->zero_grad();  // a capture may not free memory allocated outside it: drop those gradients first
  cuda::synchronize(0);
  for (int k = kWarm; k < kWarm + kSteps; ++k) eager.step(k);

  // Global-mode capture: a hidden sync anywhere in the 50 steps fails it with an hg::Error naming the call.
  cuda::Graph graph = cuda::Graph::capture(0, [&] {
    for (int k = kWarm; k < kWarm + kSteps; ++k) graphed.step(k);
    graphed.opt->zero_grad();  // every allocation of the graph is freed inside it
  });
  graph.launch();  // capturing ran nothing: this runs the 50 steps
  cuda::synchronize(0);

  const std::vector<Tensor> pe = eager.model->parameters(), pg = graphed.model->parameters();
  REQUIRE(pe.size() == pg.size());
  for (size_t i = 0; i < pe.size(); ++i) {
    INFO("parameter " << i);
    const Vec a = pe[i].to(Device::cpu()).to_vector<double>(), b = pg[i].to(Device::cpu()).to_vector<double>();
    REQUIRE(a.size() == b.size());
    double worst = 0;
    for (size_t j = 0; j < a.size(); ++j) worst = std::max(worst, std::fabs(a[j] - b[j]));
    CHECK(worst <= 1e-6);  // the same kernels in the same order
  }
  CHECK(graphed.scaler.get_scale() == eager.scaler.get_scale());
  CHECK(graphed.scaler.growth_tracker() == eager.scaler.growth_tracker());
  const optim::StateDict se = eager.opt->state_dict(), sg = graphed.opt->state_dict();
  CHECK(sg.at("state.0.step").item<double>() == se.at("state.0.step").item<double>());
  CHECK(sg.at("state.0.step").item<double>() > kWarm);  // the graph's steps were counted on the device
}
