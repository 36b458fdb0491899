// CPU batch_norm and layer_norm kernels (contract in ops/norm.h; the per-element math is
// ops/norm_math.h's, the functions the CUDA kernels call). batch_norm runs one channel per task (a band
// of channels when the channel's runs are short, see bn_forward_band_body) and layer_norm one row: a
// group's elements are read into cache once (F16/BF16 widened into an F32 buffer), then the mean, the
// sum of squared deviations from it (two passes over data in cache: no E[x^2] - E[x]^2 cancellation)
// and the output are computed from there. Backward: the group's two sums, then dx. Inner loops run
// over contiguous memory with kLanes independent accumulators, compiled per SIMD tier
// (cpu/blocks.h), so they vectorise without fast-math. Results do not depend on the thread count:
// tasks split by shape only, a group's sums run in one fixed order, and layer_norm's dweight/dbias add
// fixed row blocks' partial sums in block order.
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/parallel.h"
#include "cpu/blocks.h"
#include "cpu/register.h"
#include "ops/kernels/norm.h"
#include "ops/norm.h"
#include "ops/norm_math.h"

namespace hg::cpu {
namespace {

constexpr int64_t kLanes = 16;         // independent accumulators a run's sum vectorises over
constexpr int64_t kParallel = 1 << 15;  // below this many elements one thread is faster
constexpr int64_t kRowBlocks = 32;     // layer_norm backward: row blocks with their own dweight/dbias partials

// sum over i in [0, n) of f(i), in kLanes lanes (the SIMD lanes), then the lanes pairwise.
template <class C, class F>
[[gnu::always_inline]] inline C sum_lanes(int64_t n, const F& f) {
  C lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) lane[l] += f(i + l);
  for (int64_t l = 0; i < n; ++i, ++l) lane[l] += f(i);
  for (int64_t w = kLanes / 2; w > 0; w /= 2)
    for (int64_t l = 0; l < w; ++l) lane[l] += lane[l + w];
  return lane[0];
}

// The sums of g(i) and of g(i) * (x[i] - mean) over a run (backward's two group sums). Two passes over
// data in cache: with both sums in one loop GCC vectorises across the lanes' iterations instead and
// spends its time shuffling (measured 5x slower than a pass each).
template <class C>
struct GradSums {
  C dy = 0, dy_xc = 0;
};
template <class C, class G>
[[gnu::always_inline]] inline GradSums<C> grad_sums(int64_t n, const C* x, C mean, const G& g) {
  return {sum_lanes<C>(n, g), sum_lanes<C>(n, [&](int64_t i) { return g(i) * (x[i] - mean); })};
}

// A group's n runs of len contiguous elements in the compute type: run i at base + i * stride. F32/F64
// data is read in place; F16/BF16 is widened once into buf.
template <class C>
struct Runs {
  const C* base;
  int64_t stride, n, len;
  const C* run(int64_t i) const { return base + i * stride; }
};
template <class T, class C = compute_t<T>>
Runs<C> runs_of(const T* first, int64_t stride, int64_t n, int64_t len, std::vector<C>& buf) {
  if constexpr (std::is_same_v<T, C>) {
    return {first, stride, n, len};
  } else {
    buf.resize(static_cast<size_t>(n * len));
    for (int64_t i = 0; i < n; ++i) widen(first + i * stride, buf.data() + i * len, len);
    return {buf.data(), len, n, len};
  }
}

// Writes run i of a group's output: F32/F64 straight into dst, F16/BF16 through a block of `tmp`
// (f(j) for j in [0, len), rounded once).
template <class T, class C, class F>
[[gnu::always_inline]] inline void write_run(T* dst, int64_t len, std::vector<C>& tmp, const F& f) {
  if constexpr (std::is_same_v<T, C>) {
    for (int64_t j = 0; j < len; ++j) dst[j] = f(j);
  } else {
    tmp.resize(static_cast<size_t>(len));
    for (int64_t j = 0; j < len; ++j) tmp[static_cast<size_t>(j)] = f(j);
    narrow(tmp.data(), dst, len);
  }
}

// The mean and biased variance of a group, two passes; the runs' partial sums add up in double.
template <class C>
[[gnu::always_inline]] inline void group_stats(const Runs<C>& r, C& mean, C& var) {
  const double m = static_cast<double>(r.n * r.len);
  double s = 0, q = 0;
  for (int64_t i = 0; i < r.n; ++i) s += sum_lanes<C>(r.len, [x = r.run(i)](int64_t j) { return x[j]; });
  mean = static_cast<C>(s / m);
  for (int64_t i = 0; i < r.n; ++i)
    q += sum_lanes<C>(r.len, [x = r.run(i), mu = mean](int64_t j) { return (x[j] - mu) * (x[j] - mu); });
  var = static_cast<C>(q / m);
}

// ---- batch_norm --------------------------------------------------------------------------------

template <class C>
C* cptr(void* p) {
  return static_cast<C*>(p);
}
template <class C>
const C* cptr(const void* p) {
  return static_cast<const C*>(p);
}

// Channel ch once its statistics are known (the batch's in training, the running ones in eval): updates
// the running statistics in training, saves mean and invstd for backward, and returns the affine map
// y = (x - mean) * scale + shift.
template <class C>
struct ChannelMap {
  C mean, scale, shift;
};
template <class C>
ChannelMap<C> channel_map(const BatchNormArgs& a, int64_t ch, C mean, C var) {
  if (a.training && a.running_mean)
    cptr<C>(a.running_mean)[ch] = normfn::running_update(cptr<C>(a.running_mean)[ch], mean, a.momentum);
  if (a.training && a.running_var)
    cptr<C>(a.running_var)[ch] =
        normfn::running_update(cptr<C>(a.running_var)[ch], normfn::unbiased(var, a.n * a.s), a.momentum);
  const C invstd = normfn::invstd(var, a.eps);
  cptr<C>(a.mean)[ch] = mean;
  cptr<C>(a.invstd)[ch] = invstd;
  return {mean, a.weight ? invstd * cptr<C>(a.weight)[ch] : invstd, a.bias ? cptr<C>(a.bias)[ch] : C(0)};
}
template <class C>
ChannelMap<C> running_map(const BatchNormArgs& a, int64_t ch) {
  return channel_map(a, ch, cptr<C>(a.running_mean)[ch], cptr<C>(a.running_var)[ch]);
}

// Channel ch's backward from its sums of dy and dy * (x - mean): writes dweight and dbias and returns dx's
// coefficients (zero in eval, where the statistics are constants) and scale.
template <class C>
struct ChannelGrad {
  C mean;
  normfn::GradCoef<C> k;
  C scale;
};
template <class C>
ChannelGrad<C> channel_grad(const BatchNormArgs& a, int64_t ch, double sum_dy, double sum_dy_xc) {
  const C invstd = cptr<C>(a.invstd)[ch];
  if (a.dweight) cptr<C>(a.dweight)[ch] = static_cast<C>(sum_dy_xc) * invstd;
  if (a.dbias) cptr<C>(a.dbias)[ch] = static_cast<C>(sum_dy);
  const normfn::GradCoef<C> k = a.training ? normfn::grad_coef(static_cast<C>(sum_dy), static_cast<C>(sum_dy_xc),
                                                               invstd, a.n * a.s)
                                           : normfn::GradCoef<C>{};
  return {cptr<C>(a.mean)[ch], k, a.weight ? invstd * cptr<C>(a.weight)[ch] : invstd};
}

// One channel per task, for runs of s >= kLanes elements (feature maps): the channel's n runs are read
// into cache once, each loop sums one run over the lanes.
template <class T>
[[gnu::always_inline]] inline void bn_forward_body(const BatchNormArgs& a, const T* x_in, int64_t ch) {
  using C = compute_t<T>;
  thread_local std::vector<C> buf, tmp;
  const int64_t cs = a.c * a.s;
  const Runs<C> x = runs_of(x_in + ch * a.s, cs, a.n, a.s, buf);
  C mean, var;
  if (a.training) group_stats(x, mean, var);
  const ChannelMap<C> f = a.training ? channel_map(a, ch, mean, var) : running_map<C>(a, ch);
  for (int64_t i = 0; i < a.n; ++i)
    write_run(static_cast<T*>(a.y) + i * cs + ch * a.s, a.s, tmp,
              [xr = x.run(i), f](int64_t j) { return normfn::forward(xr[j], f.mean, f.scale, f.shift); });
}
HG_SIMD_TIERS((template <class T>), bn_forward_channel, bn_forward_body,
              (const BatchNormArgs& a, const T* x, int64_t ch), (a, x, ch))

template <class T>
[[gnu::always_inline]] inline void bn_backward_body(const BatchNormArgs& a, const T* x_in, int64_t ch) {
  using C = compute_t<T>;
  thread_local std::vector<C> xbuf, dybuf, tmp;
  const int64_t cs = a.c * a.s;
  const Runs<C> x = runs_of(x_in + ch * a.s, cs, a.n, a.s, xbuf);
  const Runs<C> dy = runs_of(static_cast<const T*>(a.dy) + ch * a.s, cs, a.n, a.s, dybuf);
  const C mean = cptr<C>(a.mean)[ch];
  double sum_dy = 0, sum_dy_xc = 0;
  if (a.training || a.dweight || a.dbias)
    for (int64_t i = 0; i < a.n; ++i) {
      const GradSums<C> g = grad_sums(a.s, x.run(i), mean, [d = dy.run(i)](int64_t j) { return d[j]; });
      sum_dy += g.dy;
      sum_dy_xc += g.dy_xc;
    }
  const ChannelGrad<C> g = channel_grad<C>(a, ch, sum_dy, sum_dy_xc);
  if (!a.dx) return;
  for (int64_t i = 0; i < a.n; ++i)
    write_run(static_cast<T*>(a.dx) + i * cs + ch * a.s, a.s, tmp, [xr = x.run(i), dr = dy.run(i), g](int64_t j) {
      return normfn::grad_x(dr[j], xr[j] - g.mean, g.k, g.scale);
    });
}
HG_SIMD_TIERS((template <class T>), bn_backward_channel, bn_backward_body,
              (const BatchNormArgs& a, const T* x, int64_t ch), (a, x, ch))

// A band of channels [c0, c1) per task, for runs shorter than kLanes ((N, C) input, small maps): x is n
// rows of c * s, the band a block of w = (c1 - c0) * s columns, and every loop runs along a row (one
// run per channel would be a loop of s iterations with a strided walk per element). Columns sum in
// double; a channel's sums are its s columns'. Per-column copies of the channels' constants keep the
// row loops free of divisions.
constexpr int64_t kBandCols = 256;

// acc[j] = the sum over the rows of f(i, j), for the w columns of a band.
template <class F>
[[gnu::always_inline]] inline void column_sums(int64_t n, int64_t w, std::vector<double>& acc, const F& f) {
  acc.assign(static_cast<size_t>(w), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < w; ++j) acc[static_cast<size_t>(j)] += f(i, j);
}
// The sum of band channel q's s columns.
inline double channel_sum(const std::vector<double>& acc, int64_t q, int64_t s) {
  double t = 0;
  for (int64_t j = q * s; j < (q + 1) * s; ++j) t += acc[static_cast<size_t>(j)];
  return t;
}
// v[j] = value(q) for each of channel q's s columns, q in [0, channels).
template <class C, class F>
void per_column(std::vector<C>& v, int64_t channels, int64_t s, const F& value) {
  v.resize(static_cast<size_t>(channels * s));
  for (int64_t q = 0; q < channels; ++q) std::fill_n(v.begin() + q * s, s, value(q));
}

template <class T>
[[gnu::always_inline]] inline void bn_forward_band_body(const BatchNormArgs& a, const T* x_in, int64_t c0,
                                                        int64_t c1) {
  using C = compute_t<T>;
  thread_local std::vector<C> buf, tmp, mean, scale, shift;
  thread_local std::vector<double> acc;
  thread_local std::vector<ChannelMap<C>> maps;
  const int64_t s = a.s, cs = a.c * s, nc = c1 - c0, w = nc * s;
  const double m = static_cast<double>(a.n * s);
  const Runs<C> x = runs_of(x_in + c0 * s, cs, a.n, w, buf);
  maps.resize(static_cast<size_t>(nc));
  if (a.training) {
    column_sums(a.n, w, acc, [&](int64_t i, int64_t j) { return x.run(i)[j]; });
    per_column(mean, nc, s, [&](int64_t q) { return static_cast<C>(channel_sum(acc, q, s) / m); });
    column_sums(a.n, w, acc, [&](int64_t i, int64_t j) {
      const C d = x.run(i)[j] - mean[static_cast<size_t>(j)];
      return d * d;
    });
    for (int64_t q = 0; q < nc; ++q)
      maps[static_cast<size_t>(q)] =
          channel_map(a, c0 + q, mean[static_cast<size_t>(q * s)], static_cast<C>(channel_sum(acc, q, s) / m));
  } else {
    for (int64_t q = 0; q < nc; ++q) maps[static_cast<size_t>(q)] = running_map<C>(a, c0 + q);
  }
  per_column(mean, nc, s, [&](int64_t q) { return maps[static_cast<size_t>(q)].mean; });
  per_column(scale, nc, s, [&](int64_t q) { return maps[static_cast<size_t>(q)].scale; });
  per_column(shift, nc, s, [&](int64_t q) { return maps[static_cast<size_t>(q)].shift; });
  for (int64_t i = 0; i < a.n; ++i)
    write_run(static_cast<T*>(a.y) + i * cs + c0 * s, w, tmp, [xr = x.run(i), mu = mean.data(), sc = scale.data(),
                                                               sh = shift.data()](int64_t j) {
      return normfn::forward(xr[j], mu[j], sc[j], sh[j]);
    });
}
HG_SIMD_TIERS((template <class T>), bn_forward_band, bn_forward_band_body,
              (const BatchNormArgs& a, const T* x, int64_t c0, int64_t c1), (a, x, c0, c1))

template <class T>
[[gnu::always_inline]] inline void bn_backward_band_body(const BatchNormArgs& a, const T* x_in, int64_t c0,
                                                         int64_t c1) {
  using C = compute_t<T>;
  thread_local std::vector<C> xbuf, dybuf, tmp, mean, k1, k2, scale;
  thread_local std::vector<double> acc_dy, acc_dy_xc;
  thread_local std::vector<ChannelGrad<C>> grads;
  const int64_t s = a.s, cs = a.c * s, nc = c1 - c0, w = nc * s;
  const Runs<C> x = runs_of(x_in + c0 * s, cs, a.n, w, xbuf);
  const Runs<C> dy = runs_of(static_cast<const T*>(a.dy) + c0 * s, cs, a.n, w, dybuf);
  per_column(mean, nc, s, [&](int64_t q) { return cptr<C>(a.mean)[c0 + q]; });
  const bool sums = a.training || a.dweight || a.dbias;
  column_sums(sums ? a.n : 0, w, acc_dy, [&](int64_t i, int64_t j) { return dy.run(i)[j]; });
  column_sums(sums ? a.n : 0, w, acc_dy_xc, [&](int64_t i, int64_t j) {
    return dy.run(i)[j] * (x.run(i)[j] - mean[static_cast<size_t>(j)]);
  });
  grads.resize(static_cast<size_t>(nc));
  for (int64_t q = 0; q < nc; ++q)
    grads[static_cast<size_t>(q)] = channel_grad<C>(a, c0 + q, channel_sum(acc_dy, q, s), channel_sum(acc_dy_xc, q, s));
  if (!a.dx) return;
  per_column(k1, nc, s, [&](int64_t q) { return grads[static_cast<size_t>(q)].k.k1; });
  per_column(k2, nc, s, [&](int64_t q) { return grads[static_cast<size_t>(q)].k.k2; });
  per_column(scale, nc, s, [&](int64_t q) { return grads[static_cast<size_t>(q)].scale; });
  for (int64_t i = 0; i < a.n; ++i)
    write_run(static_cast<T*>(a.dx) + i * cs + c0 * s, w, tmp,
              [xr = x.run(i), dr = dy.run(i), mu = mean.data(), k1p = k1.data(), k2p = k2.data(),
               sc = scale.data()](int64_t j) {
                return normfn::grad_x(dr[j], xr[j] - mu[j], normfn::GradCoef<C>{k1p[j], k2p[j]}, sc[j]);
              });
}
HG_SIMD_TIERS((template <class T>), bn_backward_band, bn_backward_band_body,
              (const BatchNormArgs& a, const T* x, int64_t c0, int64_t c1), (a, x, c0, c1))

// Calls channel(ch) for every channel (long runs) or band(c0, c1) for bands of channels (short runs).
template <class Channel, class Band>
void for_channels(const BatchNormArgs& a, const Channel& channel, const Band& band) {
  const bool parallel = a.n * a.c * a.s >= kParallel;
  if (a.s >= kLanes) return parallel_for(a.c, parallel, channel);
  const int64_t per_band = std::max<int64_t>(1, kBandCols / std::max<int64_t>(a.s, 1));
  parallel_for(num_pieces(a.c, per_band), parallel,
               [&](int64_t b) { band(b * per_band, std::min(a.c, (b + 1) * per_band)); });
}

template <class T>
void bn_forward(const BatchNormArgs& a) {
  const T* x = static_cast<const T*>(a.x);
  for_channels(a, [&](int64_t ch) { bn_forward_channel(a, x, ch); },
               [&](int64_t c0, int64_t c1) { bn_forward_band(a, x, c0, c1); });
}
template <class T>
void bn_backward(const BatchNormArgs& a) {
  const T* x = static_cast<const T*>(a.x);
  for_channels(a, [&](int64_t ch) { bn_backward_channel(a, x, ch); },
               [&](int64_t c0, int64_t c1) { bn_backward_band(a, x, c0, c1); });
}

// ---- layer_norm --------------------------------------------------------------------------------

// Row r: mean, invstd, y.
template <class T>
[[gnu::always_inline]] inline void ln_forward_body(const LayerNormArgs& a, const T* x_in, int64_t r) {
  using C = compute_t<T>;
  thread_local std::vector<C> buf, tmp;
  const Runs<C> x = runs_of(x_in + r * a.k, a.k, 1, a.k, buf);
  C mean, var;
  group_stats(x, mean, var);
  const C invstd = normfn::invstd(var, a.eps);
  cptr<C>(a.mean)[r] = mean;
  cptr<C>(a.invstd)[r] = invstd;
  const C *w = cptr<C>(a.weight), *b = cptr<C>(a.bias), *xr = x.run(0);
  write_run(static_cast<T*>(a.y) + r * a.k, a.k, tmp, [=](int64_t j) {
    return normfn::forward(xr[j], mean, w ? invstd * w[j] : invstd, b ? b[j] : C(0));
  });
}
HG_SIMD_TIERS((template <class T>), ln_forward_row, ln_forward_body, (const LayerNormArgs& a, const T* x, int64_t r),
              (a, x, r))

// Row r: dx, and the row's dy * xhat and dy added into pw and pb (the row block's partials) when non-null.
template <class T>
[[gnu::always_inline]] inline void ln_backward_body(const LayerNormArgs& a, const T* x_in, int64_t r,
                                                    compute_t<T>* pw, compute_t<T>* pb) {
  using C = compute_t<T>;
  thread_local std::vector<C> xbuf, dybuf, gbuf, tmp;
  const C* x = runs_of(x_in + r * a.k, a.k, 1, a.k, xbuf).run(0);
  const C* dy = runs_of(static_cast<const T*>(a.dy) + r * a.k, a.k, 1, a.k, dybuf).run(0);
  const C mean = cptr<C>(a.mean)[r], invstd = cptr<C>(a.invstd)[r], *w = cptr<C>(a.weight);
  if (pw)
    for (int64_t j = 0; j < a.k; ++j) pw[j] += dy[j] * ((x[j] - mean) * invstd);
  if (pb)
    for (int64_t j = 0; j < a.k; ++j) pb[j] += dy[j];
  if (!a.dx) return;
  const C* g = dy;  // the gradient of the normalised row, dy * w, formed once for the sums and dx alike
  if (w) {
    gbuf.resize(static_cast<size_t>(a.k));
    for (int64_t j = 0; j < a.k; ++j) gbuf[static_cast<size_t>(j)] = dy[j] * w[j];
    g = gbuf.data();
  }
  const GradSums<C> sums = grad_sums(a.k, x, mean, [g](int64_t j) { return g[j]; });
  const normfn::GradCoef<C> k = normfn::grad_coef(sums.dy, sums.dy_xc, invstd, a.k);
  write_run(static_cast<T*>(a.dx) + r * a.k, a.k, tmp,
            [=](int64_t j) { return normfn::grad_x(g[j], x[j] - mean, k, invstd); });
}
HG_SIMD_TIERS((template <class T>), ln_backward_row, ln_backward_body,
              (const LayerNormArgs& a, const T* x, int64_t r, compute_t<T>* pw, compute_t<T>* pb), (a, x, r, pw, pb))

template <class T>
void ln_forward(const LayerNormArgs& a) {
  parallel_for(a.rows, a.rows * a.k >= kParallel, [&](int64_t r) { ln_forward_row(a, static_cast<const T*>(a.x), r); });
}

// Rows split into a fixed number of blocks (independent of the thread count); each block sums its own
// dweight/dbias partials, which are then added in block order.
template <class T>
void ln_backward(const LayerNormArgs& a) {
  using C = compute_t<T>;
  const int64_t blocks = std::min(a.rows, kRowBlocks), k = a.k;
  const bool partials = a.dweight || a.dbias;
  std::vector<C> part(partials ? static_cast<size_t>(2 * blocks * k) : 0, C(0));
  parallel_for(blocks, a.rows * k >= kParallel, [&](int64_t blk) {
    C* pw = a.dweight ? part.data() + 2 * blk * k : nullptr;
    C* pb = a.dbias ? part.data() + (2 * blk + 1) * k : nullptr;
    for (int64_t r = a.rows * blk / blocks; r < a.rows * (blk + 1) / blocks; ++r) ln_backward_row(a, static_cast<const T*>(a.x), r, pw, pb);
  });
  if (!partials) return;
  for (int64_t j = 0; j < k; ++j) {
    C w = 0, b = 0;
    for (int64_t blk = 0; blk < blocks; ++blk) {
      w += part[static_cast<size_t>(2 * blk * k + j)];
      b += part[static_cast<size_t>((2 * blk + 1) * k + j)];
    }
    if (a.dweight) cptr<C>(a.dweight)[j] = w;
    if (a.dbias) cptr<C>(a.dbias)[j] = b;
  }
}

}  // namespace




// This family's CPU kernels into their tables (cpu/register.cpp's register_kernels calls it).
void register_norm() {
  batch_norm_forward_kernels().set_floating(DeviceType::CPU, []<class T>(type_tag<T>) { return &bn_forward<T>; });
  batch_norm_backward_kernels().set_floating(DeviceType::CPU, []<class T>(type_tag<T>) { return &bn_backward<T>; });
  layer_norm_forward_kernels().set_floating(DeviceType::CPU, []<class T>(type_tag<T>) { return &ln_forward<T>; });
  layer_norm_backward_kernels().set_floating(DeviceType::CPU, []<class T>(type_tag<T>) { return &ln_backward<T>; });
}

}  // namespace hg::cpu
