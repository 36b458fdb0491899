#pragma once
// The kernel contract of ops/fp8.h (per-tensor FP8 scaling): the math written once for the CPU
// (cpu/fp8.cpp) and the GPU (cuda/kernels/fp8.cu), the argument structs and the dispatch tables
// (docs/ARCHITECTURE.md, "Dispatch and registration" and "FP8").
#include <float.h>
#include <math.h>

#include <cstdint>

#include "core/dispatch_table.h"
#include "ops/kernels/gemm.h"
#include "core/fp8.h"
#include "core/macros.h"
#include "ops/fp8.h"

namespace hg {

// The scale that maps a tensor whose largest magnitude is `amax` onto `scaled_max` (the format's largest
// finite value times 2^-margin): scaled_max / amax, rounded to F32. An amax of 0, inf or NaN says nothing
// about the range, so the scale stays `keep` (1 for current scaling, the previous scale for delayed
// scaling: Transformer Engine's rule); a scale past F32's range (an amax below ~1e-36) becomes FLT_MAX, as
// TE's current scaling does (its delayed scaling would store inf and then 1/scale = 0). `pow2` rounds the
// scale down to a power of two by keeping only its exponent bits (TE's force_pow_2_scales): a power-of-two
// scale changes no mantissa, so x * scale and q / scale are exact (unless they leave the format's range).
HG_HD float fp8_scale_from_amax(float amax, float scaled_max, float keep, bool pow2) {
  if (!(amax > 0.0f) || amax > FLT_MAX) return keep;  // 0, NaN or inf
  float s = scaled_max / amax;
  if (s > FLT_MAX) s = FLT_MAX;  // inf
  if (pow2) s = detail::bits_float(detail::float_bits(s) & 0xff800000u);
  return s;
}

// The format's largest finite value (448 or 57344), and that times 2^-margin (TE: fp8_max * pow(2, -margin),
// margin a float).
HG_HD float fp8_max(DType fp8) { return fp8 == DType::F8E4M3 ? kF8E4M3Max : kF8E5M2Max; }
HG_HD float fp8_scaled_max(DType fp8, float margin) { return fp8_max(fp8) * exp2f(-margin); }

// One element: x (widened to F32) times the scale, rounded to FP8; saturating as TE's casts (and CUDA's
// __nv_fp8 constructors) are, or not, as .to(dtype) is. The branch-free form of core/fp8.h's rounding (the
// same bits), which the CPU loop vectorizes.
template <class Q>
HG_HD Q fp8_encode(float v, bool saturate);
template <>
HG_HD f8e4m3 fp8_encode<f8e4m3>(float v, bool saturate) {
  return {detail::float_to_minifloat_select<detail::E4M3>(v, saturate)};
}
template <>
HG_HD f8e5m2 fp8_encode<f8e5m2>(float v, bool saturate) {
  return {detail::float_to_minifloat_select<detail::E5M2>(v, saturate)};
}

// max over |x| as the kernels fold it: NaN wins (its bits, as an unsigned integer, are above inf's), so a
// NaN anywhere in the tensor makes its amax NaN and the next scale stays where it was.
HG_HD float amax_fold(float acc, float x) {
  const float a = fabsf(x);
  return detail::float_bits(a) > detail::float_bits(acc) ? a : acc;
}

// q[i] = fp8(x[i] * scale[0]) for i < n; the table is keyed by x's dtype (F32, F16, BF16, F64), q's FP8 dtype
// is an argument. When `amax` is given, amax[0] = max(amax[0], max |x[i]|) (before scaling): the quantize
// records the tensor's range for the recipe in the same pass. With q == nullptr only the amax is taken.
// scale and amax live in memory of x's device (1 F32 each), so nothing waits for the host.
struct Fp8QuantizeArgs {
  int64_t n = 0;
  const void* x = nullptr;
  void* q = nullptr;
  DType q_dtype = DType::F8E4M3;
  const float* scale = nullptr;
  float* amax = nullptr;
  bool saturate = true;
};
using Fp8QuantizeKernel = void (*)(const Fp8QuantizeArgs& a);
HG_KERNEL_TABLE(Fp8QuantizeKernel, fp8_quantize_kernels, "fp8_quantize");

// y[i] = decode(q[i]) * scale_inv[0], rounded to y's dtype (the table's key: F32, F16, BF16, F64).
struct Fp8DequantizeArgs {
  int64_t n = 0;
  const void* q = nullptr;
  DType q_dtype = DType::F8E4M3;
  const float* scale_inv = nullptr;
  void* y = nullptr;
};
using Fp8DequantizeKernel = void (*)(const Fp8DequantizeArgs& a);
HG_KERNEL_TABLE(Fp8DequantizeKernel, fp8_dequantize_kernels, "fp8_dequantize");

// ---- the recipes' scale updates: one thread (a <<<1,1>>> kernel on a GPU), state in device memory ------
// Current scaling: scale = fp8_scale_from_amax(amax[0], scaled_max, 1, pow2), scale_inv = 1 / scale.
// Delayed scaling (TE's amax_and_scale_update): history[0] holds this step's amax, history[1..len) the
// past steps', oldest first at [1]. The amax used is max over all len entries (NaN entries ignored, as
// fmaxf does) or history[0] alone (MostRecent); scale = fp8_scale_from_amax(amax, scaled_max, old
// scale, pow2); then the history rolls one place: [i] = [i+1], [len-1] = the old [0], and [0] = 0 for the
// next step's amax (so the oldest, the old [1], leaves).
struct Fp8ScaleArgs {
  bool delayed = false;
  float* history = nullptr;  // delayed: len entries; current: the amax, 1 entry (left as it is)
  int64_t len = 1;
  float* scale = nullptr;
  float* scale_inv = nullptr;
  float scaled_max = kF8E4M3Max;
  bool pow2 = false;
  AmaxCompute algo = AmaxCompute::Max;
};
HG_HD void fp8_scale_update(const Fp8ScaleArgs& a) {
  float amax;
  if (!a.delayed || a.algo == AmaxCompute::MostRecent) {
    amax = a.history[0];
  } else {
    amax = 0.0f;
    for (int64_t i = 0; i < a.len; ++i) amax = fmaxf(amax, a.history[i]);
  }
  const float s = fp8_scale_from_amax(amax, a.scaled_max, a.delayed ? *a.scale : 1.0f, a.pow2);
  *a.scale = s;
  *a.scale_inv = 1.0f / s;
  if (!a.delayed) return;
  const float newest = a.history[0];
  for (int64_t i = 0; i + 1 < a.len; ++i) a.history[i] = a.history[i + 1];
  a.history[a.len - 1] = newest;
  a.history[0] = 0.0f;
}
using Fp8ScaleKernel = void (*)(const Fp8ScaleArgs& a);
HG_KERNEL_TABLE(Fp8ScaleKernel, fp8_scale_kernels, "fp8_scale_update");

// ---- MX block scaling (ops/fp8.h, mx_quantize) ---------------------------------------------------------
// The element format's largest exponent (emax) and the significand bits of its largest value above the
// leading 1, as an F32 mantissa field: E4M3 448 = 1.75 * 2^8, E5M2 57344 = 1.75 * 2^15, E2M1 6 = 1.5 * 2^2.
HG_HD int mx_emax(MxFormat f) { return f == MxFormat::MXFP8_E4M3 ? 8 : f == MxFormat::MXFP8_E5M2 ? 15 : 2; }
HG_HD uint32_t mx_max_mantissa(MxFormat f) { return f == MxFormat::MXFP4 ? 0x400000u : 0x600000u; }

// The shared exponent of a block whose largest magnitude is amax (finite, >= 0), clamped to [-127, 127]:
// amax = sig * 2^fl with sig in [1, 2) (exactly, from its bits; F32 subnormals normalized); Floor gives
// fl - emax; Up adds one when sig is above the largest element's significand (amax / 2^(fl-emax) would
// then exceed the largest element). Integer arithmetic only: no log2 rounding at the binade edges.
HG_HD int mx_shared_exp(float amax, MxFormat f, MxScaleRule rule) {
  uint32_t b = detail::float_bits(amax) & 0x7fffffffu;
  if (b == 0) return -127;
  int fl;
  uint32_t mant;
  if ((b >> 23) != 0) {
    fl = static_cast<int>(b >> 23) - 127;
    mant = b & 0x7fffffu;
  } else {  // subnormal: shift the leading 1 up to bit 23
    int lead = 22;
    while (((b >> lead) & 1u) == 0) --lead;
    fl = lead - 149;
    mant = (b << (23 - lead)) & 0x7fffffu;
  }
  int x = fl - mx_emax(f);
  if (rule == MxScaleRule::Up && mant > mx_max_mantissa(f)) ++x;
  return x < -127 ? -127 : x > 127 ? 127 : x;
}

// 2^e for e in [-127, 127], exactly (2^-127 is an F32 subnormal).
HG_HD float mx_pow2(int e) {
  return e == -127 ? detail::bits_float(0x00400000u) : detail::bits_float(static_cast<uint32_t>(e + 127) << 23);
}

// The scale of a block whose largest magnitude is amax: X = 2^x (a NaN when amax is inf or NaN, so the whole
// block decodes to NaN), and 1/X = 2^-x, exact.
struct MxBlockScale {
  float scale, inv;
};
HG_HD MxBlockScale mx_block_scale(float amax, MxFormat f, MxScaleRule rule) {
  const bool special = !(amax <= 3.402823466e38f);  // inf or NaN
  const int e = special ? 0 : mx_shared_exp(amax, f, rule);
  return {special ? detail::bits_float(0x7fc00000u) : mx_pow2(e), mx_pow2(-e)};
}

// One element of a block: v / X rounded to the element format (MXFP4's E2M1 values as the F8E4M3 bytes of
// the same values), saturating.
HG_HD uint8_t mx_encode(float v_over_x, MxFormat f) {
  return f == MxFormat::MXFP8_E5M2 ? detail::float_to_minifloat_select<detail::E5M2>(v_over_x, true)
         : f == MxFormat::MXFP4    ? float_to_f8e4m3_bits(e2m1_bits_to_float(float_to_e2m1_bits(v_over_x)), true)
                                   : detail::float_to_minifloat_select<detail::E4M3>(v_over_x, true);
}

// x is contiguous F32 seen as (outer, len, inner): the blocks run along len (the dimension mx_quantize was
// given), `block` values each, the last one shorter when block does not divide len. Element (o, l, i) is
// x[(o * len + l) * inner + i]; q has x's layout; scale is (outer, ceil(len / block), inner), so that both
// keep the tensor's own shape with no transposes (blocks along the last dim: inner = 1).
struct MxQuantizeArgs {
  int64_t outer = 0, len = 0, inner = 1, block = 32;
  const float* x = nullptr;
  uint8_t* q = nullptr;
  float* scale = nullptr;
  MxFormat format = MxFormat::MXFP8_E4M3;
  MxScaleRule rule = MxScaleRule::Floor;
};
using MxQuantizeKernel = void (*)(const MxQuantizeArgs& a);
HG_KERNEL_TABLE(MxQuantizeKernel, mx_quantize_kernels, "mx_quantize");  // keyed by F32 (the op widens other inputs)

// One block (o, b, i) of a: its scale and its elements (the GPU runs a thread per block).
HG_HD void mx_quantize_block(const MxQuantizeArgs& a, int64_t o, int64_t b, int64_t i) {
  const int64_t l0 = b * a.block, l1 = l0 + a.block < a.len ? l0 + a.block : a.len;
  const int64_t base = o * a.len * a.inner + i;
  float amax = 0.0f;
  for (int64_t l = l0; l < l1; ++l) amax = amax_fold(amax, a.x[base + l * a.inner]);
  const MxBlockScale s = mx_block_scale(amax, a.format, a.rule);
  const int64_t blocks = (a.len + a.block - 1) / a.block;
  a.scale[(o * blocks + b) * a.inner + i] = s.scale;
  for (int64_t l = l0; l < l1; ++l) a.q[base + l * a.inner] = mx_encode(a.x[base + l * a.inner] * s.inv, a.format);
}

// y(o, l, i) = decode(q(o, l, i)) * scale(o, l / block, i), rounded to y's dtype (the table's key); q is F8E4M3
// (MXFP8_E4M3 and MXFP4) or F8E5M2 bytes; the layout of MxQuantizeArgs.
struct MxDequantizeArgs {
  int64_t outer = 0, len = 0, inner = 1, block = 32;
  const uint8_t* q = nullptr;
  bool e4m3 = true;
  const float* scale = nullptr;
  void* y = nullptr;
};
using MxDequantizeKernel = void (*)(const MxDequantizeArgs& a);
HG_KERNEL_TABLE(MxDequantizeKernel, mx_dequantize_kernels, "mx_dequantize");

// ---- the native FP8 GEMM of an FP8 Tensor Core (cuBLASLt on sm_89 and later) ------------------------------
// The GEMM contract's GemmArgs (ops/kernels/gemm.h) with its FP8 fields: C (m, n) F32 = scale_a[0] *
// scale_b[0] * (A (m, k) . B (n, k)^T), that is trans_a N and trans_b T, both operands row-major with k
// innermost (cuBLASLt's required "TN" layout, seen column-major), alpha 1, beta 0, c_f32, batch 1. dtype is
// A's format and b_dtype B's, F8E4M3 or F8E5M2 each but not both E5M2 (no FP8 Tensor Core multiplies two
// E5M2 operands); products exact, sums in F32; scale_a and scale_b are F32 scalars in device memory (the
// dequantization factors 1/scale), so nothing waits for the host.
// The kernel returns false, having touched nothing, when the device cannot run this call natively
// (compute capability below 8.9, another layout or a batch, a dimension or leading dimension not a multiple
// of 16, a pointer not 16-byte aligned, both operands E5M2, or no algorithm found): the op then decodes the
// FP8 values to BF16 and runs the BF16 GEMM (fp8_linear.cpp). With query set, the kernel only answers (a, b
// and c unread; the scales are needed, as they name the device), so an op makes its operands K-major only
// when the answer is yes. Keyed by A's dtype; only backends with FP8 Tensor Cores register it
// (fp8_gemm_kernels().has() is false on the CPU).
using Fp8GemmKernel = bool (*)(const GemmArgs& g);
HG_KERNEL_TABLE(Fp8GemmKernel, fp8_gemm_kernels, "fp8_gemm");

}  // namespace hg
