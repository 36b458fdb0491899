#pragma once
// The CUDA elementwise engine: ONE kernel template over a BroadcastPlan, instantiated for every
// adapter of ops/ew.h (visit_ew) and every floating dtype. The kernel only indexes memory: it widens
// with load<T>, calls the adapter (whose math is the HG_HD functor the CPU runs, ops/functors.h) and
// rounds with store<T>.
//
// Shapes: out is contiguous with plan.numel elements; input k's element for out[i] is at
// sum_d idx_d(i) * plan.strides[k][d] (0 on broadcast dims), idx_d(i) from plan.sizes, last dim fastest.
// Included by elementwise.cu (float, double) and elementwise_half.cu (f16, bf16): about 63 kernels per
// dtype, split in two TUs so that -j2 builds them in parallel.
#include "cuda/check.h"
#include "cuda/context.h"
#include "cuda/launch.h"
#include "cuda/kernels/kernels.h"

namespace hg::cuda {
namespace ew_detail {

constexpr int kThreads = 256;

template <class T, int N>
struct Inputs {
  const T* p[N];
};

// Offsets of out[i] in each input: i decomposed over the plan's sizes, innermost (fastest) last.
// The plan has ndim >= 1; a same-shape op is coalesced into one dim and needs no division.
template <int N>
__device__ __forceinline__ void input_offsets(const BroadcastPlan& p, int64_t i, int64_t (&off)[N]) {
#pragma unroll
  for (int k = 0; k < N; ++k) off[k] = 0;
  for (int d = p.ndim - 1; d > 0; --d) {
    const int64_t q = i / p.sizes[d];
    const int64_t idx = i - q * p.sizes[d];
    i = q;
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] += idx * p.strides[k][d];
  }
#pragma unroll
  for (int k = 0; k < N; ++k) off[k] += i * p.strides[k][0];
}

// __grid_constant__: the plan is read in place from the parameter bank even though it is indexed
// with a run-time dim (no copy to local memory).
template <class T, class A>
__global__ void __launch_bounds__(kThreads)
    ew_kernel(const A f, const __grid_constant__ BroadcastPlan p, const Inputs<T, A::arity> in, T* __restrict__ out) {
  constexpr int N = A::arity;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < p.numel; i += step) {
    int64_t off[N];
    input_offsets<N>(p, i, off);
    if constexpr (N == 1) out[i] = store<T>(f(load(in.p[0][off[0]])));
    else if constexpr (N == 2) out[i] = store<T>(f(load(in.p[0][off[0]]), load(in.p[1][off[1]])));
    else out[i] = store<T>(f(load(in.p[0][off[0]]), load(in.p[1][off[1]]), load(in.p[2][off[2]])));
  }
}

}  // namespace ew_detail

template <class T>
void elementwise(const EwCall& call, const BroadcastPlan& plan, const void* const* ins, void* out) {
  visit_ew(call, [&](auto adapter) {
    using A = decltype(adapter);
    static_assert(A::arity >= 1 && A::arity <= 3, "elementwise: the kernel handles 1 to 3 inputs");
    HG_CHECK(plan.nin == A::arity, "elementwise: ", ew_op_name(call.op), " expects ", A::arity, " inputs, got ",
             plan.nin);
    if (plan.numel == 0) return;
    ew_detail::Inputs<T, A::arity> in;
    for (int k = 0; k < A::arity; ++k) in.p[k] = static_cast<const T*>(ins[k]);
    DeviceContext& c = context_for(out);
    constexpr int kThreads = ew_detail::kThreads;
    launch(ew_detail::ew_kernel<T, A>, grid_for(c, plan.numel, kThreads), kThreads, 0, c.stream, adapter, plan, in,
           static_cast<T*>(out));
  });
}

}  // namespace hg::cuda
