// matmul: check -> dispatch -> record backward (docs/ARCHITECTURE.md, "One op"). Every product, forward and backward,
// is one (possibly batched) row-major GEMM whose transpose flags and leading dimensions describe
// the stored layout, so nothing is ever transposed by copying (docs/ARCHITECTURE.md, Principles 7).
#include "ops/matmul.h"

#include <atomic>
#include <cstdlib>
#include <string_view>
#include <utility>

#include "autograd/node.h"
#include "autograd/saved.h"
#include "core/dispatch_table.h"
#include "ops/autocast/autocast.h"
#include "ops/broadcast.h"
#include "ops/dispatch.h"
#include "ops/elementwise.h"
#include "ops/gemm_op.h"
#include "ops/kernels/elementwise.h"
#include "ops/kernels/gemm.h"
#include "ops/reduce.h"
#include "ops/shape.h"

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

// A view whose last two dims, swapped, are contiguous (b.t(), b.transpose(-1, -2)) is read by the GEMM in place
// with the other transpose flag: the swap is a view op (its gradient flows back), never a copy. Any other
// non-contiguous operand is made contiguous once.
Tensor gemm_operand(const Tensor& t, Trans& tr) {
  if (t.is_contiguous() || t.ndim() < 2) return t.contiguous();
  const Tensor swapped = transpose(t, -1, -2);
  if (!swapped.is_contiguous()) return t.contiguous();
  tr = flip(tr);
  return swapped;
}

// A shared operand's gradient is the sum of its per-batch gradients.
Tensor finish_grad(const Tensor& g, bool shared, const Shape& shape) {
  return (shared ? sum(g, {0}) : g).reshape(shape);
}

// dA = dY op(B)^T (or its transpose when A is stored transposed); dB = op(A)^T dY (likewise).
Tensor grad_a(const Problem& p, const Tensor& b, const Tensor& dy, MatmulOptions o, const Shape& a_shape) {
  const Tensor g = o.trans_a == Trans::N
                       ? gemm_op({.x = dy, .y = b, .ty = flip(o.trans_b), .y_shared = p.shared_b, .batch = p.batch,
                                  .m = p.m, .n = p.k, .k = p.n})
                       : gemm_op({.x = b, .tx = o.trans_b, .x_shared = p.shared_b, .y = dy, .ty = Trans::T,
                                  .batch = p.batch, .m = p.k, .n = p.m, .k = p.n});
  return finish_grad(g, p.shared_a, a_shape);
}
Tensor grad_b(const Problem& p, const Tensor& a, const Tensor& dy, MatmulOptions o, const Shape& b_shape) {
  const Tensor g = o.trans_b == Trans::N
                       ? gemm_op({.x = a, .tx = flip(o.trans_a), .x_shared = p.shared_a, .y = dy, .batch = p.batch,
                                  .m = p.k, .n = p.n, .k = p.m})
                       : gemm_op({.x = dy, .tx = Trans::T, .y = a, .ty = o.trans_a, .y_shared = p.shared_a,
                                  .batch = p.batch, .m = p.n, .n = p.k, .k = p.m});
  return finish_grad(g, p.shared_b, b_shape);
}

void check_linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  check_same_device("linear", x, w);
  check_floating("linear", x);
  check_floating("linear", w);
  HG_CHECK(w.ndim() == 2, "linear: w must be 2-D (out_features, in_features) but has shape ", w.shape());
  HG_CHECK(x.ndim() >= 1 && x.size(-1) == w.size(1), "linear: x.shape[-1]=", x.ndim() ? x.size(-1) : 0,
           " but w.shape[1]=", w.size(1), " (x ", x.shape(), ", w ", w.shape(), "); in_features must match");
  if (!b.defined()) return;
  check_same_device("linear", x, b);
  HG_CHECK(b.ndim() == 1 && b.size(0) == w.size(0), "linear: b has shape ", b.shape(), " but w has ", w.size(0),
           " output features; b must be (", w.size(0), ")");
}

std::atomic<bool>& epilogues_flag() {
  static std::atomic<bool> on{[] {
    const char* e = std::getenv("HG_LINEAR_EPILOGUES");
    return e == nullptr || std::string_view(e) != "0";
  }()};
  return on;
}

// Whether linear may try a GEMM epilogue on dev for dtype dt: switched on and the backend has one (the CPU has none).
bool epilogue_available(const Device& dev, DType dt) {
  return linear_epilogues() && gemm_epilogue_kernels().has(dev, dt);
}

// The GEMM with an epilogue, when the backend has one for this call: true when it ran.
bool try_epilogue(const Device& dev, const GemmArgs& g) {
  return epilogue_available(dev, g.dtype) && gemm_epilogue_kernels().get(dev, g.dtype)(g);
}

// y (m,o) = act(x (m,i) w^T + b): one GEMM with the bias and activation in its epilogue, or C preloaded with
// the bias broadcast over rows (the GEMM adds onto it, beta = 1) and the activation as one pass over y.
Tensor linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, int64_t m, Activation act) {
  const int64_t o = w.size(0), i = w.size(1);
  Tensor y = empty({m, o}, {.dtype = x.dtype(), .device = x.device()});
  if (y.numel() == 0) return y;
  const GemmArgs g{.dtype = x.dtype(), .trans_a = Trans::N, .trans_b = Trans::T, .m = m, .n = o, .k = i,
                   .beta = b.defined() ? 1.f : 0.f, .a = x.data_ptr(), .lda = i, .b = w.data_ptr(), .ldb = i,
                   .c = y.data_ptr(), .ldc = o};
  if (b.defined() && i > 0) {
    GemmArgs fused = g;
    fused.beta = 0.f;
    fused.epilogue = act == Activation::Relu ? GemmEpilogue::BiasRelu : GemmEpilogue::Bias;
    fused.bias = b.data_ptr();
    if (try_epilogue(x.device(), fused)) return y;
  }
  if (b.defined()) {
    StridedCopy c{.ndim = 2, .sizes = {m, o}, .src_strides = {0, 1}, .dst_strides = {o, 1},
                  .src = b.data_ptr(), .dst = y.data_ptr(), .elem_size = static_cast<int>(dtype_size(b.dtype()))};
    copy_kernels().get(x.device(), DType::F32)(c);
  }
  if (i == 0 && !b.defined()) y = zeros({m, o}, {.dtype = x.dtype(), .device = x.device()});
  if (i > 0) gemm_kernels().get(x.device(), x.dtype())(g);
  if (act == Activation::Relu) run_elementwise("linear", {EwOp::Relu, EwMode::Forward}, {y}, y);  // in place
  return y;
}

// dw (o,i) = dz^T x, and db = dz summed over rows: from the same GEMM's epilogue where the backend has one.
std::pair<Tensor, Tensor> weight_and_bias_grads(const Tensor& dz, const Tensor& x, int64_t m, int64_t o, int64_t i,
                                                bool want_dw, bool want_db) {
  Tensor dw, db;
  // only where the backend has an epilogue: the buffers below would otherwise live beside the fallback's own
  // (a 784x256 F32 layer's dW twice at once raised the MLP's training peak from 3.56 to 4.29 MB)
  if (want_dw && want_db && m > 0 && o > 0 && i > 0 && epilogue_available(dz.device(), dz.dtype())) {
    dw = empty({o, i}, {.dtype = dz.dtype(), .device = dz.device()});
    db = empty({o}, {.dtype = dz.dtype(), .device = dz.device()});
    const GemmArgs g{.dtype = dz.dtype(), .trans_a = Trans::T, .trans_b = Trans::N, .m = o, .n = i, .k = m,
                     .a = dz.data_ptr(), .lda = o, .b = x.data_ptr(), .ldb = i, .c = dw.data_ptr(), .ldc = i,
                     .epilogue = GemmEpilogue::BiasGradA, .bias_grad = db.data_ptr()};
    if (try_epilogue(dz.device(), g)) return {dw, db};
    dw = Tensor(), db = Tensor();  // the kernel said no: free them before the fallback allocates its own
  }
  if (want_dw) dw = alias_with_shape(gemm_op({.x = dz, .tx = Trans::T, .y = x, .m = o, .n = i, .k = m}), Shape{o, i});
  if (want_db) db = sum(dz, {0});
  return {dw, db};
}

}  // namespace

// (batch, m, n) = op(x) * op(y) (ops/gemm_op.h): x and y contiguous and stored as op() says; a shared
// operand gets batch stride 0.
Tensor gemm_op(const GemmOp& o) {
  const int64_t m = o.m, n = o.n, k = o.k;
  const TensorOptions opts{.dtype = o.c_f32 ? DType::F32 : o.x.dtype(), .device = o.x.device()};
  if (k == 0) return zeros({o.batch, m, n}, opts);
  Tensor c = empty({o.batch, m, n}, opts);
  if (c.numel() == 0) return c;
  const GemmArgs g{.dtype = o.x.dtype(), .trans_a = o.tx, .trans_b = o.ty, .m = m, .n = n, .k = k,
                   .a = o.x.data_ptr(), .lda = o.tx == Trans::N ? k : m,
                   .b = o.y.data_ptr(), .ldb = o.ty == Trans::N ? n : k,
                   .c = c.data_ptr(), .ldc = n, .batch = o.batch,
                   .stride_a = o.x_shared ? 0 : m * k, .stride_b = o.y_shared ? 0 : k * n, .stride_c = m * n,
                   .c_f32 = o.c_f32};
  gemm_kernels().get(o.x.device(), o.x.dtype())(g);
  return c;
}

void set_linear_epilogues(bool enabled) { epilogues_flag().store(enabled); }
bool linear_epilogues() { return epilogues_flag().load(); }
bool linear_fuses_activation(const Device& d) { return epilogue_available(d, DType::F32); }

Tensor linear(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, Activation act) {
  if (amp::OpCast c{amp::OpId::Linear, {x_in, w_in, b_in}}) return c.result(linear(c[0], c[1], c[2], act));
  check_linear(x_in, w_in, b_in);
  DType dt = promote_types(x_in.dtype(), w_in.dtype());
  if (b_in.defined()) dt = promote_types(dt, b_in.dtype());
  // the kernels read dense rows (a view is copied once, here)
  const Tensor x = (x_in.dtype() == dt ? x_in : x_in.to(dt)).contiguous();
  const Tensor w = (w_in.dtype() == dt ? w_in : w_in.to(dt)).contiguous();
  Tensor b = b_in;
  if (b.defined()) b = (b.dtype() == dt ? b : b.to(dt)).contiguous();
  const int64_t i = w.size(1);
  int64_t m = 1;
  for (int64_t d = 0; d + 1 < x.ndim(); ++d) m *= x.shape()[d];
  Shape out = x.shape();
  out[out.ndim() - 1] = w.size(0);
  const Tensor x2 = alias_with_shape(x, {m, i});
  Tensor y = alias_with_shape(linear_forward(x2, w, b, m, act), out);
  std::vector<Tensor> ins{x, w};
  if (b.defined()) ins.push_back(b);
  // Keep only what the gradients read: dx reads w, dw reads x. A first layer (x is data) thus frees its
  // input, and under autocast the low-precision copy of its weight, as soon as the forward is done. ReLU's
  // gradient reads y (a detached alias: y itself would make a reference cycle).
  const autograd::SavedTensor w_kept(x.requires_grad() ? w : Tensor()), x_kept(w.requires_grad() ? x : Tensor());
  const Tensor y_kept = act == Activation::Relu ? y.detach() : Tensor();
  autograd::Saves saves{0, y_kept.defined()};  // what the backward reads: the bias never
  if (x_kept.defined()) saves.inputs |= 1;
  if (w_kept.defined()) saves.inputs |= 2;
  autograd::record(y, act == Activation::Relu ? "linear_relu" : "linear", ins,
                   [x_kept, w_kept, y_kept, m, o = w.size(0), i, xs = x.shape()](const Tensor& dy_in,
                                                                                  const GradMask& needs) {
    std::vector<Tensor> g(needs.size());
    if (autograd::create_graph_active()) {  // recorded ops: the gradients are differentiated again
      Tensor dz = reshape(dy_in, {m, o});
      if (y_kept.defined()) dz = mul(dz, gt(reshape(autograd::saved_output(y_kept), {m, o}), 0.0).to(dz.dtype()));
      if (needs[0]) g[0] = reshape(matmul(dz, w_kept.unpack()), xs);
      if (needs[1]) g[1] = matmul(dz, reshape(x_kept.unpack(), {m, i}), {.trans_a = Trans::T});
      if (needs.size() > 2 && needs[2]) g[2] = sum(dz, {0});
      return g;
    }
    Tensor dz = alias_with_shape(dy_in, {m, o});
    if (y_kept.defined()) {
      const Tensor y2 = alias_with_shape(y_kept, {m, o});
      Tensor g = empty_like(dz);
      run_elementwise("linear_relu backward", {EwOp::Relu, EwMode::Grad}, {y2, y2, dz}, g);
      dz = g;
    }
    if (needs[0]) g[0] = alias_with_shape(gemm_op({.x = dz, .y = w_kept.data(), .m = m, .n = i, .k = o}), xs);
    auto [dw, db] = weight_and_bias_grads(dz, x_kept.defined() ? alias_with_shape(x_kept.data(), {m, i}) : Tensor(), m, o, i,
                                          needs[1], needs.size() > 2 && needs[2]);
    g[1] = dw;
    if (needs.size() > 2) g[2] = db;
    return g;
  }, saves, autograd::DoubleBackward::Yes);
  return y;
}

namespace {
// matmul's gradients in recorded ops (backward under create_graph): with A = op(a), B = op(b) as views,
// dA = dy B^T and dB = A^T dy, summed over the batch for an operand shared by it, transposed back for a T flag.
std::vector<Tensor> matmul_grads_ops(const Tensor& a, const Tensor& b, MatmulOptions o, const Problem& p,
                                     const Tensor& dy, const GradMask& needs) {
  const auto op = [](const Tensor& t, Trans tr) { return tr == Trans::T ? transpose(t, -1, -2) : t; };
  const Tensor& d = dy;  // p.out: (M,N), or (batch,M,N) when either operand is 3-D
  const auto finish = [&](Tensor g, bool shared, Trans tr, const Shape& shape) {
    if (shared && g.ndim() == 3) g = sum(g, {0});
    return reshape(op(g, tr), shape);
  };
  std::vector<Tensor> g(2);
  if (needs[0]) g[0] = finish(matmul(d, transpose(op(b, o.trans_b), -1, -2)), p.shared_a, o.trans_a, a.shape());
  if (needs[1]) g[1] = finish(matmul(transpose(op(a, o.trans_a), -1, -2), d), p.shared_b, o.trans_b, b.shape());
  return g;
}

// torch.matmul's other shapes, reduced to the 2-D and 3-D GEMMs: a 1-D operand becomes a matrix of one row (a) or
// one column (b), removed from the result; batch dims (any number) broadcast, are expanded (views) and flattened
// into one (a copy when the expanded operand is not contiguous). Differentiable through those view ops.
Tensor matmul_nd(const Tensor& a_in, const Tensor& b_in, MatmulOptions o) {
  HG_CHECK(a_in.ndim() >= 1 && b_in.ndim() >= 1, "matmul: both operands need at least 1 dim, got shapes ", a_in.shape(),
           " and ", b_in.shape());
  HG_CHECK(o.trans_a == Trans::N && o.trans_b == Trans::N, "matmul: the transpose flags take 2-D or 3-D operands (got ",
           "shapes ", a_in.shape(), " and ", b_in.shape(), "); use .transpose(-1, -2), a view, for the others");
  const Tensor a = a_in.ndim() == 1 ? unsqueeze(a_in, 0) : a_in;
  const Tensor b = b_in.ndim() == 1 ? unsqueeze(b_in, -1) : b_in;
  const auto batch_of = [](const Tensor& t) { return Shape(std::vector<int64_t>(t.shape().dims().begin(), t.shape().dims().end() - 2)); };
  const Shape batch = broadcast_shapes("matmul", batch_of(a), batch_of(b));
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  HG_CHECK(b.size(-2) == k, "matmul: a.shape[-1]=", k, " but b.shape[-2]=", b.size(-2), " (shapes ", a_in.shape(), " and ",
           b_in.shape(), "); the contracted dims must match");
  const auto flat = [&](const Tensor& t, int64_t r, int64_t c) {
    if (t.ndim() == 2) return t;  // one matrix for every batch: matmul shares it
    std::vector<int64_t> full = batch.dims();
    full.insert(full.end(), {r, c});
    return reshape(expand(t, Shape(full)), {-1, r, c});
  };
  Tensor y = matmul(flat(a, m, k), flat(b, k, n));
  std::vector<int64_t> out = batch.dims();
  if (a_in.ndim() > 1) out.push_back(m);
  if (b_in.ndim() > 1) out.push_back(n);
  return reshape(y, Shape(out));
}
}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in, MatmulOptions o) {
  if (amp::OpCast c{amp::OpId::Matmul, {a_in, b_in}}) return c.result(matmul(c[0], c[1], o));
  const auto rank_ok = [](const Tensor& t) { return t.ndim() == 2 || t.ndim() == 3; };
  if (!rank_ok(a_in) || !rank_ok(b_in)) return matmul_nd(a_in, b_in, o);
  check_same_device("matmul", a_in, b_in);
  check_floating("matmul", a_in);
  check_floating("matmul", b_in);
  const DType dt = promote_types(a_in.dtype(), b_in.dtype());  // like elementwise ops, differentiably
  const Tensor a = gemm_operand(a_in.dtype() == dt ? a_in : a_in.to(dt), o.trans_a);
  const Tensor b = gemm_operand(b_in.dtype() == dt ? b_in : b_in.to(dt), o.trans_b);
  const Problem p = resolve(a, b, o);
  Tensor y = alias_with_shape(gemm_op({.x = a, .tx = o.trans_a, .x_shared = p.shared_a, .y = b, .ty = o.trans_b,
                                       .y_shared = p.shared_b, .batch = p.batch, .m = p.m, .n = p.n, .k = p.k}),
                              p.out);
  autograd::record(y, "matmul", {a, b}, [sa = autograd::SavedTensor(a), sb = autograd::SavedTensor(b), p,
                                         o](const Tensor& dy, const GradMask& needs) {
    if (autograd::create_graph_active()) return matmul_grads_ops(sa.unpack(), sb.unpack(), o, p, dy, needs);
    const Tensor &a = sa.data(), &b = sb.data();
    return std::vector<Tensor>{needs[0] ? grad_a(p, b, dy, o, a.shape()) : Tensor(),
                               needs[1] ? grad_b(p, a, dy, o, b.shape()) : Tensor()};
  }, autograd::Saves{}, autograd::DoubleBackward::Yes);
  return y;
}

Tensor mm(const Tensor& a, const Tensor& b) {
  HG_CHECK(a.ndim() == 2 && b.ndim() == 2, "mm: takes two 2-D tensors, got shapes ", a.shape(), " and ", b.shape(),
           "; use matmul or bmm for batches");
  return matmul(a, b);
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  HG_CHECK(a.ndim() == 3 && b.ndim() == 3 && a.size(0) == b.size(0), "bmm: takes two 3-D tensors with one batch size, ",
           "got shapes ", a.shape(), " and ", b.shape(), "; use matmul to broadcast");
  return matmul(a, b);
}

}  // namespace hg
