#pragma once
// The math of every elementwise op and its derivative, written once as HG_HD functors and called by
// the CPU loops (cpu/elementwise.cpp) and the CUDA kernels (cuda/kernels/elementwise.cu).
// C is the compute type: float for F32/F16/BF16 storage, double for F64. Every functor is a POD so it
// can be passed to a kernel by value. No fast-math anywhere: NaN and inf must behave as IEEE says.
//
// Unary functors:  C operator()(C x);  C grad(C x, C y, C dy)  with y = f(x)
// Binary functors: C operator()(C a, C b);  C grad_a(C a, C b, C dy);  C grad_b(C a, C b, C dy)
// NaN propagates through relu, clamp, maximum and minimum as in PyTorch.
#include <math.h>

#include "core/macros.h"
#include "ops/vec_math.h"

namespace hg::fn {

// Overloads for float and double that exist on host and device.
// On the host, exp and tanh in float use the vectorisable forms of ops/vec_math.h (within 1-2 ulp).
HG_HD float m_exp(float x) {
#if defined(__CUDA_ARCH__)
  return expf(x);
#else
  return vm::exp(x);
#endif
}
HG_HD double m_exp(double x) { return ::exp(x); }  // ::, not hg::exp(const Tensor&)
HG_HD float m_log(float x) { return logf(x); }
HG_HD double m_log(double x) { return ::log(x); }
HG_HD float m_sqrt(float x) { return sqrtf(x); }
HG_HD double m_sqrt(double x) { return ::sqrt(x); }
HG_HD float m_tanh(float x) {
#if defined(__CUDA_ARCH__)
  return tanhf(x);
#else
  return vm::tanh(x);
#endif
}
HG_HD double m_tanh(double x) { return ::tanh(x); }
HG_HD float m_erf(float x) { return erff(x); }
HG_HD double m_erf(double x) { return ::erf(x); }
HG_HD float m_pow(float x, float e) { return powf(x, e); }
HG_HD double m_pow(double x, double e) { return ::pow(x, e); }
HG_HD float m_abs(float x) { return fabsf(x); }
HG_HD double m_abs(double x) { return ::fabs(x); }
HG_HD float m_floor(float x) { return floorf(x); }
HG_HD double m_floor(double x) { return ::floor(x); }
HG_HD float m_ceil(float x) { return ceilf(x); }
HG_HD double m_ceil(double x) { return ::ceil(x); }
HG_HD float m_rint(float x) { return rintf(x); }  // to nearest, ties to even (the default rounding mode)
HG_HD double m_rint(double x) { return ::rint(x); }
HG_HD float m_trunc(float x) { return truncf(x); }
HG_HD double m_trunc(double x) { return ::trunc(x); }
template <class C> HG_HD bool is_nan(C x) { return x != x; }

// ---- unary ------------------------------------------------------------------------------------
struct Neg {
  template <class C> HG_HD C operator()(C x) const { return -x; }
  template <class C> HG_HD C grad(C, C, C dy) const { return -dy; }
};
struct Exp {
  template <class C> HG_HD C operator()(C x) const { return m_exp(x); }
  template <class C> HG_HD C grad(C, C y, C dy) const { return dy * y; }
};
struct Log {
  template <class C> HG_HD C operator()(C x) const { return m_log(x); }
  template <class C> HG_HD C grad(C x, C, C dy) const { return dy / x; }
};
struct Sqrt {
  template <class C> HG_HD C operator()(C x) const { return m_sqrt(x); }
  template <class C> HG_HD C grad(C, C y, C dy) const { return dy / (C(2) * y); }
};
struct Rsqrt {
  template <class C> HG_HD C operator()(C x) const { return C(1) / m_sqrt(x); }
  template <class C> HG_HD C grad(C, C y, C dy) const { return C(-0.5) * dy * y * y * y; }
};
struct Abs {
  template <class C> HG_HD C operator()(C x) const { return m_abs(x); }
  template <class C> HG_HD C grad(C x, C, C dy) const { return x > C(0) ? dy : (x < C(0) ? -dy : C(0)); }
};
struct Relu {
  template <class C> HG_HD C operator()(C x) const { return x > C(0) || is_nan(x) ? x : C(0); }
  // from y: relu(x) > 0 exactly when x > 0 (NaN: neither), and backward then keeps only y, which the
  // next layer saves anyway (torch's threshold_backward on the result)
  template <class C> HG_HD C grad(C, C y, C dy) const { return y > C(0) ? dy : C(0); }
};
struct Sigmoid {
  template <class C> HG_HD C operator()(C x) const { return C(1) / (C(1) + m_exp(-x)); }
  template <class C> HG_HD C grad(C, C y, C dy) const { return dy * y * (C(1) - y); }
};
struct Tanh {
  template <class C> HG_HD C operator()(C x) const { return m_tanh(x); }
  template <class C> HG_HD C grad(C, C y, C dy) const { return dy * (C(1) - y * y); }
};
// gelu with the tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
struct GeluTanh {
  static constexpr double kA = 0.7978845608028654, kB = 0.044715;
  template <class C> HG_HD C operator()(C x) const {
    return C(0.5) * x * (C(1) + m_tanh(C(kA) * (x + C(kB) * x * x * x)));
  }
  template <class C> HG_HD C grad(C x, C, C dy) const {
    const C t = m_tanh(C(kA) * (x + C(kB) * x * x * x));
    const C sech2 = C(1) - t * t;
    // for large |x| sech2 is exactly 0 while x^3 may be inf: skip the term instead of 0*inf = NaN
    const C tail = sech2 == C(0) ? C(0) : C(0.5) * x * sech2 * C(kA) * (C(1) + C(3 * kB) * x * x);
    return dy * (C(0.5) * (C(1) + t) + tail);
  }
};
// exact gelu: 0.5 x (1 + erf(x / sqrt(2)))
struct GeluErf {
  static constexpr double kInvSqrt2 = 0.7071067811865476, kInvSqrt2Pi = 0.3989422804014327;
  template <class C> HG_HD C operator()(C x) const { return C(0.5) * x * (C(1) + m_erf(x * C(kInvSqrt2))); }
  template <class C> HG_HD C grad(C x, C, C dy) const {
    const C pdf = m_exp(C(-0.5) * x * x) * C(kInvSqrt2Pi);
    const C tail = pdf == C(0) ? C(0) : x * pdf;
    return dy * (C(0.5) * (C(1) + m_erf(x * C(kInvSqrt2))) + tail);
  }
};
// silu (swish): x sigmoid(x), torch.nn.functional.silu; silu(-inf) is -inf * 0 = NaN, as in PyTorch
struct Silu {
  template <class C> HG_HD C operator()(C x) const { return x / (C(1) + m_exp(-x)); }
  template <class C> HG_HD C grad(C x, C, C dy) const {
    const C s = C(1) / (C(1) + m_exp(-x));
    return dy * s * (C(1) + x * (C(1) - s));
  }
};
// the error function, torch.erf: erf(+-inf) = +-1; d/dx = 2/sqrt(pi) exp(-x^2)
struct Erf {
  static constexpr double k2OverSqrtPi = 1.1283791670955126;
  template <class C> HG_HD C operator()(C x) const { return m_erf(x); }
  template <class C> HG_HD C grad(C x, C, C dy) const { return dy * C(k2OverSqrtPi) * m_exp(-x * x); }
};
struct PowScalar {
  double e;
  template <class C> HG_HD C operator()(C x) const { return m_pow(x, C(e)); }
  template <class C> HG_HD C grad(C x, C, C dy) const {
    return e == 0.0 ? C(0) : dy * C(e) * m_pow(x, C(e - 1.0));  // torch: exponent 0 has zero gradient
  }
};
// clamp(x, lo, hi); the gradient passes where lo <= x <= hi (torch.clamp).
struct Clamp {
  double lo, hi;
  template <class C> HG_HD C operator()(C x) const {
    if (is_nan(x)) return x;
    return x < C(lo) ? C(lo) : (x > C(hi) ? C(hi) : x);
  }
  template <class C> HG_HD C grad(C x, C, C dy) const { return x >= C(lo) && x <= C(hi) ? dy : C(0); }
};
// To an integer value: floor (mode 0), ceil (1), round half to even (2, torch.round), trunc (3). NaN and
// infinities pass through. The gradient is zero, as torch's.
struct Round {
  double mode;
  template <class C> HG_HD C operator()(C x) const {
    return mode == 0 ? m_floor(x) : mode == 1 ? m_ceil(x) : mode == 2 ? m_rint(x) : m_trunc(x);
  }
  template <class C> HG_HD C grad(C, C, C) const { return C(0); }
};
struct AddScalar {
  double s;
  template <class C> HG_HD C operator()(C x) const { return x + C(s); }
  template <class C> HG_HD C grad(C, C, C dy) const { return dy; }
};
struct MulScalar {
  double s;
  template <class C> HG_HD C operator()(C x) const { return x * C(s); }
  template <class C> HG_HD C grad(C, C, C dy) const { return dy * C(s); }
};
struct DivScalar {  // x / s
  double s;
  template <class C> HG_HD C operator()(C x) const { return x / C(s); }
  template <class C> HG_HD C grad(C, C, C dy) const { return dy / C(s); }
};
struct RsubScalar {  // s - x
  double s;
  template <class C> HG_HD C operator()(C x) const { return C(s) - x; }
  template <class C> HG_HD C grad(C, C, C dy) const { return -dy; }
};
struct RdivScalar {  // s / x
  double s;
  template <class C> HG_HD C operator()(C x) const { return C(s) / x; }
  // (s/x)/x, not s/(x*x): x*x overflows (or underflows) where the gradient is representable
  template <class C> HG_HD C grad(C x, C, C dy) const { return -dy * ((C(s) / x) / x); }
};

// ---- binary -----------------------------------------------------------------------------------
struct Add {
  template <class C> HG_HD C operator()(C a, C b) const { return a + b; }
  template <class C> HG_HD C grad_a(C, C, C dy) const { return dy; }
  template <class C> HG_HD C grad_b(C, C, C dy) const { return dy; }
};
struct Sub {
  template <class C> HG_HD C operator()(C a, C b) const { return a - b; }
  template <class C> HG_HD C grad_a(C, C, C dy) const { return dy; }
  template <class C> HG_HD C grad_b(C, C, C dy) const { return -dy; }
};
struct Mul {
  template <class C> HG_HD C operator()(C a, C b) const { return a * b; }
  template <class C> HG_HD C grad_a(C, C b, C dy) const { return dy * b; }
  template <class C> HG_HD C grad_b(C a, C, C dy) const { return dy * a; }
};
struct Div {
  template <class C> HG_HD C operator()(C a, C b) const { return a / b; }
  template <class C> HG_HD C grad_a(C, C b, C dy) const { return dy / b; }
  // (a/b)/b, not a/(b*b): b*b overflows for |b| > 1.8e19 in float (torch: -grad * ((self / other) / other))
  template <class C> HG_HD C grad_b(C a, C b, C dy) const { return -dy * ((a / b) / b); }
};
// maximum/minimum propagate NaN; on ties the gradient is split evenly (torch.maximum).
struct Maximum {
  template <class C> HG_HD C operator()(C a, C b) const { return is_nan(a) || a > b ? a : (is_nan(b) || b > a ? b : a); }
  template <class C> HG_HD C grad_a(C a, C b, C dy) const { return a > b ? dy : (a == b ? C(0.5) * dy : C(0)); }
  template <class C> HG_HD C grad_b(C a, C b, C dy) const { return b > a ? dy : (a == b ? C(0.5) * dy : C(0)); }
};
struct Minimum {
  template <class C> HG_HD C operator()(C a, C b) const { return is_nan(a) || a < b ? a : (is_nan(b) || b < a ? b : a); }
  template <class C> HG_HD C grad_a(C a, C b, C dy) const { return a < b ? dy : (a == b ? C(0.5) * dy : C(0)); }
  template <class C> HG_HD C grad_b(C a, C b, C dy) const { return b < a ? dy : (a == b ? C(0.5) * dy : C(0)); }
};
// Comparisons give 1 or 0 in the input dtype (not differentiable).
struct Eq { template <class C> HG_HD C operator()(C a, C b) const { return a == b ? C(1) : C(0); } };
struct Ne { template <class C> HG_HD C operator()(C a, C b) const { return a != b ? C(1) : C(0); } };
struct Lt { template <class C> HG_HD C operator()(C a, C b) const { return a < b ? C(1) : C(0); } };
struct Le { template <class C> HG_HD C operator()(C a, C b) const { return a <= b ? C(1) : C(0); } };
struct Gt { template <class C> HG_HD C operator()(C a, C b) const { return a > b ? C(1) : C(0); } };
struct Ge { template <class C> HG_HD C operator()(C a, C b) const { return a >= b ? C(1) : C(0); } };

// where(cond, a, b): a where cond != 0, else b. Its gradients are masks of dy by cond.
struct Where {
  template <class C> HG_HD C operator()(C c, C a, C b) const { return c != C(0) ? a : b; }
};
struct MaskTrue {  // (cond, dy) -> cond != 0 ? dy : 0
  template <class C> HG_HD C operator()(C c, C dy) const { return c != C(0) ? dy : C(0); }
};
struct MaskFalse {  // (cond, dy) -> cond == 0 ? dy : 0
  template <class C> HG_HD C operator()(C c, C dy) const { return c == C(0) ? dy : C(0); }
};

}  // namespace hg::fn
