// The number-format table (core/number_format.h) and the dtype table (core/dtype.h) against the codecs
// that implement them: every derived limit (largest finite, smallest normal and subnormal, the flush and
// overflow thresholds and which way the tie at the overflow threshold goes) must be what the format's
// own conversion does, so a wrong row or a wrong codec fails here.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <set>
#include <string>

#include "core/convert.h"
#include "core/dtype.h"
#include "core/fp8.h"
#include "core/half.h"
#include "core/number_format.h"

using namespace hg;

namespace {

// The format's codec as value -> stored bits -> value, round to nearest even, not saturating.
struct Codec {
  DType dtype;
  const NumberFormat& format;
  uint32_t (*encode)(float);
  float (*decode)(uint32_t);
};

const Codec kCodecs[] = {
    {DType::F16, kFormatF16, [](float f) -> uint32_t { return float_to_f16_bits(f); },
     [](uint32_t b) { return f16_bits_to_float(static_cast<uint16_t>(b)); }},
    {DType::BF16, kFormatBF16, [](float f) -> uint32_t { return float_to_bf16_bits(f); },
     [](uint32_t b) { return bf16_bits_to_float(static_cast<uint16_t>(b)); }},
    {DType::F8E4M3, kFormatE4M3, [](float f) -> uint32_t { return float_to_f8e4m3_bits(f); },
     [](uint32_t b) { return f8e4m3_bits_to_float(static_cast<uint8_t>(b)); }},
    {DType::F8E5M2, kFormatE5M2, [](float f) -> uint32_t { return float_to_f8e5m2_bits(f); },
     [](uint32_t b) { return f8e5m2_bits_to_float(static_cast<uint8_t>(b)); }},
};

float round_trip(const Codec& c, double v) { return c.decode(c.encode(static_cast<float>(v))); }

}  // namespace

TEST_CASE("number formats: each row's limits are what its codec does") {
  for (const Codec& c : kCodecs) {
    const NumberFormat& f = c.format;
    INFO(dtype_name(c.dtype));
    CHECK(dtype_info(c.dtype).format.exponent_bits == f.exponent_bits);
    CHECK(dtype_info(c.dtype).format.mantissa_bits == f.mantissa_bits);
    CHECK(f.total_bits() == 8 * static_cast<int>(dtype_size(c.dtype)));
    // the extreme values are stored exactly, with the bit patterns the row derives
    CHECK(round_trip(c, f.max()) == f.max());
    CHECK(c.encode(static_cast<float>(f.max())) == f.max_bits());
    CHECK(round_trip(c, f.min_normal()) == f.min_normal());
    CHECK(round_trip(c, f.min_subnormal()) == f.min_subnormal());
    CHECK(round_trip(c, -f.min_subnormal()) == -f.min_subnormal());
    CHECK(c.decode(static_cast<uint32_t>(f.max_bits())) == f.max());
    // nothing below the smallest subnormal but zero; the next value above max is not finite
    CHECK(c.decode(1) == f.min_subnormal());
    CHECK(c.decode(static_cast<uint32_t>(1u << f.mantissa_bits)) == f.min_normal());
    CHECK_FALSE(std::isfinite(c.decode(static_cast<uint32_t>(f.max_bits() + 1))));
    CHECK(round_trip(c, 1.0 + f.epsilon()) == static_cast<float>(1.0 + f.epsilon()));
    CHECK(round_trip(c, 1.0 + f.epsilon() / 4) == 1.0f);
    // flush: the threshold is a tie that goes to zero; just above it, the smallest subnormal
    CHECK(round_trip(c, f.flush_max()) == 0.0f);
    CHECK(round_trip(c, f.flush_max() * (1 + 1.0 / 64)) == f.min_subnormal());
    // overflow: just below the threshold stays max; the tie goes where the row says
    const float below = std::nextafter(static_cast<float>(f.overflow_min()), 0.0f);
    CHECK(round_trip(c, below) == f.max());
    const float at = round_trip(c, f.overflow_min());
    if (f.overflows_at_tie()) CHECK_FALSE(std::isfinite(at));
    else CHECK(at == f.max());
    const float above = std::nextafter(static_cast<float>(f.overflow_min()), INFINITY);
    CHECK_FALSE(std::isfinite(round_trip(c, above)));
    // the specials: inf only where the row has it; NaN at the all-ones pattern
    if (f.has_inf()) CHECK(std::isinf(c.decode(static_cast<uint32_t>(f.inf_bits()))));
    else CHECK(std::isnan(round_trip(c, INFINITY)));
    CHECK(std::isnan(c.decode(static_cast<uint32_t>(f.nan_bits()))));
  }
}

TEST_CASE("number formats: F32's and F64's rows are the C++ types' limits") {
  using LF = std::numeric_limits<float>;
  using LD = std::numeric_limits<double>;
  CHECK(kFormatF32.max() == LF::max());
  CHECK(kFormatF32.min_normal() == LF::min());
  CHECK(kFormatF32.min_subnormal() == LF::denorm_min());
  CHECK(kFormatF32.epsilon() == LF::epsilon());
  CHECK(kFormatF64.max() == LD::max());
  CHECK(kFormatF64.min_normal() == LD::min());
  CHECK(kFormatF64.min_subnormal() == LD::denorm_min());
  CHECK(kFormatF64.epsilon() == LD::epsilon());
  CHECK(kFormatF32.total_bits() == 32);
  CHECK(kFormatF64.total_bits() == 64);
}

TEST_CASE("number formats: E2M1's row is its codec's (MXFP4's elements, saturating)") {
  const NumberFormat& f = kFormatE2M1;
  CHECK(e2m1_bits_to_float(static_cast<uint8_t>(f.max_bits())) == f.max());
  CHECK(e2m1_bits_to_float(1) == f.min_subnormal());
  CHECK(e2m1_bits_to_float(static_cast<uint8_t>(1u << f.mantissa_bits)) == f.min_normal());
  CHECK(e2m1_bits_to_float(float_to_e2m1_bits(static_cast<float>(f.flush_max()))) == 0.0f);
  // no inf and no NaN: anything past max saturates
  CHECK(e2m1_bits_to_float(float_to_e2m1_bits(static_cast<float>(f.overflow_min()) * 4)) == f.max());
  CHECK(e2m1_bits_to_float(float_to_e2m1_bits(INFINITY)) == f.max());
  CHECK_FALSE(f.has_inf());
  CHECK_FALSE(f.has_nan());
}

TEST_CASE("dtype table: one row per dtype, consistent with itself") {
  std::set<std::string> names, tags;
  std::set<int> cuda_types, cudnn_types;
  for (DType dt : kAllDTypes) {
    const DTypeInfo& d = dtype_info(dt);
    INFO(d.name);
    CHECK(d.dtype == dt);
    CHECK(names.insert(d.name).second);
    CHECK(tags.insert(d.safetensors).second);
    if (d.cuda_data_type >= 0) CHECK(cuda_types.insert(d.cuda_data_type).second);
    if (d.cudnn_data_type >= 0) CHECK(cudnn_types.insert(d.cudnn_data_type).second);
    if (d.floating) CHECK(d.format.total_bits() == 8 * static_cast<int>(d.size));
    // the predicates are the row's
    CHECK(is_floating(dt) == d.floating);
    CHECK(is_storage_only(dt) == (d.arithmetic == Arithmetic::StorageOnly));
    CHECK(is_low_precision(dt) == (d.arithmetic == Arithmetic::Widened));
  }
  // visit_dtype refuses exactly the storage-only rows and Bool, naming the cast to make
  for (DType dt : kAllDTypes) {
    INFO(dtype_name(dt));
    if (is_storage_only(dt))
      CHECK_THROWS_WITH(visit_dtype(dt, [](auto) { return 0; }), Catch::Contains("storage format") &&
                                                                    Catch::Contains(".to(DType::BF16)"));
    else if (dt == DType::Bool)
      CHECK_THROWS_WITH(visit_dtype(dt, [](auto) { return 0; }), Catch::Contains("Bool holds true/false") &&
                                                                    Catch::Contains(".to(DType::F32)"));
    else CHECK(visit_dtype(dt, [](auto t) { return sizeof(t); }) == dtype_size(dt));
    CHECK(visit_storage_dtype(dt, [](auto t) { return sizeof(t); }) == dtype_size(dt));
  }
  // an out-of-range value reads as the "?" row: printing a corrupt dtype cannot read past the table
  const DType bad = static_cast<DType>(200);
  CHECK(std::string(dtype_name(bad)) == "?");
  CHECK(dtype_size(bad) == 0);
}

TEST_CASE("dtype table: the FP8 decode tables are the codecs'") {
  for (DType dt : kAllDTypes) {
    if (!is_fp8(dt)) continue;
    INFO(dtype_name(dt));
    const float* lut = fp8_decode_table(dt);
    int mismatched = 0;
    for (int b = 0; b < 256; ++b) {
      const float want = dt == DType::F8E4M3 ? f8e4m3_bits_to_float(static_cast<uint8_t>(b))
                                             : f8e5m2_bits_to_float(static_cast<uint8_t>(b));
      uint32_t x, y;
      std::memcpy(&x, &lut[b], 4);
      std::memcpy(&y, &want, 4);
      mismatched += x != y;
    }
    CHECK(mismatched == 0);
  }
  CHECK_THROWS_WITH(fp8_decode_table(DType::F16), Catch::Contains("not an FP8 dtype"));
}
