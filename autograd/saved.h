#pragma once
// autograd::SavedTensor: an input an op's backward reads, saved as torch's SavedVariable saves it: its values (a
// detached alias of its storage) and the autograd history it had when the op ran, not the tensor itself. A backward
// that held the input's TensorImpl would make a reference cycle as soon as a later in-place op rewrote that
// tensor's history through the node (`h.add_(linear(h, w))`: h -> add_'s node -> linear's node -> h), and the graph
// would never be freed. unpack() gives the values attached to the saved history under create_graph (so gradients
// computed from them depend on the input, as with the input itself), detached otherwise.
#include <memory>

#include "core/tensor.h"

namespace hg::autograd {

class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& t);
  // The values, detached: what a first-order backward reads.
  const Tensor& data() const { return data_; }
  // The values attached to the input's history when autograd::create_graph_active(), else data().
  Tensor unpack() const;
  bool defined() const { return data_.defined(); }

 private:
  Tensor data_;
  std::shared_ptr<AutogradMeta> meta_;  // the input's history when saved (null: it needed no grad)
};

}  // namespace hg::autograd
