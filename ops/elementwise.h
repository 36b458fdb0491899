#pragma once
// Elementwise ops with broadcasting. Binary ops on different dtypes compute in result_type(a, b), as PyTorch's.
// Comparisons return Bool and are not differentiable.
#include "core/tensor.h"

namespace hg {

// torch.result_type of two tensors: promote_types (core/dtype.h) of their dtypes, except that a 0-d tensor does not
// widen a tensor with dims of its own category: F16[n] * F32[] is F16 (the 0-d operand rounded to F16 first), while
// I64[n] * F16[] is F16 and F16[] * F32[] is F32. The type of add, sub, mul, div, maximum, minimum, where and the
// comparisons of floating tensors.
DType result_type(const Tensor& a, const Tensor& b);

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double s);
Tensor sub(const Tensor& a, double s);
Tensor mul(const Tensor& a, double s);
Tensor div(const Tensor& a, double s);
Tensor rsub(double s, const Tensor& a);  // s - a
// Python's // and % (torch.floor_divide, torch.remainder): floor(a / b), and a - floor(a / b) b with the divisor's
// sign. Two I64 operands (or I64 and an integral scalar) give I64, exact while |values| < 2^53; add, sub, mul,
// maximum and minimum of I64 tensors likewise; I64 / I64 is true division (F32), as torch's.
Tensor floor_divide(const Tensor& a, const Tensor& b);
Tensor floor_divide(const Tensor& a, double s);
Tensor remainder(const Tensor& a, const Tensor& b);
Tensor remainder(const Tensor& a, double s);
Tensor rdiv(double s, const Tensor& a);  // s / a

Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor pow(const Tensor& x, double exponent);
Tensor abs(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
enum class GeluApprox : uint8_t { None, Tanh };  // None: exact erf form (torch's default)
Tensor gelu(const Tensor& x, GeluApprox approx = GeluApprox::None);
Tensor silu(const Tensor& x);  // x * sigmoid(x) (torch.nn.functional.silu, "swish")
Tensor erf(const Tensor& x);   // the error function (torch.erf); I64 and Bool inputs compute in F32, as torch's
Tensor clamp(const Tensor& x, double lo, double hi);
// To integral values in x's dtype: floor, ceil, round (half to even, as torch.round) and trunc; zero gradient.
Tensor floor(const Tensor& x);
Tensor ceil(const Tensor& x);
Tensor round(const Tensor& x);
Tensor trunc(const Tensor& x);
// cond != 0 selects a, else b; cond, a and b broadcast together. Differentiable in a and b.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

// Comparisons: Bool tensors (torch's), never differentiable. The values compare in the inputs' promoted dtype:
// I64 exactly (as F64, every |value| <= 2^53), Bool as 0/1; a scalar in a's dtype (F64 for I64 a, F32 for Bool
// a). (argmax(logits, 1) == y).mean() is the accuracy (a Bool tensor's mean is F32).
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double s);
Tensor ne(const Tensor& a, double s);
Tensor lt(const Tensor& a, double s);
Tensor le(const Tensor& a, double s);
Tensor gt(const Tensor& a, double s);
Tensor ge(const Tensor& a, double s);

namespace detail {
// eq and ne as 0/1 in the inputs' promoted floating dtype (F32 for integer operands), not Bool: for the masks
// inside ops and backward formulas, which multiply them without a cast.
Tensor eq_values(const Tensor& a, const Tensor& b);
Tensor ne_values(const Tensor& a, const Tensor& b);
}  // namespace detail

// torch's logical ops: any dtype read as value != 0 (Bool as itself), a Bool result; and any()/all() of every
// element as a 0-d Bool (any of none is false, all of none true).
Tensor logical_not(const Tensor& x);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_xor(const Tensor& a, const Tensor& b);
Tensor any(const Tensor& x);
Tensor all(const Tensor& x);
// torch.isnan, isinf, isfinite: Bool, elementwise (an I64 tensor is finite everywhere)
Tensor isnan(const Tensor& x);
Tensor isinf(const Tensor& x);
Tensor isfinite(const Tensor& x);
inline Tensor operator!(const Tensor& x) { return logical_not(x); }
inline Tensor operator~(const Tensor& x) { return logical_not(x); }  // torch's ~ on a Bool tensor
inline Tensor operator&&(const Tensor& a, const Tensor& b) { return logical_and(a, b); }
inline Tensor operator&(const Tensor& a, const Tensor& b) { return logical_and(a, b); }
inline Tensor operator||(const Tensor& a, const Tensor& b) { return logical_or(a, b); }
inline Tensor operator|(const Tensor& a, const Tensor& b) { return logical_or(a, b); }
inline Tensor operator^(const Tensor& a, const Tensor& b) { return logical_xor(a, b); }

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& x) { return neg(x); }
inline Tensor operator+(const Tensor& a, double s) { return add(a, s); }
inline Tensor operator+(double s, const Tensor& a) { return add(a, s); }
inline Tensor operator-(const Tensor& a, double s) { return sub(a, s); }
inline Tensor operator-(double s, const Tensor& a) { return rsub(s, a); }
inline Tensor operator*(const Tensor& a, double s) { return mul(a, s); }
inline Tensor operator*(double s, const Tensor& a) { return mul(a, s); }
inline Tensor operator/(const Tensor& a, double s) { return div(a, s); }
inline Tensor operator/(double s, const Tensor& a) { return rdiv(s, a); }
inline Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
inline Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
inline Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
inline Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
inline Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
inline Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
inline Tensor operator==(const Tensor& a, double s) { return eq(a, s); }
inline Tensor operator!=(const Tensor& a, double s) { return ne(a, s); }
inline Tensor operator<(const Tensor& a, double s) { return lt(a, s); }
inline Tensor operator<=(const Tensor& a, double s) { return le(a, s); }
inline Tensor operator>(const Tensor& a, double s) { return gt(a, s); }
inline Tensor operator>=(const Tensor& a, double s) { return ge(a, s); }
inline Tensor operator==(double s, const Tensor& a) { return eq(a, s); }
inline Tensor operator!=(double s, const Tensor& a) { return ne(a, s); }
inline Tensor operator<(double s, const Tensor& a) { return gt(a, s); }
inline Tensor operator<=(double s, const Tensor& a) { return ge(a, s); }
inline Tensor operator>(double s, const Tensor& a) { return lt(a, s); }
inline Tensor operator>=(double s, const Tensor& a) { return le(a, s); }

}  // namespace hg
