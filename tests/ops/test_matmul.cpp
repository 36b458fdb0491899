// matmul against a double reference written here, in every floating dtype and transpose combination,
// batched and broadcast; gradchecks of every layout; the errors it promises.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "autograd/gradcheck.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "ops/matmul.h"
#include "ops/reduce.h"
#include "test_util.h"

using namespace hg;
using test::check_close_scaled;
using test::randn_t;

namespace {

const DType kFloatTypes[] = {DType::F32, DType::F16, DType::BF16, DType::F64};
const Trans kTrans[] = {Trans::N, Trans::T};

double tol(DType dt) { return test::dtype_tolerance(dt); }

const char* tname(Trans t) { return t == Trans::N ? "N" : "T"; }

// The stored shape of an operand whose op() is (rows, cols), with an optional batch (0: 2-D).
Shape stored(int64_t batch, int64_t rows, int64_t cols, Trans t) {
  const int64_t r = t == Trans::N ? rows : cols, c = t == Trans::N ? cols : rows;
  return batch ? Shape{batch, r, c} : Shape{r, c};
}

// op(x)[i][j] of batch b (a batch-1 or 2-D operand broadcasts).
double op_at(const std::vector<double>& v, const Shape& s, Trans t, int64_t b, int64_t i, int64_t j) {
  const int64_t nb = s.ndim() == 3 ? s[0] : 1, r = s[s.ndim() - 2], c = s[s.ndim() - 1];
  const int64_t base = (nb == 1 ? 0 : b) * r * c;
  return t == Trans::N ? v[static_cast<size_t>(base + i * c + j)] : v[static_cast<size_t>(base + j * c + i)];
}

// C = op(A) op(B) in double; mag = sum |a||b| per element (the scale of the rounding error).
struct Ref {
  std::vector<double> val, mag;
};
Ref ref_matmul(const Tensor& a, Trans ta, const Tensor& b, Trans tb, int64_t batch, int64_t m, int64_t n, int64_t k) {
  const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  Ref r{std::vector<double>(static_cast<size_t>(batch * m * n)), std::vector<double>(static_cast<size_t>(batch * m * n))};
  for (int64_t p = 0; p < batch; ++p)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0, g = 0;
        for (int64_t q = 0; q < k; ++q) {
          const double x = op_at(av, a.shape(), ta, p, i, q) * op_at(bv, b.shape(), tb, p, q, j);
          s += x;
          g += std::fabs(x);
        }
        r.val[static_cast<size_t>((p * m + i) * n + j)] = s;
        r.mag[static_cast<size_t>((p * m + i) * n + j)] = g;
      }
  return r;
}

// The least magnitude an error is measured against: next to none, so a sum of zero products must be 0.
constexpr double kMinMag = 1e-300;

// One forward case: a has batch ba (0: 2-D), b has batch bb; checks shape, dtype and values.
void check_case(DType dt, Trans ta, Trans tb, int64_t ba, int64_t bb, int64_t m, int64_t n, int64_t k) {
  INFO(dt << " " << tname(ta) << tname(tb) << " ba=" << ba << " bb=" << bb << " m=" << m << " n=" << n << " k=" << k);
  const Tensor a = randn_t(stored(ba, m, k, ta), dt, 100 + static_cast<uint64_t>(m));
  const Tensor b = randn_t(stored(bb, k, n, tb), dt, 200 + static_cast<uint64_t>(n));
  const Tensor c = matmul(a, b, {.trans_a = ta, .trans_b = tb});
  const int64_t batch = std::max(ba, bb);
  REQUIRE(c.shape() == (batch ? Shape{batch, m, n} : Shape{m, n}));
  REQUIRE(c.dtype() == dt);
  const Ref r = ref_matmul(a, ta, b, tb, std::max<int64_t>(batch, 1), m, n, k);
  check_close_scaled("c", c.to_vector<double>(), r.val, r.mag, tol(dt), kMinMag);
}

using V = std::vector<Tensor>;

void require_gradcheck(Trans ta, Trans tb, int64_t ba, int64_t bb, int64_t m, int64_t n, int64_t k) {
  INFO(tname(ta) << tname(tb) << " ba=" << ba << " bb=" << bb);
  Tensor a = randn_t(stored(ba, m, k, ta), DType::F64, 1), b = randn_t(stored(bb, k, n, tb), DType::F64, 2);
  a.requires_grad_();
  b.requires_grad_();
  const GradcheckResult r =
      gradcheck([ta, tb](const V& x) { return matmul(x[0], x[1], {.trans_a = ta, .trans_b = tb}); }, {a, b});
  INFO(r.message);
  REQUIRE(r.ok);
}

}  // namespace

TEST_CASE("matmul 2-D: every dtype, transpose combination and odd size", "[cpu][matmul]") {
  const int64_t sizes[][3] = {{1, 1, 1}, {7, 5, 13}, {33, 17, 65}, {64, 64, 64}, {3, 129, 2}};
  for (DType dt : kFloatTypes)
    for (Trans ta : kTrans)
      for (Trans tb : kTrans)
        for (const auto& s : sizes) check_case(dt, ta, tb, 0, 0, s[0], s[1], s[2]);
}

TEST_CASE("matmul batched and broadcast over the batch", "[cpu][matmul]") {
  const int64_t batches[][2] = {{4, 4}, {4, 0}, {0, 4}, {1, 3}, {3, 1}, {1, 1}};
  for (DType dt : kFloatTypes)
    for (Trans ta : kTrans)
      for (Trans tb : kTrans)
        for (const auto& bt : batches) check_case(dt, ta, tb, bt[0], bt[1], 9, 6, 11);
}

TEST_CASE("matmul promotes dtypes and handles empty sizes", "[cpu][matmul]") {
  const Tensor a = randn_t({3, 4}, DType::F16, 1), b = randn_t({4, 2}, DType::F32, 2);
  const Tensor c = matmul(a, b);
  REQUIRE(c.dtype() == DType::F32);
  const Ref r = ref_matmul(a, Trans::N, b, Trans::N, 1, 3, 2, 4);
  check_close_scaled("c", c.to_vector<double>(), r.val, r.mag, 1e-5, kMinMag);
  CHECK(matmul(randn_t({3, 4}, DType::BF16, 1), randn_t({4, 2}, DType::F16, 1)).dtype() == DType::F32);
  CHECK(matmul(zeros({3, 0}), zeros({0, 2})).to_vector<double>() == std::vector<double>(6, 0.0));
  CHECK(matmul(zeros({0, 4}), zeros({4, 2})).shape() == Shape{0, 2});
  CHECK(matmul(zeros({2, 0, 4}), zeros({4, 3})).shape() == Shape{2, 0, 3});
  CHECK(matmul(zeros({0, 3, 4}), zeros({4, 3})).shape() == Shape{0, 3, 3});
}

TEST_CASE("gradcheck: matmul 2-D in every transpose combination", "[cpu][matmul][gradcheck]") {
  for (Trans ta : kTrans)
    for (Trans tb : kTrans) require_gradcheck(ta, tb, 0, 0, 4, 3, 5);
}

TEST_CASE("gradcheck: matmul batched and broadcast in both directions", "[cpu][matmul][gradcheck]") {
  const int64_t batches[][2] = {{3, 3}, {3, 0}, {0, 3}, {1, 3}, {3, 1}, {1, 1}};
  for (Trans ta : kTrans)
    for (Trans tb : kTrans)
      for (const auto& bt : batches) require_gradcheck(ta, tb, bt[0], bt[1], 3, 2, 4);
}

TEST_CASE("matmul backward computes only the gradients asked for, in the operands' dtypes", "[cpu][matmul]") {
  Tensor a = randn_t({3, 4}, DType::F16, 1), b = randn_t({4, 2}, DType::F32, 2);
  b.requires_grad_();
  sum(matmul(a, b)).backward();
  CHECK_FALSE(a.grad().defined());
  REQUIRE(b.grad().defined());
  CHECK(b.grad().dtype() == DType::F32);  // the cast to F32 routes the gradient back
  Tensor h = randn_t({2, 3, 4}, DType::BF16, 3);
  h.requires_grad_();
  sum(matmul(h, randn_t({4, 5}, DType::BF16, 4))).backward();
  CHECK(h.grad().dtype() == DType::BF16);
  CHECK(h.grad().shape() == Shape{2, 3, 4});
}

TEST_CASE("matmul rejects bad ranks, shapes, batches and dtypes", "[cpu][matmul]") {
  const Tensor i64 = from_vector(std::vector<int64_t>{1, 2, 3, 4}, {2, 2}, {.dtype = DType::I64});
  REQUIRE_THROWS_WITH(matmul(zeros({3, 768}), zeros({512, 4})),
                      Catch::Contains("matmul: a.shape[-1]=768 but b.shape[-2]=512"));
  REQUIRE_THROWS_WITH(matmul(zeros({768, 3}), zeros({4, 512}), {.trans_a = Trans::T, .trans_b = Trans::T}),
                      Catch::Contains("matmul: a.shape[-2]=768 but b.shape[-1]=512"));
  // 1-D and 4-D operands are torch.matmul's (tests/ops/test_torch_spellings.cpp); 0-d ones and transpose flags
  // on them are not
  REQUIRE_THROWS_WITH(matmul(zeros({}), zeros({5, 2})), Catch::Contains("matmul: both operands need at least 1 dim"));
  REQUIRE_THROWS_WITH(matmul(zeros({5, 2}), zeros({2, 2, 2, 2}), {.trans_a = Trans::T}),
                      Catch::Contains("transpose flags take 2-D or 3-D operands"));
  REQUIRE_THROWS_WITH(matmul(zeros({2, 3, 4}), zeros({3, 4, 5})),
                      Catch::Contains("matmul: batch sizes a.shape[0]=2 and b.shape[0]=3 do not broadcast"));
  REQUIRE_THROWS_WITH(matmul(i64, zeros({2, 2})), Catch::Contains("matmul: dtype I64"));
  REQUIRE_THROWS_WITH(matmul(zeros({2, 2}), i64), Catch::Contains("matmul: dtype I64"));
}
