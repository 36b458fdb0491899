#pragma once
// Host launchers of the cross-entropy, dropout and embedding CUDA kernels, with the signatures of the
// tables in ops/kernels/loss.h, dropout.h and embedding.h, and the functions that register them. Every launcher
// enqueues on the device's stream and checks the launch; none synchronises. Pure host declarations.
#include "ops/kernels/dropout.h"
#include "ops/kernels/embedding.h"
#include "ops/kernels/loss.h"

namespace hg::cuda {

// loss.cu; T is float, f16, bf16 or double.
template <class T> void cross_entropy_forward(const CrossEntropyArgs& a);
template <class T> void cross_entropy_backward(const CrossEntropyArgs& a);
// dropout.cu
template <class T> void dropout_forward(const DropoutArgs& a);
// embedding.cu
template <class T> void embedding_forward(const EmbeddingArgs& a);
template <class T> void embedding_backward(const EmbeddingArgs& a);

}  // namespace hg::cuda
