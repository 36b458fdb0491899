// The FP8 linear layer (ops/fp8_linear.h) against references computed here from the definitions: per-tensor
// scaling quantizes x and w to E4M3 (dy to E5M2 in HYBRID), multiplies the FP8 values exactly, sums and
// multiplies by the inverse scales; MXFP8 multiplies the block-decoded values, blocks along each GEMM's
// reduction dimension. Then nn::Fp8Linear (and nn::convert_to_fp8) under amp::Fp8Autocast, evaluation that
// leaves the scaling state alone, and a checkpoint that resumes bit for bit.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/node.h"
#include "core/fp8.h"
#include "core/rng.h"
#include "amp/inspect/memory.h"
#include "amp/inspect/trace.h"
#include "nn/checkpoint.h"
#include "nn/nn.h"
#include "ops/fp8.h"
#include "ops/fp8_linear.h"
#include "ops/kernels/fp8.h"
#include "ops/loss.h"
#include "ops/matmul.h"
#include "ops/reduce.h"
#include "ops/shape.h"
#include "data/dataloader.h"
#include "optim/sgd.h"
#include "test_util.h"

using namespace hg;

namespace {

using Mat = std::vector<double>;  // row-major

// The values an FP8 cast with this scale produces, times the inverse scale (as the GEMM sees them).
Mat per_tensor_values(const Tensor& x, DType f8, float scale) {
  Mat out;
  for (float v : x.to(DType::F32).to_vector<float>()) {
    const float s = v * scale;
    const float q = f8 == DType::F8E4M3 ? f8e4m3_bits_to_float(float_to_f8e4m3_bits(s, true))
                                        : f8e5m2_bits_to_float(float_to_f8e5m2_bits(s, true));
    out.push_back(double(q) * double(1.0f / scale));
  }
  return out;
}
float current_scale(const Tensor& x, DType f8) {
  float a = 0;
  for (float v : x.to(DType::F32).to_vector<float>()) a = std::max(a, std::fabs(v));
  return (f8 == DType::F8E4M3 ? kF8E4M3Max : kF8E5M2Max) / a;
}
Mat values(const Tensor& t) {
  Mat out;
  for (float v : t.to(DType::F32).to_vector<float>()) out.push_back(v);
  return out;
}

// C (m,n) = A (m,k) B (k,n) in double, with A and B given as functions of (row, col).
template <class FA, class FB>
Mat product(int64_t m, int64_t n, int64_t k, FA a, FB b) {
  Mat c(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += a(i, p) * b(p, j);
      c[static_cast<size_t>(i * n + j)] = s;
    }
  return c;
}

// got (F32) against want (double): within F32 summation error of the largest |want|.
void check_near(const Tensor& got, const Mat& want, const char* what) {
  const std::vector<float> g = got.to(DType::F32).to_vector<float>();
  REQUIRE(g.size() == want.size());
  double scale = 0, worst = 0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  for (size_t i = 0; i < g.size(); ++i) worst = std::max(worst, std::fabs(double(g[i]) - want[i]));
  INFO(what << ": worst difference " << worst << " of largest " << scale);
  CHECK(worst <= 1e-5 * scale);
}

std::shared_ptr<Fp8LinearState> state(const Fp8Recipe& r) { return std::make_shared<Fp8LinearState>(r); }

nn::StateDict clone_state(const nn::StateDict& s) {  // state_dict() shares storage with the model
  nn::StateDict out;
  for (const auto& [k, v] : s) out.emplace(k, v.clone());
  return out;
}

}  // namespace

TEST_CASE("fp8 linear: current scaling is the exact FP8 GEMM times the inverse scales, forward and backward", "[fp8][fp8_linear]") {
  const int64_t m = 6, i = 40, o = 5;
  Generator g(3);
  Tensor x = randn({m, i}, {}, &g).requires_grad_(), w = mul(randn({o, i}, {}, &g), 0.05).requires_grad_(),
         b = randn({o}, {}, &g).requires_grad_();
  auto st = state({.scaling = Fp8Scaling::Current});
  const Tensor y = fp8_linear(x, w, b, st);
  CHECK(y.dtype() == DType::F32);
  const float sx = current_scale(x, DType::F8E4M3), sw = current_scale(w, DType::F8E4M3);
  const Mat qx = per_tensor_values(x, DType::F8E4M3, sx), qw = per_tensor_values(w, DType::F8E4M3, sw), bv = values(b);
  Mat want = product(m, o, i, [&](int64_t r, int64_t c) { return qx[r * i + c]; }, [&](int64_t r, int64_t c) { return qw[c * i + r]; });
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < o; ++c) want[r * o + c] += bv[c];
  check_near(y, want, "forward");
  // the FP8 result is close to, but not, the F32 one
  const Tensor y32 = linear(x.detach(), w.detach(), b.detach());
  CHECK(max(abs(sub(y.detach(), y32))).item<float>() > 0.0f);
  CHECK(max(abs(sub(y.detach(), y32))).item<float>() < 0.1f * max(abs(y32)).item<float>());

  const Tensor dy = randn({m, o}, {}, &g);
  sum(mul(y, dy)).backward();
  const float sg = current_scale(dy, DType::F8E5M2);
  const Mat qg = per_tensor_values(dy, DType::F8E5M2, sg), dyv = values(dy);
  check_near(x.grad(), product(m, i, o, [&](int64_t r, int64_t c) { return qg[r * o + c]; }, [&](int64_t r, int64_t c) { return qw[r * i + c]; }), "dx");
  check_near(w.grad(), product(o, i, m, [&](int64_t r, int64_t c) { return qg[c * o + r]; }, [&](int64_t r, int64_t c) { return qx[r * i + c]; }), "dw");
  Mat db(o, 0.0);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < o; ++c) db[c] += dyv[r * o + c];
  check_near(b.grad(), db, "db (unquantized)");
  CHECK(st->calls() == 1);
  // no CPU has FP8 arithmetic: the native FP8 GEMM's table is empty there, and every GEMM took the decode route
  CHECK_FALSE(fp8_gemm_kernels().has(Device::cpu(), DType::F8E4M3));
  CHECK(st->gemms() == 3);  // forward, dgrad, wgrad
  CHECK(st->native_gemms() == 0);
}

TEST_CASE("fp8 linear: delayed scaling casts with the scale of past calls and updates after each", "[fp8][fp8_linear]") {
  const int64_t m = 4, i = 16, o = 3;
  Generator g(5);
  auto st = state({.scaling = Fp8Scaling::Delayed, .amax_history_len = 3});
  st->track_stats = true;
  const Tensor w = mul(randn({o, i}, {}, &g), 0.1).requires_grad_();
  const Tensor x1 = mul(randn({m, i}, {}, &g), 1000.0), x2 = randn({m, i}, {}, &g);
  // call 1: the initial scale 1, so |x| above 448 saturates
  const Tensor y1 = fp8_linear(x1, w, Tensor(), st);
  CHECK(st->stats(Fp8Role::Input).scale == 1.0f);
  CHECK(st->stats(Fp8Role::Input).saturated > 0.0);
  const Mat q1 = per_tensor_values(x1, DType::F8E4M3, 1.0f), qw1 = per_tensor_values(w, DType::F8E4M3, 1.0f);
  check_near(y1, product(m, o, i, [&](int64_t r, int64_t c) { return q1[r * i + c]; }, [&](int64_t r, int64_t c) { return qw1[c * i + r]; }), "call 1");
  // after it, the input's scale is 448 / amax(x1) (the history's max), and the history has rolled
  const float a1 = amax(x1).item<float>();
  CHECK(st->delayed(Fp8Role::Input).scale().item<float>() == 448.0f / a1);
  CHECK(st->delayed(Fp8Role::Input).amax_history().to_vector<float>() == std::vector<float>{0.0f, 0.0f, a1});
  // call 2 casts x2 with that scale: small values lose bits, none saturate
  const Tensor y2 = fp8_linear(x2, w, Tensor(), st);
  const float s2 = 448.0f / a1, sw2 = 448.0f / amax(w).item<float>();
  CHECK(st->stats(Fp8Role::Input).scale == s2);
  CHECK(st->stats(Fp8Role::Input).saturated == 0.0);
  const Mat q2 = per_tensor_values(x2, DType::F8E4M3, s2), qw2 = per_tensor_values(w, DType::F8E4M3, sw2);
  check_near(y2, product(m, o, i, [&](int64_t r, int64_t c) { return q2[r * i + c]; }, [&](int64_t r, int64_t c) { return qw2[c * i + r]; }), "call 2");
  // the gradient role is E5M2 in HYBRID, E4M3 in the E4M3 format
  CHECK(st->delayed(Fp8Role::GradOutput).dtype() == DType::F8E5M2);
  CHECK(state({.format = Fp8Format::E4M3})->delayed(Fp8Role::GradOutput).dtype() == DType::F8E4M3);
  sum(y2).backward();
  CHECK(st->delayed(Fp8Role::GradOutput).scale().item<float>() == 57344.0f / 1.0f);  // dy = 1 everywhere
}

TEST_CASE("fp8 linear: MXFP8 multiplies block-scaled values, blocks along each GEMM's reduction dim", "[fp8][fp8_linear][mx]") {
  const int64_t m = 40, i = 70, o = 36;  // short last blocks along every dimension
  Generator g(9);
  Tensor x = randn({m, i}, {}, &g).requires_grad_(), w = mul(randn({o, i}, {}, &g), 0.05).requires_grad_();
  // rows of very different ranges: one scale per block keeps each
  x = mul(x.detach(), rdiv(1.0, add(arange(0, m).reshape({m, 1}).to(DType::F32), 1.0)).to(DType::F32)).requires_grad_();
  for (MxScaleRule rule : {MxScaleRule::Up, MxScaleRule::Floor}) {
    x.zero_grad();
    w.zero_grad();
    auto st = state({.scaling = Fp8Scaling::Mx, .mx_rule = rule});
    const Tensor y = fp8_linear(x, w, Tensor(), st);
    auto mx = [&](const Tensor& t, MxFormat f, int64_t dim) {
      return values(mx_dequantize(mx_quantize(t.detach(), f, {.rule = rule, .dim = dim})));
    };
    const Mat xr = mx(x, MxFormat::MXFP8_E4M3, -1), wr = mx(w, MxFormat::MXFP8_E4M3, -1);
    check_near(y, product(m, o, i, [&](int64_t r, int64_t c) { return xr[r * i + c]; }, [&](int64_t r, int64_t c) { return wr[c * i + r]; }), "forward");
    const Tensor dy = randn({m, o}, {}, &g);
    sum(mul(y, dy)).backward();
    const Mat gr = mx(dy, MxFormat::MXFP8_E5M2, -1), wc = mx(w, MxFormat::MXFP8_E4M3, 0);
    const Mat gc = mx(dy, MxFormat::MXFP8_E5M2, 0), xc = mx(x, MxFormat::MXFP8_E4M3, 0);
    check_near(x.grad(), product(m, i, o, [&](int64_t r, int64_t c) { return gr[r * o + c]; }, [&](int64_t r, int64_t c) { return wc[r * i + c]; }), "dx");
    check_near(w.grad(), product(o, i, m, [&](int64_t r, int64_t c) { return gc[c * o + r]; }, [&](int64_t r, int64_t c) { return xc[r * i + c]; }), "dw");
  }
}

TEST_CASE("fp8 linear: nn::Fp8Linear runs in FP8 under Fp8Autocast, with F16/BF16 inputs too, and nn::Linear never", "[fp8][fp8_linear]") {
  manual_seed(1);
  nn::Linear plain_layer(32, 8);
  manual_seed(1);
  nn::Fp8Linear lin(32, 8, {}, Fp8Recipe{.scaling = Fp8Scaling::Current});
  CHECK(std::memcmp(lin.weight.data_ptr(), plain_layer.weight.data_ptr(), lin.weight.nbytes()) == 0);  // Linear's init
  Generator g(2);
  const Tensor x = randn({4, 3, 32}, {}, &g);
  const Tensor plain = lin(x);
  CHECK(max(abs(sub(plain, plain_layer(x)))).item<float>() == 0.0f);  // outside a guard: high precision
  CHECK(lin.fp8_state().calls() == 0);
  const Fp8Recipe r{.scaling = Fp8Scaling::Current};
  Tensor y;
  {
    amp::Fp8Autocast fp8(r);
    REQUIRE(amp::fp8_recipe() != nullptr);
    y = lin(x);
    CHECK(max(abs(sub(plain_layer(x), plain))).item<float>() == 0.0f);  // Linear knows nothing of FP8
    {
      amp::Fp8Autocast off(r, false);
      CHECK(amp::fp8_recipe() == nullptr);
      CHECK(max(abs(sub(lin(x), plain))).item<float>() == 0.0f);
    }
  }
  CHECK(amp::fp8_recipe() == nullptr);
  CHECK(lin.fp8_state().calls() == 1);
  CHECK(y.shape() == Shape{4, 3, 8});
  CHECK(max(abs(sub(y, fp8_linear(x, lin.weight, lin.bias, state(r))))).item<float>() == 0.0f);
  CHECK(max(abs(sub(y, plain))).item<float>() > 0.0f);
  for (DType dt : {DType::BF16, DType::F16}) {
    amp::Fp8Autocast fp8(r);
    const Tensor yl = lin(x.to(dt));
    CHECK(yl.dtype() == dt);
  }
  // a recipe that is not compatible replaces the state (as TE re-initialises its FP8 metadata); track_stats stays
  lin.fp8_state().track_stats = true;
  const auto first = lin.fp8_state_ptr();
  {
    amp::Fp8Autocast fp8(Fp8Recipe{.scaling = Fp8Scaling::Delayed, .amax_history_len = 2});
    lin(x);
  }
  CHECK(lin.fp8_state_ptr() != first);
  CHECK(lin.fp8_state().has_delayed());
  CHECK(lin.fp8_state().track_stats);
  CHECK(lin.fp8_state().stats(Fp8Role::Input).numel == 4 * 3 * 32);
  std::ostringstream os;
  os << lin;
  CHECK(os.str() == "Fp8Linear(in_features=32, out_features=8, bias=True, fp8=delayed HYBRID, history 2 max, margin 0)");
}

TEST_CASE("fp8 linear: an Fp8Linear's state, statistics and counters exist before its first FP8 call", "[fp8][fp8_linear]") {
  const Fp8Recipe r{.scaling = Fp8Scaling::Delayed, .amax_history_len = 10};
  auto model = std::make_shared<nn::Sequential>(nn::Fp8Linear(16, 8, {}, r), nn::ReLU(), nn::Fp8Linear(8, 4, {}, r));
  auto& first = dynamic_cast<nn::Fp8Linear&>(*(*model)[0]);
  CHECK(first.fp8_state().delayed(Fp8Role::Input).amax_history().shape() == Shape{10});
  CHECK(first.fp8_state().delayed(Fp8Role::GradOutput).dtype() == DType::F8E5M2);
  CHECK(first.fp8_state().stats(Fp8Role::Weight).numel == 0);
  CHECK(first.fp8_state().gemms() == 0);
  first.fp8_state().track_stats = true;
  CHECK(model->state_dict().count("2._extra_state.fp8.weight.scale"));
  // the ledger counts the state before any step: 2 layers x 3 roles x (10 + 2) F32 values
  amp::inspect::MemoryLedger ledger({.model = model.get()});
  CHECK(ledger.snapshot("before").at(amp::inspect::Role::ExtraState, DType::F32) == 2 * 3 * 12 * 4);
  {
    amp::Fp8Autocast fp8(r);
    (*model)(randn({5, 16}));
  }
  CHECK(first.fp8_state().stats(Fp8Role::Input).numel == 5 * 16);  // the flag set before the first call held
  CHECK(first.fp8_state().gemms() == 1);
}

TEST_CASE("fp8 linear: evaluation (eval() or no_grad) casts with the current scales and changes no state", "[fp8][fp8_linear]") {
  const Fp8Recipe recipe{.scaling = Fp8Scaling::Delayed, .amax_history_len = 4};
  Generator g(8);
  const Tensor x = randn({6, 12}, {}, &g), t = randn({6, 4}, {}, &g), xe = mul(randn({6, 12}, {}, &g), 3.0);
  auto make = [&] {
    manual_seed(5);
    auto m = std::make_shared<nn::Sequential>(nn::Linear(12, 16), nn::ReLU(), nn::Linear(16, 4));
    CHECK(nn::convert_to_fp8(*m, recipe) == 2);
    return m;
  };
  auto train_step = [&](nn::Module& m, optim::SGD& opt) {
    opt.zero_grad();
    Tensor loss;
    {
      amp::Fp8Autocast fp8(recipe);
      loss = mse_loss(m(x), t);
    }
    loss.backward();
    opt.step();
  };
  auto same = [](const nn::StateDict& a, const nn::StateDict& b) {
    if (a.size() != b.size()) return false;
    for (const auto& [k, v] : a)
      if (!b.count(k) || std::memcmp(v.data_ptr(), b.at(k).data_ptr(), v.nbytes()) != 0) return false;
    return true;
  };
  auto a = make(), b = make();
  optim::SGD oa(a->parameters(), {.lr = 0.05}), ob(b->parameters(), {.lr = 0.05});
  for (int s = 0; s < 3; ++s) train_step(*a, oa), train_step(*b, ob);
  REQUIRE(same(a->state_dict(), b->state_dict()));
  const nn::StateDict before = clone_state(b->state_dict());
  // b is evaluated three ways between its training steps: eval() under no_grad, eval() with grad mode on, and
  // train() under no_grad; none of them changes a single bit of the model's state
  Tensor ye;
  {
    autograd::NoGradGuard ng;
    b->eval();
    amp::Fp8Autocast fp8(recipe);
    ye = (*b)(xe);
  }
  {
    amp::Fp8Autocast fp8(recipe);
    (*b)(xe);
    b->train();
    autograd::NoGradGuard ng;
    (*b)(xe);
  }
  CHECK(same(before, b->state_dict()));
  auto& l0 = dynamic_cast<nn::Fp8Linear&>(*(*b)[0]);
  CHECK(l0.fp8_state().calls() == 3 + 3);
  // a (not evaluated) and b (evaluated) go on training to the same bits
  for (int s = 0; s < 3; ++s) train_step(*a, oa), train_step(*b, ob);
  CHECK(same(a->state_dict(), b->state_dict()));
  // a training call does change it (so the comparison above can fail)
  const nn::StateDict after = clone_state(a->state_dict());
  train_step(*a, oa);
  CHECK(!same(after, a->state_dict()));
  CHECK(ye.shape() == Shape{6, 4});
}

TEST_CASE("fp8 linear: convert_to_fp8 swaps Linear layers for Fp8Linear holding the same parameters", "[fp8][fp8_linear]") {
  manual_seed(2);
  auto inner = std::make_shared<nn::Sequential>(nn::Linear(8, 8), nn::ReLU());
  nn::Sequential model(nn::Linear(6, 8), nn::ReLU(), inner, nn::Linear(8, 3));
  const std::vector<Tensor> params = model.parameters();
  optim::SGD opt(params, {.lr = 0.1});  // built before the conversion: it must still train the model
  const Tensor x = randn({5, 6});
  const Tensor y32 = model(x);
  const Fp8Recipe r{.scaling = Fp8Scaling::Current};
  CHECK(nn::convert_to_fp8(model, r, {.filter = [](const std::string& name, const nn::Linear&) { return name != "3"; }}) == 2);
  CHECK(dynamic_cast<nn::Fp8Linear*>(model[0].get()) != nullptr);
  CHECK(dynamic_cast<nn::Fp8Linear*>((*inner)[0].get()) != nullptr);
  CHECK(dynamic_cast<nn::Linear*>(model[3].get()) != nullptr);  // left out by the filter
  CHECK(nn::convert_to_fp8(model, r) == 1);                    // the rest; Fp8Linear layers are left as they are
  const std::vector<Tensor> now = model.parameters();
  REQUIRE(now.size() == params.size());
  for (size_t i = 0; i < now.size(); ++i) CHECK(now[i].data_ptr() == params[i].data_ptr());
  CHECK(max(abs(sub(model(x), y32))).item<float>() == 0.0f);  // outside a guard: the same high-precision model
  std::ostringstream os;
  os << model;
  CHECK_THAT(os.str(), Catch::Contains("(0): Fp8Linear(in_features=6, out_features=8, bias=True, fp8=current HYBRID"));
  Tensor loss;
  {
    amp::Fp8Autocast fp8(r);
    const Tensor y8 = model(x);
    CHECK(max(abs(sub(y8, y32))).item<float>() > 0.0f);
    loss = sum(y8);
  }
  const std::vector<float> w0 = params[0].to_vector<float>();
  loss.backward();
  opt.step();
  CHECK(params[0].to_vector<float>() != w0);
  CHECK(dynamic_cast<nn::Fp8Linear&>(*model[0]).fp8_state().gemms() == 2);  // forward and wgrad (x needs no dgrad)
  CHECK(dynamic_cast<nn::Fp8Linear&>(*model[3]).fp8_state().gemms() == 3);  // forward, dgrad, wgrad
  model.eval();
  CHECK(nn::convert_to_fp8(model, r) == 0);
}

// A module that calls a Linear it holds itself: swapping the child in its list would not change what it calls.
struct Holder : nn::Module {
  Holder() { fc = register_module("fc", std::make_shared<nn::Linear>(4, 2)); }
  std::string type_name() const override { return "Holder"; }
  Tensor forward(const Tensor& x) override { return (*fc)(x); }
  std::shared_ptr<nn::Linear> fc;
};

TEST_CASE("fp8 linear: convert_to_fp8 refuses what it cannot swap, and changes nothing then", "[fp8][fp8_linear]") {
  nn::Sequential model(nn::Linear(4, 4), Holder());
  CHECK_THROWS_WITH(nn::convert_to_fp8(model), Catch::Contains("'1.fc' (Linear) is also held outside") &&
                                                   Catch::Contains("declare it as nn::Fp8Linear"));
  CHECK(dynamic_cast<nn::Linear*>(model[0].get()) != nullptr);  // nothing was replaced
  CHECK(nn::convert_to_fp8(model, {}, {.filter = [](const std::string& n, const nn::Linear&) { return n == "0"; }}) == 1);
  nn::Sequential hooked(nn::Linear(4, 4));
  hooked[0]->register_forward_hook([](const nn::Module&, const Tensor&, const Tensor&) {});
  CHECK_THROWS_WITH(nn::convert_to_fp8(hooked), Catch::Contains("'0' (Linear) has 1 forward hook(s)"));
  nn::Linear lone(4, 4);
  CHECK_THROWS_WITH(nn::convert_to_fp8(lone), Catch::Contains("make nn::Fp8Linear(linear, recipe)"));
  CHECK_THROWS_WITH(nn::convert_to_fp8(model, Fp8Recipe{.scaling = Fp8Scaling::Mx, .mx_block = 0}), Catch::Contains("mx_block=0"));
  CHECK_THROWS_WITH(model.replace_module("9", std::make_shared<nn::ReLU>()), Catch::Contains("no child is registered"));
}

TEST_CASE("fp8 linear: a checkpoint of a delayed-scaling run resumes bit for bit", "[fp8][fp8_linear][checkpoint]") {
  test::TempDir dir("fp8_resume");
  const Fp8Recipe recipe{.scaling = Fp8Scaling::Delayed, .amax_history_len = 4};
  auto make = [&] {
    manual_seed(21);
    auto m = std::make_shared<nn::Sequential>(nn::Linear(12, 16), nn::ReLU(), nn::Linear(16, 4));
    nn::convert_to_fp8(*m, recipe);
    return m;
  };
  Generator g(4);
  const Tensor x = randn({10, 12}, {}, &g), t = randn({10, 4}, {}, &g);
  auto run = [&](nn::Module& m, optim::SGD& opt, int from, int to, Generator& noise) {
    for (int s = from; s < to; ++s) {
      opt.zero_grad();
      Tensor loss;
      {
        amp::Fp8Autocast fp8(recipe);
        loss = mse_loss(m(mul(x, 1.0 + 0.5 * std::sin(s))), t);  // the amax moves from step to step
      }
      loss.backward();
      opt.step();
    }
    (void)noise;
  };
  auto a = make();
  optim::SGD oa(a->parameters(), {.lr = 0.05, .momentum = 0.9});
  Generator na(1);
  run(*a, oa, 0, 5, na);
  nn::save_checkpoint(dir / "ck.safetensors", *a, oa, {.step = 5});
  const nn::StateDict saved = a->state_dict();
  CHECK(saved.count("0._extra_state.fp8.input.amax_history"));
  CHECK(saved.count("2._extra_state.fp8.grad_output.scale_inv"));
  run(*a, oa, 5, 10, na);

  auto b = make();
  optim::SGD ob(b->parameters(), {.lr = 0.05, .momentum = 0.9});
  const nn::Checkpoint ck = nn::load_checkpoint(dir / "ck.safetensors", *b, ob);
  CHECK(ck.step == 5);
  Generator nb(1);
  run(*b, ob, 5, 10, nb);
  const nn::StateDict sa = a->state_dict(), sb = b->state_dict();
  REQUIRE(sa.size() == sb.size());
  for (const auto& [k, v] : sa) {
    INFO(k);
    REQUIRE(sb.count(k));
    CHECK(std::memcmp(v.data_ptr(), sb.at(k).data_ptr(), v.nbytes()) == 0);
  }
  // without the FP8 state the resumed run differs (the scales restart at 1)
  auto c = make();
  optim::SGD oc(c->parameters(), {.lr = 0.05, .momentum = 0.9});
  nn::StateDict no_fp8;
  for (const auto& [k, v] : saved)
    if (k.find("_extra_state") == std::string::npos) no_fp8.emplace(k, v);
  c->load_state_dict(no_fp8);
  oc.load_state_dict(ob.state_dict());  // any optimizer state: only the weights' paths are compared below
  Generator nc(1);
  run(*c, oc, 5, 10, nc);
  CHECK(std::memcmp(c->state_dict().at("0.weight").data_ptr(), sa.at("0.weight").data_ptr(), sa.at("0.weight").nbytes()) != 0);
}

TEST_CASE("fp8 linear: bad arguments and mismatched state get errors that name the fix", "[fp8][fp8_linear]") {
  const Tensor x = zeros({2, 4}), w = zeros({3, 4});
  CHECK_THROWS_WITH(fp8_linear(x, w, Tensor(), nullptr), Catch::Contains("make_shared<Fp8LinearState>"));
  auto st = state({});
  CHECK_THROWS_WITH(fp8_linear(zeros({2, 5}), w, Tensor(), st), Catch::Contains("in_features must match"));
  CHECK_THROWS_WITH(fp8_linear(x.to(DType::F64), w, Tensor(), st), Catch::Contains("F32, F16 or BF16"));
  CHECK_THROWS_WITH(fp8_linear(x, w, zeros({4}), st), Catch::Contains("b must be (3)"));
  CHECK_THROWS_WITH(state({.scaling = Fp8Scaling::Current})->delayed(Fp8Role::Input), Catch::Contains("no delayed-scaling"));
  CHECK_THROWS_WITH(amp::Fp8Autocast(Fp8Recipe{.amax_history_len = 0}), Catch::Contains("amax_history_len=0"));
  // a delayed state loaded into a layer, then used with another recipe or history length
  const Fp8Recipe r8{.amax_history_len = 8};
  nn::Fp8Linear a(4, 3, {}, r8), b(4, 3, {}, r8);
  {
    amp::Fp8Autocast fp8(r8);
    a(x);
  }
  b.load_state_dict(a.state_dict());
  CHECK(b.extra_state().size() == 9);
  {
    amp::Fp8Autocast fp8(Fp8Recipe{.scaling = Fp8Scaling::Current});
    CHECK_THROWS_WITH(b(x), Catch::Contains("resume with the recipe"));
  }
  {
    amp::Fp8Autocast fp8(Fp8Recipe{.amax_history_len = 16});
    CHECK_THROWS_WITH(b(x), Catch::Contains("history 16") && Catch::Contains("trained with delayed HYBRID, history 8"));
  }
  {
    amp::Fp8Autocast fp8(r8);
    CHECK_NOTHROW(b(x));
  }
  // loading into a layer whose recipe does not hold that state: refused before anything changes
  nn::Fp8Linear c(4, 3), d(4, 3, {}, Fp8Recipe{.scaling = Fp8Scaling::Current});
  CHECK_THROWS_WITH(c.load_state_dict(a.state_dict()), Catch::Contains("history_len=1024") && Catch::Contains("convert_to_fp8"));
  CHECK_THROWS_WITH(d.load_state_dict(a.state_dict()), Catch::Contains("keeps none"));
  nn::StateDict bad = a.state_dict();
  bad["_extra_state.fp8.input.scale"] = zeros({}, {.dtype = DType::F16});
  CHECK_THROWS_WITH(b.load_state_dict(bad), Catch::Contains("not an F32 FP8 scaling tensor"));
  nn::Linear plain(4, 3);
  CHECK_THROWS_WITH(plain.load_state_dict(a.state_dict()), Catch::Contains("Linear keeps no extra state"));
  nn::ReLU relu;
  CHECK_THROWS_WITH(relu.load_state_dict({{"_extra_state.x", zeros({})}}), Catch::Contains("keeps no extra state"));
}

TEST_CASE("fp8 linear: the inspectors see it: the trace's FP8 math and scales, the ledger's extra state", "[fp8][fp8_linear][inspect]") {
  manual_seed(3);
  auto model = std::make_shared<nn::Sequential>(nn::Linear(16, 8), nn::ReLU(), nn::Linear(8, 4));
  const Tensor x = randn({5, 16});
  const Fp8Recipe r{.scaling = Fp8Scaling::Delayed, .amax_history_len = 10};
  nn::convert_to_fp8(*model, r);
  {
    amp::Fp8Autocast fp8(r);
    (*model)(x);  // the first step: scales 1
  }
  amp::inspect::PrecisionTrace trace(model.get());
  {
    amp::Fp8Autocast fp8(r);
    (*model)(x);
  }
  int fp8_entries = 0;
  for (const auto& e : trace.entries()) {
    if (e.op != amp::OpId::Fp8Linear) continue;
    ++fp8_entries;
    CHECK(e.math.kind == amp::inspect::MathKind::FP8AccumulateF32);
    CHECK_THAT(e.math.detail, Catch::Contains("x, w F8E4M3, dy F8E5M2") && Catch::Contains("x scale") &&
                                  Catch::Contains("delayed HYBRID, history 10"));
    CHECK((e.module == "0" || e.module == "2"));
  }
  CHECK(fp8_entries == 2);
  // the second call's input scale is 448 / amax(x) of the first, and the trace prints it
  const float s = 448.0f / amax(x).item<float>();
  std::ostringstream want;
  want << "x scale " << s;
  CHECK_THAT(trace.entries().front().math.detail, Catch::Contains(want.str()));
  // the ledger: 2 layers x 3 roles x (10 + 2) F32 values of extra state
  amp::inspect::MemoryLedger ledger({.model = model.get()});
  CHECK(ledger.snapshot("fp8").at(amp::inspect::Role::ExtraState, DType::F32) == 2 * 3 * 12 * 4);
}

// docs/AMP.md's FP8 snippet, as printed there (between the markers), on the README's model and random data.
TEST_CASE("fp8 linear: docs/AMP.md's FP8 training loop compiles and trains the README's model", "[fp8][fp8_linear][docs]") {
  hg::manual_seed(0);
  const hg::Tensor images = hg::randn({128, 784}), labels = hg::argmax(hg::randn({128, 10}), 1);
  hg::data::DataLoader loader(hg::data::TensorDataset{images, labels}, {.batch_size = 64, .seed = 0});
  hg::nn::Sequential model(hg::nn::Linear(784, 256), hg::nn::ReLU(), hg::nn::Linear(256, 10));
  hg::optim::SGD opt(model.parameters(), {.lr = 0.05, .momentum = 0.9});
  // docs/AMP.md snippet begin
  const hg::Fp8Recipe recipe{.scaling = hg::Fp8Scaling::Delayed};  // HYBRID, history 1024, "max", margin 0
  hg::nn::convert_to_fp8(model, recipe);                             // its Linear layers become nn::Fp8Linear
  for (auto& [x, y] : loader) {
    opt.zero_grad();
    hg::Tensor loss;
    { hg::amp::Fp8Autocast fp8(recipe);                             // Fp8Linear layers compute in FP8 inside
      loss = hg::cross_entropy(model(x), y); }
    loss.backward();                                                // the FP8 backward was recorded
    opt.step();
  }
  // docs/AMP.md snippet end
  auto& first = dynamic_cast<hg::nn::Fp8Linear&>(*model[0]);
  CHECK(first.fp8_state().calls() == 2);
  CHECK(first.fp8_state().gemms() == 2 * 2);  // forward and wgrad per batch (the images need no gradient: no dgrad)
  CHECK(first.fp8_state().delayed(Fp8Role::Input).scale().item<float>() != 1.0f);  // the scales moved
}
