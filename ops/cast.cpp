// to(DType) and to(Device): the cast op, and cast_each, several casts in one batched call. Backward casts (or
// moves) the gradient back, so an F32 parameter used in F16 receives an F32 gradient.
#include "autograd/node.h"
#include "ops/dispatch.h"
#include "ops/kernels/elementwise.h"

namespace hg {

namespace {

// y = x.to(y's dtype) as autograd sees it: the backward casts the gradient back to x's dtype.
void record_cast(Tensor& y, const Tensor& x) {
  if (!is_floating(y.dtype())) return;
  autograd::record(y, "to(dtype)", {x}, [src = x.dtype()](const Tensor& dy, const GradMask&) {
    return std::vector<Tensor>{dy.to(src)};
  }, autograd::Saves::none(), autograd::DoubleBackward::Yes);
  // the gradient's cast back is exact: the engine may batch it with the others (autograd/node.h)
  if (is_exact_widening(y.dtype(), x.dtype()) && y.grad_fn()) y.grad_fn()->widen_back_to = x.dtype();
}

// xs[k] cast to to[k] (dense inputs), those of one device and source dtype in one call of cast_batch_kernels
// where is_batched_cast allows, the others one by one; nothing recorded.
std::vector<Tensor> cast_batched(const std::vector<Tensor>& xs, const std::vector<DType>& to) {
  std::vector<Tensor> out(xs.size());
  BatchedCalls<CastBatchArgs> calls;
  for (size_t k = 0; k < xs.size(); ++k) {
    const Tensor& x = xs[k];
    out[k] = empty(x.shape(), {.dtype = to[k], .device = x.device()});
    if (x.numel() == 0) continue;
    if (is_batched_cast(x.dtype(), to[k]))
      calls.add(x.device(), x.dtype(),
                CastBatchArgs{.src = x.data_ptr(), .from = x.dtype(), .dst = out[k].data_ptr(), .to = to[k], .n = x.numel()});
    else
      cast_kernels().get(x.device(), DType::F32)(x.data_ptr(), x.dtype(), out[k].data_ptr(), to[k], x.numel());
  }
  calls.run(cast_batch_kernels());
  return out;
}

}  // namespace

Tensor Tensor::to(DType t) const {
  if (t == dtype()) return *this;
  if (!is_contiguous()) return contiguous().to(t);  // the cast kernel reads dense memory
  Tensor y = empty(shape(), {.dtype = t, .device = device()});
  if (numel()) cast_kernels().get(device(), DType::F32)(data_ptr(), dtype(), y.data_ptr(), t, numel());
  record_cast(y, *this);
  return y;
}

std::vector<Tensor> cast_each(const std::vector<Tensor>& xs, DType t) {
  std::vector<Tensor> out(xs.size()), dense;
  std::vector<size_t> which;
  for (size_t k = 0; k < xs.size(); ++k) {
    HG_CHECK(xs[k].defined(), "cast_each: tensor ", k, " of ", xs.size(), " is undefined; pass defined tensors");
    if (xs[k].dtype() == t) {
      out[k] = xs[k];
    } else {
      which.push_back(k);
      dense.push_back(xs[k].contiguous());  // recorded as Tensor::to records it: the cast reads dense memory
    }
  }
  const std::vector<Tensor> cast = cast_batched(dense, std::vector<DType>(dense.size(), t));
  for (size_t j = 0; j < which.size(); ++j) {
    out[which[j]] = cast[j];
    record_cast(out[which[j]], dense[j]);
  }
  return out;
}

Tensor Tensor::to(Device d) const {
  if (d == device()) return *this;
  if (!is_contiguous()) return contiguous().to(d);  // one dense block crosses
  load_backend(d.type);
  Tensor y = empty(shape(), {.dtype = dtype(), .device = d});
  copy_bytes(y.data_ptr(), d, data_ptr(), device(), nbytes());
  autograd::record(y, "to(device)", {*this}, [src = device()](const Tensor& dy, const GradMask&) {
    return std::vector<Tensor>{dy.to(src)};
  }, autograd::Saves::none(), autograd::DoubleBackward::Yes);
  return y;
}

std::vector<Tensor> grads_widened(const std::vector<Tensor>& grads, const std::vector<DType>& to) {
  HG_CHECK(grads.size() == to.size(), "grads_widened: ", grads.size(), " gradients but ", to.size(), " dtypes");
  std::vector<Tensor> dense(grads.size());
  for (size_t k = 0; k < grads.size(); ++k) {
    HG_CHECK(is_exact_widening(grads[k].dtype(), to[k]), "grads_widened: ", grads[k].dtype(), " -> ", to[k],
             " is not an exact widening");
    dense[k] = grads[k].contiguous();
  }
  return cast_batched(dense, to);
}

}  // namespace hg
