#include "nn/pooling.h"

#include <sstream>

namespace hg::nn {

namespace {
// torch prints an int when both sides agree, else a tuple.
std::string size_str(Size2 s) {
  std::ostringstream os;
  if (s.h == s.w) os << s.h;
  else os << "(" << s.h << ", " << s.w << ")";
  return os.str();
}
Size2 stride_or_kernel(const Pool2dOptions& o) { return o.stride == Size2(0) ? o.kernel_size : o.stride; }
}  // namespace

std::string MaxPool2d::extra_repr() const {
  std::ostringstream os;
  os << "kernel_size=" << size_str(options.kernel_size) << ", stride=" << size_str(stride_or_kernel(options))
     << ", padding=" << size_str(options.padding) << ", dilation=" << size_str(options.dilation)
     << ", ceil_mode=" << (options.ceil_mode ? "True" : "False");
  return os.str();
}

std::string AvgPool2d::extra_repr() const {
  std::ostringstream os;
  os << "kernel_size=" << size_str(options.kernel_size) << ", stride=" << size_str(stride_or_kernel(options))
     << ", padding=" << size_str(options.padding);
  return os.str();
}

std::string AdaptiveAvgPool2d::extra_repr() const { return "output_size=" + size_str(output_size); }

}  // namespace hg::nn
