#include "nn/activation.h"

namespace hg::nn {

std::string GELU::extra_repr() const {
  return approximate == GeluApprox::Tanh ? "approximate='tanh'" : "approximate='none'";
}

}  // namespace hg::nn
