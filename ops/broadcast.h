#pragma once
// Broadcasting (NumPy/PyTorch rules) and the index plan the elementwise loops and kernels share.
#include <cstdint>
#include <vector>

#include "core/shape.h"

namespace hg {

inline constexpr int kMaxDims = 8;
inline constexpr int kMaxInputs = 4;

// out[i] reads input k at offset sum_d idx_d * strides[k][d]; a broadcast dimension has stride 0.
// Dimensions are coalesced (merged where every operand is contiguous across them), so a same-shape
// op is a single dimension of numel elements.
struct BroadcastPlan {
  int ndim = 0;
  int nin = 0;
  int64_t numel = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxInputs][kMaxDims] = {};
};

// The broadcast shape of a and b, or an hg::Error naming op and both shapes.
Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b);

// Whether s broadcasts to `to` without changing it (trailing dims equal or 1).
bool broadcasts_to(const Shape& s, const Shape& to);

// The plan for inputs of the given shapes (each broadcastable to out) producing out. strides[k], when given and
// not empty, are input k's element strides (a view's); otherwise input k is contiguous.
BroadcastPlan make_broadcast_plan(const char* op, const Shape& out, const std::vector<Shape>& ins,
                                  const std::vector<std::vector<int64_t>>& strides = {});

}  // namespace hg
