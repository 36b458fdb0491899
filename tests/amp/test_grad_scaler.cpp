// amp::GradScaler against torch.amp.GradScaler's documented algorithm and usage rules
// (torch/amp/grad_scaler.py and the torch.amp docs) and Apex/Megatron's extras (apex/amp/scaler.py, Megatron-LM's
// DynamicGradScaler: min/max scale, hysteresis).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cfloat>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "amp/grad_scaler.h"
#include "ops/kernels/scaler.h"
#include "core/tensor.h"
#include "ops/elementwise.h"
#include "ops/reduce.h"
#include "optim/adam.h"
#include "optim/clip.h"
#include "optim/sgd.h"
#include "test_util.h"

using namespace hg;
using hg::test::capture_stderr;
using namespace hg::amp;
using hg::optim::SGD;
using Vec = std::vector<double>;

namespace {

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

using test::make_param;
using test::set_grad;
using test::values;

// One iteration with the given (already scaled) gradient: step, then update.
StepResult iterate(GradScaler& s, optim::Optimizer& opt, const Tensor& p, const Vec& g) {
  set_grad(p, g);
  const StepResult r = s.step(opt);
  s.update();
  return r;
}


// The factor p's gradient still carries (1 when none), as the update forms it: host * inv_scale * clip.
double pending(const Tensor& p) {
  const GradUnscale f = p.grad_unscale();
  double v = f.host;
  if (f.inv_scale != nullptr) {
    float x = 0.0f;
    copy_bytes(&x, Device::cpu(), f.inv_scale, p.device(), sizeof x);
    v *= static_cast<double>(x);
  }
  if (f.clip != nullptr) {
    double c = 0.0;
    copy_bytes(&c, Device::cpu(), f.clip, p.device(), sizeof c);
    v *= c;
  }
  return v;
}

size_t count_of(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("GradScaler: torch's defaults, scale() multiplies the loss in F32 and is differentiable", "[amp][scaler]") {
  GradScaler s;
  CHECK(s.options().init_scale == 65536.0);
  CHECK(s.options().growth_factor == 2.0);
  CHECK(s.options().backoff_factor == 0.5);
  CHECK(s.options().growth_interval == 2000);
  CHECK(s.is_enabled());
  CHECK(s.get_scale() == 65536.0);
  GradScaler s1k({.init_scale = 1024.0});  // 2^16 itself is inf in F16 (max 65504): the scaler would back off
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    INFO(dt);
    Tensor w = make_param({0.5, -0.25, 2.0}, dt);
    Tensor loss = sum(mul(w, w));
    Tensor scaled = s1k.scale(loss);
    CHECK(scaled.dtype() == DType::F32);
    CHECK(scaled.item<double>() == loss.item<double>() * 1024.0);
    scaled.backward();
    const Vec g = values(w.grad()), wv = values(w);
    for (size_t i = 0; i < g.size(); ++i) CHECK(g[i] == 2 * wv[i] * 1024.0);  // exact: powers of two
  }
  CHECK(s.scale(make_param({3.0})).item<double>() == 3.0 * 65536.0);
  REQUIRE_THROWS_WITH(GradScaler({.growth_factor = 1.0}), Catch::Contains("growth_factor=1"));
  REQUIRE_THROWS_WITH(GradScaler({.backoff_factor = 1.0}), Catch::Contains("backoff_factor=1"));
  REQUIRE_THROWS_WITH(GradScaler({.init_scale = 8.0, .max_scale = 4.0}), Catch::Contains("max_scale"));
}

TEST_CASE("GradScaler: grows by growth_factor after growth_interval clean steps, backs off and skips on inf/NaN",
          "[amp][scaler]") {
  for (double bad : {kInf, -kInf, kNaN}) {
    INFO("bad gradient " << bad);
    GradScaler s({.init_scale = 1024.0, .growth_interval = 3});
    Tensor p = make_param({1.0, 2.0});
    SGD opt({p}, {.lr = 0.5});
    for (int k = 0; k < 2; ++k) {
      const StepResult r = iterate(s, opt, p, {1024.0, 2048.0});
      CHECK(r.stepped());
      CHECK_FALSE(r.found_inf());
      CHECK(r.scale() == 1024.0);
      CHECK(s.growth_tracker() == k + 1);
    }
    CHECK(values(p) == Vec{0.0, 0.0});  // two unscaled steps of grad (1, 2) at lr 0.5
    iterate(s, opt, p, {1024.0, 1024.0});
    CHECK(s.get_scale() == 2048.0);  // the third clean step grows the scale
    CHECK(s.growth_tracker() == 0);
    const Vec before = values(p);
    iterate(s, opt, p, {2048.0, 0.0});
    CHECK(s.growth_tracker() == 1);
    const StepResult r = iterate(s, opt, p, {1.0, bad});
    CHECK_FALSE(r.stepped());
    CHECK(r.found_inf());
    CHECK(r.scale() == 2048.0);
    CHECK(s.get_scale() == 1024.0);  // backoff 0.5
    CHECK(s.growth_tracker() == 0);  // and the tracker restarts
    CHECK(values(p)[0] == before[0] - 0.5);  // only the clean step moved p
  }
}

TEST_CASE("GradScaler: never grows to inf, max_scale caps growth, min_scale floors backoff", "[amp][scaler]") {
  const double big = std::ldexp(1.0, 127);  // F32's largest power of two: doubling it is inf
  GradScaler s({.init_scale = big, .growth_interval = 1});
  Tensor p = make_param({0.0});
  SGD opt({p}, {.lr = 0.1});
  iterate(s, opt, p, {1.0});
  CHECK(s.get_scale() == big);  // torch: keep the scale when growth would overflow
  CHECK(std::isfinite(s.get_scale()));

  GradScaler capped({.init_scale = 4.0, .growth_interval = 1, .min_scale = 1.0, .max_scale = 16.0});
  for (int k = 0; k < 5; ++k) iterate(capped, opt, p, {1.0});
  CHECK(capped.get_scale() == 16.0);
  for (int k = 0; k < 6; ++k) iterate(capped, opt, p, {kInf});
  CHECK(capped.get_scale() == 1.0);
}

TEST_CASE("GradScaler: hysteresis backs off only after k overflows in a row", "[amp][scaler]") {
  GradScaler s({.init_scale = 256.0, .growth_interval = 100, .hysteresis = 2});
  Tensor p = make_param({0.0});
  SGD opt({p}, {.lr = 0.1});
  CHECK_FALSE(iterate(s, opt, p, {kInf}).stepped());  // still skipped
  CHECK(s.get_scale() == 256.0);                     // first overflow: tolerated
  CHECK(s.hysteresis_left() == 1);
  iterate(s, opt, p, {1.0});  // a clean step resets the count
  CHECK(s.hysteresis_left() == 2);
  iterate(s, opt, p, {kNaN});
  CHECK(s.get_scale() == 256.0);
  iterate(s, opt, p, {kNaN});
  CHECK(s.get_scale() == 128.0);  // the second in a row backs off
  iterate(s, opt, p, {kInf});
  CHECK(s.get_scale() == 64.0);  // and every further one in a row
}

TEST_CASE("GradScaler: a scale below 1 warns once on stderr", "[amp][scaler]") {
  GradScaler s({.init_scale = 4.0});
  Tensor p = make_param({0.0});
  SGD opt({p}, {.lr = 0.1});
  const std::string err = capture_stderr([&] {
    for (int k = 0; k < 5; ++k) iterate(s, opt, p, {kInf});
  });
  CHECK(s.get_scale() == 0.125);  // torch does not stop at 1
  CHECK(count_of(err, "fell below 1") == 1);
  const std::string none = capture_stderr([&] { GradScaler quiet({.init_scale = 4.0}); });
  CHECK(none.empty());
}

TEST_CASE("GradScaler: the three misuses of the per-optimizer state machine throw and name the fix", "[amp][scaler]") {
  GradScaler s;
  Tensor p = make_param({1.0});
  SGD opt({p}, {.lr = 0.1});
  set_grad(p, {65536.0});
  s.unscale_(opt);
  REQUIRE_THROWS_WITH(s.unscale_(opt), Catch::Contains("unscale_() has already been called on this optimizer since the last update()"));
  s.step(opt);
  REQUIRE_THROWS_WITH(s.step(opt), Catch::Contains("step() has already been called") && Catch::Contains("call update()"));
  REQUIRE_THROWS_WITH(s.unscale_(opt), Catch::Contains("unscale_() is being called after step()"));
  s.update();  // every optimizer back to READY
  set_grad(p, {65536.0});
  CHECK_NOTHROW(s.unscale_(opt));
  CHECK_NOTHROW(s.step(opt));
  s.update();
  REQUIRE_THROWS_WITH(s.update(), Catch::Contains("no inf checks were recorded"));
}

TEST_CASE("GradScaler: gradient accumulation over several backward passes, one step", "[amp][scaler]") {
  const Vec w0 = {0.5, -1.5, 2.0};
  const std::vector<Vec> xs = {{1.0, 2.0, -1.0}, {0.25, -0.5, 4.0}, {3.0, 1.0, 0.5}};
  Tensor w = make_param(w0), ref = make_param(w0);
  SGD opt({w}, {.lr = 0.1}), ref_opt({ref}, {.lr = 0.1});
  GradScaler s({.init_scale = 1024.0});
  for (const Vec& x : xs) {  // loss / iters_to_accumulate, scaled, accumulated
    const Tensor xt = from_vector(x, {3});
    s.scale(div(sum(mul(w, xt)), 3.0)).backward();
    div(sum(mul(ref, xt)), 3.0).backward();
  }
  const StepResult r = s.step(opt);
  s.update();
  ref_opt.step();
  CHECK(r.stepped());
  CHECK(values(w) == values(ref));  // scaling by a power of two is exact
  CHECK(s.get_scale() == 1024.0);   // one update for the effective batch
  CHECK(s.growth_tracker() == 1);
}

TEST_CASE("GradScaler: an overflow in one accumulated micro-batch skips the whole step and backs off once",
          "[amp][scaler]") {
  const Vec w0 = {0.5, -1.5, 2.0};
  Tensor w = make_param(w0);
  SGD opt({w}, {.lr = 0.1});
  GradScaler s({.init_scale = 1024.0});
  const std::vector<Vec> xs = {{1.0, 2.0, -1.0}, {kInf, -0.5, 4.0}, {3.0, 1.0, 0.5}};  // the 2nd overflows
  for (const Vec& x : xs) s.scale(div(sum(mul(w, from_vector(x, {3}))), 3.0)).backward();
  const StepResult r = s.step(opt);
  s.update();
  CHECK_FALSE(r.stepped());
  CHECK(values(w) == w0);           // none of the three micro-batches reached the weights
  CHECK(s.get_scale() == 512.0);    // one backoff for the effective batch, not one per micro-batch
  // the next effective batch starts from zeroed gradients and steps
  opt.zero_grad();
  for (size_t k = 0; k < 2; ++k) s.scale(div(sum(mul(w, from_vector(xs[k == 0 ? 0 : 2], {3}))), 2.0)).backward();
  CHECK(s.step(opt).stepped());
  s.update();
  CHECK(values(w) != w0);
}

TEST_CASE("GradScaler: several losses, two optimizers, one update, each optimizer skips on its own", "[amp][scaler]") {
  Tensor a = make_param({1.0, 2.0}), b = make_param({3.0});
  SGD oa({a}, {.lr = 0.5});
  optim::Adam ob({b}, {.lr = 0.1});
  GradScaler s({.init_scale = 8.0, .growth_interval = 1});
  const Tensor x = from_vector(Vec{2.0, -1.0}, {2});
  s.scale(sum(mul(a, x))).backward();  // two losses, each scaled
  s.scale(mul(sum(mul(b, b)), 0.5)).backward();
  set_grad(b, {kInf});  // b's optimizer overflows, a's does not
  const StepResult ra = s.step(oa), rb = s.step(ob);
  s.update();
  CHECK(ra.stepped());
  CHECK_FALSE(rb.stepped());
  CHECK(values(a) == Vec{0.0, 2.5});  // grad x unscaled, lr 0.5
  CHECK(values(b) == Vec{3.0});
  CHECK(s.get_scale() == 4.0);  // one backoff for the iteration, not one per optimizer
  set_grad(a, {8.0, 8.0});
  set_grad(b, {4.0});
  CHECK(s.step(oa).stepped());
  CHECK(s.step(ob).stepped());
  s.update();
  CHECK(s.get_scale() == 8.0);  // growth_interval 1: both clean
}

TEST_CASE("GradScaler: clipping after unscale_ sees unscaled gradients, step does not unscale twice", "[amp][scaler]") {
  for (DType dt : {DType::F32, DType::BF16}) {
    INFO(dt);
    Tensor p = make_param({1.0, 1.0}, dt), ref = make_param({1.0, 1.0}, dt);
    SGD opt({p}, {.lr = 1.0}), ref_opt({ref}, {.lr = 1.0});
    GradScaler s({.init_scale = 4096.0});
    set_grad(p, {3.0 * 4096, 4.0 * 4096});
    set_grad(ref, {3.0, 4.0});
    s.unscale_(opt);
    CHECK(values(p.grad()) == Vec{3.0, 4.0});
    const double norm = optim::clip_grad_norm_({p}, 1.0);
    CHECK(norm == Approx(5.0));
    optim::clip_grad_norm_({ref}, 1.0);
    CHECK(s.step(opt).stepped());
    s.update();
    ref_opt.step();
    CHECK(values(p) == values(ref));
  }
}

TEST_CASE("GradScaler: state_dict round trip continues identically, empty and bad dicts throw", "[amp][scaler]") {
  GradScalerOptions o{.init_scale = 64.0, .growth_interval = 3, .min_scale = 0.5, .hysteresis = 2};
  GradScaler s(o);
  Tensor p = make_param({0.0});
  SGD opt({p}, {.lr = 0.1});
  const Vec pattern = {1.0, kInf, kInf, 1.0, 1.0, kInf, 1.0, 1.0, 1.0, 1.0, kInf};
  for (size_t k = 0; k < 5; ++k) iterate(s, opt, p, {pattern[k]});
  const optim::StateDict sd = s.state_dict();
  CHECK(sd.size() == 12);
  CHECK(sd.at("scale").item<double>() == s.get_scale());
  GradScaler t({.init_scale = 2.0});  // other options: all come from the dict
  t.load_state_dict(sd);
  CHECK(t.get_scale() == s.get_scale());
  CHECK(t.options().growth_interval == 3);
  CHECK(t.options().hysteresis == 2);
  for (size_t k = 5; k < pattern.size(); ++k) {
    iterate(s, opt, p, {pattern[k]});
    iterate(t, opt, p, {pattern[k]});
    CHECK(t.get_scale() == s.get_scale());
    CHECK(t.growth_tracker() == s.growth_tracker());
    CHECK(t.hysteresis_left() == s.hysteresis_left());
    CHECK(t.skipped_in_a_row() == s.skipped_in_a_row());
  }
  REQUIRE_THROWS_WITH(t.load_state_dict({}), Catch::Contains("saved from a disabled GradScaler"));
  optim::StateDict missing = sd;
  missing.erase("_growth_tracker");
  REQUIRE_THROWS_WITH(t.load_state_dict(missing), Catch::Contains("missing entry '_growth_tracker'"));
  // an older halfgrad's name for the tracker still loads
  optim::StateDict old_name = sd;
  old_name["growth_tracker"] = old_name.at("_growth_tracker");
  old_name.erase("_growth_tracker");
  GradScaler u({.init_scale = 2.0});
  u.load_state_dict(old_name);
  CHECK(u.growth_tracker() == static_cast<int64_t>(sd.at("_growth_tracker").item<double>()));
  optim::StateDict extra = sd;
  extra["foo"] = full(Shape{}, 1.0, {.dtype = DType::F64});
  REQUIRE_THROWS_WITH(t.load_state_dict(extra), Catch::Contains("unexpected entry 'foo'"));
  CHECK(GradScaler({.enabled = false}).state_dict().empty());
}

TEST_CASE("GradScaler: state_dict has torch's keys, and a dict of torch's five entries loads", "[amp][scaler]") {
  GradScaler s;
  Tensor p = make_param({0.0});
  SGD opt({p}, {.lr = 0.1});
  for (int k = 0; k < 3; ++k) iterate(s, opt, p, {1.0});
  const optim::StateDict sd = s.state_dict();
  for (const char* key : {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"})
    CHECK(sd.count(key) == 1);
  CHECK(sd.at("_growth_tracker").item<double>() == 3.0);
  // torch.cuda.amp.GradScaler().state_dict() after 7 clean steps at scale 2^10, its _scale of shape [1], counts
  // as I64: the scaler continues from there with this one's own hysteresis and bounds
  const optim::StateDict torch_like = {{"scale", full({1}, 1024.0)},
                                       {"growth_factor", full({}, 2.0, {.dtype = DType::F64})},
                                       {"backoff_factor", full({}, 0.5, {.dtype = DType::F64})},
                                       {"growth_interval", full({}, 8.0, {.dtype = DType::I64})},
                                       {"_growth_tracker", full({}, 7.0, {.dtype = DType::I64})}};
  GradScaler t;
  t.load_state_dict(torch_like);
  CHECK(t.get_scale() == 1024.0);
  CHECK(t.growth_tracker() == 7);
  CHECK(t.options().growth_interval == 8);
  iterate(t, opt, p, {1.0});  // the 8th clean step doubles the scale
  CHECK(t.get_scale() == 2048.0);
  CHECK(t.growth_tracker() == 0);
  optim::StateDict two = torch_like;
  two["scale"] = full({2}, 1.0);
  REQUIRE_THROWS_WITH(t.load_state_dict(two), Catch::Contains("must hold one number"));
}

TEST_CASE("GradScaler: step with no gradient at all is torch's error, naming the fix", "[amp][scaler]") {
  GradScaler s;
  Tensor p = make_param({1.0});
  SGD opt({p}, {.lr = 1.0});
  REQUIRE_THROWS_WITH(s.step(opt), Catch::Contains("no inf checks were recorded"));
  CHECK(values(p) == Vec{1.0});
  GradScaler t;  // with a gradient it steps
  set_grad(p, {0.5});
  CHECK(t.step(opt).stepped());
}

TEST_CASE("GradScaler: static scale keeps the scale but still skips inf/NaN steps", "[amp][scaler]") {
  GradScaler s({.init_scale = 128.0, .growth_interval = 1, .dynamic = false});
  Tensor p = make_param({1.0});
  SGD opt({p}, {.lr = 1.0});
  CHECK(iterate(s, opt, p, {128.0}).stepped());
  CHECK(s.get_scale() == 128.0);
  CHECK_FALSE(iterate(s, opt, p, {kInf}).stepped());
  CHECK(s.get_scale() == 128.0);
  CHECK(values(p) == Vec{0.0});
  s.update(32.0);  // update(new_scale) sets it
  CHECK(s.get_scale() == 32.0);
}

TEST_CASE("GradScaler: disabled, it passes everything through", "[amp][scaler]") {
  GradScaler s({.enabled = false});
  Tensor p = make_param({1.0});
  SGD opt({p}, {.lr = 1.0});
  Tensor loss = sum(mul(p, p));
  CHECK(s.scale(loss).same(loss));
  CHECK(s.get_scale() == 1.0);
  CHECK_FALSE(s.is_enabled());
  set_grad(p, {0.5});
  s.unscale_(opt);
  CHECK(values(p.grad()) == Vec{0.5});  // no-op
  CHECK(s.step(opt).stepped());           // just steps
  CHECK_NOTHROW(s.step(opt));           // no state machine
  CHECK_NOTHROW(s.update());
  CHECK(values(p) == Vec{0.0});
  s.load_state_dict({});  // ignored, as torch
}

TEST_CASE("GradScaler: F16 gradients stay scaled, the optimizer unscales them in F32 in its update", "[amp][scaler]") {
  Tensor p = make_param({1.0, 2.0}, DType::F16), ref = make_param({1.0, 2.0}, DType::F32);
  optim::Adam opt({p}, {.lr = 0.01}), ref_opt({ref}, {.lr = 0.01});
  GradScaler s({.init_scale = 1024.0});
  set_grad(p, {0.5 * 1024, -0.25 * 1024});
  set_grad(ref, {0.5, -0.25});
  s.unscale_(opt);
  CHECK(values(p.grad()) == Vec{512.0, -256.0});  // not unscaled in F16
  CHECK(pending(p) == 1.0 / 1024);
  s.step(opt);
  s.update();
  ref_opt.step();
  CHECK(values(opt.master(0)) == values(ref));  // the F32 unscale, fused in the update
  CHECK(pending(p) == 1.0 / 1024);  // the gradient is still scaled: its factor stays with it
  // An inf F16 gradient skips the step and leaves the master as it was.
  const Vec master = values(opt.master(0));
  set_grad(p, {kInf, 1.0});
  CHECK_FALSE(s.step(opt).stepped());
  s.update();
  CHECK(values(opt.master(0)) == master);
  CHECK(pending(p) == 1.0 / 1024);  // checked at the scale of its step (update backs off afterwards)
  opt.zero_grad();
  CHECK(pending(p) == 1.0);
}

TEST_CASE("GradScaler: F16 parameters with masters train like F32, without scaling, F16 gradients underflow",
          "[amp][scaler]") {
  // loss = 1e-4 * sum(w * x): dw = 1e-4 x ~ 1e-8..1e-7, F16 subnormal or zero; scaled by 2^15 it is
  // a normal F16. lr * dw <= 1e-4 is also below half an ulp of w, so the master is needed too.
  const Vec w0 = {1.0, -0.5, 0.75, 1.5, -1.25, 0.3};
  const Vec x0 = {1e-3, 2.5e-4, -7e-4, 4e-4, -1.5e-4, 9e-4};
  const Tensor x16 = from_vector(x0, {6}, {.dtype = DType::F16});
  const Tensor x32 = x16.to(DType::F32);  // the same values
  auto train = [&](const Tensor& w, const Tensor& x, GradScaler& s, optim::Optimizer& opt) {
    for (int k = 0; k < 50; ++k) {
      opt.zero_grad();
      Tensor loss = mul(sum(mul(w, x)).to(DType::F32), 1e-4);
      s.scale(loss).backward();
      s.step(opt);
      s.update();
    }
  };
  Tensor w16 = make_param(w0, DType::F16), w32 = make_param(values(w16), DType::F32), wraw = make_param(w0, DType::F16);
  SGD o16({w16}, {.lr = 1000.0}), o32({w32}, {.lr = 1000.0}), oraw({wraw}, {.lr = 1000.0});
  GradScaler s16({.init_scale = 32768.0}), s32({.enabled = false}), off({.enabled = false});
  train(w16, x16, s16, o16);
  train(w32, x32, s32, o32);
  train(wraw, x16, off, oraw);
  const Vec m = values(o16.master(0)), want = values(w32), raw = values(oraw.master(0));
  double err = 0, err_raw = 0, moved = 0;
  for (size_t i = 0; i < m.size(); ++i) {
    moved = std::max(moved, std::fabs(want[i] - w0[i]));
    err = std::max(err, std::fabs(m[i] - want[i]));
    err_raw = std::max(err_raw, std::fabs(raw[i] - want[i]));
  }
  CHECK(moved > 1e-3);          // the F32 run moved the weights by more than an F16 ulp
  INFO("moved " << moved << ", error with scaling " << err << ", without " << err_raw);
  CHECK(err < 2e-3 * moved);    // scaled F16 gradients + F32 master: within F16 gradient rounding
  CHECK(err_raw > 10 * err);    // unscaled: subnormal/zero gradients
  CHECK(values(w16) != values(make_param(w0, DType::F16)));  // the F16 parameters changed
  CHECK(s16.get_scale() == 32768.0);  // no overflow: the scale held
}

TEST_CASE("unscale kernel: g * inv_scale in the compute type, finite check in the same pass, any size",
          "[amp][scaler]") {
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    for (int64_t n : {int64_t{7}, int64_t{200003}}) {  // the serial and the OpenMP path
      INFO(dt << " n=" << n);
      Vec v(static_cast<size_t>(n));
      for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37 * static_cast<double>(i)) * 512.0;
      Tensor g = from_vector(v, {n}, {.dtype = dt});
      const Vec before = values(g);
      const double inv = static_cast<float>(1.0 / 3.0);  // not a power of two: the product rounds
      float found = 0.0f;
      UnscaleArgs a{.n = n, .grad = g.data_ptr(), .inv_scale = inv, .write = false, .found_inf = &found};
      unscale_kernels().get(Device::cpu(), dt)({&a, 1});
      CHECK(values(g) == before);  // check only
      CHECK(found == 0.0f);
      a.write = true;
      unscale_kernels().get(Device::cpu(), dt)({&a, 1});
      CHECK(found == 0.0f);
      // the reference: widen, multiply in the compute type, round to dt
      Vec want(before.size());
      for (size_t i = 0; i < want.size(); ++i)
        want[i] = dt == DType::F64 ? before[i] * inv : static_cast<double>(static_cast<float>(before[i]) * static_cast<float>(inv));
      CHECK(values(g) == values(from_vector(want, {n}, {.dtype = dt})));
      for (double bad : {kInf, kNaN}) {
        Vec w = before;
        w[w.size() - 1] = bad;  // in the last block
        Tensor h = from_vector(w, {n}, {.dtype = dt});
        float f = 0.0f;
        const UnscaleArgs bad_args{.n = n, .grad = h.data_ptr(), .inv_scale = inv, .write = true, .found_inf = &f};
        unscale_kernels().get(Device::cpu(), dt)({&bad_args, 1});
        CHECK(f == 1.0f);
      }
    }
  }
  ScaleState st{.scale = 8.0f, .growth_tracker = 0, .hysteresis_left = 1};
  scale_update(st, true, {});
  CHECK(st.scale == 4.0f);
}

TEST_CASE("GradScaler: clip_grad_norm_(opt) after unscale_ clips still-scaled F16 gradients as unscaled ones",
          "[amp][scaler]") {
  Tensor a = make_param({1.0, 2.0}, DType::F16), b = make_param({0.5}, DType::F32);
  Tensor ra = make_param({1.0, 2.0}, DType::F32), rb = make_param({0.5}, DType::F32);
  SGD opt({a, b}, {.lr = 0.5}), ref({ra, rb}, {.lr = 0.5});
  GradScaler s({.init_scale = 256.0});
  set_grad(a, {3.0 * 256, 0.0});
  set_grad(b, {4.0 * 256});
  set_grad(ra, {3.0, 0.0});
  set_grad(rb, {4.0});
  s.unscale_(opt);
  const double norm = optim::clip_grad_norm_(opt, 1.0);
  CHECK(norm == Approx(5.0).epsilon(1e-12));                   // the unscaled norm
  CHECK(values(a.grad()) == Vec{768.0, 0.0});                  // F16 gradient untouched, still scaled
  CHECK(pending(a) == Approx(1.0 / 256 / (5.0 + 1e-6)));  // the clip folded into the factor
  CHECK(optim::clip_grad_norm_({ra, rb}, 1.0) == Approx(5.0).epsilon(1e-12));
  CHECK(optim::clip_grad_norm_(ref, 100.0) == Approx(1.0).epsilon(1e-6));  // no pending factor: the plain norm
  CHECK(s.step(opt).stepped());
  s.update();
  ref.step();
  const Vec got = values(opt.master(0)), want = values(ra);
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(1e-6));
  CHECK(values(b) == values(rb));
}

// ---- the device path (StepSkip::Kernel), run on the CPU: the same numbers as the host path -------------

namespace {

enum class OptKind { Sgd, Adam, AdamW };

std::unique_ptr<optim::Optimizer> make_optimizer(OptKind k, std::vector<Tensor> ps) {
  switch (k) {
    case OptKind::Sgd:  // dampening: a skipped first step must leave the next one "first" (buf = g)
      return std::make_unique<SGD>(std::move(ps), optim::SGDArgs{.lr = 0.1, .momentum = 0.9, .dampening = 0.25});
    case OptKind::Adam:
      return std::make_unique<optim::Adam>(std::move(ps), optim::AdamArgs{.lr = 0.01, .weight_decay = 0.1});
    default:
      return std::make_unique<optim::AdamW>(std::move(ps), optim::AdamWArgs{.lr = 0.01, .amsgrad = true});
  }
}

std::string bytes_of(const Tensor& t) {
  if (!t.defined()) return "undefined";
  return std::string(static_cast<const char*>(t.data_ptr()), t.nbytes());
}

// Everything observable of a run: per iteration the StepResult (read after update(), as a scheduler
// would), the scale, trackers and parameter bits; at the end the optimizer's state dict.
struct Trace {
  std::vector<std::string> rows;
  optim::StateDict sd;
  bool on_device = false;
};

// 12 iterations over an F32 parameter and one of dtype dt, with inf/NaN gradients on some, clipping
// on others, one update(new_scale) and a state_dict round trip of the scaler in the middle.
Trace run_scaler(StepSkip skip, OptKind kind, DType dt, GradScalerOptions o) {
  o.step_skip = skip;
  GradScaler s(o);
  Tensor a = make_param({0.5, -1.0, 2.0}, dt), b = make_param({0.25, 4.0});
  auto opt = make_optimizer(kind, {a, b});
  Trace tr;
  for (int k = 0; k < 12; ++k) {
    opt->zero_grad();
    const double sc = s.get_scale(), f = 1.0 + 0.1 * k;
    Vec ga = {0.3 * f * sc, -0.2 * f * sc, 0.7 * sc}, gb = {-0.5 * sc, 0.1 * f * sc};
    if (k == 0 || k == 3 || k == 4 || k == 7) ga[1] = k == 4 ? kNaN : kInf;
    if (k == 9) gb[0] = kNaN;
    set_grad(a, ga);
    set_grad(b, gb);
    if (k % 3 == 1) {
      s.unscale_(*opt);
      optim::clip_grad_norm_(*opt, 0.5);
    }
    const StepResult r = s.step(*opt);
    if (k == 6) s.update(512.0);
    else s.update();
    if (k == 8) s.load_state_dict(s.state_dict());
    std::ostringstream row;
    row << k << ": stepped " << r.stepped() << " found_inf " << r.found_inf() << " scale " << r.scale() << " -> "
        << s.get_scale() << " growth " << s.growth_tracker() << " hysteresis " << s.hysteresis_left();
    tr.rows.push_back(row.str() + " a " + bytes_of(a) + " b " + bytes_of(b));
  }
  tr.sd = opt->state_dict();
  tr.on_device = s.on_device();
  return tr;
}

}  // namespace

TEST_CASE("GradScaler: the kernel path (StepSkip::Kernel) gives the host path's numbers bit for bit", "[amp][scaler]") {
  const GradScalerOptions dyn{.init_scale = 1024.0, .growth_interval = 2, .min_scale = 128.0, .max_scale = 4096.0,
                              .hysteresis = 2};
  GradScalerOptions fixed = dyn;
  fixed.dynamic = false;
  for (const GradScalerOptions& o : {dyn, fixed})
    for (OptKind kind : {OptKind::Sgd, OptKind::Adam, OptKind::AdamW})
      for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
        INFO("optimizer " << static_cast<int>(kind) << " dtype " << dt << " dynamic " << o.dynamic);
        const Trace host = run_scaler(StepSkip::Host, kind, dt, o);
        const Trace dev = run_scaler(StepSkip::Kernel, kind, dt, o);
        CHECK_FALSE(host.on_device);
        CHECK(dev.on_device);
        REQUIRE(host.rows.size() == dev.rows.size());
        for (size_t k = 0; k < host.rows.size(); ++k) CHECK(dev.rows[k] == host.rows[k]);
        REQUIRE(host.sd.size() == dev.sd.size());
        for (const auto& [key, t] : host.sd) {
          INFO(key);
          REQUIRE(dev.sd.count(key));
          CHECK(bytes_of(dev.sd.at(key)) == bytes_of(t));  // moments, masters and step counts
        }
        if (kind != OptKind::Sgd) CHECK(dev.sd.at("state.0.step").item<double>() == 7.0);  // 12 - 5 skipped
      }
}

TEST_CASE("GradScaler: on the kernel path the optimizer always steps and its kernels skip, StepResult reads late",
          "[amp][scaler]") {
  GradScaler s({.init_scale = 64.0, .growth_interval = 1, .step_skip = StepSkip::Kernel});
  Tensor p = make_param({1.0, 2.0}, DType::F16);
  optim::Adam opt({p}, {.lr = 0.1});
  s.scale(sum(p)).backward();  // the path is chosen here, from the loss's device
  CHECK(s.on_device());
  CHECK(values(p.grad()) == Vec{64.0, 64.0});
  const StepResult r1 = s.step(opt);
  s.update();  // grows to 128 and zeroes the flags: the result keeps its own copy
  CHECK(r1.stepped());
  CHECK(r1.scale() == 64.0);
  CHECK(s.get_scale() == 128.0);
  const Vec after_one = values(opt.master(0));
  CHECK(after_one != Vec{1.0, 2.0});
  set_grad(p, {kInf, 1.0});
  s.unscale_(opt);
  CHECK(p.grad_unscale().inv_scale != nullptr);
  CHECK(pending(p) == 1.0 / 128);  // the device factor, read back
  const StepResult r2 = s.step(opt);
  s.update();
  CHECK(r2.found_inf());
  CHECK_FALSE(r2.stepped());
  CHECK(r2.scale() == 128.0);
  CHECK(s.get_scale() == 64.0);
  CHECK(values(opt.master(0)) == after_one);  // skipped in the update kernel
  CHECK(opt.state_dict().at("state.0.step").item<double>() == 1.0);  // the skipped step is not counted
  CHECK(pending(p) == 1.0 / 128);  // the factor stays with the gradient it describes
  REQUIRE_THROWS_WITH(s.update(), Catch::Contains("no inf checks were recorded"));
  set_grad(p, {1.0, 1.0});
  s.unscale_(opt);
  REQUIRE_THROWS_WITH(s.unscale_(opt), Catch::Contains("unscale_() has already been called"));
}

TEST_CASE("GradScaler: a device factor outlives the scaler that made it, and any reader of the gradient sees it",
          "[amp][scaler]") {
  Tensor p = make_param({1.0, 2.0}, DType::F16);
  optim::SGD opt({p}, {.lr = 0.5});
  {
    GradScaler s({.init_scale = 32.0, .step_skip = StepSkip::Kernel});
    s.scale(sum(p)).backward();
    s.unscale_(opt);
  }  // the scaler and its device state go; the factor keeps the memory it points into
  CHECK(p.grad_unscale().inv_scale != nullptr);
  CHECK(pending(p) == 1.0 / 32);
  CHECK(optim::clip_grad_norm_(std::vector<Tensor>{p}, 100.0) == Approx(std::sqrt(2.0)));  // the unscaled norm
  opt.step();  // the update reads the factor from the parameter
  CHECK(values(opt.master(0)) == Vec{0.5, 1.5});
}

// ---- issue 12: a collapsing scale is stopped, never trained through --------------------------------

namespace {
// An iteration whose loss is NaN: every gradient NaN.
StepResult nan_iteration(GradScaler& s, optim::Optimizer& opt, const Tensor& p) { return iterate(s, opt, p, {kNaN}); }
}  // namespace

TEST_CASE("GradScaler: a NaN loss on every step never pushes the scale out of F32's normal range, and the next "
          "finite step updates the parameters with finite values", "[amp][scaler]") {
  for (StepSkip skip : {StepSkip::Host, StepSkip::Kernel}) {
    CAPTURE(static_cast<int>(skip));
    // 0: train on as torch does; before the floor, 165 NaN steps made the scale 0 and 1/scale inf
    GradScaler s({.step_skip = skip, .max_skipped_in_a_row = 0});
    Tensor p = make_param({1.0});
    SGD opt({p}, {.lr = 0.5});
    capture_stderr([&] {
      for (int k = 0; k < 300; ++k) nan_iteration(s, opt, p);
      CHECK(s.get_scale() == static_cast<double>(FLT_MIN));  // 2^-126: the floor (the read warns: scale below 1)
    });
    CHECK(s.skipped_in_a_row() == 300);
    CHECK(values(p) == Vec{1.0});  // every step skipped
    // a clean step at the floor: gradient 2^-126 * 1 unscales to 1 with a finite 1/scale = 2^126
    const StepResult r = iterate(s, opt, p, {static_cast<double>(FLT_MIN)});
    CHECK(r.stepped());
    CHECK(values(p) == Vec{0.5});
    CHECK(std::isfinite(values(p)[0]));
    CHECK(s.skipped_in_a_row() == 0);
  }
}

TEST_CASE("GradScaler: after max_skipped_in_a_row NaN updates in a row it stops with an error naming the count, the "
          "scale and NonFiniteOrigin", "[amp][scaler]") {
  {  // host path: update() throws at the 50th skipped update in a row (the default)
    GradScaler s({.step_skip = StepSkip::Host});
    CHECK(s.options().max_skipped_in_a_row == 50);
    Tensor p = make_param({1.0});
    SGD opt({p}, {.lr = 0.5});
    capture_stderr([&] {
      for (int k = 0; k < 49; ++k) nan_iteration(s, opt, p);
    });
    iterate(s, opt, p, {s.get_scale()});  // a clean step (gradient 1 once unscaled) resets the count
    CHECK(s.skipped_in_a_row() == 0);
    for (int k = 0; k < 49; ++k) nan_iteration(s, opt, p);
    REQUIRE_THROWS_WITH(nan_iteration(s, opt, p), Catch::Contains("GradScaler.update") &&
                                                    Catch::Contains("inf/NaN in 50 updates in a row") &&
                                                    Catch::Contains("NonFiniteOrigin") &&
                                                    Catch::Contains("max_skipped_in_a_row = 0"));
    CHECK(values(p) == Vec{0.5});
  }
  {  // device path: the first read after it says so (update() cannot see it without a sync)
    GradScaler s({.step_skip = StepSkip::Kernel, .max_skipped_in_a_row = 5});
    Tensor p = make_param({1.0});
    SGD opt({p}, {.lr = 0.5});
    capture_stderr([&] {
      for (int k = 0; k < 5; ++k) CHECK(nan_iteration(s, opt, p).found_inf());
    });
    REQUIRE_THROWS_WITH(s.get_scale(), Catch::Contains("GradScaler.get_scale") && Catch::Contains("5 updates in a row"));
    set_grad(p, {kNaN});
    const StepResult r = s.step(opt);
    REQUIRE_THROWS_WITH(r.stepped(), Catch::Contains("GradScaler.step") && Catch::Contains("5 updates in a row"));
  }
  {  // a static scale skips too, and stops too
    GradScaler s({.init_scale = 8.0, .dynamic = false, .step_skip = StepSkip::Host, .max_skipped_in_a_row = 3});
    Tensor p = make_param({1.0});
    SGD opt({p}, {.lr = 0.5});
    nan_iteration(s, opt, p);
    nan_iteration(s, opt, p);
    REQUIRE_THROWS_WITH(nan_iteration(s, opt, p), Catch::Contains("3 updates in a row"));
  }
}

TEST_CASE("GradScaler: options and loaded values are checked in the type they are kept in", "[amp][scaler]") {
  const auto rejects = [](GradScalerOptions o, const char* what) {
    REQUIRE_THROWS_WITH(GradScaler(o), Catch::Contains(what));
  };
  rejects({.init_scale = 1e39}, "init_scale=1e+39; the scale is kept as F32");  // inf in F32
  rejects({.init_scale = 1e-46}, "init_scale=1e-46");                             // 0 in F32
  rejects({.init_scale = 1e-39}, "a normal F32 number");                          // subnormal in F32
  rejects({.growth_factor = kInf}, "growth_factor=inf; it must be finite");
  rejects({.backoff_factor = 1e-300}, "backoff_factor=1e-300");
  rejects({.min_scale = 1e-46}, "min_scale=1e-46");
  rejects({.max_scale = 1e39}, "max_scale=1e+39; it must be infinity (no ceiling) or a normal F32 number");
  rejects({.max_skipped_in_a_row = -1}, "max_skipped_in_a_row=-1");
  GradScaler s;
  REQUIRE_THROWS_WITH(s.update(1e-46), Catch::Contains("new_scale=1e-46") && Catch::Contains("normal F32"));
  REQUIRE_THROWS_WITH(s.update(1e39), Catch::Contains("new_scale=1e+39"));
  CHECK(s.get_scale() == 65536.0);  // untouched by the refused calls

  const optim::StateDict good = s.state_dict();
  const auto bad_entry = [&](const char* key, double v, const char* what) {
    optim::StateDict sd = good;
    sd[key] = full(Shape{}, v, {.dtype = DType::F64});
    GradScaler t;
    REQUIRE_THROWS_WITH(t.load_state_dict(sd), Catch::Contains(what));
    CHECK(t.get_scale() == 65536.0);  // all or nothing
  };
  bad_entry("_growth_tracker", 1e300, "entry '_growth_tracker' is 1e+300; it must be a whole number in [0, ");
  bad_entry("_growth_tracker", kNaN, "entry '_growth_tracker' is nan");
  bad_entry("hysteresis_tracker", -1e300, "entry 'hysteresis_tracker' is -1e+300");
  bad_entry("skipped_tracker", 2.5, "entry 'skipped_tracker' is 2.5");
  bad_entry("scale", 1e39, "init_scale=1e+39; the scale is kept as F32");
  bad_entry("scale", 1e-46, "init_scale=1e-46");
  bad_entry("growth_factor", kInf, "growth_factor=inf");
  bad_entry("max_skipped_in_a_row", -3, "entry 'max_skipped_in_a_row' is -3");
  // a dict from before the skip counter still loads
  optim::StateDict old = good;
  old.erase("skipped_tracker");
  old.erase("max_skipped_in_a_row");
  GradScaler t({.max_skipped_in_a_row = 7});
  t.load_state_dict(old);
  CHECK(t.skipped_in_a_row() == 0);
  CHECK(t.options().max_skipped_in_a_row == 7);
}

TEST_CASE("GradScaler: an inf, NaN or zero 1/scale counts as an overflow on both paths", "[amp][scaler]") {
  CHECK(bad_inv_scale(std::numeric_limits<float>::infinity()));
  CHECK(bad_inv_scale(std::numeric_limits<float>::quiet_NaN()));
  CHECK(bad_inv_scale(0.0f));
  CHECK_FALSE(bad_inv_scale(std::ldexp(1.0f, 126)));
  // the device path's PrepareUnscale flags it (a scale of 0 or a subnormal one, e.g. written by hand)
  for (float scale : {0.0f, std::ldexp(1.0f, -140), std::ldexp(1.0f, -126)}) {
    float sc = scale, inv = 0.0f, found[1] = {0.0f};
    int64_t trackers[3] = {0, 1, 0};
    scaler_state_op({.op = ScalerOp::PrepareUnscale, .scale = &sc, .trackers = trackers, .inv_scale = &inv,
                     .found_inf = found, .num_found = 1, .slot = 0});
    CHECK((found[0] != 0.0f) == (scale < FLT_MIN));
  }
}
