// FP32 master weights in the optimizers (docs/ARCHITECTURE.md, Principles 6): F16/BF16 parameters are updated through an
// F32 master copy, bit for bit the F32 run of the same updates; tiny updates accumulate instead of
// being swamped; masters travel in the state dict; the grad scaler's deferred unscale hook.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ops/reduce.h"
#include "optim/adam.h"
#include "optim/sgd.h"
#include "test_util.h"

using namespace hg;
using namespace hg::optim;
using Vec = std::vector<double>;

namespace {

using test::make_param;
using test::set_grad;
using test::values;

// A different gradient at every step, rounded to dt so the F32 run sees the same values.
Vec grad_at(int step, size_t n, DType dt) {
  Vec g(n);
  for (size_t i = 0; i < n; ++i) g[i] = std::sin(1.3 * static_cast<double>(i) + 0.7 * step) * (1.0 + static_cast<double>(i % 3));
  return values(from_vector(g, {static_cast<int64_t>(n)}, {.dtype = dt}));
}

const Vec kInit = {0.5, -1.25, 2.0, 0.75, -0.3, 1.1};

std::unique_ptr<Optimizer> make_opt(int kind, const Tensor& p) {
  if (kind == 0) return std::make_unique<SGD>(std::vector<Tensor>{p}, SGDArgs{.lr = 0.1, .momentum = 0.9});
  if (kind == 1) return std::make_unique<SGD>(std::vector<Tensor>{p}, SGDArgs{.lr = 0.05});
  if (kind == 2) return std::make_unique<Adam>(std::vector<Tensor>{p}, AdamArgs{.lr = 0.01, .amsgrad = true});
  return std::make_unique<AdamW>(std::vector<Tensor>{p}, AdamWArgs{.lr = 0.01, .weight_decay = 0.1});
}

}  // namespace

TEST_CASE("Masters: tiny updates accumulate in the master, without masters they are swamped", "[optim][master]") {
  for (DType dt : {DType::F16, DType::BF16}) {
    INFO(dt);
    // lr * grad = 1e-4 (F16) or 1e-3 (BF16): below half an ulp of 1 (F16: 2^-12, BF16: 2^-9)
    const double g = dt == DType::F16 ? 1e-4 : 1e-3;
    Tensor with = make_param({1.0}, dt), without = make_param({1.0}, dt);
    SGD a({with}, {.lr = 1.0}), b({without}, {.lr = 1.0});
    b.set_master_weights(MasterWeights::Off);
    const double gq = values(from_vector(Vec{g}, {1}, {.dtype = dt}))[0];
    for (int k = 0; k < 100; ++k) {
      set_grad(with, {g});
      set_grad(without, {g});
      a.step();
      b.step();
      if (k == 0) CHECK(values(with)[0] == 1.0);  // one update alone is still below half an ulp
    }
    CHECK(values(without)[0] == 1.0);  // swamped: every step rounds back to 1
    const double want = 1.0 - 100 * gq;
    REQUIRE(a.master(0).defined());
    CHECK(values(a.master(0))[0] == Approx(want).epsilon(1e-5));  // the master holds the sum in F32
    CHECK(values(with)[0] == values(from_vector(Vec{values(a.master(0))[0]}, {1}, {.dtype = dt}))[0]);  // one RNE
    CHECK(values(with)[0] < 1.0);
    CHECK_FALSE(b.master(0).defined());
  }
}

TEST_CASE("Masters: the master is bit for bit the F32 run of the same updates", "[optim][master]") {
  for (DType dt : {DType::F16, DType::BF16}) {
    for (int kind = 0; kind < 4; ++kind) {
      INFO(dt << " optimizer " << kind);
      Tensor lo = make_param(kInit, dt);
      Tensor f32 = make_param(values(lo), DType::F32);  // the same values, exactly
      auto opt_lo = make_opt(kind, lo), opt_32 = make_opt(kind, f32);
      for (int s = 0; s < 7; ++s) {
        const Vec g = grad_at(s, kInit.size(), dt);
        set_grad(lo, g);
        set_grad(f32, g);
        opt_lo->step();
        opt_32->step();
      }
      const Tensor m = opt_lo->master(0);
      REQUIRE(m.defined());
      CHECK(m.dtype() == DType::F32);
      CHECK(values(m) == values(f32));
      CHECK(values(lo) == values(f32.to(dt)));  // the parameter is the master, rounded once
      CHECK_FALSE(opt_32->master(0).defined());  // an F32 parameter is its own master
      const StateDict a = opt_lo->state_dict(), b = opt_32->state_dict();
      CHECK(a.size() == b.size() + 1);  // + state.0.master
      for (const auto& [key, t] : b) {
        INFO(key);
        CHECK(values(t) == values(a.at(key)));  // moments are F32 and equal
      }
    }
  }
}

TEST_CASE("Masters: the master is made from the parameter's values at its first step", "[optim][master]") {
  Tensor p = make_param(kInit, DType::F16), q = make_param(kInit, DType::F16);
  SGD opt({p, q}, {.lr = 0.0});
  CHECK_FALSE(opt.master(0).defined());
  set_grad(p, grad_at(0, kInit.size(), DType::F16));
  opt.step();
  CHECK(values(opt.master(0)) == values(p));  // lr 0: the master is the parameter, widened
  CHECK_FALSE(opt.master(1).defined());        // q had no gradient: no step, no master
  REQUIRE_THROWS_WITH(opt.master(5), Catch::Contains("does not exist"));
}

TEST_CASE("Masters: state_dict round trip resumes bit for bit", "[optim][master]") {
  for (DType dt : {DType::F16, DType::BF16}) {
    for (int kind = 0; kind < 4; ++kind) {
      INFO(dt << " optimizer " << kind);
      Tensor p = make_param(kInit, dt);
      auto opt = make_opt(kind, p);
      for (int s = 0; s < 3; ++s) {
        set_grad(p, grad_at(s, kInit.size(), dt));
        opt->step();
      }
      const StateDict sd = opt->state_dict();
      REQUIRE(sd.count("state.0.master"));
      CHECK(sd.at("state.0.master").dtype() == DType::F32);
      CHECK(values(sd.at("state.0.master")) != values(p));  // the master has more bits than p
      Tensor q = make_param(values(p), dt);
      auto resumed = make_opt(kind, q);
      resumed->load_state_dict(sd);
      for (int s = 3; s < 6; ++s) {
        set_grad(p, grad_at(s, kInit.size(), dt));
        set_grad(q, grad_at(s, kInit.size(), dt));
        opt->step();
        resumed->step();
      }
      CHECK(values(resumed->master(0)) == values(opt->master(0)));
      CHECK(values(q) == values(p));
    }
  }
}

TEST_CASE("Masters: Off gives pure low-precision updates and refuses a state dict with masters", "[optim][master]") {
  Tensor p = make_param(kInit, DType::F16);
  SGD with({p}, {.lr = 0.1});
  set_grad(p, grad_at(0, kInit.size(), DType::F16));
  with.step();
  const StateDict sd = with.state_dict();
  REQUIRE(sd.count("state.0.master"));
  Tensor q = make_param(kInit, DType::F16);
  SGD off({q}, {.lr = 0.1});
  off.set_master_weights(MasterWeights::Off);
  CHECK(off.master_weights() == MasterWeights::Off);
  REQUIRE_THROWS_WITH(off.load_state_dict(sd), Catch::Contains("master weights Off"));
  set_grad(q, grad_at(0, kInit.size(), DType::F16));
  off.step();
  CHECK(off.state_dict().count("state.0.master") == 0);
  // Switching Off drops existing masters.
  with.set_master_weights(MasterWeights::Off);
  CHECK_FALSE(with.master(0).defined());
  // A master entry for an F32 parameter is rejected.
  Tensor r = make_param(kInit, DType::F32);
  SGD f32({r}, {.lr = 0.1});
  StateDict bad = f32.state_dict();
  bad["state.0.master"] = zeros({6}, {.dtype = DType::F32});
  REQUIRE_THROWS_WITH(f32.load_state_dict(bad), Catch::Contains("only F16/BF16 parameters have masters"));
}

TEST_CASE("step(): the factor a gradient carries multiplies it in F32, for as long as it has that gradient", "[optim][master]") {
  for (DType dt : {DType::F16, DType::BF16, DType::F32}) {
    for (int kind = 0; kind < 4; ++kind) {
      INFO(dt << " optimizer " << kind);
      const double scale = 1024.0;
      Tensor a = make_param(kInit, dt);
      Tensor b = make_param(values(a), DType::F32);
      auto oa = make_opt(kind, a);
      auto ob = make_opt(kind, b);
      for (int s = 0; s < 3; ++s) {
        const Vec g = grad_at(s, kInit.size(), dt);
        Vec scaled(g.size());
        for (size_t i = 0; i < g.size(); ++i) scaled[i] = g[i] * scale;  // exact: a power of two
        set_grad(a, scaled);
        set_grad(b, g);
        a.set_grad_unscale({.host = 1.0 / scale});
        oa->step();
        ob->step();
      }
      const Tensor m = dt == DType::F32 ? a : oa->master(0);
      CHECK(values(m) == values(b));
    }
  }
  // A factor belongs to the gradient it was made for: zero_grad, set_grad or a backward that accumulates
  // into the gradient ends it; a step does not (the gradient's values are still scaled).
  Tensor p = make_param(kInit, DType::F16);
  CHECK_FALSE(p.grad_unscale().pending());
  REQUIRE_THROWS_WITH(p.set_grad_unscale({.host = 0.5}), Catch::Contains("no gradient to carry the factor"));
  set_grad(p, grad_at(0, kInit.size(), DType::F16));
  p.set_grad_unscale({.host = 0.5});
  CHECK(p.grad_unscale().pending());
  CHECK(p.grad_unscale().host == 0.5);
  SGD opt({p}, {.lr = 0.1});
  opt.step();
  CHECK(p.grad_unscale().host == 0.5);
  Tensor alias = p;  // a handle: the same leaf, the same factor
  CHECK(alias.grad_unscale().host == 0.5);
  opt.zero_grad();
  CHECK_FALSE(p.grad_unscale().pending());
  set_grad(p, grad_at(1, kInit.size(), DType::F16));
  CHECK_FALSE(p.grad_unscale().pending());
  p.set_grad_unscale({.host = 0.25});
  set_grad(p, grad_at(2, kInit.size(), DType::F16));
  CHECK_FALSE(p.grad_unscale().pending());
  p.set_grad_unscale({.host = 0.25});
  sum(p.to(DType::F32)).backward();  // accumulates into the gradient: a new gradient
  CHECK_FALSE(p.grad_unscale().pending());
}
