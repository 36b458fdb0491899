// Tensor's member spellings of the common ops (core/tensor.h): each calls the op function of ops/*.h,
// so x.sum() and hg::sum(x) are one op (same checks, autocast policy and backward).
#include "core/tensor.h"
#include "ops/elementwise.h"
#include "ops/reduce.h"

namespace hg {

Tensor Tensor::sum() const { return hg::sum(*this); }
Tensor Tensor::sum(std::vector<int64_t> dims, ReduceOptions o) const { return hg::sum(*this, std::move(dims), o); }
Tensor Tensor::mean() const { return hg::mean(*this); }
Tensor Tensor::mean(std::vector<int64_t> dims, ReduceOptions o) const { return hg::mean(*this, std::move(dims), o); }
Tensor Tensor::max() const { return hg::max(*this); }
Tensor Tensor::min() const { return hg::min(*this); }
Tensor Tensor::argmax() const { return hg::argmax(*this); }
Tensor Tensor::argmax(int64_t dim, ReduceOptions o) const { return hg::argmax(*this, dim, o); }
Tensor Tensor::exp() const { return hg::exp(*this); }
Tensor Tensor::log() const { return hg::log(*this); }
Tensor Tensor::sqrt() const { return hg::sqrt(*this); }
Tensor Tensor::abs() const { return hg::abs(*this); }
Tensor Tensor::pow(double exponent) const { return hg::pow(*this, exponent); }
Tensor Tensor::relu() const { return hg::relu(*this); }
Tensor Tensor::sigmoid() const { return hg::sigmoid(*this); }
Tensor Tensor::tanh() const { return hg::tanh(*this); }
Tensor Tensor::softmax(int64_t dim) const { return hg::softmax(*this, dim); }
Tensor Tensor::log_softmax(int64_t dim) const { return hg::log_softmax(*this, dim); }

}  // namespace hg
