// The CPU elementwise engine: one generic loop for every adapter of ops/ew.h.
// Work is split into chunks of a row (the innermost coalesced dim); each chunk is processed in blocks
// of kBlock elements: inputs are widened into float (double for F64) buffers with the vectorised
// converters, the functor runs over plain arrays (which the compiler vectorises), and the result is
// rounded back in one bulk conversion. So F16/BF16 ops move half the bytes at F32 speed.
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/convert.h"
#include "core/cpu_features.h"
#include "core/parallel.h"
#include "cpu/blocks.h"
#include "cpu/register.h"
#include "ops/dispatch.h"
#include "ops/kernels/elementwise.h"

namespace hg::cpu {

void strided_copy(const StridedCopy& c);  // below

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

// True when input k of p is read across the dim it is dense along (x + x.t()): each row of the output would
// gather one element per cache line of it. Broadcast inputs (a zero stride) and small ones are read as they are.
bool read_across(const BroadcastPlan& p, int k) {
  const int nd = p.ndim;
  if (nd < 2 || p.numel < 16384 || p.strides[k][nd - 1] == 1 || p.strides[k][nd - 1] == 0) return false;
  bool dense_dim = false;
  for (int d = 0; d < nd; ++d) {
    if (p.strides[k][d] == 0 && p.sizes[d] > 1) return false;
    dense_dim = dense_dim || (p.strides[k][d] == 1 && p.sizes[d] >= 8);
  }
  return dense_dim;
}

template <class T, class A>
void run(const A& f, const BroadcastPlan& plan, const void* const* ins_given, void* out_v) {
  constexpr int N = A::arity;
  // Inputs read across their dense dim are first copied dense, in tiles (strided_copy): a + b.t() of two
  // 1024x1024 F32 matrices took 21x the time of a + c with c dense, element by element.
  BroadcastPlan p = plan;
  const void* ins_v[N > 0 ? N : 1] = {};
  for (int k = 0; k < N; ++k) {
    ins_v[k] = ins_given[k];
    if (!read_across(plan, k)) continue;
    thread_local Scratch dense[kMaxInputs];
    StridedCopy c{.ndim = p.ndim, .src = ins_given[k], .dst = dense[k].get<T>(p.numel),
                  .elem_size = static_cast<int>(sizeof(T))};
    int64_t st = 1;
    for (int d = p.ndim - 1; d >= 0; --d) {
      c.sizes[d] = p.sizes[d];
      c.src_strides[d] = p.strides[k][d];
      c.dst_strides[d] = p.strides[k][d] = st;
      st *= p.sizes[d];
    }
    strided_copy(c);
    ins_v[k] = c.dst;
  }
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

// The source and destination offsets (in elements) of index idx over c's dims other than skip_a and skip_b (-1:
// none), the last dim varying fastest: where a row (or a tile strip) of the copy starts.
void outer_offsets(const StridedCopy& c, int64_t idx, int skip_a, int skip_b, int64_t& so, int64_t& dof) {
  so = dof = 0;
  for (int d = c.ndim - 1; d >= 0; --d) {
    if (d == skip_a || d == skip_b) continue;
    const int64_t i = idx % c.sizes[d];
    idx /= c.sizes[d];
    so += i * c.src_strides[d];
    dof += i * c.dst_strides[d];
  }
}

// Tile edge of the transposing copy: runs of 128 elements along each dense dim. 64 ran 1.2-1.6x slower once the
// matrix left the cache (2048x2048 F32: the source is read 256 bytes a row), 256 no faster (AMD EPYC Zen 4).
constexpr int64_t kTile = 128;
// Columns (j) of one work item: 8 tiles, so a 2048x2048 copy makes 32 items for the OpenMP team.
constexpr int64_t kStripCols = 8 * kTile;

#if defined(__x86_64__)
// An 8x8 block of 4-byte elements through AVX registers: d[r*ld + c] = s[c*ls + r]. The moves are bitwise
// (unpack, shuffle and lane permutes), so any 4-byte payload, NaNs included, comes out unchanged.
HG_AVX2_TARGET inline void transpose8x8(const uint32_t* s, int64_t ls, uint32_t* d, int64_t ld) {
  __m256 r[8], t[8], u[8];
  for (int k = 0; k < 8; ++k) r[k] = _mm256_castsi256_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + k * ls)));
  for (int k = 0; k < 8; k += 2) {  // pairs of rows interleaved: t[k] = r0[0] r1[0] r0[1] r1[1] | r0[4] ...
    t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
    t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
  }
  for (int k = 0; k < 8; k += 4) {  // quads: u[k] holds column 0 of rows k..k+3 in each 128-bit lane
    u[k] = _mm256_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int k = 0; k < 4; ++k) {  // low lanes give columns 0-3, high lanes columns 4-7
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + k * ld), _mm256_castps_si256(_mm256_permute2f128_ps(u[k], u[k + 4], 0x20)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + (k + 4) * ld),
                        _mm256_castps_si256(_mm256_permute2f128_ps(u[k], u[k + 4], 0x31)));
  }
}

// The 8x8-aligned part of a tile load whose source is dense along i (si == 1), 4-byte elements.
HG_AVX2_TARGET void load_tile_avx2(const uint32_t* src, int64_t sj, uint32_t* buf, int64_t ld, int64_t ni,
                                   int64_t nb) {
  for (int64_t j = 0; j + 8 <= nb; j += 8)
    for (int64_t i = 0; i + 8 <= ni; i += 8) transpose8x8(src + j * sj + i, sj, buf + i * ld + j, ld);
}
#endif

// buf[i*ld + j] = src[i*si + j*sj] for i < ni, j < nb: one tile of a transposing copy, read a source run at a
// time (along i). 4-byte elements with si == 1 go through 8x8 register transposes on AVX2 CPUs and up: 2048x2048
// F32 b.t().contiguous() took 2.1-3.3 ms element by element, 3.3-5x a clone (AMD EPYC Zen 4, 2 threads).
template <class E>
void load_tile(const E* src, int64_t si, int64_t sj, E* buf, int64_t ld, int64_t ni, int64_t nb) {
  int64_t vi = 0, vj = 0;  // the block [0, vi) x [0, vj) done with vectors
#if defined(__x86_64__)
  if constexpr (sizeof(E) == 4) {
    if (si == 1 && simd_tier() != SimdTier::Baseline) {
      vi = ni / 8 * 8, vj = nb / 8 * 8;
      load_tile_avx2(reinterpret_cast<const uint32_t*>(src), sj, reinterpret_cast<uint32_t*>(buf), ld, vi, vj);
    }
  }
#endif
  for (int64_t j = 0; j < nb; ++j) {
    const E* s = src + j * sj;
    for (int64_t i = j < vj ? vi : 0; i < ni; ++i) buf[i * ld + j] = s[i * si];
  }
}

// Rows [i0, i1) (at most kTile) and columns [j0, j1) of a transposing copy, in tiles: element (i, j) goes from
// src[i*si + j*sj] to dst[i*di + j*dj] (strides in elements). A tile is read into a buffer, transposing
// (load_tile), and written a destination run at a time (along j) from it. Copying element by element across a
// tile whose rows lie a power of two apart (a 2048-wide F32 matrix: 8 KiB) puts all its lines in one L1 set and
// ran at 1.6 ns an element, 10x a plain copy; with the buffer, 0.2-0.3 ns up to 1024x1024 (AMD EPYC Zen 4,
// 2 threads). The buffer's rows are one element longer so that its columns spread over sets.
template <class E>
void tile_strip(const E* src, int64_t si, int64_t sj, E* dst, int64_t di, int64_t dj, int64_t i0, int64_t i1,
                int64_t j0, int64_t j1) {
  constexpr int64_t ld = kTile + 1;
  thread_local Scratch scratch;
  E* const buf = scratch.get<E>(kTile * ld);
  const int64_t ni = i1 - i0;
  for (int64_t jt = j0; jt < j1; jt += kTile) {
    const int64_t nb = std::min(kTile, j1 - jt);
    load_tile(src + jt * sj + i0 * si, si, sj, buf, ld, ni, nb);
    for (int64_t i = 0; i < ni; ++i) {
      E* d = dst + (i0 + i) * di + jt * dj;
      if (dj == 1) std::memcpy(d, buf + i * ld, static_cast<size_t>(nb) * sizeof(E));
      else
        for (int64_t j = 0; j < nb; ++j) d[j * dj] = buf[i * ld + j];
    }
  }
}

void tile_strip_any(const char* src, int64_t si, int64_t sj, char* dst, int64_t di, int64_t dj, int64_t i0,
                    int64_t i1, int64_t j0, int64_t j1, int64_t es) {
  auto as = [&]<class E>(E*) {
    tile_strip(reinterpret_cast<const E*>(src), si, sj, reinterpret_cast<E*>(dst), di, dj, i0, i1, j0, j1);
  };
  switch (es) {
    case 1: return as(static_cast<uint8_t*>(nullptr));
    case 2: return as(static_cast<uint16_t*>(nullptr));
    case 4: return as(static_cast<uint32_t*>(nullptr));
    case 8: return as(static_cast<uint64_t*>(nullptr));
    default:
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t j = j0; j < j1; ++j)
          std::memcpy(dst + (i * di + j * dj) * es, src + (i * si + j * sj) * es, static_cast<size_t>(es));
  }
}

// A copy that reads across the source's dense dim, or writes across the destination's, touches one cache line
// per element in a row-by-row loop: such a copy goes by tiles of two dims, i along which the source is dense
// (its stride 1) and j along which the destination is, one of them innermost. False otherwise.
bool transposing(const StridedCopy& c, int& i_dim, int& j_dim) {
  const int nd = c.ndim, last = nd - 1;
  if (nd < 2 || c.sizes[last] < 8 || (c.src_strides[last] == 1) == (c.dst_strides[last] == 1)) return false;
  const int64_t* other = c.src_strides[last] == 1 ? c.dst_strides : c.src_strides;  // strides[last] != 1 there
  for (int d = nd - 2; d >= 0; --d)
    if (other[d] == 1 && c.sizes[d] >= 8) {
      i_dim = c.src_strides[last] == 1 ? last : d;
      j_dim = c.src_strides[last] == 1 ? d : last;
      return true;
    }
  return false;
}

// strided_copy's tiled path: the dims other than i and j are walked as an outer index; each work item is one
// strip of kTile indices along i and kStripCols along j.
void transposed_copy(const StridedCopy& c, int i_dim, int j_dim, int64_t numel) {
  const int64_t es = c.elem_size, ni = c.sizes[i_dim], nj = c.sizes[j_dim];
  const int64_t strips = num_pieces(ni, kTile), cols = num_pieces(nj, kStripCols), outer = numel / (ni * nj);
  const auto* src = static_cast<const char*>(c.src);
  auto* dst = static_cast<char*>(c.dst);
  parallel_for(outer * strips * cols, numel > 65536, [&](int64_t w) {
    int64_t so, dof;
    outer_offsets(c, w / (strips * cols), i_dim, j_dim, so, dof);
    const int64_t i0 = w / cols % strips * kTile, i1 = std::min(ni, i0 + kTile);
    const int64_t j0 = w % cols * kStripCols, j1 = std::min(nj, j0 + kStripCols);
    tile_strip_any(src + so * es, c.src_strides[i_dim], c.src_strides[j_dim], dst + dof * es, c.dst_strides[i_dim],
                   c.dst_strides[j_dim], i0, i1, j0, j1, es);
  });
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
  if (int i_dim = 0, j_dim = 0; transposing(c, i_dim, j_dim)) return transposed_copy(c, i_dim, j_dim, numel);
  parallel_for(rows, numel > 65536, [&](int64_t r) {
    int64_t so, dof;
    outer_offsets(c, r, nd - 1, -1, so, dof);
    if (ss == 1 && ds == 1) {
      std::memcpy(dst + dof * es, src + so * es, static_cast<size_t>(row * es));
    } else {
      strided_row(src + so * es, ss, dst + dof * es, ds, row, es);
    }
  });
}

void transpose_copy(const void* src, int64_t rows, int64_t cols, int64_t ld_src, void* dst, int64_t ld_dst,
                    int64_t elem_size) {
  StridedCopy c{.ndim = 2, .sizes = {cols, rows}, .src_strides = {1, ld_src}, .dst_strides = {ld_dst, 1},
                .src = src, .dst = dst, .elem_size = static_cast<int>(elem_size)};
  strided_copy(c);
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
