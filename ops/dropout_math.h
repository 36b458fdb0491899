#pragma once
// The math of the dropout kernels, written once as HG_HD functions for the CPU loop (cpu/dropout.cpp)
// and the CUDA kernel (cuda/kernels/dropout.cu): the keep decision from a Philox word and the scaled
// output. C is the compute type (float, double for F64).
#include <stdint.h>

#include "core/macros.h"

namespace hg::dropoutfn {

// Element i of a draw at (seed, offset) uses word i%4 of Philox block i/4, exactly as hg::rand does for
// F32: its 24-bit uniform u = (w >> 8) / 2^24. The element is kept when u >= p, i.e. when
// (w >> 8) >= threshold = ceil(p 2^24), so P(keep) = 1 - p up to 2^-24.
HG_HD bool dropout_keep(uint32_t word, uint32_t threshold) { return (word >> 8) >= threshold; }

// x * mask * scale like torch: a dropped NaN or inf stays NaN (inf * 0), which AMP's overflow check sees.
template <class C> HG_HD C dropout_apply(C x, uint32_t word, uint32_t threshold, C scale) {
  return x * (dropout_keep(word, threshold) ? scale : C(0));
}

}  // namespace hg::dropoutfn
