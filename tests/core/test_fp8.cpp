// The FP8 formats (core/fp8.h) and the MX element and scale formats, tested from their definitions (the OCP
// 8-bit floating point specification and the OCP Microscaling formats): every FP8 pattern decoded by the
// formula s * 2^(e - bias) * (1 + m / 2^M), every F16 and every BF16 value and F32's rounding boundaries
// encoded against a reference that searches the format's values for the nearest (ties to the even
// mantissa), in both overflow modes; then the dtype in tensors: casts, printing, safetensors, the bulk
// paths, and the errors of ops that do not compute in FP8.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "core/convert.h"
#include "core/fp8.h"
#include "core/safetensors.h"
#include "core/tensor.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "test_util.h"

using namespace hg;

namespace {


// One format from its definition: exponent and mantissa widths, bias, and whether the all-ones exponent
// is reserved for inf/NaN (IEEE-like, E5M2) or holds numbers except the all-ones mantissa (E4M3 "fn").
struct Def {
  int e_bits, m_bits, bias;
  bool ieee;
  // The value of a magnitude pattern (no sign); NaN for NaN patterns, inf for inf.
  double value(uint32_t mag) const {
    const uint32_t e = mag >> m_bits, m = mag & ((1u << m_bits) - 1u);
    const uint32_t top = (1u << e_bits) - 1u;
    if (ieee && e == top) return m == 0 ? INFINITY : NAN;
    if (!ieee && e == top && m == (1u << m_bits) - 1u) return NAN;
    if (e == 0) return std::ldexp(static_cast<double>(m), 1 - bias - m_bits);
    return std::ldexp(1.0 + std::ldexp(static_cast<double>(m), -m_bits), static_cast<int>(e) - bias);
  }
  uint32_t max_mag() const { return ieee ? (((1u << e_bits) - 1u) << m_bits) - 1u : (1u << (e_bits + m_bits)) - 2u; }
  uint32_t nan_mag() const { return (1u << (e_bits + m_bits)) - 1u; }  // the all-ones pattern
  uint32_t inf_mag() const { return ((1u << e_bits) - 1u) << m_bits; }
};
const Def kE4M3{4, 3, 7, false};
const Def kE5M2{5, 2, 15, true};

// The reference encoder: |x| rounded to the nearest of the format's finite magnitudes and of the first
// magnitude past the largest (as if the exponent went on), ties to the even mantissa; past the largest is
// overflow: the largest finite (saturate), else inf (IEEE-like) or NaN (E4M3).
uint8_t reference_encode(const Def& d, double x, bool saturate) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  if (std::isnan(x)) return sign | static_cast<uint8_t>(d.nan_mag());
  const uint8_t overflow = static_cast<uint8_t>(saturate ? d.max_mag() : d.ieee ? d.inf_mag() : d.nan_mag());
  if (std::isinf(x)) return sign | overflow;
  const double ax = std::fabs(x);
  // candidates: 0 .. max_mag, then max_mag + 1 standing for the next binade's value
  const uint32_t past = d.max_mag() + 1;
  auto val = [&](uint32_t mag) {
    if (mag < past) return d.value(mag);
    // the value after the largest finite, in the unbounded format: one ulp up
    const double top = d.value(d.max_mag());
    const int e = std::ilogb(top);
    return top + std::ldexp(1.0, e - d.m_bits);
  };
  uint32_t lo = 0;
  while (lo + 1 <= past && val(lo + 1) <= ax) ++lo;
  if (lo == past) return sign | overflow;
  const double a = val(lo), b = val(lo + 1);
  uint32_t pick;
  if (ax - a < b - ax) pick = lo;
  else if (ax - a > b - ax) pick = lo + 1;
  else pick = (lo & 1u) == 0 ? lo : lo + 1;  // a tie: the even mantissa (the pattern's last bit)
  if (pick == past) return sign | overflow;
  return static_cast<uint8_t>(sign | pick);
}

uint8_t encode(const Def& d, float x, bool saturate) {
  return &d == &kE4M3 ? float_to_f8e4m3_bits(x, saturate) : float_to_f8e5m2_bits(x, saturate);
}
float decode(const Def& d, uint8_t b) { return &d == &kE4M3 ? f8e4m3_bits_to_float(b) : f8e5m2_bits_to_float(b); }

bool same_value(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) && std::signbit(a) == std::signbit(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

}  // namespace

TEST_CASE("fp8: every pattern decodes to its definition", "[fp8]") {
  for (const Def* d : {&kE4M3, &kE5M2}) {
    int nans = 0, infs = 0;
    for (uint32_t b = 0; b < 256; ++b) {
      const double expect = std::copysign(d->value(b & 0x7fu), b & 0x80u ? -1.0 : 1.0);
      const float got = decode(*d, static_cast<uint8_t>(b));
      INFO("format E" << d->e_bits << "M" << d->m_bits << " pattern " << b);
      CHECK(same_value(got, expect));
      nans += std::isnan(got);
      infs += std::isinf(got);
    }
    // E4M3: one NaN per sign, no inf; E5M2: three NaNs and one inf per sign
    CHECK(nans == (d->ieee ? 6 : 2));
    CHECK(infs == (d->ieee ? 2 : 0));
  }
  CHECK(f8e4m3_bits_to_float(0x7e) == 448.0f);
  CHECK(f8e4m3_bits_to_float(0x01) == std::ldexp(1.0f, -9));
  CHECK(f8e4m3_bits_to_float(0x08) == std::ldexp(1.0f, -6));
  CHECK(f8e4m3_bits_to_float(0x38) == 1.0f);
  CHECK(f8e5m2_bits_to_float(0x7b) == 57344.0f);
  CHECK(f8e5m2_bits_to_float(0x01) == std::ldexp(1.0f, -16));
  CHECK(f8e5m2_bits_to_float(0x3c) == 1.0f);
  CHECK(std::isinf(f8e5m2_bits_to_float(0xfc)));
  CHECK(kF8E4M3Max == f8e4m3_bits_to_float(0x7e));
  CHECK(kF8E5M2Max == f8e5m2_bits_to_float(0x7b));
}

TEST_CASE("fp8: every value round-trips, and E5M2 is F16's upper byte", "[fp8]") {
  for (uint32_t b = 0; b < 256; ++b) {
    const float a = f8e4m3_bits_to_float(static_cast<uint8_t>(b));
    const float c = f8e5m2_bits_to_float(static_cast<uint8_t>(b));
    CHECK(float_to_f8e4m3_bits(a) == b);  // E4M3's NaN is one pattern per sign: it round-trips too
    // E5M2 has three NaN patterns per sign; a NaN encodes as the all-ones one (PyTorch's 0x7f)
    CHECK(float_to_f8e5m2_bits(c) == (std::isnan(c) ? (b | 0x7fu) : b));
    // widening is exact into F16 and BF16 (NaNs compare by class)
    CHECK(same_value(f16_bits_to_float(float_to_f16_bits(a)), a));
    CHECK(same_value(bf16_bits_to_float(float_to_bf16_bits(a)), a));
    CHECK(same_value(bf16_bits_to_float(float_to_bf16_bits(c)), c));
    if (!std::isnan(c)) CHECK(float_to_f16_bits(c) == (b << 8));
  }
}

TEST_CASE("fp8: every F16 and every BF16 value encodes as the definition's nearest, in both modes", "[fp8]") {
  for (const Def* d : {&kE4M3, &kE5M2}) {
    int64_t bad = 0;
    for (uint32_t h = 0; h < 65536; ++h) {
      for (const float x : {f16_bits_to_float(static_cast<uint16_t>(h)), bf16_bits_to_float(static_cast<uint16_t>(h))}) {
        for (const bool sat : {false, true}) {
          const uint8_t want = reference_encode(*d, x, sat), got = encode(*d, x, sat);
          if (want != got && ++bad <= 5) {
            INFO("E" << d->e_bits << "M" << d->m_bits << " x=" << x << " saturate=" << sat);
            CHECK(int(got) == int(want));
          }
        }
      }
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("fp8: F32 inputs at and beside every rounding boundary", "[fp8]") {
  // Between each pair of neighbouring magnitudes (and between the largest and the first past it) the
  // midpoint is exact in F32; one F32 ulp below it, at it and above it must round as the reference says.
  for (const Def* d : {&kE4M3, &kE5M2}) {
    int64_t checked = 0, bad = 0;
    std::vector<double> mags;
    for (uint32_t m = 0; m <= d->max_mag(); ++m) mags.push_back(d->value(m));
    const double top = mags.back();
    mags.push_back(top + std::ldexp(1.0, std::ilogb(top) - d->m_bits));
    for (size_t i = 0; i + 1 < mags.size(); ++i) {
      const float mid = static_cast<float>((mags[i] + mags[i + 1]) / 2);
      REQUIRE(static_cast<double>(mid) == (mags[i] + mags[i + 1]) / 2);
      for (const float x : {std::nextafter(mid, 0.0f), mid, std::nextafter(mid, INFINITY), static_cast<float>(mags[i])}) {
        for (const float s : {x, -x}) {
          for (const bool sat : {false, true}) {
            ++checked;
            if (encode(*d, s, sat) != reference_encode(*d, s, sat) && ++bad <= 5) {
              INFO("x=" << s << " saturate=" << sat);
              CHECK(int(encode(*d, s, sat)) == int(reference_encode(*d, s, sat)));
            }
          }
        }
      }
    }
    CHECK(checked > 1000);
    CHECK(bad == 0);
  }
  // F32 specials, the smallest subnormals and huge values
  for (const float x : {0.0f, -0.0f, INFINITY, -INFINITY, std::numeric_limits<float>::denorm_min(), FLT_MAX, -FLT_MAX,
                        std::ldexp(1.0f, -126), 1e30f}) {
    for (const bool sat : {false, true}) {
      CHECK(float_to_f8e4m3_bits(x, sat) == reference_encode(kE4M3, x, sat));
      CHECK(float_to_f8e5m2_bits(x, sat) == reference_encode(kE5M2, x, sat));
    }
  }
}

TEST_CASE("fp8: random F32 bit patterns encode as the definition says", "[fp8]") {
  uint64_t s = 0x9e3779b97f4a7c15ull;
  int64_t bad = 0;
  for (int i = 0; i < 200000; ++i) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    uint32_t u = static_cast<uint32_t>(s);
    // half the draws near FP8's range (exponents 2^-20 .. 2^20), half anywhere
    if (i & 1) u = (u & 0x807fffffu) | ((107u + (u >> 23) % 40u) << 23);
    float x;
    std::memcpy(&x, &u, 4);
    for (const bool sat : {false, true}) {
      bad += float_to_f8e4m3_bits(x, sat) != reference_encode(kE4M3, x, sat);
      bad += float_to_f8e5m2_bits(x, sat) != reference_encode(kE5M2, x, sat);
    }
  }
  CHECK(bad == 0);
}

// The branch-free rounding the CPU kernels vectorize (detail::float_to_minifloat_select) is the same function
// as the tested one: every F16 and BF16 value, every F32 exponent with the mantissas around each rounding
// boundary, specials, and 4M random bit patterns, in both formats and modes.
TEST_CASE("fp8: the branch-free encoder gives the scalar encoder's bits", "[fp8]") {
  std::vector<uint32_t> inputs;
  for (uint32_t h = 0; h < 65536; ++h) {
    inputs.push_back(detail::float_bits(f16_bits_to_float(static_cast<uint16_t>(h))));
    inputs.push_back(h << 16);  // the BF16 values
  }
  for (uint32_t e = 0; e < 256; ++e)
    for (uint32_t m : {0u, 1u, 0x7fffffu, 0x400000u, 0x3fffffu, 0x400001u, 0x80000u, 0x7ffffu, 0x80001u, 0x100000u,
                       0xfffffu, 0x100001u, 0x200000u, 0x1fffffu, 0x200001u})
      for (uint32_t sign : {0u, 0x80000000u}) inputs.push_back(sign | (e << 23) | m);
  uint64_t s = 0x243f6a8885a308d3ull;
  for (int i = 0; i < 4000000; ++i) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    uint32_t u = static_cast<uint32_t>(s);
    if (i & 1) u = (u & 0x807fffffu) | ((100u + (u >> 23) % 50u) << 23);
    inputs.push_back(u);
  }
  int64_t bad = 0;
  for (const uint32_t u : inputs) {
    const float x = detail::bits_float(u);
    for (const bool sat : {false, true}) {
      bad += detail::float_to_minifloat_select<detail::E4M3>(x, sat) != float_to_f8e4m3_bits(x, sat);
      bad += detail::float_to_minifloat_select<detail::E5M2>(x, sat) != float_to_f8e5m2_bits(x, sat);
    }
  }
  CHECK(bad == 0);
  CHECK(inputs.size() > 4000000);
}

TEST_CASE("fp8: the overflow rules of the two modes", "[fp8]") {
  // E4M3: 464 is the tie between 448 and the would-be 480 and stays 448; above it the non-saturating cast
  // gives NaN (no inf), the saturating one 448; inf likewise.
  CHECK(float_to_f8e4m3_bits(464.0f) == 0x7e);
  CHECK(float_to_f8e4m3_bits(std::nextafter(464.0f, INFINITY)) == 0x7f);
  CHECK(float_to_f8e4m3_bits(std::nextafter(464.0f, INFINITY), true) == 0x7e);
  CHECK(float_to_f8e4m3_bits(-1e6f) == 0xff);
  CHECK(float_to_f8e4m3_bits(-1e6f, true) == 0xfe);
  CHECK(float_to_f8e4m3_bits(INFINITY) == 0x7f);
  CHECK(float_to_f8e4m3_bits(INFINITY, true) == 0x7e);
  // E5M2: 61440 ties to the would-be 65536 (even) and overflows: inf, or 57344 saturated
  CHECK(float_to_f8e5m2_bits(std::nextafter(61440.0f, 0.0f)) == 0x7b);
  CHECK(float_to_f8e5m2_bits(61440.0f) == 0x7c);
  CHECK(float_to_f8e5m2_bits(61440.0f, true) == 0x7b);
  CHECK(float_to_f8e5m2_bits(-INFINITY) == 0xfc);
  CHECK(float_to_f8e5m2_bits(-INFINITY, true) == 0xfb);
  // NaN stays NaN, sign kept, in both modes
  for (const bool sat : {false, true}) {
    CHECK(float_to_f8e4m3_bits(NAN, sat) == 0x7f);
    CHECK(float_to_f8e4m3_bits(-NAN, sat) == 0xff);
    CHECK(float_to_f8e5m2_bits(NAN, sat) == 0x7f);
    CHECK(std::isnan(f8e5m2_bits_to_float(float_to_f8e5m2_bits(-NAN, sat))));
  }
  // underflow: half the smallest subnormal is a tie with zero (even), just above it rounds up
  CHECK(float_to_f8e4m3_bits(std::ldexp(1.0f, -10)) == 0x00);
  CHECK(float_to_f8e4m3_bits(std::nextafter(std::ldexp(1.0f, -10), 1.0f)) == 0x01);
  CHECK(float_to_f8e4m3_bits(-std::ldexp(1.0f, -11)) == 0x80);
  CHECK(float_to_f8e5m2_bits(std::ldexp(3.0f, -18)) == 0x01);  // 0.75 of the smallest subnormal
}

TEST_CASE("fp8: the MX formats E2M1 and E8M0", "[fp8]") {
  // E2M1: s ee m, bias 1: 0, 0.5, 1, 1.5, 2, 3, 4, 6
  const float values[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (uint32_t b = 0; b < 16; ++b) {
    const float want = (b & 8u ? -1.0f : 1.0f) * values[b & 7u];
    CHECK(same_value(e2m1_bits_to_float(static_cast<uint8_t>(b)), want));
    CHECK(float_to_e2m1_bits(want) == b);
  }
  // ties to even between neighbours; saturation at 6 (no inf, no NaN)
  CHECK(float_to_e2m1_bits(0.25f) == 0x0);
  CHECK(float_to_e2m1_bits(0.75f) == 0x2);  // between 0.5 (m=1) and 1.0 (m=0): to 1.0
  CHECK(float_to_e2m1_bits(1.25f) == 0x2);
  CHECK(float_to_e2m1_bits(2.5f) == 0x4);
  CHECK(float_to_e2m1_bits(3.5f) == 0x6);
  CHECK(float_to_e2m1_bits(5.0f) == 0x6);
  CHECK(float_to_e2m1_bits(5.01f) == 0x7);
  CHECK(float_to_e2m1_bits(-100.0f) == 0xf);
  CHECK(float_to_e2m1_bits(INFINITY) == 0x7);
  // E8M0: 2^(b - 127), 0xff NaN
  for (uint32_t b = 0; b < 255; ++b) CHECK(e8m0_to_float(static_cast<uint8_t>(b)) == std::ldexp(1.0f, static_cast<int>(b) - 127));
  CHECK(std::isnan(e8m0_to_float(0xff)));
}

TEST_CASE("fp8: tensors cast to and from FP8 like the scalar code, on every path", "[fp8]") {
  std::vector<float> xs;
  for (uint32_t h = 0; h < 65536; h += 7) xs.push_back(f16_bits_to_float(static_cast<uint16_t>(h)));
  xs.insert(xs.end(), {448.0f, 464.0f, 465.0f, 1e9f, -INFINITY, NAN, 61440.0f});
  const Tensor x = from_vector(xs, Shape{static_cast<int64_t>(xs.size())});
  for (const DType dt : {DType::F8E4M3, DType::F8E5M2}) {
    const Tensor q = x.to(dt);
    CHECK(q.dtype() == dt);
    CHECK(q.nbytes() == xs.size());
    const auto* p = static_cast<const uint8_t*>(q.data_ptr());
    int64_t bad = 0;
    for (size_t i = 0; i < xs.size(); ++i)
      bad += p[i] != (dt == DType::F8E4M3 ? float_to_f8e4m3_bits(xs[i]) : float_to_f8e5m2_bits(xs[i]));
    CHECK(bad == 0);
    // from the other source dtypes: F16 and BF16 widen exactly, F64 rounds through F32 (as PyTorch)
    for (const DType src : {DType::F16, DType::BF16, DType::F64}) {
      const Tensor xs_src = x.to(src);
      const Tensor via = xs_src.to(DType::F32).to(dt);
      const Tensor direct = xs_src.to(dt);
      CHECK(std::memcmp(direct.data_ptr(), via.data_ptr(), xs.size()) == 0);
    }
    // back to every dtype: exact widening
    const std::vector<float> back = q.to_vector<float>();
    for (size_t i = 0; i < xs.size(); ++i)
      bad += !same_value(back[i], dt == DType::F8E4M3 ? f8e4m3_bits_to_float(p[i]) : f8e5m2_bits_to_float(p[i]));
    CHECK(bad == 0);
    const Tensor b16 = q.to(DType::BF16), h16 = q.to(DType::F16);
    CHECK(std::memcmp(b16.to(dt).data_ptr(), p, xs.size()) == 0);
    CHECK(std::memcmp(h16.to(dt).data_ptr(), p, xs.size()) == 0);
    // I64 both ways goes through F32
    const Tensor ints = from_vector(std::vector<int64_t>{-3, 0, 7, 1000}, Shape{4});
    const std::vector<float> got = ints.to(dt).to_vector<float>();
    CHECK(got[0] == -3.0f);
    CHECK(got[2] == 7.0f);
    if (dt == DType::F8E4M3) CHECK(std::isnan(got[3]));  // past 464: NaN, E4M3 has no inf
    else CHECK(got[3] == 1024.0f);                      // 1000 is nearer 1024 than 896
    CHECK(ints.to(dt).to(DType::I64).to_vector<int64_t>()[2] == 7);
  }
}

TEST_CASE("fp8: the bulk conversions match the scalar functions, saturating or not", "[fp8]") {
  std::vector<float> xs;
  for (uint32_t b = 0; b < 65536; ++b) xs.push_back(bf16_bits_to_float(static_cast<uint16_t>(b)));
  std::vector<uint8_t> q(xs.size());
  std::vector<float> back(xs.size());
  for (const DType dt : {DType::F8E4M3, DType::F8E5M2}) {
    for (const bool sat : {false, true}) {
      convert_f32_to_f8(xs.data(), q.data(), dt, static_cast<int64_t>(xs.size()), sat);
      int64_t bad = 0;
      for (size_t i = 0; i < xs.size(); ++i)
        bad += q[i] != (dt == DType::F8E4M3 ? float_to_f8e4m3_bits(xs[i], sat) : float_to_f8e5m2_bits(xs[i], sat));
      CHECK(bad == 0);
    }
    for (uint32_t b = 0; b < 256; ++b) q[b] = static_cast<uint8_t>(b);
    convert_f8_to_f32(q.data(), dt, back.data(), 256);
    for (uint32_t b = 0; b < 256; ++b)
      CHECK(same_value(back[b], dt == DType::F8E4M3 ? f8e4m3_bits_to_float(static_cast<uint8_t>(b))
                                                    : f8e5m2_bits_to_float(static_cast<uint8_t>(b))));
  }
  REQUIRE_THROWS_WITH(convert_f32_to_f8(xs.data(), q.data(), DType::F16, 1), Catch::Contains("not an FP8 dtype"));
}

TEST_CASE("fp8: printing, factories, shape ops and safetensors", "[fp8]") {
  const Tensor q = from_vector(std::vector<float>{1.0f, -0.5f, 448.0f, 0.1f}, Shape{2, 2}).to(DType::F8E4M3);
  std::ostringstream os;
  os << q;
  CHECK(os.str().find("dtype=F8E4M3") != std::string::npos);
  CHECK(os.str().find("448") != std::string::npos);
  CHECK(os.str().find("0.1016") != std::string::npos);  // 0.1 in E4M3 is 13 * 2^-7 = 0.1015625
  CHECK(dtype_size(DType::F8E5M2) == 1);
  CHECK(is_floating(DType::F8E4M3));
  CHECK(is_fp8(DType::F8E5M2));
  CHECK(!is_low_precision(DType::F8E4M3));

  CHECK(full(Shape{3}, 0.3, {.dtype = DType::F8E5M2}).to_vector<float>() == std::vector<float>(3, 0.3125f));
  CHECK(zeros(Shape{2}, {.dtype = DType::F8E4M3}).to_vector<float>() == std::vector<float>{0.0f, 0.0f});
  // copies of 1-byte elements: transpose and reshape keep the bytes
  const Tensor t = q.transpose(0, 1);
  CHECK(t.to_vector<float>() == std::vector<float>{1.0f, 448.0f, -0.5f, 0.1015625f});

  const test::TempDir dir("fp8");  // per process: CI runs this case in two processes at once
  const std::string path = dir / "fp8.safetensors";
  const Tensor g = from_vector(std::vector<float>{57344.0f, -2.0f, 0.0f}, Shape{3}).to(DType::F8E5M2);
  save_safetensors(path, {{"q", q}, {"g", g}});
  std::string bytes;
  {
    FILE* f = std::fopen(path.c_str(), "rb");
    REQUIRE(f != nullptr);
    char buf[4096];
    const size_t n = std::fread(buf, 1, sizeof buf, f);
    std::fclose(f);
    bytes.assign(buf, n);
  }
  CHECK(bytes.find("\"dtype\":\"F8_E4M3\"") != std::string::npos);
  CHECK(bytes.find("\"dtype\":\"F8_E5M2\"") != std::string::npos);
  const auto loaded = load_safetensors(path).tensors;
  REQUIRE(loaded.count("q") == 1);
  CHECK(loaded.at("q").dtype() == DType::F8E4M3);
  CHECK(loaded.at("g").dtype() == DType::F8E5M2);
  CHECK(std::memcmp(loaded.at("q").data_ptr(), q.data_ptr(), 4) == 0);
  CHECK(std::memcmp(loaded.at("g").data_ptr(), g.data_ptr(), 3) == 0);
}

TEST_CASE("fp8: ops refuse FP8 and name the cast to make", "[fp8]") {
  const Tensor q = from_vector(std::vector<float>{1.0f, 2.0f, 3.0f, 4.0f}, Shape{2, 2}).to(DType::F8E4M3);
  REQUIRE_THROWS_WITH(add(q, q), Catch::Contains("F8E4M3") && Catch::Contains(".to(DType::BF16)"));
  REQUIRE_THROWS_WITH(matmul(q, q), Catch::Contains("F8E4M3") && Catch::Contains("storage format"));
  REQUIRE_THROWS_WITH(q.sum(), Catch::Contains("F8E4M3"));
  // the exact way round: decode to BF16 and compute there
  CHECK(matmul(q.to(DType::BF16), q.to(DType::BF16)).to_vector<float>() == std::vector<float>{7, 10, 15, 22});
}
