#pragma once
// Shared by the op tests: the relative tolerance of a result stored in each dtype, against the F64
// result of the same rounded inputs (about a few units of the dtype's last place, with room for
// F32 accumulation order).
#include "core/dtype.h"

namespace hg::test {

inline double dtype_tolerance(DType dt) {
  switch (dt) {
    case DType::BF16: return 1e-2;  // 8-bit significand: 2^-8 = 3.9e-3 per rounding
    case DType::F16: return 2e-3;   // 11-bit significand: 2^-11 = 4.9e-4 per rounding
    case DType::F64: return 1e-12;
    default: return 1e-5;
  }
}

}  // namespace hg::test
