#pragma once
// Embedding lookup, as torch.nn.functional.embedding(indices, weight): indices is I64 of any shape
// with values in [0, num_embeddings); weight is (num_embeddings, dim); y is indices.shape + (dim).
// The gradient scatter-adds rows into weight's shape (repeated indices accumulate).
#include "core/tensor.h"

namespace hg {

struct EmbeddingFuncOptions {
  int64_t padding_idx = -1;  // >= 0: that row gets no gradient (torch's padding_idx)
};
Tensor embedding(const Tensor& indices, const Tensor& weight, EmbeddingFuncOptions o = {});

// ---- kernel interface (ops/cpu/embedding.cpp, cuda/kernels/embedding.cu) -------------------------
template <class Fn> class DispatchTable;  // ops/dispatch.h

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
DispatchTable<EmbeddingKernel>& embedding_kernels();
DispatchTable<EmbeddingKernel>& embedding_backward_kernels();
namespace cpu {
void register_embedding(DispatchTable<EmbeddingKernel>& fwd, DispatchTable<EmbeddingKernel>& bwd);
}

}  // namespace hg
