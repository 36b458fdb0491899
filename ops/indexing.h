#pragma once
// libtorch's indexing (torch::indexing): x.index({Slice(), Slice(2, 5)}), x.index({"...", 0}), x.index({None}),
// x.index({mask}), x.index({idx}) and x.index_put_({...}, v), the C++ spellings of x[:, 2:5], x[..., 0],
// x[None], x[mask], x[idx] and x[...] = v.
//
// Integers, slices, None, true/false and "..." (Ellipsis) make a view (select, slice, unsqueeze); a tensor index
// then picks along its dim: an I64 tensor of indices (negative ones count from the end), or a mask: a Bool tensor
// (what comparisons return) or a floating 0/1 tensor, covering as many dims as it has. Several tensor
// indices broadcast together (a mask counts as one 1-d index per dim it covers); the result's index dims stand
// where the indexed dims were when those are adjacent, else in front (torch's rule; an integer is a select, not a
// tensor index, as in torch). Reading by tensor indices is differentiable (an index_select); their positions are
// read on the host (on a GPU: a wait).
#include <concepts>
#include <cstdint>
#include <optional>
#include <vector>

#include "core/tensor.h"

namespace hg::indexing {

inline constexpr std::nullopt_t None = std::nullopt;
struct EllipsisIndexType {};
inline constexpr EllipsisIndexType Ellipsis{};

// start:stop:step, each optional as in Python (a negative start or stop counts from the end; step > 0).
struct Slice {
  Slice(std::optional<int64_t> start = std::nullopt, std::optional<int64_t> stop = std::nullopt,
        std::optional<int64_t> step = std::nullopt)
      : start(start), stop(stop), step(step.value_or(1)) {}
  std::optional<int64_t> start, stop;
  int64_t step;
};

class TensorIndex {
 public:
  enum class Kind { None, Ellipsis, Integer, Boolean, Slice, Tensor };
  TensorIndex(std::nullopt_t) : kind_(Kind::None) {}
  TensorIndex(EllipsisIndexType) : kind_(Kind::Ellipsis) {}
  TensorIndex(const char* s);  // "..." only
  template <std::integral I>
    requires(!std::same_as<I, bool>)
  TensorIndex(I i) : kind_(Kind::Integer), integer_(static_cast<int64_t>(i)) {}
  template <class B>
    requires std::same_as<B, bool>
  TensorIndex(B b) : kind_(Kind::Boolean), boolean_(b) {}
  TensorIndex(Slice s) : kind_(Kind::Slice), slice_(s) {}
  TensorIndex(Tensor t);

  Kind kind() const { return kind_; }
  int64_t integer() const { return integer_; }
  bool boolean() const { return boolean_; }
  const Slice& slice() const { return slice_; }
  const Tensor& tensor() const { return tensor_; }

 private:
  Kind kind_;
  int64_t integer_ = 0;
  bool boolean_ = false;
  Slice slice_;
  Tensor tensor_;
};

}  // namespace hg::indexing

namespace hg {

// x.index(...) and x.index_put_(...) as functions.
Tensor index(const Tensor& x, const std::vector<indexing::TensorIndex>& indices);
// Writes v (broadcast to what x.index(indices) gives; any dtype and device, as copy_) into those elements of x.
const Tensor& index_put_(const Tensor& x, const std::vector<indexing::TensorIndex>& indices, const Tensor& v);
const Tensor& index_put_(const Tensor& x, const std::vector<indexing::TensorIndex>& indices, double v);

// The elements of x where mask (Bool or floating 0/1, broadcast to x) is nonzero, as a 1-D tensor in row-major order
// (torch.masked_select); differentiable in x. The mask is read on the host (on a GPU: a wait).
Tensor masked_select(const Tensor& x, const Tensor& mask);
// The positions (I64, (count, ndim)) of x's nonzero elements in row-major order (torch.nonzero); read on the host.
Tensor nonzero(const Tensor& x);

}  // namespace hg
