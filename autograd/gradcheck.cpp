#include "autograd/gradcheck.h"

#include <cmath>
#include <sstream>

#include "autograd/node.h"
#include "core/rng.h"

namespace hg {
namespace {

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

GradcheckResult gradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs, GradcheckOptions opts) {
  for (const Tensor& x : inputs)
    HG_CHECK(!x.defined() || (x.dtype() == DType::F64 && x.device().is_cpu()),
             "gradcheck: inputs must be F64 CPU tensors, got ", x.dtype(), " on ", x.device(),
             "; convert with .to(DType::F64)");
  std::vector<Tensor> xs;
  for (const Tensor& x : inputs) {
    if (!x.defined()) {
      xs.emplace_back();
      continue;
    }
    Tensor c = x.detach().clone();
    c.requires_grad_(x.requires_grad());
    xs.push_back(c);
  }
  Tensor y = f(xs);
  Generator gen(opts.seed);
  const Tensor r = randn(y.shape(), {.dtype = DType::F64}, &gen);
  const std::vector<double> rv = r.to_vector<double>();
  y.backward(r);

  GradcheckResult res;
  NoGradGuard no_grad;
  for (size_t k = 0; k < xs.size(); ++k) {
    if (!xs[k].defined() || !xs[k].requires_grad()) continue;
    const Tensor g = xs[k].grad();
    const std::vector<double> analytic = g.defined() ? g.to_vector<double>() : std::vector<double>(xs[k].numel(), 0.0);
    double* p = xs[k].data<double>();
    for (int64_t i = 0; i < xs[k].numel(); ++i) {
      const double orig = p[i];
      p[i] = orig + opts.eps;
      const double fp = dot(f(xs).to_vector<double>(), rv);
      p[i] = orig - opts.eps;
      const double fm = dot(f(xs).to_vector<double>(), rv);
      p[i] = orig;
      const double numeric = (fp - fm) / (2 * opts.eps);
      const double err = std::fabs(numeric - analytic[static_cast<size_t>(i)]);
      res.max_abs_error = std::max(res.max_abs_error, err);
      if (err > opts.atol + opts.rtol * std::fabs(numeric) && res.ok) {
        res.ok = false;
        std::ostringstream os;
        os << "gradcheck: input " << k << " element " << i << ": analytic " << analytic[static_cast<size_t>(i)]
           << " vs numeric " << numeric << " (|diff| " << err << ")";
        res.message = os.str();
      }
    }
  }
  return res;
}

}  // namespace hg
