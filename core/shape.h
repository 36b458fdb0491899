#pragma once
// Shape: sizes of a contiguous row-major tensor. A 0-d tensor (scalar) has an empty shape and one element.
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>
#include <vector>

namespace hg {

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> s) : dims_(s) {}
  explicit Shape(std::vector<int64_t> s) : dims_(std::move(s)) {}

  int64_t ndim() const { return static_cast<int64_t>(dims_.size()); }
  int64_t operator[](int64_t i) const { return dims_[static_cast<size_t>(i)]; }
  int64_t& operator[](int64_t i) { return dims_[static_cast<size_t>(i)]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : dims_) n *= d;
    return n;
  }
  const std::vector<int64_t>& dims() const { return dims_; }
  std::vector<int64_t>& dims() { return dims_; }
  auto begin() const { return dims_.begin(); }
  auto end() const { return dims_.end(); }
  friend bool operator==(const Shape& a, const Shape& b) { return a.dims_ == b.dims_; }
  std::string str() const {
    std::string s = "[";
    for (size_t i = 0; i < dims_.size(); ++i) s += (i ? ", " : "") + std::to_string(dims_[i]);
    return s + "]";
  }

 private:
  std::vector<int64_t> dims_;
};

inline std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << s.str(); }

// Row-major strides (in elements) of a contiguous tensor of this shape.
inline std::vector<int64_t> contiguous_strides(const Shape& s) {
  std::vector<int64_t> st(static_cast<size_t>(s.ndim()));
  int64_t acc = 1;
  for (int64_t i = s.ndim() - 1; i >= 0; --i) {
    st[static_cast<size_t>(i)] = acc;
    acc *= s[i];
  }
  return st;
}

}  // namespace hg
