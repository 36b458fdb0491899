#pragma once
// The case list of hg_backend_ops (tests/backend_ops/main.cpp): what a case is, how its inputs are made,
// and the families kept in their own files (training_cases.cpp, fp8_cases.cpp) that add to the list.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "halfgrad.h"

namespace hg::backend_ops {


inline const Device kCpu = Device::cpu();
inline const std::vector<DType> kFloating = {DType::F32, DType::F16, DType::BF16, DType::F64};

// One element past what one wave of the grid covers (grid_for caps a grid at 32 blocks per SM, 132 SMs
// on the H200 the emulator models, 256 threads each): every grid-stride loop goes round twice.
constexpr int64_t kLarge = 132 * 32 * 256 + 4099;

// How a result is compared.
enum class Check {
  Exact,           // bit for bit: copies, casts, comparisons, indices, dropout's mask
  Elementwise,     // one rounding of the same F32 math: |gpu - cpu| <= atol + rtol |cpu|
  Transcendental,  // as Elementwise, with room for CUDA's exp/log/tanh/erf against glibc's
  Reduction,       // sums in another order: looser per element
  Gemm,            // ||gpu - cpu|| / ||cpu|| over the whole result
  Fp8Gemm,         // as Gemm, for GEMMs that may run on FP8 Tensor Cores (tests/gpu/compare.h, kFp8AccumUnit)
};

struct Tol {
  double rtol, atol;
};

inline Tol tolerance(Check c, DType t) {
  const int k = t == DType::F32 ? 0 : t == DType::F16 ? 1 : t == DType::BF16 ? 2 : 3;
  switch (c) {
    case Check::Exact: return {0, 0};
    // (one rounding of the same math, but nvcc contracts a*b+c into FMAs, which the host build does not)
    case Check::Elementwise: return std::array<Tol, 4>{{{1e-5, 1e-6}, {2e-3, 1e-5}, {1.6e-2, 1e-5}, {1e-10, 1e-13}}}[k];
    // what the H200 passed in tests/gpu/test_gpu_ops.cpp for exp, log, tanh, erf, pow against glibc
    case Check::Transcendental:
      return std::array<Tol, 4>{{{1e-5, 1e-6}, {2e-3, 1e-5}, {1.6e-2, 1e-5}, {1e-10, 1e-13}}}[k];
    case Check::Reduction: return std::array<Tol, 4>{{{1e-4, 1e-5}, {4e-3, 2e-3}, {2e-2, 1e-2}, {1e-10, 1e-12}}}[k];
    case Check::Gemm: return std::array<Tol, 4>{{{1e-5, 0}, {2e-3, 0}, {1e-2, 0}, {1e-12, 0}}}[k];
#if defined(HG_CUDA_EMULATE)
    // the emulated cuBLASLt sums the exact products in F32, as the CPU's decode route does
    case Check::Fp8Gemm: return tolerance(Check::Gemm, t);
#else
    // an FP8 Tensor Core's accumulator keeps about 14 mantissa bits (tests/gpu/compare.h): the cases' K <= 70
    // give at most 70 * 2^-14 = 4.3e-3 of the sum of |products| per element, far less in norm over random
    // signs; 1e-2 leaves room for BF16 outputs' own rounding
    case Check::Fp8Gemm: return {std::max(1e-2, tolerance(Check::Gemm, t).rtol), 0};
#endif
  }
  return {0, 0};
}

// One shape variant of an op in one dtype: its inputs, made on the CPU, and which to differentiate.
struct Case {
  std::string variant;
  std::vector<Tensor> in;
  std::vector<bool> grad;
  std::vector<int64_t> dims = {};  // for the ops that take dims (reductions, softmax); empty: every dim
  bool keepdim = false;
};

using Run = std::function<std::vector<Tensor>(const std::vector<Tensor>&, const Case&)>;

struct OpCase {
  std::string name;
  std::string tables;  // the CUDA dispatch tables it reaches (documentation for --list)
  Check check;
  std::function<std::vector<Case>(DType)> cases;
  Run run;  // the first output, when it requires grad, is the one backpropagated
  std::vector<DType> dtypes = kFloating;
  std::optional<Check> grad_check = {};  // for the input gradients, when not `check`
};

// ---- inputs: deterministic, made on the CPU from a generator seeded per case ---------------------
struct Maker {
  Generator gen;
  DType dt;
  Tensor normal(Shape s, double scale = 1.0) { return mul(randn(std::move(s), {.dtype = DType::F64}, &gen), scale).to(dt); }
  // values in [lo, lo + span): the domains of log, sqrt, rsqrt, pow and division
  Tensor positive(Shape s, double lo = 0.25, double span = 3.0) {
    return add(mul(rand(std::move(s), {.dtype = DType::F64}, &gen), span), lo).to(dt);
  }
  // small integers in [-3, 3]: ties for comparisons, max/min and where
  Tensor ints(Shape s) {
    const Tensor u = rand(std::move(s), {.dtype = DType::F64}, &gen);
    return sub(floor_(mul(u, 7.0)), 3.0).to(dt);
  }
  Tensor mask(Shape s) {  // 0 or 1
    std::vector<double> v = rand({s.numel()}, {.dtype = DType::F64}, &gen).to_vector<double>();
    for (double& e : v) e = e < 0.5 ? 0.0 : 1.0;
    return from_vector(v, std::move(s), {.dtype = dt});
  }
  Tensor classes(Shape s, int64_t n, int64_t ignore_every = 0) {
    std::vector<double> r = rand({s.numel()}, {.dtype = DType::F64}, &gen).to_vector<double>();
    std::vector<int64_t> v(r.size());
    for (size_t i = 0; i < v.size(); ++i) {
      v[i] = static_cast<int64_t>(r[i] * static_cast<double>(n)) % n;
      if (ignore_every > 0 && i % static_cast<size_t>(ignore_every) == 1) v[i] = -100;
    }
    return from_vector(v, std::move(s), {.dtype = DType::I64});
  }
  static Tensor floor_(const Tensor& x) {  // floor of non-negative F64 values, through the host
    std::vector<double> v = x.to_vector<double>();
    for (double& e : v) e = std::floor(e);
    return from_vector(v, x.shape(), {.dtype = DType::F64});
  }
};

inline uint64_t seed_of(const std::string& op, DType dt) {
  uint64_t h = 1469598103934665603ull;
  for (char c : op) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h ^ (static_cast<uint64_t>(dt) << 56);
}

inline std::vector<Tensor> one(Tensor t) { return {std::move(t)}; }

// The families in their own files: optimizer steps, clipping and the grad scaler; FP8, MX and stochastic rounding.
void add_training_cases(std::vector<OpCase>& ops);
void add_fp8_cases(std::vector<OpCase>& ops);

}  // namespace hg::backend_ops
