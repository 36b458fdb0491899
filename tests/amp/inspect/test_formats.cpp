// amp::inspect formats: the layouts' constants against the known numbers, bit strings of chosen values,
// ties to even, inf/NaN, and decode() against a brute-force nearest-even search over the encodings
// written here (independent of core/half.h's integer rounding).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>

#include "amp/inspect/format_limits.h"
#include "amp/inspect/formats.h"
#include "core/error.h"

using namespace hg;
using namespace hg::amp::inspect;

namespace {

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string bits_of(double v, DType dt) { return decode(v, dt).bit_string; }

// The value of a non-negative encoding, from the layout alone (no hg conversion code).
double ref_value(const FormatInfo& f, uint32_t bits) {
  const uint32_t field = bits >> f.mantissa_bits;
  const double frac = static_cast<double>(bits & ((1u << f.mantissa_bits) - 1u));
  if (field == 0) return std::ldexp(frac, f.min_exponent - f.mantissa_bits);
  return std::ldexp(1.0 + std::ldexp(frac, -f.mantissa_bits), static_cast<int>(field) - f.exponent_bias);
}

// x rounded to nearest even in f, as an encoding: binary search over the finite non-negative
// encodings (their values increase with the bits), then the nearer neighbour, the even one on a tie.
uint32_t ref_round(const FormatInfo& f, double x) {
  const uint32_t sign = std::signbit(x) ? (1u << (f.total_bits - 1)) : 0u;
  const double a = std::fabs(x);
  const uint32_t inf_bits = ((1u << f.exponent_bits) - 1u) << f.mantissa_bits;
  const double half_ulp_max = std::ldexp(1.0, f.max_exponent - f.mantissa_bits - 1);
  if (a >= f.max_finite + half_ulp_max) return sign | inf_bits;  // IEEE 754 overflow threshold
  uint32_t lo = 0, hi = inf_bits - 1u;  // find the largest encoding with value <= a
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo + 1u) / 2u;
    if (ref_value(f, mid) <= a) lo = mid;
    else hi = mid - 1u;
  }
  if (lo == inf_bits - 1u) return sign | lo;
  const double below = a - ref_value(f, lo), above = ref_value(f, lo + 1u) - a;
  if (below < above || (below == above && (lo & 1u) == 0)) return sign | lo;
  return sign | (lo + 1u);
}

}  // namespace

TEST_CASE("inspect formats: the known constants of F32, F16 and BF16", "[inspect][cpu]") {
  const FormatInfo& h = format_info(DType::F16);
  CHECK(h.total_bits == 16);
  CHECK(h.exponent_bits == 5);
  CHECK(h.mantissa_bits == 10);
  CHECK(h.exponent_bias == 15);
  CHECK(h.max_finite == 65504.0);
  CHECK(h.min_normal == std::ldexp(1.0, -14));
  CHECK(h.min_subnormal == std::ldexp(1.0, -24));
  CHECK(h.epsilon == std::ldexp(1.0, -10));
  CHECK(h.digits10 == 3);
  CHECK(h.max_digits10 == 5);

  const FormatInfo& b = format_info(DType::BF16);
  CHECK(b.total_bits == 16);
  CHECK(b.exponent_bits == 8);
  CHECK(b.mantissa_bits == 7);
  CHECK(b.exponent_bias == 127);
  CHECK(b.max_finite == Approx(3.3895e38).epsilon(1e-4));
  CHECK(b.max_finite == std::ldexp(255.0, 120));  // 0x7f7f: 1.1111111b x 2^127
  CHECK(b.min_normal == std::ldexp(1.0, -126));
  CHECK(b.min_subnormal == std::ldexp(1.0, -133));
  CHECK(b.epsilon == std::ldexp(1.0, -7));
  CHECK(b.digits10 == 2);

  const FormatInfo& s = format_info(DType::F32);
  CHECK(s.total_bits == 32);
  CHECK(s.max_finite == static_cast<double>(std::numeric_limits<float>::max()));
  CHECK(s.min_normal == static_cast<double>(std::numeric_limits<float>::min()));
  CHECK(s.min_subnormal == static_cast<double>(std::numeric_limits<float>::denorm_min()));
  CHECK(s.epsilon == std::ldexp(1.0, -23));
  CHECK(s.epsilon == static_cast<double>(std::numeric_limits<float>::epsilon()));
  CHECK(s.digits10 == std::numeric_limits<float>::digits10);
  CHECK(s.max_digits10 == std::numeric_limits<float>::max_digits10);
  CHECK(s.decimal_digits == Approx(7.22).epsilon(1e-3));
}

TEST_CASE("inspect formats: constants match the encodings hg converts", "[inspect][cpu]") {
  struct Row {
    DType dt;
    uint32_t max_bits, one_bits;
  };
  for (const Row& r : {Row{DType::F32, 0x7f7fffffu, 0x3f800000u}, Row{DType::F16, 0x7bffu, 0x3c00u},
                       Row{DType::BF16, 0x7f7fu, 0x3f80u}, Row{DType::F8E4M3, 0x7eu, 0x38u}, Row{DType::F8E5M2, 0x7bu, 0x3cu}}) {
    INFO(dtype_name(r.dt));
    const FormatInfo& f = format_info(r.dt);
    CHECK(bits_value(r.dt, r.max_bits) == f.max_finite);
    CHECK(bits_value(r.dt, 1u << f.mantissa_bits) == f.min_normal);
    CHECK(bits_value(r.dt, 1u) == f.min_subnormal);
    CHECK(bits_value(r.dt, r.one_bits + 1u) - 1.0 == f.epsilon);
    CHECK(decode(f.max_finite, r.dt).bits == r.max_bits);
    CHECK(decode(f.max_finite, r.dt).spacing == std::ldexp(1.0, f.max_exponent - f.mantissa_bits));
  }
}

TEST_CASE("inspect formats: the histogram's limits (format_limits.h) agree with the layouts", "[inspect][cpu]") {
  const FormatInfo& h = format_info(DType::F16);
  const FormatInfo& b = format_info(DType::BF16);
  CHECK(kF16MinSubnormal == h.min_subnormal);
  CHECK(kF16MinNormal == h.min_normal);
  CHECK(kF16Max == h.max_finite);
  CHECK(kBF16MinSubnormal == b.min_subnormal);
  CHECK(kBF16MinNormal == b.min_normal);
  CHECK(kBF16Max == b.max_finite);
  // the rounding thresholds: the largest input that flushes to zero and the smallest that overflows
  for (const auto& [dt, flush_max, overflow_min] : {std::tuple{DType::F16, kF16FlushMax, kF16OverflowMin},
                                                     std::tuple{DType::BF16, kBF16FlushMax, kBF16OverflowMin}}) {
    INFO(dtype_name(dt));
    CHECK(decode(flush_max, dt).value_class == ValueClass::Zero);
    CHECK(decode(std::nextafter(flush_max, 1.0), dt).value_class == ValueClass::Subnormal);
    CHECK(decode(overflow_min, dt).value_class == ValueClass::Inf);
    CHECK(decode(std::nextafter(overflow_min, 0.0), dt).value_class == ValueClass::Normal);
  }
}

TEST_CASE("inspect formats: bit strings of 1, -2, 65504 and 65520", "[inspect][cpu]") {
  CHECK(bits_of(1.0, DType::F32) == "0|01111111|00000000000000000000000");
  CHECK(bits_of(1.0, DType::F16) == "0|01111|0000000000");
  CHECK(bits_of(1.0, DType::BF16) == "0|01111111|0000000");
  CHECK(bits_of(-2.0, DType::F32) == "1|10000000|00000000000000000000000");
  CHECK(bits_of(-2.0, DType::F16) == "1|10000|0000000000");
  CHECK(bits_of(-2.0, DType::BF16) == "1|10000000|0000000");
  CHECK(decode(-2.0, DType::F16).exponent == 1);
  CHECK(bits_hex(DType::F16, decode(1.0, DType::F16).bits) == "0x3c00");
  CHECK(bits_hex(DType::F32, decode(1.0, DType::F32).bits) == "0x3f800000");

  const auto max16 = decode(65504.0);
  CHECK(max16[0].bit_string == "0|10001110|11111111110000000000000");
  CHECK(max16[1].bit_string == "0|11110|1111111111");
  CHECK(max16[1].value_class == ValueClass::Normal);
  CHECK(max16[1].abs_error == 0.0);
  CHECK(max16[2].bit_string == "0|10001111|0000000");  // BF16 keeps 8 bits: 65504 rounds up to 2^16
  CHECK(max16[2].value == 65536.0);
  CHECK(max16[2].abs_error == 32.0);

  // 65520 is the midpoint of 65504 (odd last bit) and 2^16: the tie goes to the even encoding, inf
  const auto over = decode(65520.0);
  CHECK(over[0].value == 65520.0);
  CHECK(over[1].bit_string == "0|11111|0000000000");
  CHECK(over[1].value_class == ValueClass::Inf);
  CHECK(over[1].abs_error == kInf);
  CHECK(over[1].rel_error == kInf);
  CHECK(std::isnan(over[1].spacing));
  CHECK(decode(65519.99, DType::F16).value == 65504.0);
}

TEST_CASE("inspect formats: 1e-8 is zero in F16 and normal in BF16, and 0.1 in each", "[inspect][cpu]") {
  const auto tiny = decode(1e-8);
  CHECK(tiny[1].bit_string == "0|00000|0000000000");
  CHECK(tiny[1].value_class == ValueClass::Zero);
  CHECK(tiny[1].rel_error == 1.0);
  CHECK(tiny[1].spacing == std::ldexp(1.0, -24));
  CHECK(tiny[2].bit_string == "0|01100100|0101100");  // 1.34375 x 2^-27
  CHECK(tiny[2].value_class == ValueClass::Normal);
  CHECK(tiny[2].exponent == -27);
  CHECK(tiny[2].value == std::ldexp(1.34375, -27));
  CHECK(tiny[2].rel_error < format_info(DType::BF16).epsilon / 2);
  CHECK(tiny[0].value_class == ValueClass::Normal);

  const auto tenth = decode(0.1);
  CHECK(tenth[0].bit_string == "0|01111011|10011001100110011001101");
  CHECK(tenth[0].value == static_cast<double>(0.1f));
  CHECK(tenth[1].bit_string == "0|01011|1001100110");
  CHECK(tenth[1].value == 0.0999755859375);
  CHECK(tenth[1].exponent == -4);
  CHECK(tenth[1].spacing == std::ldexp(1.0, -14));
  CHECK(tenth[2].bit_string == "0|01111011|1001101");
  CHECK(tenth[2].value == 0.10009765625);
  CHECK(tenth[2].abs_error == Approx(0.10009765625 - 0.1).epsilon(1e-9));
  CHECK(tenth[1].rel_error == Approx((0.1 - 0.0999755859375) / 0.1).epsilon(1e-9));
}

TEST_CASE("inspect formats: subnormals", "[inspect][cpu]") {
  const Decoded h = decode(1e-6, DType::F16);
  CHECK(h.value_class == ValueClass::Subnormal);
  CHECK(h.exponent_field == 0);
  CHECK(h.exponent == -14);
  CHECK(h.spacing == std::ldexp(1.0, -24));
  CHECK(h.value == std::ldexp(17.0, -24));  // 1e-6 / 2^-24 = 16.78
  const Decoded b = decode(1e-40, DType::BF16);
  CHECK(b.value_class == ValueClass::Subnormal);
  CHECK(b.value == std::ldexp(1.0, -133));  // 1e-40 / 2^-133 = 1.09
  CHECK(decode(1e-40, DType::F32).value_class == ValueClass::Subnormal);
  CHECK(decode(1e-46, DType::F32).value_class == ValueClass::Zero);
  CHECK(decode(-1e-46, DType::F32).bit_string == "1|00000000|00000000000000000000000");
}

TEST_CASE("inspect formats: ties round to even", "[inspect][cpu]") {
  // halfway between 1 and 1 + eps: stays at the even 1; halfway above 1 + eps: up to the even 1 + 2 eps
  for (DType dt : kInspectedFormats) {
    INFO(dtype_name(dt));
    const double eps = format_info(dt).epsilon;
    CHECK(decode(1.0 + eps / 2, dt).value == 1.0);
    CHECK(decode(1.0 + 3 * eps / 2, dt).value == 1.0 + 2 * eps);
    CHECK(decode(-(1.0 + 3 * eps / 2), dt).value == -(1.0 + 2 * eps));
    CHECK(decode(1.0 + eps / 2 + eps / 1024, dt).value == 1.0 + eps);  // just past the tie: up
  }
  CHECK(decode(2049.0, DType::F16).value == 2048.0);  // F16 spacing is 2 in [2048, 4096)
  CHECK(decode(2051.0, DType::F16).value == 2052.0);
  CHECK(decode(257.0, DType::BF16).value == 256.0);  // BF16 spacing is 2 in [256, 512)
  CHECK(decode(259.0, DType::BF16).value == 260.0);
  CHECK(decode(std::ldexp(1.0, -25), DType::F16).value == 0.0);  // half the smallest subnormal
  CHECK(decode(std::ldexp(3.0, -25), DType::F16).value == std::ldexp(1.0, -23));
  // a double just above an F16 tie must not round twice (double -> F32 tie -> F16 even)
  CHECK(decode(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40), DType::F16).value == 1.0 + std::ldexp(1.0, -10));
  CHECK(decode(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40), DType::BF16).value == 1.0 + std::ldexp(1.0, -7));
}

TEST_CASE("inspect formats: inf and NaN", "[inspect][cpu]") {
  for (const Decoded& d : decode(kInf)) {
    INFO(dtype_name(d.dtype));
    CHECK(d.value_class == ValueClass::Inf);
    CHECK(d.value == kInf);
    CHECK(d.abs_error == 0.0);
    CHECK(d.exponent == format_info(d.dtype).max_exponent + 1);
  }
  CHECK(decode(-kInf, DType::F16).bit_string == "1|11111|0000000000");
  CHECK(decode(kInf, DType::BF16).bit_string == "0|11111111|0000000");
  for (const Decoded& d : decode(kNaN)) {
    INFO(dtype_name(d.dtype));
    CHECK(d.value_class == ValueClass::NaN);
    CHECK(std::isnan(d.value));
    CHECK(std::isnan(d.abs_error));
    CHECK(std::isnan(d.rel_error));
  }
  CHECK(decode(kNaN, DType::F16).bit_string.substr(0, 8) == "0|11111|");
  CHECK(decode(1e39, DType::F32).value_class == ValueClass::Inf);
  CHECK(decode(3.3895e38, DType::BF16).value_class == ValueClass::Normal);
  CHECK(decode(3.3963e38, DType::BF16).value_class == ValueClass::Inf);  // past max + half a spacing
  CHECK(std::string(value_class_name(ValueClass::Subnormal)) == "subnormal");
}

TEST_CASE("inspect formats: decode agrees with a brute-force nearest-even search", "[inspect][cpu]") {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> log2_mag(-152.0, 130.0), unit(0.0, 1.0);
  for (int i = 0; i < 4000; ++i) {
    double x = std::exp2(log2_mag(rng)) * (unit(rng) < 0.5 ? -1.0 : 1.0);
    for (DType dt : kInspectedFormats) {
      const FormatInfo& f = format_info(dt);
      double xi = x;
      if (i % 4 == 1) {  // a tie of this format, or a hair off it
        const Decoded d = decode(x, dt);
        if (d.value_class != ValueClass::Normal && d.value_class != ValueClass::Subnormal) continue;
        xi = d.value + std::copysign(d.spacing / 2, d.value) * (i % 8 == 1 ? 1.0 : 1.0 + 1e-9);
      }
      const Decoded d = decode(xi, dt);
      INFO(dtype_name(dt) << " x=" << xi);
      REQUIRE(d.bits == ref_round(f, xi));
      if (d.value_class == ValueClass::Normal || d.value_class == ValueClass::Subnormal) {
        CHECK(d.abs_error <= d.spacing / 2);
        if (std::fabs(xi) >= f.min_normal) CHECK(d.rel_error <= f.epsilon / 2);
      }
    }
  }
}

TEST_CASE("inspect formats: the FP8 formats' layouts, limits and special values", "[inspect][cpu]") {
  const FormatInfo& e4 = format_info(DType::F8E4M3);
  CHECK(e4.total_bits == 8);
  CHECK(e4.exponent_bias == 7);
  CHECK(e4.max_exponent == 8);  // the top exponent holds numbers: 1.110 x 2^8 = 448
  CHECK(!e4.has_inf);
  CHECK(e4.max_finite == 448.0);
  CHECK(e4.min_normal == std::ldexp(1.0, -6));
  CHECK(e4.min_subnormal == std::ldexp(1.0, -9));
  CHECK(e4.epsilon == 0.125);
  const FormatInfo& e5 = format_info(DType::F8E5M2);
  CHECK(e5.has_inf);
  CHECK(e5.max_finite == 57344.0);
  CHECK(e5.min_subnormal == std::ldexp(1.0, -16));
  CHECK(e5.epsilon == 0.25);
  // 448 is normal in E4M3's top binade; 465 is past it (NaN: no inf); inf becomes NaN too
  CHECK(decode(448.0, DType::F8E4M3).value_class == ValueClass::Normal);
  CHECK(decode(448.0, DType::F8E4M3).bit_string == "0|1111|110");
  CHECK(decode(465.0, DType::F8E4M3).value_class == ValueClass::NaN);
  CHECK(decode(465.0, DType::F8E4M3).exponent == e4.max_exponent + 1);
  CHECK(decode(INFINITY, DType::F8E4M3).value_class == ValueClass::NaN);
  CHECK(decode(70000.0, DType::F8E5M2).value_class == ValueClass::Inf);
  CHECK(decode(0.1, DType::F8E4M3).value == 0.1015625);
  CHECK(decode(0.1, DType::F8E4M3).bits == 0x1du);  // 0|0011|101: 1.625 x 2^-4
  CHECK(bits_hex(DType::F8E5M2, 0x3c) == "0x3c");
  CHECK(decode(std::ldexp(1.0, -8), DType::F8E4M3).value_class == ValueClass::Subnormal);
  CHECK(decode(std::ldexp(1.0, -10), DType::F8E4M3).value_class == ValueClass::Zero);  // the tie goes to even 0
}

TEST_CASE("inspect formats: F64 and I64 are refused with the formats to use", "[inspect][cpu]") {
  REQUIRE_THROWS_AS(format_info(DType::F64), hg::Error);
  REQUIRE_THROWS_WITH(format_info(DType::F64), Catch::Contains("dtype=F64") && Catch::Contains("use F32, F16, BF16, F8E4M3 or F8E5M2"));
  REQUIRE_THROWS_WITH(decode(1.0, DType::I64), Catch::Contains("inspect::format_info: dtype=I64"));
  REQUIRE_THROWS_WITH(bit_string(DType::F64, 0), Catch::Contains("not an inspected format"));
}
