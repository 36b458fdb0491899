// The grad scaler's CPU kernels (ops/kernels/scaler.h): unscale-and-check of one gradient, in blocks widened
// to the compute type (F16/BF16 rounded back once), in parallel above kParallel elements; and the scale's
// update on the host.
#include <algorithm>
#include <atomic>
#include <span>
#include <type_traits>

#include "core/parallel.h"
#include "cpu/blocks.h"
#include "cpu/register.h"
#include "ops/kernels/scaler.h"

namespace hg::cpu {
namespace {

using amp::UnscaleArgs;
using amp::UnscaleCheck;

constexpr int64_t kBlock = 512;
constexpr int64_t kParallel = 65536;  // below this a parallel region costs more than the pass

// One block [i, i + k): unscale (when a.write) and check; true when an element was inf/NaN.
template <class T>
bool unscale_block(const UnscaleArgs& a, const UnscaleCheck<compute_t<T>>& f, int64_t i, int64_t k) {
  using C = compute_t<T>;
  T* g = static_cast<T*>(a.grad) + i;
  alignas(64) C tmp[kBlock];
  C* x = tmp;
  if constexpr (std::is_same_v<T, C>) x = g;
  else widen(g, tmp, k);
  bool bad = false;
  if (a.write) {
    for (int64_t j = 0; j < k; ++j) x[j] = f(x[j], bad);
    if constexpr (!std::is_same_v<T, C>) narrow(tmp, g, k);
  } else {
    for (int64_t j = 0; j < k; ++j) (void)f(x[j], bad);
  }
  return bad;
}

// grad is (n) of dtype T, contiguous; *found_inf is host memory.
template <class T>
void unscale_one(const UnscaleArgs& a) {
  using C = compute_t<T>;
  const UnscaleCheck<C> f = amp::unscale_check<C>(a.write, a.inv_scale, a.inv_scale_at);
  std::atomic<bool> bad{false};
  auto ranges = [&](int64_t b0, int64_t b1) {
    bool mine = false;
    for (int64_t b = b0; b < b1; ++b) mine = unscale_block<T>(a, f, b * kBlock, std::min(kBlock, a.n - b * kBlock)) || mine;
    if (mine) bad.store(true, std::memory_order_relaxed);
  };
  parallel_ranges(num_pieces(a.n, kBlock), a.n > kParallel, ranges);
  if (bad.load(std::memory_order_relaxed)) *a.found_inf = 1.0f;
}

template <class T>
void unscale_cpu(std::span<const UnscaleArgs> batch) {
  for (const UnscaleArgs& a : batch) unscale_one<T>(a);
}

void state_op_cpu(const amp::ScalerStateArgs& a) { amp::scaler_state_op(a); }

}  // namespace

// This family's CPU kernels into their tables (cpu/register.cpp's register_kernels calls it).
void register_scaler() {
  amp::unscale_kernels().set_floating(DeviceType::CPU, []<class T>(type_tag<T>) { return &unscale_cpu<T>; });
  amp::scaler_state_kernels().set(DeviceType::CPU, DType::F32, &state_op_cpu);
}

}  // namespace hg::cpu
