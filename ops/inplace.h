#pragma once
// In-place ops (torch's add_, mul_, fill_, copy_, ..., and x += y): each computes its result out of place from
// the tensor's current values and writes it into the tensor's own elements (a view writes through to its base),
// by one path, assign_inplace (docs/ARCHITECTURE.md, "In-place ops and version counters"); add_, sub_, mul_ and
// div_ run their kernel straight into the tensor where that cannot differ (not recorded, a contiguous floating
// tensor, an operand of its dtype that does not overlap it, no autocast or observer). The Tensor members
// (x.add_(y), x.zero_(), ...) and the compound operators are declared in core/tensor.h and defined in
// ops/inplace.cpp.
#include "core/tensor.h"

namespace hg {

// Writes `result` (self's shape; cast to self's dtype, which must not turn floating values into I64) into self's
// elements, bumps the version of self's storage (so a backward that saved those values refuses to run: torch's
// "modified by an inplace operation") and, when `result` was recorded, makes its op self's grad_fn. Refuses, as
// torch does, a leaf that requires grad while grad mode is on, and (a documented difference) a view taking part
// in autograd. Returns self.
const Tensor& assign_inplace(const char* op, const Tensor& self, const Tensor& result);

Tensor& relu_(Tensor& x);              // x = relu(x)
const Tensor& relu_(const Tensor& x);  // on a temporary view: x.narrow(0, 0, 2) ...

}  // namespace hg
