// The ops and training pieces the other GPU tests leave out, on the GPU against the CPU backend through
// the public API: cross-entropy and NLL (every reduction, ignore_index, label smoothing, spatial
// targets), dropout (the same Philox mask on both devices), embedding (repeated indices, padding_idx),
// max/avg/adaptive pooling, linear with autograd, the optimizers (SGD with momentum and nesterov,
// Adam with amsgrad, AdamW, RMSprop centered with momentum) and clipping (2-norm, inf-norm, by value) for parameters of every floating
// dtype, and GradScaler's unscale of BF16 and F64 gradients.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gpu/compare.h"
#include "halfgrad.h"
#include "test_util.h"

using namespace hg;
using hg::gpu_test::check_close;
using hg::gpu_test::Tol;

namespace {

const Device kGpu = Device::cuda();
const DType kTypes[] = {DType::F32, DType::F16, DType::BF16, DType::F64};

// Loose enough for the different order of additions (a tree on the GPU) and one rounding of each.
double tol(DType t) {
  switch (t) {
    case DType::F32: return 2e-5;
    case DType::F16: return 4e-3;
    case DType::BF16: return 3e-2;
    default: return 1e-11;
  }
}

Tensor rnd(Shape s, DType dt, double scale = 1.0) { return mul(randn(std::move(s), {.dtype = DType::F64}), scale).to(dt); }

// rtol relative to the value with a floor of 0.05, rtol * (|cpu| + 0.05): a loss near 0 is a difference of
// two log-sum-exps of the logits' size, accurate to an ulp of those (F32: 0.0019186 came out 1.2e-7 apart
// on the two devices).
Tol floored(double rtol) { return {.rtol = rtol, .atol = 0.05 * rtol}; }

// Runs f on CPU copies and GPU copies of the inputs (with gradients), backpropagates the same upstream
// gradient, and compares the outputs and every input's gradient.
void check_op(const std::vector<Tensor>& inputs, const std::vector<bool>& differentiable,
              const std::function<Tensor(const std::vector<Tensor>&)>& f, double rtol, const std::string& what) {
  std::vector<Tensor> c, g;
  for (size_t i = 0; i < inputs.size(); ++i) {
    c.push_back(inputs[i].clone());
    g.push_back(inputs[i].to(kGpu));
    if (differentiable[i]) {
      c.back().requires_grad_();
      g.back().requires_grad_();
    }
  }
  const Tensor yc = f(c), yg = f(g);
  check_close(yc, yg, floored(rtol), what + ": forward");
  if (!yc.requires_grad()) return;
  const Tensor dy = rnd(yc.shape(), yc.dtype());
  yc.backward(dy);
  yg.backward(dy.to(kGpu));
  for (size_t i = 0; i < inputs.size(); ++i)
    if (differentiable[i])
      check_close(c[i].grad(), g[i].grad(), floored(rtol), what + ": grad of input " + std::to_string(i));
}

Tensor targets(Shape s, int64_t classes, uint64_t seed, int64_t ignore_every = 0, int64_t ignore_index = -100) {
  Generator gen(seed);
  std::vector<int64_t> v(static_cast<size_t>(s.numel()));
  const Tensor u = rand({s.numel()}, {.dtype = DType::F64}, &gen);
  const std::vector<double> r = u.to_vector<double>();
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = static_cast<int64_t>(r[i] * static_cast<double>(classes)) % classes;
    if (ignore_every > 0 && i % static_cast<size_t>(ignore_every) == 1) v[i] = ignore_index;
  }
  return from_vector(v, std::move(s), {.dtype = DType::I64});
}

}  // namespace

TEST_CASE("gpu: cross_entropy and nll_loss match the CPU in every reduction and dtype", "[gpu][loss]") {
  for (DType dt : kTypes) {
    for (Reduction red : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
      const std::string what = std::string("cross_entropy ") + dtype_name(dt) + " reduction " +
                               std::to_string(static_cast<int>(red));
      // (N, C) with ignored rows; label smoothing; many classes (one block per row); spatial (N, C, d)
      const Tensor t1 = targets({37}, 10, 1, 5);
      check_op({rnd({37, 10}, dt, 3.0), t1}, {true, false},
               [&](const std::vector<Tensor>& in) { return cross_entropy(in[0], in[1], {.reduction = red}); },
               tol(dt), what + " (37,10) ignore_index");
      check_op({rnd({9, 1000}, dt, 2.0), targets({9}, 1000, 2)}, {true, false},
               [&](const std::vector<Tensor>& in) {
                 return cross_entropy(in[0], in[1], {.reduction = red, .label_smoothing = 0.1});
               },
               tol(dt), what + " (9,1000) label_smoothing");
      check_op({rnd({4, 7, 3, 5}, dt), targets({4, 3, 5}, 7, 3, 4)}, {true, false},
               [&](const std::vector<Tensor>& in) { return cross_entropy(in[0], in[1], {.reduction = red}); },
               tol(dt), what + " spatial (4,7,3,5)");
      check_op({log_softmax(rnd({21, 6}, dt), 1), targets({21}, 6, 4, 3)}, {true, false},
               [&](const std::vector<Tensor>& in) { return nll_loss(in[0], in[1], {.reduction = red}); },
               tol(dt), std::string("nll_loss ") + dtype_name(dt));
      // class weights (the composed path), on the weights' device
      const Tensor w = add(abs(rnd({10}, DType::F32, 0.5)), 0.5);  // weights in [0.5, ~2]
      check_op({rnd({37, 10}, dt, 3.0), t1}, {true, false},
               [&](const std::vector<Tensor>& in) {
                 return cross_entropy(in[0], in[1], {.reduction = red, .label_smoothing = 0.1,
                                                     .weight = w.to(in[0].device())});
               },
               tol(dt), what + " (37,10) weight");
    }
  }
}

TEST_CASE("gpu: dropout draws the CPU's Philox mask and scales by 1/(1-p)", "[gpu]") {
  for (DType dt : kTypes) {
    for (double p : {0.1, 0.5, 0.9}) {
      const Tensor x = rnd({3, 1001}, dt);
      Generator gc(1234), gg(1234);
      Tensor xc = x.clone(), xg = x.to(kGpu);
      xc.requires_grad_();
      xg.requires_grad_();
      const Tensor yc = dropout(xc, {.p = p, .generator = &gc});
      const Tensor yg = dropout(xg, {.p = p, .generator = &gg});
      const std::string what = std::string("dropout ") + dtype_name(dt) + " p=" + std::to_string(p);
      check_close(yc, yg, gpu_test::exact(), what);  // the same bits: same mask, same scaling
      const Tensor dy = rnd(x.shape(), dt);
      yc.backward(dy);
      yg.backward(dy.to(kGpu));
      check_close(xc.grad(), xg.grad(), gpu_test::exact(), what + " grad");
      CHECK(gc.state().offset == gg.state().offset);
    }
  }
}

TEST_CASE("gpu: embedding gathers rows and scatter-adds repeated indices, padding_idx excluded", "[gpu]") {
  for (DType dt : kTypes) {
    const Tensor idx = from_vector(std::vector<int64_t>{3, 0, 3, 7, 3, 1, 0, 2, 7, 5}, {2, 5}, {.dtype = DType::I64});
    for (int64_t pad : {-1, 3}) {
      check_op({idx, rnd({8, 33}, dt)}, {false, true},
               [&](const std::vector<Tensor>& in) { return embedding(in[0], in[1], {.padding_idx = pad}); }, tol(dt),
               std::string("embedding ") + dtype_name(dt) + " padding_idx " + std::to_string(pad));
    }
  }
}

TEST_CASE("gpu: max, avg and adaptive pooling, forward and backward", "[gpu][pool]") {
  for (DType dt : kTypes) {
    const std::string d = dtype_name(dt);
    const Tensor x = rnd({2, 3, 11, 9}, dt);
    check_op({x}, {true}, [](const std::vector<Tensor>& in) { return max_pool2d(in[0], {.kernel_size = 2}); },
             tol(dt), "max_pool2d 2 " + d);
    check_op({x}, {true},
             [](const std::vector<Tensor>& in) {
               return max_pool2d(in[0], {.kernel_size = 3, .stride = 2, .padding = 1, .dilation = 1, .ceil_mode = true});
             },
             tol(dt), "max_pool2d 3/2/1 ceil " + d);
    check_op({x}, {true},
             [](const std::vector<Tensor>& in) {
               return avg_pool2d(in[0], {.kernel_size = 3, .stride = 2, .padding = 1, .count_include_pad = false});
             },
             tol(dt), "avg_pool2d 3/2/1 exclude pad " + d);
    check_op({x}, {true}, [](const std::vector<Tensor>& in) { return adaptive_avg_pool2d(in[0], {4, 3}); }, tol(dt),
             "adaptive_avg_pool2d (4,3) " + d);
  }
}

TEST_CASE("gpu: linear with and without bias, with autograd", "[gpu]") {
  for (DType dt : kTypes) {
    const std::string d = dtype_name(dt);
    check_op({rnd({17, 33}, dt), rnd({9, 33}, dt, 0.2), rnd({9}, dt)}, {true, true, true},
             [](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); }, 4 * tol(dt), "linear " + d);
    check_op({rnd({2, 5, 33}, dt), rnd({9, 33}, dt, 0.2)}, {true, true},
             [](const std::vector<Tensor>& in) { return linear(in[0], in[1]); }, 4 * tol(dt), "linear 3-D, no bias " + d);
  }
}

namespace {

// Five steps of `make(params)` on a CPU and a GPU copy of two parameters of dtype dt, with fixed
// gradients (their scale grows with the step), each step optionally clipped; the parameters and the
// clip norms must agree.
void check_optimizer(DType dt, const std::string& what,
                     const std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>& make,
                     const std::function<double(const std::vector<Tensor>&)>& clip = {}) {
  const Tensor w0 = rnd({7, 5}, dt), b0 = rnd({5}, dt);
  std::vector<Tensor> pc = {w0.clone(), b0.clone()}, pg = {w0.to(kGpu), b0.to(kGpu)};
  for (Tensor& p : pc) p.requires_grad_();
  for (Tensor& p : pg) p.requires_grad_();
  auto oc = make(pc), og = make(pg);
  for (int k = 0; k < 5; ++k) {
    for (size_t i = 0; i < pc.size(); ++i) {
      const Tensor g = rnd(pc[i].shape(), dt, 0.5 + k);
      pc[i].set_grad(g);
      pg[i].set_grad(g.to(kGpu));
    }
    if (clip) {
      const double nc = clip(pc), ng = clip(pg);
      INFO(what << " step " << k << ": clip norm cpu " << nc << " gpu " << ng);
      CHECK(std::fabs(nc - ng) <= 4 * tol(dt) * std::fabs(nc));
    }
    oc->step();
    og->step();
  }
  for (size_t i = 0; i < pc.size(); ++i)
    check_close(pc[i], pg[i], floored(4 * tol(dt)), what + " param " + std::to_string(i));
}

}  // namespace

TEST_CASE("gpu: SGD, Adam, AdamW and RMSprop steps match the CPU for every parameter dtype", "[gpu][optim]") {
  for (DType dt : kTypes) {
    const std::string d = dtype_name(dt);
    check_optimizer(dt, "SGD momentum nesterov wd " + d, [](std::vector<Tensor> p) {
      return std::make_unique<optim::SGD>(std::move(p), optim::SGDArgs{
          .lr = 0.1, .momentum = 0.9, .dampening = 0, .weight_decay = 0.01, .nesterov = true});
    });
    check_optimizer(dt, "SGD dampening " + d, [](std::vector<Tensor> p) {
      return std::make_unique<optim::SGD>(std::move(p), optim::SGDArgs{.lr = 0.05, .momentum = 0.5, .dampening = 0.3});
    });
    check_optimizer(dt, "Adam amsgrad wd " + d, [](std::vector<Tensor> p) {
      return std::make_unique<optim::Adam>(std::move(p), optim::AdamArgs{.lr = 0.01, .weight_decay = 0.1, .amsgrad = true});
    });
    check_optimizer(dt, "AdamW " + d, [](std::vector<Tensor> p) {
      return std::make_unique<optim::AdamW>(std::move(p), optim::AdamWArgs{.lr = 0.01, .weight_decay = 0.05});
    });
    check_optimizer(dt, "RMSprop centered momentum wd " + d, [](std::vector<Tensor> p) {
      return std::make_unique<optim::RMSprop>(
          std::move(p), optim::RMSpropArgs{.lr = 0.01, .alpha = 0.9, .weight_decay = 0.05, .momentum = 0.5, .centered = true});
    });
    check_optimizer(dt, "RMSprop " + d, [](std::vector<Tensor> p) {
      return std::make_unique<optim::RMSprop>(std::move(p), optim::RMSpropArgs{.lr = 0.01});
    });
    // low-precision parameters without masters: the stochastic store draws the host's Philox bits, the Kahan
    // store keeps its compensation on the device
    for (const ParamRounding r : {ParamRounding::Stochastic, ParamRounding::Kahan}) {
      const std::string how = r == ParamRounding::Kahan ? "Kahan " : "stochastic ";
      check_optimizer(dt, "SGD momentum, masters off, " + how + d, [r](std::vector<Tensor> p) {
        auto o = std::make_unique<optim::SGD>(std::move(p), optim::SGDArgs{.lr = 0.05, .momentum = 0.9});
        o->set_master_weights(optim::MasterWeights::Off);
        o->set_param_rounding(r, 3);
        return o;
      });
      check_optimizer(dt, "Adam, masters off, " + how + d, [r](std::vector<Tensor> p) {
        auto o = std::make_unique<optim::Adam>(std::move(p), optim::AdamArgs{.lr = 0.01});
        o->set_master_weights(optim::MasterWeights::Off);
        o->set_param_rounding(r, 3);
        return o;
      });
    }
  }
}

TEST_CASE("gpu: clip_grad_norm_ (2-norm, inf-norm) and clip_grad_value_ for every gradient dtype", "[gpu][optim]") {
  auto sgd = [](std::vector<Tensor> p) {
    return std::make_unique<optim::SGD>(std::move(p), optim::SGDArgs{.lr = 0.1});
  };
  for (DType dt : kTypes) {
    const std::string d = dtype_name(dt);
    check_optimizer(dt, "clip_grad_norm_ 2 " + d, sgd,
                    [](const std::vector<Tensor>& p) { return optim::clip_grad_norm_(p, 1.0); });
    check_optimizer(dt, "clip_grad_norm_ inf " + d, sgd, [](const std::vector<Tensor>& p) {
      return optim::clip_grad_norm_(p, 0.5, std::numeric_limits<double>::infinity());
    });
    check_optimizer(dt, "clip_grad_value_ " + d, sgd, [](const std::vector<Tensor>& p) {
      optim::clip_grad_value_(p, 0.7);
      return 0.0;
    });
  }
}

TEST_CASE("gpu: GradScaler unscales BF16 and F64 gradients as on the CPU", "[gpu][amp]") {
  for (DType dt : {DType::BF16, DType::F64, DType::F16, DType::F32}) {
    const Tensor p0 = rnd({6, 4}, dt), g = rnd({6, 4}, dt, 1024.0);
    std::vector<Tensor> pc = {p0.clone()}, pg = {p0.to(kGpu)};
    pc[0].requires_grad_();
    pg[0].requires_grad_();
    optim::SGD oc(pc, {.lr = 0.5}), og(pg, {.lr = 0.5});
    amp::GradScaler sc({.init_scale = 1024.0}), sg({.init_scale = 1024.0});
    pc[0].set_grad(g);
    pg[0].set_grad(g.to(kGpu));
    sc.step(oc);
    sg.step(og);
    sc.update();
    sg.update();
    check_close(pc[0], pg[0], floored(tol(dt)), std::string("GradScaler step ") + dtype_name(dt));
    CHECK(sc.get_scale() == sg.get_scale());
  }
}
