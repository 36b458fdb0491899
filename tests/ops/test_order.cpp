// cumsum, cumprod, sort, argsort, topk (ops/order.h): torch's values, orders, NaN placement and gradients.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "autograd/gradcheck.h"
#include "halfgrad.h"
#include "test_util.h"

using namespace hg;
using Catch::Contains;
using test::iota;
using test::vals;

TEST_CASE("cumsum along any dim, in x's dtype, differentiable", "[ops][order]") {
  const Tensor x = iota({2, 3});
  CHECK(vals(x.cumsum(1)) == std::vector<double>{0, 1, 3, 3, 7, 12});
  CHECK(vals(x.cumsum(0)) == std::vector<double>{0, 1, 2, 3, 5, 7});
  CHECK(vals(x.t().cumsum(-1)) == std::vector<double>{0, 3, 1, 5, 2, 7});  // a view's rows
  CHECK(x.to(DType::BF16).cumsum(1).dtype() == DType::BF16);
  CHECK(from_vector(std::vector<int64_t>{1, 2, 3}, {3}).cumsum(0).to_vector<int64_t>() == std::vector<int64_t>{1, 3, 6});
  CHECK_THROWS_WITH(zeros({9000}).cumsum(0), Contains("8192"));
  Generator g(2);
  const auto f = [](const std::vector<Tensor>& v) { return v[0].cumsum(1) * v[0]; };
  CHECK(gradcheck(f, {randn({3, 4}, {.dtype = DType::F64}, &g).requires_grad_()}).ok);
}

TEST_CASE("cumprod along any dim equals a sequential product, zeros and negatives included, differentiable",
          "[ops][order]") {
  Generator g(5);
  // lengths around the doubling's powers of two, along the first and the last dim
  for (const int64_t n : {1, 2, 3, 7, 8, 9}) {
    const Tensor x = rand({3, n}, {.dtype = DType::F64}, &g) * 2.0 - 0.5;
    std::vector<double> want = vals(x);
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t j = 1; j < n; ++j) want[r * n + j] *= want[r * n + j - 1];
    const std::vector<double> got = vals(x.cumprod(1)), got_t = vals(x.t().cumprod(0).t().contiguous());
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      CHECK(got[i] == Approx(want[i]).epsilon(1e-14));
      CHECK(got_t[i] == Approx(want[i]).epsilon(1e-14));
    }
  }
  const Tensor z = from_vector(std::vector<double>{2, -1, 0, 3, 0.5}, {5}, {.dtype = DType::F64});
  CHECK(vals(z.cumprod(0)) == std::vector<double>{2, -2, 0, 0, 0});
  CHECK(from_vector(std::vector<int64_t>{1, 2, 3, -4}, {4}).cumprod(0).to_vector<int64_t>() == std::vector<int64_t>{1, 2, 6, -24});
  CHECK(z.to(DType::F16).cumprod(0).dtype() == DType::F16);
  CHECK_THROWS_WITH(z.cumprod(1), Contains("cumprod"));
  // the gradient where an entry is 0 is the product of the others, as torch's
  const auto f = [](const std::vector<Tensor>& v) { return v[0].cumprod(-1); };
  Tensor w = randn({2, 5}, {.dtype = DType::F64}, &g);
  w = w.index_put_({0, 2}, 0.0);
  CHECK(gradcheck(f, {w.requires_grad_()}).ok);
}

TEST_CASE("sort, argsort and topk: torch's order, stable, NaN as the largest", "[ops][order]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor x = from_vector(std::vector<double>{3, nan, 1, 2, 1, 5}, {2, 3}, {.dtype = DType::F64});
  auto [v, i] = x.sort(1);
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{2, 0, 1, 1, 0, 2});
  CHECK(vals(v)[0] == 1);
  CHECK(std::isnan(vals(v)[2]));
  auto [vd, id] = x.sort(1, true);
  CHECK(id.to_vector<int64_t>() == std::vector<int64_t>{1, 0, 2, 2, 0, 1});
  // stable: equal values keep their order
  CHECK(from_vector(std::vector<float>{2, 1, 2, 1}, {4}).argsort().to_vector<int64_t>() ==
        std::vector<int64_t>{1, 3, 0, 2});
  CHECK(from_vector(std::vector<float>{2, 1, 2, 1}, {4}).argsort(0, true).to_vector<int64_t>() ==
        std::vector<int64_t>{0, 2, 1, 3});
  auto [tv, ti] = iota({2, 5}).topk(2);
  CHECK(vals(tv) == std::vector<double>{4, 3, 9, 8});
  CHECK(ti.to_vector<int64_t>() == std::vector<int64_t>{4, 3, 4, 3});
  auto [sv, si] = iota({5, 2}).topk(2, 0, false);
  CHECK(vals(sv) == std::vector<double>{0, 1, 2, 3});
  CHECK(si.to_vector<int64_t>() == std::vector<int64_t>{0, 0, 1, 1});
  CHECK_THROWS_WITH(iota({3}).topk(4), Contains("k=4"));
  // the values are gathered from x: gradients reach the picked elements
  Generator g(8);
  const auto f = [](const std::vector<Tensor>& t) { return std::get<0>(t[0].topk(2, 1)) * 3.0; };
  CHECK(gradcheck(f, {randn({3, 4}, {.dtype = DType::F64}, &g).requires_grad_()}).ok);
}

TEST_CASE("index_add, scatter_add, scatter: differentiable, with torch's shape rules", "[ops][scatter]") {
  using Ts = std::vector<Tensor>;
  const auto in = [](Shape s, uint64_t seed) {
    Generator g(seed);
    return randn(std::move(s), {.dtype = DType::F64}, &g).requires_grad_();
  };
  const Tensor rep = from_vector(std::vector<int64_t>{1, 1, 0}, {3});  // repeats accumulate
  CHECK(gradcheck([&](const Ts& v) { return v[0].index_add(1, rep, v[1], 2.0); }, {in({2, 4}, 1), in({2, 3}, 2)}).ok);
  const Tensor sidx = from_vector(std::vector<int64_t>{2, 0, 2, 1, 1, 0}, {2, 3});
  CHECK(gradcheck([&](const Ts& v) { return v[0].scatter_add(0, sidx, v[1]); }, {in({3, 4}, 3), in({2, 5}, 4)}).ok);
  const Tensor uniq = from_vector(std::vector<int64_t>{2, 0, 1, 0, 1, 2}, {2, 3});
  CHECK(gradcheck([&](const Ts& v) { return v[0].scatter(0, uniq, v[1]); }, {in({3, 3}, 5), in({2, 3}, 6)}).ok);
  const Tensor dup = from_vector(std::vector<int64_t>{0, 1, 2, 0, 2, 1}, {2, 3});  // column 0 gets two values
  CHECK_THROWS_WITH(zeros({3, 3}).scatter(0, dup, ones({2, 3})), Contains("several values"));
  CHECK_THROWS_WITH(zeros({3, 3}).scatter_add(0, from_vector(std::vector<int64_t>{3}, {1, 1}), ones({1, 1})),
                    Contains("out of range"));
  CHECK_THROWS_WITH(zeros({3, 3}).index_add(0, rep, ones({2, 3})), Contains("needs [3, 3]"));
  CHECK_THROWS_WITH(zeros({3}).scatter_add(0, from_vector(std::vector<int64_t>{0}, {1, 1}), ones({1, 1})),
                    Contains("same number of dims"));
  // in place, through autograd like the others
  Tensor x = zeros({2, 3});
  x.index_add_(0, from_vector(std::vector<int64_t>{1}, {1}), ones({1, 3}));
  x.scatter_(1, from_vector(std::vector<int64_t>{2, 0}, {2, 1}), 7.0);
  CHECK(vals(x) == std::vector<double>{0, 0, 7, 7, 1, 1});
  CHECK(x.version() == 2);
  const auto parts = iota({2, 3}).unbind(1);
  CHECK(parts.size() == 3);
  CHECK(vals(parts[1]) == std::vector<double>{1, 4});
}

TEST_CASE("integer floor division and remainder refuse a zero divisor", "[ops][integer]") {
  const Tensor a = from_vector(std::vector<int64_t>{7, -7}, {2});
  CHECK_THROWS_WITH(a.floor_divide(from_vector(std::vector<int64_t>{2, 0}, {2})), Contains("division by zero"));
  CHECK_THROWS_WITH(a.remainder(0.0), Contains("division by zero"));
  CHECK(a.floor_divide(-2.0).to_vector<int64_t>() == std::vector<int64_t>{-4, 3});
  CHECK(vals(from_vector(std::vector<float>{7, -7}, {2}).floor_divide(0.0))[0] == std::numeric_limits<double>::infinity());
}

TEST_CASE("integer and Bool inputs of unary ops and where: torch's dtypes, values and refusals", "[ops][integer]") {
  const Tensor a = from_vector(std::vector<int64_t>{-3, 0, 2, 16777217}, {4});  // 2^24 + 1: exact in I64 and F64, not F32
  const Tensor mask = from_vector(std::vector<bool>{true, false, true, false}, {4});
  // the int-to-float ops compute in F32 (torch's default dtype), Bools as 0/1
  CHECK(exp(a).dtype() == DType::F32);
  const std::vector<double> e = vals(exp(mask));
  CHECK(e[0] == Approx(std::exp(1.0)).epsilon(1e-6));
  CHECK(e[1] == 1);
  CHECK(e[2] == e[0]);
  CHECK(vals(sqrt(from_vector(std::vector<int64_t>{4, 9}, {2}))) == std::vector<double>{2, 3});
  CHECK(sigmoid(mask).dtype() == DType::F32);
  // relu, abs, neg and pow by an integral exponent stay I64, exact beyond F32's 2^24 (below 2^53)
  CHECK(relu(a).to_vector<int64_t>() == std::vector<int64_t>{0, 0, 2, 16777217});
  CHECK(pow(from_vector(std::vector<int64_t>{-3, 5}, {2}), 3).to_vector<int64_t>() == std::vector<int64_t>{-27, 125});
  CHECK(pow(mask, 0).to_vector<int64_t>() == std::vector<int64_t>{1, 1, 1, 1});
  CHECK(pow(from_vector(std::vector<int64_t>{4}, {1}), 0.5).dtype() == DType::F32);
  CHECK(mask.clamp(0, 1).dtype() == DType::I64);
  // where keeps integers and Bools as they are
  const Tensor w = where(mask, a, from_vector(std::vector<int64_t>{7, 7, 7, 7}, {4}));
  CHECK(w.dtype() == DType::I64);
  CHECK(w.to_vector<int64_t>() == std::vector<int64_t>{-3, 7, 2, 7});
  CHECK(where(mask, mask, logical_not(mask)).to_vector<bool>() == std::vector<bool>{true, true, true, true});
  CHECK(where(mask, a, full({4}, 0.5)).dtype() == DType::F32);
  // torch's refusals, each with the way out
  CHECK_THROWS_WITH(-mask, Contains("logical_not"));
  CHECK_THROWS_WITH(relu(mask), Contains("Bool inputs are not supported"));
  CHECK_THROWS_WITH(pow(a, -1), Contains("negative integer powers"));
  CHECK_THROWS_WITH(gelu(a), Contains("gelu"));
  CHECK_THROWS_WITH(silu(mask), Contains("silu"));
}
