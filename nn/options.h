#pragma once
// libtorch's chained module options, e.g. nn::Linear(nn::LinearOptions(4, 5).bias(false)), over halfgrad's
// designated-initializer structs (nn::Linear(4, 5, {.bias = false}): an nn::LinearArgs). An options class holds
// the constructor's positional values and an Args struct; HG_OPTION writes, for one field of the Args, a setter
// that returns the options (so calls chain) and a getter of the same name, as libtorch's TORCH_ARG.
#include <utility>

namespace hg::nn {

template <class Args>
class ChainedOptions {
 public:
  const Args& args() const { return args_; }

 protected:
  Args args_;
};

}  // namespace hg::nn

// Self is the options class (or, in a base shared by several, the derived class: the setters return it).
#define HG_OPTION(Self, T, name)        \
  Self& name(T v) {                     \
    this->args_.name = std::move(v);    \
    return static_cast<Self&>(*this);   \
  }                                     \
  const T& name() const { return this->args_.name; }
