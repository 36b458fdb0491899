// f16/bf16 scalar conversions (core/half.h) and bulk conversions (core/convert.h): exhaustive over
// all 65,536 patterns of each 2-byte format, against the F16C hardware on 10^8 random float bit
// patterns, against an independent bf16 reference, tails of every vector path, and convert_any.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/convert.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define HG_TEST_X86 1
#endif

using namespace hg;

namespace {

uint32_t fbits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
float bfloat(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
std::string hex(uint32_t v) { char b[16]; std::snprintf(b, sizeof b, "0x%08x", v); return b; }

bool f16_is_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }
bool bf16_is_nan(uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0; }

// Restores the previous force-scalar setting even when an assertion throws.
struct ForceScalar {
  bool prev;
  explicit ForceScalar(bool on) : prev(convert_force_scalar(on)) {}
  ~ForceScalar() { convert_force_scalar(prev); }
};

// splitmix64: fast, and every 32-bit pattern (NaN, inf, subnormal) is equally likely.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  void fill(std::vector<float>& v) {
    for (size_t i = 0; i + 1 < v.size(); i += 2) {
      const uint64_t r = next();
      v[i] = bfloat(static_cast<uint32_t>(r));
      v[i + 1] = bfloat(static_cast<uint32_t>(r >> 32));
    }
    if (v.size() & 1) v.back() = bfloat(static_cast<uint32_t>(next()));
  }
};

bool has_f16c() {
#if HG_TEST_X86
  __builtin_cpu_init();
  unsigned a = 0, b = 0, c = 0, d = 0;  // CPUID leaf 1: clang < 15 rejects "f16c" in cpu_supports
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) && __builtin_cpu_supports("avx");
#else
  return false;
#endif
}

#if HG_TEST_X86
// Hardware references, 256-bit F16C (the library's fast path is the 512-bit one, so this is an
// independent encoding of the same instruction). imm8 0 = round to nearest even.
__attribute__((target("avx,f16c"))) uint16_t hw_to_f16(float f) { return static_cast<uint16_t>(_cvtss_sh(f, 0)); }
__attribute__((target("avx,f16c"))) float hw_from_f16(uint16_t h) { return _cvtsh_ss(h); }
__attribute__((target("avx,f16c"))) void hw_to_f16(const float* s, uint16_t* d, size_t n) {
  const size_t m = n & ~size_t{7};
  for (size_t i = 0; i < m; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), _mm256_cvtps_ph(_mm256_loadu_ps(s + i), 0));
  for (size_t i = m; i < n; ++i) d[i] = hw_to_f16(s[i]);
}
#endif

// Independent float -> bf16 reference: exact remainder comparison in 64-bit integers.
uint16_t ref_bf16(float f) {
  const uint64_t x = fbits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  const uint64_t sign = x & 0x80000000u, mag = x & 0x7fffffffu;
  uint64_t q = mag >> 16;
  const uint64_t rem = mag & 0xffffu;
  if (rem > 0x8000u || (rem == 0x8000u && (q & 1u))) ++q;  // a carry into the exponent is correct
  return static_cast<uint16_t>((sign >> 16) | q);
}

// Index of the first mismatch of a[i] and b[i] for i < n, and the number of mismatches.
struct Diff {
  int64_t first = -1, count = 0;
};
template <class A, class B> Diff diff(const A* a, const B* b, size_t n) {
  Diff d;
  for (size_t i = 0; i < n; ++i)
    if (a[i] != b[i] && d.count++ == 0) d.first = static_cast<int64_t>(i);
  return d;
}

std::vector<uint16_t> bits_of(const std::vector<f16>& v) {
  std::vector<uint16_t> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = v[i].bits;
  return r;
}
std::vector<uint16_t> bits_of(const std::vector<bf16>& v) {
  std::vector<uint16_t> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = v[i].bits;
  return r;
}

}  // namespace

TEST_CASE("convert_isa reports the vector path", "[core][half]") {
  INFO("convert_isa() = " << convert_isa());
  const std::string isa = convert_isa();
  CHECK((isa == "avx512" || isa == "f16c" || isa == "scalar"));
#if HG_TEST_X86
  // HG_CONVERT_ISA=f16c|scalar caps the path (run the suite so to cover the F16C code here)
  const char* cap = std::getenv("HG_CONVERT_ISA");
  if (!cap && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && has_f16c())
    CHECK(isa == "avx512");
  if (cap && std::string(cap) == "f16c" && has_f16c()) CHECK(isa == "f16c");
  if (cap && std::string(cap) == "scalar") CHECK(isa == "scalar");
#endif
  {
    ForceScalar fs(true);
    CHECK(std::string(convert_isa()) == "scalar");
    CHECK(convert_force_scalar(true) == true);
  }
  CHECK(convert_force_scalar(false) == false);
  CHECK(std::string(convert_isa()) == isa);
}

TEST_CASE("f16: all 65536 patterns round-trip through float", "[core][half]") {
  int64_t bad = 0, first = -1;
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t x = static_cast<uint16_t>(h);
    const float f = f16_bits_to_float(x);
    const uint16_t back = float_to_f16_bits(f);
    const bool nan = f16_is_nan(x);
    // NaN: same sign and payload, quiet bit set; everything else bit-exact.
    const bool ok = (std::isnan(f) == nan) && (nan ? back == (x | 0x200u) : back == x);
    if (!ok && bad++ == 0) first = h;
  }
  INFO("first failing pattern " << hex(static_cast<uint32_t>(first)));
  CHECK(bad == 0);
  CHECK(f16_bits_to_float(0x3c00) == 1.0f);
  CHECK(f16_bits_to_float(0x0001) == std::ldexp(1.0f, -24));
  CHECK(f16_bits_to_float(0x7bff) == 65504.0f);
  CHECK(fbits(f16_bits_to_float(0x8000)) == 0x80000000u);
  CHECK(fbits(f16_bits_to_float(0x7c01)) == 0x7fc02000u);  // signalling NaN made quiet
}

TEST_CASE("bf16: all 65536 patterns round-trip through float", "[core][half]") {
  int64_t bad = 0, first = -1;
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t x = static_cast<uint16_t>(b);
    const float f = bf16_bits_to_float(x);
    const uint16_t back = float_to_bf16_bits(f);
    const bool nan = bf16_is_nan(x);
    const bool ok = (std::isnan(f) == nan) && (nan ? back == (x | 0x40u) : back == x);
    if (!ok && bad++ == 0) first = b;
  }
  INFO("first failing pattern " << hex(static_cast<uint32_t>(first)));
  CHECK(bad == 0);
}

TEST_CASE("f16 -> float: scalar and bulk agree with F16C on all 65536 patterns", "[core][half]") {
  std::vector<f16> all(65536);
  for (uint32_t h = 0; h < 65536; ++h) all[h].bits = static_cast<uint16_t>(h);
  std::vector<uint32_t> scalar(65536);
  for (uint32_t h = 0; h < 65536; ++h) scalar[h] = fbits(f16_bits_to_float(all[h].bits));

  if (has_f16c()) {
#if HG_TEST_X86
    // bit-exact, NaNs included: the hardware also keeps the payload and sets the quiet bit
    std::vector<uint32_t> hw(65536);
    for (uint32_t h = 0; h < 65536; ++h) hw[h] = fbits(hw_from_f16(static_cast<uint16_t>(h)));
    const Diff d = diff(scalar.data(), hw.data(), 65536);
    INFO("first mismatch at f16 " << hex(static_cast<uint32_t>(d.first)));
    CHECK(d.count == 0);
#endif
  } else {
    WARN("CPU lacks F16C: hardware comparison skipped");
  }
  for (bool force : {false, true}) {
    ForceScalar fs(force);
    std::vector<float> out(65536);
    convert_f16_to_f32(all.data(), out.data(), 65536);
    std::vector<uint32_t> ob(65536);
    for (size_t i = 0; i < ob.size(); ++i) ob[i] = fbits(out[i]);
    const Diff d = diff(ob.data(), scalar.data(), 65536);
    INFO("path " << convert_isa() << ", first mismatch at f16 " << hex(static_cast<uint32_t>(d.first)));
    CHECK(d.count == 0);
  }
}

TEST_CASE("bf16 -> float: bulk agrees with scalar on all 65536 patterns", "[core][half]") {
  std::vector<bf16> all(65536);
  for (uint32_t b = 0; b < 65536; ++b) all[b].bits = static_cast<uint16_t>(b);
  for (bool force : {false, true}) {
    ForceScalar fs(force);
    std::vector<float> out(65536);
    convert_bf16_to_f32(all.data(), out.data(), 65536);
    int64_t bad = 0;
    for (uint32_t b = 0; b < 65536; ++b) bad += fbits(out[b]) != (b << 16);
    INFO("path " << convert_isa());
    CHECK(bad == 0);
  }
}

TEST_CASE("float -> f16: edge cases", "[core][half]") {
  const float p24 = std::ldexp(1.0f, -24), p25 = std::ldexp(1.0f, -25), p14 = std::ldexp(1.0f, -14);
  struct Case { float in; int expect; };  // expect -1: only compared with the hardware
  const std::vector<Case> cases = {
      {0.0f, 0x0000}, {-0.0f, 0x8000}, {1.0f, 0x3c00}, {-2.0f, 0xc000},
      {65504.0f, 0x7bff}, {-65504.0f, 0xfbff}, {65519.0f, 0x7bff}, {std::nextafter(65520.0f, 0.0f), 0x7bff},
      {65520.0f, 0x7c00}, {-65520.0f, 0xfc00}, {65536.0f, 0x7c00}, {70000.0f, 0x7c00}, {3.4028235e38f, 0x7c00},
      {p24, 0x0001}, {-p24, 0x8001}, {p25, 0x0000}, {-p25, 0x8000},  // 2^-25 is a tie: to even zero
      {std::nextafter(p25, 1.0f), 0x0001}, {std::nextafter(p25, 0.0f), 0x0000},
      {1.5f * p25, 0x0001}, {3.0f * p25, 0x0002}, {5.0f * p25, 0x0002}, {7.0f * p25, 0x0004},
      {p14, 0x0400}, {std::nextafter(p14, 0.0f), 0x0400}, {p14 - p24, 0x03ff},
      {p14 - p25, 0x0400},  // halfway between 0x3ff (odd) and 0x400: to even 0x400
      {p14 - 3.0f * p25, 0x03fe},  // halfway between 0x3fe (even) and 0x3ff
      {1.0f + std::ldexp(1.0f, -11), 0x3c00},          // halfway, even lower neighbour 0x3c00
      {1.0f + 3.0f * std::ldexp(1.0f, -11), 0x3c02},   // halfway, odd lower neighbour 0x3c01
      {std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f), 0x3c01},
      {2049.0f, 0x6800}, {2051.0f, 0x6802}, {-2051.0f, 0xe802}, {65505.0f, 0x7bff},
      {1.0f / 3.0f, 0x3555}, {0.1f, 0x2e66},
      {bfloat(0x7f800000u), 0x7c00}, {bfloat(0xff800000u), 0xfc00},
      {bfloat(0x7fc00000u), 0x7e00}, {bfloat(0xffc00000u), 0xfe00},   // quiet NaNs
      {bfloat(0x7f800001u), 0x7e00}, {bfloat(0xff800001u), 0xfe00},   // signalling, payload below bit 13
      {bfloat(0x7fa00000u), 0x7f00}, {bfloat(0x7fbfe000u), 0x7fff},   // signalling, payload kept
      {bfloat(0x7fffffffu), 0x7fff},
      {bfloat(0x00000001u), 0x0000}, {bfloat(0x807fffffu), 0x8000}, {bfloat(0x00400000u), 0x0000},  // float subnormals
      {bfloat(0x33000001u), 0x0001}, {bfloat(0x387fc000u), 0x03ff}, {bfloat(0x387fe000u), 0x0400},
  };
  std::vector<float> in;
  for (const Case& c : cases) in.push_back(c.in);
  std::vector<f16> bulk(in.size()), forced(in.size());
  convert_f32_to_f16(in.data(), bulk.data(), static_cast<int64_t>(in.size()));
  {
    ForceScalar fs(true);
    convert_f32_to_f16(in.data(), forced.data(), static_cast<int64_t>(in.size()));
  }
  const bool hw = has_f16c();
  if (!hw) WARN("CPU lacks F16C: hardware comparison skipped");
  for (size_t i = 0; i < cases.size(); ++i) {
    const uint16_t s = float_to_f16_bits(cases[i].in);
    INFO("case " << i << ": float " << hex(fbits(cases[i].in)) << " -> scalar " << hex(s));
    if (cases[i].expect >= 0) CHECK(s == cases[i].expect);
    CHECK(bulk[i].bits == s);
    CHECK(forced[i].bits == s);
#if HG_TEST_X86
    if (hw) CHECK(hw_to_f16(cases[i].in) == s);
#endif
  }
}

TEST_CASE("float -> f16: 10^8 random bit patterns agree with F16C", "[core][half]") {
  if (!has_f16c()) {
    WARN("CPU lacks F16C: skipped");
    return;
  }
#if HG_TEST_X86
  // 96 * 2^20 = 1.007e8 patterns: ~1 s at -O2, ~8 s with -fsanitize=address,undefined (measured), so
  // sanitizer builds keep the full count too.
  constexpr size_t kBuf = size_t{1} << 20;
  constexpr int kBlocks = 96;
  Rng rng{0x5eed1234abcdull};
  std::vector<float> src(kBuf);
  std::vector<uint16_t> hw(kBuf), scalar(kBuf);
  std::vector<f16> bulk(kBuf), forced(kBuf);
  int64_t bad_scalar = 0, bad_bulk = 0, bad_forced = 0;
  uint32_t first_in = 0;
  for (int b = 0; b < kBlocks; ++b) {
    rng.fill(src);
    hw_to_f16(src.data(), hw.data(), kBuf);
    for (size_t i = 0; i < kBuf; ++i) scalar[i] = float_to_f16_bits(src[i]);
    convert_f32_to_f16(src.data(), bulk.data(), static_cast<int64_t>(kBuf));
    {
      ForceScalar fs(true);
      convert_f32_to_f16(src.data(), forced.data(), static_cast<int64_t>(kBuf));
    }
    const Diff ds = diff(scalar.data(), hw.data(), kBuf);
    const Diff db = diff(bits_of(bulk).data(), hw.data(), kBuf);
    const Diff df = diff(bits_of(forced).data(), hw.data(), kBuf);
    if (bad_scalar + bad_bulk + bad_forced == 0) {
      const int64_t f = ds.first >= 0 ? ds.first : db.first >= 0 ? db.first : df.first;
      if (f >= 0) first_in = fbits(src[static_cast<size_t>(f)]);
    }
    bad_scalar += ds.count;
    bad_bulk += db.count;
    bad_forced += df.count;
  }
  INFO(kBlocks * kBuf << " patterns; first failing float " << hex(first_in) << "; path " << convert_isa());
  CHECK(bad_scalar == 0);
  CHECK(bad_bulk == 0);
  CHECK(bad_forced == 0);
#endif
}

TEST_CASE("float -> bf16: reference RNE on edge cases and 1.6e7 random patterns", "[core][half]") {
  struct Case { uint32_t in; uint16_t expect; };
  const std::vector<Case> cases = {
      {0x00000000u, 0x0000}, {0x80000000u, 0x8000}, {0x3f800000u, 0x3f80},
      {0x7f7fffffu, 0x7f80},  // FLT_MAX rounds to inf
      {0x7f7f8000u, 0x7f80},  // tie with odd lower neighbour 0x7f7f: up, to inf
      {0x3f808000u, 0x3f80},  // tie, even lower neighbour: down
      {0x3f818000u, 0x3f82},  // tie, odd lower neighbour: up
      {0x3f808001u, 0x3f81}, {0x3f807fffu, 0x3f80}, {0xbf818000u, 0xbf82},
      {0x00010000u, 0x0001}, {0x00008000u, 0x0000}, {0x00018000u, 0x0002},  // subnormals kept
      {0x00008001u, 0x0001}, {0x007fffffu, 0x0080}, {0x80000001u, 0x8000},
      {0x7f800000u, 0x7f80}, {0xff800000u, 0xff80},
      {0x7fc00000u, 0x7fc0}, {0x7f800001u, 0x7fc0}, {0xff810000u, 0xffc1}, {0x7fffffffu, 0x7fff},
      {fbits(1.0f / 3.0f), 0x3eab},
  };
  std::vector<float> in;
  for (const Case& c : cases) in.push_back(bfloat(c.in));
  std::vector<bf16> bulk(in.size()), forced(in.size());
  convert_f32_to_bf16(in.data(), bulk.data(), static_cast<int64_t>(in.size()));
  {
    ForceScalar fs(true);
    convert_f32_to_bf16(in.data(), forced.data(), static_cast<int64_t>(in.size()));
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    INFO("case " << i << ": float " << hex(cases[i].in));
    CHECK(ref_bf16(in[i]) == cases[i].expect);
    CHECK(float_to_bf16_bits(in[i]) == cases[i].expect);
    CHECK(bulk[i].bits == cases[i].expect);
    CHECK(forced[i].bits == cases[i].expect);
  }

  constexpr size_t kBuf = size_t{1} << 20;
  Rng rng{0xbf16bf16ull};
  std::vector<float> src(kBuf);
  std::vector<uint16_t> ref(kBuf), scalar(kBuf);
  std::vector<bf16> b1(kBuf), b2(kBuf);
  int64_t bad_scalar = 0, bad_bulk = 0, bad_forced = 0;
  for (int b = 0; b < 16; ++b) {
    rng.fill(src);
    for (size_t i = 0; i < kBuf; ++i) {
      ref[i] = ref_bf16(src[i]);
      scalar[i] = float_to_bf16_bits(src[i]);
    }
    convert_f32_to_bf16(src.data(), b1.data(), static_cast<int64_t>(kBuf));
    {
      ForceScalar fs(true);
      convert_f32_to_bf16(src.data(), b2.data(), static_cast<int64_t>(kBuf));
    }
    bad_scalar += diff(scalar.data(), ref.data(), kBuf).count;
    bad_bulk += diff(bits_of(b1).data(), ref.data(), kBuf).count;
    bad_forced += diff(bits_of(b2).data(), ref.data(), kBuf).count;
  }
  INFO("path " << convert_isa());
  CHECK(bad_scalar == 0);
  CHECK(bad_bulk == 0);
  CHECK(bad_forced == 0);
}

TEST_CASE("bulk conversions: tails and misaligned pointers equal the scalar functions", "[core][half]") {
  constexpr size_t kGuard = 40;
  Rng rng{42};
  for (bool force : {false, true}) {
    ForceScalar fs(force);
    for (size_t n : {0, 1, 7, 15, 16, 17, 31, 32, 33, 47, 48, 63, 64, 65, 1000}) {
      for (size_t off : {0, 1}) {
        INFO("path " << convert_isa() << ", n " << n << ", offset " << off);
        std::vector<float> f(n + off + kGuard);
        rng.fill(f);
        std::vector<f16> h(n + off + kGuard);
        std::vector<bf16> b(n + off + kGuard);
        for (size_t i = 0; i < h.size(); ++i) {
          h[i].bits = static_cast<uint16_t>(rng.next());
          b[i].bits = static_cast<uint16_t>(rng.next());
        }
        const int64_t len = static_cast<int64_t>(n);
        // dst filled with a sentinel: the first n must be converted, the rest untouched
        std::vector<f16> oh(n + off + kGuard, f16{0xabcd});
        std::vector<bf16> ob(n + off + kGuard, bf16{0xabcd});
        std::vector<float> of1(n + off + kGuard, -7.0f), of2(n + off + kGuard, -7.0f);
        convert_f32_to_f16(f.data() + off, oh.data() + off, len);
        convert_f32_to_bf16(f.data() + off, ob.data() + off, len);
        convert_f16_to_f32(h.data() + off, of1.data() + off, len);
        convert_bf16_to_f32(b.data() + off, of2.data() + off, len);
        int64_t bad = 0, overrun = 0;
        for (size_t i = 0; i < oh.size(); ++i) {
          const bool inside = i >= off && i < off + n;
          if (inside) {
            bad += oh[i].bits != float_to_f16_bits(f[i]);
            bad += ob[i].bits != float_to_bf16_bits(f[i]);
            bad += fbits(of1[i]) != fbits(f16_bits_to_float(h[i].bits));
            bad += fbits(of2[i]) != fbits(bf16_bits_to_float(b[i].bits));
          } else {
            overrun += oh[i].bits != 0xabcd;
            overrun += ob[i].bits != 0xabcd;
            overrun += of1[i] != -7.0f;
            overrun += of2[i] != -7.0f;
          }
        }
        CHECK(bad == 0);
        CHECK(overrun == 0);
      }
    }
  }
}

namespace {
constexpr DType kAll[] = {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64};

// Encodes values (each representable in dt) as a byte buffer of dtype dt.
std::vector<unsigned char> encode(DType dt, const std::vector<double>& vals) {
  std::vector<unsigned char> out(vals.size() * dtype_size(dt));
  visit_dtype(dt, [&](auto tag) {
    using T = decltype(tag);
    for (size_t i = 0; i < vals.size(); ++i) {
      T v;
      if constexpr (sizeof(T) == 2) v = from_float<T>(static_cast<float>(vals[i]));
      else v = static_cast<T>(vals[i]);
      std::memcpy(out.data() + i * sizeof(T), &v, sizeof(T));
    }
  });
  return out;
}
}  // namespace

TEST_CASE("convert_any: round trips among all dtype pairs", "[core][half]") {
  const std::vector<double> ints = {0, 1, -1, 2, -3, 7, 100, -128, 256, 1024, -2048, 17, 255};
  std::vector<double> floats = ints;
  for (double v : {0.5, -0.25, 1.5, 0.375, -1.75, 1.0 / 1024, 96.5, -0.0078125}) floats.push_back(v);
  for (DType a : kAll) {
    for (DType b : kAll) {
      const std::vector<double>& vals = (a == DType::I64 || b == DType::I64) ? ints : floats;
      const int64_t n = static_cast<int64_t>(vals.size());
      INFO(a << " -> " << b << " -> " << a);
      const std::vector<unsigned char> src = encode(a, vals), expect = encode(b, vals);
      std::vector<unsigned char> mid(expect.size(), 0xee), back(src.size(), 0xee);
      convert_any(src.data(), a, mid.data(), b, n);
      CHECK(mid == expect);
      convert_any(mid.data(), b, back.data(), a, n);
      CHECK(back == src);
    }
  }
}

TEST_CASE("convert_any: rounding, truncation and blocks", "[core][half]") {
  // F16 <-> BF16 goes through f32 blocks of 1024: cross block boundaries, compare the scalar chain
  constexpr int64_t n = 2500;
  Rng rng{7};
  std::vector<f16> h(n);
  std::vector<bf16> b(n), hb(n);
  std::vector<f16> bh(n);
  for (int64_t i = 0; i < n; ++i) {
    h[i].bits = static_cast<uint16_t>(rng.next());
    b[i].bits = static_cast<uint16_t>(rng.next());
  }
  convert_any(h.data(), DType::F16, hb.data(), DType::BF16, n);
  convert_any(b.data(), DType::BF16, bh.data(), DType::F16, n);
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    bad += hb[i].bits != float_to_bf16_bits(f16_bits_to_float(h[i].bits));
    bad += bh[i].bits != float_to_f16_bits(bf16_bits_to_float(b[i].bits));
  }
  CHECK(bad == 0);

  // F64 -> F16 rounds through float (like PyTorch's CPU cast); 1/3 -> 0x3555
  const double d[] = {1.0 / 3.0, 70000.0, -65504.0, 1e-8};
  f16 dh[4];
  convert_any(d, DType::F64, dh, DType::F16, 4);
  CHECK(dh[0].bits == 0x3555);
  CHECK(dh[1].bits == 0x7c00);
  CHECK(dh[2].bits == 0xfbff);
  CHECK(dh[3].bits == 0x0000);
  bf16 db[1];
  convert_any(d, DType::F64, db, DType::BF16, 1);
  CHECK(db[0].bits == 0x3eab);

  // float -> I64 truncates toward zero; I64 -> float rounds to nearest even
  const float f[] = {-2.5f, 2.5f, -0.9f, 1e10f, 3.99f};
  int64_t fi[5];
  convert_any(f, DType::F32, fi, DType::I64, 5);
  CHECK(fi[0] == -2);
  CHECK(fi[1] == 2);
  CHECK(fi[2] == 0);
  CHECK(fi[3] == 10000000000);
  CHECK(fi[4] == 3);
  const int64_t iv[] = {16777217, -3, 1 << 30};
  float fo[3];
  convert_any(iv, DType::I64, fo, DType::F32, 3);
  CHECK(fo[0] == 16777216.0f);
  CHECK(fo[1] == -3.0f);
  CHECK(fo[2] == 1073741824.0f);
  f16 ih[3];
  convert_any(iv, DType::I64, ih, DType::F16, 3);
  CHECK(ih[0].bits == 0x7c00);
  CHECK(ih[1].bits == 0xc200);
  // F16 -> I64 and F64 -> I64
  const f16 hv[] = {f16{0x4500}, f16{0xc0f0}};  // 5.0, -2.46875
  int64_t hi[2];
  convert_any(hv, DType::F16, hi, DType::I64, 2);
  CHECK(hi[0] == 5);
  CHECK(hi[1] == -2);
  // n == 0 touches nothing
  int64_t untouched = 99;
  convert_any(f, DType::F32, &untouched, DType::I64, 0);
  CHECK(untouched == 99);
}

TEST_CASE("round_to_tf32 keeps 10 mantissa bits, rounding ties away from zero, inf and NaN pass", "[half]") {
  auto bits = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
  };
  auto from = [](uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  CHECK(round_to_tf32(1.0f) == 1.0f);
  CHECK(round_to_tf32(-0.0f) == 0.0f);
  CHECK(std::signbit(round_to_tf32(-0.0f)));
  const float ulp = std::ldexp(1.0f, -10);                     // TF32's spacing at 1
  CHECK(round_to_tf32(1.0f + ulp / 4) == 1.0f);                 // below half: down
  CHECK(round_to_tf32(1.0f + ulp * 3 / 4) == 1.0f + ulp);       // above half: up
  CHECK(round_to_tf32(1.0f + ulp / 2) == 1.0f + ulp);           // a tie: away from zero (not to even)
  CHECK(round_to_tf32(-(1.0f + ulp / 2)) == -(1.0f + ulp));
  CHECK(round_to_tf32(1.0f + ulp + ulp / 2) == 1.0f + 2 * ulp);  // a tie above an odd mantissa: away too
  // every result has its 13 low mantissa bits clear, and is within half a TF32 ulp of the input
  for (float f : {3.14159265f, -2.7182817f, 1e-30f, 6.1e-5f, 12345.678f, 1e-40f /* subnormal */}) {
    const float r = round_to_tf32(f);
    INFO(f << " -> " << r);
    CHECK((bits(r) & 0x1fffu) == 0);
    CHECK(std::fabs(r - f) <= std::ldexp(std::fabs(f) > 1.1754944e-38f ? std::fabs(f) : 1.1754944e-38f, -11) * 1.0000001f);
  }
  CHECK(std::isinf(round_to_tf32(std::numeric_limits<float>::infinity())));
  CHECK(std::isnan(round_to_tf32(std::numeric_limits<float>::quiet_NaN())));
  CHECK(std::isinf(round_to_tf32(std::numeric_limits<float>::max())));  // past TF32's largest finite value
  CHECK(round_to_tf32(from(0x7f7fe000u)) == from(0x7f7fe000u));         // TF32's largest finite value
}
