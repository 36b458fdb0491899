// MX block scaling (ops/fp8.h, mx_quantize), from the OCP Microscaling v1.0 definitions: the shared
// exponent of a block is floor(log2(amax)) - emax of the element format (the spec's rule) or the smallest
// power of two that keeps every element in range (rounding up, Transformer Engine's rule), clamped to E8M0;
// the elements are the block's values divided by the scale, rounded to the element format and saturated;
// a block with an inf or a NaN has a NaN scale. The reference here computes the exponent with frexp on
// doubles, apart from the integer code under test.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/fp8.h"
#include "core/rng.h"
#include "ops/elementwise.h"
#include "core/tensor.h"
#include "ops/fp8.h"
#include "ops/kernels/fp8.h"
#include "ops/shape.h"

using namespace hg;

namespace {

const MxFormat kFormats[] = {MxFormat::MXFP8_E4M3, MxFormat::MXFP8_E5M2, MxFormat::MXFP4};
const MxScaleRule kRules[] = {MxScaleRule::Floor, MxScaleRule::Up};

double elem_max(MxFormat f) { return f == MxFormat::MXFP8_E4M3 ? 448.0 : f == MxFormat::MXFP8_E5M2 ? 57344.0 : 6.0; }
int emax(MxFormat f) { return f == MxFormat::MXFP8_E4M3 ? 8 : f == MxFormat::MXFP8_E5M2 ? 15 : 2; }

// The spec's exponent from the definitions, in doubles: floor(log2 amax) - emax; rounding up: the smallest e
// with amax <= elem_max * 2^e. Clamped to [-127, 127]; an all-zero block takes -127.
int ref_exp(double amax, MxFormat f, MxScaleRule r) {
  if (amax == 0) return -127;
  int e2 = 0;
  std::frexp(amax, &e2);  // amax = m * 2^e2, m in [0.5, 1): floor(log2 amax) = e2 - 1
  int e = e2 - 1 - emax(f);
  if (r == MxScaleRule::Up) {
    while (amax > elem_max(f) * std::ldexp(1.0, e)) ++e;
    while (amax <= elem_max(f) * std::ldexp(1.0, e - 1)) --e;
  }
  return std::clamp(e, -127, 127);
}

// The element the spec stores for v / X: the format's nearest value, saturated (core/fp8.h's conversions,
// tested exhaustively in tests/core/test_fp8.cpp), as a float.
float ref_elem(float scaled, MxFormat f) {
  if (f == MxFormat::MXFP8_E4M3) return f8e4m3_bits_to_float(float_to_f8e4m3_bits(scaled, true));
  if (f == MxFormat::MXFP8_E5M2) return f8e5m2_bits_to_float(float_to_f8e5m2_bits(scaled, true));
  return e2m1_bits_to_float(float_to_e2m1_bits(scaled));
}

Tensor vec(std::vector<float> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return from_vector(std::move(v), Shape{n});
}

}  // namespace

TEST_CASE("mx: the shared exponent follows the spec's floor rule and the round-up rule", "[fp8][mx]") {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits(1, 0x7f7fffffu);  // every positive finite F32, subnormals included
  std::vector<float> amaxes;
  for (int i = 0; i < 20000; ++i) amaxes.push_back(std::bit_cast<float>(bits(rng)));
  for (MxFormat f : kFormats)
    for (int k = -140; k <= 120; k += 7) {  // the edges: the largest element times 2^k, and one ulp either side
      const float edge = static_cast<float>(std::ldexp(elem_max(f), k));
      if (edge == 0 || !std::isfinite(edge)) continue;
      amaxes.insert(amaxes.end(), {edge, std::nextafter(edge, 0.f), std::nextafter(edge, INFINITY),
                                   static_cast<float>(std::ldexp(1.0, k))});
    }
  amaxes.push_back(0.0f);
  int64_t checked = 0;
  for (MxFormat f : kFormats)
    for (MxScaleRule r : kRules)
      for (float a : amaxes) {
        if (a == 0 || std::isnormal(a) || std::fpclassify(a) == FP_SUBNORMAL) {
          INFO(mx_format_name(f) << " rule " << int(r) << " amax " << a);
          REQUIRE(mx_shared_exp(a, f, r) == ref_exp(a, f, r));
          ++checked;
        }
      }
  CHECK(checked > 100000);
  // named cases: 448 fits E4M3 with X = 1 under both rules; 449 saturates under floor, rounds up to X = 2
  CHECK(mx_shared_exp(448.0f, MxFormat::MXFP8_E4M3, MxScaleRule::Floor) == 0);
  CHECK(mx_shared_exp(448.0f, MxFormat::MXFP8_E4M3, MxScaleRule::Up) == 0);
  CHECK(mx_shared_exp(449.0f, MxFormat::MXFP8_E4M3, MxScaleRule::Floor) == 0);
  CHECK(mx_shared_exp(449.0f, MxFormat::MXFP8_E4M3, MxScaleRule::Up) == 1);
  CHECK(mx_shared_exp(6.0f, MxFormat::MXFP4, MxScaleRule::Up) == 0);
  CHECK(mx_shared_exp(7.0f, MxFormat::MXFP4, MxScaleRule::Floor) == 0);  // 7 saturates to 6
  CHECK(mx_shared_exp(7.0f, MxFormat::MXFP4, MxScaleRule::Up) == 1);
  CHECK(mx_shared_exp(1e-44f, MxFormat::MXFP8_E4M3, MxScaleRule::Floor) == -127);  // clamped to E8M0's floor
}

TEST_CASE("mx: quantize is the reference per block, along the last dim and along dim 0", "[fp8][mx]") {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> mag(-20, 20);
  const int64_t rows = 5, cols = 100;  // 4 blocks of 32 per row, the last one 4 values long
  std::vector<float> x(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    const int shift = mag(rng);  // rows of very different ranges
    for (int64_t c = 0; c < cols; ++c) x[r * cols + c] = std::ldexp(nd(rng), shift + (c / 32 == 1 ? 9 : 0));
  }
  const Tensor t = from_vector(x, Shape{rows, cols});
  for (MxFormat f : kFormats)
    for (MxScaleRule r : kRules) {
      INFO(mx_format_name(f) << " rule " << int(r));
      const MxTensor m = mx_quantize(t, f, {.rule = r});
      REQUIRE(m.data.shape() == Shape{rows, cols});
      REQUIRE(m.scale.shape() == Shape{rows, 4});
      CHECK(m.data.dtype() == (f == MxFormat::MXFP8_E5M2 ? DType::F8E5M2 : DType::F8E4M3));
      const std::vector<float> scale = m.scale.to_vector<float>(), y = mx_dequantize(m).to_vector<float>();
      for (int64_t rr = 0; rr < rows; ++rr)
        for (int64_t b = 0; b < 4; ++b) {
          const int64_t c0 = b * 32, c1 = std::min<int64_t>(cols, c0 + 32);
          double amax = 0;
          for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, double(std::fabs(x[rr * cols + c])));
          const double X = std::ldexp(1.0, ref_exp(amax, f, r));
          REQUIRE(scale[rr * 4 + b] == X);
          for (int64_t c = c0; c < c1; ++c) {
            const float want = static_cast<float>(ref_elem(static_cast<float>(x[rr * cols + c] / X), f) * X);
            REQUIRE(y[rr * cols + c] == want);
            if (r == MxScaleRule::Up) CHECK(std::fabs(x[rr * cols + c] / X) <= elem_max(f));  // nothing clips
          }
        }
      // along dim 0: the same as the transposed tensor along its last dim
      const MxTensor m0 = mx_quantize(t, f, {.rule = r, .dim = 0});
      const MxTensor mt = mx_quantize(transpose(t, 0, 1), f, {.rule = r});
      CHECK(m0.dim == 0);
      CHECK(m0.scale.shape() == Shape{1, cols});
      CHECK(mx_dequantize(m0).to_vector<float>() == transpose(mx_dequantize(mt), 0, 1).to_vector<float>());
    }
}

TEST_CASE("mx: blocks along a middle dimension equal the transposed tensor's along its last", "[fp8][mx]") {
  Generator g(17);
  const Tensor x = mul(randn({3, 70, 5}, {}, &g), 20.0);
  for (MxFormat f : kFormats)
    for (MxScaleRule r : kRules) {
      INFO(mx_format_name(f) << " rule " << int(r));
      const MxTensor m = mx_quantize(x, f, {.rule = r, .dim = 1});
      CHECK(m.scale.shape() == Shape{3, 3, 5});
      const MxTensor t = mx_quantize(transpose(x, 1, 2), f, {.rule = r});
      CHECK(transpose(m.scale, 1, 2).to_vector<float>() == t.scale.to_vector<float>());
      CHECK(mx_dequantize(m).to_vector<float>() == transpose(mx_dequantize(t), 1, 2).to_vector<float>());
    }
}

TEST_CASE("mx: exact values survive, MXFP4 holds E2M1 values, specials and zero blocks", "[fp8][mx]") {
  // every value an E4M3 element times one power of two: MXFP8_E4M3 round-trips exactly under both rules
  std::vector<float> exact;
  for (int b = 0; b < 0x7f; b += 4) exact.push_back(f8e4m3_bits_to_float(static_cast<uint8_t>(b)) * 0.125f);
  const Tensor e = vec(exact);
  for (MxScaleRule r : kRules) CHECK(mx_dequantize(mx_quantize(e, MxFormat::MXFP8_E4M3, {.rule = r})).to_vector<float>() == exact);
  // MXFP4 elements are E2M1 values (0, 0.5, 1, 1.5, 2, 3, 4, 6), held as F8E4M3 bytes
  std::vector<float> x(64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(float(i)) * 37.0f;
  const MxTensor m4 = mx_quantize(vec(x), MxFormat::MXFP4);
  const std::vector<float> q = m4.data.to(DType::F32).to_vector<float>();
  for (float v : q) {
    const float a = std::fabs(v);
    CHECK((a == 0 || a == 0.5f || a == 1 || a == 1.5f || a == 2 || a == 3 || a == 4 || a == 6));
  }
  // an inf or a NaN makes its block's scale NaN, and only that block decodes to NaN
  std::vector<float> s(64, 1.0f);
  s[3] = INFINITY;
  s[40] = NAN;
  for (MxFormat f : kFormats) {
    const MxTensor m = mx_quantize(vec(s), f);
    const std::vector<float> sc = m.scale.to_vector<float>();
    CHECK(std::isnan(sc[0]));
    CHECK(std::isnan(sc[1]));
    const MxTensor ok = mx_quantize(vec(std::vector<float>(64, 1.0f)), f);
    CHECK(ok.scale.to_vector<float>() == std::vector<float>(2, std::ldexp(1.0f, -emax(f))));
  }
  // an all-zero block: the smallest E8M0 scale, 2^-127, and zero elements
  const MxTensor z = mx_quantize(zeros(Shape{2, 32}), MxFormat::MXFP8_E4M3);
  CHECK(z.scale.to_vector<float>() == std::vector<float>(2, std::ldexp(1.0f, -127)));
  CHECK(mx_dequantize(z).to_vector<float>() == std::vector<float>(64, 0.0f));
  // floor clips the top of a block, rounding up does not
  const Tensor top = vec({500.0f, 1.0f});
  CHECK(mx_dequantize(mx_quantize(top, MxFormat::MXFP8_E4M3)).to_vector<float>()[0] == 448.0f);
  CHECK(mx_dequantize(mx_quantize(top, MxFormat::MXFP8_E4M3, {.rule = MxScaleRule::Up})).to_vector<float>()[0] == 512.0f);
  // F16/BF16 inputs and outputs; block sizes other than 32
  const Tensor h = vec(x).to(DType::BF16);
  CHECK(mx_dequantize(mx_quantize(h, MxFormat::MXFP8_E4M3, {.block = 16}), DType::BF16).dtype() == DType::BF16);
  CHECK(mx_quantize(h, MxFormat::MXFP8_E4M3, {.block = 16}).scale.shape() == Shape{4});
}

TEST_CASE("mx: bad arguments get errors that name the fix", "[fp8][mx]") {
  CHECK_THROWS_WITH(mx_quantize(full(Shape{}, 1.0), MxFormat::MXFP8_E4M3), Catch::Contains("at least a 1-d"));
  CHECK_THROWS_WITH(mx_quantize(zeros(Shape{4}), MxFormat::MXFP8_E4M3, {.block = 0}), Catch::Contains("block=0"));
  CHECK_THROWS_WITH(mx_quantize(zeros(Shape{4}), MxFormat::MXFP8_E4M3, {.dim = 3}), Catch::Contains("dim"));
  MxTensor m = mx_quantize(zeros(Shape{64}), MxFormat::MXFP8_E4M3);
  m.format = MxFormat::MXFP8_E5M2;
  CHECK_THROWS_WITH(mx_dequantize(m), Catch::Contains("stores F8E5M2"));
  m = mx_quantize(zeros(Shape{64}), MxFormat::MXFP8_E4M3);
  m.block = 16;
  CHECK_THROWS_WITH(mx_dequantize(m), Catch::Contains("needs"));
}
