// In-place ops: out of place, then written into the tensor's elements by assign_inplace (ops/inplace.h); the
// arithmetic ones straight into the tensor where that cannot differ (writes_directly).
#include "ops/inplace.h"

#include "autograd/node.h"
#include "ops/autocast/autocast.h"
#include "ops/broadcast.h"
#include "ops/dispatch.h"
#include "ops/elementwise.h"
#include "ops/shape.h"

namespace hg {
namespace {

// Whether writing into self would be recorded by autograd (self or an operand requires grad, grad mode on).
bool records(const Tensor& self, std::initializer_list<const Tensor*> others) {
  if (!autograd::grad_enabled()) return false;
  if (self.requires_grad()) return true;
  for (const Tensor* t : others)
    if (t && t->defined() && t->requires_grad()) return true;
  return false;
}

void check_target(const char* op, const Tensor& self, bool recording) {
  HG_CHECK(self.defined(), op, ": the tensor is undefined");
  HG_CHECK(!(recording && self.is_leaf() && self.requires_grad()), op, ": a leaf Variable that requires grad is being "
           "used in an in-place operation (shape ", self.shape(), "); run it under NoGradGuard (as an optimizer "
           "does), or on a clone()");
}

// self's values for an op whose backward reads them: a recorded copy when the op is recorded, since the write
// below changes self's storage (the copy keeps the gradient right instead of refusing the backward).
Tensor current(const Tensor& self, bool recording) { return recording ? self.clone() : self; }

// The body shared by the ops of one operand: reads_self says whether the out-of-place op's backward reads self.
template <class F>
const Tensor& apply(const char* op, const Tensor& self, std::initializer_list<const Tensor*> others, bool reads_self,
                    F&& f) {
  const bool recording = records(self, others);
  check_target(op, self, recording);
  return assign_inplace(op, self, f(reads_self ? current(self, recording) : self));
}

bool shares_storage(const Tensor& a, const Tensor& b) {
  return a.unsafe_impl()->storage == b.unsafe_impl()->storage;
}

// A binary op's in-place form: self op= o. When recorded and the op's backward reads its operands (mul_, div_),
// both are read from copies: o too when it shares self's storage (x.mul_(x), a view of x), which the write changes.
template <class F>
const Tensor& apply_binary(const char* op, const Tensor& self, const Tensor& o, bool reads_operands, F&& f) {
  return apply(op, self, {&o}, reads_operands, [&](const Tensor& s) {
    if (s.same(self)) return f(s, o);  // self is read as it is (not recorded, or the backward does not read it)
    return f(s, o.same(self) ? s : shares_storage(o, self) ? o.clone() : o);
  });
}

// torch's in-place kernels: when the write is not recorded, self is a contiguous F32/F16/BF16/F64 tensor and the
// tensor operand (if any) has self's dtype and device, broadcasts to self's shape and shares no storage with self
// (or is exactly self's elements), the op's kernel writes into self's elements: one pass, no temporary, and the
// same bits as computing out of place and copying (both round once to self's dtype). Autocast regions and op
// observers (which see the out-of-place op) take the general path.
bool writes_directly(const Tensor& self, const Tensor* o) {
  if (!self.defined() || !self.is_contiguous() || records(self, {o})) return false;
  const DType dt = self.dtype();
  if (dt != DType::F32 && dt != DType::F16 && dt != DType::BF16 && dt != DType::F64) return false;
  if (amp::is_enabled(self.device().type) || amp::observe::wanted()) return false;
  if (o == nullptr) return true;
  if (!o->defined() || o->dtype() != dt || o->device() != self.device()) return false;
  if (!broadcasts_to(o->shape(), self.shape())) return false;
  if (!shares_storage(*o, self)) return true;
  return o->is_contiguous() && o->shape() == self.shape() && o->data_ptr() == self.data_ptr();
}

const Tensor& write_directly(const char* op, const Tensor& self, const EwCall& call, const std::vector<Tensor>& ins) {
  Tensor out = self;
  run_elementwise(op, call, ins, out);
  ++self.unsafe_impl()->storage->version;
  return self;
}

}  // namespace

const Tensor& assign_inplace(const char* op, const Tensor& self, const Tensor& result_in) {
  HG_CHECK(result_in.shape() == self.shape(), op, ": the result has shape ", result_in.shape(), " but the tensor "
           "written to has shape ", self.shape(), "; an in-place op cannot change the shape (operands broadcast to "
           "the tensor, not the other way)");
  HG_CHECK(!(self.dtype() == DType::I64 && is_floating(result_in.dtype())), op, ": result type ", result_in.dtype(),
           " can't be cast to the desired output type I64 (torch's rule); use the out-of-place op");
  const bool recording = autograd::grad_enabled() && (result_in.requires_grad() || self.requires_grad());
  check_target(op, self, recording);
  Tensor result = result_in.dtype() == self.dtype() ? result_in : result_in.to(self.dtype());
  if (recording && !result.requires_grad()) {
    // values that do not depend on self's old ones (fill_, copy_ of a constant): self still requires grad, and
    // its old history gets a zero gradient, as torch's FillBackward
    result = result.detach();
    autograd::record(result, op, {self}, [](const Tensor& dy, const GradMask&) {
      return std::vector<Tensor>{zeros(dy.shape(), {.dtype = dy.dtype(), .device = dy.device()})};
    }, autograd::Saves::none(), autograd::DoubleBackward::Yes);  // a constant: its own gradient is none
  }
  // a view's base takes the write into its history (checked, so a refused write changes nothing); the rewritten
  // history reads no values, so it may come before the write
  if (recording && self.unsafe_impl()->view_base) copy_slices(op, self, result);
  else if (recording) self.unsafe_impl()->autograd = result.unsafe_impl()->autograd;  // the op is self's history now
  {
    NoGradGuard no_grad;
    if (!result.same(self)) copy_into(result.detach(), self);
  }
  ++self.unsafe_impl()->storage->version;
  return self;
}

// ---- the members (core/tensor.h) ----
const Tensor& Tensor::add_(const Tensor& o) const {
  if (writes_directly(*this, &o)) return write_directly("add_", *this, {EwOp::Add}, {*this, o});
  return apply_binary("add_", *this, o, false, [](const Tensor& s, const Tensor& t) { return hg::add(s, t); });
}
const Tensor& Tensor::add_(double v) const {
  if (writes_directly(*this, nullptr))
    return write_directly("add_", *this, {EwOp::AddScalar, EwMode::Forward, v}, {*this});
  return apply("add_", *this, {}, false, [&](const Tensor& s) { return hg::add(s, v); });
}
const Tensor& Tensor::sub_(const Tensor& o) const {
  if (writes_directly(*this, &o)) return write_directly("sub_", *this, {EwOp::Sub}, {*this, o});
  return apply_binary("sub_", *this, o, false, [](const Tensor& s, const Tensor& t) { return hg::sub(s, t); });
}
const Tensor& Tensor::sub_(double v) const {
  if (writes_directly(*this, nullptr))
    return write_directly("sub_", *this, {EwOp::AddScalar, EwMode::Forward, -v}, {*this});
  return apply("sub_", *this, {}, false, [&](const Tensor& s) { return hg::sub(s, v); });
}
const Tensor& Tensor::mul_(const Tensor& o) const {
  if (writes_directly(*this, &o)) return write_directly("mul_", *this, {EwOp::Mul}, {*this, o});
  return apply_binary("mul_", *this, o, true, [](const Tensor& s, const Tensor& t) { return hg::mul(s, t); });
}
const Tensor& Tensor::mul_(double v) const {
  if (writes_directly(*this, nullptr))
    return write_directly("mul_", *this, {EwOp::MulScalar, EwMode::Forward, v}, {*this});
  return apply("mul_", *this, {}, false, [&](const Tensor& s) { return hg::mul(s, v); });
}
const Tensor& Tensor::div_(const Tensor& o) const {
  if (writes_directly(*this, &o)) return write_directly("div_", *this, {EwOp::Div}, {*this, o});
  return apply_binary("div_", *this, o, true, [](const Tensor& s, const Tensor& t) { return hg::div(s, t); });
}
const Tensor& Tensor::div_(double v) const {
  if (writes_directly(*this, nullptr))
    return write_directly("div_", *this, {EwOp::DivScalar, EwMode::Forward, v}, {*this});
  return apply("div_", *this, {}, false, [&](const Tensor& s) { return hg::div(s, v); });
}
const Tensor& Tensor::clamp_(double lo, double hi) const {
  return apply("clamp_", *this, {}, true, [&](const Tensor& s) { return hg::clamp(s, lo, hi); });
}
const Tensor& Tensor::fill_(double v) const {
  const bool recording = records(*this, {});
  check_target("fill_", *this, recording);
  return assign_inplace("fill_", *this, full(shape(), v, {.dtype = dtype(), .device = device()}));
}
const Tensor& Tensor::zero_() const { return fill_(0.0); }
const Tensor& Tensor::copy_(const Tensor& src) const {
  HG_CHECK(src.defined(), "copy_: the source is undefined");
  HG_CHECK(broadcast_shapes("copy_", shape(), src.shape()) == shape(), "copy_: source of shape ", src.shape(),
           " does not broadcast to the destination's shape ", shape());
  const bool recording = records(*this, {&src});
  check_target("copy_", *this, recording);
  // to the destination's device, then its dtype (torch converts as it copies), then its shape
  const Tensor moved = src.device() == device() ? src : src.to(device());
  HG_CHECK(!(dtype() == DType::I64 && is_floating(moved.dtype())) || !recording, "copy_: a floating source copied into "
           "an I64 tensor is not differentiable; detach() the source");
  Tensor v = moved.dtype() == dtype() ? moved : moved.to(dtype());
  if (v.shape() != shape()) v = hg::expand(v, shape());
  if (v.same(*this)) return *this;
  return assign_inplace("copy_", *this, v);
}
const Tensor& Tensor::masked_fill_(const Tensor& mask, double value) const {
  return apply("masked_fill_", *this, {}, true, [&](const Tensor& s) { return hg::masked_fill(s, mask, value); });
}

const Tensor& Tensor::index_add_(int64_t dim, const Tensor& index, const Tensor& source, double alpha) const {
  return apply("index_add_", *this, {&source}, false,
               [&](const Tensor& s) { return hg::index_add(s, dim, index, source, alpha); });
}
const Tensor& Tensor::scatter_(int64_t dim, const Tensor& index, const Tensor& src) const {
  return apply("scatter_", *this, {&src}, true, [&](const Tensor& s) { return hg::scatter(s, dim, index, src); });
}
const Tensor& Tensor::scatter_(int64_t dim, const Tensor& index, double value) const {
  return apply("scatter_", *this, {}, true, [&](const Tensor& s) { return hg::scatter(s, dim, index, value); });
}
const Tensor& Tensor::scatter_add_(int64_t dim, const Tensor& index, const Tensor& src) const {
  return apply("scatter_add_", *this, {&src}, false, [&](const Tensor& s) { return hg::scatter_add(s, dim, index, src); });
}

Tensor& relu_(Tensor& x) {
  relu_(static_cast<const Tensor&>(x));
  return x;
}
const Tensor& relu_(const Tensor& x) {
  return apply("relu_", x, {}, true, [](const Tensor& s) { return hg::relu(s); });
}

const Tensor& operator+=(const Tensor& a, const Tensor& b) { return a.add_(b); }
const Tensor& operator-=(const Tensor& a, const Tensor& b) { return a.sub_(b); }
const Tensor& operator*=(const Tensor& a, const Tensor& b) { return a.mul_(b); }
const Tensor& operator/=(const Tensor& a, const Tensor& b) { return a.div_(b); }
const Tensor& operator+=(const Tensor& a, double b) { return a.add_(b); }
const Tensor& operator-=(const Tensor& a, double b) { return a.sub_(b); }
const Tensor& operator*=(const Tensor& a, double b) { return a.mul_(b); }
const Tensor& operator/=(const Tensor& a, double b) { return a.div_(b); }

}  // namespace hg
