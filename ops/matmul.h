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
// transpose flags (dA = dY op(B)^T, dB = op(A)^T dY), never transposed copies. torch.matmul's other shapes too
// (without transpose flags): 1-D operands (a vector times a matrix, a matrix times a vector, a dot product) and
// any number of batch dims, broadcast.
Tensor matmul(const Tensor& a, const Tensor& b, MatmulOptions o = {});

// torch.mm (both 2-D) and torch.bmm (both 3-D with one batch size): matmul, with their shape rules checked.
Tensor mm(const Tensor& a, const Tensor& b);
Tensor bmm(const Tensor& a, const Tensor& b);

// What linear applies to its result, in the same op: None, or ReLU (relu(x w^T + b), what nn::Sequential runs
// for a Linear followed by a ReLU).
enum class Activation : uint8_t { None, Relu };

// torch.nn.functional.linear: x is (*,I), w is (O,I), b is (O) or undefined; y is (*,O) = x w^T + b, then act.
// Backward: dx = dy w, dw = dy^T x (both GEMMs with transpose flags), db = dy summed over rows (dy through
// ReLU's gradient first, read from y). Where the backend's GEMM has epilogues (CUDA: cuBLASLt; see
// ops/kernels/gemm.h) the bias, bias + ReLU and db come out of the GEMM calls themselves: forward is one
// library call, and db costs nothing beside dw. Elsewhere (the CPU, F64, or no algorithm for the shape) C
// starts as the broadcast bias and the GEMM adds onto it (beta = 1), ReLU is one pass, db one reduction.
// The results are the same either way up to the order of db's sum (the forward's bits agree on the emulated
// device); set_linear_epilogues(false) or HG_LINEAR_EPILOGUES=0 takes the separate route everywhere.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = Tensor(), Activation act = Activation::None);

// Whether linear uses the GEMM epilogues where the backend has them (default on; HG_LINEAR_EPILOGUES=0 in the
// environment turns it off at start-up, to measure or rule out the fused route). Process-wide.
void set_linear_epilogues(bool enabled);
bool linear_epilogues();
// Whether linear(..., Activation::Relu) on device d is one GEMM call rather than a GEMM and a ReLU pass (the
// epilogues are on and d's backend has them): where nn::Sequential runs a Linear and a ReLU as one op.
bool linear_fuses_activation(const Device& d);

}  // namespace hg
