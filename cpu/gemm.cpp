// CPU GEMM: C[b] = alpha * op(A[b]) * op(B[b]) + beta * C[b] (contract in ops/gemm.h).
// Engines, chosen from what this CPU and oneDNN can do (docs/ARCHITECTURE.md, "CPU engines"):
//  * F32: oneDNN matmul (84-95% of peak on AVX-512, its AVX2 kernels elsewhere);
//  * BF16: oneDNN matmul where oneDNN has BF16 dot products (AVX512_BF16, AMX: about 2x F32); on every
//    other CPU widened to F32 and run by the F32 kernel, rounded once (cpu/onednn.h says why);
//  * F16: always widened (no CPU here has an F16 GEMM in oneDNN 2.6);
//  * F64, and everything in a build without oneDNN: Eigen.
#include "core/dispatch_table.h"
#include "core/parallel.h"
#include "cpu/onednn.h"

#include <Eigen/Core>
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <type_traits>

#include "core/convert.h"
#include "core/error.h"
#include "cpu/blocks.h"
#include "cpu/gemm.h"
#include "cpu/register.h"
#include "ops/kernels/gemm.h"

#if HG_HAS_ONEDNN
#include <unordered_map>
#endif

namespace hg::cpu {
namespace {

struct Dims {
  int64_t rows, cols;
};
// Stored shapes: A is (M,K) or (K,M), B is (K,N) or (N,K).
Dims stored_a(const GemmArgs& g) { return g.trans_a == Trans::N ? Dims{g.m, g.k} : Dims{g.k, g.m}; }
Dims stored_b(const GemmArgs& g) { return g.trans_b == Trans::N ? Dims{g.k, g.n} : Dims{g.n, g.k}; }
template <class T> T* at(const void* p, int64_t off) {
  return const_cast<T*>(static_cast<const T*>(p)) + off;
}

// k == 0: the product is empty, so C = beta*C; beta == 0 writes zeros without reading C (BLAS).
void scale_c(const GemmArgs& g) {
  visit_dtype(gemm_c_dtype(g), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, int64_t>)
      for (int64_t b = 0; b < g.batch; ++b)
        for (int64_t i = 0; i < g.m; ++i) {
          T* row = at<T>(g.c, b * g.stride_c + i * g.ldc);
          for (int64_t j = 0; j < g.n; ++j)
            row[j] = store<T>(g.beta == 0 ? 0 : g.beta * load(row[j]));
        }
  });
}

// ---- Eigen: F64 always; F32 when built without oneDNN ------------------------------------------
template <class T> using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T> using ConstMap = Eigen::Map<const RowMat<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <class T> using MutMap = Eigen::Map<RowMat<T>, Eigen::Unaligned, Eigen::OuterStride<>>;

template <class T>
void eigen_gemm_one(const GemmArgs& g, const T* a, const T* b, T* c) {
  const Dims da = stored_a(g), db = stored_b(g);
  ConstMap<T> A(a, da.rows, da.cols, Eigen::OuterStride<>(g.lda));
  ConstMap<T> B(b, db.rows, db.cols, Eigen::OuterStride<>(g.ldb));
  MutMap<T> C(c, g.m, g.n, Eigen::OuterStride<>(g.ldc));
  const T alpha = static_cast<T>(g.alpha), beta = static_cast<T>(g.beta);
  auto run = [&](const auto& opa, const auto& opb) {
    if (beta == T(0)) {
      C.noalias() = alpha * opa * opb;  // C is not read, as BLAS does for beta == 0
    } else {
      if (beta != T(1)) C *= beta;
      C.noalias() += alpha * opa * opb;
    }
  };
  const bool ta = g.trans_a == Trans::T, tb = g.trans_b == Trans::T;
  if (!ta && !tb) run(A, B);
  else if (!ta) run(A, B.transpose());
  else if (!tb) run(A.transpose(), B);
  else run(A.transpose(), B.transpose());
}

template <class T>
void eigen_gemm(const GemmArgs& g) {
  for (int64_t b = 0; b < g.batch; ++b)
    eigen_gemm_one<T>(g, at<T>(g.a, b * g.stride_a), at<T>(g.b, b * g.stride_b), at<T>(g.c, b * g.stride_c));
}

#if HG_HAS_ONEDNN
// ---- oneDNN matmul: F32 and BF16 (bf16 in, f32 accumulation, bf16 out rounded once) ------------
using dnnl::memory;

// Everything a primitive depends on; floats as bits so NaN alpha/beta still hit the cache.
struct PlanKey {
  DType dtype;
  bool c_f32;
  Trans ta, tb;
  int64_t m, n, k, lda, ldb, ldc, batch, sa, sb, sc;
  uint32_t alpha, beta;
  bool operator==(const PlanKey&) const = default;
};
struct PlanKeyHash {
  size_t operator()(const PlanKey& p) const {
    size_t h = static_cast<size_t>(p.dtype) | size_t(p.ta) << 8 | size_t(p.tb) << 9 | size_t(p.c_f32) << 10;
    for (int64_t v : {p.m, p.n, p.k, p.lda, p.ldb, p.ldc, p.batch, p.sa, p.sb, p.sc,
                      int64_t(p.alpha) << 32 | p.beta})
      h = (h ^ static_cast<size_t>(v)) * 0x100000001b3ull;  // FNV-1a style mixing
    return h;
  }
};

// A primitive plus memory objects whose data handles are swapped per call: building dnnl::memory
// and the argument map each call costs more than a 64x256x10 GEMM's compute.
struct Plan {
  dnnl::matmul prim;
  memory a, b, c;
  std::unordered_map<int, memory> args;
  bool per_batch = false;  // oneDNN refused the 3-D layout: loop a 2-D primitive over the batch
  bool widen = false;      // oneDNN refused this BF16 problem: widen it to F32 (decided once, here)
};

const dnnl::engine& engine() { return onednn_engine(); }

// 3-D (batch, rows, cols) descriptor of a stored operand; a zero batch stride becomes a batch of 1,
// which oneDNN broadcasts. batch == 0 asks for the 2-D descriptor of one matrix.
memory::desc operand_md(memory::data_type dt, int64_t batch, int64_t stride, Dims d, int64_t ld, Trans t) {
  const int64_t r = t == Trans::N ? d.rows : d.cols, c = t == Trans::N ? d.cols : d.rows;
  const int64_t rs = t == Trans::N ? ld : 1, cs = t == Trans::N ? 1 : ld;
  if (batch == 0) return memory::desc({r, c}, dt, {rs, cs});
  const int64_t nb = stride == 0 ? 1 : batch;
  return memory::desc({nb, r, c}, dt, {stride == 0 ? d.rows * ld : stride, rs, cs});
}

dnnl::matmul::primitive_desc matmul_pd(const GemmArgs& g, int64_t batch) {
  const auto dt = g.dtype == DType::BF16 ? memory::data_type::bf16 : memory::data_type::f32;
  const auto a = operand_md(dt, batch, g.stride_a, stored_a(g), g.lda, g.trans_a);
  const auto b = operand_md(dt, batch, g.stride_b, stored_b(g), g.ldb, g.trans_b);
  const auto c = operand_md(g.c_f32 ? memory::data_type::f32 : dt, batch, g.stride_c, {g.m, g.n}, g.ldc, Trans::N);
  dnnl::primitive_attr attr;
  if (g.alpha != 1.f) attr.set_output_scales(0, {g.alpha});  // applied before the sum post-op
  if (g.beta != 0.f) {
    dnnl::post_ops po;
    po.append_sum(g.beta);  // dst = alpha*A*B + beta*dst, in f32, rounded once
    attr.set_post_ops(po);
  }
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), attr, engine());
}

// A one-thread primitive: halfgrad splits a GEMM into tiles itself (tiled() below). oneDNN sizes a
// primitive's work split from OpenMP's thread count when it is created and when it runs.
Plan make_plan(const GemmArgs& g) {
  ScopedOmpThreads omp(1);
  Plan p;
  dnnl::matmul::primitive_desc pd;
  try {
    pd = matmul_pd(g, g.batch == 1 ? 0 : g.batch);
  } catch (const dnnl::error&) {
    try {
      pd = matmul_pd(g, 0);  // a 2-D primitive looped over the batch
      p.per_batch = g.batch > 1;
    } catch (const dnnl::error& e) {
      HG_CHECK(g.dtype == DType::BF16, "gemm: oneDNN (", onednn_isa(), ") could not create a matmul (", e.what(),
               ") for dtype=", g.dtype, " m=", g.m, " n=", g.n, " k=", g.k, " batch=", g.batch,
               "; rebuild with -DHG_ONEDNN=OFF to use Eigen");
      p.widen = true;
      return p;
    }
  }
  p.prim = dnnl::matmul(pd);
  p.a = memory(pd.src_desc(), engine(), nullptr);
  p.b = memory(pd.weights_desc(), engine(), nullptr);
  p.c = memory(pd.dst_desc(), engine(), nullptr);
  p.args = {{DNNL_ARG_SRC, p.a}, {DNNL_ARG_WEIGHTS, p.b}, {DNNL_ARG_DST, p.c}};
  return p;
}

// Per-thread cache and stream: no lock on the hot path, and set_data_handle on a plan's memory
// objects cannot race with another thread's call.
Plan& plan_for(const GemmArgs& g) {
  thread_local std::unordered_map<PlanKey, Plan, PlanKeyHash> cache;
  const bool one = g.batch == 1;
  const PlanKey key{g.dtype, g.c_f32, g.trans_a, g.trans_b, g.m, g.n, g.k, g.lda, g.ldb, g.ldc, g.batch,
                    one ? 0 : g.stride_a, one ? 0 : g.stride_b, one ? 0 : g.stride_c,
                    std::bit_cast<uint32_t>(g.alpha), std::bit_cast<uint32_t>(g.beta)};
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  if (cache.size() >= 1024) cache.clear();  // bound memory when shapes keep changing
  return cache.emplace(key, make_plan(g)).first->second;
}

void widened_gemm(const GemmArgs& g);

// One tile on this thread.
void onednn_gemm(const GemmArgs& g) {
  thread_local dnnl::stream stream(engine());
  Plan& p = plan_for(g);
  if (p.widen) return widened_gemm(g);
  ScopedOmpThreads omp(1);
  const size_t es = dtype_size(g.dtype), ces = dtype_size(gemm_c_dtype(g));
  const int64_t steps = p.per_batch ? g.batch : 1;
  for (int64_t i = 0; i < steps; ++i) {
    p.a.set_data_handle(at<char>(g.a, i * g.stride_a * es));
    p.b.set_data_handle(at<char>(g.b, i * g.stride_b * es));
    p.c.set_data_handle(at<char>(g.c, i * g.stride_c * ces));
    p.prim.execute(stream, p.args);
  }
  stream.wait();
}
#endif

// ---- widening: F16 always, BF16 without oneDNN -> dense F32 scratch, F32 GEMM, round once ------
// Runs f(matrix, row) over nmat*rows rows, split across OpenMP threads when there is enough work.
template <class F>
void for_rows(int64_t nmat, int64_t rows, int64_t cols, F&& f) {
  const int64_t total = nmat * rows;
  parallel_for(total, total * cols >= (int64_t(1) << 16), [&](int64_t r) { f(r / rows, r % rows); });
}

// True when nmat (rows, cols) matrices with leading dim ld and batch stride are one dense block:
// then one bulk conversion (in large pieces) replaces a call per short row.
bool dense(int64_t nmat, Dims d, int64_t ld, int64_t stride) {
  return ld == d.cols && (nmat == 1 || stride == d.rows * d.cols);
}


// Copies nmat strided (rows, cols) matrices of dtype dt into one dense float buffer.
void widen(DType dt, const void* src, int64_t nmat, Dims d, int64_t ld, int64_t stride, float* dst) {
  if (dense(nmat, d, ld, stride)) return cast(src, dt, dst, DType::F32, nmat * d.rows * d.cols);
  for_rows(nmat, d.rows, d.cols, [&](int64_t b, int64_t i) {
    const int64_t off = b * stride + i * ld;
    float* out = dst + (b * d.rows + i) * d.cols;
    if (dt == DType::F16) convert_f16_to_f32(at<f16>(src, off), out, d.cols);
    else convert_bf16_to_f32(at<bf16>(src, off), out, d.cols);
  });
}

void narrow(DType dt, const float* src, int64_t nmat, Dims d, void* dst, int64_t ld, int64_t stride) {
  if (dense(nmat, d, ld, stride)) return cast(src, DType::F32, dst, dt, nmat * d.rows * d.cols);
  for_rows(nmat, d.rows, d.cols, [&](int64_t b, int64_t i) {
    const int64_t off = b * stride + i * ld;
    const float* in = src + (b * d.rows + i) * d.cols;
    if (dt == DType::F16) convert_f32_to_f16(in, at<f16>(dst, off), d.cols);
    else convert_f32_to_bf16(in, at<bf16>(dst, off), d.cols);
  });
}

// ---- threads: fixed tiles ------------------------------------------------------------------------
// A GEMM with enough work is cut into tiles (pieces of the batch, of C's rows and of its columns) that
// depend on its shape alone, and each tile runs on one thread as a one-thread GEMM over the whole K.
// So every element of C is the same sum in the same order on any thread count: a run gives the same
// bits on 1 or 16 threads, and when a busy machine makes halfgrad drop to one thread (core/parallel.h)
// nothing changes. oneDNN's own threading splits K for some shapes and does not give that (its F32
// forward of a 128x1568x64 linear differed between 1 and 2 threads); and through parallel_for the
// tiles' region is one halfgrad measures for stalls.

// Below this many multiply-adds a GEMM is one tile: splitting a few microseconds of work costs more
// in fork/join than it saves (a 32x64x64 layer ran 2x slower on 2 threads than on 1).
constexpr int64_t kSerialMacs = int64_t(1) << 19;
constexpr int64_t kTileMacs = int64_t(1) << 23;  // aim: tiles of about this much work (~0.25 ms)
constexpr int64_t kMaxTiles = 64;

// True where oneDNN runs its AVX-512 (brgemm) matmul, which packs B itself; false for its AVX2 GEMM and
// without oneDNN (Eigen).
bool packs_transposed_b() {
#if HG_HAS_ONEDNN
  static const bool avx512 = onednn_isa().rfind("avx512", 0) == 0;
  return avx512;
#else
  return false;
#endif
}

struct Tiles {
  int64_t pb = 1, pm = 1, pn = 1;  // pieces of the batch, of M, of N
  int64_t count() const { return pb * pm * pn; }
};

// Which way to cut, measured on oneDNN 2.6's AVX2 GEMM (one thread): a tile that keeps its A and B
// slices dense runs as fast as the whole GEMM (64-256 of 256 rows with trans_a=N: 33-34 GFLOP/s, like
// the whole; 32 rows: 27-31), while a slice that makes an operand strided can be slower (256 or 512 of
// the 1024 columns of a plain B with a plain A: 27-28 vs 34; 256 of 1024 rows of a transposed A: 26;
// half of them: 34-35, but half the rows and half the columns at once: 25). So: the batch first; rows
// in pieces of at least 64 when op(A)'s rows are A's rows, else in halves; columns in pieces of at
// least 64 when op(B)'s columns are B's rows, else in halves when A is transposed and its rows were
// not cut, never for a plain A and a plain B.
// oneDNN's AVX-512 matmul (its brgemm kernels) packs op(B)'s columns from a transposed B in every tile, so
// there cutting the columns as well as the rows repacks B once per row piece and makes tiles narrow: a
// 1024x1024x1024 product with B transposed (y = x W^T, every linear's forward) ran 1.41x the time of the
// plain one when cut into 8x8 tiles, 0.98x when cut into the plain one's 8 row pieces (bench_views --n 1024,
// AMD EPYC Zen 4, 2 threads). So on that engine a transposed B has its columns cut only when the rows
// could not be (a short M, like a 64-row batch), and AVX2's kernels keep the rule above.
Tiles tiles_of(const GemmArgs& g) {
  Tiles t;
  const int64_t macs = g.batch * g.m * g.n * g.k;
  if (macs < kSerialMacs) return t;
  const int64_t want = std::clamp(macs / kTileMacs, int64_t{2}, kMaxTiles);
  t.pb = std::min(g.batch, want);
  auto grow = [&](int64_t& p, int64_t len, int64_t min_len, int64_t most) {
    while (t.count() < want && len / (2 * p) >= min_len && 2 * p <= most) p *= 2;
  };
  constexpr int64_t kMinSide = 64, kAny = int64_t(1) << 40;
  grow(t.pm, g.m, kMinSide, g.trans_a == Trans::N ? kAny : 2);
  if (g.trans_b == Trans::T && (!packs_transposed_b() || t.pm == 1)) grow(t.pn, g.n, kMinSide, kAny);
  else if (g.trans_a == Trans::T && t.pm == 1) grow(t.pn, g.n, kMinSide, 2);
  return t;
}

// Tile i of t: the same GEMM on a range of the batch, rows of op(A) and C, columns of op(B) and C.
GemmArgs tile_of(const GemmArgs& g, const Tiles& t, int64_t i) {
  const int64_t ib = i / (t.pm * t.pn), im = i / t.pn % t.pm, in = i % t.pn;
  const int64_t b0 = piece_start(g.batch, t.pb, ib, 1), b1 = piece_start(g.batch, t.pb, ib + 1, 1);
  const int64_t r0 = piece_start(g.m, t.pm, im, 16), r1 = piece_start(g.m, t.pm, im + 1, 16);
  const int64_t c0 = piece_start(g.n, t.pn, in, 16), c1 = piece_start(g.n, t.pn, in + 1, 16);
  const int64_t es = static_cast<int64_t>(dtype_size(g.dtype));
  const int64_t ces = static_cast<int64_t>(dtype_size(gemm_c_dtype(g)));
  GemmArgs s = g;
  s.batch = b1 - b0, s.m = r1 - r0, s.n = c1 - c0;
  s.a = at<char>(g.a, es * (b0 * g.stride_a + (g.trans_a == Trans::N ? r0 * g.lda : r0)));
  s.b = at<char>(g.b, es * (b0 * g.stride_b + (g.trans_b == Trans::N ? c0 : c0 * g.ldb)));
  s.c = at<char>(g.c, ces * (b0 * g.stride_c + r0 * g.ldc + c0));
  return s;
}

// A tile (or a whole small GEMM) on this thread, F32, F64 or native BF16.
void gemm_one_thread(const GemmArgs& g) {
#if HG_HAS_ONEDNN
  if (g.dtype != DType::F64) return onednn_gemm(g);
#endif
  ScopedOmpThreads omp(1);  // Eigen would open its own OpenMP region
  if (g.dtype == DType::F64) eigen_gemm<double>(g);
  else eigen_gemm<float>(g);
}

void run_tiles(const GemmArgs& g) {
  const Tiles t = tiles_of(g);
  if (t.count() == 1) return gemm_one_thread(g);
  parallel_for(t.count(), true, [&](int64_t i) { gemm_one_thread(tile_of(g, t, i)); });
}

// oneDNN's AVX2 GEMM reads a plain F32 B in place when it can, and when B's rows lie a multiple of
// 4 KiB apart (the weight of a 1024- or 2048-wide layer in dX = dY W) they fall into the same cache
// sets: a 256x1024x1024 product ran at 27 GFLOP/s instead of 33-34 (with B at an address 16 bytes off
// the 64-byte alignment oneDNN takes another path, which shows it is the layout). Such a B is copied
// once with rows padded by 64 bytes (one pass over B, ~1 ms for 4 MiB) before the tiles run. The
// decision depends on the shape only, like the tiles.
bool pad_b(const GemmArgs& g) {
#if HG_HAS_ONEDNN
  return !packs_transposed_b() && g.dtype == DType::F32 && g.trans_a == Trans::N && g.trans_b == Trans::N &&
         (g.batch == 1 || g.stride_b == 0) && g.ldb % 1024 == 0 && g.k >= 256 && g.n >= 256;
#else
  (void)g;
  return false;
#endif
}

// oneDNN's AVX2 GEMM packs a transposed B again in every tile, so a product cut into pm row pieces packs all of
// B pm times, and once B is larger than the L2 cache that costs: with B transposed (y = x W^T) a 2048x2048x2048
// product ran 1.18x and a 1024-cube 1.09x the time of the plain product. Such a B is transposed once into a
// plain (K, N) scratch (transpose_copy, ~0.3 ms for 1024x1024) and the tiles read it in place as they read a
// plain B: 1.02x and 1.04x. Not below 1024 rows, where the copy is not paid back: a 128x1024x1024 product ran
// 1.28x slower with the copy and is faster with B transposed than plain (0.66x) without it. (bench_views and a
// shape sweep, DNNL_MAX_CPU_ISA=avx2, AMD EPYC Zen 4, 2 threads.)
bool transpose_b(const GemmArgs& g) {
#if HG_HAS_ONEDNN
  return !packs_transposed_b() && g.dtype == DType::F32 && g.trans_b == Trans::T &&
         (g.batch == 1 || g.stride_b == 0) && g.m >= 1024 && g.n * g.k >= (int64_t(1) << 20);
#else
  (void)g;
  return false;
#endif
}

void tiled(const GemmArgs& g) {
  const bool transpose = transpose_b(g);
  if (!transpose && !pad_b(g)) return run_tiles(g);
  thread_local Scratch plain_b;
  // rows 4 KiB apart share cache sets (pad_b): such rows get 64 bytes of padding
  const int64_t ld = g.n % 1024 == 0 ? g.n + 16 : g.n;
  float* const b = plain_b.get<float>(g.k * ld);
  if (transpose) {
    transpose_copy(g.b, g.n, g.k, g.ldb, b, ld, sizeof(float));
  } else {
    parallel_for(g.k, g.k * g.n > (int64_t(1) << 16), [&](int64_t r) {
      std::memcpy(b + r * ld, at<float>(g.b, r * g.ldb), static_cast<size_t>(g.n) * sizeof(float));
    });
  }
  GemmArgs h = g;
  h.b = b, h.ldb = ld, h.stride_b = 0, h.trans_b = Trans::N;
  run_tiles(h);
}

void widened_gemm(const GemmArgs& g) {
  thread_local Scratch sa, sb, sc;  // reused: no allocation in steady state
  const Dims da = stored_a(g), db = stored_b(g), dc{g.m, g.n};
  const int64_t na = g.stride_a == 0 ? 1 : g.batch, nb = g.stride_b == 0 ? 1 : g.batch;
  float* const a = sa.get<float>(na * da.rows * da.cols);
  float* const b = sb.get<float>(nb * db.rows * db.cols);
  GemmArgs f = g;
  f.dtype = DType::F32;
  f.c_f32 = false;
  f.a = a, f.b = b;
  f.lda = da.cols, f.ldb = db.cols;
  f.stride_a = na == 1 ? 0 : da.rows * da.cols;
  f.stride_b = nb == 1 ? 0 : db.rows * db.cols;
  widen(g.dtype, g.a, na, da, g.lda, g.stride_a, a);
  widen(g.dtype, g.b, nb, db, g.ldb, g.stride_b, b);
  if (g.c_f32) return tiled(f);  // C is F32 already: the F32 GEMM writes it in place
  float* const c = sc.get<float>(g.batch * g.m * g.n);
  f.c = c, f.ldc = g.n, f.stride_c = g.m * g.n;
  if (g.beta != 0) widen(g.dtype, g.c, g.batch, dc, g.ldc, g.stride_c, c);
  tiled(f);
  narrow(g.dtype, c, g.batch, dc, g.c, g.ldc, g.stride_c);
}

// ---- reference ---------------------------------------------------------------------------------
// Rounds d to float with round-to-odd, so the following RNE to 16 bits rounds d only once
// (Boldo & Melquiond, "Emulation of FMA and correctly rounded sums: proved algorithms using
// rounding to odd"): float keeps >= 2 more bits than f16/bf16.
float round_to_odd(double d) {
  float f = static_cast<float>(d);
  if (static_cast<double>(f) == d || std::isnan(d)) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.f);
  return std::bit_cast<float>(std::bit_cast<uint32_t>(f) | 1u);
}

template <class T> T round_once(double d) {
  if constexpr (std::is_same_v<T, double>) return d;
  else if constexpr (std::is_same_v<T, float>) return static_cast<float>(d);
  else return from_float<T>(round_to_odd(d));
}

template <class T, class TC = T>
void reference_typed(const GemmArgs& g) {
  const bool ta = g.trans_a == Trans::T, tb = g.trans_b == Trans::T;
  for (int64_t b = 0; b < g.batch; ++b) {
    const T* A = at<T>(g.a, b * g.stride_a);
    const T* B = at<T>(g.b, b * g.stride_b);
    TC* C = at<TC>(g.c, b * g.stride_c);
    for (int64_t i = 0; i < g.m; ++i)
      for (int64_t j = 0; j < g.n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < g.k; ++p)
          acc += double(to_float(A[ta ? p * g.lda + i : i * g.lda + p])) *
                 double(to_float(B[tb ? j * g.ldb + p : p * g.ldb + j]));
        TC& c = C[i * g.ldc + j];
        const double old = g.beta == 0 ? 0.0 : double(g.beta) * double(to_float(c));
        c = round_once<TC>(double(g.alpha) * acc + old);
      }
  }
}

}  // namespace

namespace {
// F16, and BF16 without BF16 dot products, run as an F32 GEMM of widened copies
bool runs_widened(DType dt) { return dt == DType::F16 || (dt == DType::BF16 && !onednn_native(DType::BF16)); }
}  // namespace

void gemm(const GemmArgs& g) {
  check_gemm_args(g);
  if (g.m == 0 || g.n == 0) return;
  if (g.k == 0) return scale_c(g);
  if (runs_widened(g.dtype)) widened_gemm(g);
  else tiled(g);
}

int64_t gemm_tiles(const GemmArgs& g) {
  if (g.m == 0 || g.n == 0 || g.k == 0) return 1;
  GemmArgs f = g;
  if (runs_widened(g.dtype)) f.dtype = DType::F32;
  if (transpose_b(f)) f.trans_b = Trans::N;  // tiled() runs it on a plain copy of B
  return tiles_of(f).count();
}

std::string gemm_engine(DType dt) {
  HG_CHECK(dt != DType::I64, "gemm_engine: dtype I64 has no GEMM; use F32, F16, BF16 or F64");
  if (dt == DType::F64) return "eigen";
#if HG_HAS_ONEDNN
  const std::string f32 = "onednn:" + onednn_isa();
#else
  const std::string f32 = "eigen";
#endif
  return dt == DType::F32 || onednn_native(dt) ? f32 : widened_engine(f32);
}

void gemm_reference(const GemmArgs& g) {
  check_gemm_args(g);
  if (g.m == 0 || g.n == 0) return;
  visit_dtype(g.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16>) {
      if (g.c_f32) return reference_typed<T, float>(g);
    }
    if constexpr (!std::is_same_v<T, int64_t>) reference_typed<T>(g);
  });
}

// This family's CPU kernels into their tables (cpu/register.cpp's register_kernels calls it).
void register_gemm() {
  gemm_kernels().set_all_floating(DeviceType::CPU, &gemm);
}

}  // namespace hg::cpu
