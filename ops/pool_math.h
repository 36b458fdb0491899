#pragma once
// The window math of 2-D pooling, written once for the CPU kernels (cpu/pool.cpp) and the CUDA
// kernels (cuda/kernels/pool.cu), so the CPU tests check what the GPU runs. Each function computes one
// output (forward) or one input gradient (backward, as a gather over the outputs whose windows cover
// that input: no atomics, deterministic). Planes are contiguous (H,W) / (OH,OW); max indices are flat
// positions ih*W + iw in the input plane, as torch's return_indices. Pure POD code: no tensors here.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/half.h"
#include "core/macros.h"

namespace hg {

enum class PoolKind : uint8_t { Max, Avg, AdaptiveAvg };

// One spatial axis: input and output size, kernel, stride, padding, dilation (adaptive pooling uses
// only in and out).
struct PoolAxis {
  int64_t in = 0, out = 0, k = 1, s = 1, p = 0, d = 1;
};

struct PoolGeom {
  PoolKind kind = PoolKind::Max;
  PoolAxis h, w;
  bool count_include_pad = true;  // Avg only
};

// torch's pooling_output_shape: floor (or ceil) of (in + 2p - d(k-1) - 1) / s, plus one; in ceil mode
// the last window must still start inside the input or its left padding.
HG_HD int64_t pool_out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const int64_t span = in + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
  int64_t out = (span >= 0 ? span / s : -((-span + s - 1) / s)) + 1;  // floor division
  if (ceil_mode && out > 0 && (out - 1) * s >= in + p) --out;
  return out;
}

// A window along one axis: inputs [lo, hi) (clipped to the input) and the size avg pooling divides by
// when it counts padding (torch: the window clipped to the padded input, not to the input).
struct PoolSpan {
  int64_t lo = 0, hi = 0, padded = 0;
};

// Adaptive windows (torch): output o pools [floor(o*in/out), ceil((o+1)*in/out)).
HG_HD int64_t adaptive_lo(int64_t o, int64_t in, int64_t out) { return o * in / out; }
HG_HD int64_t adaptive_hi(int64_t o, int64_t in, int64_t out) { return ((o + 1) * in + out - 1) / out; }

HG_HD PoolSpan avg_span(const PoolAxis& a, int64_t o, bool adaptive) {
  if (adaptive) {
    const int64_t lo = adaptive_lo(o, a.in, a.out), hi = adaptive_hi(o, a.in, a.out);
    return {lo, hi, hi - lo};
  }
  const int64_t start = o * a.s - a.p;
  const int64_t end = start + a.k < a.in + a.p ? start + a.k : a.in + a.p;
  return {start > 0 ? start : 0, end < a.in ? end : a.in, end - start};
}

// The outputs [lo, hi) whose windows can contain input i: adaptive windows by the formula above with
// the roles of in and out swapped, strided windows by o*s - p <= i <= o*s - p + d*(k-1). Callers
// still test membership (dilation gaps, clipped windows).
HG_HD PoolSpan covering_outputs(const PoolAxis& a, int64_t i, bool adaptive) {
  int64_t lo, hi;
  if (adaptive) {
    lo = i * a.out / a.in;
    hi = ((i + 1) * a.out + a.in - 1) / a.in;
  } else {
    const int64_t t = i + a.p - a.d * (a.k - 1);
    lo = t <= 0 ? 0 : (t + a.s - 1) / a.s;
    hi = (i + a.p) / a.s + 1;
  }
  return {lo, hi < a.out ? hi : a.out, 0};
}

// torch.max semantics inside a window (NaN beats any number, the first position wins among equals) as
// an integer key compared with a strict >: the key orders like the value, -0 equals +0, and every NaN
// is above +inf. The position is selected with a bit mask: a branch on the compare mispredicts about
// every other element on random data (several times slower on the CPU), and GCC does not reliably
// turn a ternary into a cmov here.
HG_HD int32_t max_key(float v) {
  const auto b = static_cast<int32_t>(detail::float_bits(v));
  const int32_t k = (b & 0x7fffffff) == 0 ? 0 : b ^ ((b >> 31) & 0x7fffffff);  // C++20: >> is arithmetic
  return v != v ? INT32_MAX : k;
}
HG_HD int64_t max_key(double v) {
  int64_t b;
  memcpy(&b, &v, sizeof(b));
  const int64_t k = (b & INT64_MAX) == 0 ? 0 : b ^ ((b >> 63) & INT64_MAX);
  return v != v ? INT64_MAX : k;
}

// The maximum of window (oh, ow) (the element itself, NaN payload included) and its flat position; a
// window with no input inside (possible only with dilation) gives -inf and position -1, which backward
// skips.
template <class T>
HG_HD compute_t<T> max_pool_at(const PoolGeom& g, const T* plane, int64_t oh, int64_t ow, int64_t& arg) {
  using C = compute_t<T>;
  using K = decltype(max_key(C{}));
  K best = K(1) << (sizeof(K) * 8 - 1);  // the lowest key: below the key of any value, -inf and -NaN included
  int64_t at = -1;  // a local, not arg: a store through arg could alias g and force reloads
  for (int64_t i = 0; i < g.h.k; ++i) {
    const int64_t ih = oh * g.h.s - g.h.p + i * g.h.d;
    if (ih < 0 || ih >= g.h.in) continue;
    for (int64_t j = 0; j < g.w.k; ++j) {
      const int64_t iw = ow * g.w.s - g.w.p + j * g.w.d;
      if (iw < 0 || iw >= g.w.in) continue;
      const K key = max_key(load(plane[ih * g.w.in + iw]));
      const int64_t take = -static_cast<int64_t>(key > best);  // all ones or zero: no branch to mispredict
      at = (at & ~take) | ((ih * g.w.in + iw) & take);
      best = key > best ? key : best;
    }
  }
  arg = at;
  return at < 0 ? -static_cast<C>(INFINITY) : load(plane[at]);
}

// The divisor of avg window (oh, ow); adaptive windows never count padding.
HG_HD int64_t avg_divisor(const PoolGeom& g, const PoolSpan& sh, const PoolSpan& sw) {
  if (g.kind == PoolKind::Avg && g.count_include_pad) return sh.padded * sw.padded;
  return (sh.hi - sh.lo) * (sw.hi - sw.lo);
}

template <class T>
HG_HD compute_t<T> avg_pool_at(const PoolGeom& g, const T* plane, int64_t oh, int64_t ow) {
  using C = compute_t<T>;
  const bool adaptive = g.kind == PoolKind::AdaptiveAvg;
  const PoolSpan sh = avg_span(g.h, oh, adaptive), sw = avg_span(g.w, ow, adaptive);
  if (sh.hi <= sh.lo || sw.hi <= sw.lo) return 0;  // torch: an empty window pools to 0
  C sum = 0;
  for (int64_t ih = sh.lo; ih < sh.hi; ++ih)
    for (int64_t iw = sw.lo; iw < sw.hi; ++iw) sum += load(plane[ih * g.w.in + iw]);
  return sum / static_cast<C>(avg_divisor(g, sh, sw));
}

// dx at input (ih, iw) of max pooling: the sum of dy over the outputs whose maximum is that input.
template <class T>
HG_HD compute_t<T> max_pool_grad_at(const PoolGeom& g, const T* dy, const int64_t* idx, int64_t ih, int64_t iw) {
  using C = compute_t<T>;
  const PoolSpan rh = covering_outputs(g.h, ih, false), rw = covering_outputs(g.w, iw, false);
  const int64_t self = ih * g.w.in + iw;
  C sum = 0;
  for (int64_t oh = rh.lo; oh < rh.hi; ++oh)
    for (int64_t ow = rw.lo; ow < rw.hi; ++ow)
      if (idx[oh * g.w.out + ow] == self) sum += load(dy[oh * g.w.out + ow]);
  return sum;
}

// dx at input (ih, iw) of (adaptive) avg pooling: dy / divisor summed over the windows containing it.
template <class T>
HG_HD compute_t<T> avg_pool_grad_at(const PoolGeom& g, const T* dy, int64_t ih, int64_t iw) {
  using C = compute_t<T>;
  const bool adaptive = g.kind == PoolKind::AdaptiveAvg;
  const PoolSpan rh = covering_outputs(g.h, ih, adaptive), rw = covering_outputs(g.w, iw, adaptive);
  C sum = 0;
  for (int64_t oh = rh.lo; oh < rh.hi; ++oh) {
    const PoolSpan sh = avg_span(g.h, oh, adaptive);
    if (ih < sh.lo || ih >= sh.hi) continue;
    for (int64_t ow = rw.lo; ow < rw.hi; ++ow) {
      const PoolSpan sw = avg_span(g.w, ow, adaptive);
      if (iw < sw.lo || iw >= sw.hi) continue;
      sum += load(dy[oh * g.w.out + ow]) / static_cast<C>(avg_divisor(g, sh, sw));
    }
  }
  return sum;
}

}  // namespace hg
