// hg_backend_ops cases of the training kernels (tests/backend_ops/cases.h).
#include <limits>
#include <memory>

#include "backend_ops/cases.h"

namespace hg::backend_ops {
namespace {

// The training kernels: optimizer steps, clipping and the grad scaler. Inputs are two parameters and
// their gradients; the outputs are the parameters (and gradients, norms, scales) after the steps.
struct Params {
  std::vector<Tensor> p;
  explicit Params(const std::vector<Tensor>& in) {
    for (size_t i = 0; i < 2; ++i) {
      p.push_back(in[i].detach().clone());
      p.back().requires_grad_();
    }
  }
  void grads(const std::vector<Tensor>& in, double k) {
    for (size_t i = 0; i < 2; ++i) p[i].set_grad(mul(in[2 + i], k));
  }
};

std::vector<Case> training_inputs(const std::string& name, DType dt, double grad_scale = 1.0) {
  Maker m{Generator(seed_of(name, dt)), dt};
  auto mk = [&](std::string v, Shape a, Shape b) {
    return Case{std::move(v), {m.normal(a), m.normal(b), m.normal(a, grad_scale), m.normal(b, grad_scale)},
                {false, false, false, false}};
  };
  return {mk("(7,5) and (5)", {7, 5}, {5}), mk("(0,4) and (3)", {0, 4}, {3}), mk("large and (3)", {kLarge}, {3})};
}

OpCase optimizer(const std::string& name, const char* table,
                 std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)> make) {
  return {name, table, Check::Transcendental, [name](DType dt) { return training_inputs(name, dt); },
          [make](const std::vector<Tensor>& in, const Case&) {
            Params ps(in);
            auto opt = make(ps.p);
            for (int k = 1; k <= 3; ++k) {
              ps.grads(in, 0.5 * k);
              opt->step();
            }
            return std::vector<Tensor>{ps.p[0].detach(), ps.p[1].detach()};
          }};
}


}  // namespace

void add_training_cases(std::vector<OpCase>& ops) {
  ops.push_back(optimizer("SGD momentum nesterov weight_decay", "SGD.step", [](std::vector<Tensor> p) {
    return std::make_unique<optim::SGD>(std::move(p), optim::SGDArgs{
        .lr = 0.1, .momentum = 0.9, .dampening = 0, .weight_decay = 0.01, .nesterov = true});
  }));
  ops.push_back(optimizer("SGD dampening", "SGD.step", [](std::vector<Tensor> p) {
    return std::make_unique<optim::SGD>(std::move(p), optim::SGDArgs{.lr = 0.05, .momentum = 0.5, .dampening = 0.3});
  }));
  ops.push_back(optimizer("Adam amsgrad weight_decay", "Adam.step", [](std::vector<Tensor> p) {
    return std::make_unique<optim::Adam>(std::move(p), optim::AdamArgs{.lr = 0.01, .weight_decay = 0.1, .amsgrad = true});
  }));
  ops.push_back(optimizer("AdamW", "Adam.step", [](std::vector<Tensor> p) {
    return std::make_unique<optim::AdamW>(std::move(p), optim::AdamWArgs{.lr = 0.01, .weight_decay = 0.05});
  }));
  ops.push_back(optimizer("RMSprop centered momentum weight_decay", "RMSprop.step", [](std::vector<Tensor> p) {
    return std::make_unique<optim::RMSprop>(
        std::move(p), optim::RMSpropArgs{.lr = 0.01, .alpha = 0.9, .weight_decay = 0.05, .momentum = 0.5, .centered = true});
  }));
  ops.push_back(optimizer("RMSprop", "RMSprop.step", [](std::vector<Tensor> p) {
    return std::make_unique<optim::RMSprop>(std::move(p), optim::RMSpropArgs{.lr = 0.01});
  }));
  // clipping: the returned norm and the clipped gradients
  const double inf = std::numeric_limits<double>::infinity();
  for (double norm_type : {2.0, inf}) {
    const std::string name = std::string("clip_grad_norm_ ") + (norm_type == 2.0 ? "2" : "inf");
    ops.push_back({name, "clip_grad_norm_, clip_grad", Check::Reduction, [name](DType dt) { return training_inputs(name, dt); },
                   [norm_type](const std::vector<Tensor>& in, const Case&) {
                     Params ps(in);
                     ps.grads(in, 1.0);
                     const double n = optim::clip_grad_norm_(ps.p, 0.7, norm_type);
                     return std::vector<Tensor>{ps.p[0].grad(), ps.p[1].grad(), full({}, n, {.dtype = DType::F64, .device = ps.p[0].device()})};
                   }});
  }
  ops.push_back({"clip_grad_norm_tensor_", "clip_grad_norm_, clip_grad_norm_ (factor), clip_grad", Check::Reduction,
                 [](DType dt) { return training_inputs("clip_tensor", dt); },
                 [](const std::vector<Tensor>& in, const Case&) {
                   Params ps(in);
                   ps.grads(in, 1.0);
                   const Tensor n = optim::clip_grad_norm_tensor_(ps.p, 0.7);
                   return std::vector<Tensor>{ps.p[0].grad(), ps.p[1].grad(), n};
                 }});
  ops.push_back({"clip_grad_value_", "clip_grad", Check::Exact, [](DType dt) { return training_inputs("clip_value", dt); },
                 [](const std::vector<Tensor>& in, const Case&) {
                   Params ps(in);
                   ps.grads(in, 1.0);
                   optim::clip_grad_value_(ps.p, 0.5);
                   return std::vector<Tensor>{ps.p[0].grad(), ps.p[1].grad()};
                 }});
  // GradScaler: unscale, check for inf/NaN, skip or step, and update the scale (kept on the device)
  ops.push_back({"GradScaler step and update", "GradScaler.unscale_, GradScaler (device state), SGD.step", Check::Elementwise,
                 [](DType dt) {
                   std::vector<Case> v = training_inputs("scaler", dt, 1024.0);
                   Case overflow = v[0];
                   overflow.variant = "(7,5) and (5) with an inf gradient";
                   std::vector<double> g = overflow.in[3].to_vector<double>();
                   g[1] = std::numeric_limits<double>::infinity();
                   overflow.in[3] = from_vector(g, overflow.in[3].shape(), {.dtype = DType::F64}).to(dt);
                   v.push_back(overflow);
                   return v;
                 },
                 [](const std::vector<Tensor>& in, const Case&) {
                   Params ps(in);
                   optim::SGD opt(ps.p, {.lr = 0.5});
                   amp::GradScaler scaler({.init_scale = 1024.0, .growth_interval = 2});
                   for (int k = 1; k <= 3; ++k) {
                     ps.grads(in, 1.0);
                     scaler.step(opt);
                     scaler.update();
                   }
                   return std::vector<Tensor>{ps.p[0].detach(), ps.p[1].detach(),
                                              full({}, scaler.get_scale(), {.dtype = DType::F64, .device = ps.p[0].device()})};
                 }});
}

}  // namespace hg::backend_ops
