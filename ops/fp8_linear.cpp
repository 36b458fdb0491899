// The FP8 linear layer (ops/fp8_linear.h): casts per the recipe, the GEMMs on FP8 values decoded exactly to
// BF16 with an F32 result (GemmArgs::c_f32), the inverse scales applied to the F32 result, and a backward
// node that quantizes the output gradient and runs dgrad and wgrad the same way.
#include "ops/fp8_linear.h"

#include <cmath>
#include <sstream>

#include "autograd/node.h"
#include "core/fp8.h"
#include "core/convert.h"
#include "ops/autocast/autocast.h"
#include "ops/elementwise.h"
#include "ops/gemm_op.h"
#include "ops/kernels/fp8.h"
#include "ops/reduce.h"
#include "ops/shape.h"

namespace hg {

const char* fp8_role_name(Fp8Role r) {
  switch (r) {
    case Fp8Role::Input: return "input";
    case Fp8Role::Weight: return "weight";
    case Fp8Role::GradOutput: return "grad_output";
  }
  return "?";
}

std::string describe(const Fp8Recipe& r) {
  std::ostringstream os;
  const char* fmt = r.format == Fp8Format::Hybrid ? "HYBRID" : "E4M3";
  switch (r.scaling) {
    case Fp8Scaling::Delayed:
      os << "delayed " << fmt << ", history " << r.amax_history_len << " "
         << (r.amax_compute_algo == AmaxCompute::Max ? "max" : "most_recent") << ", margin " << r.margin;
      break;
    case Fp8Scaling::Current: os << "current " << fmt << ", margin " << r.margin; break;
    case Fp8Scaling::Unscaled: os << "unscaled " << fmt; break;
    case Fp8Scaling::Mx:
      os << "MXFP8 " << fmt << ", blocks of " << r.mx_block << ", scales rounded "
         << (r.mx_rule == MxScaleRule::Up ? "up" : "down (OCP)");
      break;
  }
  if (r.pow2_scales && (r.scaling == Fp8Scaling::Delayed || r.scaling == Fp8Scaling::Current)) os << ", pow2 scales";
  return os.str();
}

// ---- the state ---------------------------------------------------------------------------------------

Fp8LinearState::Fp8LinearState(const Fp8Recipe& r, Device dev) : recipe_(r), device_(dev) {
  HG_CHECK(r.scaling != Fp8Scaling::Mx || r.mx_block >= 1, "Fp8Recipe: mx_block=", r.mx_block,
           " must be at least 1 (MXFP8 uses 32)");
  HG_CHECK(std::isfinite(r.margin), "Fp8Recipe: margin=", r.margin, " must be finite");
  if (!has_delayed()) return;
  const Fp8DelayedOptions o{.history_len = r.amax_history_len, .algo = r.amax_compute_algo,
                            .scale = {.margin = r.margin, .pow2 = r.pow2_scales}};
  delayed_.emplace_back(r.forward_dtype(), o, dev);
  delayed_.emplace_back(r.forward_dtype(), o, dev);
  delayed_.emplace_back(r.backward_dtype(), o, dev);
}

Fp8DelayedScaling& Fp8LinearState::delayed(Fp8Role r) {
  HG_CHECK(has_delayed(), "Fp8LinearState: the recipe (", describe(recipe_), ") keeps no delayed-scaling state");
  return delayed_[static_cast<size_t>(r)];
}
const Fp8DelayedScaling& Fp8LinearState::delayed(Fp8Role r) const {
  return const_cast<Fp8LinearState*>(this)->delayed(r);
}

void Fp8LinearState::to(Device dev) {
  for (auto& d : delayed_) d.to(dev);
  device_ = dev;
}

bool Fp8LinearState::compatible(const Fp8Recipe& r) const {
  if (r.scaling != recipe_.scaling || r.format != recipe_.format) return false;
  if (r.scaling == Fp8Scaling::Delayed)
    return r.amax_history_len == recipe_.amax_history_len && r.amax_compute_algo == recipe_.amax_compute_algo &&
           r.margin == recipe_.margin && r.pow2_scales == recipe_.pow2_scales;
  if (r.scaling == Fp8Scaling::Current) return r.margin == recipe_.margin && r.pow2_scales == recipe_.pow2_scales;
  if (r.scaling == Fp8Scaling::Unscaled) return true;
  return r.mx_rule == recipe_.mx_rule && r.mx_block == recipe_.mx_block;
}

void Fp8LinearState::save_into(std::map<std::string, Tensor>& out, const std::string& prefix) const {
  for (size_t i = 0; i < delayed_.size(); ++i)
    delayed_[i].save_into(out, prefix + fp8_role_name(static_cast<Fp8Role>(i)) + ".");
}

void Fp8LinearState::load_from(const std::map<std::string, Tensor>& in, const std::string& prefix) {
  std::vector<Fp8DelayedScaling> next = delayed_;  // all three or none
  for (size_t i = 0; i < next.size(); ++i) next[i].load_from(in, prefix + fp8_role_name(static_cast<Fp8Role>(i)) + ".");
  delayed_ = std::move(next);
}

namespace {

// ---- statistics of a cast (opt-in: host copies) -------------------------------------------------------

// scale_at(i): the factor element i was multiplied by before rounding (per-tensor: the scale; MX: 1/X).
template <class F>
Fp8CastStats cast_stats(const Tensor& x, const Tensor& q, float limit, F&& scale_at) {
  const std::vector<float> xs = x.to(DType::F32).to(Device::cpu()).to_vector<float>();
  const Tensor qh = q.to(Device::cpu());
  const auto* qb = static_cast<const uint8_t*>(qh.data_ptr());
  const float* values = fp8_decode_table(q.dtype());
  Fp8CastStats s;
  s.numel = static_cast<int64_t>(xs.size());
  int64_t sat = 0, flushed = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const float a = std::fabs(xs[i]);
    s.amax = a > s.amax || std::isnan(a) ? a : s.amax;
    if (a * scale_at(i) > limit) ++sat;
    if (a != 0.0f && values[qb[i]] == 0.0f) ++flushed;
  }
  if (s.numel > 0) {
    s.saturated = double(sat) / double(s.numel);
    s.flushed = double(flushed) / double(s.numel);
  }
  return s;
}

// ---- per-tensor casts -----------------------------------------------------------------------------------

struct PerTensor {
  Tensor q;          // FP8
  Tensor scale_inv;  // 0-d F32: what decode(q) is multiplied by
};

PerTensor cast_role(Fp8LinearState& st, Fp8Role role, const Tensor& x, DType f8) {
  const Fp8Recipe& r = st.recipe();
  PerTensor out;
  Tensor scale;
  if (r.scaling == Fp8Scaling::Delayed) {
    Fp8DelayedScaling& d = st.delayed(role);
    scale = d.scale().clone();
    out.scale_inv = d.scale_inv().clone();  // update() below replaces the state's scales
    out.q = d.quantize(x);
    d.update();
  } else if (r.scaling == Fp8Scaling::Unscaled) {
    scale = full(Shape{}, 1.0, {.dtype = DType::F32, .device = x.device()});
    out.q = fp8_quantize(x, f8, scale);
    out.scale_inv = scale;
  } else {
    scale = fp8_scale_from_amax(amax(x), f8, {.margin = r.margin, .pow2 = r.pow2_scales});
    out.q = fp8_quantize(x, f8, scale);
    out.scale_inv = rdiv(1.0, scale);
  }
  st.last_scale(role) = scale;
  if (st.track_stats) {
    const float s = scale.item<float>();
    Fp8CastStats cs = cast_stats(x, out.q, fp8_max(f8), [s](size_t) { return s; });
    cs.scale = cs.scale_min = s;
    st.stats(role) = cs;
  }
  return out;
}

// ---- MX casts: the operand the GEMM reads, decoded and scaled (exact) ---------------------------------------

MxFormat mx_format(DType f8) { return f8 == DType::F8E4M3 ? MxFormat::MXFP8_E4M3 : MxFormat::MXFP8_E5M2; }

Tensor mx_operand(Fp8LinearState& st, Fp8Role role, const Tensor& x, DType f8, int64_t dim) {
  const Fp8Recipe& r = st.recipe();
  const MxTensor m = mx_quantize(x, mx_format(f8), {.rule = r.mx_rule, .block = r.mx_block, .dim = dim});
  if (st.track_stats) {  // x is 2-D (rows, cols); the blocks run along dim
    const std::vector<float> sc = m.scale.to(Device::cpu()).to_vector<float>();
    const int64_t cols = x.size(1), block = r.mx_block, scale_cols = m.scale.size(1);
    auto inv_at = [&](size_t i) {  // 1 / the scale of element i
      const int64_t row = static_cast<int64_t>(i) / cols, col = static_cast<int64_t>(i) % cols;
      return 1.0f / sc[static_cast<size_t>(dim == 0 ? (row / block) * scale_cols + col : row * scale_cols + col / block)];
    };
    Fp8CastStats cs = cast_stats(x, m.data, fp8_max(f8), inv_at);
    cs.scale = 0.0f;
    cs.scale_min = INFINITY;
    for (float X : sc) cs.scale = std::max(cs.scale, 1.0f / X), cs.scale_min = std::min(cs.scale_min, 1.0f / X);
    st.stats(role) = cs;
  }
  return mx_dequantize(m, DType::BF16);
}

// ---- the GEMM ---------------------------------------------------------------------------------------------

// op(a) (m,k) * op(b) (k,n) as an F32 (m,n) tensor; a and b BF16, contiguous, stored as op() says. MX's GEMMs
// (mx_gemm below) and the per-tensor decode route run here.
Tensor gemm_f32(const Tensor& a, Trans ta, const Tensor& b, Trans tb, int64_t m, int64_t n, int64_t k) {
  return alias_with_shape(gemm_op({.x = a, .tx = ta, .y = b, .ty = tb, .m = m, .n = n, .k = k, .c_f32 = true}), {m, n});
}

Tensor decoded(const Tensor& q) { return q.to(DType::BF16); }  // exact for both FP8 formats

// An MX GEMM: the block-scaled operands, already decoded and scaled (mx_operand), always on the BF16 GEMM.
Tensor mx_gemm(Fp8LinearState& st, const Tensor& a, Trans ta, const Tensor& b, Trans tb, int64_t m, int64_t n,
               int64_t k) {
  st.count_gemm(false);
  return gemm_f32(a, ta, b, tb, m, n, k);
}

// op(a) (m,k) . op(b) (k,n) * (a.scale_inv * b.scale_inv) as F32 (m,n), for per-tensor FP8 operands stored
// as their Trans says: on FP8 Tensor Cores when the device has them and takes the shape (ops/kernels/fp8.h),
// else on the values decoded to BF16. The native GEMM wants a (m,k) and b (n,k), k innermost.
Tensor scaled_gemm(Fp8LinearState& st, const PerTensor& a, Trans ta, const PerTensor& b, Trans tb, int64_t m,
                   int64_t n, int64_t k) {
  const Device dev = a.q.device();
  if (fp8_gemm_kernels().has(dev, a.q.dtype())) {
    const Fp8GemmKernel native = fp8_gemm_kernels().get(dev, a.q.dtype());
    Fp8GemmArgs g{.m = m, .n = n, .k = k, .a_dtype = a.q.dtype(), .b_dtype = b.q.dtype(), .lda = k, .ldb = k,
                  .scale_a = a.scale_inv.data<float>(), .scale_b = b.scale_inv.data<float>(), .ldc = n,
                  .query = true};
    if (native(g)) {
      // K-major copies where the operand is stored the other way (transpose copies: 1 byte per element)
      const Tensor ak = ta == Trans::N ? a.q : transpose(a.q, 0, 1);  // (m, k)
      const Tensor bk = tb == Trans::T ? b.q : transpose(b.q, 0, 1);  // (n, k)
      Tensor c = empty(Shape{m, n}, {.dtype = DType::F32, .device = dev});
      g.a = ak.data_ptr();
      g.b = bk.data_ptr();
      g.c = c.data<float>();
      g.query = false;
      if (native(g)) {
        st.count_gemm(true);
        return c;
      }
    }
  }
  st.count_gemm(false);
  return mul(gemm_f32(decoded(a.q), ta, decoded(b.q), tb, m, n, k), mul(a.scale_inv, b.scale_inv));
}

void check_args(const Tensor& x, const Tensor& w, const Tensor& b, const std::shared_ptr<Fp8LinearState>& st) {
  HG_CHECK(st != nullptr, "fp8_linear: the state is null; pass std::make_shared<Fp8LinearState>(recipe, device)");
  HG_CHECK(x.defined() && w.defined(), "fp8_linear: x or w is undefined");
  for (const Tensor* t : {&x, &w}) {
    HG_CHECK(t->dtype() == DType::F32 || t->dtype() == DType::F16 || t->dtype() == DType::BF16, "fp8_linear: dtype ",
             t->dtype(), " is not one FP8 training starts from; pass F32, F16 or BF16 tensors (the layer quantizes them)");
  }
  check_same_device("fp8_linear", x, w);
  HG_CHECK(w.ndim() == 2, "fp8_linear: w must be 2-D (out_features, in_features) but has shape ", w.shape());
  HG_CHECK(x.ndim() >= 1 && x.size(-1) == w.size(1), "fp8_linear: x.shape[-1]=", x.ndim() ? x.size(-1) : 0,
           " but w.shape[1]=", w.size(1), " (x ", x.shape(), ", w ", w.shape(), "); in_features must match");
  HG_CHECK(st->device() == w.device(), "fp8_linear: the FP8 state is on ", st->device(), " but the weight is on ",
           w.device(), "; move it with state->to(device)");
  if (!b.defined()) return;
  check_same_device("fp8_linear", x, b);
  HG_CHECK(b.ndim() == 1 && b.size(0) == w.size(0), "fp8_linear: b has shape ", b.shape(), " but w has ", w.size(0),
           " output features; b must be (", w.size(0), ")");
}

// "x E4M3 scale 27.1, w E4M3 scale 3.2e+03 (delayed HYBRID, ...)": what the last forward cast with.
std::string cast_note(const Fp8LinearState& st) {
  std::ostringstream os;
  const Fp8Recipe& r = st.recipe();
  os << "x, w " << dtype_name(r.forward_dtype()) << ", dy " << dtype_name(r.backward_dtype());
  for (Fp8Role role : {Fp8Role::Input, Fp8Role::Weight}) {
    const Tensor& s = st.last_scale(role);
    if (s.defined()) os << ", " << (role == Fp8Role::Input ? "x" : "w") << " scale " << s.item<float>();
  }
  os << " (" << describe(r) << ")";
  return os.str();
}

}  // namespace

Tensor fp8_linear(const Tensor& x, const Tensor& w, const Tensor& b, const std::shared_ptr<Fp8LinearState>& state) {
  if (amp::OpCast c{amp::OpId::Fp8Linear, {x, w, b}}) {  // an observer (PrecisionTrace) or a user policy
    Tensor y = fp8_linear(c[0], c[1], c[2], state);
    if (c.observed()) c.set_note(cast_note(*state));
    return c.result(y);
  }
  check_args(x, w, b, state);
  amp::ExcludeGuard no_autocast;  // this op manages its own dtypes
  Fp8LinearState& st = *state;
  st.count_call();
  const Fp8Recipe& r = st.recipe();
  const int64_t i = w.size(1), o = w.size(0);
  int64_t m = 1;
  for (int64_t d = 0; d + 1 < x.ndim(); ++d) m *= x.shape()[d];
  Shape out = x.shape();
  out[out.ndim() - 1] = o;
  const Tensor x2 = alias_with_shape(x, {m, i});
  const DType fwd = r.forward_dtype();

  PerTensor qx, qw;  // per-tensor scalings: what backward reuses
  Tensor y;
  {
    autograd::NoGradGuard ng;
    Tensor acc;
    if (r.scaling == Fp8Scaling::Mx) {
      acc = mx_gemm(st, mx_operand(st, Fp8Role::Input, x2, fwd, 1), Trans::N,
                    mx_operand(st, Fp8Role::Weight, w, fwd, 1), Trans::T, m, o, i);
    } else {
      qx = cast_role(st, Fp8Role::Input, x2, fwd);
      qw = cast_role(st, Fp8Role::Weight, w, fwd);
      acc = scaled_gemm(st, qx, Trans::N, qw, Trans::T, m, o, i);
    }
    if (b.defined()) acc = add(acc, b.dtype() == DType::F32 ? b : b.to(DType::F32));
    y = alias_with_shape(acc.dtype() == x.dtype() ? acc : acc.to(x.dtype()), out);
  }
  std::vector<Tensor> ins{x, w};
  if (b.defined()) ins.push_back(b);
  // Per-tensor: backward reads the forward's FP8 copies (1 byte per element) and scales, as TE saves them;
  // MX: the high-precision x and w, quantized again along the other dimension.
  const bool mx = r.scaling == Fp8Scaling::Mx;
  const Tensor x_kept = mx ? x2 : Tensor(), w_kept = mx ? w : Tensor();
  autograd::record(y, "fp8_linear", ins,
                   [state, qx, qw, x_kept, w_kept, m, o, i, xs = x.shape(), xdt = x.dtype(), wdt = w.dtype(),
                    bdt = b.defined() ? b.dtype() : DType::F32](const Tensor& dy_in, const GradMask& needs) {
                     amp::ExcludeGuard no_autocast;
                     autograd::NoGradGuard ng;
                     Fp8LinearState& s = *state;
                     const Fp8Recipe& rr = s.recipe();
                     const DType gdt = rr.backward_dtype(), fdt = rr.forward_dtype();
                     const Tensor dy = alias_with_shape(dy_in, {m, o});
                     std::vector<Tensor> g(needs.size());
                     Tensor dx, dw;
                     if (rr.scaling == Fp8Scaling::Mx) {
                       if (needs[0])  // dx (m,i) = dy (m,o) w (o,i): blocks along o
                         dx = mx_gemm(s, mx_operand(s, Fp8Role::GradOutput, dy, gdt, 1), Trans::N,
                                      mx_operand(s, Fp8Role::Weight, w_kept, fdt, 0), Trans::N, m, i, o);
                       if (needs[1])  // dw (o,i) = dy^T (o,m) x (m,i): blocks along m
                         dw = mx_gemm(s, mx_operand(s, Fp8Role::GradOutput, dy, gdt, 0), Trans::T,
                                      mx_operand(s, Fp8Role::Input, x_kept, fdt, 0), Trans::N, o, i, m);
                     } else {
                       const PerTensor qg = cast_role(s, Fp8Role::GradOutput, dy, gdt);
                       if (needs[0]) dx = scaled_gemm(s, qg, Trans::N, qw, Trans::N, m, i, o);
                       if (needs[1]) dw = scaled_gemm(s, qg, Trans::T, qx, Trans::N, o, i, m);
                     }
                     if (dx.defined()) g[0] = alias_with_shape(dx.dtype() == xdt ? dx : dx.to(xdt), xs);
                     if (dw.defined()) g[1] = dw.dtype() == wdt ? dw : dw.to(wdt);
                     if (needs.size() > 2 && needs[2]) {
                       const Tensor db = sum(dy, {0});
                       g[2] = db.dtype() == bdt ? db : db.to(bdt);
                     }
                     return g;
                   });
  return y;
}

}  // namespace hg

namespace hg::amp {
namespace {
thread_local const Fp8Recipe* t_recipe = nullptr;
}

Fp8Autocast::Fp8Autocast(const Fp8Recipe& recipe, bool enabled) : prev_(t_recipe), recipe_(recipe) {
  HG_CHECK(recipe.amax_history_len >= 1, "Fp8Autocast: amax_history_len=", recipe.amax_history_len,
           " must be at least 1 (TE's default is 1024)");
  HG_CHECK(recipe.mx_block >= 1, "Fp8Autocast: mx_block=", recipe.mx_block, " must be at least 1 (MXFP8 uses 32)");
  t_recipe = enabled ? &recipe_ : nullptr;
}

Fp8Autocast::~Fp8Autocast() { t_recipe = prev_; }

const Fp8Recipe* fp8_recipe() { return t_recipe; }

}  // namespace hg::amp
