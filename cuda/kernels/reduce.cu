// Reductions (sum, max, min with indices) and softmax / log-softmax forward and backward over
// contiguous x viewed as (outer, r, inner). One block per output element (reductions) or per row
// (softmax): a row is the r elements base + j*inner; sums over rows of inner >= 8 take a block per 32
// neighbouring rows instead (sum_columns_kernel), and sums of few long rows (or columns) are split
// over several blocks. Math in compute_t<T> (float, double for F64),
// one rounding on store, the same formulas as cpu/reduce.cpp (the order of the additions differs:
// a tree here, pairwise there).
#include <algorithm>
#include <cmath>

#include "core/parallel.h"
#include "cuda/check.h"
#include "cuda/context.h"
#include "cuda/kernels/kernels.h"
#include "cuda/launch.h"
#include "cuda/register.h"
#include "cuda/workspace.h"
#include "ops/kernels/reduce.h"

namespace hg::cuda {
namespace {

constexpr int kMaxThreads = 256;
constexpr int kWarp = 32;

// Threads per block for rows of r elements: a power of two in [32, 256], no wider than the row.
int threads_for(int64_t r) {
  int t = kWarp;
  while (t < kMaxThreads && t < r) t *= 2;
  return t;
}

// Blocks for `rows` independent rows: each block loops over rows with a stride of gridDim.x.
unsigned blocks_for(const DeviceContext& c, int64_t rows) {
  const int64_t cap = static_cast<int64_t>(c.sm_count > 0 ? c.sm_count : 1) * 64;
  return static_cast<unsigned>(rows < cap ? (rows > 0 ? rows : 1) : cap);
}

// ---- block-wide combines: warp shuffles, then one value per warp through shared memory -------------

struct SumOp {
  template <class C> __device__ C operator()(C a, C b) const { return a + b; }
};
// The CPU's running maximum `m = v > m ? v : m` (a NaN makes the row NaN later anyway).
struct MaxOp {
  template <class C> __device__ C operator()(C a, C b) const { return b > a ? b : a; }
};

// Every thread gets the combination of all threads' v. `sh` holds kMaxThreads / kWarp values.
template <class C, class Op>
__device__ C block_all(C v, Op op, C* sh) {
  for (int o = kWarp / 2; o > 0; o /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, warps = blockDim.x / kWarp;
  __syncthreads();  // sh may still be read from the previous call
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  v = sh[0];
  for (int w = 1; w < warps; ++w) v = op(v, sh[w]);
  return v;
}

// torch.max/min: NaN wins over any number; among equals (and among NaNs) the first index wins.
template <bool IsMax, class C>
__device__ __forceinline__ void pick(C& v, int64_t& i, C v2, int64_t i2) {
  const bool nan1 = v != v, nan2 = v2 != v2;
  bool take;
  if (nan2) take = !nan1 || i2 < i;
  else if (nan1) take = false;
  else if (IsMax ? v2 > v : v2 < v) take = true;
  else take = v2 == v && i2 < i;
  if (take) v = v2, i = i2;
}

// ---- reductions -------------------------------------------------------------------------------

// out[o * gridDim.y + blockIdx.y] = scale * the sum of row o's elements j in [blockIdx.y * chunk,
// + chunk), o < rows = outer*inner: with one chunk (gridDim.y == 1, chunk >= r) the row's sum; with
// several, Out is the compute type and a second launch adds the partial sums (long rows, few of them).
template <class In, class Out>
__global__ void __launch_bounds__(kMaxThreads)
    sum_kernel(const In* __restrict__ x, Out* __restrict__ out, int64_t rows, int64_t r, int64_t inner,
               int64_t chunk, compute_t<In> scale) {
  using C = compute_t<In>;
  __shared__ C sh[kMaxThreads / kWarp];
  const int64_t begin = int64_t{blockIdx.y} * chunk, end = begin + chunk < r ? begin + chunk : r;
  for (int64_t o = blockIdx.x; o < rows; o += gridDim.x) {
    const int64_t oo = o / inner, ii = o - oo * inner;
    const In* row = x + oo * r * inner + ii;
    C acc = 0;
    for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) acc += load(row[j * inner]);
    acc = block_all(acc, SumOp{}, sh);
    if (threadIdx.x == 0) out[o * gridDim.y + blockIdx.y] = store<Out>(acc * scale);
  }
}

// Chunks per row for sums over few long rows: enough blocks to fill the GPU four times over, at least
// kSplitMin elements a chunk, at most kMaxSplits (one block of the second launch adds them); 1 when the
// rows alone fill the GPU or are short. (A full sum of 2M floats on one block took 3.5 ms on an H200.)
// The split follows the GPU's SM count: GPUs of another size may add in another order (same run, same
// GPU: same bits).
constexpr int64_t kSplitMin = 8192, kMaxSplits = 1024;
int64_t row_splits(const DeviceContext& c, int64_t rows, int64_t r) {
  const int64_t fill = int64_t{c.sm_count > 0 ? c.sm_count : 1} * 4;
  if (rows >= fill || r < 2 * kSplitMin) return 1;
  return std::min({num_pieces(r, kSplitMin), fill / rows, kMaxSplits});
}

// The same sums when the rows are columns: r elements `inner` apart, inner >= kColumnsFrom (a reduction
// over a dim that is not the last, as a bias gradient's sum over the batch). A row per block would read
// one element per 32-byte sector; here the 32 lanes of a warp take 32 neighbouring columns, so every
// load is coalesced, and the kColRows warps of a block each add every kColRows-th element of the same
// columns before one add-up through shared memory. blockIdx.z takes the chunk [z * chunk, + chunk) of
// the r elements: when the column tiles alone are too few blocks to fill the GPU (a bias gradient of a
// few thousand features), the chunks' partial sums go to out[(outer index * gridDim.z + z) * inner +
// column] in the compute type, and a second launch of this kernel (r = gridDim.z) adds them.
// On an H200, a Linear's bias gradient (dY of 512 x 4096 summed over the batch) took 8.6 us here against
// 19.7 us as 4096 strided rows in F32; F16/BF16 took 28-36 us here before the split over r (128 blocks
// for the whole GPU) against 20 us as rows, and have taken this kernel since the split (not yet timed
// on a GPU: bench_reduce_cuda prints it on the next lent one).
constexpr int kColWidth = kWarp, kColRows = 8;
constexpr int64_t kColumnsFrom = 8;
constexpr int64_t kColSplitMin = 128;  // rows per chunk at least: 16 loads per thread

template <class In, class Out>
__global__ void __launch_bounds__(kColWidth * kColRows)
    sum_columns_kernel(const In* __restrict__ x, Out* __restrict__ out, int64_t outer, int64_t r, int64_t inner,
                       int64_t chunk, compute_t<In> scale) {
  using C = compute_t<In>;
  __shared__ C sh[kColRows][kColWidth + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t begin = int64_t{blockIdx.z} * chunk, end = begin + chunk < r ? begin + chunk : r;
  // blockIdx.y walks the outer index, blockIdx.x the column tiles: no 64-bit division in the kernel
  for (int64_t oo = blockIdx.y; oo < outer; oo += gridDim.y) {
    for (int64_t first = int64_t{blockIdx.x} * kColWidth; first < inner; first += int64_t{gridDim.x} * kColWidth) {
      const int64_t ii = first + tx;
      C acc = 0;
      if (ii < inner) {
        const In* col = x + oo * r * inner + ii;
        for (int64_t j = begin + ty; j < end; j += kColRows) acc += load(col[j * inner]);
      }
      __syncthreads();  // sh may still be read for the previous tile
      sh[ty][tx] = acc;
      __syncthreads();
      if (ty == 0 && ii < inner) {
        C total = sh[0][tx];
        for (int k = 1; k < kColRows; ++k) total += sh[k][tx];
        out[(oo * gridDim.z + blockIdx.z) * inner + ii] = store<Out>(total * scale);
      }
    }
  }
}

// Chunks of r for the columns kernel: enough to fill the GPU four times over with `blocks` blocks per
// chunk, each at least kColSplitMin rows, at most kMaxSplits; 1 when the tiles alone fill it.
int64_t column_splits(const DeviceContext& c, int64_t blocks, int64_t r) {
  const int64_t fill = int64_t{c.sm_count > 0 ? c.sm_count : 1} * 4;
  if (blocks >= fill || r < 2 * kColSplitMin) return 1;
  return std::min({num_pieces(r, kColSplitMin), num_pieces(fill, blocks), kMaxSplits});
}

// The block's pick among its threads' candidates (v, at), valid in thread 0.
template <bool IsMax, class C>
__device__ __forceinline__ void block_pick(C& v, int64_t& at, C* sh_v, int64_t* sh_i) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, warps = blockDim.x / kWarp;
  for (int s = kWarp / 2; s > 0; s /= 2) {
    const C v2 = __shfl_xor_sync(0xffffffffu, v, s);
    const int64_t i2 = __shfl_xor_sync(0xffffffffu, at, s);
    pick<IsMax>(v, at, v2, i2);
  }
  __syncthreads();
  if (lane == 0) sh_v[warp] = v, sh_i[warp] = at;
  __syncthreads();
  if (threadIdx.x == 0)
    for (int w = 1; w < warps; ++w) pick<IsMax>(v, at, sh_v[w], sh_i[w]);
}

// out[k] (when non-null) = scale * the extreme of row o's elements j in [blockIdx.y * chunk, + chunk), and
// indices[k] (when non-null) its first position, k = o * gridDim.y + blockIdx.y: with one chunk (gridDim.y
// == 1, chunk >= r) the row's. With several (a whole-tensor max of many elements), Out is the compute type
// and extreme_merge_kernel picks among the chunks' results. torch's order (pick) does not depend on how the
// candidates are grouped, so the split gives the bits and indices of one block.
template <bool IsMax, class T, class Out>
__global__ void __launch_bounds__(kMaxThreads)
    extreme_kernel(const T* __restrict__ x, Out* __restrict__ out, int64_t* __restrict__ indices, int64_t rows,
                   int64_t r, int64_t inner, int64_t chunk, compute_t<T> scale) {
  using C = compute_t<T>;
  __shared__ C sh_v[kMaxThreads / kWarp];
  __shared__ int64_t sh_i[kMaxThreads / kWarp];
  const int64_t begin = int64_t{blockIdx.y} * chunk, end = begin + chunk < r ? begin + chunk : r;
  for (int64_t o = blockIdx.x; o < rows; o += gridDim.x) {
    const int64_t oo = o / inner, ii = o - oo * inner;
    const T* row = x + oo * r * inner + ii;
    // Threads past the chunk's end hold its first element: a real candidate, so no sentinel value is needed.
    C v = load(row[begin * inner]);
    int64_t at = begin;
    for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) pick<IsMax>(v, at, load(row[j * inner]), j);
    block_pick<IsMax>(v, at, sh_v, sh_i);
    if (threadIdx.x == 0) {
      const int64_t k = o * gridDim.y + blockIdx.y;
      if (out) out[k] = store<Out>(v * scale);
      if (indices) indices[k] = at;
    }
  }
}

// Row o of the chunks' results: n candidates (pv, pi)[o * n + c]; out[o] = scale * the pick, indices[o] its position.
template <bool IsMax, class C, class T>
__global__ void __launch_bounds__(kMaxThreads)
    extreme_merge_kernel(const C* __restrict__ pv, const int64_t* __restrict__ pi, T* __restrict__ out,
                         int64_t* __restrict__ indices, int64_t rows, int64_t n, C scale) {
  __shared__ C sh_v[kMaxThreads / kWarp];
  __shared__ int64_t sh_i[kMaxThreads / kWarp];
  for (int64_t o = blockIdx.x; o < rows; o += gridDim.x) {
    C v = pv[o * n];
    int64_t at = pi[o * n];
    for (int64_t c = threadIdx.x; c < n; c += blockDim.x) pick<IsMax>(v, at, pv[o * n + c], pi[o * n + c]);
    block_pick<IsMax>(v, at, sh_v, sh_i);
    if (threadIdx.x == 0) {
      if (out) out[o] = store<T>(v * scale);
      if (indices) indices[o] = at;
    }
  }
}

template <bool IsMax, class T>
void launch_extreme(DeviceContext& ctx, const ReduceArgs& a, int64_t rows, unsigned blocks, int threads) {
  using C = compute_t<T>;
  const auto* x = static_cast<const T*>(a.x);
  auto* out = static_cast<T*>(a.out);
  const auto scale = static_cast<C>(a.scale);
  const int64_t splits = row_splits(ctx, rows, a.r);
  if (splits == 1) {
    launch(extreme_kernel<IsMax, T, T>, blocks, threads, 0, ctx.stream, x, out, a.indices, rows, a.r, a.inner, a.r,
           scale);
    return;
  }
  // Few long rows: each row's chunks on their own blocks (values in the compute type, with positions), then
  // one pick among them per row.
  const int64_t chunk = num_pieces(a.r, splits), used = num_pieces(a.r, chunk);
  Workspace partial(static_cast<size_t>(rows * used) * (sizeof(C) + sizeof(int64_t)), Device::cuda(ctx.device));
  auto* at = static_cast<int64_t*>(partial.get());
  auto* pv = reinterpret_cast<C*>(at + rows * used);
  launch(extreme_kernel<IsMax, T, C>, dim3(blocks, static_cast<unsigned>(used)), threads, 0, ctx.stream, x, pv, at,
         rows, a.r, a.inner, chunk, C{1});
  launch(extreme_merge_kernel<IsMax, C, T>, blocks, threads_for(used), 0, ctx.stream, static_cast<const C*>(pv),
         static_cast<const int64_t*>(at), out, a.indices, rows, used, scale);
}

// ---- softmax ----------------------------------------------------------------------------------

// softmax y = exp(x - max) / sum; log_softmax y = (x - max) - log(sum), the shift subtracted first so that a
// large max does not cost the result its bits (as torch). A NaN anywhere, or a row of all -inf, makes the row
// NaN (as the CPU and torch).
template <class T>
__global__ void __launch_bounds__(kMaxThreads)
    softmax_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t r, int64_t inner, bool is_log) {
  using C = compute_t<T>;
  __shared__ C sh[kMaxThreads / kWarp];
  for (int64_t o = blockIdx.x; o < rows; o += gridDim.x) {
    const int64_t oo = o / inner, ii = o - oo * inner, base = oo * r * inner + ii;
    C m = load(x[base]);
    for (int64_t j = threadIdx.x; j < r; j += blockDim.x) m = MaxOp{}(m, load(x[base + j * inner]));
    m = block_all(m, MaxOp{}, sh);
    C s = 0;
    for (int64_t j = threadIdx.x; j < r; j += blockDim.x) s += fn::m_exp(load(x[base + j * inner]) - m);
    s = block_all(s, SumOp{}, sh);
    if (is_log) {
      const C ls = fn::m_log(s);
      for (int64_t j = threadIdx.x; j < r; j += blockDim.x)
        y[base + j * inner] = store<T>((load(x[base + j * inner]) - m) - ls);
    } else {
      for (int64_t j = threadIdx.x; j < r; j += blockDim.x)
        y[base + j * inner] = store<T>(fn::m_exp(load(x[base + j * inner]) - m) / s);
    }
  }
}

// softmax: dx = y * (dy - sum(dy * y)); log_softmax: dx = dy - exp(y) * sum(dy).
template <class T>
__global__ void __launch_bounds__(kMaxThreads)
    softmax_backward_kernel(const T* __restrict__ y, const T* __restrict__ dy, T* __restrict__ dx, int64_t rows,
                            int64_t r, int64_t inner, bool is_log) {
  using C = compute_t<T>;
  __shared__ C sh[kMaxThreads / kWarp];
  for (int64_t o = blockIdx.x; o < rows; o += gridDim.x) {
    const int64_t oo = o / inner, ii = o - oo * inner, base = oo * r * inner + ii;
    C s = 0;
    for (int64_t j = threadIdx.x; j < r; j += blockDim.x) {
      const int64_t e = base + j * inner;
      s += is_log ? load(dy[e]) : load(dy[e]) * load(y[e]);
    }
    s = block_all(s, SumOp{}, sh);
    for (int64_t j = threadIdx.x; j < r; j += blockDim.x) {
      const int64_t e = base + j * inner;
      const C g = load(dy[e]), v = load(y[e]);
      dx[e] = store<T>(is_log ? g - fn::m_exp(v) * s : v * (g - s));
    }
  }
}

}  // namespace

template <class T>
void reduce(const ReduceArgs& a) {
  const int64_t rows = a.outer * a.inner;
  if (rows == 0) return;
  HG_CHECK(a.op == ReduceOp::Sum || a.r > 0, a.op == ReduceOp::Max ? "max" : "min",
           ": cannot reduce over an empty dim (r=0); the result is undefined");
  DeviceContext& ctx = context_for(a.out ? a.out : static_cast<void*>(a.indices));
  const int threads = threads_for(a.r);
  const unsigned blocks = blocks_for(ctx, rows);
  const auto* x = static_cast<const T*>(a.x);
  auto* out = static_cast<T*>(a.out);
  const auto scale = static_cast<compute_t<T>>(a.scale);
  switch (a.op) {
    case ReduceOp::Sum:
      if (a.inner >= kColumnsFrom) {
        // x: the column tiles of one outer index; y: outer indices, as many as the block budget leaves;
        // z: chunks of r when that is still too few blocks (their sums added by a second launch)
        using C = compute_t<T>;
        const int64_t tiles = num_pieces(a.inner, kColWidth);
        const unsigned bx = blocks_for(ctx, tiles);
        const auto by = static_cast<unsigned>(std::min<int64_t>(
            {a.outer, std::max<int64_t>(1, blocks_for(ctx, a.outer * tiles) / bx), 65535}));
        const dim3 block(kColWidth, kColRows);
        const int64_t splits = column_splits(ctx, int64_t{bx} * by, a.r);
        if (splits == 1) {
          launch(sum_columns_kernel<T, T>, dim3(bx, by), block, 0, ctx.stream, x, out, a.outer, a.r, a.inner, a.r,
                 scale);
          break;
        }
        const int64_t chunk = num_pieces(a.r, splits), used = num_pieces(a.r, chunk);
        Workspace partial(static_cast<size_t>(a.outer * used * a.inner) * sizeof(C), Device::cuda(ctx.device));
        auto* p = static_cast<C*>(partial.get());
        launch(sum_columns_kernel<T, C>, dim3(bx, by, static_cast<unsigned>(used)), block, 0, ctx.stream, x, p,
               a.outer, a.r, a.inner, chunk, C{1});
        launch(sum_columns_kernel<C, T>, dim3(bx, by), block, 0, ctx.stream, p, out, a.outer, used, a.inner, used,
               scale);
        break;
      }
      if (const int64_t splits = row_splits(ctx, rows, a.r); splits > 1) {
        // Few long rows (a full sum, a loss's mean): each row's chunks on their own blocks, their partial
        // sums kept in the compute type, then added and scaled by a second launch; one rounding at the end.
        using C = compute_t<T>;
        const int64_t chunk = num_pieces(a.r, splits), used = num_pieces(a.r, chunk);
        Workspace partial(static_cast<size_t>(rows * used) * sizeof(C), Device::cuda(ctx.device));
        auto* p = static_cast<C*>(partial.get());
        launch(sum_kernel<T, C>, dim3(blocks, static_cast<unsigned>(used)), threads, 0, ctx.stream, x, p, rows, a.r,
               a.inner, chunk, C{1});
        launch(sum_kernel<C, T>, blocks, threads_for(used), 0, ctx.stream, p, out, rows, used, 1, used, scale);
        break;
      }
      launch(sum_kernel<T, T>, blocks, threads, 0, ctx.stream, x, out, rows, a.r, a.inner, a.r, scale);
      break;
    case ReduceOp::Max:
      launch_extreme<true, T>(ctx, a, rows, blocks, threads);
      break;
    case ReduceOp::Min:
      launch_extreme<false, T>(ctx, a, rows, blocks, threads);
      break;
  }
}

template <class T>
void softmax(const SoftmaxArgs& a) {
  const int64_t rows = a.outer * a.inner;
  if (rows == 0 || a.r == 0) return;
  DeviceContext& ctx = context_for(a.y);
  launch(softmax_kernel<T>, blocks_for(ctx, rows), threads_for(a.r), 0, ctx.stream,
      static_cast<const T*>(a.x), static_cast<T*>(a.y), rows, a.r, a.inner, a.log);
}

template <class T>
void softmax_backward(const SoftmaxBackwardArgs& a) {
  const int64_t rows = a.outer * a.inner;
  if (rows == 0 || a.r == 0) return;
  DeviceContext& ctx = context_for(a.dx);
  launch(softmax_backward_kernel<T>, blocks_for(ctx, rows), threads_for(a.r), 0, ctx.stream,
      static_cast<const T*>(a.y), static_cast<const T*>(a.dy), static_cast<T*>(a.dx), rows, a.r, a.inner, a.log);
}

#define HG_INSTANTIATE(T)                                 \
  template void reduce<T>(const ReduceArgs&);             \
  template void softmax<T>(const SoftmaxArgs&);           \
  template void softmax_backward<T>(const SoftmaxBackwardArgs&);
HG_FOR_FLOATING(HG_INSTANTIATE)
#undef HG_INSTANTIATE

void register_reduce() {
  reduce_kernels().set_floating(DeviceType::CUDA, []<class T>(type_tag<T>) { return &reduce<T>; });
  softmax_kernels().set_floating(DeviceType::CUDA, []<class T>(type_tag<T>) { return &softmax<T>; });
  softmax_backward_kernels().set_floating(DeviceType::CUDA, []<class T>(type_tag<T>) { return &softmax_backward<T>; });
}

}  // namespace hg::cuda
