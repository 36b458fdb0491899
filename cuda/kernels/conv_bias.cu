// The bias parts of conv2d on the GPU (cuDNN does the convolutions, cuda/dnn.cpp):
//   forward:  y (n, k, hw) += b (k)          widen both, add in compute_t<T>, one rounding on store;
//   backward: db (k) = sum over n, hw of dy  one block per channel, accumulated in compute_t<T>
//             (F32 for F16/BF16), rounded once.
// The forward bias is added to the already rounded conv output (two roundings for F16/BF16, where the
// CPU rounds once): within one ulp of the output dtype, the dtype tolerance of the GPU tests.
#include "cuda/check.h"
#include "cuda/context.h"
#include "cuda/launch.h"
#include "cuda/dnn.h"

namespace hg::cuda::dnn {
namespace {

constexpr int kThreads = 256;
constexpr int kWarp = 32;

template <class T>
__global__ void __launch_bounds__(kThreads)
    bias_add_kernel(T* __restrict__ y, const T* __restrict__ b, int64_t total, int64_t k, int64_t hw) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t ch = (i / hw) % k;
    y[i] = store<T>(load(y[i]) + load(b[ch]));
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    bias_grad_kernel(const T* __restrict__ dy, T* __restrict__ db, int64_t n, int64_t k, int64_t hw) {
  using C = compute_t<T>;
  __shared__ C sh[kThreads / kWarp];
  const int64_t per_channel = n * hw;
  for (int64_t ch = blockIdx.x; ch < k; ch += gridDim.x) {
    C acc = 0;
    for (int64_t j = threadIdx.x; j < per_channel; j += blockDim.x) {
      const int64_t img = j / hw, p = j - img * hw;
      acc += load(dy[(img * k + ch) * hw + p]);
    }
    for (int o = kWarp / 2; o > 0; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    __syncthreads();  // sh may still be read for the previous channel
    if (lane == 0) sh[warp] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
      C total = 0;
      for (int w = 0; w < kThreads / kWarp; ++w) total += sh[w];
      db[ch] = store<T>(total);
    }
  }
}

}  // namespace

template <class T>
void conv_bias_add(void* y, const void* b, int64_t n, int64_t k, int64_t hw, const DeviceContext& ctx) {
  const int64_t total = n * k * hw;
  if (total == 0) return;
  launch(bias_add_kernel<T>, grid_for(ctx, total, kThreads), kThreads, 0, ctx.stream,
      static_cast<T*>(y), static_cast<const T*>(b), total, k, hw);
}

template <class T>
void conv_bias_grad(const void* dy, void* db, int64_t n, int64_t k, int64_t hw, const DeviceContext& ctx) {
  if (k == 0) return;
  // One block per channel (grid_for caps the grid; the blocks then loop over channels).
  launch(bias_grad_kernel<T>, grid_for(ctx, k, 1), kThreads, 0, ctx.stream, static_cast<const T*>(dy),
                                                                         static_cast<T*>(db), n, k, hw);
}

#define HG_CONV_BIAS_INSTANTIATE(T)                                                                   \
  template void conv_bias_add<T>(void*, const void*, int64_t, int64_t, int64_t, const DeviceContext&); \
  template void conv_bias_grad<T>(const void*, void*, int64_t, int64_t, int64_t, const DeviceContext&);
HG_CONV_BIAS_INSTANTIATE(float)
HG_CONV_BIAS_INSTANTIATE(f16)
HG_CONV_BIAS_INSTANTIATE(bf16)
HG_CONV_BIAS_INSTANTIATE(double)
#undef HG_CONV_BIAS_INSTANTIATE

}  // namespace hg::cuda::dnn
