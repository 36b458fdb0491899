// Low-precision parameters without master copies (optim/optimizer.h, set_param_rounding): an update a quarter
// of a BF16 ulp is lost every step by round-to-nearest, survives in expectation with stochastic rounding, and
// is carried exactly by Kahan compensation; both resume bit for bit from a state dict; misuse is refused.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/tensor.h"
#include "optim/adam.h"
#include "optim/sgd.h"
#include "test_util.h"

using namespace hg;
using namespace hg::optim;

namespace {

// n BF16 weights at 1.0 and an SGD whose every step adds lr * 1 = 2^-9 (a quarter of the BF16 spacing 2^-7
// at 1): the update a pure-BF16 run loses.
constexpr int64_t kN = 4096;
constexpr double kLr = 1.0 / 512;

Tensor ones_bf16() { return full(Shape{kN}, 1.0, {.dtype = DType::BF16}).requires_grad_(true); }

void steps(SGD& opt, Tensor& p, int n) {
  for (int s = 0; s < n; ++s) {
    p.set_grad(full(Shape{kN}, -1.0, {.dtype = DType::BF16}));  // SGD: p -= lr * g, so p grows by 2^-9
    opt.step();
  }
}

double mean(const Tensor& t) { return t.to(DType::F64).mean().item<double>(); }

}  // namespace

TEST_CASE("param rounding: nearest loses a quarter-ulp update, stochastic keeps it on average, Kahan exactly",
          "[optim][rounding]") {
  const int n = 64;  // 64 steps of 2^-9: the weights should reach 1.125
  const double want = 1.0 + n * kLr;
  {
    Tensor p = ones_bf16();
    SGD opt({p}, {.lr = kLr});
    opt.set_master_weights(MasterWeights::Off);
    steps(opt, p, n);
    CHECK(mean(p) == 1.0);  // every update rounded away
  }
  {
    Tensor p = ones_bf16();
    SGD opt({p}, {.lr = kLr});
    opt.set_master_weights(MasterWeights::Off);
    opt.set_param_rounding(ParamRounding::Stochastic, 42);
    steps(opt, p, n);
    // each weight is a sum of n steps that add 2^-7 w.p. 1/4 (near 1); its mean over 4096 weights
    CHECK(std::fabs(mean(p) - want) < 0.01);
    CHECK(mean(p) > 1.1);
  }
  {
    Tensor p = ones_bf16();
    SGD opt({p}, {.lr = kLr});
    opt.set_master_weights(MasterWeights::Off);
    opt.set_param_rounding(ParamRounding::Kahan);
    steps(opt, p, n);
    // 1.125 is a BF16 value: the compensation carried every lost quarter into the weights
    const std::vector<double> v = p.to_vector<double>();
    for (const double x : v) REQUIRE(x == want);
    REQUIRE(opt.state_dict().count("state.0.compensation") == 1);
    CHECK(opt.compensation(0).nbytes() == kN * 2);  // 2 bytes per parameter: what Kahan costs
    CHECK(opt.state_dict().at("state.0.compensation").dtype() == DType::BF16);
  }
}

TEST_CASE("param rounding: stochastic and Kahan states resume bit for bit, for SGD and Adam", "[optim][rounding]") {
  for (const ParamRounding r : {ParamRounding::Stochastic, ParamRounding::Kahan}) {
    for (const bool adam : {false, true}) {
      auto make = [&](Tensor& p) -> std::unique_ptr<Optimizer> {
        std::unique_ptr<Optimizer> o;
        if (adam) o = std::make_unique<Adam>(std::vector<Tensor>{p}, AdamArgs{.lr = 1e-3});
        else o = std::make_unique<SGD>(std::vector<Tensor>{p}, SGDArgs{.lr = 1e-3, .momentum = 0.9});
        o->set_master_weights(MasterWeights::Off);
        o->set_param_rounding(r, 7);
        return o;
      };
      auto grad = [](int s) {
        std::vector<double> g(kN);
        for (int64_t i = 0; i < kN; ++i) g[static_cast<size_t>(i)] = std::sin(0.37 * static_cast<double>(i) + s);
        return from_vector(g, Shape{kN}, {.dtype = DType::BF16});
      };
      Tensor a = full(Shape{kN}, 0.75, {.dtype = DType::BF16}).requires_grad_(true);
      auto oa = make(a);
      for (int s = 0; s < 5; ++s) {
        a.set_grad(grad(s));
        oa->step();
      }
      const StateDict sd = oa->state_dict();
      CHECK(sd.count(r == ParamRounding::Stochastic ? "rounding.generator" : "state.0.compensation") == 1);
      Tensor b = a.detach().clone().requires_grad_(true);
      auto ob = make(b);
      ob->load_state_dict(sd);
      for (int s = 5; s < 9; ++s) {
        a.set_grad(grad(s));
        b.set_grad(grad(s));
        oa->step();
        ob->step();
      }
      INFO("rounding " << int(r) << (adam ? " Adam" : " SGD"));
      CHECK(std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0);
    }
  }
}

TEST_CASE("param rounding: needs masters off, and a state dict must match the rounding", "[optim][rounding]") {
  Tensor p = ones_bf16();
  SGD opt({p}, {.lr = kLr});
  REQUIRE_THROWS_WITH(opt.set_param_rounding(ParamRounding::Stochastic), Catch::Contains("set_master_weights(MasterWeights::Off)"));
  opt.set_master_weights(MasterWeights::Off);
  opt.set_param_rounding(ParamRounding::Kahan);
  REQUIRE_THROWS_WITH(opt.set_master_weights(MasterWeights::Auto), Catch::Contains("set_param_rounding(ParamRounding::Nearest)"));
  steps(opt, p, 1);
  const StateDict sd = opt.state_dict();
  Tensor q = ones_bf16();
  SGD plain({q}, {.lr = kLr});
  plain.set_master_weights(MasterWeights::Off);
  REQUIRE_THROWS_WITH(plain.load_state_dict(sd), Catch::Contains("set_param_rounding(ParamRounding::Kahan)"));
  // F32 parameters are not affected by the rounding
  Tensor f = full(Shape{3}, 1.0).requires_grad_(true);
  SGD fo({f}, {.lr = 0.5});
  fo.set_master_weights(MasterWeights::Off);
  fo.set_param_rounding(ParamRounding::Stochastic);
  f.set_grad(full(Shape{3}, 1.0));
  fo.step();
  CHECK(f.to_vector<float>() == std::vector<float>{0.5f, 0.5f, 0.5f});
}
