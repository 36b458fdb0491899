// Per-tensor FP8 scaling (ops/fp8.h): argument checks, then one kernel of ops/kernels/fp8.h's tables.
#include "ops/fp8.h"

#include <cmath>

#include "ops/dispatch.h"
#include "ops/kernels/fp8.h"
#include "ops/shape.h"

namespace hg {

namespace {

void check_fp8(const char* op, DType fp8) {
  HG_CHECK(is_fp8(fp8), op, ": dtype ", fp8, " is not an FP8 format; use DType::F8E4M3 (forward) or DType::F8E5M2 (gradients)");
}

// A 1-element F32 tensor on `dev` (a scale, scale_inv or amax).
void check_scalar(const char* op, const char* what, const Tensor& t, Device dev) {
  HG_CHECK(t.defined(), op, ": ", what, " is undefined; pass a 1-element F32 tensor");
  HG_CHECK(t.numel() == 1 && t.dtype() == DType::F32, op, ": ", what, " has shape ", t.shape(), " and dtype ", t.dtype(),
           "; it must be one F32 value (e.g. hg::full({}, 1.0))");
  HG_CHECK(t.device() == dev, op, ": ", what, " is on ", t.device(), " but the tensor is on ", dev,
           "; keep the scaling state on the tensor's device");
}

Tensor scalar_f32(double v, Device dev) { return full(Shape{}, v, {.dtype = DType::F32, .device = dev}); }

// scale and amax: F32 values in memory of x's device (checked by the callers), either may be null.
void run_quantize(const char* op, const Tensor& x, Tensor* q, DType fp8, const float* scale, float* amax, bool saturate) {
  check_floating(op, x);
  HG_CHECK(x.dtype() != DType::I64, op, ": dtype I64 is not supported; quantize a floating tensor");
  Fp8QuantizeArgs a;
  const Tensor xc = x.contiguous();  // the kernel reads dense memory
  a.n = x.numel();
  a.x = xc.data_ptr();
  a.q = q != nullptr ? q->data_ptr() : nullptr;
  a.q_dtype = fp8;
  a.scale = scale;
  a.amax = amax;
  a.saturate = saturate;
  fp8_quantize_kernels().get(x.device(), x.dtype())(a);
}

const float* f32_ptr(const Tensor& t) { return static_cast<const float*>(t.data_ptr()); }
float* f32_ptr(Tensor& t) { return static_cast<float*>(t.data_ptr()); }

}  // namespace

Tensor amax(const Tensor& x) {
  HG_CHECK(x.defined(), "amax: the tensor is undefined");
  Tensor out = scalar_f32(0.0, x.device());
  if (x.numel() > 0) run_quantize("amax", x, nullptr, DType::F8E4M3, nullptr, f32_ptr(out), true);
  return out;
}

Tensor fp8_scale_from_amax(const Tensor& amax, DType fp8, const Fp8ScaleOptions& o) {
  check_fp8("fp8_scale_from_amax", fp8);
  check_scalar("fp8_scale_from_amax", "amax", amax, amax.device());
  Tensor scale = scalar_f32(1.0, amax.device()), scale_inv = scalar_f32(1.0, amax.device());
  Fp8ScaleArgs s;
  s.delayed = false;
  s.history = static_cast<float*>(amax.data_ptr());  // current scaling only reads history[0]: amax is not written
  s.scale = f32_ptr(scale);
  s.scale_inv = f32_ptr(scale_inv);
  s.scaled_max = fp8_scaled_max(fp8, o.margin);
  s.pow2 = o.pow2;
  fp8_scale_kernels().get(amax.device(), DType::F32)(s);
  return scale;
}

Tensor fp8_quantize(const Tensor& x, DType fp8, const Tensor& scale, const Fp8CastOptions& o) {
  check_fp8("fp8_quantize", fp8);
  HG_CHECK(x.defined(), "fp8_quantize: the tensor is undefined");
  check_scalar("fp8_quantize", "scale", scale, x.device());
  Tensor amax_acc = o.amax;
  if (amax_acc.defined()) check_scalar("fp8_quantize", "amax", amax_acc, x.device());
  Tensor q = empty(x.shape(), {.dtype = fp8, .device = x.device()});
  if (x.numel() > 0)
    run_quantize("fp8_quantize", x, &q, fp8, f32_ptr(scale), amax_acc.defined() ? f32_ptr(amax_acc) : nullptr, o.saturate);
  return q;
}

Tensor fp8_dequantize(const Tensor& q, const Tensor& scale_inv, DType out) {
  HG_CHECK(q.defined() && is_fp8(q.dtype()), "fp8_dequantize: the tensor has dtype ",
           q.defined() ? dtype_name(q.dtype()) : "undefined", "; pass an F8E4M3 or F8E5M2 tensor");
  HG_CHECK(is_floating(out) && !is_fp8(out), "fp8_dequantize: output dtype ", out,
           " is not one to compute in; use F32, F16, BF16 or F64");
  check_scalar("fp8_dequantize", "scale_inv", scale_inv, q.device());
  Tensor y = empty(q.shape(), {.dtype = out, .device = q.device()});
  if (q.numel() == 0) return y;
  Fp8DequantizeArgs a;
  const Tensor qc = q.contiguous();
  a.n = q.numel();
  a.q = qc.data_ptr();
  a.q_dtype = q.dtype();
  a.scale_inv = static_cast<const float*>(scale_inv.data_ptr());
  a.y = y.data_ptr();
  fp8_dequantize_kernels().get(q.device(), out)(a);
  return y;
}

// ---- delayed scaling --------------------------------------------------------------------------------

Fp8DelayedScaling::Fp8DelayedScaling(DType fp8, const Fp8DelayedOptions& o, Device dev) : fp8_(fp8), o_(o) {
  check_fp8("Fp8DelayedScaling", fp8);
  HG_CHECK(o.history_len >= 1, "Fp8DelayedScaling: history_len=", o.history_len, " must be at least 1 (TE's default is 1024)");
  HG_CHECK(std::isfinite(o.scale.margin), "Fp8DelayedScaling: margin=", o.scale.margin, " must be finite");
  load_backend(dev.type);
  history_ = zeros(Shape{o.history_len}, {.dtype = DType::F32, .device = dev});
  scale_ = scalar_f32(1.0, dev);
  scale_inv_ = scalar_f32(1.0, dev);
}

Tensor Fp8DelayedScaling::quantize(const Tensor& x) {
  HG_CHECK(x.defined(), "Fp8DelayedScaling.quantize: the tensor is undefined");
  check_same_device("Fp8DelayedScaling.quantize", x, history_);
  Tensor q = empty(x.shape(), {.dtype = fp8_, .device = x.device()});
  if (x.numel() == 0) return q;
  run_quantize("Fp8DelayedScaling.quantize", x, &q, fp8_, f32_ptr(scale_), f32_ptr(history_), o_.saturate);  // history[0]
  return q;
}

void Fp8DelayedScaling::record(const Tensor& x) {
  HG_CHECK(x.defined(), "Fp8DelayedScaling.record: the tensor is undefined");
  check_same_device("Fp8DelayedScaling.record", x, history_);
  if (x.numel() == 0) return;
  run_quantize("Fp8DelayedScaling.record", x, nullptr, fp8_, nullptr, f32_ptr(history_), true);
}

void Fp8DelayedScaling::update() {
  Fp8ScaleArgs s;
  s.delayed = true;
  s.history = f32_ptr(history_);
  s.len = o_.history_len;
  s.scale = f32_ptr(scale_);
  s.scale_inv = f32_ptr(scale_inv_);
  s.scaled_max = fp8_scaled_max(fp8_, o_.scale.margin);
  s.pow2 = o_.scale.pow2;
  s.algo = o_.algo;
  fp8_scale_kernels().get(history_.device(), DType::F32)(s);
}

void Fp8DelayedScaling::to(Device dev) {
  history_ = history_.to(dev);
  scale_ = scale_.to(dev);
  scale_inv_ = scale_inv_.to(dev);
}

void Fp8DelayedScaling::save_into(std::map<std::string, Tensor>& out, const std::string& prefix) const {
  out[prefix + "amax_history"] = history_;
  out[prefix + "scale"] = scale_;
  out[prefix + "scale_inv"] = scale_inv_;
}

void Fp8DelayedScaling::load_from(const std::map<std::string, Tensor>& in, const std::string& prefix) {
  const Device dev = history_.device();
  Tensor loaded[3];
  const char* names[3] = {"amax_history", "scale", "scale_inv"};
  const Tensor* mine[3] = {&history_, &scale_, &scale_inv_};
  for (int i = 0; i < 3; ++i) {  // check all three before changing any
    const auto it = in.find(prefix + names[i]);
    HG_CHECK(it != in.end(), "Fp8DelayedScaling.load: '", prefix, names[i], "' is missing from the state");
    const Tensor& t = it->second;
    HG_CHECK(t.dtype() == DType::F32 && t.shape() == mine[i]->shape(), "Fp8DelayedScaling.load: '", prefix, names[i],
             "' has shape ", t.shape(), " and dtype ", t.dtype(), " but this state has ", mine[i]->shape(),
             " F32 (history_len=", o_.history_len, "); build the scaling with the options it was saved with");
    loaded[i] = t.to(dev).clone();
  }
  history_ = loaded[0];
  scale_ = loaded[1];
  scale_inv_ = loaded[2];
}

// ---- MX block scaling --------------------------------------------------------------------------------

const char* mx_format_name(MxFormat f) {
  switch (f) {
    case MxFormat::MXFP8_E4M3: return "MXFP8_E4M3";
    case MxFormat::MXFP8_E5M2: return "MXFP8_E5M2";
    case MxFormat::MXFP4: return "MXFP4";
  }
  return "?";
}

namespace {
// x's shape as (outer, len, inner) around dim: the layout of ops/kernels/fp8.h's MX kernels.
struct MxView {
  int64_t outer = 1, len = 1, inner = 1;
};
MxView mx_view(const Shape& s, int64_t dim) {
  MxView v;
  for (int64_t d = 0; d < dim; ++d) v.outer *= s[d];
  v.len = s[dim];
  for (int64_t d = dim + 1; d < s.ndim(); ++d) v.inner *= s[d];
  return v;
}
}  // namespace

MxTensor mx_quantize(const Tensor& x_in, MxFormat f, const MxOptions& o) {
  HG_CHECK(x_in.defined(), "mx_quantize: the tensor is undefined");
  check_floating("mx_quantize", x_in);
  HG_CHECK(x_in.ndim() >= 1, "mx_quantize: x is 0-d; blocks run along a dimension, so pass at least a 1-d tensor");
  HG_CHECK(o.block >= 1, "mx_quantize: block=", o.block, " must be at least 1 (the OCP MX formats use 32)");
  const int64_t dim = wrap_dim("mx_quantize", o.dim, x_in.ndim());
  const Tensor x = (x_in.dtype() == DType::F32 ? x_in : x_in.to(DType::F32)).contiguous();
  Shape scale_shape = x.shape();
  scale_shape[dim] = (scale_shape[dim] + o.block - 1) / o.block;
  const DType elem = f == MxFormat::MXFP8_E5M2 ? DType::F8E5M2 : DType::F8E4M3;
  MxTensor m;
  m.data = empty(x.shape(), {.dtype = elem, .device = x.device()});
  m.scale = empty(scale_shape, {.dtype = DType::F32, .device = x.device()});
  m.format = f;
  m.dim = dim;
  m.block = o.block;
  if (x.numel() > 0) {
    const MxView v = mx_view(x.shape(), dim);
    MxQuantizeArgs a;
    a.outer = v.outer, a.len = v.len, a.inner = v.inner, a.block = o.block;
    a.x = static_cast<const float*>(x.data_ptr());
    a.q = static_cast<uint8_t*>(m.data.data_ptr());
    a.scale = f32_ptr(m.scale);
    a.format = f;
    a.rule = o.rule;
    mx_quantize_kernels().get(x.device(), DType::F32)(a);
  }
  return m;
}

Tensor mx_dequantize(const MxTensor& m, DType out) {
  HG_CHECK(m.data.defined() && m.scale.defined(), "mx_dequantize: data or scale is undefined; pass what mx_quantize returned");
  const DType want = m.format == MxFormat::MXFP8_E5M2 ? DType::F8E5M2 : DType::F8E4M3;
  HG_CHECK(m.data.dtype() == want, "mx_dequantize: data has dtype ", m.data.dtype(), " but format ", mx_format_name(m.format),
           " stores ", want, "; pass what mx_quantize returned");
  HG_CHECK(is_floating(out) && !is_fp8(out), "mx_dequantize: output dtype ", out,
           " is not one to compute in; use F32, F16, BF16 or F64");
  check_same_device("mx_dequantize", m.data, m.scale);
  const int64_t nd = m.data.ndim();
  HG_CHECK(nd >= 1 && m.dim >= 0 && m.dim < nd && m.block >= 1, "mx_dequantize: dim=", m.dim, " and block=", m.block,
           " do not fit data of shape ", m.data.shape());
  Shape want_scale = m.data.shape();
  want_scale[m.dim] = (want_scale[m.dim] + m.block - 1) / m.block;
  HG_CHECK(m.scale.dtype() == DType::F32 && m.scale.shape() == want_scale, "mx_dequantize: scale has shape ",
           m.scale.shape(), " and dtype ", m.scale.dtype(), " but data ", m.data.shape(), " in blocks of ", m.block,
           " along dim ", m.dim, " needs ", want_scale, " F32");
  Tensor y = empty(m.data.shape(), {.dtype = out, .device = m.data.device()});
  if (m.data.numel() == 0) return y;
  const MxView v = mx_view(m.data.shape(), m.dim);
  MxDequantizeArgs a;
  a.outer = v.outer, a.len = v.len, a.inner = v.inner, a.block = m.block;
  const Tensor q = m.data.contiguous(), scale = m.scale.contiguous();
  a.q = static_cast<const uint8_t*>(q.data_ptr());
  a.e4m3 = want == DType::F8E4M3;
  a.scale = static_cast<const float*>(scale.data_ptr());
  a.y = y.data_ptr();
  mx_dequantize_kernels().get(m.data.device(), out)(a);
  return y;
}

}  // namespace hg
