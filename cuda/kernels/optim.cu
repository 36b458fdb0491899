// Optimizer updates and gradient clipping on the GPU: grid-stride loops that index memory and call
// the rules of ops/kernels/optim_rules.h and ops/kernels/optim.h's clipping functors, the same math the CPU
// loops (cpu/optim.cpp) run; one update kernel template runs every rule. One thread per
// element: widen the parameter (or read its F32 master), update in the compute type, round once.
// Note: nvcc contracts a * b + c into FMAs by default, so results may differ from the CPU's in the
// last bit. On the grad scaler's device path the kernels also read found_inf, the device 1/scale and
// the step counter (ops/kernels/optim.h's DeviceStep) and derive their scalars with the host's functions.
#include <span>
#include <type_traits>

#include "core/rng.h"

#include "cuda/check.h"
#include "cuda/context.h"
#include "cuda/kernels/kernels.h"
#include "cuda/kernels/multi_tensor.cuh"
#include "cuda/kernels/optim.h"
#include "cuda/launch.h"
#include "cuda/register.h"
#include "ops/kernels/optim_rules.h"

namespace hg::cuda {
namespace {

using optim::GradTransformFn;
using optim::NormTerm;

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
      if (st.rounding == ParamRounding::Stochastic)
        Philox4x32::words(st.rng.seed_now(), st.rng.offset_now(), static_cast<uint64_t>(i / 4), w);
      // word i % 4 by selects: an array indexed at run time would live in local memory
      const int64_t k = i % 4;
      optim::store_param_rounded(p, i, v, st, k == 0 ? w[0] : k == 1 ? w[1] : k == 2 ? w[2] : w[3]);
      return;
    }
  }
  p[i] = store<T>(v);
}

// One launch updates up to kMaxLaunchTensors parameters (cuda/kernels/multi_tensor.cuh); the launch's extra
// is the device's DeviceContext::block_ticket.
constexpr int kMaxLaunchTensors = 12;
using UpdateLaunch = ArgsLaunch<kMaxLaunchTensors, optim::UpdateArgs, unsigned*>;

// Tensor a's elements of this block by the rule's form V: read the parameter (its master), update it and
// the buffers in the compute type, store it as its store says.
template <class Rule, class T, int V>
__device__ __forceinline__ void update_elements(const typename Rule::template Update<compute_t<T>>& f,
                                                const optim::UpdateArgs& a, unsigned block, unsigned blocks) {
  using C = compute_t<T>;
  T* __restrict__ p = static_cast<T*>(a.param);
  const T* __restrict__ g = static_cast<const T*>(a.grad);
  C* buf[optim::kMaxUpdateBuffers];
  for (int j = 0; j < optim::kMaxUpdateBuffers; ++j) buf[j] = static_cast<C*>(a.buffers[j]);
  for (int64_t i = block * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < a.n;
       i += static_cast<int64_t>(blocks) * blockDim.x) {
    C x = load_param(p, a.master, i);
    f.template apply<V>(x, load(g[i]), buf, i);
    store_param(p, a.master, i, x, a.store);
  }
}

// Any rule of ops/kernels/optim_rules.h over several parameters. On the grad scaler's device path
// (ops/kernels/optim.h's DeviceStep) a parameter whose found_inf is set is left untouched; every thread
// derives its parameter's scalars from the step's inputs (device hyper-parameters and step counter, or
// the host's values). The step counters are read by every block, so the last block to finish advances
// them (a ticket counted with atomics: "last block" as in CUDA's threadFenceReduction sample).
template <class Rule, class T>
__global__ void __launch_bounds__(kThreads) update_kernel(const UpdateLaunch L) {
  const int t = L.part.tensor_of(blockIdx.x);
  const optim::UpdateArgs& a = L.args[t];
  if (!optim::amp_skips(a.amp)) {  // torch's fused optimizers: an inf/NaN step changes nothing
    const typename Rule::template Update<compute_t<T>> f(optim::step_inputs(a));
    const unsigned block = L.part.block_in(t, blockIdx.x), blocks = L.part.blocks_of(t);
    optim::with_variant<Rule::kVariants>(
        f.variant(), [&](auto form) { update_elements<Rule, T, decltype(form)::value>(f, a, block, blocks); });
  }
  __syncthreads();  // every thread of this block is done with the counters
  if (threadIdx.x != 0) return;
  __threadfence();
  if (atomicAdd(L.extra, 1u) != gridDim.x - 1) return;
  for (int k = 0; k < L.part.count; ++k) optim::amp_count_step(L.args[k].amp);
  *L.extra = 0;
}

// Per gradient of the batch: *result += w * sum |g|^p (or = max(*result, w * max |g|)), w = optim::norm_weight
// of the gradient's pending factor; one atomic per block.
constexpr int kMaxLaunchGrads = 48;
template <class T>
__global__ void __launch_bounds__(kThreads) grad_norm_kernel(const ArgsLaunch<kMaxLaunchGrads, optim::GradNormArgs> L) {
  __shared__ double sh[kThreads / kWarp];
  const int t = L.part.tensor_of(blockIdx.x);
  const optim::GradNormArgs& a = L.args[t];
  const T* __restrict__ g = static_cast<const T*>(a.grad);
  const bool inf = a.norm_type == static_cast<double>(INFINITY);
  const NormTerm term{a.norm_type};
  double acc = 0;
  for (int64_t i = L.part.block_in(t, blockIdx.x) * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < a.n;
       i += static_cast<int64_t>(L.part.blocks_of(t)) * blockDim.x) {
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
  const double weight = optim::norm_weight(a);
  if (weight != 1.0) acc *= weight;
  // acc >= 0 (or a NaN made positive by fabs): such doubles order as their bit patterns, NaN above inf.
  if (inf) atomicMax(reinterpret_cast<unsigned long long*>(a.result), static_cast<unsigned long long>(__double_as_longlong(acc)));
  else atomicAdd(a.result, acc);
}

constexpr int kMaxLaunchTransforms = 64;
template <class T>
__global__ void __launch_bounds__(kThreads)
    grad_transform_kernel(const ArgsLaunch<kMaxLaunchTransforms, optim::GradTransformArgs> L) {
  using C = compute_t<T>;
  const int t = L.part.tensor_of(blockIdx.x);
  const optim::GradTransformArgs& a = L.args[t];
  const GradTransformFn<C> f{a.op, static_cast<C>(a.device_value != nullptr ? *a.device_value : a.value)};
  T* __restrict__ g = static_cast<T*>(a.grad);
  for (int64_t i = L.part.block_in(t, blockIdx.x) * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < a.n;
       i += static_cast<int64_t>(L.part.blocks_of(t)) * blockDim.x)
    g[i] = store<T>(f(load(g[i])));
}

__global__ void clip_coef_kernel(optim::ClipCoefArgs a) { optim::clip_coef(a); }

// The batch in launches of up to kMaxLaunchTensors parameters (the optimizer's step: one launch for a model
// of up to that many parameters of one dtype).
template <class Rule, class T>
void update(std::span<const optim::UpdateArgs> batch) {
  if (batch.empty()) return;
  for (const optim::UpdateArgs& a : batch) optim::check_update_args<Rule>(dtype_v<T>, a);
  DeviceContext& ctx = context_for(batch[0].param);
  launch_batches<kMaxLaunchTensors>(ctx, batch, update_kernel<Rule, T>, kThreads, ctx.block_ticket);
}

template <class Rule>
void register_update() {
  optim::update_kernels<Rule>().set_floating(DeviceType::CUDA, []<class T>(type_tag<T>) { return &update<Rule, T>; });
}
template <class... Rules>
void register_updates(optim::RuleList<Rules...>) {
  (register_update<Rules>(), ...);
}

}  // namespace

template <class T>
void grad_norm(std::span<const optim::GradNormArgs> batch) {
  if (batch.empty()) return;
  launch_batches<kMaxLaunchGrads>(context_for(batch[0].result), batch, grad_norm_kernel<T>, kThreads);
}

void clip_coefficient(const optim::ClipCoefArgs& a) {
  launch(clip_coef_kernel, 1, 1, 0, context_for(a.out).stream, a);
}

template <class T>
void grad_transform(std::span<const optim::GradTransformArgs> batch) {
  if (batch.empty()) return;
  launch_batches<kMaxLaunchTransforms>(context_for(batch[0].grad), batch, grad_transform_kernel<T>, kThreads);
}

#define HG_INSTANTIATE(T)                                                 \
  template void grad_norm<T>(std::span<const optim::GradNormArgs>);       \
  template void grad_transform<T>(std::span<const optim::GradTransformArgs>);
HG_FOR_FLOATING(HG_INSTANTIATE)
#undef HG_INSTANTIATE

void register_optim() {
  register_updates(optim::UpdateRules{});
  optim::grad_norm_kernels().set_floating(DeviceType::CUDA, []<class T>(type_tag<T>) { return &grad_norm<T>; });
  optim::grad_transform_kernels().set_floating(DeviceType::CUDA, []<class T>(type_tag<T>) { return &grad_transform<T>; });
  optim::clip_coef_kernels().set(DeviceType::CUDA, DType::F64, &clip_coefficient);
}

}  // namespace hg::cuda
