#pragma once
// The tensor-level GEMM call the ops share (matmul, linear, fp8_linear): C = op(x) * op(y) as a new
// (batch, m, n) tensor, from contiguous operands stored as their Trans says; a shared operand (batch stride
// 0) is the same matrix for every batch. C has x's dtype, or F32 for F16/BF16 operands with c_f32
// (GemmArgs::c_f32: the F32 accumulator, not rounded to 16 bits). Not part of the user's API.
#include <cstdint>

#include "core/tensor.h"
#include "ops/matmul.h"

namespace hg {

Tensor gemm_op(const Tensor& x, Trans tx, bool x_shared, const Tensor& y, Trans ty, bool y_shared, int64_t batch,
               int64_t m, int64_t n, int64_t k, bool c_f32 = false);

}  // namespace hg
