// The Bool dtype: what comparisons return and masks take, as torch's bool tensors: casts both ways, printing,
// promotion in arithmetic, masks in where/masked_fill/index, logical ops, any/all, sums, checkpoints.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <limits>
#include <sstream>
#include <vector>

#include "core/safetensors.h"
#include "halfgrad.h"
#include "test_util.h"

using namespace hg;
using Catch::Contains;
using test::vals;

TEST_CASE("comparisons return Bool tensors that print, cast and read back as torch's", "[core][bool]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor x = from_vector(std::vector<double>{-1, 0, 2, nan}, {4}, {.dtype = DType::F64});
  const Tensor m = x > 0.0;
  CHECK(m.dtype() == DType::Bool);
  CHECK(dtype_size(DType::Bool) == 1);
  CHECK(m.nbytes() == 4);
  CHECK(m.to_vector<bool>() == std::vector<bool>{false, false, true, false});
  CHECK_FALSE(m.requires_grad());
  std::ostringstream os;
  os << m;
  CHECK(os.str() == "tensor([false, false, true, false], shape=[4], dtype=Bool)");
  // a value is true when it is not zero: NaN is true, -0.0 false (C's and torch's rule), in every dtype
  const Tensor v = from_vector(std::vector<double>{0, -0.0, 0.5, nan, -3}, {5}, {.dtype = DType::F64});
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    INFO(dt);
    CHECK(v.to(dt).to(DType::Bool).to_vector<bool>() == std::vector<bool>{false, false, true, true, true});
  }
  CHECK(from_vector(std::vector<int64_t>{0, 7, -1}, {3}).to(DType::Bool).to_vector<bool>() == std::vector<bool>{false, true, true});
  // true reads as 1 in every dtype
  const Tensor b = from_vector(std::vector<bool>{true, false, true}, {3});
  CHECK(b.dtype() == DType::Bool);
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64, DType::F8E4M3})
    CHECK(vals(b.to(dt)) == std::vector<double>{1, 0, 1});
  CHECK(b[0].item<bool>());
  CHECK_FALSE(b[1].item<bool>());
  CHECK(vals(ones({2}, {.dtype = DType::Bool})) == std::vector<double>{1, 1});
  CHECK(vals(full({2}, 0.25, {.dtype = DType::Bool})) == std::vector<double>{1, 1});
  CHECK_THROWS_WITH(b.clone().requires_grad_(), Contains("only floating dtypes"));
}

TEST_CASE("a Bool tensor promotes to the other operand's dtype, masks where, masked_fill and index, and counts",
          "[core][bool]") {
  using namespace hg::indexing;
  const Tensor x = test::iota({2, 3});
  const Tensor m = x > 2.0;
  CHECK((m * x).dtype() == DType::F32);
  CHECK(vals(m * x) == std::vector<double>{0, 0, 0, 3, 4, 5});
  CHECK((m + x.to(DType::BF16)).dtype() == DType::BF16);
  CHECK(vals(where(m, x, -x)) == std::vector<double>{0, -1, -2, 3, 4, 5});
  CHECK(vals(x.masked_fill(m, -1.0)) == std::vector<double>{0, 1, 2, -1, -1, -1});
  CHECK(vals(x.index({m})) == std::vector<double>{3, 4, 5});
  CHECK(vals(masked_select(x, m)) == std::vector<double>{3, 4, 5});
  CHECK(nonzero(m).to_vector<int64_t>() == std::vector<int64_t>{1, 0, 1, 1, 1, 2});
  const Tensor empty = zeros({0, 3});  // a mask over no elements picks none
  CHECK(empty.index({empty > 0.0}).numel() == 0);
  CHECK(empty.index({Slice(), from_vector(std::vector<int64_t>{2, 0}, {2})}).shape() == Shape{0, 2});
  Tensor no_cols = zeros({3, 0}).requires_grad_();
  const Tensor picked = no_cols.index({from_vector(std::vector<int64_t>{1}, {1}), Slice()});
  CHECK(picked.shape() == Shape{1, 0});
  picked.sum().backward();
  CHECK(no_cols.grad().shape() == Shape{3, 0});
  Tensor y = x.clone();
  y.index_put_({m}, 9.0);
  CHECK(vals(y) == std::vector<double>{0, 1, 2, 9, 9, 9});
  // torch's sum of a Bool tensor is I64; its mean (refused by torch) is F32 here
  CHECK(m.sum().dtype() == DType::I64);
  CHECK(m.sum().item<int64_t>() == 3);
  CHECK(m.sum({1}).to_vector<int64_t>() == std::vector<int64_t>{0, 3});
  CHECK(m.mean().item() == 0.5);
  // comparing Bool tensors, and a Bool with a number: as 0/1
  CHECK((m == (x >= 3.0)).all().item<bool>());
  CHECK(vals(m == 0.0) == std::vector<double>{1, 1, 1, 0, 0, 0});
  CHECK(vals(m == 0.5) == std::vector<double>{0, 0, 0, 0, 0, 0});
  // arithmetic that torch does not define on two Bool tensors, and the math torch refuses, name the cast; exp and
  // the other int-to-float ops compute in F32, as torch's
  CHECK_THROWS_WITH(m - m, Contains("Bool") && Contains(".to(DType::F32)"));
  CHECK_THROWS_WITH(gelu(m), Contains("Bool"));
  CHECK(exp(m).dtype() == DType::F32);
}

TEST_CASE("logical ops, any and all, as torch's", "[core][bool]") {
  const Tensor a = from_vector(std::vector<bool>{true, true, false, false}, {4});
  const Tensor b = from_vector(std::vector<bool>{true, false, true, false}, {4});
  CHECK((a & b).to_vector<bool>() == std::vector<bool>{true, false, false, false});
  CHECK((a | b).to_vector<bool>() == std::vector<bool>{true, true, true, false});
  CHECK((a ^ b).to_vector<bool>() == std::vector<bool>{false, true, true, false});
  CHECK((~a).to_vector<bool>() == std::vector<bool>{false, false, true, true});
  CHECK((!a).dtype() == DType::Bool);
  CHECK(a.logical_and(b).to_vector<bool>() == (a && b).to_vector<bool>());
  CHECK(a.logical_or(b).to_vector<bool>() == (a || b).to_vector<bool>());
  // another dtype reads as value != 0
  CHECK(logical_and(from_vector(std::vector<float>{0, 2, -1, 0}, {4}), a).to_vector<bool>() ==
        std::vector<bool>{false, true, false, false});
  CHECK(a.any().item<bool>());
  CHECK_FALSE(a.all().item<bool>());
  CHECK((a | ~a).all().item<bool>());
  CHECK_FALSE(zeros({0}).any().item<bool>());  // any of nothing is false, all of nothing true
  CHECK(zeros({0}).all().item<bool>());
  CHECK(a.any().dtype() == DType::Bool);
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    INFO(dt);
    const Tensor v = from_vector(std::vector<double>{1, -inf, nan, 0, inf}, {5}, {.dtype = dt});
    CHECK(v.isnan().to_vector<bool>() == std::vector<bool>{false, false, true, false, false});
    CHECK(v.isinf().to_vector<bool>() == std::vector<bool>{false, true, false, false, true});
    CHECK(v.isfinite().to_vector<bool>() == std::vector<bool>{true, false, false, true, false});
  }
  CHECK(from_vector(std::vector<int64_t>{1, 2}, {2}).isfinite().all().item<bool>());
  CHECK(a.any().ndim() == 0);
}

TEST_CASE("a Bool tensor round-trips through safetensors as BOOL", "[core][bool]") {
  const auto dir = std::filesystem::temp_directory_path() / "hg_bool_test";
  std::filesystem::create_directories(dir);
  const std::string file = (dir / "mask.safetensors").string();
  const Tensor m = from_vector(std::vector<bool>{true, false, false, true, true, false}, {2, 3});
  save_safetensors(file, {{"mask", m}});
  const SafetensorsFile back = load_safetensors(file);
  REQUIRE(back.tensors.count("mask") == 1);
  CHECK(back.tensors.at("mask").dtype() == DType::Bool);
  CHECK(back.tensors.at("mask").to_vector<bool>() == m.to_vector<bool>());
  std::filesystem::remove_all(dir);
}
