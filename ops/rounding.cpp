// Stochastic rounding (ops/rounding.h): checks, the Philox blocks from the generator, one kernel.
#include "ops/rounding.h"

#include "autograd/node.h"
#include "ops/dispatch.h"
#include "ops/kernels/rounding.h"

namespace hg {

Tensor stochastic_round(const Tensor& x, DType dt, Generator* gen) {
  HG_CHECK(x.defined(), "stochastic_round: the tensor is undefined");
  HG_CHECK(is_low_precision(dt) || is_fp8(dt), "stochastic_round: dtype ", dt,
           " is not a narrower format; round to F16, BF16, F8E4M3 or F8E5M2");
  check_floating("stochastic_round", x);
  HG_CHECK(x.dtype() != DType::I64, "stochastic_round: dtype I64 is not supported; round a floating tensor");
  const Tensor xf = (x.dtype() == DType::F32 ? x.detach() : x.detach().to(DType::F32)).contiguous();
  Tensor y = empty(x.shape(), {.dtype = dt, .device = x.device()});
  if (x.numel() > 0) {
    Generator& g = gen ? *gen : default_generator();
    StochasticRoundArgs a;
    a.n = x.numel();
    a.x = static_cast<const float*>(xf.data_ptr());
    a.y = y.data_ptr();
    a.rng = reserve_draw(g, static_cast<uint64_t>((x.numel() + 3) / 4), x.device());
    stochastic_round_kernels().get(x.device(), dt)(a);
  }
  if (is_low_precision(dt)) {
    autograd::record(y, "stochastic_round", {x}, [src = x.dtype()](const Tensor& dy, const GradMask&) {
      return std::vector<Tensor>{dy.to(src)};  // a recorded cast: differentiable again
    }, autograd::Saves::none(), autograd::DoubleBackward::Yes);
  }
  return y;
}

}  // namespace hg
