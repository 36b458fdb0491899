// nn::init against torch.nn.init's definitions: the bounds and standard deviations its formulas give,
// checked on the drawn values (uniform draws stay inside the bound and fill it; normal draws have the
// std within sampling error), and the constant fills exactly.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/half.h"
#include "core/rng.h"
#include "nn/init.h"

using namespace hg;
using namespace hg::nn;

namespace {

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

double stddev(const std::vector<double>& v) {
  double mean = 0, sq = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  for (double x : v) sq += (x - mean) * (x - mean);
  return std::sqrt(sq / static_cast<double>(v.size()));
}

}  // namespace

TEST_CASE("nn::init: torch's gains, fans, bounds and stds", "[nn][cpu]") {
  CHECK(init::calculate_gain(init::Nonlinearity::Relu) == Approx(std::sqrt(2.0)));
  CHECK(init::calculate_gain(init::Nonlinearity::Tanh) == Approx(5.0 / 3.0));
  CHECK(init::calculate_gain(init::Nonlinearity::LeakyRelu, std::sqrt(5.0)) == Approx(std::sqrt(2.0 / 6.0)));
  CHECK(init::calculate_gain(init::Nonlinearity::Sigmoid) == 1.0);
  Tensor w = empty({64, 32, 3, 3});  // fan_in = 32 * 9 = 288, fan_out = 64 * 9 = 576
  CHECK(init::compute_fans(w).in == 288);
  CHECK(init::compute_fans(w).out == 576);

  Generator g(5);
  // xavier_uniform_: U(-b, b), b = gain * sqrt(6 / (fan_in + fan_out))
  init::xavier_uniform_(w, 2.0, &g);
  const double xb = 2.0 * std::sqrt(6.0 / (288.0 + 576.0));
  std::vector<double> v = values(w);
  CHECK(*std::max_element(v.begin(), v.end()) <= xb);
  CHECK(*std::min_element(v.begin(), v.end()) >= -xb);
  CHECK(*std::max_element(v.begin(), v.end()) > 0.99 * xb);  // fills the range
  CHECK(stddev(v) == Approx(xb / std::sqrt(3.0)).epsilon(0.03));
  // kaiming_normal_: N(0, gain / sqrt(fan)), fan_out mode with relu: sqrt(2) / sqrt(576)
  init::kaiming_normal_(w, {.mode = init::FanMode::FanOut, .nonlinearity = init::Nonlinearity::Relu, .generator = &g});
  CHECK(stddev(values(w)) == Approx(std::sqrt(2.0) / std::sqrt(576.0)).epsilon(0.03));
  // kaiming_uniform_ with torch's Linear/Conv default a = sqrt(5): b = sqrt(1 / fan_in)
  init::kaiming_uniform_(w, {.a = std::sqrt(5.0), .generator = &g});
  v = values(w);
  CHECK(*std::max_element(v.begin(), v.end()) <= std::sqrt(1.0 / 288.0));
  CHECK(*std::max_element(v.begin(), v.end()) > 0.99 * std::sqrt(1.0 / 288.0));
  // the same generator state gives the same draw
  Generator a(9), b(9);
  Tensor x = empty({100}), y = empty({100});
  init::normal_(x, 1.0, 0.5, &a);
  init::normal_(y, 1.0, 0.5, &b);
  CHECK(values(x) == values(y));
  // constant fills, in the tensor's dtype
  Tensor h = empty({5}, {.dtype = DType::F16});
  init::constant_(h, 0.1);
  CHECK(values(h) == std::vector<double>(5, static_cast<double>(f16_bits_to_float(float_to_f16_bits(0.1f)))));
  init::zeros_(h);
  CHECK(values(h) == std::vector<double>(5, 0.0));
  init::ones_(h);
  CHECK(values(h) == std::vector<double>(5, 1.0));
}
