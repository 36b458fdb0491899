// Learning-rate schedulers: each lr sequence against its closed form written here, torch's known
// values, composition, state dicts and errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "optim/adam.h"
#include "optim/lr_scheduler.h"
#include "optim/sgd.h"

using namespace hg;
using namespace hg::optim;

namespace {

const double kPi = std::numbers::pi;

Tensor make_param() {
  Tensor p = zeros({2});
  p.requires_grad_();
  return p;
}

// lrs[t] = group 0's lr after t scheduler steps (t = 0: right after construction), checking that
// get_last_lr() and the optimizer agree.
std::vector<double> run(LRScheduler& s, Optimizer& opt, int steps) {
  std::vector<double> lrs;
  for (int t = 0; t <= steps; ++t) {
    if (t > 0) s.step();
    REQUIRE(s.last_epoch() == t);
    REQUIRE(s.get_last_lr().size() == opt.num_param_groups());
    for (size_t g = 0; g < opt.num_param_groups(); ++g) REQUIRE(s.get_last_lr()[g] == opt.lr(g));
    lrs.push_back(opt.lr(0));
  }
  return lrs;
}

}  // namespace

TEST_CASE("StepLR: base * gamma^(t / step_size), torch's example values", "[sched]") {
  Tensor p = make_param();
  SGD opt({p}, {.lr = 0.05});
  StepLR sched(opt, {.step_size = 30, .gamma = 0.1});
  const std::vector<double> lrs = run(sched, opt, 100);
  for (int t = 0; t <= 100; ++t) CHECK(lrs[static_cast<size_t>(t)] == 0.05 * std::pow(0.1, t / 30));
  // torch docs: lr = 0.05 if epoch < 30, 0.005 if 30 <= epoch < 60, 0.0005 if 60 <= epoch < 90
  CHECK(lrs[0] == 0.05);
  CHECK(lrs[29] == 0.05);
  CHECK(lrs[30] == Approx(0.005));
  CHECK(lrs[59] == Approx(0.005));
  CHECK(lrs[60] == Approx(0.0005));
  CHECK(lrs[90] == Approx(0.00005));
  CHECK(StepLROptions{}.gamma == 0.1);
}

TEST_CASE("CosineAnnealingLR follows the closed form, base at 0 and eta_min at T_max", "[sched]") {
  Tensor p = make_param();
  Adam opt({p}, {.lr = 0.1});
  CosineAnnealingLR sched(opt, {.T_max = 10, .eta_min = 0.001});
  const std::vector<double> lrs = run(sched, opt, 20);
  for (int t = 0; t <= 20; ++t)
    CHECK(lrs[static_cast<size_t>(t)] == Approx(0.001 + (0.1 - 0.001) * (1 + std::cos(kPi * t / 10)) / 2).epsilon(1e-14));
  CHECK(lrs[0] == 0.1);
  CHECK(lrs[5] == Approx((0.1 + 0.001) / 2));
  CHECK(lrs[10] == Approx(0.001));
  CHECK(lrs[20] == Approx(0.1));  // the closed form keeps cycling, as torch's
  for (int t = 1; t <= 10; ++t) CHECK(lrs[static_cast<size_t>(t)] < lrs[static_cast<size_t>(t - 1)]);
}

TEST_CASE("Schedulers set every group's lr from its own base lr", "[sched]") {
  Tensor a = make_param(), b = make_param();
  SGD opt({{.params = {a}, .options = {.lr = 1.0}}, {.params = {b}, .options = {.lr = 0.2}}});
  StepLR sched(opt, {.step_size = 2, .gamma = 0.5});
  CHECK(sched.base_lrs() == std::vector<double>{1.0, 0.2});
  for (int t = 1; t <= 5; ++t) sched.step();
  CHECK(opt.lr(0) == 0.25);
  CHECK(opt.lr(1) == 0.2 * 0.25);
  CHECK(sched.get_last_lr() == std::vector<double>{0.25, 0.2 * 0.25});
}

TEST_CASE("LinearWarmup alone ramps linearly from start_factor to the base lr", "[sched]") {
  Tensor p = make_param();
  SGD opt({p}, {.lr = 0.3});
  LinearWarmup sched(opt, {.warmup_steps = 4, .start_factor = 0.25});
  const std::vector<double> lrs = run(sched, opt, 8);
  for (int t = 0; t <= 8; ++t) {
    const double f = t < 4 ? 0.25 + 0.75 * t / 4.0 : 1.0;
    CHECK(lrs[static_cast<size_t>(t)] == Approx(0.3 * f).epsilon(1e-15));
  }
  CHECK(lrs[0] == Approx(0.075));
  CHECK(lrs[4] == 0.3);
  CHECK(LinearWarmupOptions{}.start_factor == Approx(1.0 / 3));  // torch LinearLR's default
}

TEST_CASE("LinearWarmup then cosine: the wrapped schedule starts when the warmup ends", "[sched]") {
  Tensor p = make_param();
  SGD opt({p}, {.lr = 0.1});
  auto cosine = std::make_unique<CosineAnnealingLR>(opt, CosineAnnealingLROptions{.T_max = 6, .eta_min = 0.0});
  LinearWarmup sched(opt, {.warmup_steps = 3, .start_factor = 0.1}, std::move(cosine));
  const std::vector<double> lrs = run(sched, opt, 9);
  for (int t = 0; t < 3; ++t) CHECK(lrs[static_cast<size_t>(t)] == Approx(0.1 * (0.1 + 0.9 * t / 3.0)));
  for (int t = 3; t <= 9; ++t)
    CHECK(lrs[static_cast<size_t>(t)] == Approx(0.1 * (1 + std::cos(kPi * (t - 3) / 6.0)) / 2).margin(1e-17));
  CHECK(lrs[3] == 0.1);
  CHECK(lrs[9] == Approx(0.0).margin(1e-17));
  Tensor q = make_param();
  SGD other({q}, {.lr = 0.1});
  auto foreign = std::make_unique<StepLR>(other, StepLROptions{.step_size = 1});
  REQUIRE_THROWS_WITH(LinearWarmup(opt, {.warmup_steps = 2}, std::move(foreign)), Catch::Contains("another optimizer"));
}

TEST_CASE("OneCycleLR cycles momentum against the lr (torch's cycle_momentum): SGD's momentum, Adam's beta1",
          "[sched]") {
  Tensor p = make_param(), q = make_param();
  SGD sgd({p}, {.lr = 0.1});  // no momentum: torch's OneCycleLR gives it one
  optim::Adam adam({q}, {.lr = 0.1, .betas = {0.5, 0.999}});
  OneCycleLR s1(sgd, {.max_lr = 0.1, .total_steps = 100});
  OneCycleLR s2(adam, {.max_lr = 0.1, .total_steps = 100, .anneal_strategy = Anneal::Linear});
  // torch: momentum max_momentum (0.95) at step 0, base_momentum (0.85) at the lr's peak (step 29), back
  // to 0.95 at step 99; the same annealing as the lr, the other way round
  CHECK(sgd.momentum(0) == Approx(0.95).epsilon(1e-15));
  CHECK(adam.momentum(0) == Approx(0.95).epsilon(1e-15));
  CHECK(adam.param_groups()[0].options.betas[1] == 0.999);  // beta2 untouched
  for (int t = 1; t <= 99; ++t) {
    s1.step();
    s2.step();
    const double want_cos = t <= 29 ? 0.85 + (0.95 - 0.85) / 2 * (std::cos(kPi * t / 29.0) + 1)
                                    : 0.95 + (0.85 - 0.95) / 2 * (std::cos(kPi * (t - 29) / 70.0) + 1);
    const double want_lin = t <= 29 ? (0.85 - 0.95) * (t / 29.0) + 0.95 : (0.95 - 0.85) * ((t - 29) / 70.0) + 0.85;
    CHECK(sgd.momentum(0) == Approx(want_cos).epsilon(1e-13));
    CHECK(adam.momentum(0) == Approx(want_lin).epsilon(1e-13));
  }
  CHECK(sgd.momentum(0) == Approx(0.95).epsilon(1e-13));
  // off: momentum stays as the optimizer has it
  SGD plain({make_param()}, {.lr = 0.1, .momentum = 0.3});
  OneCycleLR s3(plain, {.max_lr = 0.1, .total_steps = 100, .cycle_momentum = false});
  s3.step();
  CHECK(plain.momentum(0) == 0.3);
  REQUIRE_THROWS_WITH(OneCycleLR(plain, {.max_lr = 0.1, .total_steps = 100, .base_momentum = 0.99}),
                      Catch::Contains("base_momentum=0.99"));
  REQUIRE_THROWS_WITH(plain.set_momentum(0, -0.5), Catch::Contains("momentum=-0.5"));
}

TEST_CASE("OneCycleLR: torch's first, peak and last lr, and both anneal strategies", "[sched]") {
  for (Anneal anneal : {Anneal::Cos, Anneal::Linear}) {
    INFO((anneal == Anneal::Cos ? "cos" : "linear"));
    Tensor p = make_param();
    SGD opt({p}, {.lr = 123.0});  // OneCycle ignores the base lr
    OneCycleLR sched(opt, {.max_lr = 0.1, .total_steps = 100, .anneal_strategy = anneal});
    const std::vector<double> lrs = run(sched, opt, 99);
    // torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=100): 0.004 at step 0, 0.1 at
    // step 29 (= 0.3 * 100 - 1), 0.1 / 25 / 1e4 = 4e-7 at step 99
    CHECK(lrs[0] == Approx(0.004).epsilon(1e-14));
    CHECK(lrs[29] == Approx(0.1).epsilon(1e-14));
    CHECK(lrs[99] == Approx(4e-7).epsilon(1e-10));
    auto ann = [&](double a, double b, double x) {
      return anneal == Anneal::Cos ? b + (a - b) / 2.0 * (std::cos(kPi * x) + 1) : (b - a) * x + a;
    };
    for (int t = 0; t <= 99; ++t) {
      const double want = t <= 29 ? ann(0.004, 0.1, t / 29.0) : ann(0.1, 4e-7, (t - 29) / 70.0);
      CHECK(lrs[static_cast<size_t>(t)] == Approx(want).epsilon(1e-13));
    }
    for (int t = 1; t <= 29; ++t) CHECK(lrs[static_cast<size_t>(t)] > lrs[static_cast<size_t>(t - 1)]);
    for (int t = 30; t <= 99; ++t) CHECK(lrs[static_cast<size_t>(t)] < lrs[static_cast<size_t>(t - 1)]);
    sched.step();  // step 100 is allowed (torch), at min_lr
    CHECK(opt.lr(0) == Approx(4e-7).epsilon(1e-10));
    REQUIRE_THROWS_WITH(sched.step(), Catch::Contains("tried to step 101 times; total_steps is 100"));
    CHECK(sched.last_epoch() == 100);  // the failed step changed nothing
  }
}

TEST_CASE("Scheduler state_dict round trip continues the same lrs", "[sched]") {
  Tensor p = make_param(), q = make_param();
  SGD opt({p}, {.lr = 0.1});
  auto cos = std::make_unique<CosineAnnealingLR>(opt, CosineAnnealingLROptions{.T_max = 20});
  LinearWarmup sched(opt, {.warmup_steps = 5}, std::move(cos));
  for (int t = 0; t < 8; ++t) sched.step();
  const StateDict sd = sched.state_dict();
  const double lr8 = opt.lr(0);
  CHECK(sd.at("last_epoch").item<double>() == 8.0);
  CHECK(sd.count("base_lrs.0") == 1);
  CHECK(sd.count("after.last_epoch") == 1);
  std::vector<double> want;
  for (int t = 0; t < 5; ++t) {
    sched.step();
    want.push_back(opt.lr(0));
  }

  SGD opt2({q}, {.lr = 0.1});
  auto cos2 = std::make_unique<CosineAnnealingLR>(opt2, CosineAnnealingLROptions{.T_max = 20});
  LinearWarmup sched2(opt2, {.warmup_steps = 5}, std::move(cos2));
  opt2.set_lr(0, 7.0);  // as after an optimizer load: the scheduler load sets the restored lr
  sched2.load_state_dict(sd);
  CHECK(sched2.last_epoch() == 8);
  CHECK(opt2.lr(0) == lr8);
  for (int t = 0; t < 5; ++t) {
    sched2.step();
    CHECK(opt2.lr(0) == want[static_cast<size_t>(t)]);  // bit for bit
  }
}

TEST_CASE("Scheduler load errors name the entry and change nothing", "[sched]") {
  Tensor p = make_param();
  SGD opt({p}, {.lr = 0.1});
  StepLR sched(opt, {.step_size = 2});
  sched.step();
  StateDict sd = sched.state_dict();
  sd.erase("base_lrs.0");
  REQUIRE_THROWS_WITH(sched.load_state_dict(sd), Catch::Contains("missing entry 'base_lrs.0'"));
  sd = sched.state_dict();
  sd["base_lrs.1"] = full(Shape{}, 0.5, {.dtype = DType::F64});
  REQUIRE_THROWS_WITH(sched.load_state_dict(sd), Catch::Contains("unexpected entry 'base_lrs.1'"));
  sd = sched.state_dict();
  sd["last_epoch"] = full(Shape{}, -2.0, {.dtype = DType::F64});
  REQUIRE_THROWS_WITH(sched.load_state_dict(sd), Catch::Contains("last_epoch=-2"));
  sd = sched.state_dict();
  sd["last_epoch"] = zeros({1});
  REQUIRE_THROWS_WITH(sched.load_state_dict(sd), Catch::Contains("'last_epoch' has shape [1]"));
  CHECK(sched.last_epoch() == 1);
  CHECK(sched.base_lrs() == std::vector<double>{0.1});
}

TEST_CASE("Scheduler option errors", "[sched]") {
  Tensor p = make_param();
  SGD opt({p}, {.lr = 0.1});
  REQUIRE_THROWS_WITH(StepLR(opt, {}), Catch::Contains("StepLR: step_size=0"));
  REQUIRE_THROWS_WITH(CosineAnnealingLR(opt, {}), Catch::Contains("T_max=0"));
  REQUIRE_THROWS_WITH(LinearWarmup(opt, {.warmup_steps = 3, .start_factor = 0}), Catch::Contains("start_factor=0"));
  REQUIRE_THROWS_WITH(OneCycleLR(opt, {.total_steps = 10}), Catch::Contains("max_lr is required"));
  REQUIRE_THROWS_WITH(OneCycleLR(opt, {.max_lr = 1, .total_steps = 10, .pct_start = 0.1}),
                      Catch::Contains("leaves a phase without steps"));
  CHECK(opt.lr(0) == 0.1);  // a failed construction sets nothing
}
