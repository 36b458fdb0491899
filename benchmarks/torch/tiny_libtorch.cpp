// The "tiny" workload of benchmarks/bench_train.cpp in libtorch (C++), so the per-op overhead
// comparison has no Python in it. Built by benchmarks/compare_pytorch when libtorch-dev is installed.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <vector>

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 2000;
  torch::set_num_threads(threads);
  torch::manual_seed(0);
  torch::nn::Sequential model(torch::nn::Linear(64, 64), torch::nn::ReLU(), torch::nn::Linear(64, 10));
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.01));
  const auto x = torch::randn({32, 64});
  const auto target = torch::arange(32, torch::kLong).mul(7).remainder(10);
  auto step = [&] {
    opt.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(model->forward(x), target);
    loss.backward();
    opt.step();
  };
  for (int i = 0; i < std::max(3, steps / 10); ++i) step();
  std::vector<double> ms;
  for (int i = 0; i < steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    step();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  const double mean = std::accumulate(ms.begin(), ms.end(), 0.0) / ms.size();
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  std::printf("{\"framework\": \"libtorch 1.13\", \"workload\": \"tiny\", \"threads\": %d, \"steps\": %d, "
              "\"ms_per_step_median\": %.4f, \"ms_per_step_mean\": %.4f}\n", threads, steps, ms[ms.size() / 2], mean);
}
