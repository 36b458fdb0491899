// Bulk dtype conversions (see core/convert.h). The library is not built with -march=native, so the
// vector code is compiled per function with target attributes and picked once at run time from
// CPUID; every path is bit-identical to the scalar functions in core/half.h (tests/core/test_half.cpp
// checks this against the hardware on all halves and 10^8 random floats).
#include "core/convert.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <string_view>

#include "core/cpu_features.h"
#include "core/error.h"

#if defined(__x86_64__) || defined(__i386__)
#define HG_CONVERT_X86 1
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), a self-initialised variable that
// trips -Wmaybe-uninitialized once inlined (GCC bug 105593, fixed in 13); silence it for the header.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

namespace hg {
namespace {

enum class Isa { Scalar, F16C, AVX512 };

// Constant-initialised, so it is valid even if another static initialiser converts before main.
std::atomic<bool> g_force_scalar{false};

Isa detect_isa() {
  // HG_CONVERT_ISA=f16c or =scalar caps the path (core/cpu_features.h), so tests can cover the F16C
  // code on AVX-512 CPUs. F16C needs only AVX, not the AVX2 tier of the loops.
  if (simd_tier() == SimdTier::AVX512) return Isa::AVX512;
  const char* cap = std::getenv("HG_CONVERT_ISA");
  if (cpu_features().f16c && !(cap && std::string_view(cap) == "scalar")) return Isa::F16C;
  return Isa::Scalar;
}

Isa detected_isa() {
  static const Isa isa = detect_isa();  // CPUID once, thread-safe initialisation
  return isa;
}

Isa active_isa() {
  return g_force_scalar.load(std::memory_order_relaxed) ? Isa::Scalar : detected_isa();
}

// ---- scalar fallbacks: the core/half.h functions in a loop (the reference for every other path) --
void f16_to_f32_scalar(const f16* s, float* d, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = f16_bits_to_float(s[i].bits);
}
void f32_to_f16_scalar(const float* s, f16* d, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i].bits = float_to_f16_bits(s[i]);
}
// The bf16 loops are branch-free enough for the compiler to vectorise them at -O3 (SSE2 here, AVX2 in
// the *_avx2 copies below); they are the path on CPUs without AVX-512.
[[gnu::always_inline]] inline void bf16_to_f32_scalar(const bf16* s, float* d, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = bf16_bits_to_float(s[i].bits);
}
[[gnu::always_inline]] inline void f32_to_bf16_scalar(const float* s, bf16* d, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i].bits = float_to_bf16_bits(s[i]);
}

#if HG_CONVERT_X86
// imm8 of vcvtps2ph: round to nearest even regardless of MXCSR, no precision exception.
constexpr int kRne = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

// ---- AVX-512 (F, BW for masked 16-bit loads/stores and vpermt2w) + F16C: 16 elements per
// instruction, two per iteration to keep both load ports busy; the last 1..31 elements go through
// the same instructions under a lane mask, so there is no scalar tail.
#define HG_AVX512 __attribute__((target("avx512f,avx512bw,f16c")))

HG_AVX512 inline __mmask16 lanes(int64_t left) {  // the first min(left, 16) lanes
  return left >= 16 ? __mmask16{0xffff} : static_cast<__mmask16>((1u << left) - 1u);
}

HG_AVX512 void f16_to_f32_avx512(const f16* s, float* d, int64_t n) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 16));
    _mm512_storeu_ps(d + i, _mm512_cvtph_ps(a));
    _mm512_storeu_ps(d + i + 16, _mm512_cvtph_ps(b));
  }
  for (; i < n; i += 16) {
    const __mmask16 m = lanes(n - i);
    _mm512_mask_storeu_ps(d + i, m, _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_maskz_loadu_epi16(m, s + i))));
  }
}

HG_AVX512 void f32_to_f16_avx512(const float* s, f16* d, int64_t n) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i a = _mm512_cvtps_ph(_mm512_loadu_ps(s + i), kRne);
    const __m256i b = _mm512_cvtps_ph(_mm512_loadu_ps(s + i + 16), kRne);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), a);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i + 16), b);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = lanes(n - i);
    const __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, s + i), kRne);
    _mm512_mask_storeu_epi16(d + i, m, _mm512_zextsi256_si512(h));
  }
}

// bf16 -> f32 is a zero-extend and shift. f32 -> bf16 is the integer RNE of float_to_bf16_bits,
// x + 0x7fff + lsb in 32-bit lanes (NaN lanes replaced by x | quiet bit), then one vpermt2w takes
// the high halves of two vectors: 1.75x faster on Zen 4 than a shift and vpmovdw per vector.
// vcvtneps2bf16 would be one instruction but flushes subnormal inputs to zero.
HG_AVX512 void bf16_to_f32_avx512(const bf16* s, float* d, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes(n - i);
    const __m512i w = _mm512_cvtepu16_epi32(_mm512_castsi512_si256(_mm512_maskz_loadu_epi16(m, s + i)));
    _mm512_mask_storeu_epi32(d + i, m, _mm512_slli_epi32(w, 16));
  }
}

HG_AVX512 inline __m512i bf16_rne_hi(__m512 f) {
  const __m512i x = _mm512_castps_si512(f);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  // cannot overflow: the largest non-NaN pattern is -inf, 0xff800000
  const __m512i r = _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb);
  // NaN is unordered with itself (SAE: no invalid flag for signalling NaNs)
  const __mmask16 nan = _mm512_cmp_round_ps_mask(f, f, _CMP_UNORD_Q, _MM_FROUND_NO_EXC);
  return _mm512_mask_or_epi32(r, nan, x, _mm512_set1_epi32(0x400000));
}

HG_AVX512 void f32_to_bf16_avx512(const float* s, bf16* d, int64_t n) {
  alignas(64) uint16_t odd[32];  // word 2k+1 of (a, b): the high half of element k
  for (int k = 0; k < 32; ++k) odd[k] = static_cast<uint16_t>(2 * k + 1);
  const __m512i idx = _mm512_load_si512(odd);
  for (int64_t i = 0; i < n; i += 32) {
    const __mmask16 ma = lanes(n - i), mb = n - i > 16 ? lanes(n - i - 16) : __mmask16{0};
    const __m512i a = bf16_rne_hi(_mm512_maskz_loadu_ps(ma, s + i));
    // no pointer past the end when there is no second half
    const __m512i b = bf16_rne_hi(mb ? _mm512_maskz_loadu_ps(mb, s + i + 16) : _mm512_setzero_ps());
    _mm512_mask_storeu_epi16(d + i, (static_cast<__mmask32>(mb) << 16) | ma, _mm512_permutex2var_epi16(a, idx, b));
  }
}

// ---- F16C with 256-bit AVX: 8 elements per instruction, tails through a stack buffer.
__attribute__((target("avx,f16c"))) void f16_to_f32_f16c(const f16* s, float* d, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
  if (i < n) {
    uint16_t in[8] = {};
    float out[8];
    std::memcpy(in, s + i, static_cast<size_t>(n - i) * 2);
    _mm256_storeu_ps(out, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in))));
    std::memcpy(d + i, out, static_cast<size_t>(n - i) * 4);
  }
}

__attribute__((target("avx,f16c"))) void f32_to_f16_f16c(const float* s, f16* d, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), _mm256_cvtps_ph(_mm256_loadu_ps(s + i), kRne));
  if (i < n) {
    float in[8] = {};
    uint16_t out[8];
    std::memcpy(in, s + i, static_cast<size_t>(n - i) * 4);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm256_cvtps_ph(_mm256_loadu_ps(in), kRne));
    std::memcpy(d + i, out, static_cast<size_t>(n - i) * 2);
  }
}

// ---- bf16 on the AVX2 tier: the scalar loops, which GCC vectorises 8 wide for this target.
__attribute__((target("avx2"))) void bf16_to_f32_avx2(const bf16* s, float* d, int64_t n) { bf16_to_f32_scalar(s, d, n); }
__attribute__((target("avx2"))) void f32_to_bf16_avx2(const float* s, bf16* d, int64_t n) { f32_to_bf16_scalar(s, d, n); }
#endif  // HG_CONVERT_X86

// ---- convert_any helpers: C casts among F32, F64 and I64.
template <class S, class D> void cast_loop(const void* src, void* dst, int64_t n) {
  const S* s = static_cast<const S*>(src);
  D* d = static_cast<D*>(dst);
  if constexpr (std::is_floating_point_v<S> && std::is_same_v<D, int64_t>) {
    for (int64_t i = 0; i < n; ++i) d[i] = to_i64_saturating(s[i]);  // defined for NaN and huge values
  } else {
    for (int64_t i = 0; i < n; ++i) d[i] = static_cast<D>(s[i]);
  }
}

template <class S> void cast_from(const void* src, void* dst, DType dt, int64_t n) {
  switch (dt) {
    case DType::F32: return cast_loop<S, float>(src, dst, n);
    case DType::F64: return cast_loop<S, double>(src, dst, n);
    case DType::I64: return cast_loop<S, int64_t>(src, dst, n);
    default: HG_FAIL("convert_any: internal error, cast_from got ", dt);
  }
}

}  // namespace

void convert_f16_to_f32(const f16* src, float* dst, int64_t n) {
  switch (active_isa()) {
#if HG_CONVERT_X86
    case Isa::AVX512: return f16_to_f32_avx512(src, dst, n);
    case Isa::F16C: return f16_to_f32_f16c(src, dst, n);
#endif
    default: return f16_to_f32_scalar(src, dst, n);
  }
}

void convert_f32_to_f16(const float* src, f16* dst, int64_t n) {
  switch (active_isa()) {
#if HG_CONVERT_X86
    case Isa::AVX512: return f32_to_f16_avx512(src, dst, n);
    case Isa::F16C: return f32_to_f16_f16c(src, dst, n);
#endif
    default: return f32_to_f16_scalar(src, dst, n);
  }
}

void convert_bf16_to_f32(const bf16* src, float* dst, int64_t n) {
#if HG_CONVERT_X86
  if (active_isa() == Isa::AVX512) return bf16_to_f32_avx512(src, dst, n);
  if (active_isa() == Isa::F16C && simd_tier() == SimdTier::AVX2) return bf16_to_f32_avx2(src, dst, n);
#endif
  bf16_to_f32_scalar(src, dst, n);
}

void convert_f32_to_bf16(const float* src, bf16* dst, int64_t n) {
#if HG_CONVERT_X86
  if (active_isa() == Isa::AVX512) return f32_to_bf16_avx512(src, dst, n);
  if (active_isa() == Isa::F16C && simd_tier() == SimdTier::AVX2) return f32_to_bf16_avx2(src, dst, n);
#endif
  f32_to_bf16_scalar(src, dst, n);
}

namespace {
// Calls f(T{}) with the codec type of an FP8 dtype (core/fp8.h): the one place convert.cpp picks one.
template <class F> void visit_fp8(DType dt, const char* what, F&& f) {
  HG_CHECK(is_fp8(dt), what, ": dtype ", dt, " is not an FP8 dtype");
  visit_storage_dtype(dt, [&](auto t) {
    if constexpr (sizeof(t) == 1 && !std::is_same_v<decltype(t), bool>) f(t);
  });
}
}  // namespace

const float* fp8_decode_table(DType dt) {
  // the 256 values of each FP8 format, built once; [dtype][bits]
  static const auto tables = [] {
    std::array<std::array<float, 256>, kNumDTypes> t{};
    for (DType d : kAllDTypes)
      if (is_fp8(d))
        visit_fp8(d, "fp8_decode_table", [&](auto v) {
          for (int b = 0; b < 256; ++b) t[static_cast<size_t>(d)][b] = to_float(decltype(v){static_cast<uint8_t>(b)});
        });
    return t;
  }();
  visit_fp8(dt, "fp8_decode_table", [](auto) {});  // checks dt
  return tables[static_cast<size_t>(dt)].data();
}

void convert_f8_to_f32(const uint8_t* src, DType dt, float* dst, int64_t n) {
  const float* lut = fp8_decode_table(dt);  // checks dt
  for (int64_t i = 0; i < n; ++i) dst[i] = lut[src[i]];
}

// FP8 -> F16 or BF16 by table: every E4M3 and E5M2 value (NaN and inf included) is an F16 and a BF16 value,
// so the 16-bit patterns are exact (BF16: the F32 bits' upper half; F16: core/half.h's exact narrowing).
void convert_f8_to_16(const uint8_t* src, DType st, uint16_t* dst, DType dt, int64_t n) {
  struct Tables {
    uint16_t to_bf16[kNumDTypes][256], to_f16[kNumDTypes][256];  // [FP8 dtype][bits]
    Tables() {
      for (DType d : kAllDTypes) {
        if (!is_fp8(d)) continue;
        const float* values = fp8_decode_table(d);
        for (int b = 0; b < 256; ++b) {
          to_bf16[static_cast<size_t>(d)][b] = float_to_bf16_bits(values[b]);
          to_f16[static_cast<size_t>(d)][b] = float_to_f16_bits(values[b]);
        }
      }
    }
  };
  static const Tables tables;
  const size_t f = static_cast<size_t>(st);
  const uint16_t* lut = dt == DType::BF16 ? tables.to_bf16[f] : tables.to_f16[f];
  for (int64_t i = 0; i < n; ++i) dst[i] = lut[src[i]];
}

void convert_f32_to_f8(const float* src, uint8_t* dst, DType dt, int64_t n, bool saturate) {
  visit_fp8(dt, "convert_f32_to_f8", [&](auto v) {
    using T = decltype(v);
    for (int64_t i = 0; i < n; ++i) dst[i] = fp8_from_float<T>(src[i], saturate).bits;
  });
}

namespace {
// Converts n elements block by block through a buffer of kBlock B's: step(src_block, dst_block, len, buf).
template <class B, int64_t kBlock, class Step>
void through_buffer(const void* src, DType st, void* dst, DType dt, int64_t n, Step step) {
  B buf[kBlock];
  const auto* s = static_cast<const char*>(src);
  auto* d = static_cast<char*>(dst);
  for (int64_t off = 0; off < n; off += kBlock)
    step(s + off * static_cast<int64_t>(dtype_size(st)), d + off * static_cast<int64_t>(dtype_size(dt)),
         std::min(kBlock, n - off), buf);
}
}  // namespace

void convert_any(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n) {
  if (n <= 0) return;
  const DType st = src_dtype, dt = dst_dtype;
  if (st == dt) {
    std::memcpy(dst, src, static_cast<size_t>(n) * dtype_size(st));
    return;
  }
  if (st == DType::F32 && dt == DType::F16) return convert_f32_to_f16(static_cast<const float*>(src), static_cast<f16*>(dst), n);
  if (st == DType::F32 && dt == DType::BF16) return convert_f32_to_bf16(static_cast<const float*>(src), static_cast<bf16*>(dst), n);
  if (st == DType::F16 && dt == DType::F32) return convert_f16_to_f32(static_cast<const f16*>(src), static_cast<float*>(dst), n);
  if (st == DType::BF16 && dt == DType::F32) return convert_bf16_to_f32(static_cast<const bf16*>(src), static_cast<float*>(dst), n);
  if (is_fp8(st) && dt == DType::F32) return convert_f8_to_f32(static_cast<const uint8_t*>(src), st, static_cast<float*>(dst), n);
  if (st == DType::F32 && is_fp8(dt)) return convert_f32_to_f8(static_cast<const float*>(src), static_cast<uint8_t*>(dst), dt, n);
  if (is_fp8(st) && is_low_precision(dt))
    return convert_f8_to_16(static_cast<const uint8_t*>(src), st, static_cast<uint16_t*>(dst), dt, n);
  if (st == DType::Bool || dt == DType::Bool) {
    // through F64: true/false to 1/0 (exact in every dtype), a value to value != 0 (NaN is true, as C and torch);
    // F64 keeps every other dtype's zeros zero and its other values nonzero
    return through_buffer<double, 512>(src, st, dst, dt, n, [&](const char* s, char* d, int64_t len, double* buf) {
      if (st == DType::Bool) {
        for (int64_t i = 0; i < len; ++i) buf[i] = s[i] != 0 ? 1.0 : 0.0;
        convert_any(buf, DType::F64, d, dt, len);
      } else {
        convert_any(s, st, buf, DType::F64, len);
        for (int64_t i = 0; i < len; ++i) d[i] = buf[i] != 0 ? 1 : 0;
      }
    });
  }
  if (is_low_precision(st) || is_low_precision(dt) || is_fp8(st) || is_fp8(dt)) {
    // The other side is F16/BF16/FP8, F64 or I64: go through f32 in cache-sized blocks. Widening to f32
    // is exact; narrowing F64/I64 to a 1- or 2-byte type rounds twice (to float, then to 16 or 8 bits), as
    // PyTorch's CPU cast does (c10::Half/BFloat16/Float8_* are constructed from float).
    return through_buffer<float, 1024>(src, st, dst, dt, n, [&](const char* s, char* d, int64_t len, float* buf) {
      convert_any(s, st, buf, DType::F32, len);
      convert_any(buf, DType::F32, d, dt, len);
    });
  }
  switch (st) {  // F32, F64, I64 among themselves: C casts (float -> I64 truncates toward zero)
    case DType::F32: return cast_from<float>(src, dst, dt, n);
    case DType::F64: return cast_from<double>(src, dst, dt, n);
    case DType::I64: return cast_from<int64_t>(src, dst, dt, n);
    default: HG_FAIL("convert_any: unknown source dtype ", static_cast<int>(st));
  }
}

const char* convert_isa() {  // the path in use now: "scalar" while convert_force_scalar(true)
  switch (active_isa()) {
    case Isa::AVX512: return "avx512";
    case Isa::F16C: return "f16c";
    default: return "scalar";
  }
}

bool convert_force_scalar(bool on) { return g_force_scalar.exchange(on, std::memory_order_relaxed); }

}  // namespace hg
