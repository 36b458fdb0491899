#pragma once
// Writing one's own module, the way README's "Your own module" describes it: a residual block
// y = relu(x + bn2(conv2(relu(bn1(conv1(x)))))) with a 1x1 projection when the channels change, and a small
// network built from a ModuleList of them. tests/nn/test_containers_layers.cpp trains and checks it.
#include <memory>
#include <string>
#include <vector>

#include "halfgrad.h"

namespace example {

class ResidualBlock : public hg::nn::Module {
 public:
  ResidualBlock(int64_t in, int64_t out) {
    // register_module makes each child part of parameters(), state_dict() ("conv1.weight", ...), to() and train()
    conv1 = register_module("conv1", std::make_shared<hg::nn::Conv2d>(hg::nn::Conv2dOptions(in, out, 3).padding(1).bias(false)));
    bn1 = register_module("bn1", std::make_shared<hg::nn::BatchNorm2d>(out));
    conv2 = register_module("conv2", std::make_shared<hg::nn::Conv2d>(out, out, 3, hg::nn::Conv2dArgs{.padding = 1, .bias = false}));
    bn2 = register_module("bn2", std::make_shared<hg::nn::BatchNorm2d>(out));
    if (in != out) project = register_module("project", std::make_shared<hg::nn::Conv2d>(in, out, 1));
  }
  std::string type_name() const override { return "ResidualBlock"; }  // what printing and errors call it
  hg::Tensor forward(const hg::Tensor& x) override {
    hg::Tensor h = hg::relu((*bn1)((*conv1)(x)));  // call children through operator(): forward hooks run
    h = (*bn2)((*conv2)(h));
    const hg::Tensor skip = project ? (*project)(x) : x;
    return hg::relu(h + skip);
  }
  std::shared_ptr<hg::nn::Conv2d> conv1, conv2, project;
  std::shared_ptr<hg::nn::BatchNorm2d> bn1, bn2;
};

// blocks (a ModuleList: registered, but run by this forward), then a global average pool and a linear head
class SmallResNet : public hg::nn::Module {
 public:
  SmallResNet(int64_t in, const std::vector<int64_t>& widths, int64_t classes) {
    blocks = register_module("blocks", std::make_shared<hg::nn::ModuleList>());
    for (int64_t w : widths) {
      blocks->push_back(ResidualBlock(in, w));
      in = w;
    }
    head = register_module("head", std::make_shared<hg::nn::Linear>(in, classes));
  }
  std::string type_name() const override { return "SmallResNet"; }
  hg::Tensor forward(const hg::Tensor& x) override {
    hg::Tensor h = x;
    for (const auto& block : *blocks) h = (*block)(h);
    return (*head)(hg::flatten(hg::adaptive_avg_pool2d(h, 1), 1));
  }
  std::shared_ptr<hg::nn::ModuleList> blocks;
  std::shared_ptr<hg::nn::Linear> head;
};

}  // namespace example
