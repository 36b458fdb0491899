// Tensor core: factories, dtype conversion, storage sharing, shape ops' values, printing, memory
// statistics, the Philox RNG and every error check of core/, ops/shape.cpp and ops/cast.cpp.
#include <catch2/catch.hpp>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <sstream>
#include <vector>

#include "halfgrad.h"
#include "test_util.h"

using namespace hg;
using Catch::Contains;

namespace {

const DType kFloatTypes[] = {DType::F32, DType::F16, DType::BF16, DType::F64};
const DType kAllTypes[] = {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64};

// Restores the OpenMP thread count when a test ends, even on a failed assertion.
struct OmpThreads {
  int prev = omp_get_max_threads();
  explicit OmpThreads(int n) { omp_set_num_threads(n); }
  ~OmpThreads() { omp_set_num_threads(prev); }
};

std::vector<double> iota_values(int64_t n, double start = 0) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = start + static_cast<double>(i);
  return v;
}

}  // namespace

TEST_CASE("factories: shapes, dtypes and values", "[core]") {
  for (DType dt : kAllTypes) {
    INFO("dtype " << dtype_name(dt));
    const Tensor e = empty({2, 3}, {.dtype = dt});
    CHECK(e.shape() == Shape{2, 3});
    CHECK(e.dtype() == dt);
    CHECK(e.numel() == 6);
    CHECK(e.nbytes() == 6 * dtype_size(dt));
    CHECK(e.device() == Device::cpu());
    CHECK_FALSE(e.requires_grad());
    CHECK(zeros({2, 3}, {.dtype = dt}).to_vector<double>() == std::vector<double>(6, 0.0));
    CHECK(ones({4}, {.dtype = dt}).to_vector<double>() == std::vector<double>(4, 1.0));
    CHECK(full({3, 1}, 7, {.dtype = dt}).to_vector<double>() == std::vector<double>(3, 7.0));
    CHECK(arange(5, {.dtype = dt}).to_vector<double>() == iota_values(5));
    CHECK(from_vector(std::vector<double>{1, -2, 3}, {3}, {.dtype = dt}).to_vector<double>() ==
          std::vector<double>{1, -2, 3});
  }
  // 0-d: one element, empty shape
  const Tensor s = full({}, 2.5);
  CHECK(s.ndim() == 0);
  CHECK(s.numel() == 1);
  CHECK(s.item() == 2.5);
  CHECK(empty({}).numel() == 1);
  // zero-size: no bytes, no values
  for (DType dt : kAllTypes) {
    const Tensor z = zeros({0, 3}, {.dtype = dt});
    CHECK(z.numel() == 0);
    CHECK(z.nbytes() == 0);
    CHECK(z.to_vector<double>().empty());
    CHECK(ones({3, 0}, {.dtype = dt}).numel() == 0);
  }
  CHECK(randn({0}).numel() == 0);
  CHECK(rand({2, 0, 2}).numel() == 0);
  // requires_grad through the options
  CHECK(zeros({2}, {.requires_grad = true}).requires_grad());
  CHECK(ones({2}, {.requires_grad = true}).requires_grad());
  CHECK(empty({2}, {.requires_grad = true}).requires_grad());
  // *_like keep shape and dtype
  const Tensor h = full({2, 2}, 3, {.dtype = DType::BF16});
  CHECK(zeros_like(h).dtype() == DType::BF16);
  CHECK(ones_like(h).shape() == Shape{2, 2});
  CHECK(ones_like(h).to_vector<double>() == std::vector<double>(4, 1.0));
  CHECK(empty_like(h).dtype() == DType::BF16);
}

TEST_CASE("Allocator::fill writes an element's bits n times (the device path of zeros/ones/full)", "[core]") {
  // The CPU factories fill their own way; a GPU's allocator overrides fill. This checks the base
  // version and the bit patterns the factories hand it, against the CPU factories' values.
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64}) {
    INFO(dtype_name(dt));
    const Tensor ref = full({9}, -2.75, {.dtype = dt});
    Tensor t = zeros({9}, {.dtype = dt});
    uint64_t bits = 0;
    std::memcpy(&bits, ref.data_ptr(), dtype_size(dt));
    get_allocator(DeviceType::CPU)->fill(t.data_ptr(), Device::cpu(), 9, dtype_size(dt), bits);
    CHECK(t.to_vector<double>() == ref.to_vector<double>());
  }
}

TEST_CASE("arange: ranges, negative and fractional steps", "[core]") {
  CHECK(arange(0.0, 1.0, 0.25).to_vector<double>() == std::vector<double>{0, 0.25, 0.5, 0.75});
  CHECK(arange(5.0, 0.0, -1.0).to_vector<double>() == std::vector<double>{5, 4, 3, 2, 1});
  CHECK(arange(2.0, 2.0).numel() == 0);
  CHECK(arange(3.0, 1.0).numel() == 0);  // empty, not negative
  CHECK(arange(0.0, 1.0, 0.3).numel() == 4);
  CHECK(arange(4, {.dtype = DType::I64}).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3});
  REQUIRE_THROWS_WITH(arange(0.0, 1.0, 0.0), Contains("arange"));
  REQUIRE_THROWS_WITH(arange(0.0, INFINITY, 1.0), Contains("arange"));
  REQUIRE_THROWS_WITH(arange(NAN, 1.0, 1.0), Contains("arange"));
}

TEST_CASE("to(DType): rounding to nearest even, overflow, truncation", "[core]") {
  const Tensor third = from_vector(std::vector<double>{1.0 / 3.0}, {1});
  CHECK(third.dtype() == DType::F32);
  CHECK(third.item() == static_cast<double>(1.0f / 3.0f));
  CHECK(from_vector(std::vector<double>{1.0 / 3.0}, {1}, {.dtype = DType::F16}).item() == 0.333251953125);
  CHECK(third.to(DType::F16).item() == 0.333251953125);      // 0x3555
  CHECK(third.to(DType::BF16).item() == 0.333984375);        // 0x3eab: 0x3eaaaaab rounds up
  CHECK(third.to(DType::F64).item() == static_cast<double>(1.0f / 3.0f));
  // 1 + 2^-11 is halfway between two halves: ties go to the even one (1.0); 1 + 3*2^-11 goes up
  const Tensor ties = from_vector(std::vector<double>{1 + std::ldexp(1, -11), 1 + 3 * std::ldexp(1, -11)}, {2});
  CHECK(ties.to(DType::F16).to_vector<double>() == std::vector<double>{1.0, 1 + std::ldexp(1, -9)});
  // bf16: 1 + 2^-8 ties to 1, 1 + 3*2^-8 ties up to 1 + 2^-6
  const Tensor bties = from_vector(std::vector<double>{1 + std::ldexp(1, -8), 1 + 3 * std::ldexp(1, -8)}, {2});
  CHECK(bties.to(DType::BF16).to_vector<double>() == std::vector<double>{1.0, 1 + std::ldexp(1, -6)});
  // F16 overflow and subnormals
  const Tensor big = from_vector(std::vector<float>{65504.f, 65519.f, 65520.f, -1e6f, 5.96e-8f, 1e-9f}, {6});
  const auto h = big.to(DType::F16).to_vector<double>();
  CHECK(h[0] == 65504);
  CHECK(h[1] == 65504);
  CHECK(h[2] == INFINITY);
  CHECK(h[3] == -INFINITY);
  CHECK(h[4] == std::ldexp(1, -24));
  CHECK(h[5] == 0);
  // NaN survives every float conversion
  const Tensor nan = from_vector(std::vector<float>{NAN}, {1});
  for (DType dt : kFloatTypes) CHECK(std::isnan(nan.to(dt).item()));
  // float -> I64 truncates toward zero; I64 -> float is exact for small values
  const Tensor f = from_vector(std::vector<double>{2.7, -2.7, 0.5, -0.5, 1e6}, {5});
  CHECK(f.to(DType::I64).to_vector<int64_t>() == std::vector<int64_t>{2, -2, 0, 0, 1000000});
  const Tensor i = from_vector(std::vector<int64_t>{-3, 0, 1 << 20}, {3});
  CHECK(i.dtype() == DType::I64);  // inferred from the values, as torch.tensor([-3, 0, 2**20])
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{-3, 0, 1 << 20});
  CHECK(from_vector(std::vector<int64_t>{-3, 0, 1 << 20}, {3}, {}).dtype() == DType::F32);  // options given: theirs
  CHECK(from_vector(std::vector<int64_t>{-3, 0, 1 << 20}, {3}, {.dtype = DType::I64}).to(DType::F64).to_vector<double>() ==
        std::vector<double>{-3, 0, 1 << 20});
  // same dtype: the same tensor
  CHECK(third.to(DType::F32).same(third));
  // every pair of float dtypes round-trips values exactly representable in all of them
  const Tensor exact = from_vector(std::vector<double>{0.5, -1.25, 96, 0}, {4});
  for (DType a : kFloatTypes)
    for (DType b : kFloatTypes) CHECK(exact.to(a).to(b).to_vector<double>() == std::vector<double>{0.5, -1.25, 96, 0});
}

TEST_CASE("reshape/view share storage, -1 inference", "[core]") {
  Tensor x = arange(6);
  Tensor y = x.reshape({2, 3});
  Tensor v = x.view({3, -1});
  CHECK(y.shape() == Shape{2, 3});
  CHECK(v.shape() == Shape{3, 2});
  CHECK(y.data_ptr() == x.data_ptr());
  y.data<float>()[4] = 42;
  CHECK(x.to_vector<float>()[4] == 42);
  CHECK(v.to_vector<float>()[4] == 42);
  x.data<float>()[0] = -1;
  CHECK(y.to_vector<float>()[0] == -1);
  CHECK(x.reshape({-1, 2, 1}).shape() == Shape{3, 2, 1});
  CHECK(x.flatten().shape() == Shape{6});
  CHECK(full({}, 3).reshape({1, 1}).shape() == Shape{1, 1});
  CHECK(ones({1, 1}).reshape({}).ndim() == 0);
  CHECK(zeros({0, 4}).reshape({4, 0}).numel() == 0);
  // detach shares storage too
  Tensor d = x.detach();
  d.data<float>()[1] = 9;
  CHECK(x.to_vector<float>()[1] == 9);
}

TEST_CASE("transpose/permute are views and give the right values", "[core]") {
  const Tensor x = arange(24).reshape({2, 3, 4});
  const auto xv = x.to_vector<float>();
  Tensor t = x.transpose(0, 2);
  REQUIRE(t.shape() == Shape{4, 3, 2});
  const auto tv = t.to_vector<float>();
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) CHECK(tv[static_cast<size_t>(k * 6 + j * 2 + i)] == xv[static_cast<size_t>(i * 12 + j * 4 + k)]);
  CHECK(x.transpose(-1, -3).to_vector<float>() == tv);
  CHECK(!t.is_contiguous());
  CHECK(t.strides() == std::vector<int64_t>{1, 4, 12});
  CHECK_THROWS_WITH(t.data_ptr(), Contains("contiguous"));
  CHECK(t.strided_data_ptr() == x.data_ptr());  // a view: the same storage
  const Tensor tc = t.contiguous();
  CHECK(tc.is_contiguous());
  CHECK(tc.to_vector<float>() == tv);
  tc.data<float>()[1] = 100;  // contiguous() of a view is a copy: x does not change
  CHECK(x.to_vector<float>() == xv);
  const Tensor p = x.permute({2, 0, 1});
  REQUIRE(p.shape() == Shape{4, 2, 3});
  const auto pv = p.to_vector<float>();
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) CHECK(pv[static_cast<size_t>(k * 6 + i * 3 + j)] == xv[static_cast<size_t>(i * 12 + j * 4 + k)]);
  CHECK(p.strided_data_ptr() == x.data_ptr());
  const Tensor m = from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3}, {.dtype = DType::F16});
  CHECK(m.t().to_vector<double>() == std::vector<double>{1, 4, 2, 5, 3, 6});
  CHECK(m.t().dtype() == DType::F16);
  CHECK(arange(5).transpose(0, 0).to_vector<double>() == iota_values(5));
  CHECK(x.permute({-3, -2, -1}).to_vector<float>() == xv);
}

TEST_CASE("slice: negative indices, step, clamping", "[core]") {
  const Tensor x = arange(10, {.dtype = DType::F64});
  CHECK(x.slice(0, 2, 5).to_vector<double>() == std::vector<double>{2, 3, 4});
  CHECK(x.slice(0, -3, 100).to_vector<double>() == std::vector<double>{7, 8, 9});
  CHECK(x.slice(0, 1, 8, 3).to_vector<double>() == std::vector<double>{1, 4, 7});
  CHECK(x.slice(0, 0, 10, 4).to_vector<double>() == std::vector<double>{0, 4, 8});
  CHECK(x.slice(0, -100, 2).to_vector<double>() == std::vector<double>{0, 1});
  CHECK(x.slice(0, 0, -8).to_vector<double>() == std::vector<double>{0, 1});
  CHECK(x.slice(0, 5, 2).numel() == 0);
  CHECK(x.slice(0, 20, 30).numel() == 0);
  const Tensor m = arange(12).reshape({3, 4});
  const Tensor c = m.slice(1, 1, 4, 2);
  CHECK(c.shape() == Shape{3, 2});
  CHECK(c.to_vector<double>() == std::vector<double>{1, 3, 5, 7, 9, 11});
  CHECK(m.slice(-2, -1, 3).to_vector<double>() == std::vector<double>{8, 9, 10, 11});
  Tensor r = m.slice(0, 0, 1);
  r.data<float>()[0] = 50;  // a view: m changes
  CHECK(m.to_vector<float>()[0] == 50);
  CHECK(r.is_view());
  CHECK(m.slice(0, 1, 3).storage_offset() == 4);
}

TEST_CASE("cat: dims and dtype promotion", "[core]") {
  const Tensor a = from_vector(std::vector<double>{1, 2, 3, 4}, {2, 2});
  const Tensor b = from_vector(std::vector<double>{5, 6}, {1, 2});
  const Tensor c0 = cat({a, b}, 0);
  CHECK(c0.shape() == Shape{3, 2});
  CHECK(c0.to_vector<double>() == std::vector<double>{1, 2, 3, 4, 5, 6});
  const Tensor c1 = cat({a, b.reshape({2, 1}), a}, -1);
  CHECK(c1.shape() == Shape{2, 5});
  CHECK(c1.to_vector<double>() == std::vector<double>{1, 2, 5, 1, 2, 3, 4, 6, 3, 4});
  CHECK(cat({a}, 1).to_vector<double>() == a.to_vector<double>());
  CHECK(cat({a, zeros({0, 2})}, 0).shape() == Shape{2, 2});
  // promotion like torch.cat
  const Tensor h = from_vector(std::vector<double>{0.5}, {1}, {.dtype = DType::F16});
  const Tensor bf = from_vector(std::vector<double>{1.5}, {1}, {.dtype = DType::BF16});
  const Tensor f = from_vector(std::vector<double>{2.5}, {1}, {.dtype = DType::F32});
  const Tensor d = from_vector(std::vector<double>{3.5}, {1}, {.dtype = DType::F64});
  CHECK(cat({h, bf}, 0).dtype() == DType::F32);
  CHECK(cat({h, bf}, 0).to_vector<double>() == std::vector<double>{0.5, 1.5});
  CHECK(cat({f, d}, 0).dtype() == DType::F64);
  CHECK(cat({h, h}, 0).dtype() == DType::F16);
  CHECK(cat({h, f, d, bf}, 0).to_vector<double>() == std::vector<double>{0.5, 2.5, 3.5, 1.5});
}

TEST_CASE("item, to_vector and clone", "[core]") {
  const Tensor x = from_vector(std::vector<double>{-1.5}, {1, 1}, {.dtype = DType::BF16});
  CHECK(x.item() == -1.5);
  CHECK(x.item<float>() == -1.5f);
  CHECK(x.item<int64_t>() == -1);
  CHECK(from_vector(std::vector<int64_t>{7}, {}, {.dtype = DType::I64}).item<int64_t>() == 7);
  const Tensor y = from_vector(std::vector<float>{1, 2, 3}, {3}, {.dtype = DType::F16});
  const auto hv = y.to_vector<f16>();
  CHECK(hv[1].bits == 0x4000);  // 2.0 in binary16
  CHECK(y.to_vector<bf16>()[2].bits == 0x4040);  // 3.0 in bfloat16
  CHECK(y.to_vector<int64_t>() == std::vector<int64_t>{1, 2, 3});
  Tensor c = y.clone();
  CHECK(c.data_ptr() != y.data_ptr());
  CHECK(c.dtype() == DType::F16);
  c.data<f16>()[0] = f16{0};
  CHECK(y.to_vector<double>()[0] == 1);
  CHECK(zeros({0}).clone().numel() == 0);
}

TEST_CASE("printing shows shape, dtype and values", "[core]") {
  std::ostringstream os;
  os << from_vector(std::vector<double>{1.5, -2, 3.25, 4}, {2, 2}, {.dtype = DType::F16});
  const std::string s = os.str();
  CHECK_THAT(s, Contains("shape=[2, 2]"));
  CHECK_THAT(s, Contains("dtype=F16"));
  CHECK_THAT(s, Contains("1.5000"));
  CHECK_THAT(s, Contains("-2.0000"));
  CHECK_THAT(s, Contains("3.2500"));
  CHECK_THAT(s, !Contains("..."));
  std::ostringstream big;
  big << arange(5000).reshape({50, 100});
  CHECK_THAT(big.str(), Contains("..."));
  CHECK_THAT(big.str(), Contains("4999"));
  CHECK_THAT(big.str(), !Contains("2500.0000"));
  std::ostringstream sp;
  sp << from_vector(std::vector<double>{NAN, INFINITY, -INFINITY}, {3});
  CHECK_THAT(sp.str(), Contains("nan") && Contains("inf") && Contains("-inf"));
  std::ostringstream i;
  i << from_vector(std::vector<int64_t>{3, -4}, {2}, {.dtype = DType::I64});
  CHECK_THAT(i.str(), Contains("[3, -4]") && Contains("dtype=I64"));
  std::ostringstream u, z, g;
  u << Tensor();
  CHECK_THAT(u.str(), Contains("undefined"));
  z << full({}, 2);
  CHECK_THAT(z.str(), Contains("2.0000") && Contains("shape=[]"));
  g << ones({1}, {.requires_grad = true});
  CHECK_THAT(g.str(), Contains("requires_grad"));
}

TEST_CASE("memory statistics follow allocations", "[core]") {
  const Device cpu = Device::cpu();
  const int64_t before = memory::allocated(cpu);
  {
    const Tensor a = empty({1000}, {.dtype = DType::F64});
    CHECK(memory::allocated(cpu) == before + 8000);
    {
      const Tensor b = empty({10, 10}, {.dtype = DType::F16});
      CHECK(memory::allocated(cpu) == before + 8200);
      const Tensor alias = a.reshape({10, 100});  // no new bytes
      CHECK(memory::allocated(cpu) == before + 8200);
    }
    CHECK(memory::allocated(cpu) == before + 8000);
    const Tensor z = empty({0, 5});  // no bytes at all
    CHECK(memory::allocated(cpu) == before + 8000);
  }
  CHECK(memory::allocated(cpu) == before);
  memory::reset_peak(cpu);
  CHECK(memory::peak_allocated(cpu) == before);
  {
    const Tensor big = empty({1 << 20});
    const Tensor small = empty({16});
    CHECK(memory::peak_allocated(cpu) == before + (4 << 20) + 64);
  }
  CHECK(memory::allocated(cpu) == before);
  CHECK(memory::peak_allocated(cpu) == before + (4 << 20) + 64);
  memory::reset_peak(cpu);
  CHECK(memory::peak_allocated(cpu) == before);
}

TEST_CASE("RNG: seeds, ranges, moments, state", "[core]") {
  for (DType dt : kFloatTypes) {
    INFO("dtype " << dtype_name(dt));
    Generator g1(42), g2(42), g3(43);
    const auto a = rand({1000}, {.dtype = dt}, &g1).to_vector<double>();
    CHECK(a == rand({1000}, {.dtype = dt}, &g2).to_vector<double>());
    CHECK(a != rand({1000}, {.dtype = dt}, &g3).to_vector<double>());
    CHECK(a != rand({1000}, {.dtype = dt}, &g1).to_vector<double>());  // the stream advances
    const auto n = randn({1000}, {.dtype = dt}, &g1).to_vector<double>();
    CHECK(n != randn({1000}, {.dtype = dt}, &g2).to_vector<double>());  // g2 is one draw behind
  }
  // the default generator: manual_seed makes it reproducible
  manual_seed(7);
  const auto d1 = randn({64}).to_vector<double>();
  manual_seed(7);
  CHECK(randn({64}).to_vector<double>() == d1);
  // state save/restore
  Generator g(5);
  (void)rand({3}, {}, &g);
  const GeneratorState st = g.state();
  const auto r1 = randn({101}, {.dtype = DType::F64}, &g).to_vector<double>();
  const auto r2 = rand({33}, {.dtype = DType::BF16}, &g).to_vector<double>();
  g.set_state(st);
  CHECK(randn({101}, {.dtype = DType::F64}, &g).to_vector<double>() == r1);
  CHECK(rand({33}, {.dtype = DType::BF16}, &g).to_vector<double>() == r2);
}

TEST_CASE("RNG: rand lies in 0 <= u < 1 and randn is standard normal", "[core]") {
  constexpr int64_t n = 1000000;
  for (DType dt : kFloatTypes) {
    INFO("dtype " << dtype_name(dt));
    Generator g(123);
    const auto u = rand({n}, {.dtype = dt}, &g).to_vector<double>();
    double mean = 0;
    for (double v : u) mean += v;
    mean /= n;
    CHECK(*std::min_element(u.begin(), u.end()) >= 0.0);
    CHECK(*std::max_element(u.begin(), u.end()) < 1.0);  // also after rounding to F16/BF16
    CHECK(std::fabs(mean - 0.5) < 0.005);
    const auto z = randn({n}, {.dtype = dt}, &g).to_vector<double>();
    double m = 0, m2 = 0;
    for (double v : z) m += v;
    m /= n;
    for (double v : z) m2 += (v - m) * (v - m);
    const double sd = std::sqrt(m2 / n);
    CHECK(std::fabs(m) < 0.01);
    CHECK(std::fabs(sd - 1) < 0.01);
    // tails: about 2.7e-3 of N(0,1) lies beyond 3 sigma
    const auto beyond3 = std::count_if(z.begin(), z.end(), [](double v) { return std::fabs(v) > 3; });
    CHECK(beyond3 > 2000);
    CHECK(beyond3 < 3400);
  }
}

TEST_CASE("RNG: numbers do not depend on the OpenMP thread count", "[core]") {
  constexpr int64_t n = 300001;  // past the parallel threshold, odd tail
  for (DType dt : kFloatTypes) {
    INFO("dtype " << dtype_name(dt));
    std::vector<double> u1, z1, u2, z2;
    {
      OmpThreads t(1);
      Generator g(99);
      u1 = rand({n}, {.dtype = dt}, &g).to_vector<double>();
      z1 = randn({n}, {.dtype = dt}, &g).to_vector<double>();
    }
    {
      OmpThreads t(2);
      Generator g(99);
      u2 = rand({n}, {.dtype = dt}, &g).to_vector<double>();
      z2 = randn({n}, {.dtype = dt}, &g).to_vector<double>();
    }
    CHECK(std::memcmp(u1.data(), u2.data(), u1.size() * sizeof(double)) == 0);
    CHECK(std::memcmp(z1.data(), z2.data(), z1.size() * sizeof(double)) == 0);
  }
  // and a prefix of a big draw equals a small draw with the same generator state
  Generator a(3), b(3);
  const auto big = randn({200000}, {}, &a).to_vector<float>();
  const auto small = randn({1001}, {}, &b).to_vector<float>();
  CHECK(std::equal(small.begin(), small.end(), big.begin()));
}

TEST_CASE("RNG: threads sharing a generator never get the same numbers", "[core]") {
  constexpr int kDraws = 3000;
  Generator g(17);
  std::vector<std::vector<float>> draws[2];
  auto work = [&](int t) {
    for (int i = 0; i < kDraws; ++i) draws[t].push_back(rand({4}, {}, &g).to_vector<float>());  // one block each
  };
  test::run_threads(2, work);
  CHECK(g.state().offset == 2 * kDraws);
  std::set<std::vector<float>> distinct(draws[0].begin(), draws[0].end());
  distinct.insert(draws[1].begin(), draws[1].end());
  CHECK(distinct.size() == 2 * kDraws);
}

TEST_CASE("errors of core name the op", "[core]") {
  const Tensor x = arange(6);
  // factories
  REQUIRE_THROWS_AS(empty({2, -1}), Error);
  REQUIRE_THROWS_WITH(empty({2, -1}), Contains("empty"));
  REQUIRE_THROWS_WITH(zeros({-2}), Contains("zeros"));
  REQUIRE_THROWS_WITH(full({-2}, 1), Contains("full"));
  REQUIRE_THROWS_WITH(ones({3, -3}), Contains("ones"));
  REQUIRE_THROWS_WITH(arange(-1.0, 1.0, 1.0, {.dtype = DType::F32}).reshape({-3}), Contains("reshape"));
  REQUIRE_THROWS_WITH(from_vector(std::vector<double>{1, 2}, {3}), Contains("from_vector"));
  REQUIRE_THROWS_WITH(from_vector(std::vector<float>{1}, {-1}), Contains("from_vector"));
  REQUIRE_THROWS_WITH(rand({2}, {.dtype = DType::I64}), Contains("rand"));
  REQUIRE_THROWS_WITH(randn({2}, {.dtype = DType::I64}), Contains("randn"));
  Generator g(1);
  REQUIRE_THROWS_WITH(rand({-4}, {}, &g), Contains("rand"));
  REQUIRE_THROWS_WITH(randn({2, -4}, {}, &g), Contains("randn"));
  CHECK(g.state().offset == 0);  // a failed draw does not move the stream
  // accessors
  REQUIRE_THROWS_WITH(x.item(), Contains("item"));
  REQUIRE_THROWS_WITH(zeros({0}).item(), Contains("item"));
  REQUIRE_THROWS_WITH(x.data<double>(), Contains("Tensor::data"));
  REQUIRE_THROWS_WITH(x.data<f16>(), Contains("F16"));
  REQUIRE_THROWS_WITH(x.size(1), Contains("size"));
  REQUIRE_THROWS_WITH(x.size(-2), Contains("size"));
  CHECK(x.size(-1) == 6);
  const Tensor u;
  CHECK_FALSE(u.defined());
  REQUIRE_THROWS_AS(u.shape(), Error);
  REQUIRE_THROWS_WITH(u.numel(), Contains("undefined"));
  REQUIRE_THROWS_WITH(u.to_vector<float>(), Contains("undefined"));
  REQUIRE_THROWS_WITH(u.clone(), Contains("undefined"));
  REQUIRE_THROWS_WITH(alias_with_shape(x, {5}), Contains("view"));
  REQUIRE_THROWS_WITH(check_floating("myop", zeros({1}, {.dtype = DType::I64})), Contains("myop"));
  CHECK_NOTHROW(check_floating("myop", x));
  CHECK_NOTHROW(check_same_device("myop", x, x));
  REQUIRE_THROWS_WITH(memory::allocated(Device{DeviceType::CPU, 99}), Contains("memory"));
}

TEST_CASE("errors of shape ops and casts name the op", "[core]") {
  const Tensor x = arange(24).reshape({2, 3, 4});
  REQUIRE_THROWS_WITH(x.reshape({5, 5}), Contains("reshape"));
  REQUIRE_THROWS_WITH(x.reshape({-1, -1}), Contains("reshape"));
  REQUIRE_THROWS_WITH(x.reshape({-1, 5}), Contains("reshape"));
  REQUIRE_THROWS_WITH(x.reshape({-2, -12}), Contains("reshape"));
  REQUIRE_THROWS_WITH(x.reshape({0, -1}), Contains("reshape"));
  REQUIRE_THROWS_WITH(x.view({7}), Contains("view"));
  REQUIRE_THROWS_WITH(x.transpose(0, 3), Contains("transpose"));
  REQUIRE_THROWS_WITH(x.transpose(-4, 0), Contains("transpose"));
  REQUIRE_THROWS_WITH(full({}, 1).transpose(0, 0), Contains("transpose"));
  REQUIRE_THROWS_WITH(x.permute({0, 1}), Contains("permute"));
  REQUIRE_THROWS_WITH(x.permute({0, 1, 1}), Contains("permute"));
  REQUIRE_THROWS_WITH(x.permute({0, 1, -2}), Contains("permute"));
  REQUIRE_THROWS_WITH(x.permute({0, 1, 3}), Contains("permute"));
  REQUIRE_THROWS_WITH(x.slice(3, 0, 1), Contains("slice"));
  REQUIRE_THROWS_WITH(x.slice(0, 0, 1, 0), Contains("slice"));
  REQUIRE_THROWS_WITH(x.slice(0, 0, 1, -1), Contains("slice"));
  REQUIRE_THROWS_WITH(full({}, 1).slice(0, 0, 1), Contains("slice"));
  REQUIRE_THROWS_WITH(cat({}, 0), Contains("cat"));
  REQUIRE_THROWS_WITH(cat({x, ones({2, 3, 5})}, 0), Contains("cat"));
  REQUIRE_THROWS_WITH(cat({x, ones({2, 3})}, 0), Contains("cat"));
  REQUIRE_THROWS_WITH(cat({x, x}, 3), Contains("cat"));
  REQUIRE_THROWS_WITH(cat({full({}, 1), full({}, 2)}, 0), Contains("cat"));
  CHECK(cat({x, ones({2, 3, 5})}, 2).shape() == Shape{2, 3, 9});
  REQUIRE_THROWS_WITH(wrap_dim("myop", 2, 2), Contains("myop"));
  CHECK(wrap_dim("myop", -1, 2) == 1);
  REQUIRE_THROWS_WITH(Tensor().to(DType::F16), Contains("undefined"));
}

TEST_CASE("CUDA devices in a CPU-only build", "[core]") {
  if (cuda::is_available()) return;  // this build has a GPU: nothing to check here
  CHECK(cuda::device_count() == 0);
  REQUIRE_THROWS_AS(empty({2}, {.device = Device::cuda()}), Error);
  REQUIRE_THROWS_WITH(empty({2}, {.device = Device::cuda()}), Contains("cuda", Catch::CaseSensitive::No));
  REQUIRE_THROWS_AS(zeros({2}, {.device = Device::cuda()}), Error);
  REQUIRE_THROWS_AS(full({2}, 1.0, {.device = Device::cuda()}), Error);
  REQUIRE_THROWS_AS(from_vector(std::vector<float>{1}, {1}, {.device = Device::cuda()}), Error);
  REQUIRE_THROWS_WITH(ones({2}).to(Device::cuda()), Contains("CUDA"));
  CHECK(ones({2}).to(Device::cpu()).to_vector<double>() == std::vector<double>{1, 1});
}

TEST_CASE("to(I64) truncates and saturates instead of undefined behaviour", "[core]") {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dt : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
    const Tensor x = hg::from_vector(std::vector<double>{2.75, -2.75, nan, inf, -inf, 1e30, -1e30}, {7}, {.dtype = dt});
    const std::vector<int64_t> v = x.to(DType::I64).to_vector<int64_t>();
    CHECK(v[0] == 2);
    CHECK(v[1] == -2);
    CHECK(v[2] == 0);
    CHECK(v[3] == INT64_MAX);
    CHECK(v[4] == INT64_MIN);
    CHECK(v[5] == INT64_MAX);  // 1e30 (inf in F16) saturates
    CHECK(v[6] == INT64_MIN);
  }
}

TEST_CASE("large host blocks are cached for reuse and counted apart from tensors", "[core]") {
  memory::empty_host_cache();
  const Device cpu = Device::cpu();
  const int64_t before = memory::allocated(cpu);
  const void* first = nullptr;
  {
    const Tensor t = empty({1 << 20});  // 4 MiB
    first = t.data_ptr();
    CHECK(memory::allocated(cpu) == before + (int64_t{4} << 20));
  }
  CHECK(memory::allocated(cpu) == before);  // a cached block is not "used by tensors"
#if defined(__SANITIZE_ADDRESS__) || defined(HG_LIBRARY_SANITIZED)
  CHECK(memory::cached_host_bytes() == 0);  // sanitizer builds free every block
  (void)first;
#else
  CHECK(memory::cached_host_bytes() == int64_t{4} << 20);
  const Tensor again = empty({1 << 20});
  CHECK(again.data_ptr() == first);  // the same block comes back
  CHECK(memory::cached_host_bytes() == 0);
#endif
  memory::empty_host_cache();
  CHECK(memory::cached_host_bytes() == 0);
}

TEST_CASE("small host blocks are cached by power-of-two size class", "[core]") {
  const Device cpu = Device::cpu();
  memory::empty_host_cache();
  const int64_t before = memory::allocated(cpu);
  const void* first = nullptr;
  {
    const Tensor t = empty({1000});  // 4000 bytes: the 4096-byte class
    first = t.data_ptr();
    CHECK(memory::allocated(cpu) == before + 4000);  // statistics count what was asked for
  }
#if defined(__SANITIZE_ADDRESS__) || defined(HG_LIBRARY_SANITIZED)
  CHECK(memory::cached_host_bytes() == 0);
  (void)first;
#else
  CHECK(memory::cached_host_bytes() == 4096);
  const Tensor same_class = empty({1010});  // 4040 bytes: the same class, so the same block
  CHECK(same_class.data_ptr() == first);
  CHECK(reinterpret_cast<uintptr_t>(same_class.data_ptr()) % 64 == 0);
  const Tensor other = empty({2000});  // 8000 bytes: another class, a fresh block
  CHECK(other.data_ptr() != first);
#endif
  memory::empty_host_cache();
}
