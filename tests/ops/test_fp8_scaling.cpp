// Per-tensor FP8 scaling (ops/fp8.h), from the recipes' definitions: the amax, current scaling's
// scale = fp8_max * 2^-margin / amax (1 for an amax of 0, inf or NaN), the scaled casts against the scalar
// conversions of core/fp8.h, and delayed scaling (Transformer Engine's DelayedScaling) against a model of
// its rule written here: the scale of step t+1 comes from the amaxes of steps t-len+1 .. t.
#include <catch2/catch.hpp>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <map>
#include <vector>

#include "core/fp8.h"
#include "core/tensor.h"
#include "ops/elementwise.h"
#include "ops/fp8.h"
#include "ops/kernels/fp8.h"

using namespace hg;

namespace {

float value(const Tensor& t) { return t.to_vector<float>().at(0); }
Tensor scalar(double v) { return full(Shape{}, v); }
Tensor vec(std::vector<float> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return from_vector(std::move(v), Shape{n});
}

}  // namespace

TEST_CASE("fp8 scaling: amax is max |x|, NaN wins, 0 for an empty tensor", "[fp8]") {
  CHECK(value(amax(vec({1.5f, -7.25f, 3.0f}))) == 7.25f);
  CHECK(value(amax(vec({1.5f, -7.25f, 3.0f}).to(DType::F16))) == 7.25f);
  CHECK(value(amax(vec({-INFINITY, 2.0f}))) == INFINITY);
  CHECK(std::isnan(value(amax(vec({1.0f, NAN, -INFINITY})))));
  CHECK(value(amax(zeros(Shape{0}))) == 0.0f);
  // many elements over several threads' pieces: the same answer
  std::vector<float> big(300000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = std::sin(static_cast<float>(i)) * 3.0f;
  big[123457] = -11.5f;
  CHECK(value(amax(vec(big))) == 11.5f);
}

TEST_CASE("fp8 scaling: current scaling's scale from an amax", "[fp8]") {
  CHECK(value(fp8_scale_from_amax(scalar(2.0), DType::F8E4M3)) == 224.0f);
  CHECK(value(fp8_scale_from_amax(scalar(2.0), DType::F8E5M2)) == 28672.0f);
  CHECK(value(fp8_scale_from_amax(scalar(2.0), DType::F8E4M3, {.margin = 1})) == 112.0f);
  CHECK(value(fp8_scale_from_amax(scalar(3.0), DType::F8E4M3)) == 448.0f / 3.0f);
  CHECK(value(fp8_scale_from_amax(scalar(3.0), DType::F8E4M3, {.pow2 = true})) == 128.0f);  // 149.3 -> 2^7
  // amax 0, inf, NaN: no information, the scale is 1
  for (const double a : {0.0, static_cast<double>(INFINITY), static_cast<double>(NAN)})
    CHECK(value(fp8_scale_from_amax(scalar(a), DType::F8E4M3)) == 1.0f);
  // an amax so small that 448/amax leaves F32: FLT_MAX, not inf
  CHECK(value(fp8_scale_from_amax(scalar(1e-40), DType::F8E4M3)) == FLT_MAX);
  // the kernel's function directly: keep is returned for the same three cases
  CHECK(fp8_scale_from_amax(0.0f, 448.0f, 5.0f, false) == 5.0f);
  CHECK(fp8_scale_from_amax(NAN, 448.0f, 5.0f, false) == 5.0f);
  CHECK(fp8_scale_from_amax(-INFINITY, 448.0f, 5.0f, false) == 5.0f);
  REQUIRE_THROWS_WITH(fp8_scale_from_amax(scalar(1.0), DType::BF16), Catch::Contains("not an FP8 format"));
  REQUIRE_THROWS_WITH(fp8_scale_from_amax(vec({1.0f, 2.0f}), DType::F8E4M3), Catch::Contains("one F32 value"));
}

TEST_CASE("fp8 scaling: the scaled cast is the scalar conversion of x * scale, with its amax", "[fp8]") {
  std::vector<float> xs;
  for (int i = -400; i <= 400; ++i) xs.push_back(static_cast<float>(i) * 0.37f);
  xs.insert(xs.end(), {1e-6f, -1e-7f, 5000.0f, -90000.0f, INFINITY, NAN});
  const Tensor x = vec(xs);
  for (const DType f8 : {DType::F8E4M3, DType::F8E5M2}) {
    for (const bool sat : {true, false}) {
      const float s = 1.75f;
      Tensor acc = scalar(0.5);
      const Tensor q = fp8_quantize(x, f8, scalar(s), {.saturate = sat, .amax = acc});
      REQUIRE(q.dtype() == f8);
      const auto* p = static_cast<const uint8_t*>(q.data_ptr());
      int64_t bad = 0;
      for (size_t i = 0; i < xs.size(); ++i) {
        const float v = xs[i] * s;
        bad += p[i] != (f8 == DType::F8E4M3 ? float_to_f8e4m3_bits(v, sat) : float_to_f8e5m2_bits(v, sat));
      }
      CHECK(bad == 0);
      CHECK(std::isnan(value(acc)));  // the NaN in x
      // decode: q * scale_inv in the asked dtype
      const Tensor y = fp8_dequantize(q, scalar(1.0 / s), DType::F32);
      const std::vector<float> yv = y.to_vector<float>();
      for (size_t i = 0; i < 10; ++i)
        CHECK(yv[i] == (f8 == DType::F8E4M3 ? f8e4m3_bits_to_float(p[i]) : f8e5m2_bits_to_float(p[i])) * (1.0f / s));
      CHECK(fp8_dequantize(q, scalar(1.0 / s), DType::BF16).dtype() == DType::BF16);
    }
  }
  // saturation: 5000 * 1.75 is past both formats' E4M3 range: 448 saturated, NaN not
  const Tensor big = vec({5000.0f, -5000.0f});
  CHECK(fp8_quantize(big, DType::F8E4M3, scalar(1.0)).to_vector<float>() == std::vector<float>{448.0f, -448.0f});
  CHECK(std::isnan(fp8_quantize(big, DType::F8E4M3, scalar(1.0), {.saturate = false}).to_vector<float>()[0]));
}

TEST_CASE("fp8 scaling: quantize then dequantize keeps E4M3's 4 significant bits over the scaled range", "[fp8]") {
  std::vector<float> xs;
  for (int i = 1; i <= 2000; ++i) xs.push_back(std::ldexp(1.0f + static_cast<float>(i % 97) / 97.0f, -(i % 9)) * (i % 2 ? 1 : -1));
  const Tensor x = vec(xs);
  const Tensor s = fp8_scale_from_amax(amax(x), DType::F8E4M3);
  const std::vector<float> y = fp8_dequantize(fp8_quantize(x, DType::F8E4M3, s), rdiv(1.0, s)).to_vector<float>();
  double worst = 0;
  for (size_t i = 0; i < xs.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(y[i]) - xs[i]) / std::fabs(xs[i]));
  CHECK(worst <= std::ldexp(1.0, -4));  // half an ulp of a 3-bit mantissa: every value here stays a normal
  CHECK(worst > std::ldexp(1.0, -7));   // and the rounding is really there
}

TEST_CASE("fp8 scaling: delayed scaling follows Transformer Engine's rule step by step", "[fp8]") {
  // the amaxes of 9 steps: growth, a zero step, a NaN step, an inf step, then small ones
  const std::vector<float> amaxes = {2.0f, 8.0f, 0.0f, NAN, 1.0f, INFINITY, 0.5f, 0.25f, 0.125f};
  for (const AmaxCompute algo : {AmaxCompute::Max, AmaxCompute::MostRecent}) {
    for (const int64_t len : {int64_t{1}, int64_t{3}}) {
      Fp8DelayedScaling d(DType::F8E4M3, {.history_len = len, .algo = algo, .scale = {.margin = 1}});
      float scale = 1.0f;  // the model's scale
      for (size_t t = 0; t < amaxes.size(); ++t) {
        // the quantize uses the scale of the past; its input's amax is this step's amax
        const Tensor x = vec({amaxes[t], -amaxes[t] / 2});
        const Tensor q = d.quantize(x);
        CHECK(value(d.scale()) == scale);
        const float q0 = q.to_vector<float>()[0];
        if (std::isfinite(amaxes[t])) CHECK(q0 == f8e4m3_bits_to_float(float_to_f8e4m3_bits(amaxes[t] * scale, true)));
        d.update();
        // the model: the amax of the window of the last len steps (NaN ignored), or this step's alone
        float a = 0.0f;
        if (algo == AmaxCompute::MostRecent) {
          a = amaxes[t];
        } else {
          for (size_t k = t + 1 > static_cast<size_t>(len) ? t + 1 - static_cast<size_t>(len) : 0; k <= t; ++k)
            if (!std::isnan(amaxes[k])) a = std::max(a, amaxes[k]);
        }
        if (a > 0.0f && std::isfinite(a)) scale = 224.0f / a;  // 448 * 2^-1
        INFO("algo " << int(algo) << " len " << len << " step " << t);
        CHECK(value(d.scale()) == scale);
        CHECK(value(d.scale_inv()) == 1.0f / scale);
        // the history after the roll: [0] empty for the next step, then the last len-1 amaxes, oldest first
        const std::vector<float> h = d.amax_history().to_vector<float>();
        REQUIRE(h.size() == static_cast<size_t>(len));
        CHECK(h[0] == 0.0f);
        for (int64_t i = 1; i < len; ++i) {
          const int64_t step = static_cast<int64_t>(t) - (len - 1 - i);
          const float want = step >= 0 ? amaxes[static_cast<size_t>(step)] : 0.0f;
          CHECK((h[static_cast<size_t>(i)] == want || (std::isnan(want) && std::isnan(h[static_cast<size_t>(i)]))));
        }
      }
    }
  }
  // record() adds to this step's amax without casting; two uses in a step keep the larger
  Fp8DelayedScaling d(DType::F8E5M2, {.history_len = 2});
  d.record(vec({3.0f}));
  d.record(vec({-5.0f, 1.0f}));
  d.update();
  CHECK(value(d.scale()) == 57344.0f / 5.0f);
}

TEST_CASE("fp8 scaling: delayed-scaling state saves and loads, and refuses a different history length", "[fp8]") {
  Fp8DelayedScaling a(DType::F8E4M3, {.history_len = 4});
  for (int t = 0; t < 3; ++t) {
    a.quantize(vec({static_cast<float>(t + 1) * 3.0f}));
    a.update();
  }
  std::map<std::string, Tensor> state;
  a.save_into(state, "fc1.input.");
  CHECK(state.count("fc1.input.amax_history") == 1);
  const std::vector<float> saved = state.at("fc1.input.amax_history").to_vector<float>();
  Fp8DelayedScaling b(DType::F8E4M3, {.history_len = 4});
  b.load_from(state, "fc1.input.");
  // the loaded state is a copy: b's steps leave the saved tensors alone
  b.quantize(vec({100.0f}));
  b.update();
  CHECK(state.at("fc1.input.amax_history").to_vector<float>() == saved);
  b.load_from(state, "fc1.input.");
  const Tensor x = vec({1.0f, 7.0f, -2.5f});
  const Tensor qa = a.quantize(x), qb = b.quantize(x);
  CHECK(std::memcmp(qa.data_ptr(), qb.data_ptr(), 3) == 0);
  a.update();
  b.update();
  CHECK(value(a.scale()) == value(b.scale()));
  CHECK(a.amax_history().to_vector<float>() == b.amax_history().to_vector<float>());

  Fp8DelayedScaling c(DType::F8E4M3, {.history_len = 8});
  const std::vector<float> before = c.amax_history().to_vector<float>();
  REQUIRE_THROWS_WITH(c.load_from(state, "fc1.input."), Catch::Contains("history_len=8"));
  CHECK(c.amax_history().to_vector<float>() == before);
  REQUIRE_THROWS_WITH(c.load_from(state, "fc2."), Catch::Contains("'fc2.amax_history' is missing"));
  REQUIRE_THROWS_WITH(Fp8DelayedScaling(DType::F8E4M3, {.history_len = 0}), Catch::Contains("history_len=0"));
}

TEST_CASE("fp8 scaling: bad arguments get errors that name the fix", "[fp8]") {
  const Tensor x = vec({1.0f, 2.0f});
  REQUIRE_THROWS_WITH(fp8_quantize(x, DType::F16, scalar(1.0)), Catch::Contains("not an FP8 format"));
  REQUIRE_THROWS_WITH(fp8_quantize(x, DType::F8E4M3, vec({1.0f, 2.0f})), Catch::Contains("scale has shape"));
  REQUIRE_THROWS_WITH(fp8_quantize(x, DType::F8E4M3, scalar(1.0).to(DType::F64)), Catch::Contains("one F32 value"));
  REQUIRE_THROWS_WITH(fp8_quantize(x.to(DType::F8E4M3), DType::F8E4M3, scalar(1.0)), Catch::Contains("storage format"));
  REQUIRE_THROWS_WITH(fp8_quantize(from_vector(std::vector<int64_t>{1}, Shape{1}), DType::F8E4M3, scalar(1.0)),
                      Catch::Contains("I64"));
  REQUIRE_THROWS_WITH(fp8_dequantize(x, scalar(1.0)), Catch::Contains("pass an F8E4M3 or F8E5M2 tensor"));
  REQUIRE_THROWS_WITH(fp8_dequantize(x.to(DType::F8E5M2), scalar(1.0), DType::F8E4M3), Catch::Contains("output dtype"));
}
