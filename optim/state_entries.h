#pragma once
// The per-parameter state-dict entries state.<i>.<name> that Optimizer and ParamPrecision both write and
// read (optim/optimizer.h lists the keys). Internal: included by their .cpp files only, as it reaches the
// backend contract (ops/kernels/optim.h's state_dtype).
#include <string>

#include "ops/kernels/optim.h"

namespace hg::optim::detail {

inline std::string state_key(size_t i, const char* name) { return "state." + std::to_string(i) + "." + name; }

// A new tensor with t's bytes on `dev` (the state dict hands out and takes in copies).
inline Tensor copy_to(const Tensor& t_in, Device dev) {
  const Tensor t = t_in.detach().contiguous();
  Tensor c = empty(t.shape(), {.dtype = t.dtype(), .device = dev});
  copy_bytes(c.data_ptr(), dev, t.data_ptr(), t.device(), t.nbytes());
  return c;
}

// Parameter p's state entry `key` (its shape, dtype state_dtype(p)), checked, copied to p's device.
inline Tensor read_buffer(const char* opt, const Tensor& t, const std::string& key, const Tensor& p) {
  const DType want = state_dtype(p.dtype());
  HG_CHECK(t.shape() == p.shape() && t.dtype() == want, opt, ".load_state_dict: entry '", key, "' has shape ",
           t.shape(), " and dtype ", t.dtype(), " but its parameter needs shape ", p.shape(), " and dtype ", want,
           "; the state dict belongs to other parameters");
  return copy_to(t, p.device());
}

}  // namespace hg::optim::detail
