// embedding: check -> dispatch -> record backward (docs/ARCHITECTURE.md, "One op"). Forward gathers weight rows; backward
// scatter-adds dy rows into a (num, dim) gradient accumulated in F32 (F64 for F64) and cast once to
// weight's dtype, so repeated F16/BF16 indices do not round at every addition.
#include "ops/embedding.h"

#include "autograd/node.h"
#include "core/dispatch_table.h"
#include "ops/autocast/autocast.h"
#include "ops/elementwise.h"
#include "ops/kernels/embedding.h"
#include "ops/shape.h"

namespace hg {

namespace {


void check_embedding(const Tensor& indices, const Tensor& weight, const EmbeddingFuncOptions& o) {
  HG_CHECK(indices.dtype() == DType::I64, "embedding: indices have dtype ", indices.dtype(),
           "; indices must be I64 (convert them with .to(DType::I64))");
  check_floating("embedding", weight);
  check_same_device("embedding", indices, weight);
  HG_CHECK(weight.ndim() == 2, "embedding: weight has shape ", weight.shape(),
           "; it must be 2-d (num_embeddings, embedding_dim)");
  HG_CHECK(o.padding_idx >= -1 && o.padding_idx < weight.shape()[0], "embedding: padding_idx=", o.padding_idx,
           " is out of range for ", weight.shape()[0], " embeddings; pass -1 (none) or an index in [0, ",
           weight.shape()[0], ")");
}

}  // namespace

Tensor embedding(const Tensor& indices_in, const Tensor& weight_in, EmbeddingFuncOptions o) {
  // I64 indices are never eligible: only the weight can be cast
  if (amp::OpCast c{amp::OpId::Embedding, {indices_in, weight_in}}) return c.result(embedding(c[0], c[1], o));
  check_embedding(indices_in, weight_in, o);
  const Tensor indices = indices_in.contiguous(), weight = weight_in.contiguous();  // the kernels read dense rows
  std::vector<int64_t> out = indices.shape().dims();
  out.push_back(weight.shape()[1]);
  Tensor y = empty(Shape(out), {.dtype = weight.dtype(), .device = weight.device()});
  EmbeddingArgs a;
  a.n = indices.numel();
  a.num = weight.shape()[0];
  a.dim = weight.shape()[1];
  a.padding_idx = o.padding_idx;
  a.indices = static_cast<const int64_t*>(indices.data_ptr());
  a.weight = weight.data_ptr();
  a.y = y.data_ptr();
  if (a.n > 0) embedding_kernels().get(weight.device(), weight.dtype())(a);
  // the indices are an input too (never differentiated) so that changing them in place before backward is refused
  autograd::record(y, "embedding", {weight, indices}, [indices, a, dt = weight.dtype()](const Tensor& dy, const GradMask&) {
    if (autograd::create_graph_active()) {  // recorded: index_add_rows, whose own backward is this lookup
      const Tensor flat = reshape(indices, {a.n});
      Tensor rows = reshape(dy, {a.n, a.dim});
      if (a.padding_idx >= 0) rows = mul(rows, unsqueeze(ne(flat, static_cast<double>(a.padding_idx)), 1).to(dt));
      return std::vector<Tensor>{index_add_rows(flat, rows, a.num), Tensor()};
    }
    Tensor grad = empty({a.num, a.dim}, {.dtype = dt == DType::F64 ? DType::F64 : DType::F32, .device = dy.device()});
    EmbeddingArgs b = a;
    b.indices = static_cast<const int64_t*>(indices.data_ptr());
    b.weight = nullptr;
    b.y = nullptr;
    b.dy = dy.data_ptr();
    b.grad = grad.data_ptr();
    if (grad.numel() > 0) embedding_backward_kernels().get(dy.device(), dt)(b);
    return std::vector<Tensor>{grad.to(dt), Tensor()};
  }, autograd::Saves::only({1}), autograd::DoubleBackward::Yes);
  return y;
}

Tensor index_add_rows(const Tensor& indices_in, const Tensor& src_in, int64_t num) {
  check_floating("index_add", src_in);
  HG_CHECK(src_in.ndim() == 2 && indices_in.dtype() == DType::I64 && indices_in.numel() == src_in.shape()[0],
           "index_add: src must be (n, dim) with one I64 index per row, got src ", src_in.shape(), " and indices ",
           indices_in.shape(), " (", indices_in.dtype(), ")");
  check_same_device("index_add", indices_in, src_in);
  const Tensor indices = indices_in.contiguous(), src = src_in.contiguous();
  const DType dt = src.dtype();
  EmbeddingArgs b;
  b.n = indices.numel();
  b.num = num;
  b.dim = src.shape()[1];
  b.indices = static_cast<const int64_t*>(indices.data_ptr());
  b.dy = src.data_ptr();
  Tensor acc = empty({num, b.dim}, {.dtype = dt == DType::F64 ? DType::F64 : DType::F32, .device = src.device()});
  b.grad = acc.data_ptr();
  if (acc.numel() > 0) embedding_backward_kernels().get(src.device(), dt)(b);
  Tensor y = acc.to(dt);
  if (y.same(acc)) y = acc.detach();  // a fresh tensor for record (F32/F64 src: the accumulator itself)
  autograd::record(y, "index_add", {src, indices}, [indices](const Tensor& dy, const GradMask&) {
    return std::vector<Tensor>{embedding(indices, dy), Tensor()};
  }, autograd::Saves::only({1}), autograd::DoubleBackward::Yes);
  return y;
}

}  // namespace hg
