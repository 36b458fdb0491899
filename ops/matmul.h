#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace hg {

// Whether an operand is used as stored (N) or transposed (T), without copying.
enum class Trans : uint8_t { N, T };

struct MatmulOptions {
  Trans trans_a = Trans::N;  // use a's last two dims transposed, without copying
  Trans trans_b = Trans::N;
};

// 2-D: op(a) (M,K) x op(b) (K,N) -> (M,N). Batched 3-D: (B,M,K) x (B,K,N) -> (B,M,N); a batch of 1 or a
// 2-D operand broadcasts over the other's batch. F16/BF16 accumulate in F32. Backward uses the
// transpose flags (dA = dY op(B)^T, dB = op(A)^T dY), never transposed copies.
Tensor matmul(const Tensor& a, const Tensor& b, MatmulOptions o = {});

// torch.nn.functional.linear: x is (*,I), w is (O,I), b is (O) or undefined; y is (*,O) = x w^T + b.
// One GEMM with the bias fused (C starts as the broadcast bias, beta = 1); backward: dx = dy w,
// dw = dy^T x (both GEMMs with transpose flags), db = dy summed over rows.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = Tensor());

}  // namespace hg
