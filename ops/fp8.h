#pragma once
// Per-tensor FP8 scaling, the pieces Transformer Engine's recipes are made of: a tensor's amax, the scale
// from an amax (current scaling) or from an amax history (delayed scaling), and the scaled casts. All of
// them run where the tensor lives and keep their state (amax, scale, scale_inv, history: F32 tensors) in
// that device's memory, so a training step never waits for the host.
//
//   Tensor s = hg::fp8_scale_from_amax(hg::amax(x), DType::F8E4M3);      // current scaling: 448 / amax
//   Tensor q = hg::fp8_quantize(x, DType::F8E4M3, s);                    // F8E4M3 bits of x * s, saturated
//   Tensor y = hg::fp8_dequantize(q, hg::rdiv(1.0, s));                   // ~x, F32
//
//   hg::Fp8DelayedScaling d(DType::F8E4M3, {.history_len = 1024});      // TE's DelayedScaling for one tensor
//   Tensor q = d.quantize(x);        // with the scale from past steps; records this step's amax
//   d.update();                      // after the step: the next scale from the history, then the roll
//
// The casts are not differentiable (an FP8 tensor holds no gradient): the FP8 GEMMs that use them write
// their own backward. The math is ops/kernels/fp8.h's, the same on the CPU and the GPU.
#include <map>
#include <string>

#include "core/tensor.h"

namespace hg {

// How delayed scaling reads its amax history: the max over all of it (TE's default "max") or this step's
// amax alone ("most_recent").
enum class AmaxCompute : uint8_t { Max, MostRecent };

// max |x| as a 0-d F32 tensor on x's device; NaN if x holds a NaN, 0 for an empty x.
Tensor amax(const Tensor& x);

struct Fp8ScaleOptions {
  float margin = 0.0f;  // aim at fp8_max * 2^-margin, leaving 2^margin of headroom
  bool pow2 = false;    // round the scale down to a power of two (exact scaling)
};
// Current scaling: fp8_max(dtype) * 2^-margin / amax as a 0-d F32 tensor, or 1 when amax is 0, inf or NaN
// (ops/kernels/fp8.h, fp8_scale_from_amax). `amax` is a 1-element F32 tensor; `fp8` F8E4M3 or F8E5M2.
Tensor fp8_scale_from_amax(const Tensor& amax, DType fp8, const Fp8ScaleOptions& o = {});

struct Fp8CastOptions {
  bool saturate = true;  // past the largest finite value: clamp to it (TE), or inf/NaN as .to(dtype) does
  Tensor amax = Tensor();  // if defined (1-element F32 on x's device): amax = max(amax, max |x|), in the same pass
};
// The FP8 encoding of x * scale (x: F32, F16, BF16 or F64; scale: 1-element F32 on x's device).
Tensor fp8_quantize(const Tensor& x, DType fp8, const Tensor& scale, const Fp8CastOptions& o = {});
// decode(q) * scale_inv in `out` (F32, F16, BF16 or F64); scale_inv: 1-element F32 on q's device.
Tensor fp8_dequantize(const Tensor& q, const Tensor& scale_inv, DType out = DType::F32);

// Delayed scaling of one tensor role (TE's DelayedScaling, one entry of its fp8_meta): the cast uses the
// scale computed from the amaxes of past steps, and records this step's amax into history[0]; update()
// computes the next scale from the history and rolls it. State: `amax_history` (history_len F32 values),
// `scale` and `scale_inv` (0-d F32), on the device given; its tensors are what a checkpoint saves
// (state_dict / load_state_dict), so a resumed run quantizes bit for bit as the uninterrupted one.
struct Fp8DelayedOptions {
  int64_t history_len = 1024;            // TE's default amax_history_len
  AmaxCompute algo = AmaxCompute::Max;   // "max" (TE's default) or "most_recent"
  Fp8ScaleOptions scale = {};            // margin (TE's default 0) and pow2
  bool saturate = true;
};
class Fp8DelayedScaling {
 public:
  explicit Fp8DelayedScaling(DType fp8, const Fp8DelayedOptions& o = {}, Device dev = Device::cpu());
  DType dtype() const { return fp8_; }
  const Fp8DelayedOptions& options() const { return o_; }
  Tensor quantize(const Tensor& x);  // fp8_quantize(x, dtype(), scale) and amax into history[0]
  void record(const Tensor& x);      // history[0] = max(history[0], max |x|), without a cast
  void update();                     // the step is over: new scale and scale_inv, history rolled
  const Tensor& amax_history() const { return history_; }
  const Tensor& scale() const { return scale_; }
  const Tensor& scale_inv() const { return scale_inv_; }
  void to(Device dev);
  // "amax_history", "scale", "scale_inv" under `prefix`; load checks shapes and dtypes.
  void save_into(std::map<std::string, Tensor>& out, const std::string& prefix) const;
  void load_from(const std::map<std::string, Tensor>& in, const std::string& prefix);

 private:
  DType fp8_;
  Fp8DelayedOptions o_;
  Tensor history_, scale_, scale_inv_;
};

// ---- MX block scaling (OCP Microscaling Formats v1.0) ---------------------------------------------------
// One power-of-two scale X (an E8M0 value, 2^-127..2^127) per block of `block` consecutive values along
// `dim` (32 in the spec; the reduction dimension of the GEMM that reads them), and elements
// q = encode(v / X) in the element format: MXFP8 (E4M3 or E5M2, saturating) or MXFP4 (E2M1, always
// saturating: +-6 is its largest value). v ~ decode(q) * X.
//
//   hg::MxTensor m = hg::mx_quantize(x, hg::MxFormat::MXFP8_E4M3);      // rows of 32 along the last dim
//   Tensor y = hg::mx_dequantize(m);                                     // ~x, F32
//
// The shared exponent x of a block with largest magnitude amax (ops/kernels/fp8.h, mx_shared_exp):
//   Floor (the spec's rule): x = floor(log2 amax) - emax, emax the element format's largest exponent
//     (8 for E4M3, 15 for E5M2, 2 for E2M1). The block's largest value lands in [2^emax, 2^(emax+1)), so
//     values whose significand is above the format's largest (1.75 for E4M3/E5M2, 1.5 for E2M1) saturate:
//     up to 12.5% (25% for E2M1) of the block maximum's magnitude is clipped.
//   Up (Transformer Engine's and cuBLAS's MXFP8 rule): the smallest x with amax <= elem_max * 2^x, one
//     higher than Floor exactly when Floor would saturate. Nothing clips; the price is one binade less at
//     the bottom of those blocks.
// x is clamped to E8M0's [-127, 127] (an all-zero block gets 2^-127). A block holding an inf or a NaN gets
// a NaN scale (E8M0's 0xff), so all its values decode to NaN, as the spec says.
//
// Storage: `data` is F8E4M3 or F8E5M2 with x's shape; MXFP4's E2M1 elements are held one per byte as
// F8E4M3, which represents each of them exactly (packed, they would take half a byte). `scale` is F32
// holding the power of two X itself (each an exact E8M0 value; packed it would be one byte per block),
// with x's shape but ceil(size(dim) / block) along dim; a last block shorter than `block` is allowed.
enum class MxFormat : uint8_t { MXFP8_E4M3, MXFP8_E5M2, MXFP4 };
enum class MxScaleRule : uint8_t { Floor, Up };
struct MxOptions {
  MxScaleRule rule = MxScaleRule::Floor;
  int64_t block = 32;
  int64_t dim = -1;  // the dimension the blocks run along
};
struct MxTensor {
  Tensor data, scale;
  MxFormat format = MxFormat::MXFP8_E4M3;
  int64_t dim = -1, block = 32;  // dim wrapped to [0, ndim)
};
// x: F32, F16, BF16 or F64 on any device, at least 1-d.
MxTensor mx_quantize(const Tensor& x, MxFormat f, const MxOptions& o = {});
// decode(data) * scale per block, in `out` (F32, F16, BF16 or F64).
Tensor mx_dequantize(const MxTensor& q, DType out = DType::F32);
const char* mx_format_name(MxFormat f);

}  // namespace hg
