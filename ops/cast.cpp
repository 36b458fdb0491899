// to(DType) and to(Device): the cast op. Backward casts (or moves) the gradient back, so an F32
// parameter used in F16 receives an F32 gradient.
#include "autograd/node.h"
#include "ops/dispatch.h"
#include "ops/kernels/elementwise.h"

namespace hg {

Tensor Tensor::to(DType t) const {
  if (t == dtype()) return *this;
  if (!is_contiguous()) return contiguous().to(t);  // the cast kernel reads dense memory
  Tensor y = empty(shape(), {.dtype = t, .device = device()});
  if (numel()) cast_kernels().get(device(), DType::F32)(data_ptr(), dtype(), y.data_ptr(), t, numel());
  if (is_floating(t)) {
    autograd::record(y, "to(dtype)", {*this}, [src = dtype()](const Tensor& dy, const GradMask&) {
      return std::vector<Tensor>{dy.to(src)};
    }, autograd::Saves::none());
    // the gradient's cast back is exact: the engine may batch it with the others (autograd/node.h)
    if (is_exact_widening(t, dtype()) && y.grad_fn()) y.grad_fn()->widen_back_to = dtype();
  }
  return y;
}

Tensor Tensor::to(Device d) const {
  if (d == device()) return *this;
  if (!is_contiguous()) return contiguous().to(d);  // one dense block crosses
  load_backend(d.type);
  Tensor y = empty(shape(), {.dtype = dtype(), .device = d});
  copy_bytes(y.data_ptr(), d, data_ptr(), device(), nbytes());
  autograd::record(y, "to(device)", {*this}, [src = device()](const Tensor& dy, const GradMask&) {
    return std::vector<Tensor>{dy.to(src)};
  }, autograd::Saves::none());
  return y;
}

std::vector<Tensor> grads_widened(const std::vector<Tensor>& grads, const std::vector<DType>& to) {
  HG_CHECK(grads.size() == to.size(), "grads_widened: ", grads.size(), " gradients but ", to.size(), " dtypes");
  std::vector<Tensor> out(grads.size());
  BatchedCalls<WidenArgs> calls;
  for (size_t k = 0; k < grads.size(); ++k) {
    const Tensor& g = grads[k];
    HG_CHECK(is_exact_widening(g.dtype(), to[k]), "grads_widened: ", g.dtype(), " -> ", to[k],
             " is not an exact widening");
    out[k] = empty(g.shape(), {.dtype = to[k], .device = g.device()});
    if (g.numel() > 0)
      calls.add(g.device(), g.dtype(),
                WidenArgs{.src = g.data_ptr(), .from = g.dtype(), .dst = out[k].data_ptr(), .to = to[k], .n = g.numel()});
  }
  calls.run(widen_kernels());
  return out;
}

}  // namespace hg
