// batch_norm and layer_norm on the GPU (contract in ops/norm.h). The math is ops/norm_math.h, the
// functions the CPU kernels (cpu/norm.cpp) and their tests run; these kernels index memory and
// combine partial sums. One block per group (a channel of (N, C, S) for batch_norm, a row for
// layer_norm), grid-strided over the groups: two passes for the statistics (the mean, then the squared
// deviations from it), one for the output; backward one pass for the group's two sums and one for dx.
// layer_norm's dweight/dbias sum over rows: one thread per column, rows in order. Sums are in the
// compute type (float, double for F64) in a fixed tree order: deterministic, no atomics.
#include "cuda/check.h"
#include "cuda/context.h"
#include "cuda/kernels/kernels.h"
#include "cuda/launch.h"
#include "cuda/register.h"
#include "ops/kernels/norm.h"
#include "ops/norm.h"
#include "ops/norm_math.h"

namespace hg::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarp = 32;

// Every thread of the block gets the sums of a and b over the block. sh holds 2 * kThreads / kWarp values.
template <class C>
__device__ void block_sum2(C& a, C& b, C* sh) {
  for (int o = kWarp / 2; o > 0; o /= 2) {
    a += __shfl_xor_sync(0xffffffffu, a, o);
    b += __shfl_xor_sync(0xffffffffu, b, o);
  }
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  __syncthreads();  // sh may still be read from the previous call
  if (lane == 0) {
    sh[warp] = a;
    sh[kThreads / kWarp + warp] = b;
  }
  __syncthreads();
  a = sh[0];
  b = sh[kThreads / kWarp];
  for (int w = 1; w < kThreads / kWarp; ++w) {
    a += sh[w];
    b += sh[kThreads / kWarp + w];
  }
}

// Where element e of a group lives: batch_norm's channel ch of (n, c, s) is n runs of s; a layer_norm
// row is contiguous.
struct ChannelIndex {
  int64_t c, s, ch;
  __device__ int64_t operator()(int64_t e) const {
    const int64_t i = e / s;
    return (i * c + ch) * s + (e - i * s);
  }
};
struct RowIndex {
  int64_t k, r;
  __device__ int64_t operator()(int64_t e) const { return r * k + e; }
};

// The gradient of a group's normalised element: dy for batch_norm (its weight is the channel's, outside
// the sums), dy * w[j] for layer_norm.
template <class T>
struct ChannelGrad {
  const T* dy;
  ChannelIndex at;
  __device__ compute_t<T> operator()(int64_t e) const { return load(dy[at(e)]); }
};
template <class T>
struct RowGrad {
  const T* dy;
  const compute_t<T>* w;  // null: no weight
  int64_t base;
  __device__ compute_t<T> operator()(int64_t j) const {
    return w ? load(dy[base + j]) * w[j] : load(dy[base + j]);
  }
};

// The mean and biased variance of a group of m elements (two passes); every thread gets both.
template <class T, class Index>
__device__ void group_stats(const T* __restrict__ x, int64_t m, Index at, compute_t<T>* sh, compute_t<T>& mean,
                            compute_t<T>& var) {
  using C = compute_t<T>;
  C s = 0, unused = 0;  // block_sum2 adds two values at once; the statistics need one per pass
  for (int64_t e = threadIdx.x; e < m; e += blockDim.x) s += load(x[at(e)]);
  block_sum2(s, unused, sh);
  mean = s / static_cast<C>(m);
  C q = 0;
  for (int64_t e = threadIdx.x; e < m; e += blockDim.x) {
    const C d = load(x[at(e)]) - mean;
    q += d * d;
  }
  block_sum2(q, unused, sh);
  var = q / static_cast<C>(m);
}

// The sums of g(e) and g(e) * (x - mean) over a group of m elements; every thread gets both.
template <class T, class Index, class G>
__device__ void grad_sums(const T* __restrict__ x, int64_t m, Index at, compute_t<T> mean, G g, compute_t<T>* sh,
                          compute_t<T>& sum_g, compute_t<T>& sum_g_xc) {
  sum_g = 0, sum_g_xc = 0;
  for (int64_t e = threadIdx.x; e < m; e += blockDim.x) {
    const compute_t<T> v = g(e);
    sum_g += v;
    sum_g_xc += v * (load(x[at(e)]) - mean);
  }
  block_sum2(sum_g, sum_g_xc, sh);
}

template <class T>
__device__ compute_t<T>* cptr(void* p) {
  return static_cast<compute_t<T>*>(p);
}
template <class T>
__device__ const compute_t<T>* cptr(const void* p) {
  return static_cast<const compute_t<T>*>(p);
}

// ---- batch_norm ----------------------------------------------------------------------------------

template <class T>
__global__ void __launch_bounds__(kThreads) bn_forward_kernel(BatchNormArgs a) {
  using C = compute_t<T>;
  __shared__ C sh[2 * kThreads / kWarp];
  const T* x = static_cast<const T*>(a.x);
  const int64_t m = a.n * a.s;
  for (int64_t ch = blockIdx.x; ch < a.c; ch += gridDim.x) {
    const ChannelIndex at{a.c, a.s, ch};
    C mean, var;
    if (a.training) {
      group_stats(x, m, at, sh, mean, var);
      if (threadIdx.x == 0 && a.running_mean)
        cptr<T>(a.running_mean)[ch] = normfn::running_update(cptr<T>(a.running_mean)[ch], mean, a.momentum);
      if (threadIdx.x == 0 && a.running_var)
        cptr<T>(a.running_var)[ch] =
            normfn::running_update(cptr<T>(a.running_var)[ch], normfn::unbiased(var, m), a.momentum);
    } else {
      mean = cptr<T>(a.running_mean)[ch];
      var = cptr<T>(a.running_var)[ch];
    }
    const C invstd = normfn::invstd(var, a.eps);
    if (threadIdx.x == 0) {
      cptr<T>(a.mean)[ch] = mean;
      cptr<T>(a.invstd)[ch] = invstd;
    }
    const C scale = a.weight ? invstd * cptr<T>(a.weight)[ch] : invstd;
    const C shift = a.bias ? cptr<T>(a.bias)[ch] : C(0);
    for (int64_t e = threadIdx.x; e < m; e += blockDim.x) {
      const int64_t i = at(e);
      static_cast<T*>(a.y)[i] = store<T>(normfn::forward(load(x[i]), mean, scale, shift));
    }
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads) bn_backward_kernel(BatchNormArgs a) {
  using C = compute_t<T>;
  __shared__ C sh[2 * kThreads / kWarp];
  const T *x = static_cast<const T*>(a.x), *dy = static_cast<const T*>(a.dy);
  const int64_t m = a.n * a.s;
  for (int64_t ch = blockIdx.x; ch < a.c; ch += gridDim.x) {
    const ChannelIndex at{a.c, a.s, ch};
    const C mean = cptr<T>(a.mean)[ch], invstd = cptr<T>(a.invstd)[ch];
    C sum_dy = 0, sum_dy_xc = 0;
    if (a.training || a.dweight || a.dbias)
      grad_sums(x, m, at, mean, ChannelGrad<T>{dy, at}, sh, sum_dy, sum_dy_xc);
    if (threadIdx.x == 0 && a.dweight) cptr<T>(a.dweight)[ch] = sum_dy_xc * invstd;
    if (threadIdx.x == 0 && a.dbias) cptr<T>(a.dbias)[ch] = sum_dy;
    if (!a.dx) continue;
    const C scale = a.weight ? invstd * cptr<T>(a.weight)[ch] : invstd;
    const normfn::GradCoef<C> k =
        a.training ? normfn::grad_coef(sum_dy, sum_dy_xc, invstd, m) : normfn::GradCoef<C>{};
    for (int64_t e = threadIdx.x; e < m; e += blockDim.x) {
      const int64_t i = at(e);
      static_cast<T*>(a.dx)[i] = store<T>(normfn::grad_x(load(dy[i]), load(x[i]) - mean, k, scale));
    }
  }
}

// ---- layer_norm ----------------------------------------------------------------------------------

template <class T>
__global__ void __launch_bounds__(kThreads) ln_forward_kernel(LayerNormArgs a) {
  using C = compute_t<T>;
  __shared__ C sh[2 * kThreads / kWarp];
  const T* x = static_cast<const T*>(a.x);
  const C *w = cptr<T>(a.weight), *b = cptr<T>(a.bias);
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    C mean, var;
    group_stats(x, a.k, RowIndex{a.k, r}, sh, mean, var);
    const C invstd = normfn::invstd(var, a.eps);
    if (threadIdx.x == 0) {
      cptr<T>(a.mean)[r] = mean;
      cptr<T>(a.invstd)[r] = invstd;
    }
    for (int64_t j = threadIdx.x; j < a.k; j += blockDim.x) {
      const int64_t i = r * a.k + j;
      static_cast<T*>(a.y)[i] =
          store<T>(normfn::forward(load(x[i]), mean, w ? invstd * w[j] : invstd, b ? b[j] : C(0)));
    }
  }
}

// dx, one block per row.
template <class T>
__global__ void __launch_bounds__(kThreads) ln_backward_dx_kernel(LayerNormArgs a) {
  using C = compute_t<T>;
  __shared__ C sh[2 * kThreads / kWarp];
  const T *x = static_cast<const T*>(a.x), *dy = static_cast<const T*>(a.dy);
  const C* w = cptr<T>(a.weight);
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const C mean = cptr<T>(a.mean)[r], invstd = cptr<T>(a.invstd)[r];
    const int64_t base = r * a.k;
    const RowGrad<T> g{dy, w, base};
    C sum_g, sum_g_xc;
    grad_sums(x, a.k, RowIndex{a.k, r}, mean, g, sh, sum_g, sum_g_xc);
    const normfn::GradCoef<C> k = normfn::grad_coef(sum_g, sum_g_xc, invstd, a.k);
    for (int64_t j = threadIdx.x; j < a.k; j += blockDim.x)
      static_cast<T*>(a.dx)[base + j] = store<T>(normfn::grad_x(g(j), load(x[base + j]) - mean, k, invstd));
  }
}

// dweight and dbias: one thread per column, summing over the rows in order.
template <class T>
__global__ void __launch_bounds__(kThreads) ln_backward_params_kernel(LayerNormArgs a) {
  using C = compute_t<T>;
  const T *x = static_cast<const T*>(a.x), *dy = static_cast<const T*>(a.dy);
  const C *mean = cptr<T>(a.mean), *invstd = cptr<T>(a.invstd);
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < a.k; j += step) {
    C dw = 0, db = 0;
    for (int64_t r = 0; r < a.rows; ++r) {
      const C g = load(dy[r * a.k + j]);
      dw += g * ((load(x[r * a.k + j]) - mean[r]) * invstd[r]);
      db += g;
    }
    if (a.dweight) cptr<T>(a.dweight)[j] = dw;
    if (a.dbias) cptr<T>(a.dbias)[j] = db;
  }
}

}  // namespace

template <class T>
void batch_norm_forward(const BatchNormArgs& a) {
  if (a.c == 0) return;
  DeviceContext& ctx = context_for(a.mean);  // (c) elements: never empty here
  launch(bn_forward_kernel<T>, grid_for(ctx, a.c, 1), kThreads, 0, ctx.stream, a);
}

template <class T>
void batch_norm_backward(const BatchNormArgs& a) {
  if (a.c == 0) return;
  DeviceContext& ctx = context_for(a.mean);
  launch(bn_backward_kernel<T>, grid_for(ctx, a.c, 1), kThreads, 0, ctx.stream, a);
}

template <class T>
void layer_norm_forward(const LayerNormArgs& a) {
  if (a.rows == 0 || a.k == 0) return;
  DeviceContext& ctx = context_for(a.y);
  launch(ln_forward_kernel<T>, grid_for(ctx, a.rows, 1), kThreads, 0, ctx.stream, a);
}

template <class T>
void layer_norm_backward(const LayerNormArgs& a) {
  if (a.k == 0) return;
  if (a.dx && a.rows > 0) {
    DeviceContext& ctx = context_for(a.dx);
    launch(ln_backward_dx_kernel<T>, grid_for(ctx, a.rows, 1), kThreads, 0, ctx.stream, a);
  }
  if (a.dweight || a.dbias) {  // also for no rows: the sums are then zeros
    DeviceContext& ctx = context_for(a.dweight ? a.dweight : a.dbias);
    launch(ln_backward_params_kernel<T>, grid_for(ctx, a.k, kThreads), kThreads, 0, ctx.stream, a);
  }
}

void register_norm() {
  batch_norm_forward_kernels().set_floating(DeviceType::CUDA, []<class T>(type_tag<T>) { return &batch_norm_forward<T>; });
  batch_norm_backward_kernels().set_floating(DeviceType::CUDA, []<class T>(type_tag<T>) { return &batch_norm_backward<T>; });
  layer_norm_forward_kernels().set_floating(DeviceType::CUDA, []<class T>(type_tag<T>) { return &layer_norm_forward<T>; });
  layer_norm_backward_kernels().set_floating(DeviceType::CUDA, []<class T>(type_tag<T>) { return &layer_norm_backward<T>; });
}

}  // namespace hg::cuda
