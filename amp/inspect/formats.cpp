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

// The inspector's view of a dtype's row (core/dtype.h, core/number_format.h): the limits are the row's.
FormatInfo make_info(DType dtype) {
  const NumberFormat& n = dtype_info(dtype).format;
  FormatInfo f;
  f.dtype = dtype;
  f.name = dtype_name(dtype);
  f.exponent_bits = n.exponent_bits;
  f.mantissa_bits = n.mantissa_bits;
  f.total_bits = n.total_bits();
  f.precision_bits = n.mantissa_bits + 1;
  f.exponent_bias = n.bias();
  f.min_exponent = n.min_exponent();
  f.max_exponent = n.max_exponent();
  f.has_inf = n.has_inf();
  f.max_finite = n.max();
  f.min_normal = n.min_normal();
  f.min_subnormal = n.min_subnormal();
  f.epsilon = n.epsilon();
  const double log10_2 = std::log10(2.0);
  f.decimal_digits = f.precision_bits * log10_2;
  // The standard definitions behind std::numeric_limits<float>::digits10 (6) and max_digits10 (9).
  f.digits10 = static_cast<int>(std::floor(f.mantissa_bits * log10_2));
  f.max_digits10 = static_cast<int>(std::ceil(1.0 + f.precision_bits * log10_2));
  return f;
}

// The floating dtypes whose encodings fit the inspector's 32 bits: F32, F16, BF16 and the FP8 formats.
bool inspected(DType dt) { return is_floating(dt) && dtype_info(dt).format.total_bits() <= 32; }

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
  if (dtype == DType::F32) return detail::float_bits(static_cast<float>(value));  // the cast rounds to nearest even
  return visit_storage_dtype(dtype, [&](auto t) -> uint32_t {
    using T = decltype(t);
    if constexpr (requires { t.bits; }) return from_float<T>(round_to_odd_float(value)).bits;
    else HG_FAIL("inspect: internal error, encode got ", dtype);
  });
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
  static const auto infos = [] {
    std::array<FormatInfo, kNumDTypes> a{};
    for (const DTypeInfo& d : kDTypeInfo)
      if (inspected(d.dtype)) a[static_cast<size_t>(d.dtype)] = make_info(d.dtype);
    return a;
  }();
  HG_CHECK(inspected(dtype), "inspect::format_info: dtype=", dtype,
           " is not an inspected format; use F32, F16, BF16, F8E4M3 or F8E5M2");
  return infos[static_cast<size_t>(dtype)];
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
  if (format_info(dtype).dtype == DType::F32) return detail::bits_float(bits);
  return visit_storage_dtype(dtype, [&](auto t) -> double {
    using T = decltype(t);
    if constexpr (requires { t.bits; }) {
      T v{};
      v.bits = static_cast<decltype(v.bits)>(bits);
      return to_float(v);
    } else {
      HG_FAIL("inspect: internal error, bits_value got ", dtype);
    }
  });
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
