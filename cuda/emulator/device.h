#pragma once
// What a kernel sees on the emulated device (HG_CUDA=EMULATE): the build force-includes this header
// into every cuda/kernels/*.cu, which g++ then compiles as C++. It gives CUDA's device vocabulary a
// host meaning: threadIdx & co. are the running fiber's coordinates, __shared__ variables are one per
// block (static thread_local: a block's fibers share their OS thread, and blocks on one OS thread run
// one after another), __syncthreads and the warp shuffles are barriers of the executor
// (cuda/emulator/executor.cpp), atomics are std::atomic_ref. The kernels' source is unchanged.
#include <cuda_runtime.h>

#include <atomic>
#include <bit>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace hg::emu {

struct ThreadCoords {
  uint3 thread_idx{};
  uint3 block_idx{};
  dim3 block_dim;
  dim3 grid_dim;
};

const ThreadCoords& current_coords();
void syncthreads();
// All lanes of the warp meet; returns the bits lane (lane ^ lane_mask) passed.
uint64_t shuffle_xor_bits(unsigned mask, uint64_t bits, int lane_mask, int width);

}  // namespace hg::emu

#if defined(HG_EMU_KERNEL_SOURCE)  // only in the kernels' translation units
#undef __shared__
#define __shared__ static thread_local
#define __launch_bounds__(...)
#define threadIdx (::hg::emu::current_coords().thread_idx)
#define blockIdx (::hg::emu::current_coords().block_idx)
#define blockDim (::hg::emu::current_coords().block_dim)
#define gridDim (::hg::emu::current_coords().grid_dim)

inline void __syncthreads() { ::hg::emu::syncthreads(); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }

template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "__shfl_xor_sync: 1 to 8 byte values");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = ::hg::emu::shuffle_xor_bits(mask, bits, lane_mask, width);
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}

template <class T>
T atomicAdd(T* address, T v) {
  return std::atomic_ref<T>(*address).fetch_add(v, std::memory_order_relaxed);
}

template <class T>
T atomicMax(T* address, T v) {
  std::atomic_ref<T> a(*address);
  T old = a.load(std::memory_order_relaxed);
  while (old < v && !a.compare_exchange_weak(old, v, std::memory_order_relaxed)) {
  }
  return old;
}

inline long long __double_as_longlong(double d) { return std::bit_cast<long long>(d); }
#endif
