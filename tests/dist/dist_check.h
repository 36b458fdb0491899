#pragma once
// The checks of the programs CTest runs under mpirun (dist_collectives.cpp, ddp_train.cpp): a failed check prints
// the rank and what failed and is counted; the program exits 1 when any failed.
#include <cstdio>
#include <cstring>
#include <string>

#include "halfgrad.h"

namespace dist_check {

inline int failures = 0;

inline void check(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "rank %d: FAILED: %s\n", hg::dist::get_rank(), what.c_str());
    ++failures;
  }
}

// f() must throw an hg::Error whose message contains needle.
template <class F>
void expect_error(F&& f, const std::string& needle, const std::string& what) {
  try {
    f();
    check(false, what + ": no error");
  } catch (const hg::Error& e) {
    check(std::string(e.what()).find(needle) != std::string::npos,
          what + ": the error '" + e.what() + "' lacks '" + needle + "'");
  }
}

// Same dtype, shape and bytes (a device tensor is copied to the host first).
inline bool identical(const hg::Tensor& a, const hg::Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const hg::Tensor x = a.cpu().contiguous(), y = b.cpu().contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

}  // namespace dist_check
