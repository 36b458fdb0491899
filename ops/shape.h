#pragma once
// Shape ops. The views (reshape when it can, view, transpose, permute, slice, select, narrow, unsqueeze,
// squeeze, expand, as_strided) share storage and only change sizes/strides/offset; cat, flip, contiguous and
// clone copy through one strided-copy kernel per backend. All but as_strided are differentiable; a view's
// gradient flows to the tensor it views.
#include <vector>

#include "core/tensor.h"

namespace hg {

Tensor reshape(const Tensor& x, Shape s);  // a view when view() can make one, else a contiguous copy
Tensor view(const Tensor& x, Shape s);     // a view, or an hg::Error naming reshape as the fix
Tensor contiguous(const Tensor& x);        // x itself when contiguous, else a dense copy (identity gradient)
// A view with these sizes, strides and storage offset (elements) over x's storage, bounds-checked; not
// differentiable (an hg::Error when it would be recorded). For internal use, as torch's as_strided.
Tensor as_strided(const Tensor& x, const Shape& sizes, std::vector<int64_t> strides, int64_t storage_offset);
// dst's elements (any layout, e.g. a view) = src's (same shape, dtype and device; any layout). Not recorded.
void copy_into(const Tensor& src, const Tensor& dst);
// After an in-place op wrote `value` (recorded, the view's shape) into `view` (a view): the base's history becomes
// its old values with value inside the view, and the view's history a view of that (torch's CopySlices). An
// hg::Error, naming op, for a view of a leaf that requires grad, of a non-contiguous base, or an expanded view.
void copy_slices(const char* op, const Tensor& view, const Tensor& value);
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);
Tensor permute(const Tensor& x, std::vector<int64_t> dims);
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor cat(const std::vector<Tensor>& xs, int64_t dim);
Tensor clone(const Tensor& x);
// Merges dims start_dim..end_dim into one (torch.flatten); a view when reshape's is.
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);

// torch's spellings of the shape ops (differentiable):
Tensor unsqueeze(const Tensor& x, int64_t dim);    // a size-1 dim inserted at dim (in [-ndim-1, ndim]); shares storage
Tensor squeeze(const Tensor& x);                   // every size-1 dim removed; shares storage
Tensor squeeze(const Tensor& x, int64_t dim);      // dim removed when its size is 1, else x itself
Tensor select(const Tensor& x, int64_t dim, int64_t index);  // x[..., index, ...] with dim removed; a view
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);  // a view
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);  // ceil(size/chunks) each, the last smaller
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);  // pieces of split_size, the last smaller
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);  // sizes sum to the dim
Tensor stack(const std::vector<Tensor>& xs, int64_t dim = 0);  // equal shapes, joined along a new dim
// x broadcast to `sizes` (torch's expand: -1 keeps a dim, new dims lead, only size-1 dims grow); a view with
// stride 0 on the grown dims;
// backward sums the gradient back to x's shape
Tensor expand(const Tensor& x, const Shape& sizes);
Tensor flip(const Tensor& x, const std::vector<int64_t>& dims);  // reversed along dims; copies
Tensor roll(const Tensor& x, int64_t shifts, int64_t dim);       // x[(i - shifts) mod n] along dim
// x tiled reps[d] times along each dim (torch's repeat: reps may be longer than x's dims, which then lead)
Tensor repeat(const Tensor& x, const std::vector<int64_t>& reps);
// The lower (tril) or upper (triu) triangle of the last two dims, from the diagonal + k; the rest exact zeros
// ones where column - row <= k (lower) or >= k (upper) in a rows x cols matrix, zeros elsewhere, made on o.device
Tensor triangle_mask(int64_t rows, int64_t cols, int64_t k, bool lower, TensorOptions o);
Tensor tril(const Tensor& x, int64_t k = 0);
Tensor triu(const Tensor& x, int64_t k = 0);
// I64 (..., num_classes) with a 1 at each index (torch.nn.functional.one_hot); num_classes -1: the largest
// index + 1. An index outside [0, num_classes) is an hg::Error (on a GPU, reading the range waits for it).
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1);
// x's slices at `index` (I64, 0-d or 1-d) along dim, in index's order (repeats allowed); the gradient adds
// back into each slice picked. An index outside [0, size) is an hg::Error (on a GPU, checking it waits).
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
// out[i][j][k] = x[i][index[i][j][k]][k] for dim 1 (and so on): index is I64 with x's rank and, off dim, sizes
// no larger than x's; out has index's shape (torch.gather). Same index checks as index_select.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// x + alpha * source's slices added at `index` (I64, 0-d or 1-d) along dim; repeats accumulate (torch.index_add).
// source has x's shape with dim of index's length. Differentiable in x and source.
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source, double alpha = 1.0);
// torch.scatter_add / scatter: index (I64) and src have x's rank, index no larger than src (and than x off dim);
// x[..index[i][j][k]..] (dim's coordinate from index, the others index's own) += src[i][j][k], or = for scatter, which
// refuses an index sending two values to one position (torch leaves the winner unspecified). Differentiable.
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, double value);
// x's slices along dim, each a view without that dim (torch.unbind)
std::vector<Tensor> unbind(const Tensor& x, int64_t dim = 0);
// x with value wherever mask (broadcast to x) is nonzero; differentiable in x (torch's masked_fill, mask Bool or 0/1)
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);


// Normalises a possibly negative dim for an ndim-d tensor, or throws naming op.
int64_t wrap_dim(const char* op, int64_t dim, int64_t ndim);

}  // namespace hg
