// Built against the installed package: a forward/backward through the public API, then one
// optimizer step on an nn module (so the installed nn/ and optim/ headers are usable too), then whether
// CUDA is usable and, if not, why.
#include <cstdio>

#include <halfgrad.h>

int main() {
  hg::Tensor w = hg::from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2}).requires_grad_();
  hg::Tensor x = hg::ones({3, 2}, {.dtype = hg::DType::F16});
  hg::Tensor loss = hg::sum(hg::matmul(x, w.to(hg::DType::F16)).to(hg::DType::F32));
  loss.backward();
  const auto g = w.grad().to_vector<float>();  // each weight gets the 3 ones of its column
  std::printf("loss=%g grad=[%g %g %g %g]\n", loss.item(), g[0], g[1], g[2], g[3]);
  if (!(loss.item() == 30.0 && g[0] == 3 && g[3] == 3)) return 1;

  hg::nn::Linear layer(2, 1);
  hg::optim::SGD opt(layer.parameters(), {.lr = 0.1});
  const hg::Tensor before = layer.weight.clone();
  hg::mse_loss(layer.forward(hg::ones({4, 2})), hg::zeros({4, 1})).backward();
  opt.step();
  const double moved = hg::sum(hg::abs(layer.weight - before)).item();
  std::printf("sgd step moved the weights by %g\n", moved);
  // run.cmake checks that an installed CUDA build found its backend library (libhalfgrad_cuda) at run time.
  std::printf("cuda: %s\n", hg::cuda::is_available() ? "available" : hg::cuda::unavailable_reason().c_str());
  return moved > 0 ? 0 : 1;
}
