#include "autograd/saved.h"

#include "autograd/node.h"

namespace hg::autograd {

SavedTensor::SavedTensor(const Tensor& t) {
  if (!t.defined()) return;
  data_ = t.detach();
  if (t.requires_grad()) meta_ = t.unsafe_impl()->autograd;
}

Tensor SavedTensor::unpack() const {
  if (!meta_ || !create_graph_active()) return data_;
  Tensor y = data_.detach();  // a fresh alias: the saved one stays detached
  y.unsafe_impl()->autograd = meta_;
  return y;
}

}  // namespace hg::autograd
