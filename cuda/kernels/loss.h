#pragma once
// Host launchers of the loss-family CUDA kernels, with the signatures of the tables in ops/loss.h,
// ops/dropout.h and ops/embedding.h; register_loss() puts them into those tables. Every launcher
// enqueues on the device's stream and checks the launch; none synchronises. Pure host declarations.
#include "ops/dropout.h"
#include "ops/embedding.h"
#include "ops/kernels/dropout.h"
#include "ops/kernels/embedding.h"
#include "ops/kernels/loss.h"
#include "ops/loss.h"

namespace hg::cuda {

// loss.cu; T is float, f16, bf16 or double.
template <class T> void cross_entropy_forward(const CrossEntropyArgs& a);
template <class T> void cross_entropy_backward(const CrossEntropyArgs& a);
template <class T> void dropout_forward(const DropoutArgs& a);
// embedding.cu
template <class T> void embedding_forward(const EmbeddingArgs& a);
template <class T> void embedding_backward(const EmbeddingArgs& a);

// Fills the cross-entropy, dropout and embedding tables for DeviceType::CUDA (called by
// register_backend() in cuda/register.cpp).
void register_loss();

}  // namespace hg::cuda
