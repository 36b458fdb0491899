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

// embedding's transpose: out (num, dim) = 0, then out[indices[i]] += src[i] for every row i of src (n, dim)
// (repeated indices accumulate, in F32; F64 for F64), in src's dtype. Differentiable in src: its gradient is the
// rows of dy at the indices (an embedding lookup). The row adds of index_add and scatter_add (ops/shape.h).
// Indices must be in [0, num) (the callers check).
Tensor index_add_rows(const Tensor& indices, const Tensor& src, int64_t num);

}  // namespace hg
