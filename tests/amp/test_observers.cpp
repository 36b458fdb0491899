// The hooks the AMP inspectors are built on: op observers at the autocast boundary (amp::ObserveOps),
// backward node observers (autograd::ObserveBackward), nn::Module::call_stack and live bytes by dtype.
// The inspectors themselves are tested in tests/amp/inspect/.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "autograd/node.h"
#include "core/rng.h"
#include "nn/nn.h"
#include "ops/autocast/autocast.h"
#include "ops/loss.h"
#include "ops/matmul.h"
#include "ops/reduce.h"

using namespace hg;

namespace {

struct Seen {
  amp::OpId op;
  std::optional<amp::CastPolicy> policy;
  std::vector<amp::CastRecord> casts;
  DType out;
  size_t modules_on_stack;
};

struct Recorder : amp::OpObserver {
  std::vector<Seen> seen;
  void on_op(const amp::OpCall& c, const Tensor& y) override {
    seen.push_back({c.op, c.policy, c.casts, y.dtype(), nn::Module::call_stack().size()});
  }
};

Tensor randn_f32(Shape s, bool grad = false) {
  Tensor t = randn(std::move(s));
  if (grad) t.requires_grad_(true);
  return t;
}

}  // namespace

TEST_CASE("op observers see each outermost op once, with its policy, casts and output dtype", "[amp][observers]") {
  manual_seed(3);
  Tensor x = randn_f32({2, 3}), w = randn_f32({4, 3}, true), b = randn_f32({4}, true);
  Recorder rec;
  {
    amp::ObserveOps observe(rec);
    Tensor y = linear(x, w, b);  // autocast off: reported with no policy and no casts
    amp::Autocast ac(DeviceType::CPU, DType::BF16);
    Tensor z = linear(x, w, b);
    Tensor z2 = linear(x, w, b);  // the weight casts come from the cache now
    Tensor l = cross_entropy(z, from_vector(std::vector<int64_t>{1, 3}, {2}, {.dtype = DType::I64}));
  }
  Tensor after = linear(x, w, b);  // the guard is gone: not reported
  REQUIRE(rec.seen.size() == 4);
  CHECK(rec.seen[0].op == amp::OpId::Linear);
  CHECK_FALSE(rec.seen[0].policy.has_value());
  CHECK(rec.seen[0].casts.empty());
  CHECK(rec.seen[0].out == DType::F32);
  CHECK(rec.seen[1].policy == amp::CastPolicy::Lower);
  REQUIRE(rec.seen[1].casts.size() == 3);
  CHECK(rec.seen[1].casts[0].input == 0);
  CHECK_FALSE(rec.seen[1].casts[0].cacheable);  // x is not a leaf weight
  CHECK(rec.seen[1].casts[1].bytes == 4 * 3 * 2);
  CHECK(rec.seen[1].casts[1].cacheable);
  CHECK_FALSE(rec.seen[1].casts[1].cache_hit);
  CHECK(rec.seen[1].out == DType::BF16);
  REQUIRE(rec.seen[2].casts.size() == 3);
  CHECK(rec.seen[2].casts[1].cache_hit);
  CHECK(rec.seen[2].casts[2].cache_hit);
  CHECK(rec.seen[3].op == amp::OpId::CrossEntropy);
  CHECK(rec.seen[3].policy == amp::CastPolicy::Fp32);
  CHECK(rec.seen[3].out == DType::F32);
}

TEST_CASE("observing changes no numbers and names the module an op runs in", "[amp][observers]") {
  manual_seed(5);
  auto model = std::make_shared<nn::Sequential>(nn::Linear(3, 4), nn::ReLU(), nn::Linear(4, 2));
  Tensor x = randn_f32({5, 3});
  auto run = [&](bool observed) {
    Recorder rec;
    model->zero_grad();
    Tensor y;
    {
      std::optional<amp::ObserveOps> observe;
      if (observed) observe.emplace(rec);
      amp::Autocast ac(DeviceType::CPU, DType::BF16);
      y = (*model)(x);
    }
    sum(y.to(DType::F32)).backward();
    std::vector<float> out = y.to_vector<float>();
    for (const Tensor& p : model->parameters()) {
      std::vector<float> g = p.grad().to_vector<float>();
      out.insert(out.end(), g.begin(), g.end());
    }
    return std::pair{out, rec.seen};
  };
  auto [plain, none] = run(false);
  auto [observed, seen] = run(true);
  CHECK(plain == observed);
  CHECK(none.empty());
  REQUIRE(seen.size() == 3);  // linear, relu, linear: linear's inner ops are part of it
  for (const Seen& s : seen) CHECK(s.modules_on_stack == 2);  // the Sequential and the child
  CHECK(nn::Module::call_stack().empty());
}

TEST_CASE("backward observers see every node with its incoming and returned gradients", "[autograd][observers]") {
  Tensor a = from_vector(std::vector<float>{1, 2}, {2}).requires_grad_(true);
  Tensor y = sum(a * a);
  std::vector<std::string> names;
  std::vector<float> incoming;
  {
    autograd::ObserveBackward observe([&](const Node& n, const Tensor& g, const std::vector<Tensor>& grads) {
      names.push_back(n.name);
      incoming.push_back(static_cast<float>(sum(g).item()));
      CHECK(grads.size() == n.inputs.size());
    });
    y.backward();
  }
  REQUIRE(names.size() == 2);
  CHECK(names[0] == std::string("sum"));
  CHECK(names[1] == std::string("mul"));
  CHECK(incoming[0] == 1.f);
  CHECK(incoming[1] == 2.f);  // the ones that sum's backward expanded
  CHECK(a.grad().to_vector<float>() == std::vector<float>{2, 4});
}

TEST_CASE("memory::allocated by dtype follows tensors' lifetimes", "[core][memory]") {
  const Device cpu = Device::cpu();
  const int64_t f16_before = memory::allocated(cpu, DType::F16), f32_before = memory::allocated(cpu, DType::F32);
  {
    Tensor h = zeros({10, 3}, {.dtype = DType::F16});
    Tensor f = zeros({7}, {.dtype = DType::F32});
    Tensor view = h.reshape({30});  // shares h's storage: not counted again
    CHECK(memory::allocated(cpu, DType::F16) - f16_before == 60);
    CHECK(memory::allocated(cpu, DType::F32) - f32_before == 28);
  }
  CHECK(memory::allocated(cpu, DType::F16) == f16_before);
  CHECK(memory::allocated(cpu, DType::F32) == f32_before);
}
