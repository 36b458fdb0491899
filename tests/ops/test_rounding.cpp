// Stochastic rounding (core/stochastic_round.h, ops/rounding.h), from its definition: the result is one of
// the two neighbours of v in the narrow format, exact values stay, and the upper neighbour comes up with
// probability (v - lo) / (hi - lo), so the mean of many roundings is v; a seed reproduces the bits.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/rng.h"
#include "core/stochastic_round.h"
#include "core/tensor.h"
#include "ops/rounding.h"

using namespace hg;

namespace {

// The neighbours of v in T by brute force over T's patterns of the same sign (the nearest below and above |v|).
template <class T>
void neighbours(float v, float& lo, float& hi) {
  lo = 0.0f;
  hi = INFINITY;
  const float av = std::fabs(v);
  const uint32_t count = sizeof(T) == 1 ? 0x80u : 0x8000u;
  for (uint32_t b = 0; b < count; ++b) {
    T t;
    t.bits = static_cast<decltype(t.bits)>(b);
    const float f = to_float(t);
    if (!std::isfinite(f)) continue;
    if (f <= av && f > lo) lo = f;
    if (f >= av && f < hi) hi = f;
  }
}

template <class T>
void check_format(const char* name, const std::vector<float>& values) {
  uint64_t s = 12345;
  for (const float v : values) {
    float lo, hi;
    neighbours<T>(v, lo, hi);
    int ups = 0;
    const int n = 40000;
    for (int i = 0; i < n; ++i) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      const float r = to_float(stochastic_round<T>(v, static_cast<uint32_t>(s >> 32)));
      const float ar = std::fabs(r);
      INFO(name << " v=" << v << " lo=" << lo << " hi=" << hi << " got " << r);
      REQUIRE((ar == lo || ar == hi));
      REQUIRE(std::signbit(r) == std::signbit(v));
      ups += ar == hi && hi != lo;
    }
    if (lo == hi) {
      CHECK(ups == 0);
      continue;
    }
    const double p = (std::fabs(static_cast<double>(v)) - lo) / (static_cast<double>(hi) - lo);
    const double freq = static_cast<double>(ups) / n, sd = std::sqrt(p * (1 - p) / n);
    INFO(name << " v=" << v << " p=" << p << " freq=" << freq);
    CHECK(std::fabs(freq - p) <= 5 * sd + 1e-6);
  }
}

}  // namespace

TEST_CASE("stochastic rounding: neighbours only, exact values kept, up with the right probability", "[rounding]") {
  const std::vector<float> common = {1.0f + 1.0f / 512, -(1.0f + 3.0f / 512), 0.3f, -7.77f, 1e-3f, 2.0f, 0.0f, -0.5f};
  check_format<bf16>("bf16", common);
  std::vector<float> f16v = common;
  f16v.insert(f16v.end(), {1e-7f /* a subnormal's neighbourhood */, 65500.0f, -3e-8f});
  check_format<f16>("f16", f16v);
  check_format<f8e4m3>("e4m3", {0.3f, -100.0f, 1e-3f /* subnormal range */, 440.0f, 448.0f});
  check_format<f8e5m2>("e5m2", {0.3f, -1000.0f, 2e-5f, 5e4f});
}

TEST_CASE("stochastic rounding: specials and the edge of the range round to nearest", "[rounding]") {
  for (const uint32_t r : {0u, 0x80000000u, 0xffffffffu}) {
    CHECK(std::isnan(to_float(stochastic_round<bf16>(NAN, r))));
    CHECK(to_float(stochastic_round<f16>(INFINITY, r)) == INFINITY);
    CHECK(to_float(stochastic_round<f16>(65510.0f, r)) == 65504.0f);    // past the largest: no random overflow
    CHECK(to_float(stochastic_round<f16>(1e6f, r)) == INFINITY);        // as round-to-nearest
    CHECK(to_float(stochastic_round<f8e4m3>(447.0f, r)) >= 416.0f);      // 416 or 448
    CHECK(to_float(stochastic_round<f8e4m3>(460.0f, r)) == 448.0f);
  }
  // r = 0 always rounds up (u = 0 < p), r = all ones rounds down unless p > 1 - 2^-24
  CHECK(to_float(stochastic_round<bf16>(1.0f + 1.0f / 1024, 0u)) == 1.0078125f);
  CHECK(to_float(stochastic_round<bf16>(1.0f + 1.0f / 1024, 0xffffffffu)) == 1.0f);
}

TEST_CASE("stochastic rounding op: unbiased in the mean, reproducible per seed, gradient passes through", "[rounding]") {
  // 2^-10 below the bf16 spacing at 1 (2^-7): nearest rounding would drop all of it
  const int64_t n = 200000;
  const Tensor x = full(Shape{n}, 1.0 + std::ldexp(1.0, -10));
  Generator g(7);
  const Tensor y = stochastic_round(x, DType::BF16, &g);
  CHECK(y.dtype() == DType::BF16);
  const double mean = y.to(DType::F64).mean().item<double>();
  CHECK(std::fabs(mean - (1.0 + std::ldexp(1.0, -10))) < 5 * std::ldexp(1.0, -7) * std::sqrt(0.125 * 0.875 / n));
  CHECK(x.to(DType::BF16).to(DType::F64).mean().item<double>() == 1.0);
  Generator g2(7);
  const Tensor y2 = stochastic_round(x, DType::BF16, &g2);
  CHECK(std::memcmp(y.data_ptr(), y2.data_ptr(), y.nbytes()) == 0);
  const Tensor y3 = stochastic_round(x, DType::BF16, &g2);  // the generator moved on
  CHECK(std::memcmp(y.data_ptr(), y3.data_ptr(), y.nbytes()) != 0);
  // F16 and F64 inputs go through F32; FP8 outputs work
  CHECK(stochastic_round(x.to(DType::F64), DType::F8E4M3, &g).dtype() == DType::F8E4M3);
  // the gradient: straight through, in x's dtype
  Tensor w = full(Shape{3}, 0.3).requires_grad_(true);
  stochastic_round(w, DType::F16).to(DType::F32).sum().backward();
  CHECK(w.grad().to_vector<float>() == std::vector<float>{1.0f, 1.0f, 1.0f});
  REQUIRE_THROWS_WITH(stochastic_round(x, DType::F64), Catch::Contains("round to F16, BF16, F8E4M3 or F8E5M2"));
}
