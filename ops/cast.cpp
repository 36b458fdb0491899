// to(DType) and to(Device): the cast op. Backward casts (or moves) the gradient back, so an F32
// parameter used in F16 receives an F32 gradient.
#include "autograd/node.h"
#include "ops/dispatch.h"
#include "ops/kernels/elementwise.h"

namespace hg {

Tensor Tensor::to(DType t) const {
  if (t == dtype()) return *this;
  Tensor y = empty(shape(), {.dtype = t, .device = device()});
  if (numel()) cast_kernels().get(device(), DType::F32)(data_ptr(), dtype(), y.data_ptr(), t, numel());
  if (is_floating(t)) {
    autograd::record(y, "to(dtype)", {*this}, [src = dtype()](const Tensor& dy, const GradMask&) {
      return std::vector<Tensor>{dy.to(src)};
    });
  }
  return y;
}

Tensor Tensor::to(Device d) const {
  if (d == device()) return *this;
  load_backend(d.type);
  Tensor y = empty(shape(), {.dtype = dtype(), .device = d});
  copy_bytes(y.data_ptr(), d, data_ptr(), device(), nbytes());
  autograd::record(y, "to(device)", {*this}, [src = device()](const Tensor& dy, const GradMask&) {
    return std::vector<Tensor>{dy.to(src)};
  });
  return y;
}

}  // namespace hg
