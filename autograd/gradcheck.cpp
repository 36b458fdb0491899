#include "autograd/gradcheck.h"

#include <cmath>
#include <sstream>

#include "autograd/node.h"
#include "core/rng.h"

namespace hg {
namespace {

void check_inputs(const char* op, const std::vector<Tensor>& inputs) {
  for (const Tensor& x : inputs)
    HG_CHECK(!x.defined() || (x.dtype() == DType::F64 && x.device().is_cpu()), op,
             ": inputs must be F64 CPU tensors, got ", x.dtype(), " on ", x.device(), "; convert with .to(DType::F64)");
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// autograd::grad of <r, f(x)> with and without create_graph, compared element by element at the inputs.
GradcheckResult agree_with_plain_backward(const GradcheckFn& f, const std::vector<Tensor>& inputs,
                                          const GradcheckOptions& opts) {
  std::vector<Tensor> xs, wrt;
  std::vector<size_t> position;  // of each of wrt in inputs
  for (const Tensor& x : inputs) {
    Tensor c = x.defined() ? x.detach().clone().requires_grad_(x.requires_grad()) : Tensor();
    if (c.defined() && c.requires_grad()) {
      wrt.push_back(c);
      position.push_back(xs.size());
    }
    xs.push_back(c);
  }
  EnableGradGuard grad_on;
  GradcheckResult res;
  const Tensor y_plain = f(xs);
  if (!y_plain.requires_grad()) return res;
  Generator gen(opts.seed + 2);
  const Tensor r = randn(y_plain.shape(), {.dtype = DType::F64}, &gen);
  const std::vector<Tensor> plain = autograd::grad({y_plain}, wrt, {r}, {.allow_unused = true});
  const std::vector<Tensor> ops = autograd::grad({f(xs)}, wrt, {r}, {.create_graph = true, .allow_unused = true});
  for (size_t k = 0; k < wrt.size(); ++k) {
    const auto values = [&](const Tensor& g) {
      return g.defined() ? g.to_vector<double>() : std::vector<double>(static_cast<size_t>(wrt[k].numel()), 0.0);
    };
    const std::vector<double> a = values(ops[k]), b = values(plain[k]);
    for (size_t i = 0; i < a.size(); ++i) {
      const double err = std::fabs(a[i] - b[i]);
      res.max_abs_error = std::max(res.max_abs_error, err);
      if (err > opts.atol + opts.rtol * std::fabs(b[i]) && res.ok) {
        res.ok = false;
        std::ostringstream os;
        os << "gradgradcheck: the create_graph gradient of input " << position[k] << " element " << i << " is " << a[i]
           << " but the plain backward's is " << b[i] << " (|diff| " << err << ")";
        res.message = os.str();
      }
    }
  }
  return res;
}

}  // namespace

GradcheckResult gradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs, GradcheckOptions opts) {
  check_inputs("gradcheck", inputs);
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
  if (y.requires_grad()) y.backward(r);  // an output that needs no grad is a constant: its gradients are 0

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

GradcheckResult gradgradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs, GradcheckOptions opts) {
  Tensor direction;          // r, drawn once f's output shape is known
  std::vector<Tensor> probe;  // v_k, one per input that requires grad
  // F(x) = sum_k <g_k(x), v_k> with g = grad(<r, f(x)>): gradcheck compares its backward (double backward, the
  // Hessian-vector product H v) with central differences of F, for random r and v.
  const GradcheckFn first_order = [&](const std::vector<Tensor>& xs) {
    EnableGradGuard grad_on;  // gradcheck's numeric differences call this under no_grad
    const Tensor y = f(xs);
    std::vector<Tensor> wrt;
    for (const Tensor& x : xs)
      if (x.defined() && x.requires_grad()) wrt.push_back(x);
    if (!direction.defined()) {
      Generator gen(opts.seed + 1);
      direction = randn(y.shape(), {.dtype = DType::F64}, &gen);
      for (const Tensor& x : wrt) probe.push_back(randn(x.shape(), {.dtype = DType::F64}, &gen));
    }
    const std::vector<Tensor> gs = autograd::grad({y}, wrt, {direction}, {.create_graph = true, .allow_unused = true});
    Tensor total = zeros({}, {.dtype = DType::F64});
    for (size_t k = 0; k < gs.size(); ++k)
      if (gs[k].defined()) total = total.add(gs[k].mul(probe[k]).sum());
    return total;
  };
  // The first-order gradients written in recorded ops (create_graph) must equal the plain backward's (the fused
  // kernels, which gradcheck holds to central differences): the Hessian check alone would accept a wrong first
  // derivative whose own derivative is consistent with it.
  check_inputs("gradgradcheck", inputs);
  GradcheckResult res = agree_with_plain_backward(f, inputs, opts);
  if (!res.ok) return res;
  return gradcheck(first_order, inputs, opts);
}

}  // namespace hg
