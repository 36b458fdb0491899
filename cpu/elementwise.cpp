// The CPU elementwise engine: one generic loop for every adapter of ops/ew.h.
// Work is split into chunks of a row (the innermost coalesced dim); each chunk is processed in blocks
// of kBlock elements: inputs are widened into float (double for F64) buffers with the vectorised
// converters, the functor runs over plain arrays (which the compiler vectorises), and the result is
// rounded back in one bulk conversion. So F16/BF16 ops move half the bytes at F32 speed.
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>

#include "core/convert.h"
#include "core/parallel.h"
#include "cpu/blocks.h"
#include "cpu/register.h"
#include "ops/dispatch.h"
#include "ops/kernels/elementwise.h"

namespace hg::cpu {
namespace {

constexpr int64_t kBlock = 512;
constexpr int64_t kChunk = 16384;

template <class T, class C>
void load_block(const T* src, int64_t stride, C* dst, int64_t n) {
  if (stride == 0) {
    const C v = load(src[0]);
    for (int64_t i = 0; i < n; ++i) dst[i] = v;
  } else if (stride == 1) {
    widen(src, dst, n);
  } else {  // a view's row (a transposed or stepped input)
    for (int64_t i = 0; i < n; ++i) dst[i] = load(src[i * stride]);
  }
}

// The functor loop over widened blocks, compiled once per SIMD tier (cpu/blocks.h).
template <class C, class A, size_t... K>
[[gnu::always_inline]] inline void apply_body(const A& f, const C* const* src, C* res, int64_t n,
                                              std::index_sequence<K...>) {
  for (int64_t i = 0; i < n; ++i) res[i] = f(src[K][i]...);
}
HG_SIMD_TIERS((template <class C, class A, size_t... K>), apply, apply_body,
              (const A& f, const C* const* src, C* res, int64_t n, std::index_sequence<K...> k), (f, src, res, n, k))

template <class T, class C>
constexpr bool direct(const T*, int64_t stride) {
  return std::is_same_v<T, C> && stride == 1;
}

template <class T, class A, size_t... K>
void run_block(const A& f, const T* const* in, const int64_t* inner_stride, T* out, int64_t n,
               std::index_sequence<K...> k) {
  using C = compute_t<T>;
  alignas(64) C buf[sizeof...(K) > 0 ? sizeof...(K) : 1][kBlock];
  alignas(64) C res_buf[kBlock];
  // F32/F64 rows are used in place; only low-precision or broadcast inputs go through a buffer.
  const C* src[sizeof...(K) > 0 ? sizeof...(K) : 1];
  ((src[K] = direct<T, C>(in[K], inner_stride[K]) ? reinterpret_cast<const C*>(in[K])
                                                   : (load_block(in[K], inner_stride[K], buf[K], n), buf[K])),
   ...);
  C* res = std::is_same_v<T, C> ? reinterpret_cast<C*>(out) : res_buf;
  apply<C>(f, src, res, n, k);
  if constexpr (!std::is_same_v<T, C>) narrow(res, out, n);
}

template <class T, class A>
void run(const A& f, const BroadcastPlan& p, const void* const* ins_v, void* out_v) {
  constexpr int N = A::arity;
  const int nd = p.ndim;
  const int64_t row = p.sizes[nd - 1];
  if (p.numel == 0) return;
  const int64_t rows = p.numel / row;
  const int64_t chunks_per_row = (row + kChunk - 1) / kChunk;
  const int64_t work = rows * chunks_per_row;
  T* out = static_cast<T*>(out_v);
  int64_t inner[N];
  for (int k = 0; k < N; ++k) inner[k] = p.strides[k][nd - 1];
  parallel_for(work, p.numel > 32768, [&](int64_t w) {
    const int64_t r = w / chunks_per_row, c0 = (w % chunks_per_row) * kChunk;
    const int64_t c1 = std::min(row, c0 + kChunk);
    const T* in[N];
    int64_t rem = r;
    int64_t off[N] = {};
    for (int d = nd - 2; d >= 0; --d) {  // row index -> per-input offsets of the outer dims
      const int64_t i = rem % p.sizes[d];
      rem /= p.sizes[d];
      for (int k = 0; k < N; ++k) off[k] += i * p.strides[k][d];
    }
    for (int64_t b = c0; b < c1; b += kBlock) {
      const int64_t n = std::min(kBlock, c1 - b);
      for (int k = 0; k < N; ++k) in[k] = static_cast<const T*>(ins_v[k]) + off[k] + b * inner[k];
      run_block<T>(f, in, inner, out + r * row + b, n, std::make_index_sequence<N>{});
    }
  });
}

template <class T>
void elementwise_kernel(const EwCall& call, const BroadcastPlan& plan, const void* const* ins, void* out) {
  visit_ew(call, [&](auto adapter) {
    using A = decltype(adapter);
    HG_CHECK(plan.nin == A::arity, "elementwise: ", ew_op_name(call.op), " expects ", A::arity, " inputs, got ",
             plan.nin);
    run<T>(adapter, plan, ins, out);
  });
}

}  // namespace


void cast(const void* src, DType sd, void* dst, DType dd, int64_t n) {
  const size_t ss = dtype_size(sd), ds = dtype_size(dd);
  constexpr int64_t kPiece = 1 << 16;
  parallel_for(num_pieces(n, kPiece), n > 2 * kPiece, [&](int64_t i) {
    const int64_t b = i * kPiece;
    convert_any(static_cast<const char*>(src) + b * static_cast<int64_t>(ss), sd,
                static_cast<char*>(dst) + b * static_cast<int64_t>(ds), dd, std::min(kPiece, n - b));
  });
}

namespace {
template <class E>
void strided_row_as(const char* src, int64_t ss, char* dst, int64_t ds, int64_t n) {
  const E* s = reinterpret_cast<const E*>(src);
  E* d = reinterpret_cast<E*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i * ds] = s[i * ss];
}
// One strided row, typed by element size (a memcpy per element is ~10x slower for transposes).
void strided_row(const char* src, int64_t ss, char* dst, int64_t ds, int64_t n, int64_t es) {
  switch (es) {
    case 1: return strided_row_as<uint8_t>(src, ss, dst, ds, n);
    case 2: return strided_row_as<uint16_t>(src, ss, dst, ds, n);
    case 4: return strided_row_as<uint32_t>(src, ss, dst, ds, n);
    case 8: return strided_row_as<uint64_t>(src, ss, dst, ds, n);
    default:
      for (int64_t i = 0; i < n; ++i)
        std::memcpy(dst + i * ds * es, src + i * ss * es, static_cast<size_t>(es));
  }
}
}  // namespace

void strided_copy(const StridedCopy& c) {
  int64_t numel = 1;
  for (int d = 0; d < c.ndim; ++d) numel *= c.sizes[d];
  if (numel == 0) return;
  const int nd = c.ndim;
  const int64_t row = nd ? c.sizes[nd - 1] : 1;
  const int64_t ss = nd ? c.src_strides[nd - 1] : 0, ds = nd ? c.dst_strides[nd - 1] : 0;
  const int64_t rows = numel / row;
  const auto* src = static_cast<const char*>(c.src);
  auto* dst = static_cast<char*>(c.dst);
  const int64_t es = c.elem_size;
  parallel_for(rows, numel > 65536, [&](int64_t r) {
    int64_t rem = r, so = 0, dof = 0;
    for (int d = nd - 2; d >= 0; --d) {
      const int64_t i = rem % c.sizes[d];
      rem /= c.sizes[d];
      so += i * c.src_strides[d];
      dof += i * c.dst_strides[d];
    }
    if (ss == 1 && ds == 1) {
      std::memcpy(dst + dof * es, src + so * es, static_cast<size_t>(row * es));
    } else {
      strided_row(src + so * es, ss, dst + dof * es, ds, row, es);
    }
  });
}

// The batched casts: each tensor through the cast above (nothing to gain from batching on a CPU).
void cast_batch(std::span<const CastBatchArgs> batch) {
  for (const CastBatchArgs& a : batch) cast(a.src, a.from, a.dst, a.to, a.n);
}

// This family's CPU kernels into their tables (cpu/register.cpp's register_kernels calls it).
void register_elementwise() {
  ew_kernels().set_floating(DeviceType::CPU, []<class T>(type_tag<T>) { return &elementwise_kernel<T>; });
  cast_kernels().set(DeviceType::CPU, DType::F32, &cast);
  for (const DType t : {DType::F16, DType::BF16, DType::F32}) cast_batch_kernels().set(DeviceType::CPU, t, &cast_batch);
  copy_kernels().set(DeviceType::CPU, DType::F32, &strided_copy);
}

}  // namespace hg::cpu
