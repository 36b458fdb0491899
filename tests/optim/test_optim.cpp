// SGD, Adam and AdamW step by step against references written here in double from torch 1.13's
// formulas (independently of ops/kernels/optim.h); F16/BF16 parameters; state dicts; clipping.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/parallel.h"
#include "core/tensor.h"
#include "ops/elementwise.h"
#include "ops/reduce.h"
#include "optim/adam.h"
#include "optim/clip.h"
#include "optim/rmsprop.h"
#include "optim/sgd.h"
#include "ops/kernels/optim.h"
#include "ops/kernels/optim_rules.h"
#include "optim_reference.h"
#include "test_util.h"

using namespace hg;
using namespace hg::optim;
using Vec = std::vector<double>;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

using test::check_close;
using test::grad_at;
using test::kInit;
using test::make_param;
using test::run_against;
using test::set_grad;
using test::values;

// ---- references (torch 1.13 _single_tensor_sgd / _single_tensor_adam / adamw, in double) ----------

struct RefSgd {
  double lr, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  Vec buf = {};
  void step(Vec& p, const Vec& grad) {
    const bool first = buf.empty();
    if (first) buf.assign(p.size(), 0.0);
    for (size_t i = 0; i < p.size(); ++i) {
      double d = grad[i];
      if (weight_decay != 0) d += weight_decay * p[i];
      if (momentum != 0) {
        buf[i] = first ? d : momentum * buf[i] + (1 - dampening) * d;
        d = nesterov ? d + momentum * buf[i] : buf[i];
      }
      p[i] -= lr * d;
    }
  }
};

struct RefAdam {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool decoupled = false, amsgrad = false;
  int t = 0;
  Vec m = {}, v = {}, vmax = {};
  void step(Vec& p, const Vec& grad) {
    if (t++ == 0) m = v = vmax = Vec(p.size(), 0.0);
    const double bc1 = 1 - std::pow(beta1, t), bc2 = 1 - std::pow(beta2, t);
    for (size_t i = 0; i < p.size(); ++i) {
      double g = grad[i];
      if (decoupled) p[i] *= 1 - lr * weight_decay;
      else g += weight_decay * p[i];
      m[i] = beta1 * m[i] + (1 - beta1) * g;
      v[i] = beta2 * v[i] + (1 - beta2) * g * g;
      vmax[i] = std::max(vmax[i], v[i]);
      const double denom = std::sqrt(amsgrad ? vmax[i] : v[i]) / std::sqrt(bc2) + eps;
      p[i] -= lr / bc1 * m[i] / denom;
    }
  }
};

}  // namespace

// ---- SGD --------------------------------------------------------------------------------------

TEST_CASE("SGD: plain, momentum, dampening, nesterov and weight decay match torch's formulas", "[optim]") {
  struct Case {
    const char* name;
    SGDArgs o;
  };
  const Case cases[] = {
      {"plain", {.lr = 0.1}},
      {"momentum", {.lr = 0.05, .momentum = 0.9}},
      {"dampening", {.lr = 0.05, .momentum = 0.8, .dampening = 0.3}},
      {"nesterov", {.lr = 0.05, .momentum = 0.9, .nesterov = true}},
      {"weight decay", {.lr = 0.1, .weight_decay = 0.01}},
      {"everything", {.lr = 0.02, .momentum = 0.7, .dampening = 0.1, .weight_decay = 0.05}},
  };
  for (DType dt : {DType::F64, DType::F32}) {
    for (const Case& c : cases) {
      INFO(c.name);
      Tensor p = make_param(kInit, dt, {2, 3});
      SGD opt({p}, c.o);
      RefSgd ref{.lr = c.o.lr, .momentum = c.o.momentum, .dampening = c.o.dampening,
                 .weight_decay = c.o.weight_decay, .nesterov = c.o.nesterov};
      run_against(opt, p, ref, 5);
    }
  }
}

TEST_CASE("SGD: the first momentum step takes the undamped gradient", "[optim]") {
  Tensor p = make_param({1.0}, DType::F64);
  SGD opt({p}, {.lr = 1.0, .momentum = 0.5, .dampening = 0.5});
  set_grad(p, {2.0});
  opt.step();  // buf = 2, p = 1 - 2
  CHECK(values(p)[0] == -1.0);
  set_grad(p, {2.0});
  opt.step();  // buf = 0.5 * 2 + 0.5 * 2 = 2, p = -1 - 2
  CHECK(values(p)[0] == -3.0);
  CHECK(opt.state_dict().at("state.0.momentum_buffer").item<double>() == 2.0);
}

TEST_CASE("SGD trains a quadratic through backward: p_k = (1 - 2 lr)^k p_0", "[optim]") {
  Tensor p = make_param({1.0, -2.0, 0.5}, DType::F64);
  SGD opt({p}, {.lr = 0.1});
  for (int k = 0; k < 10; ++k) {
    opt.zero_grad();
    sum(mul(p, p)).backward();
    opt.step();
  }
  const double f = std::pow(0.8, 10);
  check_close(values(p), {f, -2.0 * f, 0.5 * f}, 1e-12, 0);
}

// ---- Adam / AdamW -----------------------------------------------------------------------------

TEST_CASE("Adam and AdamW, with weight decay and amsgrad, match torch's formulas", "[optim]") {
  struct Case {
    const char* name;
    bool decoupled;
    double lr, beta1, beta2, eps, weight_decay;
    bool amsgrad;
  };
  const Case cases[] = {
      {"Adam", false, 1e-2, 0.9, 0.999, 1e-8, 0, false},
      {"Adam L2", false, 1e-2, 0.9, 0.999, 1e-8, 0.1, false},
      {"Adam amsgrad", false, 5e-2, 0.8, 0.99, 1e-6, 0, true},
      {"AdamW", true, 1e-2, 0.9, 0.999, 1e-8, 1e-2, false},
      {"AdamW amsgrad", true, 3e-2, 0.85, 0.95, 1e-3, 0.2, true},
  };
  for (DType dt : {DType::F64, DType::F32}) {
    for (const Case& c : cases) {
      INFO(c.name);
      Tensor p = make_param(kInit, dt, {3, 2});
      RefAdam ref{.lr = c.lr, .beta1 = c.beta1, .beta2 = c.beta2, .eps = c.eps, .weight_decay = c.weight_decay,
                  .decoupled = c.decoupled, .amsgrad = c.amsgrad};
      // decreasing gradients make v fall, so amsgrad's running max differs from v
      if (c.decoupled) {
        AdamW opt({p}, {.lr = c.lr, .betas = {c.beta1, c.beta2}, .eps = c.eps, .weight_decay = c.weight_decay,
                        .amsgrad = c.amsgrad});
        run_against(opt, p, ref, 2, 3.0);
        run_against(opt, p, ref, 3, 0.1);
      } else {
        Adam opt({p}, {.lr = c.lr, .betas = {c.beta1, c.beta2}, .eps = c.eps, .weight_decay = c.weight_decay,
                       .amsgrad = c.amsgrad});
        run_against(opt, p, ref, 2, 3.0);
        run_against(opt, p, ref, 3, 0.1);
      }
    }
  }
}

TEST_CASE("Adam: amsgrad keeps the running max of v, defaults are torch's", "[optim]") {
  Tensor p = make_param({0.0}, DType::F64);
  Adam opt({p}, {.lr = 0.1, .amsgrad = true});
  set_grad(p, {1.0});
  opt.step();
  set_grad(p, {0.0});
  opt.step();
  const StateDict sd = opt.state_dict();
  const double v = sd.at("state.0.exp_avg_sq").item<double>(), vmax = sd.at("state.0.max_exp_avg_sq").item<double>();
  CHECK(v == Approx(0.999 * 0.001));
  CHECK(vmax == Approx(0.001));
  CHECK(sd.at("state.0.step").item<double>() == 2.0);
  CHECK(AdamArgs{}.lr == 1e-3);
  CHECK(AdamArgs{}.weight_decay == 0);
  CHECK(AdamWArgs{}.weight_decay == 1e-2);
  CHECK(sd.at("group.0.beta2").item<double>() == 0.999);
  CHECK(sd.at("group.0.eps").item<double>() == 1e-8);
}

TEST_CASE("Adam's first step moves every parameter by about lr", "[optim]") {
  Tensor p = make_param({1.0, 1.0, 1.0}, DType::F32);
  Adam opt({p}, {.lr = 0.01});
  set_grad(p, {3.0, -0.5, 1e-3});
  opt.step();  // m / sqrt(v) = sign(g) after bias correction
  check_close(values(p), {0.99, 1.01, 0.99}, 1e-5, 0);
}

// ---- low-precision parameters ---------------------------------------------------------------------

TEST_CASE("F16/BF16 parameters update in F32 and round once: the F32 update, rounded", "[optim]") {
  for (DType dt : {DType::F16, DType::BF16}) {
    INFO(dt);
    for (int kind = 0; kind < 3; ++kind) {
      INFO("optimizer " << kind);
      Tensor lo = make_param(kInit, dt);
      Tensor f32 = make_param(values(lo), DType::F32);  // the same values, exactly
      auto make = [&](const Tensor& p) -> std::unique_ptr<Optimizer> {
        if (kind == 0) return std::make_unique<SGD>(std::vector<Tensor>{p}, SGDArgs{.lr = 0.1, .momentum = 0.9});
        if (kind == 1) return std::make_unique<Adam>(std::vector<Tensor>{p}, AdamArgs{.lr = 0.01, .amsgrad = true});
        return std::make_unique<AdamW>(std::vector<Tensor>{p}, AdamWArgs{.lr = 0.01, .weight_decay = 0.1});
      };
      auto opt_lo = make(lo), opt_32 = make(f32);
      const Vec g = values(from_vector(grad_at(0, kInit.size()), {6}, {.dtype = dt}));  // representable in dt
      set_grad(lo, g);
      set_grad(f32, g);
      opt_lo->step();
      opt_32->step();
      CHECK(values(lo) == values(f32.to(dt)));  // bit for bit
      const StateDict a = opt_lo->state_dict(), b = opt_32->state_dict();
      for (const auto& [key, t] : a) {
        INFO(key);
        if (key == "state.0.master") {  // the F32 parameter is its own master
          CHECK(t.dtype() == DType::F32);
          CHECK(values(t) == values(f32));
          continue;
        }
        CHECK(t.dtype() == b.at(key).dtype());  // state is F32 for low-precision parameters
        CHECK(values(t) == values(b.at(key)));
      }
    }
  }
}

TEST_CASE("F16/BF16 parameters follow the double reference rounded each step", "[optim]") {
  for (DType dt : {DType::F16, DType::BF16}) {
    INFO(dt);
    Tensor p = make_param(kInit, dt);
    Adam opt({p}, {.lr = 0.05});
    RefAdam ref{.lr = 0.05};
    Vec want = values(p);
    for (int s = 0; s < 4; ++s) {
      const Vec g = values(from_vector(grad_at(s, want.size()), {6}, {.dtype = dt}));
      set_grad(p, g);
      opt.step();
      ref.step(want, g);
      want = values(from_vector(want, {6}, {.dtype = dt}));  // the stored parameter is rounded
      check_close(values(p), want, test::dtype_tolerance(dt), 1e-3);
    }
  }
}

TEST_CASE("An F16 parameter swallows an update below half an ulp (why masters exist)", "[optim]") {
  Tensor p = make_param({1.0, 1.0}, DType::F16);
  SGD opt({p}, {.lr = 1.0});
  set_grad(p, {1e-4, 1e-3});  // below 1 the F16 ulp is 2^-11 = 4.9e-4
  opt.step();
  CHECK(values(p)[0] == 1.0);
  CHECK(values(p)[1] == Approx(1.0 - 1e-3).margin(3e-4));
  CHECK(values(p)[1] != 1.0);
}

TEST_CASE("The update kernels take an F32 master copy of an F16 parameter", "[optim]") {
  // The hook issue 4's master weights use: the update reads/writes the master and rounds it into p.
  Tensor p = make_param({1.0, 2.0}, DType::F16);
  Tensor g = from_vector(Vec{1e-4, -1e-4}, {2}, {.dtype = DType::F16});
  std::vector<float> master = {1.0f, 2.0f};
  UpdateArgs a{.n = 2, .param = p.data_ptr(), .grad = g.data_ptr(), .master = master.data()};
  a.hyper[kSgdLr] = 1.0;
  for (int k = 0; k < 10; ++k) update_kernels<SgdRule>().get(Device::cpu(), DType::F16)({&a, 1});
  const float g0 = to_float(g.data<f16>()[0]), g1 = to_float(g.data<f16>()[1]);
  float m0 = 1.0f, m1 = 2.0f;
  for (int k = 0; k < 10; ++k) m0 = m0 + -1.0f * g0, m1 = m1 + -1.0f * g1;
  CHECK(master[0] == m0);
  CHECK(master[1] == m1);
  CHECK(values(p) == Vec{to_float(f16{float_to_f16_bits(m0)}), to_float(f16{float_to_f16_bits(m1)})});
  CHECK(values(p)[0] != 1.0);  // ten small steps add up in the master
  UpdateArgs bad{.n = 1, .param = master.data(), .grad = master.data(), .master = master.data()};
  bad.hyper[kSgdLr] = 1.0;
  REQUIRE_THROWS_WITH(update_kernels<SgdRule>().get(Device::cpu(), DType::F32)({&bad, 1}), Catch::Contains("only F16/BF16"));
  // the buffers the options need: momentum 0.9 needs a momentum buffer
  UpdateArgs missing = a;
  missing.hyper[kSgdMomentum] = 0.9;
  REQUIRE_THROWS_WITH(update_kernels<SgdRule>().get(Device::cpu(), DType::F16)({&missing, 1}),
                      Catch::Contains("SGD.step: the options need 1 state buffer(s) but the update was given 0"));
}

// ---- state dict ---------------------------------------------------------------------------------

namespace {

Tensor copy_param(const Tensor& p) { return make_param(values(p), p.dtype(), p.shape()); }

// Steps n times with the gradients of steps [from, from + n).
void run_steps(Optimizer& opt, const std::vector<Tensor>& ps, int from, int n) {
  for (int s = from; s < from + n; ++s) {
    for (size_t j = 0; j < ps.size(); ++j)
      if (j != 1 || s % 2 == 0) set_grad(ps[j], grad_at(s + static_cast<int>(j), static_cast<size_t>(ps[j].numel())));
    opt.step();
    for (const Tensor& p : ps) Tensor(p).zero_grad();
  }
}

// N steps, save, M steps == N steps, save, load into a new optimizer over copies, M steps: bit for bit.
template <class Opt, class Options>
void check_resume(DType dt, Options o) {
  std::vector<Tensor> ps = {make_param(kInit, dt, {2, 3}), make_param({0.1, -0.2}, dt), make_param({3.0}, dt)};
  Opt opt({{.params = {ps[0], ps[1]}, .options = o}});
  Options o2 = o;
  o2.lr = o.lr * 0.5;
  opt.add_param_group({.params = {ps[2]}, .options = o2});
  run_steps(opt, ps, 0, 3);
  const StateDict saved = opt.state_dict();
  std::vector<Tensor> qs;
  for (const Tensor& p : ps) qs.push_back(copy_param(p));
  opt.set_lr(0, o.lr * 0.25);  // changed after saving: the load must bring the saved lr back
  opt.set_lr(0, o.lr);
  run_steps(opt, ps, 3, 3);

  Opt fresh({{.params = {qs[0], qs[1]}, .options = o}});
  fresh.add_param_group({.params = {qs[2]}, .options = o});  // lr 2 differs until loaded
  fresh.load_state_dict(saved);
  CHECK(fresh.lr(1) == o2.lr);
  run_steps(fresh, qs, 3, 3);
  for (size_t j = 0; j < ps.size(); ++j) CHECK(values(ps[j]) == values(qs[j]));
  const StateDict a = opt.state_dict(), b = fresh.state_dict();
  REQUIRE(a.size() == b.size());
  for (const auto& [key, t] : a) {
    INFO(key);
    CHECK(values(t) == values(b.at(key)));
  }
}

}  // namespace

TEST_CASE("state_dict round trip resumes bit for bit", "[optim]") {
  for (DType dt : {DType::F32, DType::F16, DType::F64}) {
    INFO(dt);
    check_resume<SGD>(dt, SGDArgs{.lr = 0.1, .momentum = 0.9, .nesterov = true});
    check_resume<SGD>(dt, SGDArgs{.lr = 0.1});
    check_resume<Adam>(dt, AdamArgs{.lr = 0.01, .weight_decay = 0.1, .amsgrad = true});
    check_resume<AdamW>(dt, AdamWArgs{.lr = 0.01});
  }
}

TEST_CASE("state_dict names torch's entries, snapshots the state, and has none for a stepless parameter", "[optim]") {
  Tensor a = make_param({1.0, 2.0}, DType::F32), b = make_param({3.0}, DType::F64);
  Adam opt({a, b}, {.lr = 0.1});
  set_grad(a, {1.0, 1.0});
  opt.step();
  const StateDict sd = opt.state_dict();
  for (const char* key : {"group.0.lr", "group.0.beta1", "group.0.beta2", "group.0.eps", "group.0.weight_decay",
                          "group.0.amsgrad", "group.0.params", "state.0.step", "state.0.exp_avg", "state.0.exp_avg_sq"}) {
    INFO(key);
    CHECK(sd.count(key) == 1);
  }
  CHECK(sd.size() == 10);  // parameter 1 had no gradient: no state
  CHECK(sd.at("group.0.lr").ndim() == 0);
  CHECK(sd.at("group.0.lr").dtype() == DType::F64);
  CHECK(sd.at("group.0.params").to_vector<int64_t>() == std::vector<int64_t>{0, 1});
  CHECK(sd.at("state.0.exp_avg").dtype() == DType::F32);
  const Vec m = values(sd.at("state.0.exp_avg"));
  set_grad(a, {5.0, 5.0});
  opt.step();
  CHECK(values(sd.at("state.0.exp_avg")) == m);  // a later step does not change the saved dict
}

TEST_CASE("load_state_dict: missing, unexpected and mis-shaped entries are errors that change nothing", "[optim]") {
  Tensor a = make_param({1.0, 2.0}, DType::F32), b = make_param({3.0}, DType::F32);
  Adam opt({a, b}, {.lr = 0.1});
  set_grad(a, {1.0, 1.0});
  set_grad(b, {1.0});
  opt.step();
  const StateDict good = opt.state_dict();
  Tensor a2 = make_param({1.0, 2.0}, DType::F32), b2 = make_param({3.0}, DType::F32);
  Adam other({a2, b2}, {.lr = 0.5});
  auto expect_error = [&](StateDict sd, const std::string& what) {
    REQUIRE_THROWS_WITH(other.load_state_dict(sd), Catch::Contains(what));
    CHECK(other.lr(0) == 0.5);  // unchanged
    CHECK(other.state_dict().size() == 7);  // still no state
  };
  StateDict sd = good;
  sd.erase("state.1.exp_avg_sq");
  expect_error(sd, "missing entry 'state.1.exp_avg_sq'");
  sd = good;
  sd.erase("group.0.eps");
  expect_error(sd, "missing entry 'group.0.eps'");
  sd = good;
  sd["state.0.momentum_buffer"] = zeros({2});
  expect_error(sd, "unexpected entry 'state.0.momentum_buffer'");
  sd = good;
  sd["state.2.exp_avg"] = zeros({1});
  expect_error(sd, "unexpected entry 'state.2.exp_avg'");
  sd = good;
  sd["state.0.exp_avg"] = zeros({3});
  expect_error(sd, "entry 'state.0.exp_avg' has shape [3]");
  sd = good;
  sd["state.0.exp_avg"] = zeros({2}, {.dtype = DType::F16});
  expect_error(sd, "dtype F16");
  sd = good;
  sd["group.0.lr"] = zeros({1});
  expect_error(sd, "'group.0.lr' has shape [1]");
  sd = good;
  sd["group.0.beta1"] = Tensor();
  expect_error(sd, "missing entry 'group.0.beta1'");
  sd = good;
  sd["state.1.step"] = full(Shape{}, 1.5, {.dtype = DType::F64});
  expect_error(sd, "whole number");
  SGD sgd({a2, b2}, {.lr = 0.1, .momentum = 0.9});
  REQUIRE_THROWS_WITH(sgd.load_state_dict(good), Catch::Contains("missing entry 'group.0.momentum'"));
  Adam two({{.params = {a2}}, {.params = {b2}}});
  REQUIRE_THROWS_WITH(two.load_state_dict(good), Catch::Contains("missing entry 'group.1.lr'"));
  Adam one({a2});
  REQUIRE_THROWS_WITH(one.load_state_dict(good), Catch::Contains("'group.0.params' has shape [2]"));
  other.load_state_dict(good);
  CHECK(other.lr(0) == 0.1);
}

// ---- groups, zero_grad, skipping, errors ----------------------------------------------------------

TEST_CASE("zero_grad drops gradients, a parameter without a gradient is skipped", "[optim]") {
  Tensor a = make_param({1.0, 2.0}, DType::F32), b = make_param({3.0}, DType::F32);
  SGD opt({a, b}, {.lr = 0.5, .momentum = 0.9});
  set_grad(a, {1.0, 1.0});
  set_grad(b, {1.0});
  opt.zero_grad();
  CHECK_FALSE(a.grad().defined());
  CHECK_FALSE(b.grad().defined());
  set_grad(a, {1.0, -1.0});
  opt.step();
  CHECK(values(a) == Vec{0.5, 2.5});
  CHECK(values(b) == Vec{3.0});  // no gradient: unchanged, and no state made
  const StateDict sd = opt.state_dict();
  CHECK(sd.count("state.0.momentum_buffer") == 1);
  CHECK(sd.count("state.1.momentum_buffer") == 0);
}

TEST_CASE("Parameter groups keep their own options, schedulers' lr view", "[optim]") {
  Tensor a = make_param({1.0}, DType::F64), b = make_param({1.0}, DType::F64);
  SGD opt({{.params = {a}, .options = {.lr = 0.1}}, {.params = {b}, .options = {.lr = 0.01, .weight_decay = 1.0}}});
  REQUIRE(opt.num_param_groups() == 2);
  CHECK(opt.param_groups()[1].options.weight_decay == 1.0);
  opt.param_groups()[0].options.lr = 0.2;
  CHECK(opt.lr(0) == 0.2);
  opt.set_lr(1, 0.5);
  set_grad(a, {1.0});
  set_grad(b, {1.0});
  opt.step();
  CHECK(values(a)[0] == Approx(0.8));
  CHECK(values(b)[0] == Approx(1.0 - 0.5 * 2.0));
  CHECK(opt.parameters().size() == 2);
  CHECK(opt.parameters()[1].same(b));
  REQUIRE_THROWS_WITH(opt.set_lr(2, 0.1), Catch::Contains("group 2 does not exist"));
  REQUIRE_THROWS_WITH(opt.set_lr(0, -1.0), Catch::Contains(">= 0"));
}

TEST_CASE("Optimizer option and parameter errors name the problem", "[optim]") {
  Tensor p = make_param({1.0}, DType::F32);
  REQUIRE_THROWS_WITH(SGD({p}), Catch::Contains("SGD: lr is required"));
  REQUIRE_THROWS_WITH(SGD({p}, {.lr = -0.1}), Catch::Contains("lr=-0.1"));
  REQUIRE_THROWS_WITH(SGD({p}, {.lr = 0.1, .nesterov = true}), Catch::Contains("nesterov needs momentum > 0"));
  REQUIRE_THROWS_WITH(SGD({p}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true}),
                      Catch::Contains("dampening=0.1"));
  REQUIRE_THROWS_WITH(Adam({p}, {.betas = {0.9, 1.0}}), Catch::Contains("betas[1]=1"));
  REQUIRE_THROWS_WITH(AdamW({p}, {.eps = -1}), Catch::Contains("AdamW: eps=-1"));
  REQUIRE_THROWS_WITH(Adam(std::vector<Tensor>{}), Catch::Contains("empty parameter list"));
  REQUIRE_THROWS_WITH(Adam({p, p}), Catch::Contains("appears more than once"));
  Tensor q = mul(p, 2.0);
  REQUIRE_THROWS_WITH(Adam({q}), Catch::Contains("not a leaf"));
  REQUIRE_THROWS_WITH(Adam({from_vector(std::vector<int64_t>{1}, {1}, {.dtype = DType::I64})}), Catch::Contains("dtype I64"));
  Adam opt({p});
  REQUIRE_THROWS_WITH(opt.add_param_group({.params = {p}}), Catch::Contains("appears more than once"));
}

TEST_CASE("A step makes no tensors after the first", "[optim]") {
  std::vector<Tensor> ps = {make_param(grad_at(0, 4096), DType::F32, {64, 64}), make_param(grad_at(1, 64), DType::F16),
                            make_param(grad_at(2, 640), DType::BF16)};
  AdamW opt(ps, {.lr = 1e-3, .amsgrad = true});
  for (size_t j = 0; j < ps.size(); ++j) set_grad(ps[j], grad_at(3, static_cast<size_t>(ps[j].numel())));
  opt.step();
  const int64_t held = memory::allocated(Device::cpu());
  memory::reset_peak(Device::cpu());
  for (int k = 0; k < 5; ++k) opt.step();
  CHECK(memory::allocated(Device::cpu()) == held);
  CHECK(memory::peak_allocated(Device::cpu()) == held);  // not even a temporary
}

TEST_CASE("Large parameters (OpenMP path) match the single-threaded blocks", "[optim]") {
  const size_t n = 200003;  // above the parallel threshold, not a multiple of the block
  Tensor big = make_param(grad_at(5, n), DType::BF16);
  Tensor f32 = make_param(values(big), DType::F32);
  Adam a({big}, {.lr = 1e-2}), b({f32}, {.lr = 1e-2});
  const Vec g = values(from_vector(grad_at(6, n), {static_cast<int64_t>(n)}, {.dtype = DType::BF16}));
  set_grad(big, g);
  set_grad(f32, g);
  a.step();
  b.step();
  CHECK(values(big) == values(f32.to(DType::BF16)));
}

// ---- clipping -----------------------------------------------------------------------------------

TEST_CASE("clip_grad_norm_ returns the total norm and scales by max_norm / (norm + 1e-6)", "[optim]") {
  for (DType dt : {DType::F64, DType::F32, DType::F16, DType::BF16}) {
    INFO(dt);
    Tensor a = make_param({1.0, 2.0, 3.0}, dt), b = make_param({0.0, 0.0}, dt), c = make_param({7.0}, dt);
    const Vec ga = {3.0, -4.0, 0.5}, gb = {-1.5, 2.0};
    set_grad(a, ga);
    set_grad(b, gb);
    double sq = 0;
    for (double x : ga) sq += x * x;
    for (double x : gb) sq += x * x;
    const double total = std::sqrt(sq);
    CHECK(clip_grad_norm_({a, b, c}, 100.0) == Approx(total).epsilon(1e-12));  // c has no grad
    CHECK(values(a.grad()) == ga);  // below max_norm: unchanged
    const double norm = clip_grad_norm_({a, b, c}, 2.0);
    CHECK(norm == Approx(total).epsilon(1e-12));
    const double f = 2.0 / (total + 1e-6);
    Vec want_a, want_b;
    for (double x : ga) want_a.push_back(x * f);
    for (double x : gb) want_b.push_back(x * f);
    check_close(values(a.grad()), want_a, test::dtype_tolerance(dt), 0);
    check_close(values(b.grad()), want_b, test::dtype_tolerance(dt), 0);
    CHECK(std::sqrt(std::pow(values(a.grad())[1], 2)) <= 2.0);
    CHECK_FALSE(c.grad().defined());
  }
}

TEST_CASE("clip_grad_norm_: inf-norm, 1-norm, 3-norm, NaN", "[optim]") {
  Tensor a = make_param({0.0, 0.0, 0.0}, DType::F32), b = make_param({0.0}, DType::F64);
  auto reset = [&] {
    set_grad(a, {1.0, -6.0, 2.0});
    set_grad(b, {-4.0});
  };
  reset();
  CHECK(clip_grad_norm_({a, b}, 3.0, kInf) == 6.0);
  check_close(values(a.grad()), {0.5, -3.0, 1.0}, 1e-6, 0);
  reset();
  CHECK(clip_grad_norm_({a, b}, 100.0, 1.0) == 13.0);
  reset();
  CHECK(clip_grad_norm_({a, b}, 100.0, 3.0) == Approx(std::cbrt(1 + 216 + 8 + 64)).epsilon(1e-12));
  set_grad(a, {1.0, kNaN, 2.0});
  CHECK(std::isnan(clip_grad_norm_({a, b}, 1.0)));
  CHECK(std::isnan(values(b.grad())[0]));  // torch: a NaN norm makes every gradient NaN
  set_grad(a, {1.0, kNaN, 2.0});
  CHECK(std::isnan(clip_grad_norm_({a}, 1.0, kInf)));
  REQUIRE_THROWS_WITH(clip_grad_norm_({a}, 1.0, 0.0), Catch::Contains("norm_type=0"));
  CHECK(clip_grad_norm_({}, 1.0) == 0.0);
}

TEST_CASE("clip_grad_norm_ over a large gradient is thread-count independent and accurate", "[optim]") {
  const size_t n = 300001;
  Tensor p = make_param(Vec(n, 0.0), DType::F32);
  const Vec g = grad_at(1, n);
  set_grad(p, g);
  double sq = 0;
  for (double x : values(p.grad())) sq += x * x;
  const int threads = get_num_threads();
  set_num_threads(1);
  const double one = clip_grad_norm_({p}, 1e30);
  set_num_threads(2);
  const double two = clip_grad_norm_({p}, 1e30);
  set_num_threads(threads);
  CHECK(one == two);
  CHECK(one == Approx(std::sqrt(sq)).epsilon(1e-13));
  double mx = 0;
  for (double x : values(p.grad())) mx = std::max(mx, std::fabs(x));
  CHECK(clip_grad_norm_({p}, 1e30, kInf) == mx);
}

TEST_CASE("clip_grad_value_ clamps in place, NaN stays NaN", "[optim]") {
  for (DType dt : {DType::F32, DType::BF16, DType::F64}) {
    INFO(dt);
    Tensor a = make_param({0.0, 0.0, 0.0, 0.0}, dt);
    set_grad(a, {0.5, -2.0, 3.0, kNaN});
    const Tensor before = a.grad();
    clip_grad_value_({a}, 1.0);
    CHECK(a.grad().same(before));  // the same tensor, written in place
    const Vec g = values(a.grad());
    CHECK(g[0] == 0.5);
    CHECK(g[1] == -1.0);
    CHECK(g[2] == 1.0);
    CHECK(std::isnan(g[3]));
  }
  Tensor a = make_param({0.0}, DType::F32);
  REQUIRE_THROWS_WITH(clip_grad_value_({a}, -1.0), Catch::Contains("clip_value=-1"));
}

TEST_CASE("Every optimizer steps an empty parameter next to a full one (amsgrad included)", "[optim]") {
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    for (int kind = 0; kind < 4; ++kind) {
      Tensor empty_p = zeros({0, 4}, {.dtype = dt}), p = ones({3}, {.dtype = dt});
      empty_p.requires_grad_();
      p.requires_grad_();
      std::unique_ptr<Optimizer> opt;
      if (kind == 0) opt = std::make_unique<SGD>(std::vector<Tensor>{empty_p, p}, SGDArgs{.lr = 0.5, .momentum = 0.9});
      if (kind == 1) opt = std::make_unique<Adam>(std::vector<Tensor>{empty_p, p}, AdamArgs{.lr = 0.5, .amsgrad = true});
      if (kind == 2) opt = std::make_unique<AdamW>(std::vector<Tensor>{empty_p, p}, AdamWArgs{.lr = 0.5});
      if (kind == 3)
        opt = std::make_unique<RMSprop>(std::vector<Tensor>{empty_p, p},
                                        RMSpropArgs{.lr = 0.5, .momentum = 0.9, .centered = true});
      INFO(dtype_name(dt) << " optimizer " << kind);
      for (int k = 0; k < 2; ++k) {
        empty_p.set_grad(zeros({0, 4}, {.dtype = dt}));
        p.set_grad(ones({3}, {.dtype = dt}));
        REQUIRE_NOTHROW(opt->step());
      }
      CHECK(empty_p.numel() == 0);
      CHECK(p.to_vector<double>()[0] < 1.0);  // the full parameter moved
    }
  }
}

TEST_CASE("a step writes each updated parameter in place: its version rises and a graph that saved it refuses "
          "its backward, as torch's", "[optim]") {
  Tensor p = from_vector(Vec{1, 2, 3}, {3}).requires_grad_();
  Tensor q = from_vector(Vec{4, 5}, {2}).requires_grad_();  // no gradient: not updated, version kept
  SGD opt({p, q}, 0.1);
  const Tensor x = from_vector(Vec{1, 1, 1}, {3});
  sum(mul(p, x)).backward();
  const uint64_t vp = p.version(), vq = q.version();
  const Tensor y = sum(mul(p, p));  // saves p
  opt.step();
  CHECK(p.version() == vp + 1);
  CHECK(q.version() == vq);
  CHECK_THROWS_WITH(y.backward(), Catch::Contains("modified by an inplace operation"));
}

TEST_CASE("clone_for makes the same optimizer over other parameters, without state", "[optim]") {
  Tensor a = from_vector(std::vector<float>{1, 2}, {2}).requires_grad_(), b = from_vector(std::vector<float>{3}, {1}).requires_grad_();
  optim::Adam adam({a, b}, optim::AdamArgs{.lr = 0.5, .betas = {0.8, 0.9}, .weight_decay = 0.1});
  adam.set_master_weights(optim::MasterWeights::Off);
  a.set_grad(from_vector(std::vector<float>{1, 1}, {2}));
  adam.step();  // state for a: the copy must not take it
  const std::unique_ptr<optim::Optimizer> copy = adam.clone_for({b});
  CHECK(copy->parameters().size() == 1);
  CHECK(copy->parameters()[0].same(b));
  CHECK(copy->lr(0) == 0.5);
  CHECK(copy->momentum(0) == 0.8);
  CHECK(copy->master_weights() == optim::MasterWeights::Off);
  CHECK(copy->state_buffers(0).empty());
  // the copy steps as the original would have on b
  Tensor c = from_vector(std::vector<float>{3}, {1}).requires_grad_();
  optim::Adam ref({c}, optim::AdamArgs{.lr = 0.5, .betas = {0.8, 0.9}, .weight_decay = 0.1});
  b.set_grad(from_vector(std::vector<float>{2}, {1}));
  c.set_grad(from_vector(std::vector<float>{2}, {1}));
  copy->step();
  ref.step();
  CHECK(b.item() == c.item());
  optim::SGD two({optim::SGD::Group{{a}, {.lr = 0.1}}, optim::SGD::Group{{b}, {.lr = 0.2}}});
  CHECK_THROWS_WITH(two.clone_for({a}), Catch::Contains("2 parameter groups"));
}
