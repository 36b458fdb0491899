// What a PyTorch program writes, ported line by line: integer comparisons and the comparison operators,
// from_vector's dtype from its values, and the member spellings of the common ops (each the same op as
// its function).
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "ops/elementwise.h"
#include "ops/reduce.h"

using namespace hg;
using Vec = std::vector<double>;

namespace {
Vec values(const Tensor& t) { return t.to_vector<double>(); }
}  // namespace

TEST_CASE("Comparisons take I64 tensors and give Bool: torch's accuracy line works", "[ops][cpu]") {
  const Tensor logits = from_vector(std::vector<float>{0.1f, 2.0f, -1.0f, 3.0f, 0.5f, 0.2f, 0.0f, 0.0f, 9.0f}, {3, 3});
  const Tensor y = from_vector(std::vector<int64_t>{1, 2, 2}, {3});
  REQUIRE(y.dtype() == DType::I64);
  const Tensor hit = logits.argmax(1) == y;
  CHECK(hit.dtype() == DType::Bool);
  CHECK(values(hit) == Vec{1, 0, 1});
  CHECK(hit.mean().item() == Approx(2.0 / 3.0));
  CHECK((argmax(logits, 1) == y).sum().item() == 2.0);
  CHECK((argmax(logits, 1) == y).sum().dtype() == DType::I64);  // torch's sum of a Bool tensor
  CHECK(hit.mean().dtype() == DType::F32);  // torch refuses a Bool mean; halfgrad gives the share of true
  // every operator, I64 against I64, against a float tensor, and against scalars on either side
  const Tensor a = from_vector(std::vector<int64_t>{-3, 0, 5, 1LL << 40}, {4});
  const Tensor b = from_vector(std::vector<int64_t>{-3, 1, 4, (1LL << 40) + 1}, {4});
  CHECK(values(a == b) == Vec{1, 0, 0, 0});
  CHECK(values(a != b) == Vec{0, 1, 1, 1});
  CHECK(values(a < b) == Vec{0, 1, 0, 1});  // 2^40 and 2^40 + 1 apart: exact, not rounded through F32
  CHECK(values(a <= b) == Vec{1, 1, 0, 1});
  CHECK(values(a > b) == Vec{0, 0, 1, 0});
  CHECK(values(a >= b) == Vec{1, 0, 1, 0});
  CHECK(values(a == 5.0) == Vec{0, 0, 1, 0});
  CHECK(values(a > 0.5) == Vec{0, 0, 1, 1});
  CHECK(values(0.5 < a) == Vec{0, 0, 1, 1});
  CHECK(values(0.0 >= a) == Vec{1, 1, 0, 0});
  CHECK(values(a < from_vector(std::vector<double>{-2.5, -0.5, 5.5, 0.0}, {4})) == Vec{1, 0, 1, 0});
  // a scalar compares in the tensor's dtype
  const Tensor h = from_vector(std::vector<double>{0.1, 0.5}, {2}, {.dtype = DType::F16});
  CHECK((h == 0.1).dtype() == DType::Bool);
  CHECK(values(h == 0.1) == Vec{1, 0});  // 0.1 rounded to F16 on both sides
  CHECK(values(h != h) == Vec{0, 0});
}

TEST_CASE("from_vector: int64_t values make I64 unless options say otherwise", "[ops][cpu]") {
  CHECK(from_vector(std::vector<int64_t>{1, 2}, {2}).dtype() == DType::I64);
  CHECK(from_vector(std::vector<int64_t>{1, 2}, {2}, {.dtype = DType::F16}).dtype() == DType::F16);
  CHECK(from_vector(std::vector<double>{1, 2}, {2}).dtype() == DType::F32);
  CHECK(from_vector(std::vector<float>{1, 2}, {2}).dtype() == DType::F32);
}

TEST_CASE("Tensor members are the op functions: same values, same gradients", "[ops][cpu]") {
  const Tensor x = from_vector(std::vector<double>{0.5, -1.0, 2.0, 0.25, 1.5, -0.75}, {2, 3}, {.dtype = DType::F64});
  const auto same = [](const Tensor& a, const Tensor& b) {
    CHECK(a.dtype() == b.dtype());
    CHECK(a.shape() == b.shape());
    CHECK(a.to_vector<double>() == b.to_vector<double>());
  };
  same(x.sum(), sum(x));
  same(x.sum({1}), sum(x, {1}));
  same(x.sum({0}, {.keepdim = true}), sum(x, {0}, {.keepdim = true}));
  same(x.mean(), mean(x));
  same(x.mean({1}, {.keepdim = true}), mean(x, {1}, {.keepdim = true}));
  same(x.max(), max(x));
  same(x.min(), min(x));
  same(x.argmax(), argmax(x));
  same(x.argmax(1), argmax(x, 1));
  same(x.argmax(0, {.keepdim = true}), argmax(x, 0, {.keepdim = true}));
  same(x.abs().exp(), exp(abs(x)));
  same(x.abs().log(), log(abs(x)));
  same(x.abs().sqrt(), sqrt(abs(x)));
  same(x.pow(3.0), pow(x, 3.0));
  same(x.relu(), relu(x));
  same(x.sigmoid(), sigmoid(x));
  same(x.tanh(), tanh(x));
  same(x.softmax(1), softmax(x, 1));
  same(x.log_softmax(0), log_softmax(x, 0));
  // and they record the same backward
  Tensor w = x.clone().detach().requires_grad_();
  w.softmax(1).pow(2.0).sum().backward();
  Tensor v = x.clone().detach().requires_grad_();
  sum(pow(softmax(v, 1), 2.0)).backward();
  same(w.grad(), v.grad());
}
