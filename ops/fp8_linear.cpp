// The FP8 linear layer (ops/fp8_linear.h): the casts are the recipe's class's (ops/fp8_scaling.h); the GEMMs run
// on FP8 Tensor Cores or on FP8 values decoded exactly to BF16 with an F32 result (GemmArgs::c_f32), the
// inverse scales applied to the F32 result; the backward node casts the output gradient and runs dgrad and
// wgrad the same way.
#include "ops/fp8_linear.h"

#include <cmath>
#include <sstream>

#include "autograd/node.h"
#include "ops/autocast/autocast.h"
#include "ops/elementwise.h"
#include "ops/fp8_scaling.h"
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
  describe_fp8_scaling(r, os);
  return os.str();
}

// ---- the state ---------------------------------------------------------------------------------------

void check_fp8_recipe(const Fp8Recipe& r, const char* op) {
  HG_CHECK(r.amax_history_len >= 1, op, ": Fp8Recipe amax_history_len=", r.amax_history_len,
           " must be at least 1 (TE's default is 1024)");
  HG_CHECK(r.mx_block >= 1, op, ": Fp8Recipe mx_block=", r.mx_block, " must be at least 1 (MXFP8 uses 32)");
  HG_CHECK(std::isfinite(r.margin), op, ": Fp8Recipe margin=", r.margin, " must be finite");
}

Fp8LinearState::Fp8LinearState(const Fp8Recipe& r, Device dev) : recipe_(r), device_(dev) {
  check_fp8_recipe(r, "Fp8LinearState");
  scaling_ = make_fp8_scaling(r, dev);
}

Fp8LinearState::~Fp8LinearState() = default;

Fp8DelayedScaling& Fp8LinearState::delayed(Fp8Role r) {
  Fp8DelayedScaling* d = scaling_->delayed(r);
  HG_CHECK(d != nullptr, "Fp8LinearState: the recipe (", describe(recipe_), ") keeps no delayed-scaling state");
  return *d;
}
const Fp8DelayedScaling& Fp8LinearState::delayed(Fp8Role r) const {
  return const_cast<Fp8LinearState*>(this)->delayed(r);
}

void Fp8LinearState::to(Device dev) {
  scaling_->to(dev);
  device_ = dev;
}

bool Fp8LinearState::compatible(const Fp8Recipe& r) const { return same_fp8_scaling(recipe_, r); }

void Fp8LinearState::save_into(std::map<std::string, Tensor>& out, const std::string& prefix) const {
  scaling_->save_into(out, prefix);
}

void Fp8LinearState::load_from(const std::map<std::string, Tensor>& in, const std::string& prefix) {
  scaling_->load_from(in, prefix);
}

namespace {

// ---- the GEMM ---------------------------------------------------------------------------------------------

// op(a) (m,k) * op(b) (k,n) as an F32 (m,n) tensor; a and b BF16, contiguous, stored as op() says. MX's GEMMs
// and the per-tensor decode route run here.
Tensor gemm_f32(const Tensor& a, Trans ta, const Tensor& b, Trans tb, int64_t m, int64_t n, int64_t k) {
  return alias_with_shape(gemm_op({.x = a, .tx = ta, .y = b, .ty = tb, .m = m, .n = n, .k = k, .c_f32 = true}), {m, n});
}

Tensor decoded(const Tensor& q) { return q.to(DType::BF16); }  // exact for both FP8 formats

// op(a) (m,k) . op(b) (k,n) as F32 (m,n), each operand stored as its Trans says. Per-tensor operands are
// multiplied by a.scale_inv * b.scale_inv: on FP8 Tensor Cores when the device has them and takes the shape
// (ops/kernels/fp8.h; it wants a (m,k) and b (n,k), k innermost), else on the values decoded to BF16.
// Block-scaled operands (MX) are already decoded and scaled: always the BF16 GEMM.
Tensor fp8_gemm(Fp8LinearState& st, const Fp8Operand& a, Trans ta, const Fp8Operand& b, Trans tb, int64_t m,
                int64_t n, int64_t k) {
  if (!a.per_tensor()) {
    st.count_gemm(false);
    return gemm_f32(a.value, ta, b.value, tb, m, n, k);
  }
  const Device dev = a.q.device();
  if (fp8_gemm_kernels().has(dev, a.q.dtype())) {
    const Fp8GemmKernel native = fp8_gemm_kernels().get(dev, a.q.dtype());
    GemmArgs g{.dtype = a.q.dtype(), .trans_a = Trans::N, .trans_b = Trans::T, .m = m, .n = n, .k = k, .lda = k,
               .ldb = k, .ldc = n, .c_f32 = true, .b_dtype = b.q.dtype(), .scale_a = a.scale_inv.data<float>(),
               .scale_b = b.scale_inv.data<float>(), .query = true};
    if (native(g)) {
      // K-major copies where the operand is stored the other way (transpose copies: 1 byte per element)
      const Tensor ak = (ta == Trans::N ? a.q : transpose(a.q, 0, 1)).contiguous();  // (m, k)
      const Tensor bk = (tb == Trans::T ? b.q : transpose(b.q, 0, 1)).contiguous();  // (n, k)
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

Tensor fp8_linear(const Tensor& x_in, const Tensor& w_in, const Tensor& b, const std::shared_ptr<Fp8LinearState>& state,
                  const Fp8LinearOptions& opt) {
  if (amp::OpCast c{amp::OpId::Fp8Linear, {x_in, w_in, b}}) {  // an observer (PrecisionTrace) or a user policy
    Tensor y = fp8_linear(c[0], c[1], c[2], state, opt);
    if (c.observed()) c.set_note(cast_note(*state));
    return c.result(y);
  }
  check_args(x_in, w_in, b, state);
  const Tensor x = x_in.contiguous(), w = w_in.contiguous();  // the casts and GEMMs read dense rows
  amp::ExcludeGuard no_autocast;  // this op manages its own dtypes
  Fp8LinearState& st = *state;
  st.count_call();
  Fp8ScalingRule& scaling = st.scaling();
  const bool update = opt.training && autograd::grad_enabled();  // evaluation leaves the scaling state alone
  const DType fwd = st.recipe().forward_dtype();
  const int64_t i = w.size(1), o = w.size(0);
  int64_t m = 1;
  for (int64_t d = 0; d + 1 < x.ndim(); ++d) m *= x.shape()[d];
  Shape out = x.shape();
  out[out.ndim() - 1] = o;
  const Tensor x2 = alias_with_shape(x, {m, i});

  Fp8Operand qx, qw;  // x and w cast for the forward's GEMM, which reduces along in_features (dim 1 of both)
  Tensor y;
  {
    autograd::NoGradGuard ng;
    qx = scaling.cast(st, Fp8Role::Input, x2, fwd, 1, update);
    qw = scaling.cast(st, Fp8Role::Weight, w, fwd, 1, update);
    Tensor acc = fp8_gemm(st, qx, Trans::N, qw, Trans::T, m, o, i);
    if (b.defined()) acc = add(acc, b.dtype() == DType::F32 ? b : b.to(DType::F32));
    y = alias_with_shape(acc.dtype() == x.dtype() ? acc : acc.to(x.dtype()), out);
  }
  std::vector<Tensor> ins{x, w};
  if (b.defined()) ins.push_back(b);
  // Per-tensor scales: backward reads the forward's FP8 copies (1 byte per element) and scales, as TE saves
  // them. Block scales: backward casts the high-precision x and w again along its GEMMs' reduction dims.
  const bool reuse = scaling.per_tensor();
  if (!reuse) qx = {}, qw = {};
  const Tensor x_kept = reuse ? Tensor() : x2.detach(), w_kept = reuse ? Tensor() : w.detach();  // values only
  autograd::record(y, "fp8_linear", ins,
                   [state, qx, qw, x_kept, w_kept, m, o, i, update, xs = x.shape(), xdt = x.dtype(), wdt = w.dtype(),
                    bdt = b.defined() ? b.dtype() : DType::F32](const Tensor& dy_in, const GradMask& needs) {
                     amp::ExcludeGuard no_autocast;
                     autograd::NoGradGuard ng;
                     Fp8LinearState& s = *state;
                     Fp8ScalingRule& sc = s.scaling();
                     const DType gdt = s.recipe().backward_dtype(), fdt = s.recipe().forward_dtype();
                     const Tensor dy = alias_with_shape(dy_in, {m, o});
                     std::vector<Tensor> g(needs.size());
                     Tensor dx, dw;
                     if (sc.per_tensor()) {  // one cast of dy serves both GEMMs
                       const Fp8Operand qg = sc.cast(s, Fp8Role::GradOutput, dy, gdt, 1, update);
                       if (needs[0]) dx = fp8_gemm(s, qg, Trans::N, qw, Trans::N, m, i, o);
                       if (needs[1]) dw = fp8_gemm(s, qg, Trans::T, qx, Trans::N, o, i, m);
                     } else {
                       if (needs[0]) {  // dx (m,i) = dy (m,o) w (o,i): reduces along o
                         const Fp8Operand g1 = sc.cast(s, Fp8Role::GradOutput, dy, gdt, 1, update);
                         const Fp8Operand w0 = sc.cast(s, Fp8Role::Weight, w_kept, fdt, 0, update);
                         dx = fp8_gemm(s, g1, Trans::N, w0, Trans::N, m, i, o);
                       }
                       if (needs[1]) {  // dw (o,i) = dy^T (o,m) x (m,i): reduces along m
                         const Fp8Operand g0 = sc.cast(s, Fp8Role::GradOutput, dy, gdt, 0, update);
                         const Fp8Operand x0 = sc.cast(s, Fp8Role::Input, x_kept, fdt, 0, update);
                         dw = fp8_gemm(s, g0, Trans::T, x0, Trans::N, o, i, m);
                       }
                     }
                     if (dx.defined()) g[0] = alias_with_shape(dx.dtype() == xdt ? dx : dx.to(xdt), xs);
                     if (dw.defined()) g[1] = dw.dtype() == wdt ? dw : dw.to(wdt);
                     if (needs.size() > 2 && needs[2]) {
                       const Tensor db = sum(dy, {0});
                       g[2] = db.dtype() == bdt ? db : db.to(bdt);
                     }
                     return g;
                   },
                   // per-tensor scales read the FP8 copies, which nothing else writes; block scales read x and w
                   reuse ? autograd::Saves::none() : autograd::Saves::only({0, 1}));
  return y;
}

}  // namespace hg

namespace hg::amp {
namespace {
thread_local const Fp8Recipe* t_recipe = nullptr;
}

Fp8Autocast::Fp8Autocast(const Fp8Recipe& recipe, bool enabled) : prev_(t_recipe), recipe_(recipe) {
  check_fp8_recipe(recipe, "Fp8Autocast");
  t_recipe = enabled ? &recipe_ : nullptr;
}

Fp8Autocast::~Fp8Autocast() { t_recipe = prev_; }

const Fp8Recipe* fp8_recipe() { return t_recipe; }

}  // namespace hg::amp
