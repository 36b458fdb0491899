// FP8 scaling on the GPU (ops/kernels/fp8.h, the math cpu/fp8.cpp runs): the scaled cast
// with its amax in the same pass (a warp folds its threads' amaxes, lane 0 takes atomicMax on the bits, which
// order as the values do for |x| and put NaN above inf), the scaled decode, the one-thread scale update, and
// MX block scaling (a thread per block of 32, a thread per decoded element).
#include "cuda/check.h"
#include "cuda/context.h"
#include "cuda/kernels/kernels.h"
#include "cuda/launch.h"
#include "cuda/register.h"
#include "ops/kernels/fp8.h"

namespace hg::cuda {

namespace {

constexpr int kThreads = 256;

template <class T, class Q>
__global__ void __launch_bounds__(kThreads)
    quantize_kernel(const T* __restrict__ x, Q* __restrict__ q, int64_t n, const float* __restrict__ scale_at,
                    float* amax, bool saturate) {
  const float scale = scale_at != nullptr ? *scale_at : 1.0f;
  float m = 0.0f;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = static_cast<float>(load(x[i]));
    m = amax_fold(m, v);
    if (q != nullptr) q[i] = fp8_encode<Q>(v * scale, saturate);
  }
  if (amax == nullptr) return;  // uniform across the grid: every lane of a warp leaves here or none
  for (int o = 16; o > 0; o /= 2) m = amax_fold(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (threadIdx.x % 32 == 0 && m != 0.0f) atomicMax(reinterpret_cast<unsigned int*>(amax), hg::detail::float_bits(m));
}

template <class T>
void quantize(const Fp8QuantizeArgs& a) {
  if (a.n == 0) return;
  DeviceContext& ctx = context_for(a.x);
  const unsigned grid = grid_for(ctx, a.n, kThreads);
  if (a.q_dtype == DType::F8E4M3)
    launch(quantize_kernel<T, f8e4m3>, grid, kThreads, 0, ctx.stream, static_cast<const T*>(a.x),
           static_cast<f8e4m3*>(a.q), a.n, a.scale, a.amax, a.saturate);
  else
    launch(quantize_kernel<T, f8e5m2>, grid, kThreads, 0, ctx.stream, static_cast<const T*>(a.x),
           static_cast<f8e5m2*>(a.q), a.n, a.scale, a.amax, a.saturate);
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    dequantize_kernel(const uint8_t* __restrict__ q, T* __restrict__ y, int64_t n, const float* __restrict__ scale_inv,
                      bool e4m3) {
  const float s = *scale_inv;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = store<T>((e4m3 ? f8e4m3_bits_to_float(q[i]) : f8e5m2_bits_to_float(q[i])) * s);
}

template <class T>
void dequantize(const Fp8DequantizeArgs& a) {
  if (a.n == 0) return;
  DeviceContext& ctx = context_for(a.y);
  launch(dequantize_kernel<T>, grid_for(ctx, a.n, kThreads), kThreads, 0, ctx.stream, static_cast<const uint8_t*>(a.q),
         static_cast<T*>(a.y), a.n, a.scale_inv, a.q_dtype == DType::F8E4M3);
}

__global__ void scale_kernel(Fp8ScaleArgs a) { fp8_scale_update(a); }

void scale_update(const Fp8ScaleArgs& a) {
  DeviceContext& ctx = context_for(a.scale);
  launch(scale_kernel, 1, 1, 0, ctx.stream, a);
}

// MX: one thread per block (o, b, i) (ops/kernels/fp8.h, mx_quantize_block): along the last dim a thread
// reads its 32 values, along an outer dim neighbouring threads read neighbouring columns. The grid's y runs
// over `outer` (and x over the blocks and columns of one), which keeps the index math to one division.
__global__ void __launch_bounds__(kThreads)
    mx_quantize_kernel(const float* __restrict__ x, uint8_t* __restrict__ q, float* __restrict__ scale, int64_t outer,
                       int64_t len, int64_t inner, int64_t block, MxFormat format, MxScaleRule rule) {
  const int64_t blocks = (len + block - 1) / block, per_outer = blocks * inner;
  for (int64_t o = blockIdx.y; o < outer; o += gridDim.y)
    for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < per_outer;
         t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const int64_t b = t / inner, i = t - b * inner;
      const int64_t l0 = b * block, l1 = l0 + block < len ? l0 + block : len;
      const float* xb = x + o * len * inner + i;
      uint8_t* qb = q + o * len * inner + i;
      float amax = 0.0f;
      for (int64_t l = l0; l < l1; ++l) amax = amax_fold(amax, xb[l * inner]);
      const MxBlockScale s = mx_block_scale(amax, format, rule);
      scale[o * per_outer + t] = s.scale;
      for (int64_t l = l0; l < l1; ++l) qb[l * inner] = mx_encode(xb[l * inner] * s.inv, format);
    }
}

dim3 mx_grid(DeviceContext& ctx, int64_t outer, int64_t per_outer) {
  const unsigned x = grid_for(ctx, per_outer, kThreads);
  const unsigned y = static_cast<unsigned>(outer < 65535 ? outer : 65535);
  return dim3(x, y);
}

void mx_quantize(const MxQuantizeArgs& a) {
  const int64_t per_outer = ((a.len + a.block - 1) / a.block) * a.inner;
  if (a.outer == 0 || per_outer == 0) return;
  DeviceContext& ctx = context_for(a.x);
  launch(mx_quantize_kernel, mx_grid(ctx, a.outer, per_outer), kThreads, 0, ctx.stream, a.x, a.q, a.scale, a.outer,
         a.len, a.inner, a.block, a.format, a.rule);
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    mx_dequantize_kernel(const uint8_t* __restrict__ q, const float* __restrict__ scale, T* __restrict__ y, int64_t outer,
                         int64_t len, int64_t inner, int64_t block, bool e4m3) {
  const int64_t blocks = (len + block - 1) / block, per_outer = len * inner;
  for (int64_t o = blockIdx.y; o < outer; o += gridDim.y)
    for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < per_outer;
         t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const int64_t l = t / inner, i = t - l * inner, e = o * per_outer + t;
      const float v = e4m3 ? f8e4m3_bits_to_float(q[e]) : f8e5m2_bits_to_float(q[e]);
      y[e] = store<T>(v * scale[(o * blocks + l / block) * inner + i]);
    }
}

template <class T>
void mx_dequantize(const MxDequantizeArgs& a) {
  const int64_t per_outer = a.len * a.inner;
  if (a.outer == 0 || per_outer == 0) return;
  DeviceContext& ctx = context_for(a.y);
  launch(mx_dequantize_kernel<T>, mx_grid(ctx, a.outer, per_outer), kThreads, 0, ctx.stream, a.q, a.scale,
         static_cast<T*>(a.y), a.outer, a.len, a.inner, a.block, a.e4m3);
}

}  // namespace

void register_fp8() {
  fp8_quantize_kernels().set_floating(DeviceType::CUDA, []<class T>(type_tag<T>) { return &quantize<T>; });
  fp8_dequantize_kernels().set_floating(DeviceType::CUDA, []<class T>(type_tag<T>) { return &dequantize<T>; });
  fp8_scale_kernels().set(DeviceType::CUDA, DType::F32, &scale_update);
  mx_quantize_kernels().set(DeviceType::CUDA, DType::F32, &mx_quantize);
  mx_dequantize_kernels().set_floating(DeviceType::CUDA, []<class T>(type_tag<T>) { return &mx_dequantize<T>; });
}

}  // namespace hg::cuda
