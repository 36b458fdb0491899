#include "nn/sequential.h"

namespace hg::nn {

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (const auto& [name, m] : named_children()) y = (*m)(y);  // through operator(): forward hooks fire
  return y;
}

std::shared_ptr<Module> Sequential::operator[](int64_t i) const {
  const int64_t n = size();
  HG_CHECK(i >= -n && i < n, "Sequential: index ", i, " is out of range for ", n, " modules");
  return named_children()[static_cast<size_t>(i < 0 ? i + n : i)].second;
}

}  // namespace hg::nn
