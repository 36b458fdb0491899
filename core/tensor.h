#pragma once
// Tensor: a cheap shared handle to storage + offset + sizes + strides, with a runtime dtype and device.
// The view ops (view, transpose, permute, slice, select, narrow, unsqueeze, squeeze, expand, as_strided)
// share storage; an op whose kernel reads dense memory makes a non-contiguous input contiguous once at its
// entry (ops/strided.h's dense), and data_ptr() refuses a non-contiguous tensor (docs/ARCHITECTURE.md,
// "Strided tensors and views").
// The differentiable members (to, reshape, transpose, ...) are ops: they are declared here for a
// libtorch-like API and defined in ops/ (shape.cpp, cast.cpp); the autograd members in autograd/.
#include <concepts>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "core/allocator.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/hook.h"
#include "core/shape.h"

namespace hg {

struct Storage {
  // dtype: what the bytes were allocated for (hg::empty's dtype), for memory::allocated(dev, dtype).
  Storage(size_t nbytes, Device dev, DType dtype);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data = nullptr;
  size_t nbytes = 0;
  Device device;
  DType dtype;
  // Bumped by every in-place op on any tensor sharing this storage (views, detach()); autograd keeps the
  // value each saved tensor had when it was saved and refuses a backward that would read changed values.
  uint64_t version = 0;
};

namespace indexing {
class TensorIndex;  // ops/indexing.h
}
struct AutogradMeta;  // autograd/node.h
struct GradUnscale;   // autograd/grad_unscale.h
struct Node;
class Tensor;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in elements
  Shape shape;
  // Element strides, one per dim; empty when the tensor is contiguous row-major (canonical_strides makes
  // every contiguous layout empty, so is_contiguous() is strides.empty()).
  std::vector<int64_t> strides;
  bool is_view = false;  // made by a view op from another tensor (shares its storage)
  // A view's base: the tensor the first view op was applied to (a view of a view has the same base), whose
  // history an in-place op on the view rewrites (torch's CopySlices). Null for a non-view and for detach()'s alias.
  std::shared_ptr<TensorImpl> view_base;
  DType dtype = DType::F32;
  std::shared_ptr<AutogradMeta> autograd;  // null until the tensor takes part in autograd
};

// strides, or empty when they describe shape's contiguous row-major layout (dims of size 1 and empty tensors
// impose nothing, as torch's is_contiguous).
std::vector<int64_t> canonical_strides(const Shape& shape, std::vector<int64_t> strides);

struct TensorOptions {
  DType dtype = DType::F32;
  Device device = Device::cpu();
  bool requires_grad = false;
};

// Reductions over dims (sum, mean, argmax, ...): keepdim keeps each reduced dim with size 1 (torch).
struct ReduceOptions {
  bool keepdim = false;
};

// torch's backward(retain_graph, create_graph): create_graph records the graph of the gradients themselves, so a
// function of them (a gradient penalty) can be differentiated again; retain_graph keeps the graph for another
// backward and defaults to create_graph (docs/API.md, "Higher-order gradients").
struct BackwardOptions {
  std::optional<bool> retain_graph = std::nullopt;
  bool create_graph = false;
};

using GradHook = std::function<Tensor(const Tensor& grad)>;  // return undefined to keep grad
using PostAccumulateGradHook = std::function<void(const Tensor& param)>;  // reads param.grad()

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  int64_t ndim() const { return impl().shape.ndim(); }
  int64_t size(int64_t dim) const;  // negative dims count from the end
  int64_t numel() const { return impl().shape.numel(); }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device; }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype()); }
  // The first element of a contiguous tensor: an hg::Error for a non-contiguous view (call contiguous()).
  void* data_ptr() const {
    if (!impl().strides.empty()) fail_not_contiguous();
    return strided_data_ptr();
  }
  // The address of element (0, ..., 0) whatever the layout: for kernels that take strides.
  void* strided_data_ptr() const {
    const TensorImpl& t = impl();
    return t.storage->data == nullptr ? nullptr
                                      : static_cast<char*>(t.storage->data) + t.offset * static_cast<int64_t>(dtype_size(t.dtype));
  }
  std::vector<int64_t> strides() const;  // in elements, one per dim
  int64_t stride(int64_t dim) const;
  int64_t storage_offset() const { return impl().offset; }
  bool is_contiguous() const { return impl().strides.empty(); }
  bool is_view() const { return impl().is_view; }
  uint64_t version() const { return impl().storage->version; }  // torch's _version
  template <class T> T* data() const {
    HG_CHECK(dtype() == dtype_v<T>, "Tensor::data: tensor has dtype ", dtype(), " but ",
             dtype_name(dtype_v<T>), " was requested; use .to(DType) first");
    return static_cast<T*>(data_ptr());
  }
  TensorImpl* unsafe_impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool same(const Tensor& o) const { return impl_ == o.impl_; }

  // Values (copy to the host when needed). item() needs exactly one element.
  template <class T = double> T item() const;
  template <class T> std::vector<T> to_vector() const;

  // --- ops (ops/cast.cpp, ops/shape.cpp); differentiable unless noted ---
  Tensor to(DType t) const;
  Tensor to(Device d) const;
  Tensor reshape(Shape s) const;  // one dim may be -1; a view when the strides allow, else a copy
  Tensor view(Shape s) const;     // a view, or an hg::Error when the strides do not allow one (torch's view)
  Tensor flatten() const { return reshape({-1}); }
  Tensor transpose(int64_t d0, int64_t d1) const;  // a view
  Tensor t() const { return transpose(0, 1); }
  Tensor permute(std::vector<int64_t> dims) const;  // a view
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;  // a view
  Tensor clone() const;  // copies (contiguous); differentiable
  // the tensor itself when contiguous, else a contiguous copy (ops/shape.h's contiguous); differentiable
  Tensor contiguous() const { return is_contiguous() ? *this : contiguous_copy(); }

  // --- the common ops as members, as torch spells them (ops/methods.cpp; the functions of ops/*.h) ---
  Tensor sum() const;
  Tensor sum(std::vector<int64_t> dims, ReduceOptions o = {}) const;
  Tensor mean() const;
  Tensor mean(std::vector<int64_t> dims, ReduceOptions o = {}) const;
  Tensor max() const;
  Tensor min() const;
  Tensor argmax() const;  // into the flattened tensor
  Tensor argmax(int64_t dim, ReduceOptions o = {}) const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor abs() const;
  Tensor pow(double exponent) const;
  Tensor relu() const;
  Tensor sigmoid() const;
  Tensor tanh() const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;
  // torch's logical members (ops/elementwise.h): a Bool result; any()/all() over every element (0-d Bool)
  Tensor any() const;
  Tensor all() const;
  Tensor logical_not() const;
  Tensor logical_and(const Tensor& o) const;
  Tensor logical_or(const Tensor& o) const;
  Tensor isnan() const;
  Tensor isinf() const;
  Tensor isfinite() const;

  // --- libtorch's spellings of what exists (ops/methods.cpp): x.dim(), x.sizes(), x.mul(y), x.sum(1, true),
  // auto [v, i] = x.max(1), ... unsqueeze/squeeze/select/narrow/chunk/split/expand are views. ---
  int64_t dim() const { return ndim(); }
  const Shape& sizes() const { return shape(); }
  bool is_cuda() const { return device().is_cuda(); }
  bool is_cpu() const { return device().is_cpu(); }
  Tensor to(const std::string& device) const;  // "cpu", "cuda", "cuda:1"
  Tensor cpu() const;
  Tensor cuda() const;
  Tensor half() const { return to(DType::F16); }
  Tensor bfloat16() const { return to(DType::BF16); }
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze() const;             // every dim of size 1
  Tensor squeeze(int64_t dim) const;  // that dim when its size is 1, else the tensor as it is (torch)
  Tensor add(const Tensor& o) const;
  Tensor add(double s) const;
  Tensor sub(const Tensor& o) const;
  Tensor sub(double s) const;
  Tensor mul(const Tensor& o) const;
  Tensor mul(double s) const;
  Tensor div(const Tensor& o) const;
  Tensor div(double s) const;
  Tensor neg() const;
  Tensor matmul(const Tensor& o) const;
  Tensor mm(const Tensor& o) const;   // 2-D only
  Tensor bmm(const Tensor& o) const;  // 3-D only, equal batches
  // x.sum(1), x.mean(-1, true): one dim given as an integer (a braced list still means the dims overload)
  template <std::integral I> Tensor sum(I dim, bool keepdim = false) const { return sum({int64_t(dim)}, {keepdim}); }
  template <std::integral I> Tensor mean(I dim, bool keepdim = false) const { return mean({int64_t(dim)}, {keepdim}); }
  // (values, indices) along a dim, as libtorch's std::tuple
  template <std::integral I> std::tuple<Tensor, Tensor> max(I dim, bool keepdim = false) const { return max_dim(dim, keepdim); }
  template <std::integral I> std::tuple<Tensor, Tensor> min(I dim, bool keepdim = false) const { return min_dim(dim, keepdim); }
  Tensor argmin() const;  // into the flattened tensor
  Tensor argmin(int64_t dim, bool keepdim = false) const;
  Tensor var(bool unbiased = true) const;  // over every element
  Tensor std(bool unbiased = true) const;
  Tensor norm() const;  // the 2-norm of every element (Frobenius for a matrix)
  Tensor floor() const;
  Tensor ceil() const;
  Tensor round() const;
  Tensor trunc() const;
  Tensor remainder(const Tensor& o) const;
  Tensor remainder(double s) const;
  Tensor floor_divide(const Tensor& o) const;
  Tensor floor_divide(double s) const;
  Tensor clamp(double lo, double hi) const;
  Tensor clamp_min(double lo) const;
  Tensor clamp_max(double hi) const;
  Tensor select(int64_t dim, int64_t index) const;  // that index of dim, dim removed (negative counts from the end)
  Tensor operator[](int64_t index) const { return select(0, index); }
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;
  std::vector<Tensor> split(int64_t split_size, int64_t dim = 0) const;
  std::vector<Tensor> split(const std::vector<int64_t>& sizes, int64_t dim = 0) const;
  Tensor expand(const Shape& sizes) const;  // broadcast to sizes (-1 keeps a dim); a view (stride 0)
  Tensor index_select(int64_t dim, const Tensor& index) const;
  Tensor gather(int64_t dim, const Tensor& index) const;
  Tensor masked_fill(const Tensor& mask, double value) const;
  Tensor index_add(int64_t dim, const Tensor& index, const Tensor& source, double alpha = 1.0) const;
  Tensor scatter(int64_t dim, const Tensor& index, const Tensor& src) const;
  Tensor scatter(int64_t dim, const Tensor& index, double value) const;
  Tensor scatter_add(int64_t dim, const Tensor& index, const Tensor& src) const;
  std::vector<Tensor> unbind(int64_t dim = 0) const;
  Tensor cumsum(int64_t dim) const;  // ops/order.h
  Tensor cumprod(int64_t dim) const;  // ops/order.h
  std::tuple<Tensor, Tensor> sort(int64_t dim = -1, bool descending = false) const;
  Tensor argsort(int64_t dim = -1, bool descending = false) const;
  std::tuple<Tensor, Tensor> topk(int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true) const;
  Tensor as_strided(const Shape& sizes, std::vector<int64_t> strides, int64_t storage_offset) const;

  // --- in-place ops (ops/inplace.cpp, ops/inplace.h): write into this tensor's elements (through a view into its
  // base), bump its version and take over autograd history. const, as libtorch's: x.narrow(0, 0, 2).zero_() works
  // on the temporary view. A leaf that requires grad refuses them while grad mode is on. ---
  const Tensor& add_(const Tensor& o) const;
  const Tensor& add_(double s) const;
  const Tensor& sub_(const Tensor& o) const;
  const Tensor& sub_(double s) const;
  const Tensor& mul_(const Tensor& o) const;
  const Tensor& mul_(double s) const;
  const Tensor& div_(const Tensor& o) const;
  const Tensor& div_(double s) const;
  const Tensor& clamp_(double lo, double hi) const;
  const Tensor& fill_(double value) const;
  const Tensor& zero_() const;
  const Tensor& copy_(const Tensor& src) const;  // any dtype and device; src broadcasts to this shape
  const Tensor& masked_fill_(const Tensor& mask, double value) const;
  const Tensor& index_add_(int64_t dim, const Tensor& index, const Tensor& source, double alpha = 1.0) const;
  const Tensor& scatter_(int64_t dim, const Tensor& index, const Tensor& src) const;
  const Tensor& scatter_(int64_t dim, const Tensor& index, double value) const;
  const Tensor& scatter_add_(int64_t dim, const Tensor& index, const Tensor& src) const;

  // --- torch::indexing (ops/indexing.h): x.index({Slice(), 0}), x.index({mask}), x.index_put_({idx}, v) ---
  Tensor index(const std::vector<indexing::TensorIndex>& indices) const;
  const Tensor& index_put_(const std::vector<indexing::TensorIndex>& indices, const Tensor& v) const;
  const Tensor& index_put_(const std::vector<indexing::TensorIndex>& indices, double v) const;
  Tensor masked_select(const Tensor& mask) const;
  Tensor nonzero() const;

  // --- autograd (autograd/tensor_autograd.cpp) ---
  bool requires_grad() const;
  Tensor& requires_grad_(bool on = true);
  bool is_leaf() const;  // true unless produced by a recorded op
  Tensor grad() const;   // undefined until a backward reached this leaf
  void set_grad(const Tensor& g);
  void zero_grad();      // drops the accumulated gradient
  // The factor this leaf's gradient still carries (autograd/grad_unscale.h): the unscaled gradient is
  // grad() times it. amp::GradScaler::unscale_ sets it on F16 gradients; set_grad, zero_grad and a
  // backward that accumulates into the gradient drop it. Not pending() when nothing is left to apply.
  GradUnscale grad_unscale() const;
  void set_grad_unscale(const GradUnscale& f) const;  // the gradient must be defined
  std::shared_ptr<Node> grad_fn() const;
  void backward(const Tensor& seed = Tensor(), BackwardOptions opts = {}) const;
  Tensor detach() const;  // shares storage, never requires grad
  // hook(grad) runs when this tensor's gradient is computed, and may return a replacement (same shape and
  // dtype) or an undefined tensor to keep it (torch's Tensor.register_hook). The handle removes it.
  HookHandle register_hook(GradHook hook) const;
  // hook(param) runs once a backward has accumulated this leaf's gradient into grad() (torch's
  // register_post_accumulate_grad_hook): as soon as no node left in the backward can add to it, while the rest
  // of the backward still runs (nn::DistributedDataParallel starts its all-reduces from here). Leaves only.
  HookHandle register_post_accumulate_grad_hook(PostAccumulateGradHook hook) const;

 private:
  [[noreturn]] void fail_not_contiguous() const;
  [[noreturn]] static void fail_undefined();
  Tensor contiguous_copy() const;
  std::tuple<Tensor, Tensor> max_dim(int64_t dim, bool keepdim) const;
  std::tuple<Tensor, Tensor> min_dim(int64_t dim, bool keepdim) const;
  // Every accessor goes through here: the check's message is built out of line (fail_undefined), so this
  // stays small enough to inline (as an HG_CHECK it was a call per shape(), dtype(), numel() ...).
  TensorImpl& impl() const {
    if (impl_ == nullptr) [[unlikely]] fail_undefined();
    return *impl_;
  }
  std::shared_ptr<TensorImpl> impl_;
};

// xs[k].to(dtype) for every k (ops/cast.cpp), recorded as to(dtype) is, with the casts of one device and source
// dtype (F16, BF16, F32 to F16, BF16, F32, F64) in one batched call: one launch on a GPU instead of one each.
// A tensor already of that dtype is returned as it is. autocast casts an op's inputs and weights with it.
std::vector<Tensor> cast_each(const std::vector<Tensor>& xs, DType dtype);

// --- factories (core/factory.cpp) ---
Tensor empty(Shape s, TensorOptions o = {});
Tensor zeros(Shape s, TensorOptions o = {});
Tensor ones(Shape s, TensorOptions o = {});
Tensor full(Shape s, double value, TensorOptions o = {});
Tensor arange(double start, double end, double step = 1.0, TensorOptions o = {});
Tensor arange(int64_t end, TensorOptions o = {});
// steps values from start to end, both included, computed as torch does (the lower half from start, the
// upper half back from end, so the end is exact), in double, then rounded to o.dtype
Tensor linspace(double start, double end, int64_t steps, TensorOptions o = {});
class Generator;
Tensor rand(Shape s, TensorOptions o = {}, Generator* gen = nullptr);   // U[0,1)
Tensor randn(Shape s, TensorOptions o = {}, Generator* gen = nullptr);  // N(0,1)
// Values are converted to o.dtype (rounded to nearest even for F16/BF16). Without options, int64_t values
// make an I64 tensor, as torch.tensor infers the dtype from its values (float and double values: F32).
Tensor from_vector(const std::vector<float>& v, Shape s, TensorOptions o = {});
Tensor from_vector(const std::vector<double>& v, Shape s, TensorOptions o = {});
Tensor from_vector(const std::vector<int64_t>& v, Shape s);
Tensor from_vector(const std::vector<bool>& v, Shape s);  // a Bool tensor
Tensor from_vector(const std::vector<int64_t>& v, Shape s, TensorOptions o);
Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);

// A tensor of the same dtype/device sharing t's storage under a new shape (no autograd); t must be contiguous.
Tensor alias_with_shape(const Tensor& t, Shape s);
// A tensor sharing t's storage with the given sizes, strides and offset (no autograd, no bounds check: the
// view ops check theirs).
Tensor alias_strided(const Tensor& t, Shape s, std::vector<int64_t> strides, int64_t offset);

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// x += y, x -= 2, ...: the in-place ops (ops/inplace.cpp)
const Tensor& operator+=(const Tensor& a, const Tensor& b);
const Tensor& operator-=(const Tensor& a, const Tensor& b);
const Tensor& operator*=(const Tensor& a, const Tensor& b);
const Tensor& operator/=(const Tensor& a, const Tensor& b);
const Tensor& operator+=(const Tensor& a, double b);
const Tensor& operator-=(const Tensor& a, double b);
const Tensor& operator*=(const Tensor& a, double b);
const Tensor& operator/=(const Tensor& a, double b);

// Checks that two tensors are on the same device; op names the caller.
void check_same_device(const char* op, const Tensor& a, const Tensor& b);
void check_floating(const char* op, const Tensor& a);

}  // namespace hg
