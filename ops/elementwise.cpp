// Public elementwise ops: check -> dispatch -> record backward (docs/ARCHITECTURE.md, "One op").
#include "ops/elementwise.h"

#include <cmath>
#include <limits>
#include <string_view>

#include "autograd/node.h"
#include "autograd/saved.h"
#include "ops/autocast/autocast.h"
#include "ops/dispatch.h"
#include "ops/kernels/elementwise.h"
#include "ops/reduce.h"

namespace hg {

const char* ew_op_name(EwOp op) {
  static constexpr const char* kNames[] = {
      "neg", "exp", "log", "sqrt", "rsqrt", "abs", "relu", "sigmoid", "tanh", "gelu(tanh)", "gelu", "silu", "erf",
      "pow", "clamp", "add(scalar)", "mul(scalar)", "div(scalar)", "rsub(scalar)", "rdiv(scalar)", "round",
      "add", "sub", "mul", "div", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge",
      "where", "mask_true", "mask_false"};
  const auto i = static_cast<size_t>(op);
  return i < std::size(kNames) ? kNames[i] : "elementwise";
}

void run_elementwise(const char* op, const EwCall& call, const std::vector<Tensor>& ins, Tensor& out) {
  std::vector<Shape> shapes;
  std::vector<std::vector<int64_t>> strides;  // only when an input is a view: the kernels read views in place
  const void* ptrs[kMaxInputs] = {};
  for (size_t k = 0; k < ins.size(); ++k) {
    HG_CHECK(ins[k].dtype() == out.dtype(), op, ": input ", k, " has dtype ", ins[k].dtype(), " but the output is ",
             out.dtype());
    check_same_device(op, ins[k], out);
    shapes.push_back(ins[k].shape());
    if (!ins[k].is_contiguous()) {
      strides.resize(ins.size());  // empty entries: contiguous
      strides[k] = ins[k].strides();
    }
    ptrs[k] = ins[k].strided_data_ptr();
  }
  const BroadcastPlan plan = make_broadcast_plan(op, out.shape(), shapes, strides);
  ew_kernels().get(out.device(), out.dtype())(call, plan, ptrs, out.data_ptr());
  note_ew_call(out.device().type, call.op, out.dtype());
}

DType result_type(const Tensor& a, const Tensor& b) {
  HG_CHECK(a.defined() && b.defined(), "result_type: an operand is undefined");
  const bool a0 = a.ndim() == 0, b0 = b.ndim() == 0;
  // FP8 operands (storage only: torch has no arithmetic on them) keep promote_types's F32 or wider
  if (a0 == b0 || is_storage_only(a.dtype()) || is_storage_only(b.dtype())) return promote_types(a.dtype(), b.dtype());
  // torch's combine_categories(dims, zero-dim): a floating tensor with dims keeps its dtype; an integral or Bool one
  // takes the 0-d operand's when that is floating (or when it is Bool itself), else keeps its own
  const DType dims = a0 ? b.dtype() : a.dtype(), zero = a0 ? a.dtype() : b.dtype();
  if (is_floating(dims)) return dims;
  if (dims == DType::Bool || is_floating(zero)) return promote_types(dims, zero);
  return dims;
}

namespace {

// Which of x and y a unary op's gradient (grad(x, y, dy) in ops/functors.h) reads: backward keeps only
// that one alive and passes it in both slots. The gradchecks of every unary op catch a wrong entry.
enum class GradReads : uint8_t { X, Y, Neither };
GradReads grad_reads(EwOp op) {
  switch (op) {
    case EwOp::Exp: case EwOp::Sqrt: case EwOp::Rsqrt: case EwOp::Relu: case EwOp::Sigmoid: case EwOp::Tanh:
      return GradReads::Y;
    case EwOp::Neg: case EwOp::AddScalar: case EwOp::MulScalar: case EwOp::DivScalar: case EwOp::RsubScalar:
    case EwOp::Round:
      return GradReads::Neither;
    default:
      return GradReads::X;
  }
}

// An I64 or Bool input, as torch 1.13 takes it: exp, log, sqrt, rsqrt, sigmoid, tanh and erf compute in F32 (torch's
// int-to-float ops, its default dtype); negation, abs, relu, clamp and pow by an integral exponent stay integers
// (I64; a Bool counts as 0/1 where torch accepts it), computed in F64, exact while |values| < 2^53; a clamp bound
// or an exponent with a fraction gives F32 (an integral double cannot be told from an integer in C++, so it keeps
// I64, as scalar_op's rule). Undefined when x is neither: the caller goes on with the floating path.
Tensor integral_unary(const char* name, EwOp op, const Tensor& x, double p0, double p1);

// gelu'(x) = Phi(x) + x phi(x) (phi the normal density, Phi its integral), by the fused gradient kernel with dy = 1,
// recorded with its own derivative phi(x) (2 - x^2) in recorded ops: Phi needs erf, which is no op of its own, but
// no derivative of gelu' does.
Tensor gelu_derivative(const Tensor& x) {
  Tensor d = empty_like(x);
  const Tensor one = ones({}, {.dtype = x.dtype(), .device = x.device()});  // broadcast
  run_elementwise("gelu backward", {EwOp::GeluErf, EwMode::Grad}, {x, x, one}, d);
  autograd::record(d, "gelu_derivative", {x}, [sx = autograd::SavedTensor(x)](const Tensor& g, const GradMask&) {
    const Tensor x = sx.unpack();
    const Tensor x2 = mul(x, x);
    const Tensor phi = mul(exp(mul(x2, -0.5)), 0.3989422804014327);  // 1 / sqrt(2 pi)
    // 0 where phi is (|x| large), not 0 * -inf = NaN, as the tanh form's tail
    const Tensor curve = where(eq(phi, 0.0), zeros({}, {.dtype = x.dtype(), .device = x.device()}),
                               mul(phi, rsub(2.0, x2)));
    return std::vector<Tensor>{mul(g, curve)};
  }, autograd::Saves::only({0}), autograd::DoubleBackward::Yes);
  return d;
}

// dy times f'(x) for unary op `op` (y = f(x), attached by saved_output), in recorded ops: the backward under
// create_graph, whose gradient is differentiated again. The same formulas as ops/functors.h's grad(), which the
// fused path runs.
Tensor unary_grad_ops(const EwCall& f, const Tensor& x, const Tensor& y, const Tensor& dy) {
  const auto mask = [&](const Tensor& m) { return m.to(dy.dtype()); };  // a Bool condition as 0/1
  switch (f.op) {
    case EwOp::Neg: case EwOp::RsubScalar: return neg(dy);
    case EwOp::Exp: return mul(dy, y);
    case EwOp::Log: return div(dy, x);
    case EwOp::Sqrt: return div(dy, mul(y, 2.0));
    case EwOp::Rsqrt: return mul(mul(dy, pow(y, 3.0)), -0.5);
    case EwOp::Abs: return mul(dy, sub(mask(gt(x, 0.0)), mask(lt(x, 0.0))));
    case EwOp::Relu: return mul(dy, mask(gt(y, 0.0)));
    case EwOp::Sigmoid: return mul(dy, mul(y, rsub(1.0, y)));
    case EwOp::Tanh: return mul(dy, rsub(1.0, mul(y, y)));
    case EwOp::GeluTanh: {  // 0.5 (1 + t) + 0.5 x (1 - t^2) kA (1 + 3 kB x^2), the tail 0 where 1 - t^2 is
      const double ka = 0.7978845608028654, kb = 0.044715;
      const Tensor t = tanh(mul(add(x, mul(pow(x, 3.0), kb)), ka));
      const Tensor sech2 = rsub(1.0, mul(t, t));
      const Tensor tail = mul(mul(x, sech2), mul(add(mul(mul(x, x), 3 * kb), 1.0), 0.5 * ka));
      const Tensor kept = where(eq(sech2, 0.0), zeros(x.shape(), {.dtype = x.dtype(), .device = x.device()}), tail);
      return mul(dy, add(mul(add(t, 1.0), 0.5), kept));
    }
    case EwOp::GeluErf: return mul(dy, gelu_derivative(x));
    case EwOp::Erf: return mul(dy, mul(exp(neg(mul(x, x))), 1.1283791670955126));  // 2/sqrt(pi) exp(-x^2)
    case EwOp::Silu: {
      const Tensor s = sigmoid(x);
      return mul(dy, mul(s, add(mul(x, rsub(1.0, s)), 1.0)));
    }
    case EwOp::PowScalar:
      return f.p0 == 0.0 ? mul(dy, 0.0) : mul(dy, mul(pow(x, f.p0 - 1.0), f.p0));
    case EwOp::Clamp: return mul(dy, mask(logical_and(ge(x, f.p0), le(x, f.p1))));
    case EwOp::AddScalar: return dy;
    case EwOp::MulScalar: return mul(dy, f.p0);
    case EwOp::DivScalar: return div(dy, f.p0);
    case EwOp::RdivScalar: return mul(neg(dy), div(rdiv(f.p0, x), x));
    case EwOp::Round: return mul(dy, 0.0);
    default: HG_FAIL("internal: ", ew_op_name(f.op), " has no gradient in recorded ops");
  }
}

Tensor unary(const char* name, EwOp op, const Tensor& x, double p0 = 0, double p1 = 0) {
  if (x.defined() && is_integral(x.dtype()))
    if (Tensor y = integral_unary(name, op, x, p0, p1); y.defined()) return y;
  check_floating(name, x);
  const EwCall fwd{op, EwMode::Forward, p0, p1};
  Tensor y = empty_like(x);
  run_elementwise(name, fwd, {x}, y);
  if (autograd::should_record({&x})) {
    // y as a detached alias and x as a SavedTensor: capturing either tensor itself could make a reference cycle
    const GradReads reads = grad_reads(op);
    const autograd::SavedTensor kept_x(reads == GradReads::X ? x : Tensor());
    const Tensor kept_y = reads == GradReads::Y ? y.detach() : Tensor();
    autograd::record(y, name, {x}, [kept_x, kept_y, fwd](const Tensor& dy, const GradMask&) {
      if (autograd::create_graph_active())
        return std::vector<Tensor>{unary_grad_ops(fwd, kept_x.unpack(), autograd::saved_output(kept_y), dy)};
      const Tensor& v = kept_x.defined() ? kept_x.data() : kept_y.defined() ? kept_y : dy;  // Neither: grad()
                                                                                               // reads neither slot
      Tensor dx = empty_like(v);
      run_elementwise("backward", {fwd.op, EwMode::Grad, fwd.p0, fwd.p1}, {v, v, dy}, dx);
      return std::vector<Tensor>{dx};
    }, reads == GradReads::Y ? autograd::Saves::output_only()
       : reads == GradReads::X ? autograd::Saves::only({0}) : autograd::Saves::none(),
       autograd::DoubleBackward::Yes);
  }
  return y;
}

Tensor integral_unary(const char* name, EwOp op, const Tensor& x, double p0, double p1) {
  const bool is_bool = x.dtype() == DType::Bool;
  const auto fraction = [](double v) { return std::isfinite(v) && v != std::floor(v); };
  switch (op) {
    case EwOp::Exp: case EwOp::Log: case EwOp::Sqrt: case EwOp::Rsqrt: case EwOp::Sigmoid: case EwOp::Tanh:
    case EwOp::Erf:
      return unary(name, op, x.to(DType::F32), p0, p1);
    case EwOp::Neg:
      HG_CHECK(!is_bool, name, ": negating a Bool tensor is not supported (torch's rule); use logical_not() to invert "
               "a mask, or convert with .to(DType::I64) first");
      break;
    case EwOp::Relu: case EwOp::Abs:
      HG_CHECK(!is_bool, name, ": Bool inputs are not supported (torch's rule); convert with .to(DType::I64) or "
               ".to(DType::F32) first");
      break;
    case EwOp::PowScalar:
      if (fraction(p0) || !std::isfinite(p0)) return unary(name, op, x.to(DType::F32), p0, p1);
      HG_CHECK(p0 >= 0, name, ": integers to negative integer powers are not allowed (exponent ", p0, " on a ",
               x.dtype(), " tensor, torch's rule); convert to a floating dtype first, e.g. x.to(DType::F32)");
      break;
    case EwOp::Clamp:
      if (fraction(p0) || fraction(p1)) return unary(name, op, x.to(DType::F32), p0, p1);
      break;
    default:
      return Tensor();  // refused by check_floating, which names the dtype
  }
  return unary(name, op, x.to(DType::F64), p0, p1).to(DType::I64);
}

// Casts a and b to their result type (differentiably). A 0-d CPU tensor meets a device tensor on its device, as
// torch lets CPU scalars into CUDA ops (a learning rate or a scale kept on the host).
std::pair<Tensor, Tensor> promote(const char* name, const Tensor& a_in, const Tensor& b_in) {
  const auto meet = [](const Tensor& t, const Tensor& other) {
    return t.device() != other.device() && t.ndim() == 0 && t.device().is_cpu() ? t.to(other.device()) : t;
  };
  const Tensor a = meet(a_in, b_in), b = meet(b_in, a_in);
  check_same_device(name, a, b);
  const DType t = result_type(a, b);
  return {a.dtype() == t ? a : a.to(t), b.dtype() == t ? b : b.to(t)};
}

Tensor binary_grad(EwMode mode, EwOp op, const Tensor& a, const Tensor& b, const Tensor& dy, const Shape& target) {
  // add and sub read neither operand (their nodes save none): dy, or -dy for sub's second
  if (op == EwOp::Add || op == EwOp::Sub) {
    const Tensor g = sum_to(dy, target);
    return op == EwOp::Sub && mode == EwMode::GradB ? neg(g) : g;  // negated after the reduction: fewer elements
  }
  if (autograd::create_graph_active()) {  // recorded ops, differentiable again (ops/functors.h's formulas)
    const bool ga = mode == EwMode::GradA;
    switch (op) {
      case EwOp::Mul: return sum_to(mul(dy, ga ? b : a), target);
      case EwOp::Div: return sum_to(ga ? div(dy, b) : mul(neg(dy), div(div(a, b), b)), target);
      case EwOp::Maximum: case EwOp::Minimum: {  // dy where this operand wins, half of it on a tie (constant masks)
        const Tensor& self = ga ? a : b;
        const Tensor& other = ga ? b : a;
        const Tensor wins = op == EwOp::Maximum ? gt(self, other) : lt(self, other);
        return sum_to(mul(dy, add(wins.to(dy.dtype()), mul(eq(self, other).to(dy.dtype()), 0.5))), target);
      }
      default: HG_FAIL("backward: ", static_cast<int>(op), " has no differentiable binary gradient (a bug: the node "
                       "should not be marked DoubleBackward::Yes)");
    }
  }
  Tensor g = empty_like(dy);
  run_elementwise("backward", {op, mode}, {a, b, dy}, g);
  return sum_to(g, target);
}

Tensor binary(const char* name, EwOp op, amp::OpId aop, const Tensor& a_in, const Tensor& b_in);

// Integer arithmetic (both operands I64): add, sub, mul, maximum and minimum run in F64 and come back as I64, exact
// while |values| < 2^53; div is true division, in F32 as torch's int / int.
Tensor integer_binary(const char* name, EwOp op, amp::OpId aop, const Tensor& a, const Tensor& b) {
  if (op == EwOp::Div) return binary(name, op, aop, a.to(DType::F32), b.to(DType::F32));
  return binary(name, op, aop, a.to(DType::F64), b.to(DType::F64)).to(DType::I64);
}

Tensor binary(const char* name, EwOp op, amp::OpId aop, const Tensor& a_in, const Tensor& b_in) {
  if (amp::OpCast c{aop, {a_in, b_in}}) return c.result(binary(name, op, aop, c[0], c[1]));
  // named tensors, not structured bindings: clang before 16 cannot capture those in the lambda below
  const auto promoted = promote(name, a_in, b_in);
  const Tensor a = promoted.first, b = promoted.second;
  if (a.dtype() == DType::I64) return integer_binary(name, op, aop, a, b);
  check_floating(name, a);
  Tensor y = empty(broadcast_shapes(name, a.shape(), b.shape()), {.dtype = a.dtype(), .device = a.device()});
  run_elementwise(name, {op, EwMode::Forward}, {a, b}, y);
  if (autograd::should_record({&a, &b})) {
    // add and sub read neither operand; the others keep them as SavedTensors (no reference cycle through them)
    const bool reads = op != EwOp::Add && op != EwOp::Sub;
    autograd::record(y, name, {a, b}, [sa = autograd::SavedTensor(reads ? a : Tensor()),
                                       sb = autograd::SavedTensor(reads ? b : Tensor()), as = a.shape(),
                                       bs = b.shape(), op](const Tensor& dy, const GradMask& needs) {
      const Tensor a = sa.unpack(), b = sb.unpack();
      return std::vector<Tensor>{needs[0] ? binary_grad(EwMode::GradA, op, a, b, dy, as) : Tensor(),
                                 needs[1] ? binary_grad(EwMode::GradB, op, a, b, dy, bs) : Tensor()};
    }, reads ? autograd::Saves{} : autograd::Saves::none(), autograd::DoubleBackward::Yes);
  }
  return y;
}

// 0/1 in the inputs' promoted dtype. Integer tensors (labels, argmax's indices) compare as F64, exact for
// every |value| <= 2^53, and give F32 0/1; Bool tensors compare as F32.
Tensor compare_values(const char* name, EwOp op, const Tensor& a_in, const Tensor& b_in) {
  const bool integer = a_in.dtype() == DType::I64 || b_in.dtype() == DType::I64;
  const auto widen = [&](const Tensor& t) {
    if (integer && t.dtype() != DType::F64) return t.to(DType::F64);
    return t.dtype() == DType::Bool ? t.to(DType::F32) : t;
  };
  auto [a, b] = promote(name, widen(a_in.detach()), widen(b_in.detach()));
  check_floating(name, a);
  Tensor y = empty(broadcast_shapes(name, a.shape(), b.shape()), {.dtype = a.dtype(), .device = a.device()});
  run_elementwise(name, {op, EwMode::Forward}, {a, b}, y);
  return integer ? y.to(DType::F32) : y;
}
Tensor compare(const char* name, EwOp op, const Tensor& a, const Tensor& b) {
  return compare_values(name, op, a, b).to(DType::Bool);
}

// s as a 0-d tensor to compare a with: a's dtype (torch's wrapped-number promotion), F64 for an I64 a, F32 for
// a Bool a (mask == 0.5 compares with 0.5, not with true).
Tensor scalar_like(const Tensor& a, double s) {
  const DType dt = a.dtype() == DType::I64 ? DType::F64 : a.dtype() == DType::Bool ? DType::F32 : a.dtype();
  return full({}, s, {.dtype = dt, .device = a.device()});
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return binary("add", EwOp::Add, amp::OpId::Add, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary("sub", EwOp::Sub, amp::OpId::Sub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary("mul", EwOp::Mul, amp::OpId::Mul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary("div", EwOp::Div, amp::OpId::Div, a, b); }
Tensor maximum(const Tensor& a, const Tensor& b) { return binary("maximum", EwOp::Maximum, amp::OpId::Maximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary("minimum", EwOp::Minimum, amp::OpId::Minimum, a, b); }
namespace {
// An I64 tensor with a scalar, as torch with a Python number: an integral scalar keeps I64 (computed in F64, exact
// while |values| < 2^53; division excepted: true division, F32), a fractional one gives F32.
Tensor scalar_op(const char* name, EwOp op, const Tensor& a, double s) {
  // a Bool tensor counts as 0/1 integers (torch: mask + 1 is I64, mask * 2.5 F32); torch refuses subtracting one
  if (a.defined() && a.dtype() == DType::Bool) {
    HG_CHECK(std::string_view(name) != "sub" && std::string_view(name) != "rsub", name, ": subtraction with a Bool "
             "tensor is not supported (torch's rule); use logical_not() for 1 - mask, or convert with .to(DType::I64)");
    return scalar_op(name, op, a.to(DType::I64), s);
  }
  if (a.defined() && a.dtype() == DType::I64) {
    const bool integral = s == std::floor(s) && op != EwOp::DivScalar && op != EwOp::RdivScalar;
    if (!integral) return unary(name, op, a.to(DType::F32), s);
    return unary(name, op, a.to(DType::F64), s).to(DType::I64);
  }
  return unary(name, op, a, s);
}
}  // namespace
Tensor add(const Tensor& a, double s) { return scalar_op("add", EwOp::AddScalar, a, s); }
Tensor sub(const Tensor& a, double s) { return scalar_op("sub", EwOp::AddScalar, a, -s); }
Tensor mul(const Tensor& a, double s) { return scalar_op("mul", EwOp::MulScalar, a, s); }
Tensor div(const Tensor& a, double s) { return scalar_op("div", EwOp::DivScalar, a, s); }
Tensor rsub(double s, const Tensor& a) { return scalar_op("rsub", EwOp::RsubScalar, a, s); }
Tensor rdiv(double s, const Tensor& a) { return scalar_op("rdiv", EwOp::RdivScalar, a, s); }

// floor(a / b) and a - floor(a / b) b (Python's and torch's floor division and remainder: the remainder takes the
// divisor's sign). I64 operands give I64, computed in F64 (exact while |a| < 2^53).
Tensor floor_divide(const Tensor& a, const Tensor& b) {
  if (a.dtype() == DType::I64 && b.dtype() == DType::I64) {
    const Tensor bd = b.to(DType::F64);
    // an integer quotient by 0 has no value (torch raises ZeroDivisionError); reading the divisors is a wait on a GPU
    HG_CHECK(bd.numel() == 0 || min(abs(bd)).item() > 0, "floor_divide: integer division by zero (a divisor is 0)");
    return floor(div(a.to(DType::F64), bd)).to(DType::I64);
  }
  return floor(div(a, b));
}
Tensor floor_divide(const Tensor& a, double s) {
  if (a.dtype() == DType::I64 && s == std::floor(s)) {
    HG_CHECK(s != 0, "floor_divide: integer division by zero (the divisor is 0)");
    return floor(div(a.to(DType::F64), s)).to(DType::I64);
  }
  return floor(div(a, s));
}
Tensor remainder(const Tensor& a, const Tensor& b) { return sub(a, mul(floor_divide(a, b), b)); }
Tensor remainder(const Tensor& a, double s) { return sub(a, mul(floor_divide(a, s), s)); }

Tensor neg(const Tensor& x) { return unary("neg", EwOp::Neg, x); }
Tensor exp(const Tensor& x) {
  if (amp::OpCast c{amp::OpId::Exp, {x}}) return c.result(exp(c[0]));
  return unary("exp", EwOp::Exp, x);
}
Tensor log(const Tensor& x) {
  if (amp::OpCast c{amp::OpId::Log, {x}}) return c.result(log(c[0]));
  return unary("log", EwOp::Log, x);
}
Tensor sqrt(const Tensor& x) { return unary("sqrt", EwOp::Sqrt, x); }
Tensor rsqrt(const Tensor& x) {
  if (amp::OpCast c{amp::OpId::Rsqrt, {x}}) return c.result(rsqrt(c[0]));
  return unary("rsqrt", EwOp::Rsqrt, x);
}
Tensor pow(const Tensor& x, double e) {
  if (amp::OpCast c{amp::OpId::Pow, {x}}) return c.result(pow(c[0], e));
  return unary("pow", EwOp::PowScalar, x, e);
}
Tensor abs(const Tensor& x) { return unary("abs", EwOp::Abs, x); }
Tensor relu(const Tensor& x) {
  if (amp::OpCast c{amp::OpId::Relu, {x}}) return c.result(relu(c[0]));
  return unary("relu", EwOp::Relu, x);
}
Tensor sigmoid(const Tensor& x) {
  if (amp::OpCast c{amp::OpId::Sigmoid, {x}}) return c.result(sigmoid(c[0]));
  return unary("sigmoid", EwOp::Sigmoid, x);
}
Tensor tanh(const Tensor& x) {
  if (amp::OpCast c{amp::OpId::Tanh, {x}}) return c.result(tanh(c[0]));
  return unary("tanh", EwOp::Tanh, x);
}
Tensor erf(const Tensor& x) { return unary("erf", EwOp::Erf, x); }

Tensor silu(const Tensor& x) {
  if (amp::OpCast c{amp::OpId::Silu, {x}}) return c.result(silu(c[0]));
  return unary("silu", EwOp::Silu, x);
}

Tensor gelu(const Tensor& x, GeluApprox approx) {
  if (amp::OpCast c{amp::OpId::Gelu, {x}}) return c.result(gelu(c[0], approx));
  return approx == GeluApprox::Tanh ? unary("gelu", EwOp::GeluTanh, x) : unary("gelu", EwOp::GeluErf, x);
}
namespace {
// floor, ceil, round, trunc: Round's modes. An I64 tensor is already integral (torch returns it as it is).
Tensor to_integral(const char* name, const Tensor& x, double mode) {
  if (x.defined() && x.dtype() == DType::I64) return x.clone();
  return unary(name, EwOp::Round, x, mode);
}
}  // namespace
Tensor floor(const Tensor& x) { return to_integral("floor", x, 0); }
Tensor ceil(const Tensor& x) { return to_integral("ceil", x, 1); }
Tensor round(const Tensor& x) { return to_integral("round", x, 2); }
Tensor trunc(const Tensor& x) { return to_integral("trunc", x, 3); }

Tensor clamp(const Tensor& x, double lo, double hi) {
  HG_CHECK(!(lo > hi), "clamp: lo=", lo, " is greater than hi=", hi, "; pass lo <= hi");
  return unary("clamp", EwOp::Clamp, x, lo, hi);
}

Tensor where(const Tensor& cond, const Tensor& a_in, const Tensor& b_in) {
  if (amp::OpCast c{amp::OpId::Where, {a_in, b_in}}) return c.result(where(cond, c[0], c[1]));
  auto [a, b] = promote("where", a_in, b_in);
  // integers and Bools choose without arithmetic: I64 through F64 (exact while |values| < 2^53), Bool through F32
  if (a.dtype() == DType::I64) return where(cond, a.to(DType::F64), b.to(DType::F64)).to(DType::I64);
  if (a.dtype() == DType::Bool) return where(cond, a.to(DType::F32), b.to(DType::F32)).to(DType::Bool);
  check_floating("where", a);
  check_same_device("where", cond, a);
  const Tensor c = cond.dtype() == a.dtype() ? cond.detach() : cond.detach().to(a.dtype());
  Tensor y = empty(broadcast_shapes("where", c.shape(), broadcast_shapes("where", a.shape(), b.shape())),
                   {.dtype = a.dtype(), .device = a.device()});
  run_elementwise("where", {EwOp::Where, EwMode::Forward}, {c, a, b}, y);
  if (autograd::should_record({&a, &b})) {
    autograd::record(y, "where", {a, b}, [c, as = a.shape(), bs = b.shape()](const Tensor& dy, const GradMask& needs) {
      auto masked = [&](EwOp op, const Shape& target) {
        if (autograd::create_graph_active()) {  // recorded: a where of dy and zeros, differentiable again
          const Tensor z = zeros(dy.shape(), {.dtype = dy.dtype(), .device = dy.device()});
          return sum_to(op == EwOp::MaskTrue ? where(c, dy, z) : where(c, z, dy), target);
        }
        Tensor g = empty_like(dy);
        run_elementwise("where backward", {op, EwMode::Forward}, {c, dy}, g);
        return sum_to(g, target);
      };
      return std::vector<Tensor>{needs[0] ? masked(EwOp::MaskTrue, as) : Tensor(),
                                 needs[1] ? masked(EwOp::MaskFalse, bs) : Tensor()};
    }, autograd::Saves::none(), autograd::DoubleBackward::Yes);  // reads only the condition, a constant
  }
  return y;
}

Tensor eq(const Tensor& a, const Tensor& b) { return compare("eq", EwOp::Eq, a, b); }
namespace detail {
Tensor eq_values(const Tensor& a, const Tensor& b) { return compare_values("eq", EwOp::Eq, a, b); }
Tensor ne_values(const Tensor& a, const Tensor& b) { return compare_values("ne", EwOp::Ne, a, b); }
}  // namespace detail

namespace {
// a Bool tensor's values as F32 0/1; another dtype's as value != 0
Tensor truth(const char* op, const Tensor& x) {
  HG_CHECK(x.defined(), op, ": the tensor is undefined");
  return (x.dtype() == DType::Bool ? x : ne(x, 0.0)).to(DType::F32);
}
}  // namespace
Tensor logical_not(const Tensor& x) { return eq(truth("logical_not", x), 0.0); }
Tensor logical_and(const Tensor& a, const Tensor& b) { return ne(mul(truth("logical_and", a), truth("logical_and", b)), 0.0); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return ne(add(truth("logical_or", a), truth("logical_or", b)), 0.0); }
Tensor logical_xor(const Tensor& a, const Tensor& b) { return ne(truth("logical_xor", a), truth("logical_xor", b)); }

Tensor any(const Tensor& x) { return gt(sum(truth("any", x).to(DType::F64)), 0.0); }
Tensor isnan(const Tensor& x) { return ne(x, x); }
Tensor isinf(const Tensor& x) {
  return x.dtype() == DType::I64 ? zeros(x.shape(), {.dtype = DType::Bool, .device = x.device()})
                                 : eq(abs(x), std::numeric_limits<double>::infinity());
}
// x - x is 0 for a finite x and NaN for inf and NaN
Tensor isfinite(const Tensor& x) {
  return x.dtype() == DType::I64 ? ones(x.shape(), {.dtype = DType::Bool, .device = x.device()}) : eq(sub(x.detach(), x.detach()), 0.0);
}
Tensor all(const Tensor& x) { return eq(sum(truth("all", x).to(DType::F64)), static_cast<double>(x.numel())); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare("ne", EwOp::Ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare("lt", EwOp::Lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare("le", EwOp::Le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare("gt", EwOp::Gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare("ge", EwOp::Ge, a, b); }
Tensor eq(const Tensor& a, double s) { return compare("eq", EwOp::Eq, a, scalar_like(a, s)); }
Tensor ne(const Tensor& a, double s) { return compare("ne", EwOp::Ne, a, scalar_like(a, s)); }
Tensor lt(const Tensor& a, double s) { return compare("lt", EwOp::Lt, a, scalar_like(a, s)); }
Tensor le(const Tensor& a, double s) { return compare("le", EwOp::Le, a, scalar_like(a, s)); }
Tensor gt(const Tensor& a, double s) { return compare("gt", EwOp::Gt, a, scalar_like(a, s)); }
Tensor ge(const Tensor& a, double s) { return compare("ge", EwOp::Ge, a, scalar_like(a, s)); }

Tensor grad_accumulate(const Tensor& acc, const Tensor& g) {
  HG_CHECK(acc.shape() == g.shape(), "backward: accumulating a gradient of shape ", g.shape(), " into ", acc.shape());
  // under create_graph the sum is recorded: the accumulated gradient is differentiated again
  if (autograd::create_graph_active()) return add(acc, g.dtype() == acc.dtype() ? g : g.to(acc.dtype()));
  Tensor out = empty_like(acc);
  run_elementwise("grad accumulate", {EwOp::Add, EwMode::Forward}, {acc, g.dtype() == acc.dtype() ? g : g.to(acc.dtype())},
                  out);
  return out;
}

}  // namespace hg
