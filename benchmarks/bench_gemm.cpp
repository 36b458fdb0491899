// bench_gemm [--quick]: GFLOP/s of hg::cpu::gemm per dtype next to a standalone oneDNN matmul (one
// primitive, plain row-major tags, created outside the timing, oneDNN's own threading) on the same
// shapes in the same run, and this CPU's measured peak for the ISA it has (FMA on ymm with AVX2, on zmm
// with AVX-512; VDPBF16PS with AVX512_BF16). Row-major C(M,N) = A(M,K) * B(K,N), no transposes. An
// engine this CPU cannot run is reported as n/a with the reason. First it prints how many tiles (the most
// threads each can use) halfgrad cuts the three GEMMs of one amp_recipe layer into on this CPU, and whether blocks
// of C computed alone keep the whole product's bits.
// Method (docs/ARCHITECTURE.md, "Benchmark method"): warm-up, median of 7 samples of >= 0.1 s each, samples of
// all configurations of a shape interleaved, a sample retried while other processes keep the shared
// VM busy; "clean" counts undisturbed samples.
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <immintrin.h>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/cpu_features.h"
#include "core/half.h"
#include "cpu/gemm.h"
#include "cpu/onednn.h"

#if HG_HAS_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace {

struct Opts {
  int samples = 7;
  double sample_s = 0.1;
};

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Busy CPU seconds of the whole machine (from /proc/stat, steal included) and of this process.
double machine_busy_s() {
  std::ifstream f("/proc/stat");
  std::string cpu;
  double v[8] = {};
  f >> cpu >> v[0] >> v[1] >> v[2] >> v[3] >> v[4] >> v[5] >> v[6] >> v[7];
  return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / 100.0;  // user nice system irq softirq steal
}
double self_busy_s() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  return r.ru_utime.tv_sec + r.ru_stime.tv_sec + 1e-6 * (r.ru_utime.tv_usec + r.ru_stime.tv_usec);
}

constexpr double kBusy = 0.12;  // a sample is "clean" when other processes used less than this

// Other processes' share of the machine while fn() ran.
template <class F>
double others_during(F&& fn, double* wall) {
  const double m0 = machine_busy_s(), s0 = self_busy_s(), w0 = now();
  fn();
  *wall = now() - w0;
  const double others = (machine_busy_s() - m0) - (self_busy_s() - s0);
  return std::max(0.0, others) / (*wall * omp_get_num_procs());
}

// One timed configuration. Configurations of a shape are sampled in turn (interleaved), so a
// neighbour's burst on the shared VM hits halfgrad and oneDNN alike and their ratio stays fair.
struct Timer {
  explicit Timer(std::function<void()> f) : fn(std::move(f)) {}
  std::function<void()> fn;
  int64_t reps = 1;
  std::vector<double> sec;
  int clean = 0;

  void calibrate(const Opts& o) {
    fn();  // warm-up: plan creation, page faults, caches
    const double t0 = now();
    int64_t calls = 0;
    while (now() - t0 < 0.3 * o.sample_s) fn(), ++calls;
    reps = std::max<int64_t>(1, std::llround(o.sample_s * calls / (now() - t0)));
  }
  // A sample taken while others were busy is retried up to twice. (/proc/stat ticks every 10 ms.)
  void sample() {
    for (int attempt = 0;; ++attempt) {
      double wall = 0;
      const double others = others_during([&] { for (int64_t r = 0; r < reps; ++r) fn(); }, &wall);
      if (others < kBusy || attempt == 2) {
        sec.push_back(wall / reps), clean += others < kBusy;
        return;
      }
    }
  }
  double median_sec() const {
    std::vector<double> t = sec;
    std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
    return t[t.size() / 2];
  }
};

// ---- peak: independent accumulators so only FMA throughput limits, one stream per thread ---------
constexpr int64_t kPeakIters = 60'000'000;  // ~0.15 s per run at 2 FMA/cycle

// (gcc 12's _mm512_reduce_add_ps trips -Wuninitialized inside its own header.)
__attribute__((target("avx512f"))) float sum_lanes(const __m512* acc) {
  alignas(64) float lanes[16];
  float s = 0;
  for (int i = 0; i < 12; ++i) {
    _mm512_store_ps(lanes, acc[i]);
    for (float x : lanes) s += x;
  }
  return s;
}

// 12 independent accumulators of 8 lanes: the FMA pipes of an AVX2 core, without their latency.
__attribute__((target("avx2,fma"))) float fma_kernel_ymm() {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(float(i));
  const __m256 x = _mm256_set1_ps(0.999f), y = _mm256_set1_ps(1e-3f);
  for (int64_t it = 0; it < kPeakIters; ++it)
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], x, y);
  alignas(32) float lanes[8];
  float s = 0;
  for (int i = 0; i < 12; ++i) {
    _mm256_store_ps(lanes, acc[i]);
    for (float v : lanes) s += v;
  }
  return s;
}

__attribute__((target("avx512f"))) float fma_kernel() {
  __m512 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(float(i));
  const __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(1e-3f);
  for (int64_t it = 0; it < kPeakIters; ++it)
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
  return sum_lanes(acc);
}

__attribute__((target("avx512f,avx512bf16"))) float bf16_kernel() {
  __m512 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(float(i));
  const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = (__m512bh)_mm512_set1_epi16(0x3a83);
  for (int64_t it = 0; it < kPeakIters; ++it)
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], x, y);
  return sum_lanes(acc);
}

// GFLOP/s of kernel run on every OpenMP thread at once; flop_per_iter counts one iteration.
double peak(float (*kernel)(), double flop_per_iter) {
  float sum = 0;
  const double t0 = now();
#pragma omp parallel reduction(+ : sum)
  sum += kernel();
  const double dt = now() - t0;
  volatile float sink = sum;  // keeps the kernels from being optimised away
  (void)sink;
  return omp_get_max_threads() * kPeakIters * flop_per_iter / dt * 1e-9;
}

// ---- problems ---------------------------------------------------------------------------------
struct Shape {
  int64_t m, n, k;
};
double gflop(const Shape& s) { return 2.0 * s.m * s.n * s.k * 1e-9; }

// 64-byte aligned bytes, as halfgrad's CPU allocator gives tensors (std::vector's 16 bytes would
// make AVX-512/AMX loads straddle cache lines and understate halfgrad next to oneDNN's buffers).
struct Aligned {
  struct Free {
    void operator()(unsigned char* p) const { std::free(p); }
  };
  std::unique_ptr<unsigned char[], Free> p;
  explicit Aligned(size_t n) : p(static_cast<unsigned char*>(std::aligned_alloc(64, (n + 63) / 64 * 64))) {}
};

// Operands for one (shape, dtype) in halfgrad's layout, filled with values exact in the dtype.
struct Operands {
  Aligned a, b, c;
  Operands(const Shape& s, hg::DType dt)
      : a(s.m * s.k * hg::dtype_size(dt)), b(s.k * s.n * hg::dtype_size(dt)), c(s.m * s.n * hg::dtype_size(dt)) {
    std::mt19937 rng(1);
    std::uniform_int_distribution<int> d(-8, 8);  // k/8: exact in every dtype
    const int64_t sizes[] = {s.m * s.k, s.k * s.n, s.m * s.n};
    unsigned char* bufs[] = {a.p.get(), b.p.get(), c.p.get()};
    for (int t = 0; t < 3; ++t)
      for (int64_t i = 0; i < sizes[t]; ++i) {
        const float x = d(rng) / 8.f;
        void* v = bufs[t];
        if (dt == hg::DType::F32) static_cast<float*>(v)[i] = x;
        else if (dt == hg::DType::F64) static_cast<double*>(v)[i] = x;
        else if (dt == hg::DType::F16) static_cast<hg::f16*>(v)[i] = hg::from_float<hg::f16>(x);
        else static_cast<hg::bf16*>(v)[i] = hg::from_float<hg::bf16>(x);
      }
  }
  hg::GemmArgs args(const Shape& s, hg::DType dt) {
    return {.dtype = dt, .m = s.m, .n = s.n, .k = s.k, .a = a.p.get(), .lda = s.k, .b = b.p.get(),
            .ldb = s.n, .c = c.p.get(), .ldc = s.n};
  }
};

#if HG_HAS_ONEDNN
// oneDNN on its own: one primitive with plain row-major tags and its own buffers, built once.
struct OneDnnMatmul {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{eng};
  dnnl::matmul prim;
  std::unordered_map<int, dnnl::memory> args;

  OneDnnMatmul(const Shape& s, hg::DType dt) {
    using dnnl::memory;
    const auto t = dt == hg::DType::BF16 ? memory::data_type::bf16 : memory::data_type::f32;
    const memory::desc a({s.m, s.k}, t, memory::format_tag::ab), b({s.k, s.n}, t, memory::format_tag::ab),
        c({s.m, s.n}, t, memory::format_tag::ab);
    prim = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), eng));
    Operands same(s, dt);  // the values halfgrad multiplies
    memory ma(a, eng), mb(b, eng), mc(c, eng);
    std::memcpy(ma.get_data_handle(), same.a.p.get(), a.get_size());
    std::memcpy(mb.get_data_handle(), same.b.p.get(), b.get_size());
    args = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
  }
  void run() {
    prim.execute(stream, args);
    stream.wait();
  }
};
#endif

void print_row(const std::string& shape, const char* dt, double gf, const Timer& t, double dnnl_gf,
               const Timer* dnnl, double pk, const Opts& o) {
  std::printf("%-16s %-5s %9.1f", shape.c_str(), dt, gf);
  if (dnnl && dnnl_gf > 0) std::printf(" %9.1f %7.0f%%", dnnl_gf, 100 * gf / dnnl_gf);
  else std::printf(" %9s %8s", dnnl ? "n/a" : "-", "-");
  std::printf(" %7.0f%%   %d/%d", 100 * gf / pk, t.clean, o.samples);
  if (dnnl && dnnl_gf > 0) std::printf(" %d/%d", dnnl->clean, o.samples);
  std::printf("\n");
}

// Peak over a few runs: the best one is the least disturbed by other processes.
double best_peak(float (*kernel)(), double flop_per_iter) {
  double best = 0;
  for (int i = 0; i < 3; ++i) best = std::max(best, peak(kernel, flop_per_iter));
  return best;
}

}  // namespace

namespace {

// Whether a block of C computed as a GEMM of its own has the same bits as in the whole product, for several block
// shapes (rows x columns of C, the whole K): what tiles that depended on the thread count would need to keep every
// thread count's bits equal (docs/PERFORMANCE.md). One F32 256x1024x1024 product, B plain and transposed.
void print_block_bits() {
  const int64_t m = 256, n = 1024, k = 1024;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::vector<float> a(m * k), b(k * n), whole(m * n), parts(m * n);
  for (float& v : a) v = nd(rng);
  for (float& v : b) v = nd(rng);
  std::printf("\nblocks of C (F32 %ldx%ldx%ld) computed alone: elements whose bits differ from the whole product\n",
              long(m), long(n), long(k));
  for (const hg::Trans tb : {hg::Trans::N, hg::Trans::T}) {
    const int64_t ldb = tb == hg::Trans::T ? k : n;
    hg::cpu::gemm({.trans_b = tb, .m = m, .n = n, .k = k, .a = a.data(), .lda = k, .b = b.data(), .ldb = ldb,
                   .c = whole.data(), .ldc = n});
    std::printf("  B %s:", tb == hg::Trans::T ? "transposed" : "plain     ");
    for (const auto& [bm, bn] : {std::pair<int64_t, int64_t>{8, 16}, {24, 48}, {64, 64}, {64, 100}, {64, 128},
                                 {128, 512}, {256, 64}, {7, 1024}}) {
      for (int64_t r = 0; r < m; r += bm)
        for (int64_t c = 0; c < n; c += bn) {
          const float* bp = tb == hg::Trans::T ? b.data() + c * k : b.data() + c;
          hg::cpu::gemm({.trans_b = tb, .m = std::min(bm, m - r), .n = std::min(bn, n - c), .k = k, .a = a.data() + r * k,
                         .lda = k, .b = bp, .ldb = ldb, .c = parts.data() + r * n + c, .ldc = n});
        }
      int64_t differ = 0;
      for (int64_t i = 0; i < m * n; ++i) differ += std::memcmp(&whole[i], &parts[i], sizeof(float)) != 0;
      std::printf(" %ldx%ld %ld", long(bm), long(bn), long(differ));
    }
    std::printf("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  Opts o;
  if (argc > 1 && std::strcmp(argv[1], "--quick") == 0) o.samples = 3, o.sample_s = 0.05;
  const hg::CpuFeatures& cpu = hg::cpu_features();
  std::printf("halfgrad bench_gemm on %s\n%d OpenMP threads, %d CPUs; oneDNN ISA %s; engines F32=%s BF16=%s F16=%s F64=%s\n",
              hg::cpu_summary().c_str(), omp_get_max_threads(), omp_get_num_procs(), hg::cpu::onednn_isa().c_str(),
              hg::cpu::gemm_engine(hg::DType::F32).c_str(), hg::cpu::gemm_engine(hg::DType::BF16).c_str(),
              hg::cpu::gemm_engine(hg::DType::F16).c_str(), hg::cpu::gemm_engine(hg::DType::F64).c_str());
  // The peak of what this CPU has: zmm FMA with AVX-512, ymm FMA with AVX2 (on Zen 4 both are 32 flop per cycle).
  double pk32 = 0, pk16 = 0;
  std::string how32 = "n/a (no FMA: this CPU has no AVX2/FMA)", how16;
  if (cpu.avx512) pk32 = best_peak(fma_kernel, 12 * 16 * 2), how32 = "FMA zmm";
  else if (cpu.avx2 && cpu.fma) pk32 = best_peak(fma_kernel_ymm, 12 * 8 * 2), how32 = "FMA ymm";
  if (cpu.avx512_bf16) pk16 = best_peak(bf16_kernel, 12 * 16 * 2 * 2), how16 = "VDPBF16PS zmm";
  else how16 = "n/a (no AVX512_BF16: BF16 is widened to F32, so BF16 rows are measured against the fp32 peak)";
  std::printf("measured peak (all threads): fp32 %s %.1f GFLOP/s; bf16 %s", how32.c_str(), pk32, how16.c_str());
  if (pk16 > 0) std::printf(" %.1f GFLOP/s", pk16);
  std::printf("\n");
  if (cpu.amx_bf16) std::printf("AMX-BF16 present: oneDNN's bf16 matmul uses AMX tiles and can exceed the VDPBF16PS peak\n");
  if (pk16 <= 0) pk16 = pk32;
  if (pk32 <= 0) pk32 = pk16 = 1;  // "of peak" then reads as GFLOP/s x 100

  // The most threads each GEMM of one amp_recipe layer (Linear(1024, 1024), batch 256) can keep busy: halfgrad cuts
  // C into tiles by the shape alone (the same bits on any thread count), each one thread's GEMM over all of K.
  std::printf("\ntiles per GEMM of an amp_recipe layer (Linear 1024x1024, batch 256; the most threads each can use):\n");
  struct Use {
    const char* what;
    hg::Trans ta, tb;
    int64_t m, n, k;
  };
  for (const Use& u : {Use{"forward  y = x W^T ", hg::Trans::N, hg::Trans::T, 256, 1024, 1024},
                       Use{"backward dX = dY W  ", hg::Trans::N, hg::Trans::N, 256, 1024, 1024},
                       Use{"backward dW = dY^T X", hg::Trans::T, hg::Trans::N, 1024, 1024, 256}}) {
    std::printf("  %s (%ldx%ldx%ld)", u.what, long(u.m), long(u.n), long(u.k));
    for (const hg::DType dt : {hg::DType::F32, hg::DType::BF16})
      std::printf("  %s %ld", hg::dtype_name(dt),
                  long(hg::cpu::gemm_tiles({.dtype = dt, .trans_a = u.ta, .trans_b = u.tb, .m = u.m, .n = u.n, .k = u.k})));
    std::printf("\n");
  }

  print_block_bits();

  const Shape shapes[] = {{512, 1024, 1024}, {256, 1024, 1024}, {256, 4096, 4096}, {64, 784, 256}};
  std::printf("\nC(M,N) = A(M,K) @ B(K,N), row-major, GFLOP/s (median); clean = samples with others < %.0f%% busy\n",
              100 * kBusy);
  std::printf("%-16s %-5s %9s %9s %8s %8s   %s\n", "M x N x K", "dtype", "halfgrad", "oneDNN", "hg/dnnl",
              "of peak", "clean hg dnnl");
  std::vector<std::string> ratios;
  for (const Shape& s : shapes) {
    const std::string name = std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k);
    std::printf("-- A (%ld,%ld) @ B (%ld,%ld)\n", long(s.m), long(s.k), long(s.k), long(s.n));
    std::fflush(stdout);
    // Timers: halfgrad F32, BF16, F16, [F64], then oneDNN F32, BF16.
    const hg::DType dts[] = {hg::DType::F32, hg::DType::BF16, hg::DType::F16, hg::DType::F64};
    const bool f64 = s.m * s.n * s.k <= (int64_t(1) << 30);  // Eigen F64 (gradcheck) only where quick
    std::vector<std::unique_ptr<Operands>> ops;
    std::vector<Timer> timers;
    for (int i = 0; i < (f64 ? 4 : 3); ++i) {
      ops.push_back(std::make_unique<Operands>(s, dts[i]));
      timers.emplace_back([g = ops.back()->args(s, dts[i])] { hg::cpu::gemm(g); });
    }
#if HG_HAS_ONEDNN
    OneDnnMatmul d32(s, hg::DType::F32);
    std::unique_ptr<OneDnnMatmul> d16;
    try {
      d16 = std::make_unique<OneDnnMatmul>(s, hg::DType::BF16);
    } catch (const dnnl::error& e) {  // no BF16 matmul for this ISA (AVX2): the row says n/a
      if (&s == &shapes[0]) std::printf("oneDNN BF16 matmul: n/a on %s (%s)\n", hg::cpu::onednn_isa().c_str(), e.what());
    }
    timers.emplace_back([&] { d32.run(); });
    timers.emplace_back([&] { d16 ? d16->run() : void(); });
#endif
    for (Timer& t : timers) t.calibrate(o);
    for (int k = 0; k < o.samples; ++k)
      for (Timer& t : timers) t.sample();
    std::vector<double> gf;
    for (const Timer& t : timers) gf.push_back(gflop(s) / t.median_sec());
    const size_t nd = f64 ? 4 : 3;  // index of the first oneDNN timer
    const bool dn = timers.size() > nd;
    const Timer* dt32 = dn ? &timers[nd] : nullptr;
    const Timer* dt16 = dn ? &timers[nd + 1] : nullptr;
    const double g32 = dn ? gf[nd] : 0, g16 = dn && d16 ? gf[nd + 1] : 0;
    print_row(name, "F32", gf[0], timers[0], g32, dt32, pk32, o);
    print_row(name, "BF16", gf[1], timers[1], g16, dt16, pk16, o);
    print_row(name, "F16", gf[2], timers[2], g32, dt32, pk32, o);  // F16 runs the F32 GEMM
    if (f64) print_row(name, "F64", gf[3], timers[3], 0, nullptr, pk32 / 2, o);
    char r[200];
    char dnnl_ratio[32] = "n/a";
    if (g16 > 0) std::snprintf(dnnl_ratio, sizeof dnnl_ratio, "%.2fx", g16 / g32);
    std::snprintf(r, sizeof r, "%-16s BF16/F32: halfgrad %.2fx, oneDNN %s; F16/F32: halfgrad %.2fx", name.c_str(),
                  gf[1] / gf[0], dnnl_ratio, gf[2] / gf[0]);
    ratios.push_back(r);
  }
  std::printf("\n");
  for (const auto& r : ratios) std::printf("%s\n", r.c_str());
  std::printf("(of peak: F32/F16 vs the measured fp32 FMA peak, BF16 vs the VDPBF16PS peak where the CPU has it, else\n"
              " the fp32 one; F64 vs half the fp32 one; F16 rows compare with oneDNN F32, since oneDNN 2.6 has no f16\n"
              " matmul on CPU)\n");
}
