#pragma once
// Host launchers of the CUDA kernels (cuda/kernels/*.cu), with the signatures of ops/dispatch.h's
// tables; cuda/register.cpp puts them into the tables. Every launcher enqueues on the device's
// stream (cuda/context.h) and checks the launch; none synchronises. Pure host declarations.
#include <cstddef>
#include <cstdint>

#include "core/dispatch_table.h"
#include "ops/kernels/elementwise.h"
#include "ops/kernels/reduce.h"

namespace hg::cuda {

// T is float, f16, bf16 or double (explicitly instantiated in elementwise_*.cu).
template <class T>
void elementwise(const EwCall& call, const BroadcastPlan& plan, const void* const* ins, void* out);

void cast(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n);  // copy.cu
void strided_copy(const StridedCopy& c);                                             // copy.cu
// n elements of elem_size bytes (2, 4 or 8) at dst = the low bytes of pattern, on dst's stream (copy.cu)
void fill_pattern(void* dst, int64_t n, size_t elem_size, uint64_t pattern);

// reduce.cu; T is float, f16, bf16 or double.
template <class T> void reduce(const ReduceArgs& a);
template <class T> void softmax(const SoftmaxArgs& a);
template <class T> void softmax_backward(const SoftmaxBackwardArgs& a);

}  // namespace hg::cuda
