// CPU reductions (sum, max, min) and softmax over contiguous x viewed as (outer, r, inner).
// Every kernel widens blocks with the bulk converters, computes in compute_t<T> (float, double for
// F64) and rounds once on store (docs/ARCHITECTURE.md, Principles 2).
//
// Reductions are split into pieces: (outer row, chunk of kCols inner columns, range of r). The split
// of r depends only on the shape, never on the thread count, so results are bit-identical for any
// OMP_NUM_THREADS; small shapes (an all-reduce, few long rows) are split along r so both cores work,
// and each piece's partial result is combined in piece order. Sums are pairwise (Higham, "The
// accuracy of floating point summation", 1993): error O(eps log r) instead of O(eps r), which is what
// lets F16 data sum to 4096 exactly in F32 and a 16M-element mean stay accurate.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/convert.h"
#include "core/dispatch_table.h"
#include "core/parallel.h"
#include "cpu/blocks.h"
#include "cpu/register.h"
#include "ops/kernels/reduce.h"
#include "ops/vec_math.h"

namespace hg::cpu {
namespace {

constexpr int64_t kLeaf = 512;         // elements widened at once / pairwise leaf
constexpr int64_t kLanes = 16;         // independent accumulators a leaf sum vectorises over
constexpr int64_t kCols = 64;          // inner columns handled together when inner > 1
constexpr int64_t kLeafRows = 16;      // rows summed sequentially at a pairwise leaf (inner > 1)
constexpr int64_t kMinPieces = 64;     // split r until this many pieces exist (when r is long)
constexpr int64_t kSplitWork = 16384;  // but keep at least this many elements per piece
constexpr int64_t kParallel = 32768;   // below this many elements, one thread is faster

// ---- sums --------------------------------------------------------------------------------------

template <class C>
C sum_lanes(const C* v, int64_t n) {
  C lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) lane[l] += v[i + l];
  for (int64_t l = 0; i < n; ++i, ++l) lane[l] += v[i];
  for (int64_t w = kLanes / 2; w > 0; w /= 2)  // pairwise across lanes too
    for (int64_t l = 0; l < w; ++l) lane[l] += lane[l + w];
  return lane[0];
}

// Pairwise sum of n contiguous elements.
template <class T, class C = compute_t<T>>
C sum_row(const T* x, int64_t n) {
  if (n > kLeaf) {
    const int64_t h = n / 2;
    return sum_row<T>(x, h) + sum_row<T>(x + h, n - h);
  }
  if constexpr (std::is_same_v<T, C>) {
    return sum_lanes(x, n);
  } else {
    alignas(64) C buf[kLeaf];
    widen(x, buf, n);
    return sum_lanes(buf, n);
  }
}

// acc[0..w) = pairwise sum over n rows (row stride `stride`) of w contiguous columns.
template <class T, class C = compute_t<T>>
void sum_cols(const T* x, int64_t stride, int64_t n, int64_t w, C* acc) {
  if (n > kLeafRows) {
    const int64_t h = n / 2;
    C right[kCols];
    sum_cols<T>(x, stride, h, w, acc);
    sum_cols<T>(x + h * stride, stride, n - h, w, right);
    for (int64_t j = 0; j < w; ++j) acc[j] += right[j];
    return;
  }
  alignas(64) C buf[kCols];
  std::fill(acc, acc + w, C(0));
  for (int64_t k = 0; k < n; ++k) {
    widen(x + k * stride, buf, w);
    for (int64_t j = 0; j < w; ++j) acc[j] += buf[j];
  }
}

// ---- max / min ---------------------------------------------------------------------------------

// torch.max/min semantics: NaN wins over any number, the first occurrence wins among equals.
template <bool IsMax, class C>
bool better(C v, C best) {
  if (v != v) return best == best;
  return IsMax ? v > best : v < best;
}

// The extreme of v[0..n), n >= 1, ignoring NaNs, and whether any element is NaN. kLanes independent
// running values: compare-selects vectorise, a single running value is a serial chain that does not.
template <bool IsMax, class C>
C extreme_lanes(const C* v, int64_t n, bool& any_nan) {
  using I = std::conditional_t<sizeof(C) == 4, int32_t, int64_t>;  // a NaN flag as wide as C
  C lane[kLanes];
  I nan[kLanes] = {};
  for (int64_t l = 0; l < kLanes; ++l) lane[l] = v[0];
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) {
      const C x = v[i + l];
      lane[l] = (IsMax ? x > lane[l] : x < lane[l]) ? x : lane[l];
      nan[l] |= static_cast<I>(x != x);
    }
  for (int64_t l = 0; i < n; ++i, ++l) {
    const C x = v[i];
    lane[l] = (IsMax ? x > lane[l] : x < lane[l]) ? x : lane[l];
    nan[l] |= static_cast<I>(x != x);
  }
  C e = lane[0];
  I any = nan[0];
  for (int64_t l = 1; l < kLanes; ++l) {
    e = (IsMax ? lane[l] > e : lane[l] < e) ? lane[l] : e;
    any |= nan[l];
  }
  any_nan = any != 0;
  return e;
}

// Extreme of n contiguous elements and its position; n >= 1. A block is searched again for the
// first position only when its extreme improves on the best so far.
template <bool IsMax, class T, class C = compute_t<T>>
void extreme_row(const T* x, int64_t n, C& best, int64_t& at) {
  alignas(64) C buf[kLeaf];
  best = load(x[0]);
  at = 0;
  for (int64_t b = 0; b < n; b += kLeaf) {
    const int64_t len = std::min(kLeaf, n - b);
    widen(x + b, buf, len);
    bool nan = false;
    const C e = extreme_lanes<IsMax>(buf, len, nan);
    if (!nan && !better<IsMax>(e, best)) continue;
    for (int64_t i = 0; i < len; ++i)
      if (nan ? buf[i] != buf[i] : buf[i] == e) {
        best = buf[i], at = b + i;
        break;
      }
    if (nan) return;  // the first NaN wins and nothing later can replace it
  }
}

// Per column j < w: extreme over n >= 1 rows (row stride `stride`) and its row.
template <bool IsMax, class T, class C = compute_t<T>>
void extreme_cols(const T* x, int64_t stride, int64_t n, int64_t w, C* best, int64_t* at) {
  alignas(64) C buf[kCols];
  widen(x, best, w);
  std::fill(at, at + w, int64_t{0});
  for (int64_t k = 1; k < n; ++k) {
    widen(x + k * stride, buf, w);
    for (int64_t j = 0; j < w; ++j) {  // branch-free so it vectorises
      const bool take = better<IsMax>(buf[j], best[j]);
      best[j] = take ? buf[j] : best[j];
      at[j] = take ? k : at[j];
    }
  }
}

// ---- the piece decomposition shared by every reduction -------------------------------------------

struct Pieces {
  int64_t col_chunks = 1, splits = 1;
  int64_t count(const ReduceArgs& a) const { return a.outer * col_chunks * splits; }
};

Pieces make_pieces(const ReduceArgs& a) {
  Pieces p;
  p.col_chunks = (a.inner + kCols - 1) / kCols;
  const int64_t tasks = a.outer * p.col_chunks;
  const int64_t width = std::min(a.inner, kCols);
  if (tasks > 0 && tasks < kMinPieces && a.r > 1) {
    const int64_t by_work = std::max<int64_t>(1, a.r * width / kSplitWork);
    p.splits = std::min({(kMinPieces + tasks - 1) / tasks, by_work, a.r});
  }
  return p;
}

// Runs f(o, j0, w, k0, n, s) for every piece: rows [k0, k0+n) of columns [j0, j0+w) of outer row o.
template <class F>
void for_each_piece(const ReduceArgs& a, const Pieces& p, F&& f) {
  const int64_t count = p.count(a);
  parallel_for(count, a.outer * a.r * a.inner > kParallel, [&](int64_t i) {
    const int64_t s = i % p.splits, t = i / p.splits;
    const int64_t o = t / p.col_chunks, j0 = (t % p.col_chunks) * kCols;
    const int64_t k0 = a.r * s / p.splits, k1 = a.r * (s + 1) / p.splits;
    f(o, j0, std::min(kCols, a.inner - j0), k0, k1 - k0, s);
  });
}

// Each piece writes a partial result per (split, output element); they are combined in split order.
template <class T>
void sum_kernel(const ReduceArgs& a) {
  using C = compute_t<T>;
  const Pieces p = make_pieces(a);
  const T* x = static_cast<const T*>(a.x);
  const int64_t nout = a.outer * a.inner;
  std::vector<C> part(static_cast<size_t>(p.splits * nout));
  for_each_piece(a, p, [&](int64_t o, int64_t j0, int64_t w, int64_t k0, int64_t n, int64_t s) {
    const T* src = x + (o * a.r + k0) * a.inner + j0;
    C* dst = part.data() + s * nout + o * a.inner + j0;
    if (a.inner == 1) *dst = sum_row(src, n);
    else sum_cols(src, a.inner, n, w, dst);
  });
  T* out = static_cast<T*>(a.out);
  const C scale = static_cast<C>(a.scale);
  parallel_for(nout, nout > kParallel, [&](int64_t e) {
    C acc = part[static_cast<size_t>(e)];
    for (int64_t s = 1; s < p.splits; ++s) acc += part[static_cast<size_t>(s * nout + e)];
    out[e] = store<T>(acc * scale);
  });
}

template <bool IsMax, class T>
void extreme_kernel(const ReduceArgs& a) {
  using C = compute_t<T>;
  HG_CHECK(a.r > 0, IsMax ? "max" : "min", ": cannot reduce over an empty dim (r=0); the result is undefined");
  const Pieces p = make_pieces(a);
  const T* x = static_cast<const T*>(a.x);
  const int64_t nout = a.outer * a.inner;
  std::vector<C> val(static_cast<size_t>(p.splits * nout));
  std::vector<int64_t> idx(val.size());
  for_each_piece(a, p, [&](int64_t o, int64_t j0, int64_t w, int64_t k0, int64_t n, int64_t s) {
    const T* src = x + (o * a.r + k0) * a.inner + j0;
    const size_t e = static_cast<size_t>(s * nout + o * a.inner + j0);
    if (a.inner == 1) extreme_row<IsMax>(src, n, val[e], idx[e]);
    else extreme_cols<IsMax>(src, a.inner, n, w, val.data() + e, idx.data() + e);
    for (int64_t j = 0; j < w; ++j) idx[e + static_cast<size_t>(j)] += k0;
  });
  T* out = static_cast<T*>(a.out);
  const C scale = static_cast<C>(a.scale);
  parallel_for(nout, nout > kParallel, [&](int64_t e) {
    size_t b = static_cast<size_t>(e);  // earlier splits win ties: strict comparison in split order
    for (int64_t s = 1; s < p.splits; ++s)
      if (better<IsMax>(val[static_cast<size_t>(s * nout + e)], val[b])) b = static_cast<size_t>(s * nout + e);
    if (out) out[e] = store<T>(val[b] * scale);
    if (a.indices) a.indices[e] = idx[b];
  });
}

template <class T>
void reduce_kernel(const ReduceArgs& a) {
  switch (a.op) {
    case ReduceOp::Sum: return sum_kernel<T>(a);
    case ReduceOp::Max: return extreme_kernel<true, T>(a);
    case ReduceOp::Min: return extreme_kernel<false, T>(a);
  }
  HG_FAIL("reduce: unknown op ", static_cast<int>(a.op));
}

// ---- softmax -----------------------------------------------------------------------------------

template <class C>
C exp_c(C x) {
  if constexpr (std::is_same_v<C, float>) return vm::exp(x);
  else return std::exp(x);  // F64 (gradcheck) keeps libm's accuracy
}

// Pairwise sum of f(i) for i in [i0, i0+n), so long softmax rows keep O(eps log r) error too.
template <class C, class F>
C sum_index(int64_t i0, int64_t n, const F& f) {
  if (n > kLeaf) {
    const int64_t h = n / 2;
    return sum_index<C>(i0, h, f) + sum_index<C>(i0 + h, n - h, f);
  }
  alignas(64) C buf[kLeaf];
  for (int64_t i = 0; i < n; ++i) buf[i] = f(i0 + i);
  return sum_lanes(buf, n);
}

// In place over one widened row: softmax y = exp(x - max) / sum, log_softmax (x - max) - log(sum) (the max
// subtracted first: x - (max + log(sum)) would lose the result's bits to a large max, which torch does not).
// A NaN anywhere makes the sum, so the whole row, NaN (as torch); so does a row of all -inf.
template <class C>
[[gnu::always_inline]] inline void softmax_row_body(C* v, int64_t n, bool log) {
  bool nan = false;  // a NaN needs no special case: it makes the sum NaN
  const C m = extreme_lanes<true>(v, n, nan);
  if (log) {
    const C s = sum_index<C>(0, n, [&](int64_t i) { return exp_c(v[i] - m); });
    const C ls = std::log(s);
    for (int64_t i = 0; i < n; ++i) v[i] = (v[i] - m) - ls;
  } else {
    for (int64_t i = 0; i < n; ++i) v[i] = exp_c(v[i] - m);
    const C s = sum_row(v, n);
    for (int64_t i = 0; i < n; ++i) v[i] /= s;
  }
}

// Compiled once per SIMD tier (chosen at run time): exp vectorises 8 or 16 wide.
HG_SIMD_TIERS((template <class C>), softmax_row, softmax_row_body, (C* v, int64_t n, bool log), (v, n, log))

// In place: dy becomes dx. softmax: y*(dy - sum(dy*y)); log_softmax: dy - exp(y)*sum(dy).
template <class C>
void softmax_backward_row(C* dy, const C* y, int64_t n, bool log) {
  if (log) {
    const C s = sum_row(dy, n);
    for (int64_t i = 0; i < n; ++i) dy[i] -= exp_c(y[i]) * s;
  } else {
    const C s = sum_index<C>(0, n, [&](int64_t i) { return dy[i] * y[i]; });
    for (int64_t i = 0; i < n; ++i) dy[i] = y[i] * (dy[i] - s);
  }
}

constexpr int64_t kSoftmaxCols = 16;  // columns transposed at once when inner > 1 (bounds the buffer)

// Widens the (r, w) slab at x (row stride `inner`) into buf as w contiguous rows of r, so the row
// code serves softmax over any dim; scatter_cols writes it back.
template <class T, class C = compute_t<T>>
void gather_cols(const T* x, int64_t r, int64_t inner, int64_t w, C* buf) {
  if (inner == 1) return widen(x, buf, r);
  alignas(64) C row[kSoftmaxCols];
  for (int64_t k = 0; k < r; ++k) {
    widen(x + k * inner, row, w);
    for (int64_t j = 0; j < w; ++j) buf[j * r + k] = row[j];
  }
}
template <class T, class C = compute_t<T>>
void scatter_cols(const C* buf, int64_t r, int64_t inner, int64_t w, T* x) {
  if (inner == 1) return narrow(buf, x, r);
  alignas(64) C row[kSoftmaxCols];
  for (int64_t k = 0; k < r; ++k) {
    for (int64_t j = 0; j < w; ++j) row[j] = buf[j * r + k];
    narrow(row, x + k * inner, w);
  }
}

// Runs f(row0, [row1,] r) on every softmax row of (outer, r, inner): ins[q] widened into per-thread
// buffers (transposed from columns when inner > 1); row0 is stored to out afterwards.
template <class T, size_t N, class F>
void for_each_row(int64_t outer, int64_t r, int64_t inner, const T* const (&ins)[N], T* out, const F& f) {
  using C = compute_t<T>;
  const int64_t chunks = (inner + kSoftmaxCols - 1) / kSoftmaxCols;
  // chunks [t0, t1) with this thread's buffers
  auto run = [&](int64_t t0, int64_t t1) {
    std::vector<C> buf[N];
    for (auto& b : buf) b.resize(static_cast<size_t>(r * std::min(inner, kSoftmaxCols)));
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t o = t / chunks, j0 = (t % chunks) * kSoftmaxCols, w = std::min(kSoftmaxCols, inner - j0);
      const int64_t off = o * r * inner + j0;
      for (size_t q = 0; q < N; ++q) gather_cols(ins[q] + off, r, inner, w, buf[q].data());
      for (int64_t j = 0; j < w; ++j) {
        if constexpr (N == 1) f(buf[0].data() + j * r, r);
        else f(buf[0].data() + j * r, buf[1].data() + j * r, r);
      }
      scatter_cols(buf[0].data(), r, inner, w, out + off);
    }
  };
  const int64_t total = outer * chunks;
  parallel_ranges(total, outer * r * inner > kParallel, run);
}

template <class T>
void softmax_kernel(const SoftmaxArgs& a) {
  if (a.r == 0) return;
  const T* ins[1] = {static_cast<const T*>(a.x)};
  for_each_row(a.outer, a.r, a.inner, ins, static_cast<T*>(a.y),
               [log = a.log](compute_t<T>* v, int64_t n) { softmax_row(v, n, log); });
}

template <class T>
void softmax_backward_kernel(const SoftmaxBackwardArgs& a) {
  if (a.r == 0) return;
  const T* ins[2] = {static_cast<const T*>(a.dy), static_cast<const T*>(a.y)};
  for_each_row(a.outer, a.r, a.inner, ins, static_cast<T*>(a.dx),
               [log = a.log](compute_t<T>* dy, compute_t<T>* y, int64_t n) { softmax_backward_row(dy, y, n, log); });
}

}  // namespace



// This family's CPU kernels into their tables (cpu/register.cpp's register_kernels calls it).
void register_reduce() {
  reduce_kernels().set_floating(DeviceType::CPU, []<class T>(type_tag<T>) { return &reduce_kernel<T>; });
  softmax_kernels().set_floating(DeviceType::CPU, []<class T>(type_tag<T>) { return &softmax_kernel<T>; });
  softmax_backward_kernels().set_floating(DeviceType::CPU, []<class T>(type_tag<T>) { return &softmax_backward_kernel<T>; });
}

}  // namespace hg::cpu
