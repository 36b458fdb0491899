// Optimizer updates and gradient clipping on the GPU: grid-stride loops that index memory and call
// ops/kernels/optim.h's functors, the same math the CPU loops (cpu/optim.cpp) run. One thread per
// element: widen the parameter (or read its F32 master), update in the compute type, round once.
// Note: nvcc contracts a * b + c into FMAs by default, so results may differ from the CPU's in the
// last bit. On the grad scaler's device path the kernels also read found_inf, the device 1/scale and
// the step counter (ops/kernels/optim.h's DeviceStep) and derive their scalars with the host's functions.
#include <type_traits>

#include "core/rng.h"

#include "cuda/check.h"
#include "cuda/context.h"
#include "cuda/kernels/kernels.h"
#include "cuda/kernels/optim.h"
#include "cuda/launch.h"
#include "cuda/register.h"

namespace hg::cuda {
namespace {

using optim::AdamUpdate;
using optim::GradTransformFn;
using optim::NormTerm;
using optim::SgdUpdate;

constexpr int kThreads = 256;
constexpr int kWarp = 32;

// x = p[i] in the compute type: the master copy when there is one.
template <class T, class C = compute_t<T>>
__device__ __forceinline__ C load_param(const T* p, const float* master, int64_t i) {
  if constexpr (std::is_same_v<T, C>) return p[i];
  else return master ? master[i] : load(p[i]);
}

// The updated value back into the parameter: into its master and rounded to nearest, or, without a master,
// as the store says (ops/kernels/optim.h: Philox word i % 4 of block i / 4 for a stochastic store).
template <class T, class C = compute_t<T>>
__device__ __forceinline__ void store_param(T* p, float* master, int64_t i, C v, const optim::ParamStore& st) {
  if constexpr (!std::is_same_v<T, C>) {
    if (master) {
      master[i] = v;
    } else if (st.rounding != ParamRounding::Nearest) {
      uint32_t w[4] = {0, 0, 0, 0};
      if (st.rounding == ParamRounding::Stochastic) Philox4x32::words(st.seed, st.offset, static_cast<uint64_t>(i / 4), w);
      optim::store_param_rounded(p, i, v, st, w[i % 4]);
      return;
    }
  }
  p[i] = store<T>(v);
}

// p, g: n elements of T; buf: n of compute_t<T> or null (no momentum); master: n floats or null.
// With the grad scaler's device path (ops/kernels/optim.h's DeviceStep) the kernel reads found_inf and
// returns at once when it is set, and derives its scalars from s and the device values; else it
// takes f as the host built it.
template <class T>
__global__ void __launch_bounds__(kThreads)
    sgd_kernel(T* __restrict__ p, const T* __restrict__ g, compute_t<T>* __restrict__ buf, float* __restrict__ master,
               int64_t n, SgdUpdate<compute_t<T>> host_f, optim::SgdScalars s, optim::DeviceStep amp,
               optim::ParamStore st) {
  using C = compute_t<T>;
  if (optim::amp_skips(amp)) return;  // torch's fused optimizers: an inf/NaN step changes nothing
  const SgdUpdate<C> f = optim::amp_on_device(amp) ? SgdUpdate<C>(optim::sgd_scalars_for(s, amp, buf != nullptr)) : host_f;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    C x = load_param(p, master, i);
    C b = buf ? buf[i] : C(0);  // values, not references: a reference to a local would live in local memory
    f(x, load(g[i]), b);
    if (buf) buf[i] = b;
    store_param(p, master, i, x, st);
  }
}

// m, v (and vmax with amsgrad, else null): n elements of compute_t<T>.
template <class T>
__global__ void __launch_bounds__(kThreads)
    adam_kernel(T* __restrict__ p, const T* __restrict__ g, compute_t<T>* __restrict__ m, compute_t<T>* __restrict__ v,
                compute_t<T>* __restrict__ vmax, float* __restrict__ master, int64_t n, AdamUpdate<compute_t<T>> host_f,
                optim::AdamScalars s, optim::AdamHyper h, optim::DeviceStep amp, optim::ParamStore st) {
  using C = compute_t<T>;
  if (optim::amp_skips(amp)) return;  // torch's fused optimizers: an inf/NaN step changes nothing
  // with a device step counter: the bias corrections of the step this one is (ops/kernels/optim.h)
  const AdamUpdate<C> f = optim::amp_on_device(amp) ? AdamUpdate<C>(optim::adam_scalars_for(s, h, amp)) : host_f;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    C x = load_param(p, master, i), mi = m[i], vi = v[i], vm = vmax ? vmax[i] : C(0);
    f(x, load(g[i]), mi, vi, vm);
    m[i] = mi;
    v[i] = vi;
    if (vmax) vmax[i] = vm;
    store_param(p, master, i, x, st);
  }
}

// *result += w * sum |g|^p (or = max(*result, w * max |g|)) over n elements, w = optim::norm_weight of the
// gradient's pending factor; one atomic per block.
template <class T>
__global__ void __launch_bounds__(kThreads)
    grad_norm_kernel(const T* __restrict__ g, int64_t n, double norm_type, bool inf, double* __restrict__ result,
                     const float* inv_scale, double host) {
  __shared__ double sh[kThreads / kWarp];
  const NormTerm term{norm_type};
  double acc = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const double x = static_cast<double>(load(g[i]));
    acc = inf ? optim::nan_max(acc, fabs(x)) : acc + term(x);
  }
  for (int o = kWarp / 2; o > 0; o /= 2) {
    const double other = __shfl_xor_sync(0xffffffffu, acc, o);
    acc = inf ? optim::nan_max(acc, other) : acc + other;
  }
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (lane == 0) sh[warp] = acc;
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int w = 1; w < static_cast<int>(blockDim.x) / kWarp; ++w) acc = inf ? optim::nan_max(acc, sh[w]) : acc + sh[w];
  const double weight =
      optim::norm_weight({.norm_type = norm_type, .inv_scale = inv_scale, .host = host});
  if (weight != 1.0) acc *= weight;
  // acc >= 0 (or a NaN made positive by fabs): such doubles order as their bit patterns, NaN above inf.
  if (inf) atomicMax(reinterpret_cast<unsigned long long*>(result), static_cast<unsigned long long>(__double_as_longlong(acc)));
  else atomicAdd(result, acc);
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    grad_transform_kernel(T* __restrict__ g, int64_t n, optim::GradTransform op, double value,
                          const double* device_value) {
  using C = compute_t<T>;
  const GradTransformFn<C> f{op, static_cast<C>(device_value != nullptr ? *device_value : value)};
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    g[i] = store<T>(f(load(g[i])));
}

// After an update kernel on the device path: advance the step counter unless the step was skipped.
__global__ void count_step_kernel(optim::DeviceStep amp) { optim::amp_count_step(amp); }

__global__ void clip_coef_kernel(optim::ClipCoefArgs a) { optim::clip_coef(a); }

void count_step(const DeviceContext& ctx, const optim::DeviceStep& amp) {
  if (amp.steps == nullptr) return;
  launch(count_step_kernel, 1, 1, 0, ctx.stream, amp);
}

}  // namespace

template <class T>
void sgd_update(const optim::SgdArgs& a) {
  check_update_args(dtype_v<T>, a);
  using C = compute_t<T>;
  DeviceContext& ctx = context_for(a.param);
  if (a.n > 0) {
    launch(sgd_kernel<T>, grid_for(ctx, a.n, kThreads), kThreads, 0, ctx.stream,
        static_cast<T*>(a.param), static_cast<const T*>(a.grad), static_cast<C*>(a.momentum_buffer), a.master, a.n,
        SgdUpdate<C>(a.s), a.s, a.amp, a.store);
  }
  count_step(ctx, a.amp);  // a separate launch: every thread of the update reads the counter
}

template <class T>
void adam_update(const optim::AdamArgs& a) {
  check_update_args(dtype_v<T>, a);
  using C = compute_t<T>;
  DeviceContext& ctx = context_for(a.param);
  if (a.n > 0) {
    launch(adam_kernel<T>, grid_for(ctx, a.n, kThreads), kThreads, 0, ctx.stream,
        static_cast<T*>(a.param), static_cast<const T*>(a.grad), static_cast<C*>(a.exp_avg),
        static_cast<C*>(a.exp_avg_sq), static_cast<C*>(a.max_exp_avg_sq), a.master, a.n, AdamUpdate<C>(a.s), a.s, a.h,
        a.amp, a.store);
  }
  count_step(ctx, a.amp);  // a separate launch: every thread of the update reads the counter
}

template <class T>
void grad_norm(const optim::GradNormArgs& a) {
  if (a.n == 0) return;
  DeviceContext& ctx = context_for(a.result);
  const bool inf = a.norm_type == static_cast<double>(INFINITY);
  launch(grad_norm_kernel<T>, grid_for(ctx, a.n, kThreads), kThreads, 0, ctx.stream, static_cast<const T*>(a.grad), a.n,
         a.norm_type, inf, a.result, a.inv_scale, a.host);
}

void clip_coefficient(const optim::ClipCoefArgs& a) {
  launch(clip_coef_kernel, 1, 1, 0, context_for(a.out).stream, a);
}

template <class T>
void grad_transform(const optim::GradTransformArgs& a) {
  if (a.n == 0) return;
  DeviceContext& ctx = context_for(a.grad);
  launch(grad_transform_kernel<T>, grid_for(ctx, a.n, kThreads), kThreads, 0, ctx.stream, static_cast<T*>(a.grad), a.n,
         a.op, a.value, a.device_value);
}

#define HG_INSTANTIATE(T)                                                 \
  template void sgd_update<T>(const optim::SgdArgs&);                     \
  template void adam_update<T>(const optim::AdamArgs&);                   \
  template void grad_norm<T>(const optim::GradNormArgs&);                 \
  template void grad_transform<T>(const optim::GradTransformArgs&);
HG_FOR_FLOATING(HG_INSTANTIATE)
#undef HG_INSTANTIATE

void register_optim() {
  optim::sgd_kernels().set_floating(DeviceType::CUDA, []<class T>(type_tag<T>) { return &sgd_update<T>; });
  optim::adam_kernels().set_floating(DeviceType::CUDA, []<class T>(type_tag<T>) { return &adam_update<T>; });
  optim::grad_norm_kernels().set_floating(DeviceType::CUDA, []<class T>(type_tag<T>) { return &grad_norm<T>; });
  optim::grad_transform_kernels().set_floating(DeviceType::CUDA, []<class T>(type_tag<T>) { return &grad_transform<T>; });
  optim::clip_coef_kernels().set(DeviceType::CUDA, DType::F64, &clip_coefficient);
}

}  // namespace hg::cuda
