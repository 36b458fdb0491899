#pragma once
// CPU convolution kernels (cpu/conv.cpp), with the contract of ConvArgs in ops/kernels/conv.h.
// Engines: oneDNN convolution primitives for F32, and for BF16 where oneDNN has BF16 dot products;
// F16, and BF16 elsewhere, widened to F32 and run on the F32 engine; im2col + GEMM for F64 and for
// everything when built without oneDNN. The im2col path is also the reference the oneDNN path is
// tested against.
#include <string>

#include "ops/kernels/conv.h"

namespace hg::cpu {

// The engine the CPU kernels use for a dtype on this CPU, named like gemm_engine (cpu/gemm.h):
// "onednn:<isa>", "im2col", "widen:<conversion path>+<F32 engine>". oneDNN may still refuse one
// problem (a layout or dilation it has no kernel for), which then runs on im2col: decided once per
// problem, when its plan is made.
std::string conv_engine(DType dt);

// The im2col + GEMM kernels, any floating dtype (F16/BF16 widened to F32 and rounded once).
void conv2d_forward_im2col(const ConvArgs& a);
void conv2d_backward_data_im2col(const ConvArgs& a);
void conv2d_backward_weight_im2col(const ConvArgs& a);

}  // namespace hg::cpu
