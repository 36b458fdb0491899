// F32/F16/BF16/FP8 layouts and decode(): see formats.h.
#include "amp/inspect/formats.h"

#include <cmath>
#include <cstdio>
#include <limits>

#include "core/error.h"
#include "core/fp8.h"
#include "core/half.h"

namespace hg::amp::inspect {

namespace {

FormatInfo make_info(DType dtype, const char* name, int exponent_bits, int mantissa_bits, bool has_inf = true) {
  FormatInfo f;
  f.dtype = dtype;
  f.name = name;
  f.exponent_bits = exponent_bits;
  f.mantissa_bits = mantissa_bits;
  f.total_bits = f.sign_bits + exponent_bits + mantissa_bits;
  f.precision_bits = mantissa_bits + 1;
  f.exponent_bias = (1 << (exponent_bits - 1)) - 1;
  f.min_exponent = 1 - f.exponent_bias;
  f.has_inf = has_inf;
  f.max_exponent = f.exponent_bias;  // the all-ones field is reserved for inf and NaN
  f.max_finite = std::ldexp(2.0 - std::ldexp(1.0, -mantissa_bits), f.max_exponent);
  if (!has_inf) {  // F8E4M3: the all-ones field holds numbers; only the all-ones mantissa there is NaN
    f.max_exponent = f.exponent_bias + 1;
    f.max_finite = std::ldexp(2.0 - std::ldexp(1.0, 1 - mantissa_bits), f.max_exponent);
  }
  f.min_normal = std::ldexp(1.0, f.min_exponent);
  f.min_subnormal = std::ldexp(1.0, f.min_exponent - mantissa_bits);
  f.epsilon = std::ldexp(1.0, -mantissa_bits);
  const double log10_2 = std::log10(2.0);
  f.decimal_digits = f.precision_bits * log10_2;
  // The standard definitions behind std::numeric_limits<float>::digits10 (6) and max_digits10 (9).
  f.digits10 = static_cast<int>(std::floor(mantissa_bits * log10_2));
  f.max_digits10 = static_cast<int>(std::ceil(1.0 + f.precision_bits * log10_2));
  return f;
}

const FormatInfo kF32 = make_info(DType::F32, "F32", 8, 23);
const FormatInfo kF16 = make_info(DType::F16, "F16", 5, 10);
const FormatInfo kBF16 = make_info(DType::BF16, "BF16", 8, 7);
const FormatInfo kF8E4M3 = make_info(DType::F8E4M3, "F8E4M3", 4, 3, /*has_inf=*/false);
const FormatInfo kF8E5M2 = make_info(DType::F8E5M2, "F8E5M2", 5, 2);

// d rounded to float with round-to-odd: truncate toward zero, then set the last bit if anything was
// cut off. Rounding that float to nearest even with >= 2 fewer significand bits (F16: 11, BF16: 8 of
// F32's 24) gives exactly d rounded to nearest even (Boldo & Melquiond, "Emulation of FMA and
// correctly rounded sums: proved algorithms using rounding to odd", 2008). A plain double->float
// cast would round twice: 1 + 2^-11 + 2^-40 would become the F16 tie 1 + 2^-11 and then 1.0, not
// the correct 1 + 2^-10.
float round_to_odd_float(double d) {
  float f = static_cast<float>(d);
  if (std::isnan(d) || static_cast<double>(f) == d) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);  // inf -> FLT_MAX
  return detail::bits_float(detail::float_bits(f) | 1u);
}

uint32_t encode(double value, DType dtype) {
  switch (dtype) {
    case DType::F16: return float_to_f16_bits(round_to_odd_float(value));
    case DType::BF16: return float_to_bf16_bits(round_to_odd_float(value));
    case DType::F8E4M3: return float_to_f8e4m3_bits(round_to_odd_float(value));
    case DType::F8E5M2: return float_to_f8e5m2_bits(round_to_odd_float(value));
    default: return detail::float_bits(static_cast<float>(value));  // the cast rounds to nearest even
  }
}

ValueClass classify(const FormatInfo& f, int field, uint32_t mantissa) {
  const int all_ones = (1 << f.exponent_bits) - 1;
  if (!f.has_inf && field == all_ones && mantissa == (1u << f.mantissa_bits) - 1u) return ValueClass::NaN;
  if (f.has_inf && field == all_ones) return mantissa == 0 ? ValueClass::Inf : ValueClass::NaN;
  if (field != 0) return ValueClass::Normal;
  return mantissa == 0 ? ValueClass::Zero : ValueClass::Subnormal;
}

void set_errors(Decoded& d) {
  if (std::isnan(d.input)) {
    d.abs_error = d.rel_error = std::numeric_limits<double>::quiet_NaN();
  } else if (d.value == d.input) {  // exact, including inf stored as inf
    d.abs_error = d.rel_error = 0.0;
  } else {
    d.abs_error = std::fabs(d.value - d.input);  // inf when a finite input overflowed
    d.rel_error = d.abs_error / std::fabs(d.input);
  }
}

}  // namespace

const FormatInfo& format_info(DType dtype) {
  switch (dtype) {
    case DType::F32: return kF32;
    case DType::F16: return kF16;
    case DType::BF16: return kBF16;
    case DType::F8E4M3: return kF8E4M3;
    case DType::F8E5M2: return kF8E5M2;
    default: break;
  }
  HG_FAIL("inspect::format_info: dtype=", dtype, " is not an inspected format; use F32, F16, BF16, F8E4M3 or F8E5M2");
}

const char* value_class_name(ValueClass c) {
  switch (c) {
    case ValueClass::Zero: return "zero";
    case ValueClass::Subnormal: return "subnormal";
    case ValueClass::Normal: return "normal";
    case ValueClass::Inf: return "inf";
    case ValueClass::NaN: return "nan";
  }
  return "?";
}

std::string bit_string(DType dtype, uint32_t bits) {
  const FormatInfo& f = format_info(dtype);
  std::string s;
  for (int i = f.total_bits - 1; i >= 0; --i) {
    s += ((bits >> i) & 1u) ? '1' : '0';
    if (i == f.total_bits - 1 || i == f.mantissa_bits) s += '|';  // after the sign and the exponent
  }
  return s;
}

std::string bits_hex(DType dtype, uint32_t bits) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%0*x", format_info(dtype).total_bits / 4, static_cast<unsigned>(bits));
  return buf;
}

double bits_value(DType dtype, uint32_t bits) {
  switch (format_info(dtype).dtype) {
    case DType::F16: return f16_bits_to_float(static_cast<uint16_t>(bits));
    case DType::BF16: return bf16_bits_to_float(static_cast<uint16_t>(bits));
    case DType::F8E4M3: return f8e4m3_bits_to_float(static_cast<uint8_t>(bits));
    case DType::F8E5M2: return f8e5m2_bits_to_float(static_cast<uint8_t>(bits));
    default: return detail::bits_float(bits);
  }
}

Decoded decode(double value, DType dtype) {
  const FormatInfo& f = format_info(dtype);
  Decoded d;
  d.dtype = dtype;
  d.input = value;
  d.bits = encode(value, dtype);
  d.value = bits_value(dtype, d.bits);
  d.bit_string = bit_string(dtype, d.bits);
  d.exponent_field = static_cast<int>((d.bits >> f.mantissa_bits) & ((1u << f.exponent_bits) - 1u));
  const uint32_t mantissa = d.bits & ((1u << f.mantissa_bits) - 1u);
  d.value_class = classify(f, d.exponent_field, mantissa);
  const bool finite = d.value_class != ValueClass::Inf && d.value_class != ValueClass::NaN;
  d.exponent = !finite ? f.max_exponent + 1 : d.exponent_field == 0 ? f.min_exponent : d.exponent_field - f.exponent_bias;
  d.spacing = finite ? std::ldexp(1.0, d.exponent - f.mantissa_bits) : std::numeric_limits<double>::quiet_NaN();
  set_errors(d);
  return d;
}

std::array<Decoded, 3> decode(double value) {
  return {decode(value, kInspectedFormats[0]), decode(value, kInspectedFormats[1]),
          decode(value, kInspectedFormats[2])};
}

}  // namespace hg::amp::inspect
