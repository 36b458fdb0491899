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

}  // namespace hg
