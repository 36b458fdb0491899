#pragma once
// Every CPU kernel registration in one list, the counterpart of cuda/register.cpp's: a dispatch table
// fills its CPU slots from here when it is first used (docs/ARCHITECTURE.md, "Dispatch and registration").
#include "ops/kernels/conv.h"
#include "ops/kernels/dropout.h"
#include "ops/kernels/elementwise.h"
#include "ops/kernels/embedding.h"
#include "ops/kernels/loss.h"
#include "ops/kernels/norm.h"
#include "ops/kernels/pool.h"
#include "ops/kernels/reduce.h"

namespace hg::cpu {

// ops/cpu/elementwise.cpp (and the casts and strided copies the "any"-dtype tables hold)
void register_elementwise(DispatchTable<EwKernel>& t);
void cast(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n);
void strided_copy(const StridedCopy& c);
// ops/cpu/reduce.cpp
void register_reduce(DispatchTable<ReduceKernel>& t);
void register_softmax(DispatchTable<SoftmaxKernel>& fwd, DispatchTable<SoftmaxBackwardKernel>& bwd);
// ops/cpu/conv.cpp
void register_conv(DispatchTable<ConvKernel>& fwd, DispatchTable<ConvKernel>& bwd_data,
                   DispatchTable<ConvKernel>& bwd_weight);
// ops/cpu/pool.cpp
void register_pool(DispatchTable<PoolKernel>& fwd, DispatchTable<PoolKernel>& bwd);
// ops/cpu/norm.cpp
void register_norm(DispatchTable<BatchNormKernel>& bn_fwd, DispatchTable<BatchNormKernel>& bn_bwd,
                   DispatchTable<LayerNormKernel>& ln_fwd, DispatchTable<LayerNormKernel>& ln_bwd);
// ops/cpu/loss.cpp
void register_cross_entropy(DispatchTable<CrossEntropyKernel>& fwd, DispatchTable<CrossEntropyKernel>& bwd);
// ops/cpu/dropout.cpp
void register_dropout(DispatchTable<DropoutKernel>& t);
// ops/cpu/embedding.cpp
void register_embedding(DispatchTable<EmbeddingKernel>& fwd, DispatchTable<EmbeddingKernel>& bwd);

}  // namespace hg::cpu
