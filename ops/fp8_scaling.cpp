// The FP8 recipes as classes (ops/fp8_scaling.h): delayed, current, unscaled (per-tensor scales) and MXFP8
// (a scale per block of 32). with_scaling_class is the one place that maps an Fp8Scaling to its class.
#include "ops/fp8_scaling.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "core/convert.h"
#include "ops/elementwise.h"
#include "ops/kernels/fp8.h"
#include "ops/reduce.h"

namespace hg {
namespace {

// ---- statistics of a cast (opt-in: host copies) -------------------------------------------------------

// scale_at(i): the factor element i was multiplied by before rounding (per-tensor: the scale; MX: 1/X).
template <class F>
Fp8CastStats cast_stats(const Tensor& x, const Tensor& q, float limit, F&& scale_at) {
  const std::vector<float> xs = x.to(DType::F32).to(Device::cpu()).to_vector<float>();
  const Tensor qh = q.contiguous().to(Device::cpu());
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

// ---- per-tensor recipes: one scale for the whole tensor ------------------------------------------------

const char* format_name(const Fp8Recipe& r) { return r.format == Fp8Format::Hybrid ? "HYBRID" : "E4M3"; }

struct Scaled {
  Tensor q, scale, scale_inv;  // the FP8 tensor, the scale it was cast with, and 1 / scale (0-d F32)
};

// The part the per-tensor recipes share: the cast's record and statistics. Each says how it scales.
class PerTensorScaling : public Fp8ScalingRule {
 public:
  Fp8Operand cast(Fp8LinearState& st, Fp8Role role, const Tensor& x, DType f8, int64_t, bool update) final {
    Scaled c = scale_and_cast(role, x, f8, update);
    st.last_scale(role) = c.scale;
    if (st.track_stats) {
      const float s = c.scale.item<float>();
      Fp8CastStats cs = cast_stats(x, c.q, fp8_max(f8), [s](size_t) { return s; });
      cs.scale = cs.scale_min = s;
      st.stats(role) = cs;
    }
    Fp8Operand op;
    op.q = std::move(c.q);
    op.scale_inv = std::move(c.scale_inv);
    return op;
  }
  bool per_tensor() const final { return true; }

 protected:
  virtual Scaled scale_and_cast(Fp8Role role, const Tensor& x, DType f8, bool update) = 0;
};

// TE's DelayedScaling: per role, the scale from the amax history of past calls; the call's amax goes into the
// history, which is updated right after the cast (TE updates once per step; the two agree when a layer runs
// once a step).
class DelayedScaling final : public PerTensorScaling {
 public:
  DelayedScaling(const Fp8Recipe& r, Device dev) {
    const Fp8DelayedOptions o{.history_len = r.amax_history_len, .algo = r.amax_compute_algo,
                              .scale = {.margin = r.margin, .pow2 = r.pow2_scales}};
    roles_.emplace_back(r.forward_dtype(), o, dev);   // input
    roles_.emplace_back(r.forward_dtype(), o, dev);   // weight
    roles_.emplace_back(r.backward_dtype(), o, dev);  // grad_output
  }
  static bool same(const Fp8Recipe& a, const Fp8Recipe& b) {
    return a.amax_history_len == b.amax_history_len && a.amax_compute_algo == b.amax_compute_algo &&
           a.margin == b.margin && a.pow2_scales == b.pow2_scales;
  }
  static void describe(const Fp8Recipe& r, std::ostream& os) {
    os << "delayed " << format_name(r) << ", history " << r.amax_history_len << " "
       << (r.amax_compute_algo == AmaxCompute::Max ? "max" : "most_recent") << ", margin " << r.margin
       << (r.pow2_scales ? ", pow2 scales" : "");
  }
  void to(Device dev) override {
    for (auto& d : roles_) d.to(dev);
  }
  void save_into(std::map<std::string, Tensor>& out, const std::string& prefix) const override {
    for (size_t i = 0; i < roles_.size(); ++i)
      roles_[i].save_into(out, prefix + fp8_role_name(static_cast<Fp8Role>(i)) + ".");
  }
  void load_from(const std::map<std::string, Tensor>& in, const std::string& prefix) override {
    std::vector<Fp8DelayedScaling> next = roles_;  // all three or none
    for (size_t i = 0; i < next.size(); ++i) next[i].load_from(in, prefix + fp8_role_name(static_cast<Fp8Role>(i)) + ".");
    roles_ = std::move(next);
  }
  Fp8DelayedScaling* delayed(Fp8Role r) override { return &roles_[static_cast<size_t>(r)]; }

 private:
  Scaled scale_and_cast(Fp8Role role, const Tensor& x, DType, bool update) override {
    Fp8DelayedScaling& d = roles_[static_cast<size_t>(role)];
    // clones: update() replaces the state's scales, and backward keeps scale_inv
    Scaled c;
    c.scale = d.scale().clone();
    c.scale_inv = d.scale_inv().clone();
    if (!update) {  // the same cast as quantize(), without recording the amax
      c.q = fp8_quantize(x, d.dtype(), d.scale(), {.saturate = d.options().saturate});
      return c;
    }
    c.q = d.quantize(x);
    d.update();
    return c;
  }
  std::vector<Fp8DelayedScaling> roles_;  // indexed by Fp8Role
};

// TE's Float8CurrentScaling: the scale from this call's amax (one more pass over the tensor), no state.
class CurrentScaling final : public PerTensorScaling {
 public:
  CurrentScaling(const Fp8Recipe& r, Device) : o_{.margin = r.margin, .pow2 = r.pow2_scales} {}
  static bool same(const Fp8Recipe& a, const Fp8Recipe& b) { return a.margin == b.margin && a.pow2_scales == b.pow2_scales; }
  static void describe(const Fp8Recipe& r, std::ostream& os) {
    os << "current " << format_name(r) << ", margin " << r.margin << (r.pow2_scales ? ", pow2 scales" : "");
  }

 private:
  Scaled scale_and_cast(Fp8Role, const Tensor& x, DType f8, bool) override {
    Scaled c;
    c.scale = fp8_scale_from_amax(amax(x), f8, o_);
    c.q = fp8_quantize(x, f8, c.scale);
    c.scale_inv = rdiv(1.0, c.scale);
    return c;
  }
  Fp8ScaleOptions o_;
};

// Scale 1 for every tensor: a lesson in what the scales are for (the weights and gradients of a small network
// sit far below E4M3's and E5M2's normal range, and flush to zero).
class Unscaled final : public PerTensorScaling {
 public:
  Unscaled(const Fp8Recipe&, Device) {}
  static bool same(const Fp8Recipe&, const Fp8Recipe&) { return true; }
  static void describe(const Fp8Recipe& r, std::ostream& os) { os << "unscaled " << format_name(r); }

 private:
  Scaled scale_and_cast(Fp8Role, const Tensor& x, DType f8, bool) override {
    Scaled c;
    c.scale = full(Shape{}, 1.0, {.dtype = DType::F32, .device = x.device()});
    c.q = fp8_quantize(x, f8, c.scale);
    c.scale_inv = c.scale;
    return c;
  }
};

// ---- MXFP8: one E8M0 scale per block along the GEMM's reduction dimension ------------------------------

// ops/fp8.h's mx_quantize along `dim`; the operand is the decoded values times their scales (exact), so the
// GEMM is still exact products summed in F32. Each GEMM casts from the high-precision tensor along its own
// reduction dimension, as TE's MXFP8 keeps a rowwise and a columnwise copy.
class MxScaling final : public Fp8ScalingRule {
 public:
  MxScaling(const Fp8Recipe& r, Device) : o_{.rule = r.mx_rule, .block = r.mx_block} {}
  static bool same(const Fp8Recipe& a, const Fp8Recipe& b) { return a.mx_rule == b.mx_rule && a.mx_block == b.mx_block; }
  static void describe(const Fp8Recipe& r, std::ostream& os) {
    os << "MXFP8 " << format_name(r) << ", blocks of " << r.mx_block << ", scales rounded "
       << (r.mx_rule == MxScaleRule::Up ? "up" : "down (OCP)");
  }
  bool per_tensor() const override { return false; }
  Fp8Operand cast(Fp8LinearState& st, Fp8Role role, const Tensor& x, DType f8, int64_t dim, bool) override {
    MxOptions o = o_;
    o.dim = dim;
    const MxTensor m = mx_quantize(x, f8 == DType::F8E4M3 ? MxFormat::MXFP8_E4M3 : MxFormat::MXFP8_E5M2, o);
    if (st.track_stats) st.stats(role) = stats(x, m, f8, dim);
    Fp8Operand op;
    op.value = mx_dequantize(m, DType::BF16);
    return op;
  }

 private:
  Fp8CastStats stats(const Tensor& x, const MxTensor& m, DType f8, int64_t dim) const {
    const std::vector<float> sc = m.scale.to(Device::cpu()).to_vector<float>();
    const int64_t cols = x.size(1), block = o_.block, scale_cols = m.scale.size(1);
    auto inv_at = [&](size_t i) {  // 1 / the scale of element i; x is (rows, cols), the blocks run along dim
      const int64_t row = static_cast<int64_t>(i) / cols, col = static_cast<int64_t>(i) % cols;
      return 1.0f / sc[static_cast<size_t>(dim == 0 ? (row / block) * scale_cols + col : row * scale_cols + col / block)];
    };
    Fp8CastStats cs = cast_stats(x, m.data, fp8_max(f8), inv_at);
    cs.scale = 0.0f;
    cs.scale_min = INFINITY;
    for (float X : sc) cs.scale = std::max(cs.scale, 1.0f / X), cs.scale_min = std::min(cs.scale_min, 1.0f / X);
    return cs;
  }
  MxOptions o_;
};

// f(std::type_identity<Class>{}) for the class of a scaling: the one switch over Fp8Scaling.
template <class F>
decltype(auto) with_scaling_class(Fp8Scaling s, F&& f) {
  switch (s) {
    case Fp8Scaling::Delayed: return f(std::type_identity<DelayedScaling>{});
    case Fp8Scaling::Current: return f(std::type_identity<CurrentScaling>{});
    case Fp8Scaling::Mx: return f(std::type_identity<MxScaling>{});
    case Fp8Scaling::Unscaled: return f(std::type_identity<Unscaled>{});
  }
  HG_FAIL("Fp8Recipe: scaling ", static_cast<int>(s), " is not an Fp8Scaling value");
}

}  // namespace

std::unique_ptr<Fp8ScalingRule> make_fp8_scaling(const Fp8Recipe& r, Device dev) {
  return with_scaling_class(r.scaling, [&](auto c) -> std::unique_ptr<Fp8ScalingRule> {
    return std::make_unique<typename decltype(c)::type>(r, dev);
  });
}

bool same_fp8_scaling(const Fp8Recipe& a, const Fp8Recipe& b) {
  if (a.scaling != b.scaling || a.format != b.format) return false;
  return with_scaling_class(a.scaling, [&](auto c) { return decltype(c)::type::same(a, b); });
}

void describe_fp8_scaling(const Fp8Recipe& r, std::ostream& os) {
  with_scaling_class(r.scaling, [&](auto c) { decltype(c)::type::describe(r, os); });
}

}  // namespace hg
