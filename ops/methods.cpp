// Tensor's member spellings of the common ops (core/tensor.h): each calls the op function of ops/*.h,
// so x.sum() and hg::sum(x) are one op (same checks, autocast policy and backward).
#include "core/tensor.h"

#include <cmath>
#include <utility>

#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/reduce.h"
#include "ops/shape.h"

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
Tensor Tensor::any() const { return hg::any(*this); }
Tensor Tensor::all() const { return hg::all(*this); }
Tensor Tensor::logical_not() const { return hg::logical_not(*this); }
Tensor Tensor::logical_and(const Tensor& o) const { return hg::logical_and(*this, o); }
Tensor Tensor::logical_or(const Tensor& o) const { return hg::logical_or(*this, o); }
Tensor Tensor::isnan() const { return hg::isnan(*this); }
Tensor Tensor::isinf() const { return hg::isinf(*this); }
Tensor Tensor::isfinite() const { return hg::isfinite(*this); }
Tensor Tensor::sigmoid() const { return hg::sigmoid(*this); }
Tensor Tensor::tanh() const { return hg::tanh(*this); }
Tensor Tensor::softmax(int64_t dim) const { return hg::softmax(*this, dim); }
Tensor Tensor::log_softmax(int64_t dim) const { return hg::log_softmax(*this, dim); }


// ---- libtorch's spellings ----
Tensor Tensor::to(const std::string& device) const { return to(Device::parse(device)); }
Tensor Tensor::cpu() const { return to(Device::cpu()); }
Tensor Tensor::cuda() const { return to(Device::cuda()); }
Tensor Tensor::unsqueeze(int64_t d) const { return hg::unsqueeze(*this, d); }
Tensor Tensor::squeeze() const { return hg::squeeze(*this); }
Tensor Tensor::squeeze(int64_t d) const { return hg::squeeze(*this, d); }
Tensor Tensor::add(const Tensor& o) const { return hg::add(*this, o); }
Tensor Tensor::add(double s) const { return hg::add(*this, s); }
Tensor Tensor::sub(const Tensor& o) const { return hg::sub(*this, o); }
Tensor Tensor::sub(double s) const { return hg::sub(*this, s); }
Tensor Tensor::mul(const Tensor& o) const { return hg::mul(*this, o); }
Tensor Tensor::mul(double s) const { return hg::mul(*this, s); }
Tensor Tensor::div(const Tensor& o) const { return hg::div(*this, o); }
Tensor Tensor::div(double s) const { return hg::div(*this, s); }
Tensor Tensor::neg() const { return hg::neg(*this); }
Tensor Tensor::matmul(const Tensor& o) const { return hg::matmul(*this, o); }
Tensor Tensor::mm(const Tensor& o) const { return hg::mm(*this, o); }
Tensor Tensor::bmm(const Tensor& o) const { return hg::bmm(*this, o); }
std::tuple<Tensor, Tensor> Tensor::max_dim(int64_t d, bool keepdim) const {
  ValuesIndices r = hg::max(*this, d, {.keepdim = keepdim});
  return {std::move(r.values), std::move(r.indices)};
}
std::tuple<Tensor, Tensor> Tensor::min_dim(int64_t d, bool keepdim) const {
  ValuesIndices r = hg::min(*this, d, {.keepdim = keepdim});
  return {std::move(r.values), std::move(r.indices)};
}
Tensor Tensor::argmin() const { return hg::argmin(*this); }
Tensor Tensor::argmin(int64_t d, bool keepdim) const { return hg::argmin(*this, d, {.keepdim = keepdim}); }
Tensor Tensor::var(bool unbiased) const { return hg::var(*this, {}, {.correction = unbiased ? 1 : 0}); }
Tensor Tensor::std(bool unbiased) const { return hg::sqrt(var(unbiased)); }
Tensor Tensor::norm() const { return hg::norm(*this); }
Tensor Tensor::clamp(double lo, double hi) const { return hg::clamp(*this, lo, hi); }
Tensor Tensor::clamp_min(double lo) const { return hg::clamp(*this, lo, INFINITY); }
Tensor Tensor::clamp_max(double hi) const { return hg::clamp(*this, -INFINITY, hi); }
Tensor Tensor::select(int64_t d, int64_t index) const { return hg::select(*this, d, index); }
Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const { return hg::narrow(*this, d, start, length); }
std::vector<Tensor> Tensor::chunk(int64_t chunks, int64_t d) const { return hg::chunk(*this, chunks, d); }
std::vector<Tensor> Tensor::split(int64_t size, int64_t d) const { return hg::split(*this, size, d); }
std::vector<Tensor> Tensor::split(const std::vector<int64_t>& sizes, int64_t d) const { return hg::split(*this, sizes, d); }
Tensor Tensor::expand(const Shape& sizes) const { return hg::expand(*this, sizes); }
Tensor Tensor::index_select(int64_t d, const Tensor& index) const { return hg::index_select(*this, d, index); }
Tensor Tensor::gather(int64_t d, const Tensor& index) const { return hg::gather(*this, d, index); }
Tensor Tensor::masked_fill(const Tensor& mask, double value) const { return hg::masked_fill(*this, mask, value); }
Tensor Tensor::floor() const { return hg::floor(*this); }
Tensor Tensor::ceil() const { return hg::ceil(*this); }
Tensor Tensor::round() const { return hg::round(*this); }
Tensor Tensor::trunc() const { return hg::trunc(*this); }
Tensor Tensor::remainder(const Tensor& o) const { return hg::remainder(*this, o); }
Tensor Tensor::remainder(double s) const { return hg::remainder(*this, s); }
Tensor Tensor::floor_divide(const Tensor& o) const { return hg::floor_divide(*this, o); }
Tensor Tensor::floor_divide(double s) const { return hg::floor_divide(*this, s); }
Tensor Tensor::index_add(int64_t d, const Tensor& index, const Tensor& source, double alpha) const {
  return hg::index_add(*this, d, index, source, alpha);
}
Tensor Tensor::scatter(int64_t d, const Tensor& index, const Tensor& src) const { return hg::scatter(*this, d, index, src); }
Tensor Tensor::scatter(int64_t d, const Tensor& index, double value) const { return hg::scatter(*this, d, index, value); }
Tensor Tensor::scatter_add(int64_t d, const Tensor& index, const Tensor& src) const {
  return hg::scatter_add(*this, d, index, src);
}
std::vector<Tensor> Tensor::unbind(int64_t d) const { return hg::unbind(*this, d); }

}  // namespace hg
