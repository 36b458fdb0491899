// Autograd: the engine (seeds, accumulation, retain_graph), leaves and detach, grad mode, hooks,
// long graphs (no recursion, no leaks), diamonds, and mixed-precision gradients through casts.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "halfgrad.h"
#include "test_util.h"

using namespace hg;
using Catch::Contains;

namespace {

Tensor vec(std::vector<double> v, DType dt = DType::F32, bool grad = false) {
  const auto n = static_cast<int64_t>(v.size());
  return from_vector(v, {n}, {.dtype = dt, .requires_grad = grad});
}
Tensor scalar(double v, DType dt = DType::F32, bool grad = false) {
  return from_vector(std::vector<double>{v}, {}, {.dtype = dt, .requires_grad = grad});
}
std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

}  // namespace

TEST_CASE("backward with an implicit and an explicit seed", "[autograd]") {
  Tensor x = scalar(3, DType::F64, true);
  CHECK(x.is_leaf());
  CHECK_FALSE(x.grad().defined());
  Tensor y = x * x * 2.0;  // dy/dx = 4x
  CHECK_FALSE(y.is_leaf());
  CHECK(y.requires_grad());
  REQUIRE(y.grad_fn() != nullptr);
  y.backward();
  REQUIRE(x.grad().defined());
  CHECK(x.grad().shape() == x.shape());
  CHECK(x.grad().item() == 12);
  CHECK_FALSE(y.grad().defined());  // non-leaves keep no gradient

  Tensor v = vec({1, 2, 3}, DType::F32, true);
  Tensor w = v * 3.0 + 1.0;
  w.backward(vec({1, 10, 100}));
  CHECK(values(v.grad()) == std::vector<double>{3, 30, 300});
  // a one-element non-scalar output also takes the implicit seed
  Tensor o = vec({2}, DType::F32, true);
  (o * 5.0).backward();
  CHECK(values(o.grad()) == std::vector<double>{5});
  // a seed of another dtype is converted to the output's
  Tensor a = vec({1, 2}, DType::F32, true);
  (a * 2.0).backward(vec({0.5, 0.25}, DType::F64));
  CHECK(a.grad().dtype() == DType::F32);
  CHECK(values(a.grad()) == std::vector<double>{1, 0.5});
  // backward on the leaf itself
  Tensor l = vec({1, 2}, DType::F32, true);
  l.backward(vec({7, 8}));
  CHECK(values(l.grad()) == std::vector<double>{7, 8});
}

TEST_CASE("backward errors", "[autograd]") {
  Tensor x = vec({1, 2, 3}, DType::F32, true);
  Tensor y = x * 2.0;
  REQUIRE_THROWS_AS(y.backward(), Error);
  REQUIRE_THROWS_WITH(y.backward(), Contains("backward") && Contains("seed"));
  REQUIRE_THROWS_WITH(y.backward(vec({1, 2})), Contains("seed shape"));
  REQUIRE_THROWS_WITH(vec({1, 2}).backward(vec({1, 1})), Contains("backward"));
  REQUIRE_THROWS_WITH((vec({1}) * 2.0).backward(), Contains("requires_grad"));
  CHECK_FALSE(x.grad().defined());  // failed calls left nothing behind
  REQUIRE_THROWS_WITH(y.requires_grad_(false), Contains("requires_grad_"));
  REQUIRE_THROWS_WITH(y.requires_grad_(), Contains("leaf"));
  REQUIRE_THROWS_WITH(vec({1}, DType::I64).requires_grad_(), Contains("requires_grad_"));
  REQUIRE_THROWS_WITH(vec({1}).register_hook([](const Tensor&) { return Tensor(); }), Contains("register_hook"));
  REQUIRE_THROWS_WITH(x.set_grad(vec({1, 2})), Contains("set_grad"));
  REQUIRE_THROWS_WITH(x.set_grad(vec({1, 2, 3}, DType::F64)), Contains("set_grad"));
}

TEST_CASE("retain_graph: accumulation, and a second backward without it throws", "[autograd]") {
  Tensor x = vec({1, 2}, DType::F32, true);
  Tensor y = x * x;  // dy/dx = 2x
  const Tensor seed = vec({1, 1});
  y.backward(seed, {.retain_graph = true});
  CHECK(values(x.grad()) == std::vector<double>{2, 4});
  y.backward(seed, {.retain_graph = true});
  CHECK(values(x.grad()) == std::vector<double>{4, 8});
  y.backward(seed);  // frees the graph
  CHECK(values(x.grad()) == std::vector<double>{6, 12});
  REQUIRE_THROWS_AS(y.backward(seed), Error);
  REQUIRE_THROWS_WITH(y.backward(seed), Contains("retain_graph"));
  CHECK(values(x.grad()) == std::vector<double>{6, 12});
  // a fresh graph accumulates into the same leaf; zero_grad drops it
  (x * 10.0).backward(seed);
  CHECK(values(x.grad()) == std::vector<double>{16, 22});
  x.zero_grad();
  CHECK_FALSE(x.grad().defined());
  (x * 10.0).backward(seed);
  CHECK(values(x.grad()) == std::vector<double>{10, 10});
  x.set_grad(Tensor());
  CHECK_FALSE(x.grad().defined());
  x.set_grad(vec({5, 5}));
  CHECK(values(x.grad()) == std::vector<double>{5, 5});
}

TEST_CASE("detach stops gradients and shares storage", "[autograd]") {
  Tensor x = vec({2, 3}, DType::F32, true);
  Tensor d = x.detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.is_leaf());
  CHECK(d.data_ptr() == x.data_ptr());
  Tensor y = x * d;  // only the first factor carries a gradient: dy/dx = d
  y.backward(vec({1, 1}));
  CHECK(values(x.grad()) == std::vector<double>{2, 3});
  Tensor z = (x * 3.0).detach() * x;
  CHECK(z.requires_grad());
  x.zero_grad();
  z.backward(vec({1, 1}));
  CHECK(values(x.grad()) == std::vector<double>{6, 9});
  // a detached result does not require grad and cannot be backpropagated
  Tensor w = (x * 2.0).detach();
  CHECK_FALSE(w.requires_grad());
  CHECK(w.grad_fn() == nullptr);
  // requires_grad_ on the detached copy makes a new leaf
  w.requires_grad_();
  (w * 4.0).backward(vec({1, 1}));
  CHECK(values(w.grad()) == std::vector<double>{4, 4});
}

TEST_CASE("NoGradGuard: nested, thread-local", "[autograd]") {
  Tensor x = vec({1, 2}, DType::F32, true);
  const int64_t nodes = autograd::live_nodes();
  CHECK(autograd::grad_enabled());
  {
    NoGradGuard g1;
    CHECK_FALSE(autograd::grad_enabled());
    Tensor y = x * 2.0 + x;
    CHECK_FALSE(y.requires_grad());
    CHECK(y.grad_fn() == nullptr);
    CHECK(autograd::live_nodes() == nodes);
    {
      NoGradGuard g2;
      CHECK_FALSE(autograd::grad_enabled());
    }
    CHECK_FALSE(autograd::grad_enabled());  // the inner guard restores "off"
    CHECK_FALSE((x * x).requires_grad());
    bool other_thread_records = false;
    test::run_threads(1, [&](int) {
      Tensor z = x * 3.0;
      other_thread_records = z.requires_grad() && z.grad_fn() != nullptr;
    });
    CHECK(other_thread_records);
    CHECK_FALSE(autograd::grad_enabled());
  }
  CHECK(autograd::grad_enabled());
  CHECK((x * 2.0).requires_grad());
  {
    NoGradGuard g;
    autograd::set_grad_enabled(true);  // explicit re-enable inside a guard
    CHECK((x * 2.0).requires_grad());
  }
  CHECK(autograd::grad_enabled());
}

TEST_CASE("register_hook returns a handle that removes the hook (torch's RemovableHandle)", "[autograd]") {
  for (bool leaf : {true, false}) {
    INFO((leaf ? "leaf" : "non-leaf"));
    Tensor x = vec({1, 2}, DType::F32, true);
    Tensor h = leaf ? x : x * 1.0;
    int calls = 0;
    HookHandle a = h.register_hook([&](const Tensor& g) {
      ++calls;
      return g * 10.0;
    });
    HookHandle b = h.register_hook([&](const Tensor&) { return Tensor(); });
    CHECK(a.id() != b.id());
    (h * 2.0).sum().backward(Tensor(), {.retain_graph = true});
    CHECK(calls == 1);
    CHECK(values(x.grad()) == std::vector<double>{20, 20});
    CHECK(a.remove());
    CHECK_FALSE(a.remove());
    x.zero_grad();
    (h * 2.0).sum().backward();
    CHECK(calls == 1);  // removed: not called, the gradient unchanged
    CHECK(values(x.grad()) == std::vector<double>{2, 2});
  }
  HookHandle orphan;
  {
    Tensor y = vec({1}, DType::F32, true);
    orphan = y.register_hook([](const Tensor&) { return Tensor(); });
  }
  CHECK_FALSE(orphan.remove());  // the tensor is gone: nothing to remove, no crash
}

TEST_CASE("a post-accumulate hook sees the accumulated gradient as soon as nothing can add to it", "[autograd]") {
  // h = x * w1, y = h * w2 * w2: w2's gradient is complete once y's nodes ran, before h's node runs
  Tensor x = vec({1, 2}), w1 = vec({3, 4}, DType::F32, true), w2 = vec({5, 6}, DType::F32, true);
  Tensor h = x * w1;
  Tensor y = (h * w2) * w2;
  std::vector<std::string> order;
  std::vector<double> w2_seen;
  HookHandle p2 = w2.register_post_accumulate_grad_hook([&](const Tensor& p) {
    CHECK(p.same(w2));
    w2_seen = values(p.grad());
    order.push_back("w2");
  });
  w1.register_post_accumulate_grad_hook([&](const Tensor&) { order.push_back("w1"); });
  h.register_hook([&](const Tensor&) {
    order.push_back("h");
    return Tensor();
  });
  w2.set_grad(vec({100, 100}));  // accumulated into: the hook sees old + new
  y.sum().backward(Tensor(), {.retain_graph = true});
  CHECK(order == std::vector<std::string>{"w2", "h", "w1"});
  CHECK(w2_seen == std::vector<double>{100 + 2 * 3 * 5, 100 + 2 * 8 * 6});  // d(h w2^2)/dw2 = 2 h w2
  CHECK(values(w1.grad()) == std::vector<double>{25, 72});
  CHECK(p2.remove());
  order.clear();
  y.sum().backward();
  CHECK(order == std::vector<std::string>{"h", "w1"});

  Tensor nl = w1 * 2.0;
  CHECK_THROWS_WITH(nl.register_post_accumulate_grad_hook([](const Tensor&) {}), Contains("only leaf tensors"));
  CHECK_THROWS_WITH(x.register_post_accumulate_grad_hook([](const Tensor&) {}), Contains("does not require grad"));
}

TEST_CASE("queue_callback runs after every gradient is in place, and only inside a backward", "[autograd]") {
  CHECK_THROWS_WITH(autograd::queue_callback([] {}), Contains("no backward is running"));
  Tensor a = vec({1, 2}, DType::F32, true), b = vec({3}, DType::F32, true);
  std::vector<std::string> order;
  bool queued = false;
  a.register_post_accumulate_grad_hook([&](const Tensor&) {
    order.push_back("a");
    if (queued) return;
    queued = true;
    autograd::queue_callback([&] {
      CHECK(b.grad().defined());  // every leaf was handed over first
      order.push_back("callback");
      autograd::queue_callback([&] { order.push_back("queued by a callback"); });
    });
  });
  b.register_post_accumulate_grad_hook([&](const Tensor&) { order.push_back("b"); });
  ((a * 2.0).sum() + b.sum() * (a * 0.0).sum()).backward();
  REQUIRE(order.size() == 4);
  CHECK(order[2] == "callback");
  CHECK(order[3] == "queued by a callback");
}

TEST_CASE("hooks on leaves and non-leaves", "[autograd]") {
  SECTION("a leaf hook sees the accumulated gradient and can scale it") {
    Tensor x = vec({1, 2}, DType::F32, true);
    std::vector<double> seen;
    int calls = 0;
    x.register_hook([&](const Tensor& g) {
      seen = values(g);
      ++calls;
      return g * 10.0;
    });
    Tensor y = x * 3.0 + x * x;  // two paths into x: 3 + 2x
    y.backward(vec({1, 2}));
    CHECK(calls == 1);
    CHECK(seen == std::vector<double>{5, 14});
    CHECK(values(x.grad()) == std::vector<double>{50, 140});
  }
  SECTION("a non-leaf hook sees the gradient of that tensor and changes what flows on") {
    Tensor x = vec({1, 2}, DType::F32, true);
    Tensor h = x * 2.0;
    std::vector<double> seen;
    h.register_hook([&](const Tensor& g) {
      seen = values(g);
      return g * 0.5;
    });
    Tensor y = h * h;  // dy/dh = 2h = (4, 8)
    y.backward(vec({1, 1}));
    CHECK(seen == std::vector<double>{4, 8});
    CHECK(values(x.grad()) == std::vector<double>{4, 8});  // 0.5 * (4, 8) * 2
  }
  SECTION("a hook returning undefined keeps the gradient; hooks run in order") {
    Tensor x = vec({1}, DType::F32, true);
    std::vector<int> order;
    x.register_hook([&](const Tensor&) {
      order.push_back(1);
      return Tensor();
    });
    x.register_hook([&](const Tensor& g) {
      order.push_back(2);
      return g + 1.0;
    });
    (x * 2.0).backward();
    CHECK(order == std::vector<int>{1, 2});
    CHECK(values(x.grad()) == std::vector<double>{3});
  }
  SECTION("a hook that changes the shape or dtype is an error") {
    Tensor x = vec({1, 2}, DType::F32, true);
    Tensor h = x * 2.0;
    h.register_hook([](const Tensor&) { return ones({1}); });
    REQUIRE_THROWS_AS((h * 3.0).backward(vec({1, 1})), Error);
    Tensor x2 = vec({1, 2}, DType::F32, true);
    x2.register_hook([](const Tensor& g) { return g.to(DType::F64); });
    REQUIRE_THROWS_AS((x2 * 3.0).backward(vec({1, 1})), Error);
    CHECK_FALSE(x2.grad().defined());
  }
}

TEST_CASE("a 100,000-op chain runs backward and is freed without recursion or leaks", "[autograd]") {
  constexpr int kOps = 100000;
  const int64_t nodes = autograd::live_nodes();
  SECTION("multiply chain with backward") {
    Tensor x = scalar(1, DType::F64, true);
    Tensor y = x;
    for (int i = 0; i < kOps; ++i) y = y * 1.0001;
    CHECK(autograd::live_nodes() == nodes + kOps);
    y.backward();
    CHECK(x.grad().item() == Approx(std::pow(1.0001, kOps)).epsilon(1e-9));
    CHECK(y.item() == Approx(std::pow(1.0001, kOps)).epsilon(1e-9));
    y = Tensor();
    CHECK(autograd::live_nodes() == nodes);
  }
  SECTION("add chain freed without backward") {
    Tensor x = vec({0, 1}, DType::F32, true);
    {
      Tensor y = x;
      for (int i = 0; i < kOps; ++i) y = y + 1.0;
      CHECK(autograd::live_nodes() == nodes + kOps);
    }
    CHECK(autograd::live_nodes() == nodes);
  }
  SECTION("retained graph is freed when the output dies") {
    Tensor x = scalar(2, DType::F32, true);
    {
      Tensor y = x;
      for (int i = 0; i < kOps; ++i) y = y + 0.5;
      y.backward({}, {.retain_graph = true});
      y.backward({}, {.retain_graph = true});
      CHECK(x.grad().item() == 2);
    }
    CHECK(autograd::live_nodes() == nodes);
  }
  CHECK(autograd::live_nodes() == nodes);
}

TEST_CASE("diamond graphs accumulate every path", "[autograd]") {
  Tensor a = vec({1, 2, 3}, DType::F64, true);
  Tensor b = vec({4, 5, 6}, DType::F64, true);
  Tensor y = a * b + a;  // dy/da = b + 1, dy/db = a
  y.backward(vec({1, 1, 1}, DType::F64));
  CHECK(values(a.grad()) == std::vector<double>{5, 6, 7});
  CHECK(values(b.grad()) == std::vector<double>{1, 2, 3});
  // a shared intermediate: c = 2a, y = c*c + c -> dy/da = (2c + 1) * 2
  Tensor x = vec({1, -1}, DType::F64, true);
  Tensor c = x * 2.0;
  Tensor z = c * c + c;
  z.backward(vec({1, 1}, DType::F64));
  CHECK(values(x.grad()) == std::vector<double>{10, -6});
  // the same leaf twice in one op
  Tensor s = vec({3}, DType::F64, true);
  (s * s).backward();
  CHECK(values(s.grad()) == std::vector<double>{6});
  // a deep diamond: every level doubles the paths (2^20 paths through 20 nodes)
  Tensor t = scalar(1, DType::F64, true);
  Tensor u = t;
  for (int i = 0; i < 20; ++i) u = u + u;
  u.backward();
  CHECK(t.grad().item() == 1048576.0);
}

TEST_CASE("mixed precision: casts carry gradients back in the leaf's dtype", "[autograd]") {
  SECTION("F32 parameter used in F16 gets an F32 gradient") {
    Tensor w = vec({0.5, -1.5, 2}, DType::F32, true);
    Tensor w16 = w.to(DType::F16);
    CHECK(w16.dtype() == DType::F16);
    CHECK_FALSE(w16.is_leaf());
    Tensor y = w16 * 3.0;
    CHECK(y.dtype() == DType::F16);
    y.backward(vec({1, 2, 0.25}, DType::F16));
    REQUIRE(w.grad().defined());
    CHECK(w.grad().dtype() == DType::F32);
    CHECK(values(w.grad()) == std::vector<double>{3, 6, 0.75});
  }
  for (DType dt : {DType::F16, DType::BF16, DType::F32, DType::F64}) {
    DYNAMIC_SECTION("gradient dtype matches a " << dtype_name(dt) << " leaf") {
      Tensor x = vec({1, 2}, dt, true);
      Tensor y = x * x + x;
      y.backward(vec({1, 1}, dt));
      CHECK(x.grad().dtype() == dt);
      CHECK(values(x.grad()) == std::vector<double>{3, 5});
    }
  }
  SECTION("F16 + BF16 promotes to F32; each leaf gets its own dtype back") {
    Tensor a = vec({1, 2}, DType::F16, true);
    Tensor b = vec({3, 4}, DType::BF16, true);
    Tensor y = a * b;
    CHECK(y.dtype() == DType::F32);
    y.backward(vec({1, 1}));
    CHECK(a.grad().dtype() == DType::F16);
    CHECK(b.grad().dtype() == DType::BF16);
    CHECK(values(a.grad()) == std::vector<double>{3, 4});
    CHECK(values(b.grad()) == std::vector<double>{1, 2});
  }
  SECTION("the cast backward rounds the gradient to the leaf's dtype") {
    Tensor x = vec({1}, DType::F16, true);
    Tensor y = x.to(DType::F32) * 1.0;
    y.backward(vec({1.0 / 3.0}));
    CHECK(x.grad().dtype() == DType::F16);
    CHECK(x.grad().item() == 0.333251953125);
  }
}

TEST_CASE("a leaf's gradient never aliases the seed", "[autograd]") {
  auto check_no_alias = [](const Tensor& leaf, Tensor seed) {
    const std::vector<double> g = values(leaf.grad());
    CHECK(leaf.grad().data_ptr() != seed.data_ptr());
    seed.data<float>()[0] = 1000;
    CHECK(values(leaf.grad()) == g);
  };
  SECTION("root is the leaf") {
    Tensor x = vec({1, 2}, DType::F32, true);
    Tensor seed = vec({3, 4});
    x.backward(seed);
    check_no_alias(x, seed);
  }
  SECTION("clone passes the seed through") {
    Tensor x = vec({1, 2}, DType::F32, true);
    Tensor seed = vec({3, 4});
    x.clone().backward(seed);
    check_no_alias(x, seed);
  }
  SECTION("add passes the seed through to both sides") {
    Tensor x = vec({1, 2}, DType::F32, true);
    Tensor z = vec({1, 2}, DType::F32, true);
    Tensor seed = vec({3, 4});
    (x + z).backward(seed);
    check_no_alias(x, seed);
    check_no_alias(z, seed);
    CHECK(x.grad().data_ptr() != z.grad().data_ptr());
  }
  SECTION("reshape returns a view of the seed") {
    Tensor x = vec({1, 2}, DType::F32, true);
    Tensor seed = vec({3, 4}).reshape({2, 1});
    x.reshape({2, 1}).backward(seed);
    check_no_alias(x, seed);
  }
  SECTION("the grad of the leaf is not the gradient a hook holds on to") {
    Tensor x = vec({1, 2}, DType::F32, true);
    Tensor kept;
    x.register_hook([&](const Tensor& g) {
      kept = g;
      return Tensor();
    });
    (x * 2.0).backward(vec({1, 1}));
    REQUIRE(kept.defined());
    check_no_alias(x, kept);
  }
}

TEST_CASE("the widening backward of leaf casts is batched at the end and gives the same gradients", "[autograd]") {
  // w (F32 leaf) used through an F16 cast, as autocast does, and directly; v (F64 leaf) through an F32 cast
  Tensor w = from_vector(std::vector<float>{0.5f, -1.25f, 3.0f}, {3}).requires_grad_(true);
  Tensor v = from_vector(std::vector<double>{0.1, 0.2}, {2}, {.dtype = DType::F64}).requires_grad_(true);
  const Tensor x16 = from_vector(std::vector<float>{2.0f, 0.1f, -4.0f}, {3}).to(DType::F16);
  std::vector<std::string> names;
  std::vector<DType> incoming, returned;
  int hook_calls = 0;
  DType hook_dtype = DType::I64;
  HookHandle h = w.register_hook([&](const Tensor& g) {
    ++hook_calls;
    hook_dtype = g.dtype();
    return Tensor();
  });
  const auto loss = [&] {
    return sum(mul(w.to(DType::F16), x16)).to(DType::F32) + sum(mul(w, w)) + sum(mul(v.to(DType::F32), 3.0)).to(DType::F32);
  };
  {
    autograd::ObserveBackward observe([&](const Node& n, const Tensor& g, const std::vector<Tensor>& grads) {
      names.push_back(n.name);
      incoming.push_back(g.dtype());
      returned.push_back(grads[0].defined() ? grads[0].dtype() : DType::I64);
    });
    loss().backward();
  }
  // the F16 gradient x16 widened exactly, plus 2w from the direct use
  const std::vector<double> xw = x16.to_vector<double>();
  const std::vector<double> gw = w.grad().to_vector<double>();
  const std::vector<double> wv = w.to_vector<double>();
  REQUIRE(gw.size() == 3);
  for (size_t i = 0; i < 3; ++i) CHECK(gw[i] == static_cast<double>(static_cast<float>(xw[i]) + static_cast<float>(2 * wv[i])));
  CHECK(w.grad().dtype() == DType::F32);
  CHECK(v.grad().dtype() == DType::F64);
  CHECK(v.grad().to_vector<double>() == std::vector<double>{3.0, 3.0});
  CHECK(hook_calls == 1);  // once, with the summed F32 gradient
  CHECK(hook_dtype == DType::F32);
  // the two leaf casts' nodes were observed last, with their narrow gradient in and the wide one out
  REQUIRE(names.size() >= 2);
  const size_t n = names.size();
  CHECK(std::string(names[n - 1]) == "to(dtype)");
  CHECK(std::string(names[n - 2]) == "to(dtype)");
  CHECK(((incoming[n - 2] == DType::F16 && returned[n - 2] == DType::F32) ||
         (incoming[n - 2] == DType::F32 && returned[n - 2] == DType::F64)));
  CHECK(((incoming[n - 1] == DType::F16 && returned[n - 1] == DType::F32) ||
         (incoming[n - 1] == DType::F32 && returned[n - 1] == DType::F64)));
  // retain_graph: a second backward through the same graph adds the same gradients again
  w.zero_grad();
  const Tensor l = loss();
  l.backward({}, {.retain_graph = true});
  const std::vector<double> once = w.grad().to_vector<double>();
  l.backward();
  const std::vector<double> twice = w.grad().to_vector<double>();
  for (size_t i = 0; i < 3; ++i) CHECK(twice[i] == 2 * once[i]);
  CHECK_THROWS_WITH(l.backward(), Catch::Contains("a second time"));
  h.remove();
}

TEST_CASE("an in-place update through the op that saved the tensor frees its graph (h += f(h))", "[autograd]") {
  // the backwards hold what they read as autograd::SavedTensor (values and the history they had), not the tensor:
  // holding h itself made h -> add_'s node -> f's node -> h a reference cycle, and every residual step leaked
  Generator gen(3);
  const Tensor w = randn({8, 8}, {}, &gen).requires_grad_(), k = randn({4, 4, 3, 3}, {}, &gen).requires_grad_();
  const Tensor bn_w = ones({4}).requires_grad_();
  const int64_t nodes = autograd::live_nodes();
  for (int i = 0; i < 3; ++i) {
    Tensor h = randn({2, 8}, {}, &gen) * sum(w);
    h.add_(linear(h, w));
    h.add_(matmul(h, w));
    h.add_(h * h);
    h.add_(tanh(h) / (h + 3.0));
    h.add_(cross_entropy(h, from_vector(std::vector<int64_t>{1, 2}, {2}, {.dtype = DType::I64})) * 0.0);
    h.add_(norm(h) * 0.1);
    h.add_(log(abs(h) + 1.0));  // a unary op that saves its input
    Tensor c = randn({2, 4, 5, 5}, {}, &gen) * sum(k);
    c.add_(conv2d(c, k, Tensor(), {.padding = 1}));
    c.add_(batch_norm(c, Tensor(), Tensor(), bn_w, Tensor(), {.training = true}));
    // create_graph's recorded backwards save what they read too (conv2d's data and weight gradients here)
    Tensor e = randn({2, 4, 5, 5}, {}, &gen) * sum(k);
    const Tensor gk = autograd::grad({sum(pow(conv2d(e, k, Tensor(), {.padding = 1}), 2.0))}, {k}, {},
                                     {.create_graph = true})[0];
    e.add_(conv2d(e, gk, Tensor(), {.padding = 1}));
    CHECK(autograd::live_nodes() > nodes);
  }
  CHECK(autograd::live_nodes() == nodes);
  // a backward through such a step is still refused as torch refuses it: mul read h before add_ changed it
  Tensor x = from_vector(std::vector<double>{0.5, -2}, {2}, {.dtype = DType::F64, .requires_grad = true});
  Tensor h = x * 1.0;
  h.add_(h * h);
  CHECK_THROWS_WITH(h.sum().backward(), Catch::Contains("modified by an inplace operation") && Catch::Contains("mul"));
}
