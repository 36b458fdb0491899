// Built against the installed package: a tiny forward/backward through the public API.
#include <cstdio>

#include <halfgrad.h>

int main() {
  hg::Tensor w = hg::from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2}).requires_grad_();
  hg::Tensor x = hg::ones({3, 2}, {.dtype = hg::DType::F16});
  hg::Tensor loss = hg::sum(hg::matmul(x, w.to(hg::DType::F16)).to(hg::DType::F32));
  loss.backward();
  const auto g = w.grad().to_vector<float>();  // each weight gets the 3 ones of its column
  std::printf("loss=%g grad=[%g %g %g %g]\n", loss.item(), g[0], g[1], g[2], g[3]);
  return loss.item() == 30.0 && g[0] == 3 && g[3] == 3 ? 0 : 1;
}
