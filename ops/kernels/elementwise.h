#pragma once
// The kernel contract of the elementwise ops, casts and strided copies (docs/ARCHITECTURE.md, "Dispatch and
// registration"); implemented by cpu/elementwise.cpp and cuda/kernels/elementwise*.cu, copy.cu.
#include <span>

#include "core/dispatch_table.h"
#include "ops/broadcast.h"
#include "ops/ew.h"

namespace hg {

// Elementwise: out[i] = adapter(ins[0][...], ...) over a broadcast plan; all buffers of the table's dtype.
using EwKernel = void (*)(const EwCall& call, const BroadcastPlan& plan, const void* const* ins, void* out);
// Conversion of n contiguous elements between any two dtypes on one device.
using CastKernel = void (*)(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n);
// Strided copy (permute, transpose, slice, cat): dst[sum i_d*dst_strides_d] = src[sum i_d*src_strides_d].
struct StridedCopy {
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t src_strides[kMaxDims] = {};
  int64_t dst_strides[kMaxDims] = {};
  const void* src = nullptr;
  void* dst = nullptr;
  int elem_size = 4;
};
using CopyKernel = void (*)(const StridedCopy& c);

// Casts of several tensors at once, dst = src element by element with to(dtype)'s rounding; one launch per
// source dtype on a GPU. Used for autocast's casts of an op's inputs together with the cached weights the
// region will use (cast_each, ops/autocast/autocast.cpp) and for the widening of those casts' gradients that
// autograd's engine gathers at the end of a backward (grads_widened, autograd/engine.cpp). Keyed by the
// source dtype, F16, BF16 or F32; `to` is F16, BF16, F32 or F64 (is_batched_cast).
struct CastBatchArgs {
  const void* src = nullptr;
  DType from = DType::F16;
  void* dst = nullptr;
  DType to = DType::F32;
  int64_t n = 0;
};
// Every value of `from` is a value of `to` (F16/BF16 -> F32; F16/BF16/F32 -> F64): the cast is exact.
constexpr bool is_exact_widening(DType from, DType to) {
  return ((from == DType::F16 || from == DType::BF16) && (to == DType::F32 || to == DType::F64)) ||
         (from == DType::F32 && to == DType::F64);
}
constexpr bool is_batched_cast(DType from, DType to) {
  return (from == DType::F16 || from == DType::BF16 || from == DType::F32) &&
         (to == DType::F16 || to == DType::BF16 || to == DType::F32 || to == DType::F64);
}
using CastBatchKernel = void (*)(std::span<const CastBatchArgs> batch);

HG_KERNEL_TABLE(EwKernel, ew_kernels, "elementwise");
HG_KERNEL_TABLE(CastBatchKernel, cast_batch_kernels, "to(dtype), batched");
HG_KERNEL_TABLE(CastKernel, cast_kernels, "to(dtype)");  // indexed by the source dtype's slot F32 ("any")
HG_KERNEL_TABLE(CopyKernel, copy_kernels, "copy");  // indexed by slot F32 ("any")

}  // namespace hg
