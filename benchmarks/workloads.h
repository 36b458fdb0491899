#pragma once
// The training workloads the benchmarks share (bench_train, bench_ddp): the shapes, optimizers and steps that
// benchmarks/torch/train_workloads.py runs in PyTorch.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "halfgrad.h"
#include "nn/nn.h"
#include "optim/adam.h"
#include "optim/sgd.h"

namespace hg::bench {

struct Workload {
  std::string name;
  int default_steps;
  std::function<std::shared_ptr<nn::Module>()> model;
  std::function<std::unique_ptr<hg::optim::Optimizer>(nn::Module&)> optimizer;
  hg::Shape input;
  int64_t classes;  // > 0: cross-entropy over this many classes; 0: MSE against a target like the output
  double label_smoothing = 0.0;  // cross-entropy's
  enum class Schedule { Constant, OneCycle } schedule = Schedule::Constant;  // OneCycle: max_lr = the optimizer's lr
  bool bf16 = false;  // forward and loss under amp::Autocast(device, BF16) (PyTorch: torch.autocast)
  bool fp16_scaler = false;  // forward and loss under amp::Autocast(device, F16), a GradScaler (Apex O1)
};

inline std::vector<Workload> fp32_workloads() {
  using Seq = nn::Sequential;
  return {
      {"tiny", 2000, [] { return std::make_shared<Seq>(nn::Linear(64, 64), nn::ReLU(), nn::Linear(64, 10)); },
       [](nn::Module& m) { return std::make_unique<hg::optim::SGD>(m.parameters(), hg::optim::SGDArgs{.lr = 0.01}); },
       {32, 64}, 10},
      {"mlp", 300,
       [] {
         return std::make_shared<Seq>(nn::Flatten(), nn::Linear(784, 256), nn::ReLU(), nn::Linear(256, 128),
                                      nn::ReLU(), nn::Linear(128, 10));
       },
       [](nn::Module& m) {
         return std::make_unique<hg::optim::SGD>(m.parameters(), hg::optim::SGDArgs{.lr = 0.01, .momentum = 0.9});
       },
       {64, 1, 28, 28}, 10},
      {"recipe", 40,
       [] {
         return std::make_shared<Seq>(nn::Linear(1024, 1024), nn::ReLU(), nn::Linear(1024, 1024), nn::ReLU(),
                                      nn::Linear(1024, 1024));
       },
       [](nn::Module& m) { return std::make_unique<hg::optim::SGD>(m.parameters(), hg::optim::SGDArgs{.lr = 1e-3}); },
       {256, 1024}, 0},
      {"cnn", 30,
       [] {
         return std::make_shared<Seq>(nn::Conv2d(1, 32, 3, {.padding = 1}), nn::ReLU(), nn::MaxPool2d({.kernel_size = 2}),
                                      nn::Conv2d(32, 64, 3, {.padding = 1}), nn::ReLU(),
                                      nn::MaxPool2d({.kernel_size = 2}), nn::Flatten(), nn::Linear(3136, 128),
                                      nn::ReLU(), nn::Linear(128, 10));
       },
       [](nn::Module& m) { return std::make_unique<hg::optim::Adam>(m.parameters(), hg::optim::AdamArgs{.lr = 1e-3}); },
       {128, 1, 28, 28}, 10},
      // the CNN people write (Conv-BN-ReLU x2, pooling, dropout; AdamW, OneCycleLR, label smoothing)
      {"bn_cnn", 30,
       [] {
         return std::make_shared<Seq>(nn::Conv2d(1, 32, 3, {.padding = 1}), nn::BatchNorm2d(32), nn::ReLU(),
                                      nn::Conv2d(32, 64, 3, {.padding = 1}), nn::BatchNorm2d(64), nn::ReLU(),
                                      nn::MaxPool2d({.kernel_size = 2}), nn::Dropout(0.25), nn::Flatten(),
                                      nn::Linear(64 * 14 * 14, 10));
       },
       [](nn::Module& m) {
         return std::make_unique<hg::optim::AdamW>(m.parameters(),
                                                   hg::optim::AdamWArgs{.lr = 1e-3, .weight_decay = 1e-2});
       },
       {128, 1, 28, 28}, 10, 0.1, Workload::Schedule::OneCycle},
  };
}

}  // namespace hg::bench
