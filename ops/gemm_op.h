#pragma once
// The tensor-level GEMM call the ops share (matmul, linear, fp8_linear): C = op(x) * op(y) as a new
// (batch, m, n) tensor, from contiguous operands stored as their Trans says; a shared operand (batch stride
// 0) is the same matrix for every batch. C has x's dtype, or F32 for F16/BF16 operands with c_f32
// (GemmArgs::c_f32: the F32 accumulator, not rounded to 16 bits). Not part of the user's API.
#include <cstdint>

#include "core/tensor.h"
#include "ops/matmul.h"

namespace hg {

// One call, by field name: gemm_op({.x = dy, .y = w, .m = m, .n = i, .k = o}).
struct GemmOp {
  Tensor x;                 // op(x) is (m, k): x is (m, k) when tx == N, (k, m) when T
  Trans tx = Trans::N;
  bool x_shared = false;    // one matrix for every batch (batch stride 0)
  Tensor y;                 // op(y) is (k, n): y is (k, n) when ty == N, (n, k) when T
  Trans ty = Trans::N;
  bool y_shared = false;
  int64_t batch = 1, m = 0, n = 0, k = 0;
  bool c_f32 = false;       // F16/BF16 operands into an F32 C
};

Tensor gemm_op(const GemmOp& g);

}  // namespace hg
