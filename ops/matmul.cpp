// matmul: check -> dispatch -> record backward (DESIGN.md §4). Every product, forward and backward,
// is one (possibly batched) row-major GEMM whose transpose flags and leading dimensions describe
// the stored layout, so nothing is ever transposed by copying (DESIGN.md §2.7).
#include "ops/matmul.h"

#include "autograd/node.h"
#include "ops/dispatch.h"
#include "ops/reduce.h"

namespace hg {
namespace {

Trans flip(Trans t) { return t == Trans::N ? Trans::T : Trans::N; }

// C[i] (m,n) = op(A[i]) (m,k) * op(B[i]) (k,n) for i < batch; a shared operand is the same matrix
// for every i (a 2-D operand, or a batch of 1, against a larger batch).
struct Problem {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  bool shared_a = false, shared_b = false;
  Shape out;
};

// (batch, m, n) = op(x) * op(y), where x and y are contiguous and stored as op() says; a shared
// operand gets batch stride 0.
Tensor gemm_op(const Tensor& x, Trans tx, bool x_shared, const Tensor& y, Trans ty, bool y_shared, int64_t batch,
               int64_t m, int64_t n, int64_t k) {
  const TensorOptions opts{.dtype = x.dtype(), .device = x.device()};
  if (k == 0) return zeros({batch, m, n}, opts);
  Tensor c = empty({batch, m, n}, opts);
  if (c.numel() == 0) return c;
  const GemmArgs g{.dtype = x.dtype(), .trans_a = tx, .trans_b = ty, .m = m, .n = n, .k = k,
                   .a = x.data_ptr(), .lda = tx == Trans::N ? k : m,
                   .b = y.data_ptr(), .ldb = ty == Trans::N ? n : k,
                   .c = c.data_ptr(), .ldc = n, .batch = batch,
                   .stride_a = x_shared ? 0 : m * k, .stride_b = y_shared ? 0 : k * n, .stride_c = m * n};
  gemm_kernels().get(x.device(), x.dtype())(g);
  return c;
}

void check_rank(const char* name, const Tensor& t) {
  HG_CHECK(t.ndim() == 2 || t.ndim() == 3, "matmul: ", name, " is ", t.ndim(), "-d (shape ", t.shape(),
           "); matmul takes 2-D (M,K) or batched 3-D (B,M,K) operands; reshape it first");
}

// The batch size of a and b broadcast together (a 2-D operand has none).
int64_t broadcast_batch(const Tensor& a, const Tensor& b) {
  if (a.ndim() == 2) return b.ndim() == 3 ? b.shape()[0] : 1;
  if (b.ndim() == 2) return a.shape()[0];
  const int64_t ba = a.shape()[0], bb = b.shape()[0];
  HG_CHECK(ba == bb || ba == 1 || bb == 1, "matmul: batch sizes a.shape[0]=", ba, " and b.shape[0]=", bb,
           " do not broadcast (shapes ", a.shape(), " and ", b.shape(), "); make them equal or 1");
  return ba == 1 ? bb : ba;
}

Problem resolve(const Tensor& a, const Tensor& b, MatmulOptions o) {
  check_rank("a", a);
  check_rank("b", b);
  const bool ta = o.trans_a == Trans::T, tb = o.trans_b == Trans::T;
  const int64_t ka = a.size(ta ? -2 : -1), kb = b.size(tb ? -1 : -2);
  HG_CHECK(ka == kb, "matmul: a.shape[", ta ? -2 : -1, "]=", ka, " but b.shape[", tb ? -1 : -2, "]=", kb,
           " (shapes ", a.shape(), " and ", b.shape(), " with trans_a=", ta ? "T" : "N", ", trans_b=",
           tb ? "T" : "N", "); the contracted dims must match");
  Problem p;
  p.batch = broadcast_batch(a, b);
  p.m = a.size(ta ? -1 : -2);
  p.n = b.size(tb ? -2 : -1);
  p.k = ka;
  p.out = a.ndim() == 2 && b.ndim() == 2 ? Shape{p.m, p.n} : Shape{p.batch, p.m, p.n};
  p.shared_a = p.batch != 1 && (a.ndim() == 2 || a.shape()[0] == 1);
  p.shared_b = p.batch != 1 && (b.ndim() == 2 || b.shape()[0] == 1);
  if (p.shared_b && !p.shared_a && !ta) {
    // A's batches are contiguous row blocks and C's too: one GEMM of (batch*m) rows, and B's
    // gradient sums over the batch inside that GEMM's k loop instead of in a separate reduction.
    p.m *= p.batch;
    p.batch = 1;
    p.shared_b = false;
  }
  return p;
}

// A shared operand's gradient is the sum of its per-batch gradients.
Tensor finish_grad(const Tensor& g, bool shared, const Shape& shape) {
  return (shared ? sum(g, {0}) : g).reshape(shape);
}

// dA = dY op(B)^T (or its transpose when A is stored transposed); dB = op(A)^T dY (likewise).
Tensor grad_a(const Problem& p, const Tensor& b, const Tensor& dy, MatmulOptions o, const Shape& a_shape) {
  const Tensor g = o.trans_a == Trans::N
                       ? gemm_op(dy, Trans::N, false, b, flip(o.trans_b), p.shared_b, p.batch, p.m, p.k, p.n)
                       : gemm_op(b, o.trans_b, p.shared_b, dy, Trans::T, false, p.batch, p.k, p.m, p.n);
  return finish_grad(g, p.shared_a, a_shape);
}
Tensor grad_b(const Problem& p, const Tensor& a, const Tensor& dy, MatmulOptions o, const Shape& b_shape) {
  const Tensor g = o.trans_b == Trans::N
                       ? gemm_op(a, flip(o.trans_a), p.shared_a, dy, Trans::N, false, p.batch, p.k, p.n, p.m)
                       : gemm_op(dy, Trans::T, false, a, o.trans_a, p.shared_a, p.batch, p.n, p.k, p.m);
  return finish_grad(g, p.shared_b, b_shape);
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in, MatmulOptions o) {
  check_same_device("matmul", a_in, b_in);
  check_floating("matmul", a_in);
  check_floating("matmul", b_in);
  const DType dt = promote_types(a_in.dtype(), b_in.dtype());  // like elementwise ops, differentiably
  const Tensor a = a_in.dtype() == dt ? a_in : a_in.to(dt);
  const Tensor b = b_in.dtype() == dt ? b_in : b_in.to(dt);
  const Problem p = resolve(a, b, o);
  Tensor y = alias_with_shape(gemm_op(a, o.trans_a, p.shared_a, b, o.trans_b, p.shared_b, p.batch, p.m, p.n, p.k),
                              p.out);
  autograd::record(y, "matmul", {a, b}, [a, b, p, o](const Tensor& dy, const GradMask& needs) {
    return std::vector<Tensor>{needs[0] ? grad_a(p, b, dy, o, a.shape()) : Tensor(),
                               needs[1] ? grad_b(p, a, dy, o, b.shape()) : Tensor()};
  });
  return y;
}

}  // namespace hg
