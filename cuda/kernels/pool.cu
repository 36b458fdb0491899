// Pooling on the GPU: one thread per output (forward) and one per input element (backward, a gather
// over the outputs whose windows cover it: no atomics, deterministic, every dx element written once).
// Each thread calls the window math of ops/pool_math.h, the functions the CPU kernels and their tests
// run; F16/BF16 widen on load and round once on store.
#include "cuda/check.h"
#include "cuda/context.h"
#include "cuda/kernels/kernels.h"
#include "cuda/kernels/pool.h"
#include "cuda/launch.h"
#include "cuda/register.h"
#include "ops/kernels/pool.h"

namespace hg::cuda {
namespace {

constexpr int kThreads = 256;

// y (planes, OH, OW) from x (planes, H, W); Max also writes each window's flat argmax.
template <class T>
__global__ void __launch_bounds__(kThreads)
    pool_forward_kernel(PoolGeom g, int64_t planes, const T* __restrict__ x, T* __restrict__ y,
                        int64_t* __restrict__ indices) {
  const int64_t out = g.h.out * g.w.out, in = g.h.in * g.w.in, total = planes * out;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += step) {
    const int64_t p = e / out, o = e - p * out, oh = o / g.w.out, ow = o - oh * g.w.out;
    const T* plane = x + p * in;
    if (g.kind == PoolKind::Max) {
      int64_t arg = -1;
      y[e] = store<T>(max_pool_at(g, plane, oh, ow, arg));
      indices[e] = arg;
    } else {
      y[e] = store<T>(avg_pool_at(g, plane, oh, ow));
    }
  }
}

// dx (planes, H, W) from dy (planes, OH, OW) and, for Max, the forward's indices.
template <class T>
__global__ void __launch_bounds__(kThreads)
    pool_backward_kernel(PoolGeom g, int64_t planes, const T* __restrict__ dy, const int64_t* __restrict__ indices,
                         T* __restrict__ dx) {
  const int64_t out = g.h.out * g.w.out, in = g.h.in * g.w.in, total = planes * in;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += step) {
    const int64_t p = e / in, i = e - p * in, ih = i / g.w.in, iw = i - ih * g.w.in;
    const T* dy_plane = dy + p * out;
    dx[e] = store<T>(g.kind == PoolKind::Max ? max_pool_grad_at(g, dy_plane, indices + p * out, ih, iw)
                                             : avg_pool_grad_at(g, dy_plane, ih, iw));
  }
}

}  // namespace

template <class T>
void pool2d_forward(const PoolArgs& a) {
  const int64_t total = a.planes * a.g.h.out * a.g.w.out;
  if (total == 0) return;
  HG_CHECK(a.g.kind != PoolKind::Max || a.indices, "max_pool2d: the CUDA kernel needs an indices buffer");
  DeviceContext& ctx = context_for(a.y);
  launch(pool_forward_kernel<T>, grid_for(ctx, total, kThreads), kThreads, 0, ctx.stream,
      a.g, a.planes, static_cast<const T*>(a.x), static_cast<T*>(a.y), a.indices);
}

template <class T>
void pool2d_backward(const PoolArgs& a) {
  const int64_t total = a.planes * a.g.h.in * a.g.w.in;
  if (total == 0) return;
  HG_CHECK(a.g.kind != PoolKind::Max || a.indices, "max_pool2d backward: the CUDA kernel needs the forward's indices");
  DeviceContext& ctx = context_for(a.dx);
  launch(pool_backward_kernel<T>, grid_for(ctx, total, kThreads), kThreads, 0, ctx.stream,
      a.g, a.planes, static_cast<const T*>(a.dy), a.indices, static_cast<T*>(a.dx));
}

#define HG_INSTANTIATE(T)                               \
  template void pool2d_forward<T>(const PoolArgs&);     \
  template void pool2d_backward<T>(const PoolArgs&);
HG_FOR_FLOATING(HG_INSTANTIATE)
#undef HG_INSTANTIATE

void register_pool() {
  pool2d_forward_kernels().set_floating(DeviceType::CUDA, []<class T>(type_tag<T>) { return &pool2d_forward<T>; });
  pool2d_backward_kernels().set_floating(DeviceType::CUDA, []<class T>(type_tag<T>) { return &pool2d_backward<T>; });
}

}  // namespace hg::cuda
