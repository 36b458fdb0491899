// CPU kernels of the loss family: fused cross-entropy / NLL forward and backward over x viewed as
// (outer, classes, inner). The row math is ops/loss_math.h, shared with the CUDA kernels;
// these loops only index memory. OpenMP only when the work is large: the training hot path (a batch of
// 64-128 rows of 10 classes) runs on this thread without opening a parallel region.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/dispatch_table.h"
#include "core/parallel.h"
#include "cpu/blocks.h"
#include "cpu/register.h"
#include "ops/kernels/loss.h"
#include "ops/loss.h"
#include "ops/loss_math.h"

namespace hg::cpu {
namespace {

constexpr int64_t kParallel = 32768;  // elements below which one thread is faster

const char* op_name(const CrossEntropyArgs& a) {
  return a.scores == ClassScores::Logits ? "cross_entropy" : "nll_loss";
}

// Every target is a class or ignore_index, else an hg::Error naming the value (checked before any
// parallel region: an exception must not leave one). Returns the number of non-ignored targets.
int64_t check_targets(const CrossEntropyArgs& a, int64_t rows) {
  int64_t count = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = a.target[r];
    const lossfn::TargetKind kind = lossfn::classify_target(t, a.ignore_index, a.classes);
    HG_CHECK(kind != lossfn::TargetKind::OutOfRange, op_name(a), ": target ", t, " at position ", r,
             " is out of range for ", a.classes, " classes; targets must be in [0, ", a.classes,
             ") or equal ignore_index=", a.ignore_index);
    count += kind == lossfn::TargetKind::Valid;
  }
  return count;
}

// Pairwise sum of v[0..n): O(eps log n) error, and the order depends only on n.
template <class C>
C pairwise_sum(const C* v, int64_t n) {
  if (n <= 32) {
    C s = 0;
    for (int64_t i = 0; i < n; ++i) s += v[i];
    return s;
  }
  const int64_t h = n / 2;
  return pairwise_sum(v, h) + pairwise_sum(v + h, n - h);
}

// exp in place over a widened block: the loop that costs, compiled once per SIMD tier (chosen at run
// time) so that vm::exp runs 8 or 16 wide over many short rows at once.
template <class C>
[[gnu::always_inline]] inline void exp_body(C* v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) v[i] = fn::m_exp(v[i]);
}
HG_SIMD_TIERS((template <class C>), exp_inplace, exp_body, (C* v, int64_t n), (v, n))

// Rows are processed in blocks of about kBlock elements (several short rows, or one long row), widened
// into a row-major buffer: one bulk conversion when rows are contiguous (inner == 1).
constexpr int64_t kBlock = 512;

template <class T, class C = compute_t<T>>
void gather_rows(const CrossEntropyArgs& a, int64_t r0, int64_t nr, C* buf) {
  const T* x = static_cast<const T*>(a.x);
  const int64_t n = a.classes, s = a.inner;
  if (nr * n == 0) return;  // no classes: every row is ignored and x may have no storage
  if (s == 1) return widen(x + r0 * n, buf, nr * n);
  for (int64_t q = 0; q < nr; ++q) {
    const int64_t o = (r0 + q) / s, j = (r0 + q) - o * s;
    for (int64_t k = 0; k < n; ++k) buf[q * n + k] = load(x[(o * n + k) * s + j]);
  }
}

template <class T, class C = compute_t<T>>
void scatter_rows(const CrossEntropyArgs& a, int64_t r0, int64_t nr, const C* buf) {
  T* dx = static_cast<T*>(a.dx);
  const int64_t n = a.classes, s = a.inner;
  if (s == 1) return narrow(buf, dx + r0 * n, nr * n);
  for (int64_t q = 0; q < nr; ++q) {
    const int64_t o = (r0 + q) / s, j = (r0 + q) - o * s;
    for (int64_t k = 0; k < n; ++k) dx[(o * n + k) * s + j] = store<T>(buf[q * n + k]);
  }
}

// Runs f(r0, nr, buf) over blocks of rows; buf holds max(kBlock, classes) compute-type values per thread.
template <class T, class F>
void for_row_blocks(const CrossEntropyArgs& a, F f) {
  using C = compute_t<T>;
  const int64_t rows = a.outer * a.inner, n = a.classes;
  const int64_t per = std::max<int64_t>(1, kBlock / std::max<int64_t>(n, 1)), blocks = (rows + per - 1) / per;
  const size_t cap = static_cast<size_t>(std::max(kBlock, n));
  // the training hot path (and a one-thread run) opens no parallel region at all (core/parallel.h)
  auto ranges = [&](int64_t b0, int64_t b1) {
    std::vector<C> buf(cap);
    for (int64_t b = b0; b < b1; ++b) f(b * per, std::min(per, rows - b * per), buf.data());
  };
  parallel_ranges(blocks, rows * n > kParallel, ranges);
}

// Loss (and log-sum-exp) of rows [r0, r0+nr): per row the max and the shifted values, then one exp
// over the whole block, then the per-row sums (ops/loss_math.h's formula).
template <class T, class C = compute_t<T>>
void forward_block(const CrossEntropyArgs& a, int64_t r0, int64_t nr, C* buf, C* lse, C* loss) {
  const int64_t n = a.classes;
  gather_rows<T>(a, r0, nr, buf);
  C m[kBlock], d[kBlock], xt[kBlock];
  for (int64_t q = 0; q < nr; ++q) {
    C* row = buf + q * n;
    const int64_t t = a.target[r0 + q];
    if (t == a.ignore_index) continue;
    m[q] = row[0];
    for (int64_t k = 1; k < n; ++k) m[q] = lossfn::max_step(m[q], row[k]);
    d[q] = 0;
    for (int64_t k = 0; k < n; ++k) {
      row[k] -= m[q];
      d[q] += row[k];
    }
    xt[q] = row[t];
  }
  exp_inplace(buf, nr * n);
  const C eps = static_cast<C>(a.label_smoothing), classes = static_cast<C>(n);
  for (int64_t q = 0; q < nr; ++q) {
    const int64_t r = r0 + q;
    lse[r] = 0;
    loss[r] = 0;
    if (a.target[r] == a.ignore_index) continue;
    const C e = pairwise_sum(buf + q * n, n);
    lse[r] = lossfn::log_sum_exp(m[q], e);
    loss[r] = lossfn::ce_row_loss(e, xt[q], d[q], eps, classes);
  }
}

template <class T>
void cross_entropy_forward(const CrossEntropyArgs& a) {
  using C = compute_t<T>;
  const int64_t rows = a.outer * a.inner, n = a.classes, s = a.inner;
  const int64_t count = check_targets(a, rows);
  C* lse = static_cast<C*>(a.stats);
  C* loss = a.reduction == Reduction::None ? static_cast<C*>(a.loss) : lse + rows;
  if (a.scores == ClassScores::LogProbs) {  // nll_loss: a gather, no exp
    const T* x = static_cast<const T*>(a.x);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t t = a.target[r], o = r / s;
      lse[r] = 0;
      loss[r] = t == a.ignore_index ? C(0) : -load(x[(o * n + t) * s + (r - o * s)]);
    }
  } else {
    for_row_blocks<T>(a, [&](int64_t r0, int64_t nr, C* buf) { forward_block<T>(a, r0, nr, buf, lse, loss); });
  }
  if (a.reduction == Reduction::None) return;
  const C total = pairwise_sum(loss, rows);
  lse[2 * rows] = static_cast<C>(count);
  // torch: the mean over the non-ignored rows; 0 / 0 = NaN when there are none
  *static_cast<C*>(a.loss) = a.reduction == Reduction::Mean ? total / static_cast<C>(count) : total;
}

// The upstream gradient of row r: dy[r] (None), dy (Sum) or dy / count (Mean).
template <class C>
C row_upstream(const CrossEntropyArgs& a, int64_t r, int64_t rows) {
  const C* dy = static_cast<const C*>(a.dy);
  if (a.reduction == Reduction::None) return dy[r];
  if (a.reduction == Reduction::Sum) return dy[0];
  return dy[0] / static_cast<const C*>(a.stats)[2 * rows];
}

// dx of rows [r0, r0+nr): softmax rebuilt as exp(x - lse) over the block, then ops/loss_math.h's gradient.
template <class T, class C = compute_t<T>>
void backward_block(const CrossEntropyArgs& a, int64_t r0, int64_t nr, C* buf) {
  const int64_t n = a.classes, rows = a.outer * a.inner;
  const C* lse = static_cast<const C*>(a.stats);
  const bool logits = a.scores == ClassScores::Logits;
  if (logits) {
    gather_rows<T>(a, r0, nr, buf);
    for (int64_t q = 0; q < nr; ++q)
      for (int64_t k = 0; k < n; ++k) buf[q * n + k] -= lse[r0 + q];
    exp_inplace(buf, nr * n);
  }
  const C eps = static_cast<C>(a.label_smoothing), classes = static_cast<C>(n);
  for (int64_t q = 0; q < nr; ++q) {
    C* row = buf + q * n;
    const int64_t t = a.target[r0 + q];
    const C g = t == a.ignore_index ? C(0) : row_upstream<C>(a, r0 + q, rows);
    for (int64_t k = 0; k < n; ++k)
      row[k] = t == a.ignore_index ? C(0)
               : logits            ? lossfn::ce_grad(row[k], k == t, eps, classes, g)
                                   : lossfn::nll_grad(k == t, g);
  }
  scatter_rows<T>(a, r0, nr, buf);
}

template <class T>
void cross_entropy_backward(const CrossEntropyArgs& a) {
  for_row_blocks<T>(a, [&](int64_t r0, int64_t nr, compute_t<T>* buf) { backward_block<T>(a, r0, nr, buf); });
}

}  // namespace


// This family's CPU kernels into their tables (cpu/register.cpp's register_kernels calls it).
void register_loss() {
  cross_entropy_kernels().set_floating(DeviceType::CPU, []<class T>(type_tag<T>) { return &cross_entropy_forward<T>; });
  cross_entropy_backward_kernels().set_floating(DeviceType::CPU, []<class T>(type_tag<T>) { return &cross_entropy_backward<T>; });
}

}  // namespace hg::cpu
