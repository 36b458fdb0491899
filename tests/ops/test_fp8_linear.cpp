// The FP8 linear layer (ops/fp8_linear.h) against references computed here from the definitions: per-tensor
// scaling quantizes x and w to E4M3 (dy to E5M2 in HYBRID), multiplies the FP8 values exactly, sums and
// multiplies by the inverse scales; MXFP8 multiplies the block-decoded values, blocks along each GEMM's
// reduction dimension. Then nn::Linear under amp::Fp8Autocast, and a checkpoint that resumes bit for bit.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

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

TEST_CASE("fp8 linear: nn::Linear runs in FP8 under Fp8Autocast, with F16/BF16 inputs too", "[fp8][fp8_linear]") {
  manual_seed(1);
  nn::Linear lin(32, 8);
  Generator g(2);
  const Tensor x = randn({4, 3, 32}, {}, &g);
  const Tensor plain = lin(x);
  CHECK(lin.fp8_state == nullptr);
  const Fp8Recipe r{.scaling = Fp8Scaling::Current};
  Tensor y;
  {
    amp::Fp8Autocast fp8(r);
    REQUIRE(amp::fp8_recipe() != nullptr);
    y = lin(x);
    {
      amp::Fp8Autocast off(r, false);
      CHECK(amp::fp8_recipe() == nullptr);
      CHECK(max(abs(sub(lin(x), plain))).item<float>() == 0.0f);
    }
  }
  CHECK(amp::fp8_recipe() == nullptr);
  REQUIRE(lin.fp8_state != nullptr);
  CHECK(y.shape() == Shape{4, 3, 8});
  CHECK(max(abs(sub(y, fp8_linear(x, lin.weight, lin.bias, state(r))))).item<float>() == 0.0f);
  CHECK(max(abs(sub(y, plain))).item<float>() > 0.0f);
  for (DType dt : {DType::BF16, DType::F16}) {
    amp::Fp8Autocast fp8(r);
    const Tensor yl = lin(x.to(dt));
    CHECK(yl.dtype() == dt);
  }
  // a recipe that is not compatible replaces the state
  const auto first = lin.fp8_state;
  {
    amp::Fp8Autocast fp8(Fp8Recipe{.scaling = Fp8Scaling::Delayed, .amax_history_len = 2});
    lin(x);
  }
  CHECK(lin.fp8_state != first);
  CHECK(lin.fp8_state->has_delayed());
}

TEST_CASE("fp8 linear: a checkpoint of a delayed-scaling run resumes bit for bit", "[fp8][fp8_linear][checkpoint]") {
  test::TempDir dir("fp8_resume");
  const Fp8Recipe recipe{.scaling = Fp8Scaling::Delayed, .amax_history_len = 4};
  auto make = [] {
    manual_seed(21);
    return std::make_shared<nn::Sequential>(nn::Linear(12, 16), nn::ReLU(), nn::Linear(16, 4));
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
  nn::Linear a(4, 3), b(4, 3);
  {
    amp::Fp8Autocast fp8(Fp8Recipe{.amax_history_len = 8});
    a(x);
  }
  b.load_state_dict(a.state_dict());
  CHECK(b.extra_state().size() == 9);  // kept while waiting for the first FP8 call
  {
    amp::Fp8Autocast fp8(Fp8Recipe{.scaling = Fp8Scaling::Current});
    CHECK_THROWS_WITH(b(x), Catch::Contains("resume with the recipe"));
  }
  {
    amp::Fp8Autocast fp8(Fp8Recipe{.amax_history_len = 16});
    CHECK_THROWS_WITH(b(x), Catch::Contains("history_len=16"));
  }
  nn::StateDict bad = a.state_dict();
  bad["_extra_state.fp8.input.scale"] = zeros({}, {.dtype = DType::F16});
  CHECK_THROWS_WITH(b.load_state_dict(bad), Catch::Contains("not an F32 FP8 scaling tensor"));
  nn::ReLU relu;
  CHECK_THROWS_WITH(relu.load_state_dict({{"_extra_state.x", zeros({})}}), Catch::Contains("keeps no extra state"));
}

TEST_CASE("fp8 linear: the inspectors see it: the trace's FP8 math and scales, the ledger's extra state", "[fp8][fp8_linear][inspect]") {
  manual_seed(3);
  auto model = std::make_shared<nn::Sequential>(nn::Linear(16, 8), nn::ReLU(), nn::Linear(8, 4));
  const Tensor x = randn({5, 16});
  const Fp8Recipe r{.scaling = Fp8Scaling::Delayed, .amax_history_len = 10};
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
