// CPU convolution kernels (contract in ops/conv.h, engines in cpu/conv.h).
// * oneDNN (F32, and BF16 where oneDNN has BF16 dot products: cpu/onednn.h): convolution primitives on format_tag::any layouts, with reorders from and to
//   the caller's NCHW buffers. The blocked layouts oneDNN picks are what makes it fast: on the
//   Fashion-MNIST CNN's 32->64 convolution (forward and both backward passes, F32) plain NCHW
//   primitives (oneDNN's gemm-based implementation) measured 2.3x slower and NHWC 1.3x slower than
//   format_tag::any with its reorders included; on the 1->32 one, 2.2x and 2.5x. Primitives are
//   cached per problem (building one costs ~10 us, more than a small convolution).
// * F16, and BF16 on other CPUs: widened to F32 once, run on the F32 engine, rounded once.
// * im2col + GEMM (hg::cpu::gemm) for F64, for everything without oneDNN, and as the reference.
#include "cpu/conv.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/convert.h"
#include "core/parallel.h"
#include "core/tensor.h"
#include "cpu/blocks.h"
#include "cpu/gemm.h"
#include "cpu/onednn.h"
#include "cpu/register.h"
#include "ops/kernels/conv.h"
#include "ops/kernels/gemm.h"

#if HG_HAS_ONEDNN
#include <unordered_map>
#endif

namespace hg::cpu {
namespace {

enum class Pass : uint8_t { Forward, BackwardData, BackwardWeight };

constexpr int64_t kParallel = 1 << 15;  // below this many elements one thread is faster
constexpr int64_t kColElems = 1 << 22;  // im2col buffer per chunk of images (16 MiB in F32)

template <class T> T* ptr(const void* p) { return const_cast<T*>(static_cast<const T*>(p)); }

int64_t x_numel(const ConvArgs& a) { return a.n * a.c * a.h * a.w; }
int64_t w_numel(const ConvArgs& a) { return a.k * (a.c / a.groups) * a.r * a.s; }
int64_t y_numel(const ConvArgs& a) { return a.n * a.k * a.oh * a.ow; }

Tensor scratch(int64_t n, DType dt) { return empty({n}, {.dtype = dt}); }


// ---- im2col + GEMM (T = float or double) --------------------------------------------------------

// Sizes per group: channels, filters, taps (R*S), rows of one group's column matrix, output pixels.
struct Geo {
  int64_t g, cg, kg, rs, crs_g, crs, p;
  explicit Geo(const ConvArgs& a)
      : g(a.groups), cg(a.c / a.groups), kg(a.k / a.groups), rs(a.r * a.s), crs_g(cg * rs), crs(a.c * rs),
        p(a.oh * a.ow) {}
};

// A column matrix of nb images: element (row, image n, pixel q) at base[row*ld + n*stride + q].
template <class T> struct ColView {
  T* base;
  int64_t ld, stride;
  T* at(int64_t row, int64_t n) const { return base + row * ld + n * stride; }
};

// [lo, hi): the outputs o < out whose tap o*stride - pad + off lies inside [0, in).
struct Range {
  int64_t lo, hi;
};
Range valid_outputs(int64_t out, int64_t in, int64_t stride, int64_t pad, int64_t off) {
  const int64_t shift = pad - off, top = in - 1 + shift;
  const int64_t lo = shift <= 0 ? 0 : (shift + stride - 1) / stride;
  const int64_t hi = top < 0 ? 0 : std::min(out, top / stride + 1);
  return {std::min(lo, hi), hi};
}

// Calls f(oh, ow, index into the x plane) for every output pixel whose tap (i, j) is inside x.
template <class F>
void for_taps(const ConvArgs& a, int64_t i, int64_t j, F&& f) {
  const Range rh = valid_outputs(a.oh, a.h, a.stride_h, a.pad_h, i * a.dil_h);
  const Range rw = valid_outputs(a.ow, a.w, a.stride_w, a.pad_w, j * a.dil_w);
  for (int64_t oh = rh.lo; oh < rh.hi; ++oh) {
    const int64_t base = (oh * a.stride_h - a.pad_h + i * a.dil_h) * a.w + j * a.dil_w - a.pad_w;
    for (int64_t ow = rw.lo; ow < rw.hi; ++ow) f(oh * a.ow + ow, base + ow * a.stride_w);
  }
}

// col(row = (c*R + i)*S + j, n, oh*OW + ow) = x[n][c][oh*sh - ph + i*dh][ow*sw - pw + j*dw], 0 outside x.
template <class T>
void im2col(const ConvArgs& a, const T* x, int64_t nb, ColView<T> col) {
  const Geo q(a);
  const int64_t tasks = q.crs * nb;
  parallel_for(tasks, tasks * q.p >= kParallel, [&](int64_t t) {
    const int64_t row = t / nb, n = t % nb, c = row / q.rs, i = row % q.rs / a.s, j = row % a.s;
    const T* plane = x + (n * a.c + c) * a.h * a.w;
    T* out = col.at(row, n);
    std::fill(out, out + q.p, T(0));
    for_taps(a, i, j, [&](int64_t o, int64_t src) { out[o] = plane[src]; });
  });
}

// dx[n][c] = sum over taps of col(row, n, .) scattered back (the adjoint of im2col), accumulated in T.
template <class T>
void col2im(const ConvArgs& a, ColView<const T> col, int64_t nb, T* dx) {
  const int64_t planes = nb * a.c, hw = a.h * a.w;
  parallel_for(planes, planes * hw >= kParallel, [&](int64_t t) {
    const int64_t n = t / a.c, c = t % a.c;
    T* plane = dx + t * hw;
    std::fill(plane, plane + hw, T(0));
    for (int64_t i = 0; i < a.r; ++i)
      for (int64_t j = 0; j < a.s; ++j) {
        const T* src = col.at((c * a.r + i) * a.s + j, n);
        for_taps(a, i, j, [&](int64_t o, int64_t dst) { plane[dst] += src[o]; });
      }
  });
}

// Images per chunk, so the column buffer stays near kColElems.
int64_t chunk_images(const ConvArgs& a) {
  return std::clamp<int64_t>(kColElems / std::max<int64_t>(1, Geo(a).crs * Geo(a).p), 1, a.n);
}

// Between the (nb, K, P) layout of y/dy and the (K, nb*P) one whose rows line up with the column
// matrix's: each GEMM then covers the whole chunk (one large product instead of nb small ones, which
// Eigen in particular runs far below its peak).
template <class T>
void to_k_major(const ConvArgs& a, const T* src, int64_t nb, T* dst) {
  const int64_t p = a.oh * a.ow;
  parallel_for(a.k * nb, a.k * nb * p >= kParallel, [&](int64_t t) {
    const int64_t k = t / nb, n = t % nb;
    std::copy(src + (n * a.k + k) * p, src + (n * a.k + k + 1) * p, dst + (k * nb + n) * p);
  });
}
template <class T>
void from_k_major(const ConvArgs& a, const T* src, int64_t nb, T* dst) {
  const int64_t p = a.oh * a.ow;
  parallel_for(a.k * nb, a.k * nb * p >= kParallel, [&](int64_t t) {
    const int64_t k = t / nb, n = t % nb;
    std::copy(src + (k * nb + n) * p, src + (k * nb + n + 1) * p, dst + (n * a.k + k) * p);
  });
}

// Scratch for one chunk: the column matrix (C*R*S, nb*P) and a (K, nb*P) matrix of y or dy.
template <class T> struct Buffers {
  Tensor col_t, kp_t;
  T *col, *kp;
  explicit Buffers(const ConvArgs& a)
      : col_t(scratch(Geo(a).crs * chunk_images(a) * Geo(a).p, dtype_v<T>)),
        kp_t(scratch(a.k * chunk_images(a) * Geo(a).p, dtype_v<T>)),
        col(static_cast<T*>(col_t.data_ptr())),
        kp(static_cast<T*>(kp_t.data_ptr())) {}
};

// y_g (Kg, nb*P) = b + W_g (Kg, CgRS) * col_g (CgRS, nb*P); the GEMM adds onto the bias (beta = 1), so
// each output is rounded once.
template <class T>
void forward_im2col(const ConvArgs& a) {
  const Geo q(a);
  const int64_t nbm = chunk_images(a);
  Buffers<T> buf(a);
  for (int64_t n0 = 0; n0 < a.n; n0 += nbm) {
    const int64_t nb = std::min(nbm, a.n - n0), cols = nb * q.p;
    im2col(a, ptr<T>(a.x) + n0 * a.c * a.h * a.w, nb, ColView<T>{buf.col, cols, q.p});
    if (a.b)
      for (int64_t k = 0; k < a.k; ++k) std::fill(buf.kp + k * cols, buf.kp + (k + 1) * cols, ptr<T>(a.b)[k]);
    for (int64_t g = 0; g < q.g; ++g)
      gemm({.dtype = dtype_v<T>, .m = q.kg, .n = cols, .k = q.crs_g, .beta = a.b ? 1.f : 0.f,
            .a = ptr<T>(a.wt) + g * q.kg * q.crs_g, .lda = q.crs_g, .b = buf.col + g * q.crs_g * cols,
            .ldb = cols, .c = buf.kp + g * q.kg * cols, .ldc = cols});
    from_k_major(a, buf.kp, nb, ptr<T>(a.y) + n0 * a.k * q.p);
  }
}

// dcol_g (CgRS, nb*P) = W_g^T * dy_g (Kg, nb*P), then col2im.
template <class T>
void backward_data_im2col(const ConvArgs& a) {
  const Geo q(a);
  const int64_t nbm = chunk_images(a);
  Buffers<T> buf(a);
  for (int64_t n0 = 0; n0 < a.n; n0 += nbm) {
    const int64_t nb = std::min(nbm, a.n - n0), cols = nb * q.p;
    to_k_major(a, ptr<T>(a.dy) + n0 * a.k * q.p, nb, buf.kp);
    for (int64_t g = 0; g < q.g; ++g)
      gemm({.dtype = dtype_v<T>, .trans_a = Trans::T, .m = q.crs_g, .n = cols, .k = q.kg,
            .a = ptr<T>(a.wt) + g * q.kg * q.crs_g, .lda = q.crs_g, .b = buf.kp + g * q.kg * cols, .ldb = cols,
            .c = buf.col + g * q.crs_g * cols, .ldc = cols});
    col2im<T>(a, {buf.col, cols, q.p}, nb, ptr<T>(a.dx) + n0 * a.c * a.h * a.w);
  }
}

// dw_g (Kg, CgRS) = sum over the chunks of dy_g (Kg, nb*P) * col_g^T; db[k] = sum of dy over n, pixels.
template <class T>
void backward_weight_im2col(const ConvArgs& a) {
  const Geo q(a);
  const int64_t nbm = chunk_images(a);
  Buffers<T> buf(a);
  std::vector<double> db(static_cast<size_t>(a.k), 0.0);
  for (int64_t n0 = 0; n0 < a.n; n0 += nbm) {
    const int64_t nb = std::min(nbm, a.n - n0), cols = nb * q.p;
    im2col(a, ptr<T>(a.x) + n0 * a.c * a.h * a.w, nb, ColView<T>{buf.col, cols, q.p});
    to_k_major(a, ptr<T>(a.dy) + n0 * a.k * q.p, nb, buf.kp);
    for (int64_t g = 0; g < q.g; ++g)
      gemm({.dtype = dtype_v<T>, .trans_b = Trans::T, .m = q.kg, .n = q.crs_g, .k = cols,
            .beta = n0 > 0 ? 1.f : 0.f, .a = buf.kp + g * q.kg * cols, .lda = cols,
            .b = buf.col + g * q.crs_g * cols, .ldb = cols, .c = ptr<T>(a.dw) + g * q.kg * q.crs_g,
            .ldc = q.crs_g});
    if (a.db)
      for (int64_t k = 0; k < a.k; ++k)
        for (int64_t e = 0; e < cols; ++e) db[static_cast<size_t>(k)] += buf.kp[k * cols + e];
  }
  if (a.db)
    for (int64_t k = 0; k < a.k; ++k) ptr<T>(a.db)[k] = static_cast<T>(db[static_cast<size_t>(k)]);
}

void im2col_run(const ConvArgs& a, Pass pass) {
  auto run = [&](auto tag) {
    using T = decltype(tag);
    if (pass == Pass::Forward) forward_im2col<T>(a);
    else if (pass == Pass::BackwardData) backward_data_im2col<T>(a);
    else backward_weight_im2col<T>(a);
  };
  if (a.dtype == DType::F64) run(double{});
  else run(float{});
}

// ---- F16/BF16 through an F32 kernel: inputs widened once, outputs rounded once -------------------

using PassFn = void (*)(const ConvArgs&, Pass);

void run_widened(const ConvArgs& a, Pass pass, PassFn f32) {
  ConvArgs f = a;
  f.dtype = DType::F32;
  std::vector<Tensor> keep;
  auto in = [&](const void* p, int64_t n) -> const void* {
    if (!p) return nullptr;
    keep.push_back(scratch(n, DType::F32));
    cast(p, a.dtype, keep.back().data_ptr(), DType::F32, n);
    return keep.back().data_ptr();
  };
  auto out = [&](void* p, int64_t n) -> void* {
    if (!p) return nullptr;
    keep.push_back(scratch(n, DType::F32));
    return keep.back().data_ptr();
  };
  const bool fwd = pass == Pass::Forward, bwd_d = pass == Pass::BackwardData, bwd_w = pass == Pass::BackwardWeight;
  f.x = in(fwd || bwd_w ? a.x : nullptr, x_numel(a));
  f.wt = in(fwd || bwd_d ? a.wt : nullptr, w_numel(a));
  f.b = in(fwd ? a.b : nullptr, a.k);
  f.dy = in(bwd_d || bwd_w ? a.dy : nullptr, y_numel(a));
  f.y = out(fwd ? a.y : nullptr, y_numel(a));
  f.dx = out(bwd_d ? a.dx : nullptr, x_numel(a));
  f.dw = out(bwd_w ? a.dw : nullptr, w_numel(a));
  f.db = out(bwd_w ? a.db : nullptr, a.k);
  f32(f, pass);
  if (f.y) cast(f.y, DType::F32, a.y, a.dtype, y_numel(a));
  if (f.dx) cast(f.dx, DType::F32, a.dx, a.dtype, x_numel(a));
  if (f.dw) cast(f.dw, DType::F32, a.dw, a.dtype, w_numel(a));
  if (f.db) cast(f.db, DType::F32, a.db, a.dtype, a.k);
}

#if HG_HAS_ONEDNN
// ---- oneDNN ---------------------------------------------------------------------------------------
using dnnl::memory;
using Tag = memory::format_tag;

struct Key {
  Pass pass;
  DType dtype;
  bool bias;
  int64_t n, c, h, w, k, r, s, oh, ow, sh, sw, ph, pw, dh, dw, g;
  int64_t dy_k;  // channels per image in dy's buffer (more than k for a slice of the output channels)
  int threads;   // oneDNN sizes a primitive's work split and scratchpad for the threads it is made with
  bool operator==(const Key&) const = default;
};
struct KeyHash {
  size_t operator()(const Key& q) const {
    size_t h = static_cast<size_t>(q.pass) | size_t(q.dtype) << 2 | size_t(q.bias) << 5;
    for (int64_t v : {q.n, q.c, q.h, q.w, q.k, q.r, q.s, q.oh, q.ow, q.sh, q.sw, q.ph, q.pw, q.dh, q.dw, q.g,
                      q.dy_k, int64_t{q.threads}})
      h = (h ^ static_cast<size_t>(v)) * 0x100000001b3ull;  // FNV-1a style mixing
    return h;
  }
};

// One primitive argument: the caller's plain buffer and, when the primitive chose another layout,
// a buffer in that layout (taken from the allocator per call) and the reorder between the two.
struct Operand {
  int arg = 0;
  bool is_input = true;
  memory user, inner;
  dnnl::reorder reorder;
  bool reordered = false;
};

struct Plan {
  bool usable = false;  // false: oneDNN refused the problem, the im2col path runs instead
  int threads = 1;      // made for, and always run with, this many OpenMP threads
  dnnl::primitive prim;
  std::vector<Operand> ops;  // in the order run_plan receives the caller's pointers
  std::unordered_map<int, memory> args;  // handles shared with ops: set_data_handle reaches both
  void add(Operand o) {
    args.emplace(o.arg, o.inner);
    ops.push_back(std::move(o));
  }
};

const dnnl::engine& engine() { return onednn_engine(); }

memory::data_type dnnl_type(DType t) { return t == DType::BF16 ? memory::data_type::bf16 : memory::data_type::f32; }

struct Dims {
  memory::dims src, wei, bias, dst, strides, dil, pad;
};
// torch pads both sides equally; oneDNN checks (in + pad_l + pad_r - extent) / stride + 1 == out with
// the same floor, so symmetric padding describes the same problem. oneDNN counts dilation from 0.
Dims dims_of(const ConvArgs& a) {
  const int64_t g = a.groups;
  return {{a.n, a.c, a.h, a.w},
          g == 1 ? memory::dims{a.k, a.c, a.r, a.s} : memory::dims{g, a.k / g, a.c / g, a.r, a.s},
          {a.k}, {a.n, a.k, a.oh, a.ow}, {a.stride_h, a.stride_w}, {a.dil_h - 1, a.dil_w - 1},
          {a.pad_h, a.pad_w}};
}

memory::desc any_md(const memory::dims& d, DType t) { return {d, dnnl_type(t), Tag::any}; }
// Contiguous row-major: NCHW, KCRS (== goihw for groups), a vector for the bias.
memory::desc plain_md(const memory::dims& d, DType t) {
  const Tag tag = d.size() == 1 ? Tag::a : d.size() == 4 ? Tag::abcd : Tag::abcde;
  return {d, dnnl_type(t), tag};
}

Operand operand(int arg, bool is_input, const memory::desc& plain, const memory::desc& chosen) {
  Operand o;
  o.arg = arg, o.is_input = is_input, o.user = memory(plain, engine(), nullptr);
  if (chosen == plain) {
    o.inner = o.user;
    return o;
  }
  o.inner = memory(chosen, engine(), nullptr);
  o.reorder = is_input ? dnnl::reorder(o.user, o.inner) : dnnl::reorder(o.inner, o.user);
  o.reordered = true;
  return o;
}

dnnl::convolution_forward::primitive_desc forward_pd(const ConvArgs& a, bool bias) {
  using CF = dnnl::convolution_forward;
  const Dims d = dims_of(a);
  const auto pk = dnnl::prop_kind::forward_training;
  const auto alg = dnnl::algorithm::convolution_direct;
  const memory::desc src = any_md(d.src, a.dtype), wei = any_md(d.wei, a.dtype), dst = any_md(d.dst, a.dtype);
  const CF::desc desc = bias ? CF::desc(pk, alg, src, wei, plain_md(d.bias, a.dtype), dst, d.strides, d.dil, d.pad, d.pad)
                             : CF::desc(pk, alg, src, wei, dst, d.strides, d.dil, d.pad, d.pad);
  return {desc, engine()};
}

Plan make_forward(const ConvArgs& a, bool bias) {
  const Dims d = dims_of(a);
  const auto pd = forward_pd(a, bias);
  Plan p;
  p.usable = true, p.prim = dnnl::convolution_forward(pd);
  p.add(operand(DNNL_ARG_SRC, true, plain_md(d.src, a.dtype), pd.src_desc()));
  p.add(operand(DNNL_ARG_WEIGHTS, true, plain_md(d.wei, a.dtype), pd.weights_desc()));
  if (bias) p.add(operand(DNNL_ARG_BIAS, true, plain_md(d.bias, a.dtype), pd.bias_desc()));
  p.add(operand(DNNL_ARG_DST, false, plain_md(d.dst, a.dtype), pd.dst_desc()));
  return p;
}

Plan make_backward_data(const ConvArgs& a) {
  using CB = dnnl::convolution_backward_data;
  const Dims d = dims_of(a);
  const CB::desc desc(dnnl::algorithm::convolution_direct, any_md(d.src, a.dtype), any_md(d.wei, a.dtype),
                      any_md(d.dst, a.dtype), d.strides, d.dil, d.pad, d.pad);
  const CB::primitive_desc pd(desc, engine(), forward_pd(a, false));
  Plan p;
  p.usable = true, p.prim = CB(pd);
  p.add(operand(DNNL_ARG_WEIGHTS, true, plain_md(d.wei, a.dtype), pd.weights_desc()));
  p.add(operand(DNNL_ARG_DIFF_DST, true, plain_md(d.dst, a.dtype), pd.diff_dst_desc()));
  p.add(operand(DNNL_ARG_DIFF_SRC, false, plain_md(d.src, a.dtype), pd.diff_src_desc()));
  return p;
}

// dy's plain layout when it holds dy_k channels per image of which the problem reads the first k.
memory::desc dy_md(const memory::dims& d, DType t, int64_t dy_k) {
  const int64_t plane = d[2] * d[3];
  return {d, dnnl_type(t), memory::dims{dy_k * plane, plane, d[3], 1}};
}

Plan make_backward_weight(const ConvArgs& a, bool bias, int64_t dy_k) {
  using CW = dnnl::convolution_backward_weights;
  const Dims d = dims_of(a);
  const auto alg = dnnl::algorithm::convolution_direct;
  const memory::desc src = any_md(d.src, a.dtype), wei = any_md(d.wei, a.dtype), dst = any_md(d.dst, a.dtype);
  const CW::desc desc = bias ? CW::desc(alg, src, wei, plain_md(d.bias, a.dtype), dst, d.strides, d.dil, d.pad, d.pad)
                             : CW::desc(alg, src, wei, dst, d.strides, d.dil, d.pad, d.pad);
  const CW::primitive_desc pd(desc, engine(), forward_pd(a, bias));
  Plan p;
  p.usable = true, p.prim = CW(pd);
  p.add(operand(DNNL_ARG_SRC, true, plain_md(d.src, a.dtype), pd.src_desc()));
  p.add(operand(DNNL_ARG_DIFF_DST, true, dy_md(d.dst, a.dtype, dy_k), pd.diff_dst_desc()));
  p.add(operand(DNNL_ARG_DIFF_WEIGHTS, false, plain_md(d.wei, a.dtype), pd.diff_weights_desc()));
  if (bias) p.add(operand(DNNL_ARG_DIFF_BIAS, false, plain_md(d.bias, a.dtype), pd.diff_bias_desc()));
  return p;
}

Plan make_plan(const ConvArgs& a, Pass pass, bool bias, int64_t dy_k, int threads) {
  ScopedOmpThreads omp(threads);
  try {
    Plan p = pass == Pass::Forward ? make_forward(a, bias)
             : pass == Pass::BackwardData ? make_backward_data(a) : make_backward_weight(a, bias, dy_k);
    p.threads = threads;
    return p;
  } catch (const dnnl::error&) {
    return Plan{};  // e.g. a layout or dilation this oneDNN build has no implementation for
  }
}

// Per-thread cache and stream, like cpu/gemm.cpp: no lock, no race on the memory handles.
Plan& plan_for(const ConvArgs& a, Pass pass, bool bias, int64_t dy_k, int threads) {
  thread_local std::unordered_map<Key, Plan, KeyHash> cache;
  const Key key{pass, a.dtype, bias, a.n, a.c, a.h, a.w, a.k, a.r, a.s, a.oh, a.ow,
                a.stride_h, a.stride_w, a.pad_h, a.pad_w, a.dil_h, a.dil_w, a.groups, dy_k, threads};
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  if (cache.size() >= 256) cache.clear();  // bound memory when shapes keep changing
  return cache.emplace(key, make_plan(a, pass, bias, dy_k, threads)).first->second;
}

void run_plan(Plan& p, const std::vector<const void*>& ptrs) {
  thread_local dnnl::stream stream(engine());
  ScopedOmpThreads omp(p.threads);
  std::vector<Tensor> inner;  // blocked-layout buffers, from the allocator's cache
  for (size_t i = 0; i < p.ops.size(); ++i) {
    Operand& o = p.ops[i];
    o.user.set_data_handle(const_cast<void*>(ptrs[i]));
    if (o.reordered) {
      const auto words = static_cast<int64_t>((o.inner.get_desc().get_size() + 3) / 4);
      inner.push_back(empty({words}, {.dtype = DType::F32}));
      o.inner.set_data_handle(inner.back().data_ptr());
    }
  }
  for (Operand& o : p.ops)
    if (o.reordered && o.is_input) o.reorder.execute(stream, o.user, o.inner);
  p.prim.execute(stream, p.args);
  for (Operand& o : p.ops)
    if (o.reordered && !o.is_input) o.reorder.execute(stream, o.inner, o.user);
  stream.wait();
}

// False when oneDNN has no implementation for this problem. dy_k: channels per image in dy's buffer.
bool onednn_one(const ConvArgs& a, Pass pass, int64_t dy_k, int threads) {
  const bool bias = pass == Pass::Forward ? a.b != nullptr : pass == Pass::BackwardWeight && a.db != nullptr;
  Plan& p = plan_for(a, pass, bias, dy_k, threads);
  if (!p.usable) return false;
  if (pass == Pass::Forward) run_plan(p, bias ? std::vector<const void*>{a.x, a.wt, a.b, a.y}
                                              : std::vector<const void*>{a.x, a.wt, a.y});
  else if (pass == Pass::BackwardData) run_plan(p, {a.wt, a.dy, a.dx});
  else run_plan(p, bias ? std::vector<const void*>{a.x, a.dy, a.dw, a.db} : std::vector<const void*>{a.x, a.dy, a.dw});
  return true;
}

// ---- threads: fixed pieces ----------------------------------------------------------------------
// Like cpu/gemm.cpp, a convolution with enough work is cut into pieces that depend on its shape
// alone, each run by a one-thread primitive: forward and backward data by images, backward weights by
// output channels (each piece then sums over the whole batch itself). So the bits do not depend on
// the thread count (oneDNN's own threading gave another bias gradient on 3 threads than on 1), and the
// pieces' region is one halfgrad measures for stalls (core/parallel.h). A problem too small to cut,
// or with groups, runs as one primitive: on one thread when small, else on oneDNN's threads.
constexpr int64_t kConvPieceMacs = int64_t(1) << 22;

// Output channels per backward-weights piece: oneDNN blocks them by 8 with AVX2, by 16 with AVX-512.
int64_t channel_piece() {
  static const int64_t c = onednn_isa().rfind("avx512", 0) == 0 ? 16 : 8;
  return c;
}

int64_t conv_macs(const ConvArgs& a) { return a.n * a.k * a.oh * a.ow * (a.c / a.groups) * a.r * a.s; }

int64_t conv_pieces(const ConvArgs& a, Pass pass) {
  const int64_t macs = conv_macs(a);
  if (macs < kConvPieceMacs || a.groups != 1) return 1;
  const int64_t most = pass == Pass::BackwardWeight ? a.k / channel_piece() : a.n;
  return std::max<int64_t>(1, std::min(std::clamp<int64_t>(macs / kConvPieceMacs, 2, 64), most));
}

// Piece i of `pieces`: images [n0, n1) for forward and backward data, output channels [k0, k1) for
// backward weights (dy keeps all a.k channels per image; dw and db are sliced).
ConvArgs conv_piece(const ConvArgs& a, Pass pass, int64_t pieces, int64_t i) {
  const int64_t es = static_cast<int64_t>(dtype_size(a.dtype));
  auto shift = [es](auto* p, int64_t elems) { return p ? ptr<char>(p) + elems * es : nullptr; };
  ConvArgs q = a;
  if (pass == Pass::BackwardWeight) {
    const int64_t k0 = piece_start(a.k, pieces, i, channel_piece()), k1 = piece_start(a.k, pieces, i + 1, channel_piece());
    q.k = k1 - k0;
    q.dy = shift(a.dy, k0 * a.oh * a.ow);
    q.dw = shift(a.dw, k0 * a.c * a.r * a.s);
    q.db = shift(a.db, k0);
    return q;
  }
  const int64_t n0 = piece_start(a.n, pieces, i), n1 = piece_start(a.n, pieces, i + 1);
  q.n = n1 - n0;
  q.x = shift(a.x, n0 * a.c * a.h * a.w), q.dx = shift(a.dx, n0 * a.c * a.h * a.w);
  q.y = shift(a.y, n0 * a.k * a.oh * a.ow), q.dy = shift(a.dy, n0 * a.k * a.oh * a.ow);
  return q;
}

bool onednn_run(const ConvArgs& a, Pass pass) {
  const int64_t pieces = conv_pieces(a, pass);
  if (pieces == 1) return onednn_one(a, pass, a.k, conv_macs(a) < kConvPieceMacs ? 1 : runtime_threads());
  std::atomic<bool> refused{false};  // by shape: every piece alike, in practice
  parallel_for(pieces, true, [&](int64_t i) {
    if (!onednn_one(conv_piece(a, pass, pieces, i), pass, a.k, 1)) refused = true;
  });
  return !refused;  // refused: the caller runs the whole problem on im2col, overwriting every output
}
#endif

void f32_run(const ConvArgs& a, Pass pass) {
#if HG_HAS_ONEDNN
  if (onednn_run(a, pass)) return;
#endif
  im2col_run(a, pass);
}

// Nothing to compute (an empty batch): backward-weight still owes zero gradients.
bool trivial(const ConvArgs& a, Pass pass) {
  if (a.n > 0 && a.oh > 0 && a.ow > 0) return false;
  if (pass == Pass::BackwardWeight) {
    std::memset(a.dw, 0, static_cast<size_t>(w_numel(a)) * dtype_size(a.dtype));
    if (a.db) std::memset(a.db, 0, static_cast<size_t>(a.k) * dtype_size(a.dtype));
  }
  if (pass == Pass::BackwardData && a.dx) std::memset(a.dx, 0, static_cast<size_t>(x_numel(a)) * dtype_size(a.dtype));
  return true;
}

void run(const ConvArgs& a, Pass pass) {
  if (trivial(a, pass)) return;
  switch (a.dtype) {
    case DType::F64: return im2col_run(a, pass);
    case DType::F32: return f32_run(a, pass);
    case DType::BF16:
#if HG_HAS_ONEDNN
      if (onednn_native(DType::BF16) && onednn_run(a, pass)) return;
#endif
      return run_widened(a, pass, &f32_run);
    case DType::F16: return run_widened(a, pass, &f32_run);
    case DType::I64:
    case DType::F8E4M3:
    case DType::F8E5M2:
    case DType::Bool: break;
  }
  HG_FAIL("conv2d: dtype ", a.dtype, " is not supported; use F32, F16, BF16 or F64");
}

void run_im2col(const ConvArgs& a, Pass pass) {
  if (trivial(a, pass)) return;
  HG_CHECK(a.dtype != DType::I64, "conv2d: dtype I64 is not supported; use F32, F16, BF16 or F64");
  if (is_low_precision(a.dtype)) run_widened(a, pass, &im2col_run);
  else im2col_run(a, pass);
}

void forward(const ConvArgs& a) { run(a, Pass::Forward); }
void backward_data(const ConvArgs& a) { run(a, Pass::BackwardData); }
void backward_weight(const ConvArgs& a) { run(a, Pass::BackwardWeight); }

}  // namespace

// This family's CPU kernels into their tables (cpu/register.cpp's register_kernels calls it).
void register_conv() {
  conv2d_forward_kernels().set_all_floating(DeviceType::CPU, &forward);
  conv2d_backward_data_kernels().set_all_floating(DeviceType::CPU, &backward_data);
  conv2d_backward_weight_kernels().set_all_floating(DeviceType::CPU, &backward_weight);
}

std::string conv_engine(DType dt) {
  HG_CHECK(dt != DType::I64, "conv_engine: dtype I64 has no convolution; use F32, F16, BF16 or F64");
  if (dt == DType::F64) return "im2col";
#if HG_HAS_ONEDNN
  const std::string f32 = "onednn:" + onednn_isa();
#else
  const std::string f32 = "im2col";
#endif
  return dt == DType::F32 || onednn_native(dt) ? f32 : widened_engine(f32);
}

void conv2d_forward_im2col(const ConvArgs& a) { run_im2col(a, Pass::Forward); }
void conv2d_backward_data_im2col(const ConvArgs& a) { run_im2col(a, Pass::BackwardData); }
void conv2d_backward_weight_im2col(const ConvArgs& a) { run_im2col(a, Pass::BackwardWeight); }

}  // namespace hg::cpu
