// CPU batch_norm and layer_norm kernels (contract in ops/norm.h; the per-element math is
// ops/norm_math.h's, the functions the CUDA kernels call). batch_norm runs one channel per task and
// layer_norm one row: a group's elements are read into cache once (F16/BF16 widened into an F32
// buffer), then the mean, the sum of squared deviations from it (two passes over data in cache: no
// E[x^2] - E[x]^2 cancellation) and the output are computed from there. Backward: one pass for the
// group's two sums, one for dx. Inner loops run over contiguous runs with kLanes independent
// accumulators, compiled per SIMD tier (ops/cpu/blocks.h), so they vectorise without fast-math.
// Results do not depend on the thread count: a group's sums run in one fixed order, and layer_norm's
// dweight/dbias add fixed row blocks' partial sums in block order.
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/parallel.h"
#include "ops/cpu/blocks.h"
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

template <class T>
const compute_t<T>* cptr(const void* p) {
  return static_cast<const compute_t<T>*>(p);
}
template <class T>
compute_t<T>* cptr(void* p) {
  return static_cast<compute_t<T>*>(p);
}

// Channel ch: statistics (batch, or running in eval), running update, y.
template <class T>
[[gnu::always_inline]] inline void bn_forward_body(const BatchNormArgs& a, const T* x_in, int64_t ch) {
  using C = compute_t<T>;
  thread_local std::vector<C> buf, tmp;
  const int64_t cs = a.c * a.s;
  const Runs<C> x = runs_of(x_in + ch * a.s, cs, a.n, a.s, buf);
  C mean, var;
  if (a.training) {
    group_stats(x, mean, var);
    if (a.running_mean) cptr<T>(a.running_mean)[ch] = normfn::running_update(cptr<T>(a.running_mean)[ch], mean, a.momentum);
    if (a.running_var)
      cptr<T>(a.running_var)[ch] =
          normfn::running_update(cptr<T>(a.running_var)[ch], normfn::unbiased(var, a.n * a.s), a.momentum);
  } else {
    mean = cptr<T>(a.running_mean)[ch];
    var = cptr<T>(a.running_var)[ch];
  }
  const C invstd = normfn::invstd(var, a.eps);
  cptr<T>(a.mean)[ch] = mean;
  cptr<T>(a.invstd)[ch] = invstd;
  const C scale = a.weight ? invstd * cptr<T>(a.weight)[ch] : invstd, shift = a.bias ? cptr<T>(a.bias)[ch] : C(0);
  for (int64_t i = 0; i < a.n; ++i)
    write_run(static_cast<T*>(a.y) + i * cs + ch * a.s, a.s, tmp,
              [xr = x.run(i), mean, scale, shift](int64_t j) { return normfn::forward(xr[j], mean, scale, shift); });
}
HG_SIMD_TIERS((template <class T>), bn_forward_channel, bn_forward_body,
              (const BatchNormArgs& a, const T* x, int64_t ch), (a, x, ch))

// Channel ch: the sums of dy and dy * (x - mean), dweight and dbias from them, then dx.
template <class T>
[[gnu::always_inline]] inline void bn_backward_body(const BatchNormArgs& a, const T* x_in, int64_t ch) {
  using C = compute_t<T>;
  thread_local std::vector<C> xbuf, dybuf, tmp;
  const int64_t cs = a.c * a.s;
  const Runs<C> x = runs_of(x_in + ch * a.s, cs, a.n, a.s, xbuf);
  const Runs<C> dy = runs_of(static_cast<const T*>(a.dy) + ch * a.s, cs, a.n, a.s, dybuf);
  const C mean = cptr<T>(a.mean)[ch], invstd = cptr<T>(a.invstd)[ch];
  double sum_dy = 0, sum_dy_xc = 0;
  if (a.training || a.dweight || a.dbias)
    for (int64_t i = 0; i < a.n; ++i) {
      const GradSums<C> g = grad_sums(a.s, x.run(i), mean, [d = dy.run(i)](int64_t j) { return d[j]; });
      sum_dy += g.dy, sum_dy_xc += g.dy_xc;
    }
  if (a.dweight) cptr<T>(a.dweight)[ch] = static_cast<C>(sum_dy_xc) * invstd;
  if (a.dbias) cptr<T>(a.dbias)[ch] = static_cast<C>(sum_dy);
  if (!a.dx) return;
  const C scale = a.weight ? invstd * cptr<T>(a.weight)[ch] : invstd;
  const normfn::GradCoef<C> k =
      a.training ? normfn::grad_coef(static_cast<C>(sum_dy), static_cast<C>(sum_dy_xc), invstd, a.n * a.s)
                 : normfn::GradCoef<C>{};
  for (int64_t i = 0; i < a.n; ++i)
    write_run(static_cast<T*>(a.dx) + i * cs + ch * a.s, a.s, tmp,
              [xr = x.run(i), dr = dy.run(i), mean, k, scale](int64_t j) {
                return normfn::grad_x(dr[j], xr[j] - mean, k, scale);
              });
}
HG_SIMD_TIERS((template <class T>), bn_backward_channel, bn_backward_body,
              (const BatchNormArgs& a, const T* x, int64_t ch), (a, x, ch))

template <class T>
void bn_forward(const BatchNormArgs& a) {
  parallel_for(a.c, a.n * a.c * a.s >= kParallel, [&](int64_t ch) { bn_forward_channel(a, static_cast<const T*>(a.x), ch); });
}
template <class T>
void bn_backward(const BatchNormArgs& a) {
  parallel_for(a.c, a.n * a.c * a.s >= kParallel, [&](int64_t ch) { bn_backward_channel(a, static_cast<const T*>(a.x), ch); });
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
  cptr<T>(a.mean)[r] = mean;
  cptr<T>(a.invstd)[r] = invstd;
  const C *w = cptr<T>(a.weight), *b = cptr<T>(a.bias), *xr = x.run(0);
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
  const C mean = cptr<T>(a.mean)[r], invstd = cptr<T>(a.invstd)[r], *w = cptr<T>(a.weight);
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
    if (a.dweight) cptr<T>(a.dweight)[j] = w;
    if (a.dbias) cptr<T>(a.dbias)[j] = b;
  }
}

}  // namespace

void register_norm(DispatchTable<BatchNormKernel>& bn_fwd, DispatchTable<BatchNormKernel>& bn_bwd,
                   DispatchTable<LayerNormKernel>& ln_fwd, DispatchTable<LayerNormKernel>& ln_bwd) {
  bn_fwd.set(DeviceType::CPU, DType::F32, &bn_forward<float>);
  bn_fwd.set(DeviceType::CPU, DType::F16, &bn_forward<f16>);
  bn_fwd.set(DeviceType::CPU, DType::BF16, &bn_forward<bf16>);
  bn_fwd.set(DeviceType::CPU, DType::F64, &bn_forward<double>);
  bn_bwd.set(DeviceType::CPU, DType::F32, &bn_backward<float>);
  bn_bwd.set(DeviceType::CPU, DType::F16, &bn_backward<f16>);
  bn_bwd.set(DeviceType::CPU, DType::BF16, &bn_backward<bf16>);
  bn_bwd.set(DeviceType::CPU, DType::F64, &bn_backward<double>);
  ln_fwd.set(DeviceType::CPU, DType::F32, &ln_forward<float>);
  ln_fwd.set(DeviceType::CPU, DType::F16, &ln_forward<f16>);
  ln_fwd.set(DeviceType::CPU, DType::BF16, &ln_forward<bf16>);
  ln_fwd.set(DeviceType::CPU, DType::F64, &ln_forward<double>);
  ln_bwd.set(DeviceType::CPU, DType::F32, &ln_backward<float>);
  ln_bwd.set(DeviceType::CPU, DType::F16, &ln_backward<f16>);
  ln_bwd.set(DeviceType::CPU, DType::BF16, &ln_backward<bf16>);
  ln_bwd.set(DeviceType::CPU, DType::F64, &ln_backward<double>);
}

}  // namespace hg::cpu
