// CPU pooling kernels (contract in ops/pool.h): OpenMP over the N*C planes. Every output (forward)
// and every avg-pool input gradient is one call of the window math in ops/pool_math.h, the functions
// the CUDA kernels call, except 2x2 stride-2 max pooling (the common CNN case), which has a
// vectorisable two-pass form with the same results. F16/BF16 planes are widened to F32 once and
// results rounded once. Max-pool backward scatters dy to the saved indices in output order: the same
// sums, in the same order, as the gather (max_pool_grad_at) the GPU runs.
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>


#include "core/parallel.h"
#include "cpu/blocks.h"
#include "cpu/register.h"
#include "ops/kernels/pool.h"
#include "ops/pool.h"

namespace hg::cpu {
namespace {

constexpr int64_t kParallel = 1 << 15;  // below this many input elements one thread is faster

// A plane of n elements of T as compute_t<T>: F32/F64 in place, F16/BF16 widened into buf.
template <class T>
const compute_t<T>* plane_in(const T* src, int64_t n, std::vector<compute_t<T>>& buf) {
  if constexpr (std::is_same_v<T, compute_t<T>>) {
    return src;
  } else {
    buf.resize(static_cast<size_t>(n));
    widen(src, buf.data(), n);
    return buf.data();
  }
}

// Where a plane's results go: the output itself for F32/F64, else buf (then narrow_out rounds it).
template <class T>
compute_t<T>* plane_out(T* dst, int64_t n, std::vector<compute_t<T>>& buf) {
  if constexpr (std::is_same_v<T, compute_t<T>>) {
    return dst;
  } else {
    buf.resize(static_cast<size_t>(n));
    return buf.data();
  }
}
template <class T>
void narrow_out(const compute_t<T>* src, T* dst, int64_t n) {
  if constexpr (!std::is_same_v<T, compute_t<T>>) narrow(src, dst, n);
}

// Calls f(plane, in-buffer, out-buffer) for every plane, planes split across threads.
template <class T, class F>
void for_planes(const PoolArgs& a, F&& f) {
  const int64_t work = a.planes * a.g.h.in * a.g.w.in;
  auto ranges = [&](int64_t p0, int64_t p1) {
    std::vector<compute_t<T>> in_buf, out_buf;
    for (int64_t p = p0; p < p1; ++p) f(p, in_buf, out_buf);
  };
  parallel_ranges(a.planes, work >= kParallel, ranges);
}

// One plane's outputs, each through the shared window functions.
template <class C>
void pool_plane(const PoolGeom& g, const C* x, C* y, int64_t* idx) {
  for (int64_t oh = 0; oh < g.h.out; ++oh)
    for (int64_t ow = 0; ow < g.w.out; ++ow) {
      const int64_t o = oh * g.w.out + ow;
      y[o] = g.kind == PoolKind::Max ? max_pool_at(g, x, oh, ow, idx[o]) : avg_pool_at(g, x, oh, ow);
    }
}

// ---- 2x2 stride-2 max pooling (the CNN case), in two vectorisable passes ---------------------------
// Pass 1 picks the winner of each horizontal pair (x[2e], x[2e+1]) over the whole plane in one long
// loop; pass 2 picks between the two rows' winners. Both compare max_key with a strict >, and the top
// row's taps precede the bottom row's in max_pool_at's order, so the winner (first maximum, NaN
// first) is the same as max_pool_at's. hk/hp hold 2*OH*OW pair keys and int32 positions.
template <class C, class K>
[[gnu::always_inline]] inline void max_2x2(const PoolGeom& g, const C* x, C* y, int64_t* idx, K* hk, int32_t* hp) {
  const int64_t ow_n = g.w.out, pairs = 2 * g.h.out * ow_n;
  for (int64_t e = 0; e < pairs; ++e) {
    const K kl = max_key(x[2 * e]), kr = max_key(x[2 * e + 1]);
    const K right = -static_cast<K>(kr > kl);  // a mask, not a branch (see max_pool_at)
    hk[e] = (kl & ~right) | (kr & right);
    hp[e] = static_cast<int32_t>(2 * e) + static_cast<int32_t>(right & 1);
  }
  for (int64_t oh = 0; oh < g.h.out; ++oh)
    for (int64_t ow = 0; ow < ow_n; ++ow) {
      const int64_t t = 2 * oh * ow_n + ow, b = t + ow_n;
      const int32_t bottom = -static_cast<int32_t>(hk[b] > hk[t]);
      const int32_t at = (hp[t] & ~bottom) | (hp[b] & bottom);
      y[oh * ow_n + ow] = x[at];
      idx[oh * ow_n + ow] = at;
    }
}

HG_SIMD_TIERS((template <class C, class K>), max_2x2_tiered, max_2x2,
              (const PoolGeom& g, const C* x, C* y, int64_t* idx, K* hk, int32_t* hp), (g, x, y, idx, hk, hp))

// True for 2x2 windows, stride 2, no padding or dilation, every window inside x and an even width (so
// the horizontal pairs tile each row): then max_2x2 applies.
bool is_max_2x2(const PoolGeom& g) {
  const PoolAxis &h = g.h, &w = g.w;
  return g.kind == PoolKind::Max && h.k == 2 && w.k == 2 && h.s == 2 && w.s == 2 && h.p == 0 && w.p == 0 &&
         h.d == 1 && w.d == 1 && 2 * h.out <= h.in && 2 * w.out == w.in && h.in * w.in <= INT32_MAX;
}

template <class C>
void max_plane_2x2(const PoolGeom& g, const C* x, C* y, int64_t* idx) {
  using K = decltype(max_key(C{}));
  thread_local std::vector<K> hk;
  thread_local std::vector<int32_t> hp;
  hk.resize(static_cast<size_t>(2 * g.h.out * g.w.out));
  hp.resize(hk.size());
  max_2x2_tiered(g, x, y, idx, hk.data(), hp.data());
}

template <class T>
void forward(const PoolArgs& a) {
  const int64_t in = a.g.h.in * a.g.w.in, out = a.g.h.out * a.g.w.out;
  for_planes<T>(a, [&](int64_t p, auto& in_buf, auto& out_buf) {
    const auto* x = plane_in(static_cast<const T*>(a.x) + p * in, in, in_buf);
    T* const y_plane = static_cast<T*>(a.y) + p * out;
    auto* y = plane_out(y_plane, out, out_buf);
    const PoolGeom g = a.g;  // a local copy: stores to y and idx cannot alias it
    int64_t* const idx = a.indices ? a.indices + p * out : nullptr;
    if (is_max_2x2(g)) max_plane_2x2(g, x, y, idx);
    else pool_plane(g, x, y, idx);
    narrow_out(y, y_plane, out);
  });
}

template <class T>
void backward(const PoolArgs& a) {
  const int64_t in = a.g.h.in * a.g.w.in, out = a.g.h.out * a.g.w.out;
  for_planes<T>(a, [&](int64_t p, auto& in_buf, auto& out_buf) {
    const PoolGeom g = a.g;
    const auto* dy = plane_in(static_cast<const T*>(a.dy) + p * out, out, in_buf);
    T* const dx_plane = static_cast<T*>(a.dx) + p * in;
    auto* dx = plane_out(dx_plane, in, out_buf);
    if (g.kind == PoolKind::Max) {
      const int64_t* idx = a.indices + p * out;
      std::fill(dx, dx + in, 0);
      for (int64_t o = 0; o < out; ++o)
        if (idx[o] >= 0) dx[idx[o]] += dy[o];
    } else {
      for (int64_t ih = 0; ih < g.h.in; ++ih)
        for (int64_t iw = 0; iw < g.w.in; ++iw) dx[ih * g.w.in + iw] = avg_pool_grad_at(g, dy, ih, iw);
    }
    narrow_out(dx, dx_plane, in);
  });
}

}  // namespace


// This family's CPU kernels into their tables (cpu/register.cpp's register_kernels calls it).
void register_pool() {
  pool2d_forward_kernels().set_floating(DeviceType::CPU, []<class T>(type_tag<T>) { return &forward<T>; });
  pool2d_backward_kernels().set_floating(DeviceType::CPU, []<class T>(type_tag<T>) { return &backward<T>; });
}

}  // namespace hg::cpu
