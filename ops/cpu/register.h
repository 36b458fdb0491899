#pragma once
// Every CPU kernel registration in one list, the counterpart of cuda/register.cpp's: a dispatch table
// fills its CPU slots from here when it is first used (docs/ARCHITECTURE.md, "Dispatch and registration").
#include "ops/kernels/conv.h"
#include "ops/kernels/dropout.h"
#include "ops/kernels/elementwise.h"
#include "ops/kernels/embedding.h"
#include "ops/kernels/fp8.h"
#include "ops/kernels/gemm.h"
#include "ops/kernels/loss.h"
#include "ops/kernels/norm.h"
#include "ops/kernels/optim.h"
#include "ops/kernels/pool.h"
#include "ops/kernels/reduce.h"
#include "ops/kernels/rounding.h"
#include "ops/kernels/scaler.h"

namespace hg::cpu {

// One function per table: `static DispatchTable<Fn> t{"name", cpu::register_x}` calls it when the table
// is first used, and it sets the CPU's slots (set_floating: one instantiation per floating dtype).
// ops/cpu/elementwise.cpp (and the casts and strided copies the "any"-dtype tables hold, slot F32)
void register_elementwise(DispatchTable<EwKernel>& t);
void register_cast(DispatchTable<CastKernel>& t);
void register_copy(DispatchTable<CopyKernel>& t);
// ops/cpu/gemm.cpp
void register_gemm(DispatchTable<GemmKernel>& t);
// ops/cpu/reduce.cpp
void register_reduce(DispatchTable<ReduceKernel>& t);
void register_softmax(DispatchTable<SoftmaxKernel>& t);
void register_softmax_backward(DispatchTable<SoftmaxBackwardKernel>& t);
// ops/cpu/conv.cpp
void register_conv_forward(DispatchTable<ConvKernel>& t);
void register_conv_backward_data(DispatchTable<ConvKernel>& t);
void register_conv_backward_weight(DispatchTable<ConvKernel>& t);
// ops/cpu/pool.cpp
void register_pool_forward(DispatchTable<PoolKernel>& t);
void register_pool_backward(DispatchTable<PoolKernel>& t);
// ops/cpu/norm.cpp
void register_batch_norm_forward(DispatchTable<BatchNormKernel>& t);
void register_batch_norm_backward(DispatchTable<BatchNormKernel>& t);
void register_layer_norm_forward(DispatchTable<LayerNormKernel>& t);
void register_layer_norm_backward(DispatchTable<LayerNormKernel>& t);
// ops/cpu/loss.cpp
void register_cross_entropy(DispatchTable<CrossEntropyKernel>& t);
void register_cross_entropy_backward(DispatchTable<CrossEntropyKernel>& t);
// ops/cpu/dropout.cpp
void register_dropout(DispatchTable<DropoutKernel>& t);
// ops/cpu/embedding.cpp
void register_embedding(DispatchTable<EmbeddingKernel>& t);
void register_embedding_backward(DispatchTable<EmbeddingKernel>& t);
// ops/cpu/fp8.cpp
void register_fp8_quantize(DispatchTable<Fp8QuantizeKernel>& t);
void register_fp8_dequantize(DispatchTable<Fp8DequantizeKernel>& t);
void register_fp8_scale(DispatchTable<Fp8ScaleKernel>& t);
void register_mx_quantize(DispatchTable<MxQuantizeKernel>& t);
void register_mx_dequantize(DispatchTable<MxDequantizeKernel>& t);
// ops/cpu/rounding.cpp
void register_stochastic_round(DispatchTable<StochasticRoundKernel>& t);
// ops/cpu/optim.cpp (the tables' accessors are optim/optimizer.cpp's)
void register_sgd(DispatchTable<optim::SgdKernel>& t);
void register_adam(DispatchTable<optim::AdamKernel>& t);
void register_grad_norm(DispatchTable<optim::GradNormKernel>& t);
void register_clip_coef(DispatchTable<optim::ClipCoefKernel>& t);
void register_grad_transform(DispatchTable<optim::GradTransformKernel>& t);
// ops/cpu/scaler.cpp (the tables' accessors are amp/grad_scaler.cpp's)
void register_unscale(DispatchTable<amp::UnscaleKernel>& t);
void register_scaler_state(DispatchTable<amp::ScalerStateKernel>& t);

}  // namespace hg::cpu
