#include "nn/flatten.h"

#include <sstream>

#include "ops/shape.h"

namespace hg::nn {

std::string Flatten::extra_repr() const {
  std::ostringstream os;
  os << "start_dim=" << options.start_dim << ", end_dim=" << options.end_dim;
  return os.str();
}
Tensor Flatten::forward(const Tensor& x) { return flatten(x, options.start_dim, options.end_dim); }

}  // namespace hg::nn
