#pragma once
// The emulated device's convolution (HG_CUDA=EMULATE): cuDNN cannot run without a GPU, so the emulated
// device's half of cuda/dnn (cudnn.cpp) hands each planned problem to this reference loop instead of
// cudnnBackendExecute. The loop is written from the definition (cross-correlation, NCHW x and y,
// KCRS w with C = c/groups), not from halfgrad's CPU convolution, and accumulates in F32 (F64 for F64).
#include <cuda_runtime.h>

#include "cuda/dnn.h"

namespace hg::emu {

// For key.dir: Fprop y = conv(x, w); Dgrad x = dgrad(y, w) (x is dx, y is dy); Wgrad w = wgrad(x, y)
// (w is dw, y is dy). Enqueued on s; returns the enqueue's status. tensor_core: the plan's engine is a
// tensor-core one, so with key.tf32 the F32 inputs are read rounded to TF32, as those engines compute.
cudaError_t reference_conv(const cuda::dnn::ConvPlanKey& key, bool tensor_core, const void* x, const void* w, const void* y,
                           cudaStream_t s);

}  // namespace hg::emu
