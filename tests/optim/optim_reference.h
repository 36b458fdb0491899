#pragma once
// What the optimizer tests share: a gradient per step, a starting parameter, and a loop that steps an
// optimizer and a reference written in double from torch's formulas side by side.
#include <cmath>
#include <vector>

#include "optim/optimizer.h"
#include "test_util.h"

namespace hg::test {

// A different gradient at every step, with both signs and a spread of magnitudes.
inline std::vector<double> grad_at(int step, size_t n, double scale = 1.0) {
  std::vector<double> g(n);
  for (size_t i = 0; i < n; ++i)
    g[i] = scale * std::sin(1.3 * static_cast<double>(i) + 0.7 * step) * (1.0 + static_cast<double>(i % 3));
  return g;
}

inline const std::vector<double> kInit = {0.5, -1.25, 2.0, 0.75, -0.3, 1.1};

inline double optim_rel_tol(DType dt) { return dt == DType::F64 ? 1e-12 : 2e-6; }

// Runs `steps` steps of opt on p and of ref (ref.step(p, grad) in double) on a copy, comparing after each.
template <class Ref>
void run_against(optim::Optimizer& opt, const Tensor& p, Ref& ref, int steps, double grad_scale = 1.0) {
  std::vector<double> want = values(p);
  for (int s = 0; s < steps; ++s) {
    const std::vector<double> g = grad_at(s, want.size(), grad_scale);
    set_grad(p, g);
    opt.step();
    ref.step(want, g);
    INFO("step " << s << ", dtype " << p.dtype());
    check_close(values(p), want, optim_rel_tol(p.dtype()), optim_rel_tol(p.dtype()));
  }
}

}  // namespace hg::test
