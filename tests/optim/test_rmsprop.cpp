// RMSprop step by step against a reference written here in double from torch 1.13's formulas
// (torch/optim/rmsprop.py, _single_tensor_rmsprop), independently of ops/kernels/optim_rules.h; its
// state dict, option errors, and the grad scaler's skipped step.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "optim/amp_step.h"
#include "optim/rmsprop.h"
#include "optim_reference.h"
#include "test_util.h"

using namespace hg;
using namespace hg::optim;
using Vec = std::vector<double>;
using test::error_of;
using test::kInit;
using test::make_param;
using test::run_against;
using test::set_grad;
using test::values;

namespace {

struct RefRmsprop {
  double lr = 1e-2, alpha = 0.99, eps = 1e-8, weight_decay = 0, momentum = 0;
  bool centered = false;
  Vec square_avg = {}, buf = {}, grad_avg = {};
  void step(Vec& p, const Vec& grad) {
    if (square_avg.empty()) square_avg = buf = grad_avg = Vec(p.size(), 0.0);
    for (size_t i = 0; i < p.size(); ++i) {
      double g = grad[i];
      if (weight_decay != 0) g += weight_decay * p[i];
      square_avg[i] = alpha * square_avg[i] + (1 - alpha) * g * g;
      double avg = 0;
      if (centered) {
        grad_avg[i] = alpha * grad_avg[i] + (1 - alpha) * g;
        avg = std::sqrt(square_avg[i] - grad_avg[i] * grad_avg[i]);
      } else {
        avg = std::sqrt(square_avg[i]);
      }
      avg += eps;
      if (momentum > 0) {
        buf[i] = momentum * buf[i] + g / avg;
        p[i] -= lr * buf[i];
      } else {
        p[i] -= lr * g / avg;
      }
    }
  }
};

}  // namespace

TEST_CASE("RMSprop: plain, weight decay, momentum and centered match torch's formulas", "[optim]") {
  struct Case {
    const char* name;
    RMSpropArgs o;
  };
  const Case cases[] = {
      {"plain", {}},
      {"alpha eps", {.lr = 0.05, .alpha = 0.9, .eps = 1e-3}},
      {"weight decay", {.lr = 0.02, .weight_decay = 0.1}},
      {"momentum", {.lr = 0.01, .alpha = 0.95, .momentum = 0.9}},
      {"centered", {.lr = 0.01, .alpha = 0.9, .centered = true}},
      {"everything", {.lr = 0.03, .alpha = 0.8, .eps = 1e-6, .weight_decay = 0.05, .momentum = 0.5, .centered = true}},
  };
  for (DType dt : {DType::F64, DType::F32}) {
    for (const Case& c : cases) {
      INFO(c.name);
      Tensor p = make_param(kInit, dt, {2, 3});
      RMSprop opt({p}, c.o);
      RefRmsprop ref{.lr = c.o.lr, .alpha = c.o.alpha, .eps = c.o.eps, .weight_decay = c.o.weight_decay,
                     .momentum = c.o.momentum, .centered = c.o.centered};
      run_against(opt, p, ref, 3, 2.0);
      run_against(opt, p, ref, 3, 0.1);  // smaller gradients: square_avg decays, the steps stay about lr
    }
  }
}

TEST_CASE("RMSprop: the first step moves every parameter by lr / sqrt(1 - alpha), whatever the gradient's size",
          "[optim]") {
  // square_avg = (1 - alpha) g^2, so g / sqrt(square_avg) = sign(g) / sqrt(1 - alpha)
  Tensor p = make_param({1.0, 1.0, 1.0, 1.0}, DType::F64);
  RMSprop opt({p}, {.lr = 0.01, .alpha = 0.75, .eps = 0});
  set_grad(p, {1e-4, -3.0, 250.0, -0.5});
  opt.step();
  test::check_close(values(p), {0.98, 1.02, 0.98, 1.02}, 1e-12, 0);
  CHECK(RMSpropArgs{}.lr == 1e-2);  // torch's defaults
  CHECK(RMSpropArgs{}.alpha == 0.99);
  CHECK(RMSpropArgs{}.eps == 1e-8);
  CHECK(RMSpropArgs{}.momentum == 0);
  CHECK_FALSE(RMSpropArgs{}.centered);
}

TEST_CASE("RMSprop: state_dict has torch's entries and resumes bit for bit", "[optim]") {
  for (const RMSpropArgs o : {RMSpropArgs{.lr = 0.01}, RMSpropArgs{.lr = 0.01, .momentum = 0.9},
                                 RMSpropArgs{.lr = 0.01, .centered = true},
                                 RMSpropArgs{.lr = 0.01, .momentum = 0.9, .centered = true}}) {
    INFO("momentum " << o.momentum << " centered " << o.centered);
    Tensor p = make_param(kInit, DType::F32, {3, 2});
    RMSprop a({p}, o);
    for (int s = 0; s < 2; ++s) {
      set_grad(p, test::grad_at(s, 6));
      a.step();
    }
    const StateDict sd = a.state_dict();
    std::vector<std::string> keys = {"group.0.lr",       "group.0.alpha",    "group.0.eps",      "group.0.weight_decay",
                                     "group.0.momentum", "group.0.centered", "group.0.params",   "state.0.step",
                                     "state.0.square_avg"};
    if (o.momentum > 0) keys.push_back("state.0.momentum_buffer");
    if (o.centered) keys.push_back("state.0.grad_avg");
    for (const std::string& k : keys) {
      INFO(k);
      CHECK(sd.count(k) == 1);
    }
    CHECK(sd.size() == keys.size());
    CHECK(sd.at("state.0.step").item<double>() == 2.0);
    // b resumes from a's dict and a's parameter values: the next steps agree bit for bit
    Tensor q = make_param(values(p), DType::F32, {3, 2});
    RMSprop b({q}, o);
    b.load_state_dict(sd);
    for (int s = 2; s < 5; ++s) {
      set_grad(p, test::grad_at(s, 6));
      set_grad(q, test::grad_at(s, 6));
      a.step();
      b.step();
      CHECK(values(p) == values(q));
    }
  }
}

TEST_CASE("RMSprop: bad options and a changed buffer layout are errors naming the option", "[optim]") {
  Tensor p = make_param({1.0});
  CHECK(error_of([&] { RMSprop({p}, {.lr = -1}); }).find("RMSprop: lr=-1") != std::string::npos);
  CHECK(error_of([&] { RMSprop({p}, {.alpha = -0.5}); }).find("RMSprop: alpha=-0.5") != std::string::npos);
  CHECK(error_of([&] { RMSprop({p}, {.eps = -1e-8}); }).find("RMSprop: eps=") != std::string::npos);
  CHECK(error_of([&] { RMSprop({p}, {.weight_decay = -1}); }).find("RMSprop: weight_decay=-1") != std::string::npos);
  CHECK(error_of([&] { RMSprop({p}, {.momentum = -0.1}); }).find("RMSprop: momentum=-0.1") != std::string::npos);
  RMSprop opt({p}, {.lr = 0.1});
  set_grad(p, {1.0});
  opt.step();
  opt.param_groups()[0].options.centered = true;  // needs a grad_avg the state was made without
  CHECK(error_of([&] { opt.step(); }).find("make a new optimizer") != std::string::npos);
}

TEST_CASE("RMSprop: a set found_inf flag leaves parameters and state untouched", "[optim][amp]") {
  Tensor p = make_param({1.0, -2.0, 0.5}), q = make_param({1.0, -2.0, 0.5});
  const RMSpropArgs o{.lr = 0.1, .momentum = 0.5, .centered = true};
  RMSprop opt({p}, o), ref({q}, o);
  float flag = 0.0f;
  for (int k = 0; k < 3; ++k) {
    flag = k == 1 ? 1.0f : 0.0f;
    set_grad(p, {0.5 * (k + 1), -1.0, 4.0});
    opt.step(AmpStep{.found_inf = &flag});
    if (k != 1) {
      set_grad(q, {0.5 * (k + 1), -1.0, 4.0});
      ref.step();
    }
    CHECK(values(p) == values(q));
  }
  const StateDict a = opt.state_dict(), b = ref.state_dict();
  for (const char* k : {"state.0.square_avg", "state.0.momentum_buffer", "state.0.grad_avg"}) {
    INFO(k);
    CHECK(values(a.at(k)) == values(b.at(k)));
  }
  CHECK(a.at("state.0.step").item<double>() == 2.0);  // the skipped step is not counted
}
