// Dtype casts and the strided copy behind transpose/permute/slice/cat.
#include <span>
#include <type_traits>

#include "cuda/check.h"
#include "cuda/context.h"
#include "cuda/kernels/kernels.h"
#include "cuda/kernels/multi_tensor.cuh"
#include "cuda/launch.h"
#include "cuda/register.h"
#include "ops/kernels/elementwise.h"

namespace hg::cuda {
namespace {

constexpr int kThreads = 256;

// The storage formats that convert through float: F16, BF16 and the FP8 formats (non-saturating, as the
// CPU's .to(dtype)).
template <class T>
inline constexpr bool is_half_v = std::is_same_v<T, f16> || std::is_same_v<T, bf16> || std::is_same_v<T, f8e4m3> ||
                                  std::is_same_v<T, f8e5m2>;

template <class T> __device__ __forceinline__ float widen(T v) {
  if constexpr (is_half_v<T>) return to_float(v);
  else return static_cast<float>(v);
}
template <class T> __device__ __forceinline__ T narrow(float f) {
  if constexpr (is_half_v<T>) return from_float<T>(f);
  else if constexpr (std::is_same_v<T, int64_t>) return to_i64_saturating(f);
  else return static_cast<T>(f);
}

// The CPU's convert_any, element by element: a cast touching F16/BF16/FP8 goes through f32 (so F64 and
// I64 round twice, as PyTorch's CPU cast); F32/F64/I64 among themselves are C casts, except that a float
// to I64 saturates (NaN -> 0, out of range -> the limits), as on the CPU.
template <class S, class D> __device__ __forceinline__ D convert_one(S v) {
  // Bool: true/false to 1/0, a value to value != 0 (NaN is true), as the CPU's
  if constexpr (std::is_same_v<D, bool>) {
    if constexpr (is_half_v<S>) return widen(v) != 0.0f;
    else return v != S(0);
  } else if constexpr (std::is_same_v<S, bool>) {
    return convert_one<float, D>(v ? 1.0f : 0.0f);
  } else if constexpr (is_half_v<S> || is_half_v<D>) return narrow<D>(widen(v));
  else if constexpr (std::is_same_v<D, int64_t> && !std::is_same_v<S, int64_t>) return to_i64_saturating(v);
  else return static_cast<D>(v);
}

// dst[i] = convert(src[i]), i < n; both contiguous.
template <class S, class D>
__global__ void __launch_bounds__(kThreads) cast_kernel(const S* __restrict__ src, D* __restrict__ dst, int64_t n) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    dst[i] = convert_one<S, D>(src[i]);
}

// dst[sum_d idx_d * dst_strides_d] = src[sum_d idx_d * src_strides_d] over c.sizes (last dim
// fastest); E is an unsigned integer of the element size: bytes are moved, never converted.
template <class E>
__global__ void __launch_bounds__(kThreads) strided_copy_kernel(const __grid_constant__ StridedCopy c, int64_t numel) {
  const E* __restrict__ src = static_cast<const E*>(c.src);
  E* __restrict__ dst = static_cast<E*>(c.dst);
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < numel; i += step) {
    int64_t rem = i, so = 0, dof = 0;
    for (int d = c.ndim - 1; d >= 0; --d) {
      const int64_t q = rem / c.sizes[d];
      const int64_t idx = rem - q * c.sizes[d];
      rem = q;
      so += idx * c.src_strides[d];
      dof += idx * c.dst_strides[d];
    }
    dst[dof] = src[so];
  }
}

template <class E>
__global__ void __launch_bounds__(kThreads) fill_kernel(E* __restrict__ dst, int64_t n, E value) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) dst[i] = value;
}

template <class S, class D>
void launch_cast(DeviceContext& ctx, const void* src, void* dst, int64_t n) {
  launch(cast_kernel<S, D>, grid_for(ctx, n, kThreads), kThreads, 0, ctx.stream, static_cast<const S*>(src),
                                                                             static_cast<D*>(dst), n);
}

// The batched casts (ops/kernels/elementwise.h's CastBatchArgs): tensor t of the launch owns its range of
// blocks (cuda/kernels/multi_tensor.cuh); S is the source type, `to` F16, BF16, F32 or F64 per tensor.
constexpr int kMaxLaunchCasts = 64;
template <class S, class D>
__device__ void cast_range(const CastBatchArgs& a, int64_t first, int64_t step) {
  const S* __restrict__ src = static_cast<const S*>(a.src);
  D* __restrict__ dst = static_cast<D*>(a.dst);
  for (int64_t i = first; i < a.n; i += step) dst[i] = convert_one<S, D>(src[i]);
}

template <class S>
__global__ void __launch_bounds__(kThreads) cast_batch_kernel(const ArgsLaunch<kMaxLaunchCasts, CastBatchArgs> L) {
  const int t = L.part.tensor_of(blockIdx.x);
  const CastBatchArgs& a = L.args[t];
  const int64_t first = L.part.block_in(t, blockIdx.x) * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t step = static_cast<int64_t>(L.part.blocks_of(t)) * blockDim.x;
  switch (a.to) {
    case DType::F16: cast_range<S, f16>(a, first, step); break;
    case DType::BF16: cast_range<S, bf16>(a, first, step); break;
    case DType::F32: cast_range<S, float>(a, first, step); break;
    default: cast_range<S, double>(a, first, step); break;
  }
}

template <class S>
void cast_batch(std::span<const CastBatchArgs> batch) {
  if (batch.empty()) return;
  for (const CastBatchArgs& a : batch)
    HG_CHECK(is_batched_cast(a.from, a.to) && dtype_of<S>::value == a.from, "to(dtype), batched: ", a.from, " -> ",
             a.to, " is not a cast of this table's ", dtype_of<S>::value, "; use cast_kernels");
  launch_batches<kMaxLaunchCasts>(context_for(batch[0].dst), batch, cast_batch_kernel<S>, kThreads);
}

}  // namespace

void cast(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n) {
  if (n <= 0) return;
  DeviceContext& ctx = context_for(dst);
  if (src_dtype == dst_dtype) {
    detail::count_copy();
    HG_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * dtype_size(src_dtype),
                                  cudaMemcpyDeviceToDevice, ctx.stream));
    return;
  }
  visit_storage_dtype(src_dtype, [&](auto s) {
    visit_storage_dtype(dst_dtype, [&](auto d) { launch_cast<decltype(s), decltype(d)>(ctx, src, dst, n); });
  });
}

void fill_pattern(void* dst, int64_t n, size_t elem_size, uint64_t pattern) {
  if (n <= 0) return;
  DeviceContext& ctx = context_for(dst);
  const unsigned grid = grid_for(ctx, n, kThreads);
  switch (elem_size) {
    case 1: launch(fill_kernel<uint8_t>, grid, kThreads, 0, ctx.stream, static_cast<uint8_t*>(dst), n,
                   static_cast<uint8_t>(pattern)); break;
    case 2: launch(fill_kernel<uint16_t>, grid, kThreads, 0, ctx.stream, static_cast<uint16_t*>(dst), n,
                   static_cast<uint16_t>(pattern)); break;
    case 4: launch(fill_kernel<uint32_t>, grid, kThreads, 0, ctx.stream, static_cast<uint32_t*>(dst), n,
                   static_cast<uint32_t>(pattern)); break;
    case 8: launch(fill_kernel<uint64_t>, grid, kThreads, 0, ctx.stream, static_cast<uint64_t*>(dst), n, pattern); break;
    default: HG_FAIL("fill: element size ", elem_size, " is not supported (1, 2, 4 or 8 bytes)");
  }
}

void strided_copy(const StridedCopy& c) {
  int64_t numel = 1;
  for (int d = 0; d < c.ndim; ++d) numel *= c.sizes[d];
  if (numel == 0) return;
  HG_CHECK(c.ndim >= 0 && c.ndim <= kMaxDims, "copy: ndim=", c.ndim, " is out of range [0, ", kMaxDims, "]");
  DeviceContext& ctx = context_for(c.dst);
  const unsigned grid = grid_for(ctx, numel, kThreads);
  switch (c.elem_size) {
    case 1: launch(strided_copy_kernel<uint8_t>, grid, kThreads, 0, ctx.stream, c, numel); break;
    case 2: launch(strided_copy_kernel<uint16_t>, grid, kThreads, 0, ctx.stream, c, numel); break;
    case 4: launch(strided_copy_kernel<uint32_t>, grid, kThreads, 0, ctx.stream, c, numel); break;
    case 8: launch(strided_copy_kernel<uint64_t>, grid, kThreads, 0, ctx.stream, c, numel); break;
    default: HG_FAIL("copy: element size ", c.elem_size, " is not supported (1, 2, 4 or 8 bytes)");
  }
}

// The elementwise kernels (elementwise*.cu), casts and strided copies into their tables.
void register_elementwise() {
  ew_kernels().set_floating(DeviceType::CUDA, []<class T>(type_tag<T>) { return &elementwise<T>; });
  cast_kernels().set(DeviceType::CUDA, DType::F32, &cast);          // slot F32 = any dtype pair
  cast_batch_kernels().set(DeviceType::CUDA, DType::F16, &cast_batch<f16>);
  cast_batch_kernels().set(DeviceType::CUDA, DType::BF16, &cast_batch<bf16>);
  cast_batch_kernels().set(DeviceType::CUDA, DType::F32, &cast_batch<float>);
  copy_kernels().set(DeviceType::CUDA, DType::F32, &strided_copy);  // slot F32 = any element size
}

}  // namespace hg::cuda
