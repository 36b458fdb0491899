// CPU dropout kernel: one Philox block of 4 elements at a time, the keep rule of ops/dropout_math.h
// (shared with the CUDA kernel, so a seed gives the same mask on every backend).
#include <algorithm>

#include "core/parallel.h"
#include "core/rng.h"
#include "cpu/blocks.h"
#include "cpu/register.h"
#include "ops/dropout_math.h"
#include "ops/kernels/dropout.h"

namespace hg::cpu {
namespace {

constexpr int64_t kParallel = 32768;  // elements below which one thread is faster

template <class T>
void dropout_kernel(const DropoutArgs& a) {
  using C = compute_t<T>;
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
  const C scale = static_cast<C>(a.scale);
  const uint64_t seed = a.rng.seed_now(), offset = a.rng.offset_now();
  parallel_for(num_pieces(a.n, 4), a.n > kParallel, [&](int64_t b) {
    Philox4x32::for_block(seed, offset, b, a.n, [&](int64_t i, uint32_t w) {
      y[i] = store<T>(dropoutfn::dropout_apply(load(x[i]), w, a.threshold, scale));
    });
  });
}

}  // namespace

// This family's CPU kernels into their tables (cpu/register.cpp's register_kernels calls it).
void register_dropout() {
  dropout_kernels().set_floating(DeviceType::CPU, []<class T>(type_tag<T>) { return &dropout_kernel<T>; });
}

}  // namespace hg::cpu
