// nn::Module: registration, names, train/eval, to(), state_dict round trips and errors, printing,
// PyTorch-compatible initialisation.
#include <catch2/catch.hpp>

#include <cmath>
#include <sstream>

#include "core/rng.h"
#include "nn/nn.h"
#include "ops/reduce.h"

using namespace hg;

namespace {
struct Net : nn::Module {
  std::shared_ptr<nn::Conv2d> conv = register_module("conv", std::make_shared<nn::Conv2d>(
                                                                  1, 4, 3, nn::Conv2dArgs{.padding = 1}));
  std::shared_ptr<nn::BatchNorm2d> bn = register_module("bn", std::make_shared<nn::BatchNorm2d>(4));
  std::shared_ptr<nn::Sequential> head = register_module(
      "head", std::make_shared<nn::Sequential>(nn::Flatten(), nn::Linear(4 * 5 * 5, 3)));
  std::string type_name() const override { return "Net"; }
  Tensor forward(const Tensor& x) override { return head->forward(relu(bn->forward(conv->forward(x)))); }
};
}  // namespace

TEST_CASE("named_parameters uses dotted names in registration order", "[nn][cpu]") {
  Net net;
  std::vector<std::string> names;
  for (const auto& [n, p] : net.named_parameters()) names.push_back(n);
  CHECK(names == std::vector<std::string>{"conv.weight", "conv.bias", "bn.weight", "bn.bias", "head.1.weight",
                                          "head.1.bias"});
  std::vector<std::string> bufs;
  for (const auto& [n, b] : net.named_buffers()) bufs.push_back(n);
  CHECK(bufs == std::vector<std::string>{"bn.running_mean", "bn.running_var", "bn.num_batches_tracked"});
  CHECK(net.num_parameters() == 4 * 9 + 4 + 4 + 4 + 3 * 100 + 3);
  for (const Tensor& p : net.parameters()) CHECK(p.requires_grad());
  // the layer's member and the registered parameter are one tensor
  CHECK(net.parameters()[0].same(net.conv->weight));
}

TEST_CASE("registration rejects duplicate and dotted names", "[nn][cpu]") {
  nn::Linear l(2, 3);
  CHECK_THROWS_WITH(l.register_parameter("weight", zeros({1})), Catch::Contains("'weight' is already registered"));
  CHECK_THROWS_WITH(l.register_buffer("a.b", zeros({1})), Catch::Contains("contain no '.'"));
}

TEST_CASE("train and eval propagate to children", "[nn][cpu]") {
  Net net;
  CHECK(net.is_training());
  net.eval();
  CHECK(!net.bn->is_training());
  CHECK(!(*net.head)[1]->is_training());
  net.train();
  CHECK(net.head->is_training());
}

TEST_CASE("Linear and Conv2d initialise like PyTorch: U(-1/sqrt(fan_in), 1/sqrt(fan_in))", "[nn][cpu]") {
  manual_seed(0);
  nn::Linear l(400, 300);
  const double bound = 1.0 / std::sqrt(400.0);
  const auto w = l.weight.to_vector<double>();
  double lo = 1, hi = -1, s2 = 0;
  for (double v : w) lo = std::min(lo, v), hi = std::max(hi, v), s2 += v * v;
  CHECK(lo >= -bound);
  CHECK(hi <= bound);
  CHECK(hi > 0.99 * bound);  // 120000 samples reach the edge
  // variance of U(-b, b) is b^2 / 3
  CHECK(s2 / static_cast<double>(w.size()) == Approx(bound * bound / 3).epsilon(0.02));
  for (double v : l.bias.to_vector<double>()) CHECK(std::abs(v) <= bound);
  nn::Conv2d c(8, 16, 3);
  const double cb = 1.0 / std::sqrt(8.0 * 9.0);
  for (double v : c.weight.to_vector<double>()) CHECK(std::abs(v) <= cb);
  // same seed, same weights
  manual_seed(0);
  nn::Linear l2(400, 300);
  CHECK(l2.weight.to_vector<float>() == l.weight.to_vector<float>());
}

TEST_CASE("state_dict round trip restores values into existing tensors", "[nn][cpu]") {
  manual_seed(1);
  Net a;
  manual_seed(2);
  Net b;
  const Tensor b_weight = b.conv->weight;  // identity must survive loading (optimizers hold it)
  b.load_state_dict(a.state_dict());
  CHECK(b.conv->weight.same(b_weight));
  for (const auto& [n, t] : a.state_dict()) CHECK(b.state_dict().at(n).to_vector<double>() == t.to_vector<double>());
  // the loaded module does not alias the source's storage
  CHECK(b.conv->weight.data_ptr() != a.conv->weight.data_ptr());
}

TEST_CASE("load_state_dict names missing, unexpected and wrongly shaped entries", "[nn][cpu]") {
  Net net;
  nn::StateDict sd = net.state_dict();
  sd.erase("bn.running_var");
  CHECK_THROWS_WITH(net.load_state_dict(sd), Catch::Contains("missing keys: 'bn.running_var'"));
  net.load_state_dict(sd, {.strict = false});
  sd = net.state_dict();
  sd["extra.weight"] = zeros({1});
  CHECK_THROWS_WITH(net.load_state_dict(sd), Catch::Contains("unexpected keys: 'extra.weight'"));
  sd = net.state_dict();
  sd["head.1.weight"] = zeros({3, 99});
  CHECK_THROWS_WITH(net.load_state_dict(sd), Catch::Contains("'head.1.weight' has shape [3, 99] in the state dict but [3, 100]"));
}

TEST_CASE("Module::to(DType) converts floating tensors in place and keeps I64 buffers", "[nn][cpu]") {
  Net net;
  const Tensor w = net.head->named_parameters()[0].second;
  net.to(DType::BF16);
  CHECK(w.dtype() == DType::BF16);
  CHECK(w.requires_grad());
  CHECK(net.bn->running_mean.dtype() == DType::BF16);
  CHECK(net.bn->num_batches_tracked.dtype() == DType::I64);
  CHECK_THROWS_WITH(net.to(DType::I64), Catch::Contains("not floating"));
}

TEST_CASE("forward, backward and zero_grad through a module tree", "[nn][cpu]") {
  manual_seed(5);
  Net net;
  const Tensor y = net.forward(randn({2, 1, 5, 5}));
  CHECK(y.shape() == Shape{2, 3});
  sum(y * y).backward();
  for (const auto& [n, p] : net.named_parameters()) {
    INFO(n);
    CHECK(p.grad().defined());
  }
  CHECK(net.bn->num_batches_tracked.item<int64_t>() == 1);
  net.zero_grad();
  for (const Tensor& p : net.parameters()) CHECK(!p.grad().defined());
}

TEST_CASE("operator<< prints the module tree like PyTorch", "[nn][cpu]") {
  nn::Sequential s(nn::Linear(784, 256), nn::ReLU(), nn::Dropout(0.25),
                   nn::MaxPool2d({.kernel_size = 2}), nn::Conv2d(1, 32, 3, {.padding = 1, .bias = false}));
  std::ostringstream os;
  os << s;
  CHECK(os.str() ==
        "Sequential(\n"
        "  (0): Linear(in_features=784, out_features=256, bias=True)\n"
        "  (1): ReLU()\n"
        "  (2): Dropout(p=0.25, inplace=False)\n"
        "  (3): MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)\n"
        "  (4): Conv2d(1, 32, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), bias=False)\n"
        ")");
  std::ostringstream nested;
  Net net;
  nested << net;
  CHECK(nested.str().find("  (head): Sequential(\n    (0): Flatten(start_dim=1, end_dim=-1)\n") !=
        std::string::npos);
  CHECK(nested.str().find("(bn): BatchNorm2d(4, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)") !=
        std::string::npos);
}

TEST_CASE("a module without a single-tensor forward says how to fix it", "[nn][cpu]") {
  struct Pair : nn::Module {
    std::string type_name() const override { return "Pair"; }
  };
  Pair p;
  CHECK_THROWS_WITH(p.forward(zeros({1})), Catch::Contains("Pair: this module has no single-tensor forward"));
}
