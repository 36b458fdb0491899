// NonFiniteOrigin (amp/inspect/nonfinite.h): the first op or backward node that made inf/NaN from finite
// values, its kind (overflow, invalid, division by zero), and that watching changes no number.
#include <catch2/catch.hpp>

#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "amp/inspect/nonfinite.h"
#include "autograd/node.h"
#include "core/rng.h"
#include "nn/nn.h"
#include "ops/autocast/autocast.h"
#include "ops/elementwise.h"
#include "ops/loss.h"
#include "ops/matmul.h"
#include "ops/reduce.h"

using namespace hg;
using namespace hg::amp::inspect;

namespace {

Tensor half_tensor(const std::vector<double>& v, Shape s = {}) {
  if (s.ndim() == 0) s = Shape{static_cast<int64_t>(v.size())};
  return from_vector(v, s, {.dtype = DType::F16});
}

Tensor labels(const std::vector<int64_t>& v) {
  return from_vector(v, {static_cast<int64_t>(v.size())}, {.dtype = DType::I64});
}

// Sequential(Linear(4,3), ReLU, Linear(3,2)) in F16 with every weight of the last layer 2 and small first
// layer weights, so a forward pass stays small and finite.
std::shared_ptr<nn::Sequential> f16_mlp() {
  auto m = std::make_shared<nn::Sequential>(nn::Linear(4, 3), nn::ReLU(), nn::Linear(3, 2));
  m->to(DType::F16);
  for (const auto& [name, p] : m->named_parameters()) {
    const double v = name.rfind("2.", 0) == 0 ? 2.0 : 0.05;
    nn::set_data(p, full(p.shape(), name.find("bias") != std::string::npos ? 0.0 : v, {.dtype = DType::F16}));
  }
  return m;
}

// The bits of a tensor's values as F32 (a NaN compares equal to the same NaN).
std::vector<uint32_t> bits(const Tensor& t) {
  const std::vector<float> v = t.to_vector<float>();
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
  return b;
}

}  // namespace

TEST_CASE("a forward overflow in F16 is named as the op, with its counts and scale", "[inspect][nonfinite]") {
  const Tensor x = half_tensor({1, 100, 70, -90}), s = full({4}, 1000.0, {.dtype = DType::F16});
  NonFiniteOrigin origin;
  const Tensor y = x * s;  // 1e3, 1e5 -> inf, 7e4 -> inf, -9e4 -> -inf (F16 max 65504)
  REQUIRE(origin.found());
  const NonFiniteFinding& f = *origin.first();
  CHECK(f.pass == Pass::Forward);
  CHECK(f.site == Site::Output);
  CHECK(f.op == "mul");
  CHECK(f.cause == Cause::Overflow);
  CHECK(f.dtype == DType::F16);
  CHECK(f.counts.pos_inf == 2);
  CHECK(f.counts.neg_inf == 1);
  CHECK(f.counts.nan == 0);
  CHECK(f.counts.first_index == 1);
  CHECK(f.largest_finite_input == 1000.0);
  CHECK(f.module_type.empty());
  CHECK(dtype_max(DType::F16) == 65504.0);
  const std::string d = f.describe();
  CHECK(d.find("first non-finite in forward of 'mul'") == 0);
  CHECK(d.find("F16 overflow (|x| > 65504") != std::string::npos);
  CHECK(d.find("outside any module") != std::string::npos);
}

TEST_CASE("a matmul overflow under autocast is named with its module path", "[inspect][nonfinite]") {
  auto model = std::make_shared<nn::Sequential>(nn::Linear(2, 2), nn::ReLU(), nn::Linear(2, 2));
  for (const auto& [name, p] : model->named_parameters())
    nn::set_data(p, full(p.shape(), name == "2.weight" ? 300.0 : 1.0));
  const Tensor x = full({1, 2}, 100.0);  // layer 0: 201 each; layer 2: 300 * (201 + 201) + 1 > 65504
  NonFiniteOrigin origin(model.get());
  amp::Autocast ac(DeviceType::CPU, DType::F16);
  const Tensor y = (*model)(x);
  REQUIRE(origin.found());
  CHECK(origin.first()->op == "linear");
  CHECK(origin.first()->site == Site::Output);
  CHECK(origin.first()->module == "2");
  CHECK(origin.first()->module_type == "Linear");
  CHECK(origin.first()->cause == Cause::Overflow);
  CHECK(origin.first()->counts.pos_inf == 2);
  CHECK(origin.first()->largest_finite_input == 300.0);  // layer 2 ran on x = 201 and w = 300 (both F16)
  CHECK(origin.first()->describe().find("in module '2' (Linear)") != std::string::npos);
}

TEST_CASE("an autocast cast that overflows is the origin, not the op after it", "[inspect][nonfinite]") {
  const Tensor x = from_vector(std::vector<double>{1, 1e5, 2}, {1, 3});
  const Tensor w = full({2, 3}, 0.5);
  NonFiniteOrigin origin;
  amp::Autocast ac(DeviceType::CPU, DType::F16);
  const Tensor y = linear(x, w, Tensor());
  REQUIRE(origin.found());
  CHECK(origin.first()->site == Site::AutocastCast);
  CHECK(origin.first()->op == "linear");
  CHECK(origin.first()->input == 0);
  CHECK(origin.first()->dtype == DType::F16);
  CHECK(origin.first()->counts.first_index == 1);
  CHECK(origin.first()->largest_finite_input == 1e5);
}

TEST_CASE("NaN from finite inputs is an invalid operation, a zero pole is division by zero", "[inspect][nonfinite]") {
  SECTION("log of a negative") {
    NonFiniteOrigin origin;
    const Tensor y = log(from_vector(std::vector<double>{1, 2, -1, 4}, {4}));
    REQUIRE(origin.found());
    CHECK(origin.first()->op == "log");
    CHECK(origin.first()->cause == Cause::Invalid);
    CHECK(origin.first()->counts.nan == 1);
    CHECK(origin.first()->counts.first_index == 2);
    CHECK(origin.first()->describe().find("invalid operation") != std::string::npos);
  }
  SECTION("0/0 and 1/0") {
    NonFiniteOrigin origin;
    const Tensor y = div(from_vector(std::vector<double>{1, 0, 3}, {3}), from_vector(std::vector<double>{2, 0, 0}, {3}));
    REQUIRE(origin.found());
    CHECK(origin.first()->op == "div");
    CHECK(origin.first()->counts.nan == 1);
    CHECK(origin.first()->counts.pos_inf == 1);
    CHECK(origin.first()->counts.first_index == 1);
    CHECK(origin.first()->cause == Cause::DivideByZero);  // an inf, and the divisor is 0 where the first one is
  }
  SECTION("log of zero") {
    NonFiniteOrigin origin;
    const Tensor y = log(from_vector(std::vector<double>{0, 1}, {2}));
    REQUIRE(origin.found());
    CHECK(origin.first()->counts.neg_inf == 1);
    CHECK(origin.first()->cause == Cause::DivideByZero);
  }
}

TEST_CASE("a backward-only overflow names the node, the input index and the module", "[inspect][nonfinite]") {
  auto model = f16_mlp();
  const Tensor x = half_tensor({1, -1, 0.5, 0.25}, {1, 4});
  NonFiniteOrigin origin(model.get());
  const Tensor y = (*model)(x);
  REQUIRE_FALSE(origin.found());  // the forward pass is finite
  // dx of layer 2 = seed @ W = 2 * 60000 + 2 * 60000 = 240000 > 65504; dW = seed^T h stays small (h < 1) and
  // db = 60000 is finite
  y.backward(full({1, 2}, 60000.0, {.dtype = DType::F16}));
  REQUIRE(origin.found());
  const NonFiniteFinding& f = *origin.first();
  CHECK(f.pass == Pass::Backward);
  CHECK(f.site == Site::Gradient);
  CHECK(f.op == "linear");
  CHECK(f.forward_op == "linear");
  CHECK(f.input == 0);
  CHECK(f.dtype == DType::F16);
  CHECK(f.shape == Shape{1, 3});
  CHECK(f.counts.pos_inf == 3);
  CHECK(f.module == "2");
  CHECK(f.module_type == "Linear");
  CHECK(f.cause == Cause::Overflow);
  CHECK(f.largest_finite_input == 60000.0);
  CHECK(f.seq == y.unsafe_impl()->autograd->grad_fn->seq);
  CHECK(f.describe().find("first non-finite in backward of 'linear', in module '2' (Linear), gradient of input 0 "
                          "(F16 [1, 3]): F16 overflow") == 0);
  CHECK(origin.nonfinite_nodes() >= 2);  // relu and layer 0 received it too
}

namespace {

// The first finding of a backward whose loss gradient is ~1e29 in F32: an F16 overflow where it reaches F16.
NonFiniteFinding loss_gradient_overflow(bool class_indices) {
  manual_seed(1);
  auto model = std::make_shared<nn::Sequential>(nn::Linear(4, 3), nn::ReLU(), nn::Linear(3, 3));
  NonFiniteOrigin origin(model.get());
  Tensor loss;
  {
    amp::Autocast ac(DeviceType::CPU, DType::F16);
    const Tensor out = (*model)(randn({2, 4}));
    // mse_loss gets its F16 input cast to F32 by autocast; cross_entropy reads F16 logits in F32 itself
    loss = class_indices ? cross_entropy(out, labels({0, 2})) : mse_loss(out, randn({2, 3}));
  }
  (loss * 1e30).backward();
  REQUIRE(origin.found());
  return *origin.first();
}

}  // namespace

TEST_CASE("an overflow when the loss gradient is cast back to F16 names the autocast cast", "[inspect][nonfinite]") {
  const NonFiniteFinding f = loss_gradient_overflow(false);
  CHECK(f.pass == Pass::Backward);
  CHECK(f.node_is_cast);
  CHECK(f.forward_op == "mse_loss");
  CHECK(f.cast_input == 0);
  CHECK(f.module_type.empty());  // the loss runs outside the model
  CHECK(f.dtype == DType::F16);
  CHECK(f.shape == Shape{2, 3});
  CHECK(f.describe().find("(autocast cast of input 0 of 'mse_loss')") != std::string::npos);
}

TEST_CASE("cross_entropy writes F16 logits' gradient itself: its overflow names cross_entropy", "[inspect][nonfinite]") {
  const NonFiniteFinding f = loss_gradient_overflow(true);  // rounds to inf as the kernel writes it in F16
  CHECK(f.pass == Pass::Backward);
  CHECK_FALSE(f.node_is_cast);
  CHECK(f.forward_op == "cross_entropy");
  CHECK(f.input == 0);
  CHECK(f.dtype == DType::F16);
  CHECK(f.cause == Cause::Overflow);
  CHECK(f.describe().find("first non-finite in backward of 'cross_entropy', outside any module, gradient of input 0 "
                          "(F16 [2, 3]): F16 overflow") == 0);
}

TEST_CASE("propagation is not an origin", "[inspect][nonfinite]") {
  const Tensor x = half_tensor({1, 100});
  SECTION("the op after an observed origin is not reported") {
    NonFiniteOrigin origin;
    const Tensor a = x * half_tensor({1, 1000});  // inf at index 1
    const Tensor b = relu(a + x);         // inf in, inf out: propagation
    REQUIRE(origin.found());
    CHECK(origin.first()->op == "mul");
    CHECK(origin.nonfinite_ops() == 3);
    CHECK(origin.ops_seen() == 3);
  }
  SECTION("an inf input from an unobserved op is reported as arriving, not made, there") {
    const Tensor a = x * 1000.0;  // a scalar mul: no autocast hook, not observed
    NonFiniteOrigin origin;
    const Tensor b = a + x;
    REQUIRE(origin.found());
    CHECK(origin.first()->op == "add");
    CHECK(origin.first()->site == Site::Input);
    CHECK(origin.first()->cause == Cause::Upstream);
    CHECK(origin.first()->input == 0);
  }
  SECTION("a non-finite seed is upstream of every node") {
    const Tensor p = half_tensor({1, 2}).requires_grad_(true);
    const Tensor y = p * p;
    NonFiniteOrigin origin;
    y.backward(half_tensor({std::numeric_limits<double>::infinity(), 1}));
    REQUIRE(origin.found());
    CHECK(origin.first()->site == Site::IncomingGradient);
    CHECK(origin.first()->cause == Cause::Upstream);
    CHECK(origin.first()->op == "mul");
  }
}

TEST_CASE("no finding when everything is finite", "[inspect][nonfinite]") {
  manual_seed(2);
  auto model = std::make_shared<nn::Sequential>(nn::Linear(4, 8), nn::ReLU(), nn::Linear(8, 3));
  NonFiniteOrigin origin(model.get());
  Tensor loss;
  {
    amp::Autocast ac(DeviceType::CPU, DType::F16);
    loss = cross_entropy((*model)(randn({5, 4})), labels({0, 1, 2, 0, 1}));
  }
  loss.backward();
  CHECK_FALSE(origin.found());
  CHECK(origin.ops_seen() == 4);  // linear, relu, linear, cross_entropy
  CHECK(origin.nodes_seen() > 4);
  CHECK(origin.nonfinite_ops() == 0);
  CHECK(origin.nonfinite_nodes() == 0);
  CHECK(origin.describe() == "no non-finite value in 4 ops and " + std::to_string(origin.nodes_seen()) +
                                 " backward nodes");
}

TEST_CASE("only the first origin is kept, until clear()", "[inspect][nonfinite]") {
  NonFiniteOrigin origin;
  const Tensor a = half_tensor({300}) * half_tensor({300});                      // 90000: F16 overflow
  const Tensor b = log(from_vector(std::vector<double>{-1}, {1}));  // an unrelated NaN, later
  REQUIRE(origin.found());
  CHECK(origin.first()->op == "mul");
  CHECK(origin.nonfinite_ops() == 2);
  origin.clear();
  CHECK_FALSE(origin.found());
  CHECK(origin.nonfinite_ops() == 0);
  const Tensor c = log(from_vector(std::vector<double>{-1}, {1}));
  REQUIRE(origin.found());
  CHECK(origin.first()->op == "log");
}

TEST_CASE("watching changes no number: outputs and gradients are bit-identical", "[inspect][nonfinite]") {
  manual_seed(4);
  auto model = std::make_shared<nn::Sequential>(nn::Linear(6, 5), nn::ReLU(), nn::Linear(5, 4));
  const Tensor x = randn({3, 6}) * 30000.0;  // some F16 logits overflow; the rest stay finite
  const Tensor t = labels({0, 1, 3});
  auto run = [&](bool watched) {
    model->zero_grad();
    std::unique_ptr<NonFiniteOrigin> origin;
    if (watched) origin = std::make_unique<NonFiniteOrigin>(model.get());
    Tensor logits, loss;
    {
      amp::Autocast ac(DeviceType::CPU, DType::F16);
      logits = (*model)(x);
      loss = cross_entropy(logits, t);
    }
    (loss * 65536.0).backward();
    std::vector<uint32_t> out = bits(logits);
    for (const Tensor& p : model->parameters()) {
      const std::vector<uint32_t> g = bits(p.grad());
      out.insert(out.end(), g.begin(), g.end());
    }
    return std::pair{out, origin && origin->found()};
  };
  const auto [plain, none] = run(false);
  const auto [watched, found] = run(true);
  CHECK(plain == watched);
  CHECK_FALSE(none);
  CHECK(found);  // the run did hit a non-finite value, so the comparison covers the inspector's busy path
}
