#pragma once
// CPU convolution kernels (ops/cpu/conv.cpp), with the contract of ConvArgs in ops/conv.h.
// Engines: oneDNN convolution primitives for F32 and BF16; F16 widened to F32 (no f16 convolution
// exists on this CPU) and run on the F32 engine; im2col + GEMM for F64 and for everything when
// built without oneDNN. The im2col path is also the reference the oneDNN path is tested against.
#include "ops/conv.h"

namespace hg::cpu {

void register_conv(DispatchTable<ConvKernel>& fwd, DispatchTable<ConvKernel>& bwd_data,
                   DispatchTable<ConvKernel>& bwd_weight);

// Which engine the CPU kernels use for a dtype: "onednn", "f16c+onednn", "im2col", "f16c+im2col".
const char* conv_engine(DType dt);

// The im2col + GEMM kernels, any floating dtype (F16/BF16 widened to F32 and rounded once).
void conv2d_forward_im2col(const ConvArgs& a);
void conv2d_backward_data_im2col(const ConvArgs& a);
void conv2d_backward_weight_im2col(const ConvArgs& a);

}  // namespace hg::cpu
