// Losses (torch.nn.functional definitions): check -> dispatch -> record backward (docs/ARCHITECTURE.md, "One op").
// cross_entropy and nll_loss run one fused kernel per direction (cpu/loss.cpp, cuda/kernels/loss.cu):
// forward keeps one log-sum-exp per row, backward rebuilds softmax - smoothed one-hot from the logits.
// mse, l1 and BCE-with-logits are composed from differentiable elementwise ops and reductions, so they
// run on every backend. Every loss computes in F32 (F64 for F64) and returns F32 for F16/BF16 input.
#include "ops/loss.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "autograd/node.h"
#include "autograd/saved.h"
#include "core/dispatch_table.h"
#include "ops/autocast/autocast.h"
#include "ops/broadcast.h"
#include "ops/elementwise.h"
#include "ops/kernels/loss.h"
#include "ops/reduce.h"
#include "ops/shape.h"

namespace hg {

namespace {


DType compute_dtype(DType t) { return t == DType::F64 ? DType::F64 : DType::F32; }

// The (outer, classes, inner) view of x (C), (N,C) or (N,C,d1,...) and the checks of its target:
// I64 class indices with x's shape less the class dim (torch's nll_loss_nd shape rules).
CrossEntropyArgs class_view(const char* op, const Tensor& x, const Tensor& target) {
  check_floating(op, x);
  HG_CHECK(x.ndim() >= 1, op, ": input is 0-d; pass scores of shape (C), (N,C) or (N,C,d1,...)");
  HG_CHECK(target.dtype() == DType::I64, op, ": target has dtype ", target.dtype(),
           "; targets are class indices: convert them with .to(DType::I64)");
  check_same_device(op, x, target);
  std::vector<int64_t> want;
  for (int64_t d = 0; d < x.ndim(); ++d)
    if (d != (x.ndim() == 1 ? 0 : 1)) want.push_back(x.shape()[d]);
  HG_CHECK(target.shape() == Shape(want), op, ": target shape ", target.shape(), " does not match input shape ",
           x.shape(), "; the target must have the input's shape without the class dim, ", Shape(want));
  CrossEntropyArgs a;
  a.outer = x.ndim() == 1 ? 1 : x.shape()[0];
  a.classes = x.ndim() == 1 ? x.shape()[0] : x.shape()[1];
  for (int64_t d = 2; d < x.ndim(); ++d) a.inner *= x.shape()[d];
  return a;
}

// The gradient the backward kernel computes, in recorded ops (backward under create_graph). With q the smoothed
// one-hot target ((1 - eps) onehot + eps/C) and v = 0 for an ignored target, 1 otherwise: d loss / d x =
// v (softmax(x) - q) for logits, -v q for log-probabilities; times dy, divided by the count of kept targets for
// the mean.
Tensor class_loss_grad_ops(const CrossEntropyArgs& a, const Tensor& x, const Tensor& target, const Tensor& dy) {
  const int64_t cdim = x.ndim() == 1 ? 0 : 1;
  const DType ct = dy.dtype();
  std::vector<int64_t> along(static_cast<size_t>(x.ndim() - cdim), 1);  // the class positions, shaped as dim cdim
  along[0] = a.classes;
  const Tensor cls = arange(0.0, static_cast<double>(a.classes), 1.0, {.dtype = DType::F64, .device = x.device()})
                         .reshape(Shape(along));
  const Tensor t = unsqueeze(target, cdim);
  const Tensor v = ne(t, static_cast<double>(a.ignore_index)).to(ct);
  Tensor q = eq(t, cls).to(ct);
  if (a.label_smoothing > 0)
    q = add(mul(q, 1.0 - a.label_smoothing), a.label_smoothing / static_cast<double>(a.classes));
  const Tensor xc = x.to(ct);
  const Tensor d = a.scores == ClassScores::Logits ? sub(softmax(xc, cdim), q) : neg(q);
  Tensor scale = a.reduction == Reduction::None ? unsqueeze(dy, cdim) : dy;
  if (a.reduction == Reduction::Mean) scale = div(scale, sum(v));
  return mul(mul(d, v), scale).to(x.dtype());
}

// Shared by cross_entropy (Logits) and nll_loss (LogProbs): one forward kernel writes the loss and the
// per-row statistics that the one backward kernel reads.
Tensor class_loss(const char* op, CrossEntropyArgs a, const Tensor& x_in, const Tensor& target_in) {
  const Tensor x = x_in.contiguous(), target = target_in.contiguous();  // the kernels read dense rows
  const int64_t rows = a.outer * a.inner;
  const TensorOptions copt{.dtype = compute_dtype(x.dtype()), .device = x.device()};
  Tensor stats = empty({2 * rows + 1}, copt);
  Tensor loss = empty(a.reduction == Reduction::None ? target.shape() : Shape{}, copt);
  a.x = x.data_ptr();
  a.target = static_cast<const int64_t*>(target.data_ptr());
  a.stats = stats.data_ptr();
  a.loss = loss.data_ptr();
  cross_entropy_kernels().get(x.device(), x.dtype())(a);
  autograd::record(loss, op, {x}, [sx = autograd::SavedTensor(x), target, stats, a](const Tensor& dy, const GradMask&) {
    const Tensor& x = sx.data();
    HG_CHECK(dy.dtype() == stats.dtype(), "cross_entropy backward: gradient dtype ", dy.dtype(), " but the loss is ",
             stats.dtype());
    if (autograd::create_graph_active()) return std::vector<Tensor>{class_loss_grad_ops(a, sx.unpack(), target, dy)};
    Tensor dx = empty_like(x);
    CrossEntropyArgs b = a;
    b.x = x.data_ptr();
    b.target = static_cast<const int64_t*>(target.data_ptr());
    b.stats = stats.data_ptr();
    b.dy = dy.data_ptr();
    b.dx = dx.data_ptr();
    if (x.numel() > 0) cross_entropy_backward_kernels().get(x.device(), x.dtype())(b);
    return std::vector<Tensor>{dx};
  }, autograd::Saves{}, autograd::DoubleBackward::Yes);
  return loss;
}

// Same shape, floating, same device; both cast (differentiably) to their promoted dtype, F32 for F16/BF16.
std::pair<Tensor, Tensor> pointwise_operands(const char* op, const Tensor& input, const Tensor& target) {
  check_floating(op, input);
  check_floating(op, target);
  check_same_device(op, input, target);
  HG_CHECK(input.shape() == target.shape(), op, ": input shape ", input.shape(), " and target shape ", target.shape(),
           " differ; pass a target of the input's shape (torch would broadcast with a warning, halfgrad refuses)");
  DType dt = promote_types(input.dtype(), target.dtype());
  if (is_low_precision(dt)) dt = DType::F32;
  return {input.to(dt), target.to(dt)};
}

Tensor reduce_loss(const Tensor& l, Reduction r) {
  switch (r) {
    case Reduction::Mean: return mean(l);
    case Reduction::Sum: return sum(l);
    case Reduction::None: return l;
  }
  return l;
}

// The class weights as a (C) tensor in dtype ct, checked; shaped to broadcast along the class dim of `scores`
// (dim 1, or 0 for a (C) input).
Tensor class_weight(const char* op, const Tensor& w, const Tensor& scores, DType ct) {
  const int64_t cdim = scores.ndim() <= 1 ? 0 : 1;
  const int64_t classes = scores.ndim() == 0 ? 0 : scores.shape()[cdim];
  HG_CHECK(w.ndim() == 1 && w.shape()[0] == classes && is_floating(w.dtype()) && !is_storage_only(w.dtype()), op,
           ": weight has shape ", w.shape(), " and dtype ", w.dtype(), "; pass a floating tensor of shape (", classes,
           "), one weight per class");
  check_same_device(op, scores, w);
  std::vector<int64_t> dims(static_cast<size_t>(std::max<int64_t>(scores.ndim() - cdim, 1)), 1);
  dims[0] = classes;
  return w.to(ct).reshape(Shape(dims));
}

// torch's weighted NLL over class indices (shapes already checked by class_view), from log-probabilities lp
// (compute dtype): per target -w[y] lp[y] and, with label smoothing eps, (1 - eps) of that plus eps/C of
// -sum_c w[c] lp[c]; ignored targets give 0, and the mean divides by the sum of the non-ignored targets' w[y].
Tensor weighted_class_loss(const char* op, const Tensor& lp, const Tensor& target, const Tensor& weight,
                           Reduction reduction, int64_t ignore_index, double eps) {
  const int64_t cdim = lp.ndim() == 1 ? 0 : 1, classes = lp.shape()[cdim];
  for (const int64_t y : target.cpu().to_vector<int64_t>())
    HG_CHECK(y == ignore_index || (y >= 0 && y < classes), op, ": target ", y, " is out of bounds for ", classes,
             " classes (and is not ignore_index=", ignore_index, ")");
  const Tensor w = class_weight(op, weight, lp, lp.dtype());
  const Tensor keep = ne(target, static_cast<double>(ignore_index));  // Bool
  const Tensor valid = keep.to(lp.dtype()), safe = mul(target, keep);    // an ignored target reads class 0
  const Tensor picked = gather(lp, cdim, unsqueeze(safe, cdim)).squeeze(cdim);
  const Tensor wy = mul(index_select(w.reshape({classes}), 0, safe.reshape({-1})).reshape(target.shape()), valid);
  Tensor loss = neg(mul(wy, picked));
  if (eps > 0) {
    const Tensor smooth = mul(neg(sum(mul(lp, w), {cdim})), valid);
    loss = add(mul(loss, 1.0 - eps), mul(smooth, eps / static_cast<double>(classes)));
  }
  if (reduction == Reduction::None) return loss;
  if (reduction == Reduction::Sum) return sum(loss);
  return div(sum(loss), sum(wy));  // torch: 0/0 = NaN when every target is ignored
}

// Class probabilities as targets (torch's second form): the loss of a row is -sum_c t_c log_softmax(x)_c, with
// t smoothed to t (1 - s) + s / C; mean divides by the number of rows. Composed of log_softmax, mul and sums.
Tensor cross_entropy_probs(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& o) {
  check_floating("cross_entropy", logits);
  check_same_device("cross_entropy", logits, target);
  HG_CHECK(logits.ndim() >= 1, "cross_entropy: input is 0-d; pass scores of shape (C), (N,C) or (N,C,d1,...)");
  HG_CHECK(target.shape() == logits.shape(), "cross_entropy: probability targets of shape ", target.shape(),
           " must have the input's shape ", logits.shape(), " (or pass I64 class indices)");
  const int64_t cdim = logits.ndim() == 1 ? 0 : 1;
  const DType ct = compute_dtype(logits.dtype());
  const Tensor x = logits.to(ct);
  Tensor t = target.to(ct);
  if (o.label_smoothing > 0)
    t = add(mul(t, 1.0 - o.label_smoothing), o.label_smoothing / static_cast<double>(logits.shape()[cdim]));
  Tensor terms = mul(t, log_softmax(x, cdim));
  if (o.weight.defined()) terms = mul(terms, class_weight("cross_entropy", o.weight, logits, ct));
  const Tensor per_row = neg(sum(terms, {cdim}));
  return reduce_loss(per_row, o.reduction);
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& target, CrossEntropyOptions o) {
  if (amp::OpCast c{amp::OpId::CrossEntropy, {logits, target}}) return c.result(cross_entropy(c[0], c[1], o));
  HG_CHECK(o.label_smoothing >= 0.0 && o.label_smoothing <= 1.0, "cross_entropy: label_smoothing=",
           o.label_smoothing, " is outside [0, 1]; pass a value in [0, 1]");
  if (target.defined() && is_floating(target.dtype())) return cross_entropy_probs(logits, target, o);
  CrossEntropyArgs a = class_view("cross_entropy", logits, target);
  if (o.weight.defined()) {
    const Tensor lp = log_softmax(logits.to(compute_dtype(logits.dtype())), logits.ndim() == 1 ? 0 : 1);
    return weighted_class_loss("cross_entropy", lp, target, o.weight, o.reduction, o.ignore_index,
                               o.label_smoothing);
  }
  a.scores = ClassScores::Logits;
  a.reduction = o.reduction;
  a.ignore_index = o.ignore_index;
  a.label_smoothing = o.label_smoothing;
  return class_loss("cross_entropy", a, logits, target);
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, NllLossOptions o) {
  if (amp::OpCast c{amp::OpId::NllLoss, {log_probs, target}}) return c.result(nll_loss(c[0], c[1], o));
  CrossEntropyArgs a = class_view("nll_loss", log_probs, target);
  if (o.weight.defined())
    return weighted_class_loss("nll_loss", log_probs.to(compute_dtype(log_probs.dtype())), target, o.weight,
                               o.reduction, o.ignore_index, 0.0);
  a.scores = ClassScores::LogProbs;
  a.reduction = o.reduction;
  a.ignore_index = o.ignore_index;
  return class_loss("nll_loss", a, log_probs, target);
}

Tensor mse_loss(const Tensor& input, const Tensor& target, LossOptions o) {
  if (amp::OpCast c{amp::OpId::MseLoss, {input, target}}) return c.result(mse_loss(c[0], c[1], o));
  auto [x, t] = pointwise_operands("mse_loss", input, target);
  const Tensor d = sub(x, t);
  return reduce_loss(mul(d, d), o.reduction);
}

Tensor l1_loss(const Tensor& input, const Tensor& target, LossOptions o) {
  if (amp::OpCast c{amp::OpId::L1Loss, {input, target}}) return c.result(l1_loss(c[0], c[1], o));
  auto [x, t] = pointwise_operands("l1_loss", input, target);
  return reduce_loss(abs(sub(x, t)), o.reduction);
}

// torch's form: softplus(-x) = m + log(exp(-m) + exp(-x - m)) with m = max(-x, 0). Its value does not
// depend on m, so neither does its gradient: it is right even at x == 0, where relu and abs have kinks
// (a zero-initialised output layer gives exactly 0 logits).
// loss = (1 - t) x + (1 + (pos_weight - 1) t) softplus(-x).
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target, BceWithLogitsOptions o) {
  if (amp::OpCast c{amp::OpId::BceWithLogits, {logits, target}})
    return c.result(binary_cross_entropy_with_logits(c[0], c[1], o));
  const char* op = "binary_cross_entropy_with_logits";
  auto [x, t] = pointwise_operands(op, logits, target);
  const Tensor nx = neg(x);
  const Tensor m = relu(nx);
  const Tensor softplus = add(m, log(add(exp(neg(m)), exp(sub(nx, m)))));
  Tensor weighted = softplus;
  if (o.pos_weight.defined()) {
    check_floating(op, o.pos_weight);
    check_same_device(op, o.pos_weight, x);
    HG_CHECK(broadcasts_to(o.pos_weight.shape(), x.shape()), op, ": pos_weight shape ", o.pos_weight.shape(),
             " does not broadcast to the input shape ", x.shape(), "; pass one weight per class, shape (C) for an input (N,C)");
    const Tensor pw = o.pos_weight.to(x.dtype());
    weighted = mul(add(mul(sub(pw, 1.0), t), 1.0), softplus);
  }
  return reduce_loss(add(mul(rsub(1.0, t), x), weighted), o.reduction);
}

}  // namespace hg
