#pragma once
// The kernel contract of ops/embedding.h: argument structs and dispatch tables (docs/ARCHITECTURE.md,
// "Dispatch and registration"). Implemented by cpu/embedding.cpp, cuda/kernels/embedding.cu.
#include "core/dispatch_table.h"
#include "ops/embedding.h"

namespace hg {

// forward:  y (n, dim) (T) = weight (num, dim) (T) rows indices[0..n).
// backward: grad (num, dim) (compute type: float, double for F64) = 0, then grad[indices[i]] += dy[i]
//           (T) for every i whose index is not padding_idx. The kernel writes every element of grad.
// An index outside [0, num) throws on the CPU; on a GPU (no throw from a kernel without a host sync)
// its output row is NaN and it adds no gradient.
struct EmbeddingArgs {
  int64_t n = 0, num = 0, dim = 0;
  int64_t padding_idx = -1;
  const int64_t* indices = nullptr;
  const void* weight = nullptr;
  void* y = nullptr;
  const void* dy = nullptr;
  void* grad = nullptr;
};
using EmbeddingKernel = void (*)(const EmbeddingArgs& a);
HG_KERNEL_TABLE(EmbeddingKernel, embedding_kernels, "embedding");
HG_KERNEL_TABLE(EmbeddingKernel, embedding_backward_kernels, "embedding backward");

}  // namespace hg
