// CPU kernels of the optimizer updates and of gradient clipping (ops/kernels/optim.h), put into their
// tables by register_optim() at the end (cpu/register.h): one update driver runs every rule of
// ops/kernels/optim_rules.h.
// One fused pass per parameter, in blocks of kBlock elements: F16/BF16 blocks are widened to F32 with
// the bulk converters and rounded back once (or read from and written to the F32 master copy); F32
// and F64 buffers are updated in place. OpenMP only above kParallel elements: below that a parallel
// region costs more than the whole update, and tiny models step many small parameters.
#include <algorithm>
#include <span>
#include <cmath>
#include <type_traits>
#include <vector>

#include "core/parallel.h"
#include "cpu/blocks.h"
#include "cpu/register.h"
#include "ops/kernels/optim.h"
#include "ops/kernels/optim_rules.h"

namespace hg::optim {
namespace {

constexpr int64_t kBlock = 512;
constexpr int64_t kParallel = 65536;
constexpr int64_t kNormChunk = 65536;  // the norm's partial sums: fixed pieces, so any thread count agrees

// body(begin, count) over [0, n) in blocks of kBlock. Small n stays out of OpenMP altogether: even a
// parallel region with a false if() clause costs about 0.3 us, more than updating a bias.
template <class Body>
void for_blocks(int64_t n, const Body& body) {
  parallel_for(num_pieces(n, kBlock), n > kParallel, [&](int64_t b) { body(b * kBlock, std::min(kBlock, n - b * kBlock)); });
}

// The compute-type values of x[i, i+k): x itself when T is C, else widened into tmp.
template <class T, class C = compute_t<T>>
const C* load_block(const T* x, int64_t i, int64_t k, C* tmp) {
  if constexpr (std::is_same_v<T, C>) {
    return x + i;
  } else {
    cpu::widen(x + i, tmp, k);
    return tmp;
  }
}

// The parameter values to update: the parameter itself (F32, F64), its master copy, or a widened copy.
template <class T, class C = compute_t<T>>
C* param_block(T* p, float* master, int64_t i, int64_t k, C* tmp) {
  if constexpr (std::is_same_v<T, C>) {
    return p + i;
  } else {
    if (master) return master + i;
    cpu::widen(p + i, tmp, k);
    return tmp;
  }
}

// Rounds the updated values back into a low-precision parameter (no-op when they were updated in place): to
// nearest from a master (or without one, by default), else as the store says (ops/kernels/optim.h). Blocks
// start at multiples of kBlock, so element e's Philox block e / 4 lies inside one block.
template <class T, class C>
void store_param(T* p, int64_t i, int64_t k, const C* values, const float* master, const ParamStore& st) {
  if constexpr (!std::is_same_v<T, C>) {
    if (master != nullptr || st.rounding == ParamRounding::Nearest) return cpu::narrow(values, p + i, k);
    if (st.rounding == ParamRounding::Kahan) {
      for (int64_t j = 0; j < k; ++j) store_param_rounded(p, i + j, values[j], st, 0u);
      return;
    }
    for (int64_t b = i / 4; b < num_pieces(i + k, 4); ++b)
      Philox4x32::for_block(st.rng.seed_now(), st.rng.offset_now(), b, i + k,
                            [&](int64_t e, uint32_t w) { store_param_rounded(p, e, values[e - i], st, w); });
  }
}

// ---- the update driver: any rule of ops/kernels/optim_rules.h -------------------------------------

// The rule's element update over one block, its form V fixed: one loop body without branches on options.
// Not inlined: each form's loop starts a function of its own (aligned), which measured up to 25% faster on
// in-cache parameters (benchmarks/bench_optim.cpp, the MLP's F32 SGD) than the same loop inlined mid-function.
// (This file builds with -fno-math-errno, CMakeLists.txt: a sqrtf that may set errno keeps a loop scalar;
// the vector square root rounds exactly as sqrtf does.)
template <int V, class Update, class C>
[[gnu::noinline]] void update_block(const Update& fn, C* __restrict p, const C* __restrict g, C* const* buf, int64_t k) {
  const Update f = fn;  // a local copy: its fields are loop invariants
  C* b[kMaxUpdateBuffers];
  for (int j = 0; j < kMaxUpdateBuffers; ++j) b[j] = buf[j];
  for (int64_t i = 0; i < k; ++i) f.template apply<V>(p[i], g[i], b, i);
}

template <class Rule, class T>
void update_one(const UpdateArgs& a) {
  using C = compute_t<T>;
  check_update_args<Rule>(dtype_v<T>, a);
  if (amp_skips(a.amp)) return;  // the grad scaler's device path: an inf/NaN gradient skips the step
  const typename Rule::template Update<C> f(step_inputs(a));
  auto* p = static_cast<T*>(a.param);
  const auto* g = static_cast<const T*>(a.grad);
  with_variant<Rule::kVariants>(f.variant(), [&](auto form) {
    for_blocks(a.n, [&](int64_t i, int64_t k) {
      alignas(64) C pt[kBlock], gt[kBlock];
      C* buf[kMaxUpdateBuffers] = {};
      for (int j = 0; j < a.num_buffers; ++j) buf[j] = static_cast<C*>(a.buffers[j]) + i;
      C* pc = param_block(p, a.master, i, k, pt);
      update_block<decltype(form)::value>(f, pc, load_block(g, i, k, gt), buf, k);
      store_param(p, i, k, pc, a.master, a.store);
    });
  });
  amp_count_step(a.amp);
}

// The parameters one after another: each update is parallel on its own where it is large enough.
template <class Rule, class T>
void update_cpu(std::span<const UpdateArgs> batch) {
  for (const UpdateArgs& a : batch) update_one<Rule, T>(a);
}

template <class Rule>
void register_update() {
  update_kernels<Rule>().set_floating(DeviceType::CPU, []<class T>(type_tag<T>) { return &update_cpu<Rule, T>; });
}
template <class... Rules>
void register_updates(RuleList<Rules...>) {
  (register_update<Rules>(), ...);
}

// ---- clipping -------------------------------------------------------------------------------------

constexpr int64_t kLanes = 8;  // independent partial results: a single running sum is a serial chain

// lane[l] = combine(lane[l], x[j]) for j = l mod kLanes.
template <class C, class Combine>
void accumulate(const C* x, int64_t k, double* lane, const Combine& combine) {
  int64_t j = 0;
  for (; j + kLanes <= k; j += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) lane[l] = combine(lane[l], static_cast<double>(x[j + l]));
  for (int64_t l = 0; j < k; ++j, ++l) lane[l] = combine(lane[l], static_cast<double>(x[j]));
}

// Sum of |g|^p (or max |g|) over one chunk, in double, in an order fixed by n alone.
template <class T>
double chunk_norm(const T* g, int64_t n, double norm_type) {
  using C = compute_t<T>;
  double lane[kLanes] = {};
  const bool inf = std::isinf(norm_type);
  auto run = [&](const auto& combine) {
    alignas(64) C tmp[kBlock];
    for (int64_t i = 0; i < n; i += kBlock) {
      const int64_t k = std::min(kBlock, n - i);
      accumulate(load_block(g, i, k, tmp), k, lane, combine);
    }
    for (int64_t w = kLanes / 2; w > 0; w /= 2)
      for (int64_t l = 0; l < w; ++l) lane[l] = inf ? nan_max(lane[l], lane[l + w]) : lane[l] + lane[l + w];
  };
  // NormTerm with a constant p folds to |g|^2 or |g|, which vectorise
  if (inf) run([](double a, double x) { return nan_max(a, std::fabs(x)); });
  else if (norm_type == 2.0) run([](double a, double x) { return a + NormTerm{2.0}(x); });
  else if (norm_type == 1.0) run([](double a, double x) { return a + NormTerm{1.0}(x); });
  else run([term = NormTerm{norm_type}](double a, double x) { return a + term(x); });
  return lane[0];
}

template <class T>
void grad_norm_one(const GradNormArgs& a) {
  const auto* g = static_cast<const T*>(a.grad);
  const bool inf = std::isinf(a.norm_type);
  const int64_t chunks = (a.n + kNormChunk - 1) / kNormChunk;
  const double w = norm_weight(a);
  double t = 0;
  if (chunks <= 1) {
    t = chunk_norm(g, a.n, a.norm_type);
  } else {
    std::vector<double> part(static_cast<size_t>(chunks));
    parallel_for(chunks, true, [&](int64_t c) {
      part[static_cast<size_t>(c)] =
          chunk_norm(g + c * kNormChunk, std::min(kNormChunk, a.n - c * kNormChunk), a.norm_type);
    });
    for (double x : part) t = inf ? nan_max(t, x) : t + x;
  }
  if (w != 1.0) t *= w;
  *a.result = inf ? nan_max(*a.result, t) : *a.result + t;
}

template <class T>
void grad_norm_cpu(std::span<const GradNormArgs> batch) {
  for (const GradNormArgs& a : batch) grad_norm_one<T>(a);
}

template <class T>
void grad_transform_one(const GradTransformArgs& a) {
  using C = compute_t<T>;
  const GradTransformFn<C> f{a.op, static_cast<C>(a.device_value != nullptr ? *a.device_value : a.value)};
  auto* g = static_cast<T*>(a.grad);
  for_blocks(a.n, [&](int64_t i, int64_t k) {
    alignas(64) C tmp[kBlock];
    C* x = param_block(g, nullptr, i, k, tmp);
    for (int64_t j = 0; j < k; ++j) x[j] = f(x[j]);
    store_param(g, i, k, x, nullptr, ParamStore{});
  });
}

template <class T>
void grad_transform_cpu(std::span<const GradTransformArgs> batch) {
  for (const GradTransformArgs& a : batch) grad_transform_one<T>(a);
}

}  // namespace

}  // namespace hg::optim

namespace hg::cpu {

// This family's CPU kernels into their tables (cpu/register.cpp's register_kernels calls it).
void register_optim() {
  optim::register_updates(optim::UpdateRules{});
  optim::grad_norm_kernels().set_floating(DeviceType::CPU, []<class T>(type_tag<T>) { return &optim::grad_norm_cpu<T>; });
  optim::clip_coef_kernels().set(DeviceType::CPU, DType::F64, &optim::clip_coef);
  optim::grad_transform_kernels().set_floating(DeviceType::CPU, []<class T>(type_tag<T>) { return &optim::grad_transform_cpu<T>; });
}

}  // namespace hg::cpu
