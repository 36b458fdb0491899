// nn::Module forward hooks (torch's register_forward_hook): order, tensors, names, removal, and that
// Sequential and custom modules route their children's calls through operator().
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "core/rng.h"
#include "nn/nn.h"

using namespace hg;

namespace {

struct Call {
  std::string name;
  Tensor input, output;
};

// Hooks every module of m (m itself as "", first in named_modules) that append to `log`.
void hook_all(nn::Module& m, std::vector<Call>& log) {
  for (const auto& [name, child] : m.named_modules())
    child->register_forward_hook([&log, name = name](const nn::Module&, const Tensor& x, const Tensor& y) {
      log.push_back({name, x, y});
    });
}

// A module that calls its children through operator(), as the hook comment asks.
struct Block : nn::Module {
  std::shared_ptr<nn::Linear> fc = register_module("fc", std::make_shared<nn::Linear>(4, 4));
  std::shared_ptr<nn::Sequential> act =
      register_module("act", std::make_shared<nn::Sequential>(nn::ReLU(), nn::Tanh()));
  std::string type_name() const override { return "Block"; }
  Tensor forward(const Tensor& x) override { return (*act)((*fc)(x)); }
};

}  // namespace

TEST_CASE("forward hooks fire after each module call, children of Sequential first, with the right tensors",
          "[nn][hooks][cpu]") {
  manual_seed(1);
  nn::Sequential model(nn::Linear(3, 5), nn::ReLU(), nn::Linear(5, 2));
  std::vector<Call> log;
  hook_all(model, log);
  const Tensor x = randn({4, 3});
  const Tensor y = model(x);
  REQUIRE(log.size() == 4);
  CHECK(log[0].name == "0");
  CHECK(log[1].name == "1");
  CHECK(log[2].name == "2");
  CHECK(log[3].name == "");  // the container's own hook, after its children
  CHECK(log[0].input.same(x));
  CHECK(log[1].input.same(log[0].output));  // each child gets the previous output
  CHECK(log[2].input.same(log[1].output));
  CHECK(log[2].output.same(y));
  CHECK(log[3].input.same(x));
  CHECK(log[3].output.same(y));
  CHECK(log[1].output.shape() == Shape{4, 5});
  // ReLU's hook saw ReLU's output: no negative value
  for (double v : log[1].output.to_vector<double>()) CHECK(v >= 0.0);

  // as in torch, calling forward() directly skips this module's hooks (the children still fire)
  log.clear();
  model.forward(x);
  REQUIRE(log.size() == 3);
  CHECK(log.back().name == "2");
}

TEST_CASE("named_modules lists the module and its descendants with dotted names, and nested calls fire in call order",
          "[nn][hooks][cpu]") {
  Block block;
  std::vector<std::string> names;
  for (const auto& [n, m] : block.named_modules()) names.push_back(n);
  CHECK(names == std::vector<std::string>{"", "fc", "act", "act.0", "act.1"});  // torch's order, root first
  CHECK(block.named_modules()[0].second.get() == &block);
  CHECK(block.named_modules()[0].second.use_count() == 0);  // does not own the root
  CHECK(block.named_modules()[3].second.get() == (*block.act)[0].get());

  std::vector<Call> log;
  hook_all(block, log);
  block(ones({2, 4}));
  std::vector<std::string> order;
  for (const Call& c : log) order.push_back(c.name);
  CHECK(order == std::vector<std::string>{"fc", "act.0", "act.1", "act", ""});
}

TEST_CASE("hooks of one module run in registration order and can be removed", "[nn][hooks][cpu]") {
  nn::Linear fc(2, 2);
  std::vector<int> fired;
  const nn::HookHandle a =
      fc.register_forward_hook([&](const nn::Module&, const Tensor&, const Tensor&) { fired.push_back(1); });
  const nn::HookHandle b = fc.register_forward_hook([&](const nn::Module& m, const Tensor&, const Tensor&) {
    CHECK(&m == &fc);
    fired.push_back(2);
  });
  CHECK(a.id() != b.id());
  CHECK(fc.num_forward_hooks() == 2);
  fc(ones({1, 2}));
  CHECK(fired == std::vector<int>{1, 2});

  CHECK(fc.remove_forward_hook(a));
  CHECK_FALSE(fc.remove_forward_hook(a));  // already gone
  fired.clear();
  fc(ones({1, 2}));
  CHECK(fired == std::vector<int>{2});
  CHECK(fc.remove_forward_hook(b));
  CHECK(fc.num_forward_hooks() == 0);
  fired.clear();
  fc(ones({1, 2}));
  CHECK(fired.empty());
}

TEST_CASE("a forward hook's handle removes it, once, and outlives its module", "[nn][hooks][cpu]") {
  auto fc = std::make_shared<nn::Linear>(2, 2);
  int calls = 0;
  nn::HookHandle h = fc->register_forward_hook([&](const nn::Module&, const Tensor&, const Tensor&) { ++calls; });
  (*fc)(ones({1, 2}));
  CHECK(h.remove());
  CHECK_FALSE(h.remove());  // a second remove does nothing
  (*fc)(ones({1, 2}));
  CHECK(calls == 1);
  nn::HookHandle late = fc->register_forward_hook([](const nn::Module&, const Tensor&, const Tensor&) {});
  fc.reset();
  CHECK_FALSE(late.remove());  // the module is gone: nothing to remove, no crash
}

TEST_CASE("a hook may remove itself while it runs", "[nn][hooks][cpu]") {
  nn::ReLU relu;
  int calls = 0;
  nn::HookHandle h;
  h = relu.register_forward_hook([&](const nn::Module&, const Tensor&, const Tensor&) {
    ++calls;
    relu.remove_forward_hook(h);
  });
  relu(ones({3}));
  relu(ones({3}));
  CHECK(calls == 1);
  CHECK(relu.num_forward_hooks() == 0);
}

TEST_CASE("register_forward_hook rejects an empty function", "[nn][hooks][cpu]") {
  nn::ReLU relu;
  CHECK_THROWS_WITH(relu.register_forward_hook(nn::ForwardHook()),
                    Catch::Contains("ReLU: register_forward_hook got an empty std::function"));
}
