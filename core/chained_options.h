#pragma once
// libtorch's chained options, e.g. nn::Linear(nn::LinearOptions(4, 5).bias(false)) or
// optim::Adam(params, optim::AdamOptions(1e-3).weight_decay(1e-4)), over halfgrad's designated-initializer
// structs (nn::Linear(4, 5, {.bias = false}): an nn::LinearArgs; optim::Adam(params, {.lr = 1e-3}): an
// optim::AdamArgs). An options class holds the constructor's positional values and an Args struct; HG_OPTION
// writes, for one field of the Args, a setter that returns the options (so calls chain) and a getter of the same
// name, as libtorch's TORCH_ARG.
#include <utility>

namespace hg {

template <class Args>
class ChainedOptions {
 public:
  const Args& args() const { return args_; }

 protected:
  Args args_;
};

}  // namespace hg

// Self is the options class (or, in a base shared by several, the derived class: the setters return it).
#define HG_OPTION(Self, T, name)        \
  Self& name(T v) {                     \
    this->args_.name = std::move(v);    \
    return static_cast<Self&>(*this);   \
  }                                     \
  const T& name() const { return this->args_.name; }
