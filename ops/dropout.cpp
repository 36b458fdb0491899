// dropout: check -> dispatch -> record backward (docs/ARCHITECTURE.md, "One op"). One fused kernel draws the Philox mask
// and scales; backward runs the same kernel on dy with the same (seed, offset), so the mask is
// regenerated instead of stored (no mask memory, and the same bits on every backend).
#include "ops/dropout.h"

#include <cmath>
#include <utility>

#include "autograd/node.h"
#include "core/dispatch_table.h"
#include "ops/autocast/autocast.h"
#include "ops/elementwise.h"
#include "ops/kernels/dropout.h"

namespace hg {

namespace {

void run_dropout(DropoutArgs a, const Tensor& in, Tensor& out) {
  a.n = in.numel();
  a.x = in.data_ptr();
  a.y = out.data_ptr();
  if (a.n > 0) dropout_kernels().get(in.device(), in.dtype())(a);
}

// x times the mask of draw `a`, scaled: dropout's forward, and (the mask being diagonal) its own backward, so the
// backward is recorded as this op again and create_graph differentiates through it.
Tensor apply_mask(const Tensor& x, const DropoutArgs& a) {
  Tensor y = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  run_dropout(a, x.contiguous(), y);
  autograd::record(y, "dropout", {x}, [a](const Tensor& dy, const GradMask&) {
    return std::vector<Tensor>{apply_mask(dy, a)};
  }, autograd::Saves::none(), autograd::DoubleBackward::Yes);
  return y;
}

}  // namespace

Tensor dropout(const Tensor& x, DropoutFuncOptions o) {
  if (amp::OpCast c{amp::OpId::Dropout, {x}}) return c.result(dropout(c[0], o));
  check_floating("dropout", x);
  HG_CHECK(o.p >= 0.0 && o.p <= 1.0, "dropout: p=", o.p, " is not a probability; pass p in [0, 1)");
  if (!o.training || o.p == 0.0) return x;
  if (o.p == 1.0) return mul(x, 0.0);  // torch: input * 0, so NaN and inf become NaN rather than 0
  Generator& g = o.generator ? *o.generator : default_generator();
  DropoutArgs a;
  a.rng = reserve_draw(g, static_cast<uint64_t>((x.numel() + 3) / 4), x.device());
  a.threshold = static_cast<uint32_t>(std::ceil(o.p * 16777216.0));  // p * 2^24 is exact: no rounding doubt
  a.scale = 1.0 / (1.0 - o.p);
  return apply_mask(x, a);
}

}  // namespace hg
