#pragma once
// What the GPU tests (test_gpu_ops.cpp, test_gpu_fp8.cpp, test_gpu_nn.cpp, test_gpu_amp.cpp) share: inputs
// made on the CPU, the GPU result compared with the CPU's (the oracle) per element or by relative norm, and
// the dtype tolerances.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "halfgrad.h"
#include "test_util.h"

namespace hg::gpu_test {

inline const Device kGpu = Device::cuda();
inline const DType kTypes[] = {DType::F32, DType::F16, DType::BF16, DType::F64};

struct Tol {
  double rtol, atol;
};

inline Tol ew_tol(DType t) {
  switch (t) {
    case DType::F32: return {1e-5, 1e-6};
    case DType::F16: return {2e-3, 1e-5};
    case DType::BF16: return {1.6e-2, 1e-5};
    default: return {1e-10, 1e-13};
  }
}

inline Tol reduce_tol(DType t) {
  switch (t) {
    case DType::F32: return {1e-4, 1e-5};
    case DType::F16: return {4e-3, 2e-3};
    case DType::BF16: return {2e-2, 1e-2};
    default: return {1e-10, 1e-12};
  }
}

inline Tol exact() { return {0, 0}; }

inline Tensor gpu(const Tensor& t) { return t.to(kGpu); }

// Random normal values rounded to dt, made on the CPU (the same bits go to both devices).
inline Tensor rnd(Shape s, DType dt, double scale = 1.0, double shift = 0.0) {
  Tensor t = randn(std::move(s), {.dtype = DType::F64});
  return add(mul(t, scale), shift).to(dt);
}

// Positive values in [lo, lo + span) rounded to dt.
inline Tensor positive(Shape s, DType dt, double lo = 0.1, double span = 3.0) {
  return add(mul(rand(std::move(s), {.dtype = DType::F64}), span), lo).to(dt);
}

// Small integers in [-3, 3] (many ties, exactly representable in every dtype).
inline Tensor ints(Shape s, DType dt, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(-3, 3);
  std::vector<double> v(static_cast<size_t>(s.numel()));
  for (double& x : v) x = d(rng);
  return from_vector(v, std::move(s), {.dtype = dt});
}

inline std::string describe(const char* what, DType dt, const Shape& s) {
  std::ostringstream os;
  os << what << " dtype=" << dt << " shape=" << s;
  return os.str();
}

// Compares a CPU result with a GPU result element by element.
inline void check_close(const Tensor& cpu, const Tensor& cuda, Tol tol, const std::string& what) {
  INFO(what);
  REQUIRE(cpu.device().is_cpu());
  REQUIRE(cuda.device() == kGpu);
  REQUIRE(cpu.shape() == cuda.shape());
  REQUIRE(cpu.dtype() == cuda.dtype());
  const std::vector<double> a = cpu.to_vector<double>();
  const std::vector<double> b = cuda.to_vector<double>();
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < a.size(); ++i) {
    const bool same = (std::isnan(a[i]) && std::isnan(b[i])) || a[i] == b[i] ||
                      std::fabs(a[i] - b[i]) <= tol.atol + tol.rtol * std::fabs(a[i]);
    if (!same) {
      if (first < 0) first = static_cast<int64_t>(i);
      ++bad;
    }
  }
  // (an INFO inside an if would end with its block, before the CHECK it should explain)
  if (bad) UNSCOPED_INFO("first mismatch at " << first << ": cpu " << a[size_t(first)] << " gpu " << b[size_t(first)]);
  CHECK(bad == 0);
}

// An FP8 Tensor Core (Hopper) multiplies FP8 values exactly but accumulates in a register that keeps about
// 14 mantissa bits between promotions to F32 (DeepSeek-V3's measurement; cuBLASLt without FAST_ACCUM
// promotes, but how often is not documented), so a sum of K products can be off by up to about
// K * 2^-14 of the sum of their magnitudes. The native FP8 GEMM is held to that bound on a GPU; the
// emulated cuBLASLt sums in F32 in k order and keeps its exact checks.
inline constexpr double kFp8AccumUnit = 1.0 / 16384.0;  // 2^-14

// |gpu - cpu| <= K * 2^-14 * magnitude + 1e-6 |cpu| per element, magnitude being the sum of |products| that
// made each element (for C = A B^T: |A| |B|^T, computed on the CPU).
inline void check_fp8_accumulation(const Tensor& cpu, const Tensor& cuda, const Tensor& magnitude, int64_t k,
                                   const std::string& what) {
  INFO(what << " (K = " << k << ", FP8 Tensor Core accumulation bound " << double(k) * kFp8AccumUnit << ")");
  REQUIRE(cpu.shape() == cuda.shape());
  REQUIRE(cpu.shape() == magnitude.shape());
  const std::vector<double> a = cpu.to_vector<double>(), b = cuda.to(Device::cpu()).to_vector<double>(),
                            mag = magnitude.to_vector<double>();
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < a.size(); ++i) {
    const double bound = double(k) * kFp8AccumUnit * mag[i] + 1e-6 * std::fabs(a[i]);
    if (!(std::fabs(a[i] - b[i]) <= bound) && bad++ == 0) first = static_cast<int64_t>(i);
  }
  if (bad) UNSCOPED_INFO("first outside the bound at " << first << ": cpu " << a[size_t(first)] << " gpu " << b[size_t(first)]
                                                        << ", magnitude " << mag[size_t(first)]);
  CHECK(bad == 0);
}

// ||gpu - cpu|| / ||cpu|| for a GEMM-like result (docs/ARCHITECTURE.md, "GPU tolerances").
inline void check_rel_norm(const Tensor& cpu, const Tensor& cuda, double bound, const std::string& what) {
  INFO(what);
  REQUIRE(cpu.shape() == cuda.shape());
  const std::vector<double> a = cpu.to_vector<double>();
  const std::vector<double> b = cuda.to_vector<double>();
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += a[i] * a[i];
  }
  const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  INFO("relative error " << rel << " bound " << bound);
  CHECK(rel <= bound);
}

inline double gemm_bound(DType t) { return test::dtype_tolerance(t); }

}  // namespace hg::gpu_test
