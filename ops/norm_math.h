#pragma once
// The math of batch_norm and layer_norm, written once as HG_HD functions for the CPU kernels
// (cpu/norm.cpp) and the CUDA kernels (cuda/kernels/norm.cu), so the CPU tests check what the GPU
// runs. A "group" is what one set of statistics covers: a channel over (N, *) for batch_norm, a row of
// the normalized elements for layer_norm. C is the compute type (float, double for F64). Pure POD code.
//
// Forward: y = (x - mean) * scale + shift with scale = invstd * w and shift = b (per channel for
// batch_norm, per element of the normalized shape for layer_norm). x - mean is formed first, so a large
// mean does not cancel against the shift (the folded x * scale + (b - mean * scale) would lose
// |mean| / std digits).
// Backward, with xc = x - mean, g = dy * w and m elements per group (the standard derivation through
// the batch mean and biased variance):
//   dx = invstd * (g - sum(g) / m - xc * invstd^2 * sum(g * xc) / m)
//   dw = sum over the other axis of dy * xc * invstd, db = sum of dy.
// Batch norm's w is per channel, so it leaves the group sums: dx = (dy - k1 - xc * k2) * invstd * w
// with k1, k2 from sum(dy), sum(dy * xc); layer norm's w varies inside the row, so its sums are of g.
// Eval-mode batch norm treats mean and invstd as constants: k1 = k2 = 0.
#include <stdint.h>

#include "core/macros.h"
#include "ops/functors.h"

namespace hg::normfn {

// 1 / sqrt(var + eps) from the biased variance, as torch normalises.
template <class C> HG_HD C invstd(C var, double eps) { return C(1) / fn::m_sqrt(var + static_cast<C>(eps)); }

// torch's running-statistics update: (1 - momentum) * running + momentum * batch.
template <class C> HG_HD C running_update(C running, C batch, double momentum) {
  return (C(1) - static_cast<C>(momentum)) * running + static_cast<C>(momentum) * batch;
}

// The unbiased variance torch puts into running_var, from the biased one over m > 1 values.
template <class C> HG_HD C unbiased(C var, int64_t m) { return var * static_cast<C>(m) / static_cast<C>(m - 1); }

template <class C> HG_HD C forward(C x, C mean, C scale, C shift) { return (x - mean) * scale + shift; }

// The per-group constants of dx from the group's sums of g and g * xc over m elements.
template <class C> struct GradCoef {
  C k1 = 0, k2 = 0;
};
template <class C> HG_HD GradCoef<C> grad_coef(C sum_g, C sum_g_xc, C invstd, int64_t m) {
  const C inv_m = C(1) / static_cast<C>(m);
  return {sum_g * inv_m, invstd * invstd * sum_g_xc * inv_m};
}

// dx of one element from its g (dy, or dy * w for layer norm) and xc = x - mean; scale = invstd (times
// w for batch norm).
template <class C> HG_HD C grad_x(C g, C xc, GradCoef<C> k, C scale) { return (g - k.k1 - xc * k.k2) * scale; }

}  // namespace hg::normfn
