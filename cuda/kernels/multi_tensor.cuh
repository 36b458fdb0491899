#pragma once
// Several tensors in one launch, as torch's foreach/fused kernels and Apex's multi_tensor_apply do: the
// tensors' arguments travel in the kernel's parameter space (kept under the classic 4 KiB), and tensor t
// owns blocks [first_block[t], first_block[t + 1]) of the grid, as many as grid_for gives it alone, which
// stride over its elements. A model's optimizer step or unscale_ is then one launch instead of one per
// parameter (cuda/counters.h counts them).
#include <cstdint>
#include <span>

#include "cuda/context.h"
#include "cuda/launch.h"

namespace hg::cuda {

template <int K>
struct BlockPartition {
  int count = 0;
  unsigned first_block[K + 1] = {};

  // Host: appends a tensor of n elements (an empty one gets a block too, which finds no element).
  void add(const DeviceContext& c, int64_t n, int threads) {
    first_block[count + 1] = first_block[count] + grid_for(c, n, threads);
    ++count;
  }
  bool full() const { return count == K; }
  unsigned blocks() const { return first_block[count]; }

  // Device: the tensor that `block` works on, and which of its blocks it is.
  __device__ int tensor_of(unsigned block) const {
    int t = 0;
    while (t + 1 < count && block >= first_block[t + 1]) ++t;
    return t;
  }
  __device__ unsigned block_in(int t, unsigned block) const { return block - first_block[t]; }
  __device__ unsigned blocks_of(int t) const { return first_block[t + 1] - first_block[t]; }
};

struct NoExtra {};

// A batch as a kernel argument: each tensor's own argument struct (with its element count `n`), K per
// launch, and what the launch shares (Extra: the optimizer update's ticket).
template <int K, class Args, class Extra = NoExtra>
struct ArgsLaunch {
  BlockPartition<K> part;
  Extra extra = {};
  Args args[K];
};

// kernel(ArgsLaunch<K, Args, Extra>) over the batch, in launches of up to K tensors of `threads` threads a
// block (an empty tensor gets a block too: the optimizer update may still count its step there).
template <int K, class Args, class Extra = NoExtra, class Kernel>
void launch_batches(DeviceContext& ctx, std::span<const Args> batch, Kernel kernel, int threads, Extra extra = {}) {
  static_assert(sizeof(ArgsLaunch<K, Args, Extra>) <= 4096, "a launch's arguments must fit the classic 4 KiB");
  for (size_t begin = 0; begin < batch.size(); begin += K) {
    ArgsLaunch<K, Args, Extra> L;
    L.extra = extra;
    for (size_t k = begin; k < batch.size() && !L.part.full(); ++k) {
      L.args[L.part.count] = batch[k];
      L.part.add(ctx, batch[k].n, threads);
    }
    launch(kernel, L.part.blocks(), threads, 0, ctx.stream, L);
  }
}

}  // namespace hg::cuda
