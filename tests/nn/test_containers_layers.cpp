// ModuleList, ModuleDict, Conv1d, BatchNorm1d, and a user's own module (examples/residual_block.h).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "examples/residual_block.h"
#include "halfgrad.h"
#include "nn/nn.h"
#include "optim/sgd.h"
#include "test_util.h"

using namespace hg;
using Catch::Contains;
using test::vals;

TEST_CASE("ModuleList: registered children in order, indexed, iterated, typed", "[nn][containers]") {
  nn::ModuleList list(nn::Linear(3, 4), nn::ReLU());
  list.push_back(std::make_shared<nn::Linear>(4, 2));
  CHECK(list.size() == 3);
  std::vector<std::string> names;
  for (const auto& [n, p] : list.named_parameters()) names.push_back(n);
  CHECK(names == std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"});
  CHECK(list[-1]->type_name() == "Linear");
  CHECK(list.at<nn::Linear>(2).out_features == 2);
  CHECK_THROWS_WITH(list.at<nn::Linear>(1), Contains("is a ReLU"));
  CHECK_THROWS_WITH(list[3], Contains("out of range"));
  std::vector<std::string> types;
  for (const auto& m : list) types.push_back(m->type_name());
  CHECK(types == std::vector<std::string>{"Linear", "ReLU", "Linear"});
  nn::ModuleList more{nn::Tanh()};
  list.extend(more);
  CHECK(list.size() == 4);
  CHECK(list[3].get() == more[0].get());  // shared, as torch's extend
  CHECK_THROWS_WITH(list.forward(ones({1, 3})), Contains("no single-tensor forward"));
  list.eval();
  CHECK_FALSE(list[0]->is_training());
}

TEST_CASE("ModuleDict: modules by key, in insertion order", "[nn][containers]") {
  nn::ModuleDict dict({{"enc", std::make_shared<nn::Linear>(3, 4)}, {"act", std::make_shared<nn::GELU>()}});
  dict.insert("dec", nn::Linear(4, 3));
  CHECK(dict.keys() == std::vector<std::string>{"enc", "act", "dec"});
  CHECK(dict.contains("act"));
  CHECK_FALSE(dict.contains("x"));
  CHECK(dict.size() == 3);
  CHECK(dict.state_dict().count("dec.weight") == 1);
  CHECK_THROWS_WITH(dict["missing"], Contains("'enc', 'act', 'dec'"));
  dict.insert("act", nn::ReLU());  // replaces, keeps the place
  CHECK(dict["act"]->type_name() == "ReLU");
  CHECK(dict.keys()[1] == "act");
  CHECK(dict.ptr<nn::Linear>("enc")->in_features == 3);
  CHECK_THROWS_WITH(dict.at<nn::Linear>("act"), Contains("is a ReLU"));
  CHECK_THROWS_WITH(dict.insert("a.b", nn::ReLU()), Contains("a.b"));
  int n = 0;
  for (const auto& [k, m] : dict) n += !k.empty() && m != nullptr;
  CHECK(n == 3);
}

TEST_CASE("Conv1d is the 1-D convolution torch defines", "[nn][conv1d]") {
  manual_seed(3);
  for (int64_t groups : {1, 2}) {
    INFO("groups " << groups);
    nn::Conv1d conv(4, 6, 3, {.stride = 2, .padding = 1, .dilation = 2, .groups = groups});
    CHECK(conv.weight.shape() == Shape{6, 4 / groups, 3});
    const Tensor x = randn({2, 4, 11});
    const Tensor y = conv(x);
    const int64_t len = (11 + 2 * 1 - 2 * (3 - 1) - 1) / 2 + 1;
    REQUIRE(y.shape() == Shape{2, 6, len});
    // y[n][o][l] = b[o] + sum over the group's channels c and taps k of w[o][c][k] x[n][c][2l + 2k - 1]
    const auto xv = vals(x), wv = vals(conv.weight), bv = vals(conv.bias), yv = vals(y);
    const int64_t cg = 4 / groups, og = 6 / groups;
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t o = 0; o < 6; ++o)
        for (int64_t l = 0; l < len; ++l) {
          double want = bv[static_cast<size_t>(o)];
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t k = 0; k < 3; ++k) {
              const int64_t at = 2 * l + 2 * k - 1, ch = (o / og) * cg + c;
              if (at >= 0 && at < 11)
                want += wv[static_cast<size_t>((o * cg + c) * 3 + k)] * xv[static_cast<size_t>((n * 4 + ch) * 11 + at)];
            }
          CHECK(std::fabs(yv[static_cast<size_t>((n * 6 + o) * len + l)] - want) < 1e-4);
        }
    CHECK(conv(x.select(0, 1)).shape() == Shape{6, len});  // unbatched (C, L)
  }
  // gradients reach the (out, in, k) weight through the view the conv2d reads
  nn::Conv1d conv(2, 3, 2);
  conv(randn({1, 2, 5})).sum().backward();
  CHECK(conv.weight.grad().shape() == Shape{3, 2, 2});
  CHECK_THROWS_WITH(conv(randn({1, 2, 5, 5})), Contains("Conv1d"));
  CHECK_THROWS_WITH(nn::Conv1d(3, 4, 2, {.groups = 2}), Contains("divisible"));
}

TEST_CASE("BatchNorm1d normalises (N, C) and (N, C, L) per channel", "[nn][batchnorm1d]") {
  manual_seed(5);
  nn::BatchNorm1d bn(3);
  const Tensor x = add(mul(randn({64, 3}), 2.0), 5.0);
  const Tensor y = bn(x);
  const auto m = vals(y.mean({0})), v = vals(var(y, {0}, {.correction = 0}));
  for (int c = 0; c < 3; ++c) {
    CHECK(std::fabs(m[static_cast<size_t>(c)]) < 1e-5);
    CHECK(std::fabs(v[static_cast<size_t>(c)] - 1.0) < 1e-3);
  }
  // running_mean = 0.9 * 0 + 0.1 * the batch mean (torch's momentum)
  const auto bm = vals(x.mean({0}));
  CHECK(std::fabs(vals(bn.running_mean)[0] - 0.1 * bm[0]) < 1e-5);
  CHECK(bn.num_batches_tracked.item<int64_t>() == 1);
  CHECK(bn(randn({8, 3, 7})).shape() == Shape{8, 3, 7});
  CHECK_THROWS_WITH(bn(randn({2, 3, 4, 4})), Contains("BatchNorm1d"));
  CHECK(bn.type_name() == "BatchNorm1d");
  bn.eval();
  CHECK(vals(bn(x)) != vals(y));  // eval: the running statistics
}

TEST_CASE("a user's own module: residual blocks in a ModuleList train and round-trip their state", "[nn][custom]") {
  manual_seed(7);
  example::SmallResNet net(1, {4, 4, 8}, 3);
  std::vector<std::string> names;
  for (const auto& [n, p] : net.named_parameters()) names.push_back(n);
  CHECK(names.front() == "blocks.0.conv1.weight");
  CHECK(std::find(names.begin(), names.end(), "blocks.2.project.weight") != names.end());
  CHECK(std::find(names.begin(), names.end(), "blocks.1.project.weight") == names.end());  // 4 -> 4: no projection
  const Tensor x = randn({8, 1, 6, 6});
  const Tensor labels = from_vector(std::vector<int64_t>{0, 1, 2, 0, 1, 2, 0, 1}, {8});
  optim::SGD opt(net.parameters(), {.lr = 0.1, .momentum = 0.9});
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    opt.zero_grad();
    Tensor loss = cross_entropy(net(x), labels);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item();
  }
  CHECK(last < first * 0.5);  // it learns the 8 examples
  example::SmallResNet copy(1, {4, 4, 8}, 3);
  copy.load_state_dict(net.state_dict());
  net.eval();
  copy.eval();
  CHECK(vals(copy(x)) == vals(net(x)));
}

TEST_CASE("libtorch's chained options build the modules torch prints, next to the designated initializers",
          "[nn][options]") {
  nn::Sequential s(nn::Linear(nn::LinearOptions(4, 5).bias(false)),
                   nn::Conv1d(nn::Conv1dOptions(2, 4, 3).stride(2).padding(1).bias(false)),
                   nn::BatchNorm2d(nn::BatchNorm2dOptions(8).eps(1e-3).momentum(0.01).affine(false)),
                   nn::BatchNorm1d(nn::BatchNorm1dOptions(8).track_running_stats(false)),
                   nn::LayerNorm(nn::LayerNormOptions({6}).eps(1e-6).elementwise_affine(false)),
                   nn::Embedding(nn::EmbeddingOptions(10, 3).padding_idx(-1)),
                   nn::Dropout(nn::DropoutOptions().p(0.2)),
                   nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2).padding(1)),
                   nn::AvgPool2d(nn::AvgPool2dOptions(2).count_include_pad(false)),
                   nn::Conv2d(nn::Conv2dOptions(1, 16, 3).padding(1).bias(false)));
  std::ostringstream os;
  os << s;
  // torch 1.13's repr of the same modules built with keyword arguments
  CHECK(os.str() ==
        "Sequential(\n"
        "  (0): Linear(in_features=4, out_features=5, bias=False)\n"
        "  (1): Conv1d(2, 4, kernel_size=(3,), stride=(2,), padding=(1,), bias=False)\n"
        "  (2): BatchNorm2d(8, eps=0.001, momentum=0.01, affine=False, track_running_stats=True)\n"
        "  (3): BatchNorm1d(8, eps=1e-05, momentum=0.1, affine=True, track_running_stats=False)\n"
        "  (4): LayerNorm((6,), eps=1e-06, elementwise_affine=False)\n"
        "  (5): Embedding(10, 3, padding_idx=9)\n"
        "  (6): Dropout(p=0.2, inplace=False)\n"
        "  (7): MaxPool2d(kernel_size=3, stride=2, padding=1, dilation=1, ceil_mode=False)\n"
        "  (8): AvgPool2d(kernel_size=2, stride=2, padding=0)\n"
        "  (9): Conv2d(1, 16, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), bias=False)\n"
        ")");
  // the getters read what was set; a setter returns the options, so they chain
  const auto c = nn::Conv1dOptions(2, 4, 3).dilation(2).groups(2);
  CHECK(c.dilation() == 2);
  CHECK(c.groups() == 2);
  CHECK(c.stride() == 1);
  CHECK(nn::MaxPool2dOptions(3).stride() == Size2(3));
  // the same module either way: the designated initializers and the chained options give equal state
  nn::Embedding a(10, 3, {.padding_idx = -1});
  CHECK(a.options.padding_idx == 9);
  CHECK(vals(a.weight.select(0, 9)) == std::vector<double>{0, 0, 0});
  CHECK_THROWS_WITH(nn::Embedding(10, 3, {.padding_idx = 10}), Contains("padding_idx=10"));
  CHECK_THROWS_WITH(nn::Embedding(nn::EmbeddingOptions(10, 3).padding_idx(-11)), Contains("padding_idx=-11"));
  nn::LayerNorm ln(nn::LayerNormOptions({6}).eps(1e-6));
  CHECK(ln.options.eps == 1e-6);
  CHECK(ln.weight.defined());
}
