#include "ops/broadcast.h"

#include "core/error.h"

namespace hg {

bool broadcasts_to(const Shape& s, const Shape& to) {
  if (s.ndim() > to.ndim()) return false;
  for (int64_t i = 1; i <= s.ndim(); ++i)
    if (s[s.ndim() - i] != 1 && s[s.ndim() - i] != to[to.ndim() - i]) return false;
  return true;
}

Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b) {
  const int64_t nd = std::max(a.ndim(), b.ndim());
  std::vector<int64_t> out(static_cast<size_t>(nd));
  for (int64_t i = 0; i < nd; ++i) {
    const int64_t da = i < nd - a.ndim() ? 1 : a[i - (nd - a.ndim())];
    const int64_t db = i < nd - b.ndim() ? 1 : b[i - (nd - b.ndim())];
    HG_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", a, " and ", b, " cannot be broadcast (dim ", i,
             " is ", da, " vs ", db, "); sizes must match or be 1");
    out[static_cast<size_t>(i)] = da == 1 ? db : da;
  }
  return Shape(std::move(out));
}

BroadcastPlan make_broadcast_plan(const char* op, const Shape& out, const std::vector<Shape>& ins,
                                  const std::vector<std::vector<int64_t>>& given) {
  HG_CHECK(ins.size() <= static_cast<size_t>(kMaxInputs), op, ": too many inputs (", ins.size(), ")");
  const int64_t nd = out.ndim();
  // Full strides of every input in out's index space, dims of size 1 dropped.
  std::vector<int64_t> sizes;
  std::vector<std::vector<int64_t>> strides(ins.size());
  std::vector<std::vector<int64_t>> in_strides;
  for (size_t k = 0; k < ins.size(); ++k) {
    const Shape& s = ins[k];
    HG_CHECK(s.ndim() <= nd, op, ": input shape ", s, " has more dims than the output ", out);
    const bool strided = k < given.size() && !given[k].empty();
    in_strides.push_back(strided ? given[k] : contiguous_strides(s));
  }
  for (int64_t d = 0; d < nd; ++d) {
    if (out[d] == 1) continue;
    sizes.push_back(out[d]);
    for (size_t k = 0; k < ins.size(); ++k) {
      const int64_t kd = d - (nd - ins[k].ndim());
      const bool present = kd >= 0 && ins[k][kd] != 1;
      HG_CHECK(kd < 0 || ins[k][kd] == 1 || ins[k][kd] == out[d], op, ": input shape ", ins[k],
               " does not broadcast to ", out);
      strides[k].push_back(present ? in_strides[k][static_cast<size_t>(kd)] : 0);
    }
  }
  // Coalesce d with d+1 when, for every input, stride[d] == stride[d+1] * size[d+1].
  std::vector<int64_t> cs;
  std::vector<std::vector<int64_t>> cst(ins.size());
  for (size_t d = 0; d < sizes.size(); ++d) {
    bool merge = !cs.empty();
    for (size_t k = 0; merge && k < ins.size(); ++k) merge = cst[k].back() == strides[k][d] * sizes[d];
    if (merge) {
      cs.back() *= sizes[d];
      for (size_t k = 0; k < ins.size(); ++k) cst[k].back() = strides[k][d];
    } else {
      cs.push_back(sizes[d]);
      for (size_t k = 0; k < ins.size(); ++k) cst[k].push_back(strides[k][d]);
    }
  }
  if (cs.empty()) {  // a scalar, or every dim 1
    cs.push_back(1);
    for (size_t k = 0; k < ins.size(); ++k) cst[k].push_back(0);
  }
  HG_CHECK(cs.size() <= static_cast<size_t>(kMaxDims), op, ": broadcasting over ", cs.size(),
           " non-mergeable dims exceeds the limit of ", kMaxDims, "; reshape the inputs");
  BroadcastPlan p;
  p.ndim = static_cast<int>(cs.size());
  p.nin = static_cast<int>(ins.size());
  p.numel = out.numel();
  for (int d = 0; d < p.ndim; ++d) {
    p.sizes[d] = cs[static_cast<size_t>(d)];
    for (int k = 0; k < p.nin; ++k) p.strides[k][d] = cst[static_cast<size_t>(k)][static_cast<size_t>(d)];
  }
  return p;
}

}  // namespace hg
