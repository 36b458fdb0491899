#pragma once
// Sequential: children named "0", "1", ... run in order, each on the previous one's output.
//   hg::nn::Sequential model(hg::nn::Linear(784, 256), hg::nn::ReLU(), hg::nn::Linear(256, 10));
#include <memory>
#include <type_traits>

#include "nn/module.h"

namespace hg::nn {

class Sequential : public Module {
 public:
  Sequential() = default;
  // Takes modules by value (moved into shared ownership) or as shared_ptrs.
  template <class... M>
  explicit Sequential(M&&... modules) {
    (push_back(std::forward<M>(modules)), ...);
  }

  template <class M>
  void push_back(M&& m) {
    add_child(std::to_string(size()), module_ptr(std::forward<M>(m)));
  }

  std::string type_name() const override { return "Sequential"; }
  Tensor forward(const Tensor& x) override;
  int64_t size() const { return static_cast<int64_t>(named_children().size()); }
  std::shared_ptr<Module> operator[](int64_t i) const;
};

}  // namespace hg::nn
