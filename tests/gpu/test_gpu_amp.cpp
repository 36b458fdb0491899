// The grad scaler's device path on a GPU (amp/grad_scaler.h, StepSkip::Kernel): (a) it skips, backs off
// and grows exactly as the host path on the CPU does, over steps with injected inf/NaN gradients, for F32
// and F16 parameters (with F32 masters), SGD and Adam; (b) a training loop (autocast F16 forward,
// scaler.scale(loss).backward(), scaler.step(opt), scaler.update()) captured into a CUDA graph in
// global capture mode, where any synchronising call invalidates the capture, gives the eager loop's
// parameters: the path is sync-free.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/graph.h"
#include "gpu/compare.h"
#include "halfgrad.h"
#include "test_util.h"


using namespace hg;
using namespace hg::amp;
using hg::gpu_test::check_close;
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
  if (adam) r.opt = std::make_unique<optim::Adam>(std::vector<Tensor>{r.a, r.b}, optim::AdamArgs{.lr = 0.01});
  else r.opt = std::make_unique<optim::SGD>(std::vector<Tensor>{r.a, r.b}, optim::SGDArgs{.lr = 0.1, .momentum = 0.9});
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
      check_close(cpu.a, gpu.a, {.rtol = rtol, .atol = 1e-7}, "parameter a");
      check_close(cpu.b, gpu.b, {.rtol = 1e-5, .atol = 1e-7}, "parameter b");
      if (dt == DType::F16)
        check_close(cpu.opt->master(0), gpu.opt->master(0), {.rtol = 1e-5, .atol = 1e-7}, "master of a");
      if (adam)
        CHECK(gpu.opt->state_dict().at("state.0.step").item<double>() ==
              cpu.opt->state_dict().at("state.0.step").item<double>());
    }
}

TEST_CASE("GPU GradScaler: StepResult::read_all reads a window of device results with one download", "[gpu][amp]") {
  // the same 10 steps twice: results read one by one, then kept and read together
  const auto run = [](bool together) {
    GradScaler s({.init_scale = 1024.0, .growth_interval = 2});
    const Tensor a = param_on({0.5, -1.0, 2.0}, DType::F32, kGpu);
    optim::SGD opt({a}, {.lr = 0.1});
    std::vector<StepResult> results;
    std::vector<std::pair<bool, double>> read;
    for (int k = 0; k < 10; ++k) {
      opt.zero_grad();
      set_grad_on(a, {k == 2 || k == 7 ? kInf : 3.0, k == 5 ? kNaN : -2.0, 1.0});
      results.push_back(s.step(opt));
      s.update();
      if (!together) read.emplace_back(results.back().found_inf(), results.back().scale());
    }
    if (together) {
      cuda::synchronize(0);
      const cuda::Counters c0 = cuda::counters();
      StepResult::read_all(results);
      CHECK((cuda::counters() - c0).syncs == 1);
      const cuda::Counters c1 = cuda::counters();
      for (const StepResult& r : results) read.emplace_back(r.found_inf(), r.scale());
      CHECK((cuda::counters() - c1).syncs == 0);  // already read
    }
    return read;
  };
  const auto one_by_one = run(false), together = run(true);
  CHECK(one_by_one == together);
  REQUIRE(together.size() == 10);
  CHECK(together[2].first);
  CHECK(together[5].first);
  CHECK(together[7].first);
  CHECK_FALSE(together[0].first);
  CHECK(together[2].second == 2048.0);  // grown after two clean steps
  CHECK(together[3].second == 1024.0);  // backed off after step 2's inf
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
    opt = std::make_unique<optim::Adam>(model->parameters(), optim::AdamArgs{.lr = 1e-3});
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

namespace {

// One whole AMP training step of a small MLP or CNN on the GPU, as a training loop writes it: the
// forward under autocast (O1) or with F16 weights and inputs (O2), the scaled backward, unscale_,
// clip_grad_norm_tensor_(opt), step, update, zero_grad. The batch is copied into fixed input buffers
// before each step, and a StepLR is stepped after it, outside the step: a graph replays the step
// reading the inputs, the scale, the step counters and the learning rate where they live.
struct Trainer {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::Adam> opt;
  std::unique_ptr<optim::StepLR> sched;
  std::unique_ptr<GradScaler> scaler;
  OptLevel level;
  Tensor x, y;                     // the step's input and targets: fixed buffers
  std::vector<Tensor> xs, ys;      // the batches, on the device
  std::vector<double> norms;       // the clip norms, read after each step

  Device dev;
  Trainer(bool cnn, OptLevel lv, uint64_t seed, Device d = kGpu) : level(lv), dev(d) {
    manual_seed(seed);
    if (cnn) {
      model = std::make_shared<nn::Sequential>(nn::Conv2d(1, 4, 3, {.padding = 1}), nn::ReLU(),
                                               nn::MaxPool2d({.kernel_size = 2}), nn::Flatten(), nn::Linear(64, 10));
    } else {
      model = std::make_shared<nn::Sequential>(nn::Linear(20, 48), nn::ReLU(), nn::Linear(48, 10));
    }
    model->to(dev);
    opt = std::make_unique<optim::Adam>(model->parameters(), optim::AdamArgs{.lr = 2e-3});
    const Properties props = initialize(*model, *opt, level);
    scaler = std::make_unique<GradScaler>(props.scaler_options());
    sched = std::make_unique<optim::StepLR>(*opt, optim::StepLROptions{.step_size = 2, .gamma = 0.5});
    Generator g(7);
    const Shape xshape = cnn ? Shape{8, 1, 8, 8} : Shape{8, 20};
    for (int k = 0; k < 4; ++k) {
      Tensor xb = randn(xshape, {}, &g);
      if (level == OptLevel::O2) xb = xb.to(DType::F16);  // Apex O2: inputs in the model's dtype
      xs.push_back(xb.to(dev));
      std::vector<int64_t> t(8);
      for (int i = 0; i < 8; ++i) t[static_cast<size_t>(i)] = (k * 3 + i * 7) % 10;
      ys.push_back(from_vector(t, {8}, {.dtype = DType::I64}).to(dev));
    }
    x = empty(xs[0].shape(), {.dtype = xs[0].dtype(), .device = dev});
    norm = zeros({}, {.dtype = DType::F64, .device = dev});
    y = empty({8}, {.dtype = DType::I64, .device = dev});
  }
  void load(int k) {
    const Tensor& xb = xs[static_cast<size_t>(k) % xs.size()];
    const Tensor& yb = ys[static_cast<size_t>(k) % ys.size()];
    copy_bytes(x.data_ptr(), dev, xb.data_ptr(), dev, xb.nbytes());  // stream-ordered, no wait
    copy_bytes(y.data_ptr(), dev, yb.data_ptr(), dev, yb.nbytes());
  }
  Tensor norm;  // the last clip norm, on the device
  void body() {
    Tensor loss;
    {
      std::optional<Autocast> ac;
      if (level == OptLevel::O1) ac.emplace(dev, DType::F16);
      loss = cross_entropy((*model)(x).to(DType::F32), y);
    }
    scaler->scale(loss).backward();
    scaler->unscale_(*opt);
    {  // copied into a buffer made before: what a captured step allocates, it frees
      const Tensor n = optim::clip_grad_norm_tensor_(*opt, 0.5);
      copy_bytes(norm.data_ptr(), dev, n.data_ptr(), dev, sizeof(double));
    }
    scaler->step(*opt);
    scaler->update();
    opt->zero_grad();  // inside the step: a captured step frees what it allocated
  }
};

void check_same(Trainer& eager, Trainer& graphed, const std::string& what) {
  INFO(what);
  const std::vector<Tensor> pe = eager.model->parameters(), pg = graphed.model->parameters();
  REQUIRE(pe.size() == pg.size());
  for (size_t i = 0; i < pe.size(); ++i) {
    INFO("parameter " << i);
    CHECK(pe[i].to(Device::cpu()).to_vector<double>() == pg[i].to(Device::cpu()).to_vector<double>());
  }
  for (size_t i = 0; i < pe.size(); ++i)
    if (eager.opt->master(i).defined())
      CHECK(eager.opt->master(i).to(Device::cpu()).to_vector<double>() ==
            graphed.opt->master(i).to(Device::cpu()).to_vector<double>());
  CHECK(graphed.scaler->get_scale() == eager.scaler->get_scale());
  CHECK(graphed.opt->lr(0) == eager.opt->lr(0));
  const optim::StateDict se = eager.opt->state_dict(), sg = graphed.opt->state_dict();
  CHECK(sg.at("state.0.step").item<double>() == se.at("state.0.step").item<double>());
  CHECK(eager.norms == graphed.norms);
}

}  // namespace

TEST_CASE("GPU: a captured AMP step with clipping and an LR scheduler replays bit for bit like eager steps",
          "[gpu][amp]") {
  for (bool cnn : {false, true})
    for (OptLevel level : {OptLevel::O1, OptLevel::O2}) {
      const std::string what = std::string(cnn ? "CNN" : "MLP") + (level == OptLevel::O1 ? " O1" : " O2");
      constexpr int kWarm = 3, kSteps = 8;
      Trainer eager(cnn, level, 11), graphed(cnn, level, 11);
      for (int k = 0; k < kWarm; ++k) {  // caches, masters, moments, step counters, the device lr exist now
        for (Trainer* t : {&eager, &graphed}) {
          t->load(k);
          t->body();
          t->sched->step();
        }
      }
      cuda::synchronize(0);
      // One step, captured; the scheduler and the inputs stay outside, as a training loop keeps them.
      cuda::Graph graph = cuda::Graph::capture(0, [&] { graphed.body(); });
      for (int k = kWarm; k < kWarm + kSteps; ++k) {
        eager.load(k);
        eager.body();
        eager.norms.push_back(eager.norm.item<double>());
        eager.sched->step();
        graphed.load(k);
        graph.launch();
        graphed.norms.push_back(graphed.norm.item<double>());  // the tensor the capture made, refilled by each replay
        graphed.sched->step();  // set_lr writes the device lr the replays read
      }
      check_same(eager, graphed, what);
      if (!cnn && level == OptLevel::O1) {
        // Against the same training on the CPU, which reads lr and the scale on the host: a replay that
        // kept the captured lr (or scale, or clip factor) would be ~1e-3 away after these steps.
        Trainer cpu(cnn, level, 11, Device::cpu());
        for (int k = 0; k < kWarm + kSteps; ++k) {
          cpu.load(k);
          cpu.body();
          cpu.sched->step();
        }
        const std::vector<Tensor> pc = cpu.model->parameters(), pg = graphed.model->parameters();
        for (size_t i = 0; i < pc.size(); ++i) {
          const Vec a = pc[i].to_vector<double>(), b = pg[i].to(Device::cpu()).to_vector<double>();
          double worst = 0;
          for (size_t j = 0; j < a.size(); ++j) worst = std::max(worst, std::fabs(a[j] - b[j]));
          INFO("parameter " << i << ": largest difference to the CPU run " << worst);
          CHECK(worst < 2e-5);
        }
      }
      CHECK(graphed.opt->lr(0) < 2e-3 / 4);  // the schedule moved the lr: the replays followed it
      // clipping was active: the norms exceed max_norm 0.5
      CHECK(*std::max_element(eager.norms.begin(), eager.norms.end()) > 0.5);
    }
}

TEST_CASE("GPU: the backward of max along a dim uploads nothing after a warm-up, so it can be captured", "[gpu]") {
  Tensor x = randn({6, 9}).to(kGpu);
  x.requires_grad_();
  auto backward_of_max = [&] {
    x.zero_grad();
    sum(max(x, 1).values).backward();
  };
  backward_of_max();  // makes the positions 0..8 on the device once
  const Vec eager = x.grad().to(Device::cpu()).to_vector<double>();
  cuda::synchronize(0);
  x.zero_grad();
  cuda::Graph g = cuda::Graph::capture(0, [&] { sum(max(x, 1).values).backward(); });
  g.launch();
  CHECK(x.grad().to(Device::cpu()).to_vector<double>() == eager);
}

TEST_CASE("GPU: a captured optimizer step follows every hyper-parameter changed between replays", "[gpu][optim]") {
  for (int kind = 0; kind < 3; ++kind) {
    INFO((kind == 0 ? "SGD" : kind == 1 ? "Adam" : "AdamW"));
    const Tensor w0 = randn({33, 7}), g = randn({33, 7});
    Tensor pe = w0.to(kGpu), pg = w0.to(kGpu);
    pe.requires_grad_();
    pg.requires_grad_();
    pe.set_grad(g.to(kGpu));
    pg.set_grad(g.to(kGpu));
    auto make = [&](Tensor p) -> std::unique_ptr<optim::Optimizer> {
      if (kind == 0)
        return std::make_unique<optim::SGD>(std::vector<Tensor>{p}, optim::SGDArgs{.lr = 0.1, .momentum = 0.9});
      if (kind == 1) return std::make_unique<optim::Adam>(std::vector<Tensor>{p}, optim::AdamArgs{.lr = 0.01});
      return std::make_unique<optim::AdamW>(std::vector<Tensor>{p}, optim::AdamWArgs{.lr = 0.01});
    };
    auto eager = make(pe), graphed = make(pg);
    eager->step();  // the state (buffers, device step counter and hyper-parameters) exists before capture
    graphed->step();
    cuda::synchronize(0);
    cuda::Graph step = cuda::Graph::capture(0, [&] { graphed->step(); });
    for (int k = 1; k <= 4; ++k) {
      // every option changes; set_lr (what a scheduler calls) carries them all to the device
      for (optim::Optimizer* o : {eager.get(), graphed.get()}) {
        if (kind == 0) {
          auto& opt = static_cast<optim::SGD&>(*o).param_groups()[0].options;
          opt.momentum = 0.9 - 0.2 * k;
          opt.dampening = 0.1 * k;
          opt.weight_decay = 0.01 * k;
        } else if (kind == 1) {
          auto& opt = static_cast<optim::Adam&>(*o).param_groups()[0].options;
          opt.betas = {0.9 - 0.1 * k, 0.999 - 0.01 * k};
          opt.eps = 1e-8 * k;
          opt.weight_decay = 0.05 * k;
        } else {
          auto& opt = static_cast<optim::AdamW&>(*o).param_groups()[0].options;
          opt.betas = {0.8, 0.99 - 0.01 * k};
          opt.weight_decay = 0.1 * k;
        }
        o->set_lr(0, 0.05 / k);
      }
      eager->step();
      step.launch();
      INFO("replay " << k);
      CHECK(pg.to(Device::cpu()).to_vector<double>() == pe.to(Device::cpu()).to_vector<double>());
    }
    // without the new values the replay would have drifted: the parameters moved with them
    CHECK(pe.to(Device::cpu()).to_vector<double>() != w0.to_vector<double>());
  }
}
