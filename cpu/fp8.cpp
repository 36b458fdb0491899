// CPU kernels of FP8 scaling (ops/kernels/fp8.h): the scaled cast with its amax in one pass, the scaled
// decode, the recipes' one-thread scale update, and MX block scaling's quantize and decode.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "core/convert.h"
#include "core/parallel.h"
#include "cpu/blocks.h"
#include "cpu/register.h"
#include "ops/kernels/fp8.h"

namespace hg::cpu {
namespace {

constexpr int64_t kPiece = 16384;     // elements per piece: one partial amax each
constexpr int64_t kParallel = 65536;  // elements below which one thread is faster

// max |x| over [begin, end) as amax_fold folds it: the largest |x| bit pattern (NaN's are above inf's), an
// integer max the compiler vectorizes.
template <class T>
float piece_amax(const T* x, int64_t begin, int64_t end) {
  uint32_t m = 0;
  for (int64_t i = begin; i < end; ++i) {
    const uint32_t b = detail::float_bits(static_cast<float>(load(x[i]))) & 0x7fffffffu;
    m = b > m ? b : m;
  }
  return detail::bits_float(m);
}

// q[i] = fp8(v[i] * scale), the branch-free rounding (core/fp8.h), compiled per SIMD tier (cpu/blocks.h):
// AVX2's variable shifts let it run 8 or 16 wide.
template <class F>
[[gnu::always_inline]] inline void encode_body(F, const float* v, uint8_t* q, int64_t n, float scale, bool saturate) {
  for (int64_t i = 0; i < n; ++i) q[i] = detail::float_to_minifloat_select<F>(v[i] * scale, saturate);
}
HG_SIMD_TIERS((template <class F>), encode_block, encode_body<F>,  // F: detail::E4M3 or E5M2, a tag
              (F f, const float* v, uint8_t* q, int64_t n, float scale, bool saturate), (f, v, q, n, scale, saturate))

template <class T, class Q>
void quantize_as(const Fp8QuantizeArgs& a) {
  using F = std::conditional_t<std::is_same_v<Q, f8e4m3>, detail::E4M3, detail::E5M2>;
  const T* x = static_cast<const T*>(a.x);
  uint8_t* q = static_cast<uint8_t*>(a.q);
  const float scale = a.scale != nullptr ? *a.scale : 1.0f;
  const int64_t pieces = num_pieces(a.n, kPiece);
  std::vector<float> partial(static_cast<size_t>(pieces), 0.0f);
  parallel_for(pieces, a.n > kParallel, [&](int64_t p) {
    const int64_t begin = p * kPiece, end = std::min(a.n, begin + kPiece);
    if (a.amax != nullptr) partial[static_cast<size_t>(p)] = piece_amax(x, begin, end);
    if (q == nullptr) return;
    if constexpr (std::is_same_v<T, float>) {
      encode_block(F{}, x + begin, q + begin, end - begin, scale, a.saturate);
    } else {  // widened to F32 (F64 rounded to F32, as the scalar path does) in blocks
      constexpr int64_t kBlock = 512;
      float buf[kBlock];
      for (int64_t b = begin; b < end; b += kBlock) {
        const int64_t len = std::min(kBlock, end - b);
        if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16>) widen(x + b, buf, len);  // vectorized
        else for (int64_t i = 0; i < len; ++i) buf[i] = static_cast<float>(x[b + i]);  // F64: rounded to F32 first
        encode_block(F{}, buf, q + b, len, scale, a.saturate);
      }
    }
  });
  if (a.amax == nullptr) return;
  float m = *a.amax;
  for (const float v : partial) m = amax_fold(m, v);
  *a.amax = m;
}

template <class T>
void quantize_kernel(const Fp8QuantizeArgs& a) {
  if (a.q_dtype == DType::F8E4M3) quantize_as<T, f8e4m3>(a);
  else quantize_as<T, f8e5m2>(a);
}

template <class T>
void dequantize_kernel(const Fp8DequantizeArgs& a) {
  const auto* q = static_cast<const uint8_t*>(a.q);
  T* y = static_cast<T*>(a.y);
  const float s = *a.scale_inv;
  const float* lut = fp8_decode_table(a.q_dtype);
  parallel_for(num_pieces(a.n, kPiece), a.n > kParallel, [&](int64_t p) {
    const int64_t begin = p * kPiece, end = std::min(a.n, begin + kPiece);
    for (int64_t i = begin; i < end; ++i) y[i] = store<T>(lut[q[i]] * s);
  });
}

void scale_kernel(const Fp8ScaleArgs& a) { fp8_scale_update(a); }

// MX on the CPU: the block scales from an integer max of |x| bits, then the branch-free encode of x / X, both
// over contiguous memory: along a block (inner == 1) or across the `inner` columns of a group of `block`
// rows (blocks along an outer dimension), where every column is its own block.
template <class E>
[[gnu::always_inline]] inline void mx_rows_body(E encode, const MxQuantizeArgs& a, int64_t o, int64_t b,
                                                uint32_t* amax, float* inv) {
  const int64_t l0 = b * a.block, l1 = std::min(a.len, l0 + a.block), blocks = num_pieces(a.len, a.block);
  const float* x = a.x + o * a.len * a.inner;
  uint8_t* q = a.q + o * a.len * a.inner;
  if (a.inner == 1) {  // one contiguous block
    uint32_t m = 0;
    for (int64_t l = l0; l < l1; ++l) {
      const uint32_t v = detail::float_bits(x[l]) & 0x7fffffffu;
      m = v > m ? v : m;
    }
    const MxBlockScale s = mx_block_scale(detail::bits_float(m), a.format, a.rule);
    a.scale[o * blocks + b] = s.scale;
    for (int64_t l = l0; l < l1; ++l) q[l] = encode(x[l] * s.inv);
    return;
  }
  std::fill(amax, amax + a.inner, 0u);
  for (int64_t l = l0; l < l1; ++l)
    for (int64_t i = 0; i < a.inner; ++i) {
      const uint32_t v = detail::float_bits(x[l * a.inner + i]) & 0x7fffffffu;
      amax[i] = v > amax[i] ? v : amax[i];
    }
  float* scale = a.scale + (o * blocks + b) * a.inner;
  for (int64_t i = 0; i < a.inner; ++i) {
    const MxBlockScale s = mx_block_scale(detail::bits_float(amax[i]), a.format, a.rule);
    scale[i] = s.scale;
    inv[i] = s.inv;
  }
  for (int64_t l = l0; l < l1; ++l)
    for (int64_t i = 0; i < a.inner; ++i) q[l * a.inner + i] = encode(x[l * a.inner + i] * inv[i]);
}

template <class F>
[[gnu::always_inline]] inline void mx_body(F, const MxQuantizeArgs& a, int64_t o, int64_t b, uint32_t* amax, float* inv) {
  mx_rows_body([](float v) { return detail::float_to_minifloat_select<F>(v, true); }, a, o, b, amax, inv);
}
HG_SIMD_TIERS((template <class F>), mx_block_rows, mx_body<F>,
              (F f, const MxQuantizeArgs& a, int64_t o, int64_t b, uint32_t* amax, float* inv), (f, a, o, b, amax, inv))

void mx_quantize_kernel(const MxQuantizeArgs& a) {
  // jobs of about kPiece elements: whole groups of blocks
  const int64_t blocks = num_pieces(a.len, a.block), total = a.outer * blocks;
  const int64_t per_job = std::max<int64_t>(1, kPiece / std::max<int64_t>(1, a.block * a.inner));
  parallel_for(num_pieces(total, per_job), a.outer * a.len * a.inner > kParallel, [&](int64_t job) {
    std::vector<uint32_t> amax(static_cast<size_t>(a.inner));
    std::vector<float> inv(static_cast<size_t>(a.inner));
    for (int64_t j = job * per_job; j < std::min(total, (job + 1) * per_job); ++j) {
      const int64_t o = j / blocks, b = j % blocks;
      switch (a.format) {
        case MxFormat::MXFP8_E4M3: mx_block_rows(detail::E4M3{}, a, o, b, amax.data(), inv.data()); break;
        case MxFormat::MXFP8_E5M2: mx_block_rows(detail::E5M2{}, a, o, b, amax.data(), inv.data()); break;
        case MxFormat::MXFP4:  // a lesson, not a hot path: the scalar rounding
          mx_rows_body([](float v) { return mx_encode(v, MxFormat::MXFP4); }, a, o, b, amax.data(), inv.data());
          break;
      }
    }
  });
}

template <class T>
void mx_dequantize_kernel(const MxDequantizeArgs& a) {
  const int64_t blocks = num_pieces(a.len, a.block);
  const float* lut = fp8_decode_table(a.e4m3 ? DType::F8E4M3 : DType::F8E5M2);
  T* y = static_cast<T*>(a.y);
  if (a.inner == 1) {  // rows of contiguous blocks
    const int64_t per_job = std::max<int64_t>(1, kPiece / std::max<int64_t>(1, a.len));
    parallel_for(num_pieces(a.outer, per_job), a.outer * a.len > kParallel, [&](int64_t job) {
      for (int64_t o = job * per_job; o < std::min(a.outer, (job + 1) * per_job); ++o)
        for (int64_t b = 0; b < blocks; ++b) {
          const float s = a.scale[o * blocks + b];
          const int64_t l0 = o * a.len + b * a.block, l1 = o * a.len + std::min(a.len, (b + 1) * a.block);
          for (int64_t l = l0; l < l1; ++l) y[l] = store<T>(lut[a.q[l]] * s);
        }
    });
    return;
  }
  const int64_t rows = a.outer * a.len, per_job = std::max<int64_t>(1, kPiece / a.inner);
  parallel_for(num_pieces(rows, per_job), rows * a.inner > kParallel, [&](int64_t job) {
    for (int64_t row = job * per_job; row < std::min(rows, (job + 1) * per_job); ++row) {
      const int64_t o = row / a.len, l = row % a.len;
      const float* s = a.scale + (o * blocks + l / a.block) * a.inner;
      const uint8_t* q = a.q + row * a.inner;
      T* out = y + row * a.inner;
      for (int64_t i = 0; i < a.inner; ++i) out[i] = store<T>(lut[q[i]] * s[i]);
    }
  });
}

}  // namespace

// This family's CPU kernels into their tables (cpu/register.cpp's register_kernels calls it).
void register_fp8() {
  fp8_quantize_kernels().set_floating(DeviceType::CPU, []<class T>(type_tag<T>) { return &quantize_kernel<T>; });
  fp8_dequantize_kernels().set_floating(DeviceType::CPU, []<class T>(type_tag<T>) { return &dequantize_kernel<T>; });
  fp8_scale_kernels().set(DeviceType::CPU, DType::F32, &scale_kernel);
  mx_quantize_kernels().set(DeviceType::CPU, DType::F32, &mx_quantize_kernel);
  mx_dequantize_kernels().set_floating(DeviceType::CPU, []<class T>(type_tag<T>) { return &mx_dequantize_kernel<T>; });
}

}  // namespace hg::cpu
