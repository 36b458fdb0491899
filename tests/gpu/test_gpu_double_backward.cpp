// Higher-order gradients on the GPU against the CPU backend: a gradient penalty (autograd::grad with create_graph,
// then backward through the penalty) over models that use every differentiable-twice family: linear with its fused
// ReLU, tanh, softmax, embedding, where, sums and means, cross_entropy (ignore_index, label smoothing) and mse_loss;
// and a CNN critic's input-gradient penalty (WGAN-GP) through conv2d, batch_norm, layer_norm, exact gelu, max and
// average pooling, dropout, slices and the max reduction.
#include <catch2/catch.hpp>

#include <vector>

#include "gpu/compare.h"
#include "halfgrad.h"
#include "test_util.h"

using namespace hg;
using hg::gpu_test::check_close;
using hg::gpu_test::kGpu;

namespace {

// The parameters' gradients of loss + |d loss / d params| (the penalty's second derivatives included), on dev.
std::vector<Tensor> penalised_grads(const std::vector<Tensor>& init, Device dev) {
  std::vector<Tensor> p;
  for (const Tensor& t : init) {
    p.push_back(t.to(dev).detach());
    p.back().requires_grad_();
  }
  const Tensor idx = from_vector(std::vector<int64_t>{3, 0, 1, 3, 2, 0}, {6}, {.dtype = DType::I64}).to(dev);
  const Tensor target = from_vector(std::vector<int64_t>{1, 4, -100, 0, 2, 3}, {6}, {.dtype = DType::I64}).to(dev);
  const Tensor x = embedding(idx, p[0], {.padding_idx = 2});                  // (6, 8)
  const Tensor h = linear(x, p[1], p[2], Activation::Relu);                  // (6, 16)
  const Tensor t = tanh(linear(h, p[3]));                                     // (6, 5)
  const Tensor gated = where(gt(t.detach(), 0.0), t * t, t);
  const Tensor loss = cross_entropy(gated * 3.0, target, {.label_smoothing = 0.1}) +
                      mse_loss(softmax(t, 1), full(t.shape(), 0.2, {.dtype = t.dtype(), .device = dev}));
  const std::vector<Tensor> g = autograd::grad({loss}, p, {}, {.create_graph = true});
  Tensor norm2 = zeros({}, {.dtype = loss.dtype(), .device = dev});
  for (const Tensor& gk : g) norm2 = norm2 + sum(gk * gk);
  (loss + sqrt(norm2) + mean(g[1])).backward();
  std::vector<Tensor> out;
  for (const Tensor& q : p) out.push_back(q.grad());
  return out;
}

// The parameters' gradients of a CNN critic's penalty (|d critic / d x| - 1)^2, on dev: the conv, norm, pooling and
// dropout double backwards on the device. Dropout draws the same mask on both backends (one Philox stream).
std::vector<Tensor> cnn_penalty_grads(const std::vector<Tensor>& init, const Tensor& x_init, Device dev) {
  std::vector<Tensor> p;
  for (const Tensor& t : init) p.push_back(t.to(dev).detach().requires_grad_());
  const Tensor x = x_init.to(dev).detach().requires_grad_();
  Generator gen(5);
  Tensor h = conv2d(x, p[0], Tensor(), {.stride = 1, .padding = 1});  // (2,4,6,6); a bias here batch_norm removes
  h = gelu(batch_norm(h, Tensor(), Tensor(), p[2], p[3], {.training = true}));
  h = max_pool2d(h, {.kernel_size = 2}) + avg_pool2d(h, {.kernel_size = 3, .stride = 2, .padding = 1});  // (2,4,3,3)
  h = conv2d(h, p[4], p[1], {.groups = 2});                                                        // (2,4,1,1)
  h = layer_norm(h.reshape({2, 4}), {4}, p[5], Tensor());
  h = dropout(h, {.p = 0.25, .generator = &gen});
  const Tensor critic = sum(h.slice(1, 0, 3) * 2.0) + max(h);
  const Tensor gx = autograd::grad({critic}, {x}, {}, {.create_graph = true})[0];
  pow(sqrt(sum(gx * gx)) - 1.0, 2.0).backward();
  std::vector<Tensor> out;
  for (const Tensor& q : p) out.push_back(q.grad());
  return out;
}

}  // namespace

TEST_CASE("gpu: a CNN critic's gradient penalty (conv, norms, pooling, dropout) equals the CPU's",
          "[gpu][autograd][double]") {
  for (const DType dt : {DType::F32, DType::F64}) {
    INFO(dtype_name(dt));
    Generator gen(13);
    const std::vector<Tensor> init{mul(randn({4, 3, 3, 3}, {.dtype = dt}, &gen), 0.3),
                                   mul(randn({4}, {.dtype = dt}, &gen), 0.1),
                                   add(mul(randn({4}, {.dtype = dt}, &gen), 0.1), 1.0),
                                   mul(randn({4}, {.dtype = dt}, &gen), 0.1),
                                   mul(randn({4, 2, 3, 3}, {.dtype = dt}, &gen), 0.3),
                                   add(mul(randn({4}, {.dtype = dt}, &gen), 0.1), 1.0)};
    const Tensor x = randn({2, 3, 6, 6}, {.dtype = dt}, &gen);
    const std::vector<Tensor> cpu = cnn_penalty_grads(init, x, Device::cpu()), gpu = cnn_penalty_grads(init, x, kGpu);
    for (size_t k = 0; k < cpu.size(); ++k) {
      REQUIRE(cpu[k].defined());
      REQUIRE(gpu[k].defined());
      check_close(cpu[k], gpu[k], dt == DType::F64 ? hg::gpu_test::Tol{1e-9, 1e-11} : hg::gpu_test::Tol{1e-3, 1e-4},
                  "parameter " + std::to_string(k));
    }
  }
}

TEST_CASE("gpu: a gradient penalty's double backward equals the CPU's", "[gpu][autograd][double]") {
  for (const DType dt : {DType::F32, DType::F64}) {
    INFO(dtype_name(dt));
    Generator gen(11);
    const std::vector<Tensor> init{randn({4, 8}, {.dtype = dt}, &gen), mul(randn({16, 8}, {.dtype = dt}, &gen), 0.4),
                                   mul(randn({16}, {.dtype = dt}, &gen), 0.1), mul(randn({5, 16}, {.dtype = dt}, &gen), 0.3)};
    const std::vector<Tensor> cpu = penalised_grads(init, Device::cpu()), gpu = penalised_grads(init, kGpu);
    for (size_t k = 0; k < cpu.size(); ++k) {
      REQUIRE(gpu[k].defined());
      check_close(cpu[k], gpu[k], dt == DType::F64 ? hg::gpu_test::Tol{1e-10, 1e-12} : hg::gpu_test::Tol{2e-4, 2e-5},
                  "parameter " + std::to_string(k));
    }
  }
}
