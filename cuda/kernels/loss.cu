// Cross-entropy / NLL forward and backward on the GPU. The math is ops/loss_math.h (shared
// with cpu/loss.cpp); these kernels only index memory and combine partial results.
//  * forward: a group of G threads per row of x viewed as (outer, classes, inner): G = 1 when the
//    class dim is strided and short (adjacent threads then read adjacent columns: coalesced), one warp
//    for up to 1024 classes, a block beyond. Two passes over the row (max, then the shifted exp-sum),
//    like the CPU. Mean/Sum: the last block then reduces the row losses, in a fixed order (deterministic).
//  * backward: one thread per element of dx.
// A target outside [0, classes) that is not ignore_index cannot throw here without a host sync: its
// loss and gradient are NaN instead (the CPU throws).
#include <cmath>

#include "cuda/check.h"
#include "cuda/context.h"
#include "cuda/kernels/kernels.h"
#include "cuda/kernels/loss.h"
#include "cuda/launch.h"
#include "cuda/register.h"
#include "ops/kernels/loss.h"
#include "ops/loss_math.h"

namespace hg::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarp = 32;

struct SumF {
  template <class C> __device__ C operator()(C a, C b) const { return a + b; }
};
struct MaxF {
  template <class C> __device__ C operator()(C a, C b) const { return lossfn::max_step(a, b); }
};

// Every thread of a group of G (1, 32, or the whole block of kThreads) gets the combination of the
// group's values. `sh` (kThreads / kWarp values) is used only by whole-block groups.
template <int G, class C, class Op>
__device__ C group_all(C v, Op op, C* sh) {
  if constexpr (G == 1) {
    return v;
  } else {
    for (int o = kWarp / 2; o > 0; o /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    if constexpr (G > kWarp) {
      const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
      __syncthreads();  // sh may still be read from the previous call
      if (lane == 0) sh[warp] = v;
      __syncthreads();
      v = sh[0];
      for (int w = 1; w < G / kWarp; ++w) v = op(v, sh[w]);
    }
    return v;
  }
}

struct CeGeometry {
  int64_t rows, classes, inner, ignore_index;
};

// Mean/Sum: where the last block to finish the rows writes the total (one launch for the whole forward).
template <class C>
struct CeTotal {
  bool mean = false;
  C* count_out = nullptr;  // null: Reduction::None, no total
  C* out = nullptr;
  unsigned* ticket = nullptr;  // DeviceContext::block_ticket: zero between launches
};

// lse[r] and loss[r] (row losses: the output for None, the scratch for Mean/Sum) of every row. The row
// loop is uniform across a group (G == 32: a warp; G == kThreads: the block), as the shuffles and
// __syncthreads need. With a total, the last block to finish (a ticket counted with atomics, as in CUDA's
// threadFenceReduction sample) then sums the row losses in one fixed order: out = the sum (Sum) or that over
// the non-ignored rows (Mean, 0/0 = NaN when none); count_out = that number, which backward divides by.
template <class T, int G>
__global__ void __launch_bounds__(kThreads)
    ce_forward_kernel(const T* __restrict__ x, const int64_t* __restrict__ target, compute_t<T>* __restrict__ lse,
                      compute_t<T>* __restrict__ loss, CeGeometry g, compute_t<T> eps, bool log_probs,
                      CeTotal<compute_t<T>> total) {
  using C = compute_t<T>;
  __shared__ C sh[kThreads / kWarp];
  __shared__ bool last;
  constexpr int kRowsPerBlock = kThreads / G;
  const int lane = threadIdx.x % G;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / G; r < g.rows; r += step) {
    const int64_t o = r / g.inner, j = r - o * g.inner, t = target[r];
    const T* row = x + o * g.classes * g.inner + j;
    const lossfn::TargetKind kind = lossfn::classify_target(t, g.ignore_index, g.classes);
    if (kind != lossfn::TargetKind::Valid || log_probs) {
      if (lane == 0) {
        lse[r] = 0;
        loss[r] = kind == lossfn::TargetKind::Ignored ? C(0)
                  : kind == lossfn::TargetKind::OutOfRange ? C(NAN)
                                                           : -load(row[t * g.inner]);
      }
      continue;
    }
    C m = load(row[0]);
    for (int64_t k = lane; k < g.classes; k += G) m = lossfn::max_step(m, load(row[k * g.inner]));
    m = group_all<G>(m, MaxF{}, sh);
    C e = 0, d = 0;
    for (int64_t k = lane; k < g.classes; k += G) {
      const C v = load(row[k * g.inner]) - m;
      e += fn::m_exp(v);
      d += v;
    }
    e = group_all<G>(e, SumF{}, sh);
    d = group_all<G>(d, SumF{}, sh);
    if (lane == 0) {
      lse[r] = lossfn::log_sum_exp(m, e);
      loss[r] = lossfn::ce_row_loss(e, load(row[t * g.inner]) - m, d, eps, static_cast<C>(g.classes));
    }
  }
  if (total.count_out == nullptr) return;
  __threadfence();  // this thread's row losses, before the block counts itself out
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atomicAdd(total.ticket, 1u) == gridDim.x - 1;
    __threadfence();
  }
  __syncthreads();
  if (!last) return;
  C s = 0, n = 0;
  for (int64_t r = threadIdx.x; r < g.rows; r += kThreads) {
    s += loss[r];
    n += target[r] != g.ignore_index ? C(1) : C(0);
  }
  s = group_all<kThreads>(s, SumF{}, sh);
  n = group_all<kThreads>(n, SumF{}, sh);
  if (threadIdx.x == 0) {
    *total.count_out = n;
    *total.out = total.mean ? s / n : s;
    *total.ticket = 0;
  }
}

// dx[i] for every element: softmax - smoothed one-hot (or -one-hot for log-probabilities) times the
// row's upstream gradient; 0 on ignored rows.
template <class T>
__global__ void __launch_bounds__(kThreads)
    ce_backward_kernel(const T* __restrict__ x, const int64_t* __restrict__ target,
                       const compute_t<T>* __restrict__ stats, const compute_t<T>* __restrict__ dy,
                       T* __restrict__ dx, CeGeometry g, Reduction red, compute_t<T> eps, bool log_probs) {
  using C = compute_t<T>;
  const int64_t n = g.rows * g.classes, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const int64_t q = i / g.inner, j = i - q * g.inner, o = q / g.classes, k = q - o * g.classes;
    const int64_t r = o * g.inner + j, t = target[r];
    const lossfn::TargetKind kind = lossfn::classify_target(t, g.ignore_index, g.classes);
    C v = kind == lossfn::TargetKind::Ignored ? C(0) : C(NAN);
    if (kind == lossfn::TargetKind::Valid) {
      const C up = red == Reduction::None ? dy[r] : red == Reduction::Sum ? dy[0] : dy[0] / stats[2 * g.rows];
      v = log_probs ? lossfn::nll_grad(k == t, up)
                    : lossfn::ce_grad(lossfn::softmax_prob(load(x[i]), stats[r]), k == t, eps,
                                      static_cast<C>(g.classes), up);
    }
    dx[i] = store<T>(v);
  }
}

CeGeometry geometry(const CrossEntropyArgs& a) {
  return {a.outer * a.inner, a.classes, a.inner, a.ignore_index};
}

template <class T, int G>
void launch_rows(const DeviceContext& ctx, const CrossEntropyArgs& a, compute_t<T>* loss, CeTotal<compute_t<T>> total) {
  const CeGeometry g = geometry(a);
  launch(ce_forward_kernel<T, G>, grid_for(ctx, g.rows * G, kThreads), kThreads, 0, ctx.stream,
      static_cast<const T*>(a.x), a.target, static_cast<compute_t<T>*>(a.stats), loss, g,
      static_cast<compute_t<T>>(a.label_smoothing), a.scores == ClassScores::LogProbs, total);
}

}  // namespace

template <class T>
void cross_entropy_forward(const CrossEntropyArgs& a) {
  using C = compute_t<T>;
  DeviceContext& ctx = context_for(a.stats);
  const CeGeometry g = geometry(a);
  C* stats = static_cast<C*>(a.stats);
  const bool reduced = a.reduction != Reduction::None;
  C* rows_out = reduced ? stats + g.rows : static_cast<C*>(a.loss);
  CeTotal<C> total;
  if (reduced)
    total = {.mean = a.reduction == Reduction::Mean, .count_out = stats + 2 * g.rows, .out = static_cast<C*>(a.loss),
             .ticket = ctx.block_ticket};
  // log-probabilities need one read per row; short strided rows are read coalesced across threads (no rows:
  // one block, which writes the total of nothing)
  if (a.scores == ClassScores::LogProbs || (a.inner > 1 && a.classes <= 64) || g.rows == 0)
    launch_rows<T, 1>(ctx, a, rows_out, total);
  else if (a.classes <= 1024) launch_rows<T, kWarp>(ctx, a, rows_out, total);
  else launch_rows<T, kThreads>(ctx, a, rows_out, total);
}

template <class T>
void cross_entropy_backward(const CrossEntropyArgs& a) {
  using C = compute_t<T>;
  const CeGeometry g = geometry(a);
  const int64_t n = g.rows * g.classes;
  if (n == 0) return;
  DeviceContext& ctx = context_for(a.dx);
  launch(ce_backward_kernel<T>, grid_for(ctx, n, kThreads), kThreads, 0, ctx.stream,
      static_cast<const T*>(a.x), a.target, static_cast<const C*>(a.stats), static_cast<const C*>(a.dy),
      static_cast<T*>(a.dx), g, a.reduction, static_cast<C>(a.label_smoothing), a.scores == ClassScores::LogProbs);
}

#define HG_INSTANTIATE(T)                                                  \
  template void cross_entropy_forward<T>(const CrossEntropyArgs&);         \
  template void cross_entropy_backward<T>(const CrossEntropyArgs&);
HG_FOR_FLOATING(HG_INSTANTIATE)
#undef HG_INSTANTIATE

void register_loss() {
  cross_entropy_kernels().set_floating(DeviceType::CUDA, []<class T>(type_tag<T>) { return &cross_entropy_forward<T>; });
  cross_entropy_backward_kernels().set_floating(DeviceType::CUDA, []<class T>(type_tag<T>) { return &cross_entropy_backward<T>; });
}

}  // namespace hg::cuda
