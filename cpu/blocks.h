#pragma once
// Widening a block of T to its compute type and rounding it back, with the vectorised converters:
// the CPU loops work on plain float (double) arrays of a few hundred elements.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <type_traits>

#include "core/convert.h"
#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/error.h"

namespace hg::cpu {

// n elements of any dtype to any other, in parallel pieces (cpu/elementwise.cpp): the to(dtype)
// kernel, and how the convolution and GEMM widen and round whole buffers.
void cast(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n);

// dst (cols, rows), leading dim ld_dst, = the transpose of src (rows, cols), leading dim ld_src; elements of
// elem_size bytes, copied in cache-sized tiles on the OpenMP team (cpu/elementwise.cpp, the tiled path of the
// strided copy): how the AVX2 GEMM lays out a transposed B.
void transpose_copy(const void* src, int64_t rows, int64_t cols, int64_t ld_src, void* dst, int64_t ld_dst,
                    int64_t elem_size);

// Grow-only scratch, 64-byte aligned like the framework's tensors (AVX-512 and AMX loads that straddle cache
// lines run slower); kept thread_local by its users, so steady-state calls allocate nothing. Uninitialised.
class Scratch {
 public:
  template <class T>
  T* get(int64_t n) {
    const size_t bytes = static_cast<size_t>(n) * sizeof(T);
    if (bytes > cap_) {
      buf_.reset(static_cast<char*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
      HG_CHECK(buf_, "cpu: could not allocate ", bytes, " bytes of scratch");
      cap_ = bytes;
    }
    return reinterpret_cast<T*>(buf_.get());
  }

 private:
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  std::unique_ptr<char, Free> buf_;
  size_t cap_ = 0;
};

template <class T, class C = compute_t<T>>
void widen(const T* src, C* dst, int64_t n) {
  if constexpr (std::is_same_v<T, f16>) convert_f16_to_f32(src, dst, n);
  else if constexpr (std::is_same_v<T, bf16>) convert_bf16_to_f32(src, dst, n);
  else std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(C));
}

template <class T, class C = compute_t<T>>
void narrow(const C* src, T* dst, int64_t n) {
  if constexpr (std::is_same_v<T, f16>) convert_f32_to_f16(src, dst, n);
  else if constexpr (std::is_same_v<T, bf16>) convert_f32_to_bf16(src, dst, n);
  else std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(C));
}

// Hot loops are compiled three times, for the baseline ISA, for AVX2+FMA and for AVX-512, and pick one
// at run time from core/cpu_features.h's simd_tier() (HG_CONVERT_ISA caps it), so transcendental
// functors vectorise 8 or 16 wide without building the library with -march. The loop body is an
// always_inline function; the functors it calls are inlined into each copy. The copies give the same
// bits: the library is compiled with -ffp-contract=off, so GCC never fuses a*b+c into an FMA, and no
// copy reorders a sum.
#if defined(__x86_64__)
#define HG_AVX2_TARGET __attribute__((target("avx2,fma,f16c")))
#define HG_AVX512_TARGET __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma,f16c")))
#define HG_STRIP_PARENS(...) __VA_ARGS__
// HG_SIMD_TIERS((template <class C>), name, body, (C* v, int64_t n), (v, n)) defines
// name_baseline/_avx2/_avx512, each calling body(args), and `name`, which calls the one for this CPU.
#define HG_SIMD_TIERS(TEMPLATE_HEAD, name, body, PARAMS, ARGS)                       \
  HG_STRIP_PARENS TEMPLATE_HEAD void name##_baseline PARAMS { body ARGS; }           \
  HG_STRIP_PARENS TEMPLATE_HEAD HG_AVX2_TARGET void name##_avx2 PARAMS { body ARGS; } \
  HG_STRIP_PARENS TEMPLATE_HEAD HG_AVX512_TARGET void name##_avx512 PARAMS { body ARGS; } \
  HG_STRIP_PARENS TEMPLATE_HEAD void name PARAMS {                                   \
    switch (simd_tier()) {                                                           \
      case SimdTier::AVX512: return name##_avx512 ARGS;                              \
      case SimdTier::AVX2: return name##_avx2 ARGS;                                  \
      default: return name##_baseline ARGS;                                          \
    }                                                                                \
  }
#else
#define HG_STRIP_PARENS(...) __VA_ARGS__
#define HG_SIMD_TIERS(TEMPLATE_HEAD, name, body, PARAMS, ARGS) \
  HG_STRIP_PARENS TEMPLATE_HEAD void name PARAMS { body ARGS; }
#endif

}  // namespace hg::cpu
