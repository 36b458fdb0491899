#include "core/tensor.h"

#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/convert.h"

namespace hg {

Device Device::parse(const std::string& s) {
  if (s == "cpu") return cpu();
  if (s == "cuda") return cuda();
  if (s.rfind("cuda:", 0) == 0 && s.size() > 5 && s.size() <= 9 &&
      s.find_first_not_of("0123456789", 5) == std::string::npos)
    return cuda(std::stoi(s.substr(5)));
  HG_FAIL("Device: '", s, "' is not a device; use \"cpu\", \"cuda\" or \"cuda:N\"");
}

Storage::Storage(size_t n, Device dev, DType dt)
    : data(device_alloc(n, dev, dt)), nbytes(n), device(dev), dtype(dt) {}
Storage::~Storage() { device_free(data, nbytes, device, dtype); }

int64_t Tensor::size(int64_t dim) const {
  const int64_t nd = ndim();
  HG_CHECK(dim >= -nd && dim < nd, "size: dim ", dim, " is out of range for a ", nd, "-d tensor of shape ",
           shape(), "; use a dim in [", -nd, ", ", nd, ")");
  return shape()[dim < 0 ? dim + nd : dim];
}

std::vector<int64_t> canonical_strides(const Shape& shape, std::vector<int64_t> strides) {
  if (shape.numel() == 0) return {};
  int64_t expect = 1;
  for (int64_t d = shape.ndim() - 1; d >= 0; --d) {
    if (shape[d] == 1) continue;
    if (strides[static_cast<size_t>(d)] != expect) return strides;
    expect *= shape[d];
  }
  return {};
}

std::vector<int64_t> Tensor::strides() const {
  const TensorImpl& t = impl();
  return t.strides.empty() ? contiguous_strides(t.shape) : t.strides;
}

int64_t Tensor::stride(int64_t dim) const {
  const int64_t nd = ndim();
  HG_CHECK(dim >= -nd && dim < nd, "stride: dim ", dim, " is out of range for a ", nd, "-d tensor; use a dim in [",
           -nd, ", ", nd, ")");
  return strides()[static_cast<size_t>(dim < 0 ? dim + nd : dim)];
}

void Tensor::fail_undefined() {
  HG_FAIL("Tensor: this tensor is undefined (default-constructed); create it with hg::empty/zeros/...");
}

void Tensor::fail_not_contiguous() const {
  HG_FAIL("data_ptr: the tensor of shape ", shape(), " is a non-contiguous view (strides ", Shape(strides()),
          "); its elements are not one dense block. Call .contiguous() first (ops do this at their entry), or use "
          "strided_data_ptr() with strides()");
}

namespace {
// A host copy of the tensor's bytes (the tensor itself when it is already on the CPU).
Tensor host_view(const Tensor& t) {
  const Tensor d = t.detach().contiguous();
  return d.device().is_cpu() ? d : d.to(Device::cpu());
}
}  // namespace

template <class T>
std::vector<T> Tensor::to_vector() const {
  const Tensor h = host_view(*this);
  std::vector<T> out(static_cast<size_t>(numel()));
  convert_any(h.data_ptr(), dtype(), out.data(), dtype_v<T>, numel());
  return out;
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<f16> Tensor::to_vector<f16>() const;
template std::vector<bf16> Tensor::to_vector<bf16>() const;
template <>
std::vector<bool> Tensor::to_vector<bool>() const {  // std::vector<bool> packs bits: through bytes
  const Tensor h = host_view(*this).to(DType::Bool);
  const auto* p = static_cast<const uint8_t*>(h.data_ptr());
  return std::vector<bool>(p, p + numel());
}

template <class T>
T Tensor::item() const {
  HG_CHECK(numel() == 1, "item: the tensor has ", numel(), " elements (shape ", shape(),
           "); item() needs exactly one, reduce it first (e.g. sum or mean)");
  return to_vector<T>()[0];
}
template double Tensor::item<double>() const;
template float Tensor::item<float>() const;
template int64_t Tensor::item<int64_t>() const;
template bool Tensor::item<bool>() const;

Tensor alias_with_shape(const Tensor& t, Shape s) {
  HG_CHECK(s.numel() == t.numel(), "view: cannot view ", t.numel(), " elements of shape ", t.shape(),
           " as shape ", s, " with ", s.numel(), " elements");
  HG_CHECK(t.is_contiguous(), "view: the tensor of shape ", t.shape(), " is not contiguous (strides ", Shape(t.strides()),
           "); call .contiguous() first");
  auto impl = std::make_shared<TensorImpl>();
  const TensorImpl& src = *t.unsafe_impl();
  impl->storage = src.storage;
  impl->offset = src.offset;
  impl->shape = std::move(s);
  impl->dtype = src.dtype;
  impl->is_view = src.is_view;
  return Tensor(std::move(impl));
}

Tensor alias_strided(const Tensor& t, Shape s, std::vector<int64_t> strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = t.unsafe_impl()->storage;
  impl->offset = offset;
  impl->strides = strides.empty() ? std::move(strides) : canonical_strides(s, std::move(strides));
  impl->shape = std::move(s);
  impl->dtype = t.dtype();
  impl->is_view = t.is_view();
  return Tensor(std::move(impl));
}

void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  HG_CHECK(a.device() == b.device(), op, ": tensors are on different devices (", a.device(), " and ",
           b.device(), "); move one with .to(Device)");
}

void fail_storage_only(DType dt, const char* what) {
  HG_CHECK(dt != DType::Bool, what, ": dtype Bool holds true/false (comparisons' results, masks), which this op does "
           "not compute on; convert with .to(DType::F32) (true = 1), or use where(mask, a, b)");
  HG_FAIL(what, ": dtype ", dt, " is a storage format (", dtype_info(dt).format.total_bits(), " bits), which no op computes "
          "in; convert with .to(DType::BF16) or .to(DType::F32) first (exact: every FP8 value is a BF16 value)");
}

void check_floating(const char* op, const Tensor& a) {
  if (is_storage_only(a.dtype())) fail_storage_only(a.dtype(), op);
  HG_CHECK(is_floating(a.dtype()), op, ": dtype ", a.dtype(),
           " is not supported (floating dtypes only); convert with .to(DType::F32)");
}

// --- printing, in PyTorch's style -----------------------------------------------------------
namespace {

enum class Kind { Floating, Integer, Logical };
void print_value(std::ostream& os, double v, Kind kind, bool sci) {
  char buf[64];
  if (kind == Kind::Logical) std::snprintf(buf, sizeof buf, "%s", v != 0 ? "true" : "false");
  else if (kind == Kind::Integer) std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
  else if (std::isnan(v)) std::snprintf(buf, sizeof buf, "nan");
  else if (std::isinf(v)) std::snprintf(buf, sizeof buf, v > 0 ? "inf" : "-inf");
  else std::snprintf(buf, sizeof buf, sci ? "%.4e" : "%.4f", v);
  os << buf;
}

struct Printer {
  const std::vector<double>& v;
  const Shape& s;
  Kind kind;
  bool sci, summarize;
  void rec(std::ostream& os, int64_t dim, int64_t base, int indent) const {
    if (s.ndim() == 0) return print_value(os, v[0], kind, sci);
    const int64_t n = s[dim];
    int64_t inner = 1;
    for (int64_t d = dim + 1; d < s.ndim(); ++d) inner *= s[d];
    os << "[";
    for (int64_t i = 0; i < n; ++i) {
      if (summarize && n > 6 && i == 3) {
        os << "...";
        i = n - 4;
        os << (dim + 1 == s.ndim() ? ", " : ",\n" + std::string(static_cast<size_t>(indent + 1), ' '));
        continue;
      }
      if (dim + 1 == s.ndim()) print_value(os, v[static_cast<size_t>(base + i)], kind, sci);
      else rec(os, dim + 1, base + i * inner, indent + 1);
      if (i + 1 < n) os << (dim + 1 == s.ndim() ? ", " : ",\n" + std::string(static_cast<size_t>(indent + 1), ' '));
    }
    os << "]";
  }
};

}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  const std::vector<double> v = t.to_vector<double>();
  double amax = 0, amin_nz = INFINITY;
  for (double x : v)
    if (std::isfinite(x)) {
      amax = std::max(amax, std::fabs(x));
      if (x != 0) amin_nz = std::min(amin_nz, std::fabs(x));
    }
  const bool sci = amax >= 1e8 || (amin_nz < 1e-4 && amin_nz != INFINITY);
  const Kind kind = t.dtype() == DType::I64 ? Kind::Integer : t.dtype() == DType::Bool ? Kind::Logical : Kind::Floating;
  Printer p{v, t.shape(), kind, sci, t.numel() > 1000};
  os << "tensor(";
  p.rec(os, 0, 0, 7);
  os << ", shape=" << t.shape() << ", dtype=" << t.dtype();
  if (!t.device().is_cpu()) os << ", device=" << t.device();
  if (t.requires_grad()) os << ", requires_grad=true";
  return os << ")";
}

}  // namespace hg
