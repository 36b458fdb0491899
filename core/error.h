#pragma once
// hg::Error and HG_CHECK: every misuse throws with the op name, the offending values and the fix.
#include <sstream>
#include <stdexcept>
#include <string>

namespace hg {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
template <class... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace hg

// HG_CHECK(cond, "op: what was wrong", values..., "; what to do") throws hg::Error when cond fails.
#define HG_CHECK(cond, ...)                                          \
  do {                                                               \
    if (!(cond)) [[unlikely]]                                        \
      throw ::hg::Error(::hg::detail::str_cat(__VA_ARGS__));         \
  } while (0)

#define HG_FAIL(...) throw ::hg::Error(::hg::detail::str_cat(__VA_ARGS__))
