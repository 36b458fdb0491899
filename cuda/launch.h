#pragma once
// The one way halfgrad launches a kernel: launch(kernel, grid, block, shared_bytes, stream, args...)
// is kernel<<<grid, block, shared_bytes, stream>>>(args...) under nvcc, and on the emulated device
// (HG_CUDA=EMULATE, cuda/emulator/) the same kernel run by the executor; either way the launch is
// checked (a bad configuration throws hg::Error here, a fault inside the kernel surfaces at the next
// synchronising call). The arguments are converted to the kernel's parameter types at the call, as
// <<<>>> converts them.
#include <cuda_runtime.h>

#include <utility>

#include "cuda/check.h"
#include "cuda/counters.h"
#if defined(HG_CUDA_EMULATE)
#include "cuda/emulator/runtime.h"
#endif

namespace hg::cuda {

template <class... P, class... A>
void launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream, A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "launch: the kernel takes a different number of arguments");
  detail::count_kernel();
#if defined(HG_CUDA_EMULATE)
  HG_CUDA_CHECK(emu::check_launch(grid, block, shared_bytes));
  HG_CUDA_CHECK(emu::enqueue(stream, "kernel", [kernel, grid, block, ... a = static_cast<P>(std::forward<A>(args))] {
    emu::run_grid(grid, block, [&] { kernel(a...); });
  }));
#else
  kernel<<<grid, block, shared_bytes, stream>>>(std::forward<A>(args)...);
#endif
  HG_CUDA_LAUNCH_CHECK();
}

}  // namespace hg::cuda
