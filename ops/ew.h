#pragma once
// Elementwise op descriptors shared by the CPU and CUDA backends: which functor of ops/functors.h
// runs, in which mode (forward, or one of its derivatives), with which scalar parameters.
// visit_ew() turns a runtime EwCall into a compile-time adapter with a fixed arity, so each backend
// writes ONE generic loop/kernel and instantiates it for every adapter.
#include <cstdint>

#include "core/error.h"
#include "ops/functors.h"

namespace hg {

enum class EwOp : uint8_t {
  // unary (x) -> y
  Neg, Exp, Log, Sqrt, Rsqrt, Abs, Relu, Sigmoid, Tanh, GeluTanh, GeluErf, Silu, Erf,
  PowScalar, Clamp, AddScalar, MulScalar, DivScalar, RsubScalar, RdivScalar, Round,
  // binary (a, b) -> y
  Add, Sub, Mul, Div, Maximum, Minimum,
  // comparisons (a, b) -> 1 or 0, not differentiable
  Eq, Ne, Lt, Le, Gt, Ge,
  // where (cond, a, b) -> y and its masks (cond, dy) -> dx
  Where, MaskTrue, MaskFalse,
};
constexpr int kNumEwOps = static_cast<int>(EwOp::MaskFalse) + 1;

enum class EwMode : uint8_t {
  Forward,  // unary: (x) -> y; binary: (a, b) -> y
  Grad,     // unary derivative: (x, y, dy) -> dx
  GradA,    // binary derivatives: (a, b, dy) -> da or db, in the output's (broadcast) shape
  GradB,
};

struct EwCall {
  EwOp op = EwOp::Add;
  EwMode mode = EwMode::Forward;
  double p0 = 0, p1 = 0;  // scalar parameters (exponent, clamp bounds, the scalar of *_scalar ops, Round's mode)
};

const char* ew_op_name(EwOp op);

namespace ew {
template <class F> struct UnaryFwd {
  static constexpr int arity = 1;
  F f;
  template <class C> HG_HD C operator()(C x) const { return f(x); }
};
template <class F> struct UnaryGrad {
  static constexpr int arity = 3;
  F f;
  template <class C> HG_HD C operator()(C x, C y, C dy) const { return f.grad(x, y, dy); }
};
template <class F> struct BinaryFwd {
  static constexpr int arity = 2;
  F f;
  template <class C> HG_HD C operator()(C a, C b) const { return f(a, b); }
};
template <class F> struct BinaryGradA {
  static constexpr int arity = 3;
  F f;
  template <class C> HG_HD C operator()(C a, C b, C dy) const { return f.grad_a(a, b, dy); }
};
template <class F> struct BinaryGradB {
  static constexpr int arity = 3;
  F f;
  template <class C> HG_HD C operator()(C a, C b, C dy) const { return f.grad_b(a, b, dy); }
};
template <class F> struct Ternary {
  static constexpr int arity = 3;
  F f;
  template <class C> HG_HD C operator()(C c, C a, C b) const { return f(c, a, b); }
};

template <class F, class V> void unary(const EwCall& c, F f, V&& v) {
  if (c.mode == EwMode::Forward) v(UnaryFwd<F>{f});
  else if (c.mode == EwMode::Grad) v(UnaryGrad<F>{f});
  else HG_FAIL("elementwise: unary op ", ew_op_name(c.op), " has no binary gradient mode");
}
template <class F, class V> void binary(const EwCall& c, F f, V&& v) {
  if (c.mode == EwMode::Forward) v(BinaryFwd<F>{f});
  else if (c.mode == EwMode::GradA) v(BinaryGradA<F>{f});
  else if (c.mode == EwMode::GradB) v(BinaryGradB<F>{f});
  else HG_FAIL("elementwise: binary op ", ew_op_name(c.op), " has no unary gradient mode");
}
template <class F, class V> void forward_only(const EwCall& c, F f, V&& v) {
  HG_CHECK(c.mode == EwMode::Forward, "elementwise: ", ew_op_name(c.op), " is not differentiable");
  v(BinaryFwd<F>{f});
}
}  // namespace ew

// Calls v(adapter) with the adapter for c; adapter::arity tells how many inputs it reads.
template <class V> void visit_ew(const EwCall& c, V&& v) {
  using namespace ew;
  switch (c.op) {
    case EwOp::Neg: return unary(c, fn::Neg{}, v);
    case EwOp::Exp: return unary(c, fn::Exp{}, v);
    case EwOp::Log: return unary(c, fn::Log{}, v);
    case EwOp::Sqrt: return unary(c, fn::Sqrt{}, v);
    case EwOp::Rsqrt: return unary(c, fn::Rsqrt{}, v);
    case EwOp::Abs: return unary(c, fn::Abs{}, v);
    case EwOp::Relu: return unary(c, fn::Relu{}, v);
    case EwOp::Sigmoid: return unary(c, fn::Sigmoid{}, v);
    case EwOp::Tanh: return unary(c, fn::Tanh{}, v);
    case EwOp::GeluTanh: return unary(c, fn::GeluTanh{}, v);
    case EwOp::GeluErf: return unary(c, fn::GeluErf{}, v);
    case EwOp::Silu: return unary(c, fn::Silu{}, v);
    case EwOp::Erf: return unary(c, fn::Erf{}, v);
    case EwOp::PowScalar: return unary(c, fn::PowScalar{c.p0}, v);
    case EwOp::Clamp: return unary(c, fn::Clamp{c.p0, c.p1}, v);
    case EwOp::AddScalar: return unary(c, fn::AddScalar{c.p0}, v);
    case EwOp::MulScalar: return unary(c, fn::MulScalar{c.p0}, v);
    case EwOp::DivScalar: return unary(c, fn::DivScalar{c.p0}, v);
    case EwOp::RsubScalar: return unary(c, fn::RsubScalar{c.p0}, v);
    case EwOp::RdivScalar: return unary(c, fn::RdivScalar{c.p0}, v);
    case EwOp::Round: return unary(c, fn::Round{c.p0}, v);
    case EwOp::Add: return binary(c, fn::Add{}, v);
    case EwOp::Sub: return binary(c, fn::Sub{}, v);
    case EwOp::Mul: return binary(c, fn::Mul{}, v);
    case EwOp::Div: return binary(c, fn::Div{}, v);
    case EwOp::Maximum: return binary(c, fn::Maximum{}, v);
    case EwOp::Minimum: return binary(c, fn::Minimum{}, v);
    case EwOp::Eq: return forward_only(c, fn::Eq{}, v);
    case EwOp::Ne: return forward_only(c, fn::Ne{}, v);
    case EwOp::Lt: return forward_only(c, fn::Lt{}, v);
    case EwOp::Le: return forward_only(c, fn::Le{}, v);
    case EwOp::Gt: return forward_only(c, fn::Gt{}, v);
    case EwOp::Ge: return forward_only(c, fn::Ge{}, v);
    case EwOp::Where:
      HG_CHECK(c.mode == EwMode::Forward, "elementwise: where has no gradient mode; use MaskTrue/MaskFalse");
      return v(Ternary<fn::Where>{});
    case EwOp::MaskTrue: return forward_only(c, fn::MaskTrue{}, v);
    case EwOp::MaskFalse: return forward_only(c, fn::MaskFalse{}, v);
  }
  HG_FAIL("elementwise: unknown op ", static_cast<int>(c.op));
}

}  // namespace hg
