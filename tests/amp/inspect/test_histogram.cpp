// amp::inspect::GradientHistogram: exact bins and F16/BF16 rounding counts of known tensors, the
// loss scale's effect, swamping (exact vs the rule of thumb), watching a model without changing its
// gradients, and the CSV/JSON reports read back.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "amp/inspect/histogram.h"
#include "core/half.h"
#include "core/rng.h"
#include "json_reader.h"
#include "nn/nn.h"
#include "ops/reduce.h"
#include "optim/sgd.h"
#include "test_util.h"

using namespace hg;
using namespace hg::amp::inspect;

namespace {

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

Tensor f32(const std::vector<double>& v) { return from_vector(v, {static_cast<int64_t>(v.size())}); }

// The F16 neighbours of a positive F16 value, and whether its significand is even.
struct F16Neighbours {
  double down, up;
  bool even;
};
F16Neighbours neighbours(float w16) {
  const uint16_t b = float_to_f16_bits(w16);
  return {f16_bits_to_float(static_cast<uint16_t>(b - 1)), f16_bits_to_float(static_cast<uint16_t>(b + 1)),
          (b & 1u) == 0};
}

// Exact-arithmetic reference for a positive F16 weight w16 and an update u whose sum F32 holds exactly:
// lost when w16 + u is nearer w16 than its neighbour on u's side, or a tie and w16's significand even.
bool swamped_reference(float w16, double u) {
  const F16Neighbours n = neighbours(w16);
  const double half_gap = (u > 0 ? n.up - w16 : w16 - n.down) / 2;
  return std::fabs(u) < half_gap || (std::fabs(u) == half_gap && n.even);
}

std::vector<std::vector<std::string>> read_csv(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::vector<std::vector<std::string>> rows;
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> fields(1);
    bool quoted = false;
    for (size_t i = 0; i < line.size(); ++i) {
      const char c = line[i];
      if (c == '"' && quoted && i + 1 < line.size() && line[i + 1] == '"') fields.back() += line[++i];
      else if (c == '"') quoted = !quoted;
      else if (c == ',' && !quoted) fields.emplace_back();
      else fields.back() += c;
    }
    rows.push_back(fields);
  }
  return rows;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("a known tensor gives known bins and F16/BF16 rounding counts", "[inspect][cpu]") {
  GradientHistogram h;
  h.record("x", Kind::Activation,
           f32({0.0, -0.0, 1.0, 1.5, -2.0, 0.75, 0x1p-24, 0x1p-149, kInf, -kInf, kNaN, 65504.0, 3e38, 0x1p-25,
                0x1.8p-25}));
  const LayerStats& s = h.at("x", Kind::Activation);
  CHECK(s.count == 15);
  CHECK(s.zeros == 2);
  CHECK(s.infs == 2);
  CHECK(s.nans == 1);
  CHECK(s.nonzero() == 10);
  CHECK(s.bin(0) == 2);  // 1, 1.5
  CHECK(s.bin(1) == 1);  // -2
  CHECK(s.bin(-1) == 1);
  CHECK(s.bin(-24) == 1);
  CHECK(s.bin(-25) == 2);
  CHECK(s.bin(-149) == 1);
  CHECK(s.bin(15) == 1);   // 65504 = 2^15 * 1.999
  CHECK(s.bin(127) == 1);  // 3e38 = 2^127 * 1.76
  int64_t total = 0;
  for (int64_t b : s.bins) total += b;
  CHECK(total == s.nonzero());
  // F16: 2^-149 and 2^-25 (a tie, to even: 0) flush; 1.5 * 2^-25 rounds up to 2^-24
  CHECK(s.f16.flush == 2);
  CHECK(s.f16.below_min_subnormal == 3);  // the plain |x| < 2^-24 count also has 1.5 * 2^-25
  CHECK(s.f16.subnormal == 2);            // 2^-24 and 1.5 * 2^-25
  CHECK(s.f16.overflow == 1);             // 3e38; 65504 is F16's max
  CHECK(s.fraction(s.f16.flush) == Approx(0.2));
  // BF16 keeps everything but 2^-149 (< 2^-134)
  CHECK(s.bf16.flush == 1);
  CHECK(s.bf16.below_min_subnormal == 1);
  CHECK(s.bf16.subnormal == 0);
  CHECK(s.bf16.overflow == 0);
  CHECK(s.loss_scale == 1.0);
}

// The FP8 counts from the formats' definitions (core/fp8.h): E4M3's subnormals start at 2^-9 and 2^-10 (a tie
// with 0) flushes; past 464 is its overflow (the NaN pattern without saturation); E5M2 flushes at or below
// 2^-17 and overflows from 61440 (which ties to 65536).
TEST_CASE("FP8 rounding counts follow E4M3's and E5M2's limits", "[inspect][cpu][fp8]") {
  GradientHistogram h;
  h.record("x", Kind::Activation, f32({0x1p-10, 0x1.8p-10, 0x1p-9, 0x1p-6, 1.0, 448.0, 464.0, 465.0, 0x1p-17, 0x1.8p-17,
                                       0x1p-16, 57344.0, 61439.0, 61440.0, 1e6}));
  const LayerStats& s = h.at("x", Kind::Activation);
  CHECK(s.e4m3.flush == 4);  // 2^-10, 2^-17, 1.5 * 2^-17, 2^-16 (not 1.5 * 2^-10, which rounds up to 2^-9)
  CHECK(s.e4m3.below_min_subnormal == 5);  // |x| < 2^-9: 2^-10, 1.5 * 2^-10, 2^-17, 1.5 * 2^-17, 2^-16
  CHECK(s.e4m3.subnormal == 2);        // 1.5 * 2^-10 -> 2^-9, and 2^-9
  CHECK(s.e4m3.overflow == 5);         // 465, 57344, 61439, 61440, 1e6 (464 ties down to 448)
  CHECK(s.e5m2.flush == 1);            // 2^-17 (a tie with 0); 1.5 * 2^-17 rounds up to 2^-16
  CHECK(s.e5m2.subnormal == 2);        // 1.5 * 2^-17 and 2^-16
  CHECK(s.e5m2.overflow == 2);         // 61440 and 1e6
}

TEST_CASE("bins do not depend on the stored dtype, F64 values outside F32's range are counted apart",
          "[inspect][cpu]") {
  const std::vector<double> v = {1.0, -2.0, 0.75, 0x1p-10, 0.0, 3.0};
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    GradientHistogram h;
    h.record("x", Kind::Weight, from_vector(v, {6}, {.dtype = dt}));
    const LayerStats& s = h.at("x", Kind::Weight);
    INFO(dtype_name(dt));
    CHECK(s.bin(0) == 1);
    CHECK(s.bin(1) == 2);
    CHECK(s.bin(-1) == 1);
    CHECK(s.bin(-10) == 1);
    CHECK(s.zeros == 1);
  }
  GradientHistogram h;
  h.record("x", Kind::Weight, from_vector(std::vector<double>{1e-300, 1e300, 1.0}, {3}, {.dtype = DType::F64}));
  const LayerStats& s = h.at("x", Kind::Weight);
  CHECK(s.below_range == 1);
  CHECK(s.above_range == 1);
  CHECK(s.f16.flush == 1);
  CHECK(s.f16.overflow == 1);
  CHECK(s.bf16.flush == 1);
  CHECK(s.bf16.overflow == 1);
}

TEST_CASE("the loss scale moves gradients out of F16's flush range and into its overflow", "[inspect][cpu]") {
  const Tensor g = f32({0x1p-30, 0x1p-26, 0x1p-20, 1000.0});
  GradientHistogram h;
  h.record("fc.weight", Kind::WeightGrad, g);
  h.record("fc.weight", Kind::Weight, g);  // not a gradient: never scaled
  h.set_loss_scale(65536.0);
  h.record("fc2.weight", Kind::WeightGrad, g);
  h.record("fc2.weight", Kind::Weight, g);

  const LayerStats& unscaled = h.at("fc.weight", Kind::WeightGrad);
  CHECK(unscaled.f16.flush == 2);  // 2^-30, 2^-26
  CHECK(unscaled.f16.subnormal == 1);
  CHECK(unscaled.f16.overflow == 0);
  CHECK(unscaled.fraction(unscaled.f16.flush) == 0.5);

  const LayerStats& scaled = h.at("fc2.weight", Kind::WeightGrad);
  CHECK(scaled.loss_scale == 65536.0);
  CHECK(scaled.f16.flush == 0);  // 2^-14, 2^-10, 2^-4: all normal
  CHECK(scaled.f16.subnormal == 0);
  CHECK(scaled.f16.below_min_subnormal == 0);
  CHECK(scaled.f16.overflow == 1);  // 1000 * 2^16 > 65520
  CHECK(scaled.bins == unscaled.bins);  // the bins hold the values as recorded

  const LayerStats& weights = h.at("fc2.weight", Kind::Weight);
  CHECK(weights.loss_scale == 1.0);
  CHECK(weights.f16.flush == 2);
  CHECK(h.keys().size() == 4);
  CHECK(h.keys()[0] == std::make_pair(std::string("fc.weight"), Kind::WeightGrad));
}

TEST_CASE("F16/BF16 rounding classes agree with the documented thresholds", "[inspect][cpu]") {
  auto up = [](double v) { return std::nextafter(static_cast<float>(v), 1e30f); };
  auto down = [](double v) { return std::nextafter(static_cast<float>(v), 0.0f); };
  CHECK(round_f16(static_cast<float>(kF16FlushMax)) == Rounding::Flush);
  CHECK(round_f16(up(kF16FlushMax)) == Rounding::Subnormal);
  CHECK(round_f16(static_cast<float>(kF16MinNormal - 0x1p-24)) == Rounding::Subnormal);  // the largest subnormal
  CHECK(round_f16(static_cast<float>(kF16MinNormal - 0x1p-25)) == Rounding::Normal);     // the tie goes up, to even
  CHECK(round_f16(down(kF16MinNormal - 0x1p-25)) == Rounding::Subnormal);
  CHECK(round_f16(down(kF16OverflowMin)) == Rounding::Normal);
  CHECK(round_f16(static_cast<float>(kF16OverflowMin)) == Rounding::Overflow);
  CHECK(round_f16(static_cast<float>(kF16Max)) == Rounding::Normal);
  CHECK(round_bf16(static_cast<float>(kBF16FlushMax)) == Rounding::Flush);
  CHECK(round_bf16(up(kBF16FlushMax)) == Rounding::Subnormal);
  CHECK(round_bf16(static_cast<float>(kBF16MinNormal - 0x1p-134)) == Rounding::Normal);
  CHECK(round_bf16(down(kBF16MinNormal - 0x1p-134)) == Rounding::Subnormal);
  CHECK(round_bf16(static_cast<float>(kBF16Max)) == Rounding::Normal);
  CHECK(round_bf16(down(kBF16OverflowMin)) == Rounding::Normal);
  CHECK(round_bf16(static_cast<float>(kBF16OverflowMin)) == Rounding::Overflow);
  CHECK(round_f16(0.0f) == Rounding::Zero);
  CHECK(round_f16(std::nanf("")) == Rounding::NonFinite);

  // a sweep of random magnitudes against the thresholds
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> mant(1.0, 2.0);
  std::uniform_int_distribution<int> ex(-140, 128);
  int mismatches = 0;
  for (int i = 0; i < 20000; ++i) {
    const float v = static_cast<float>(std::ldexp(mant(rng), ex(rng)));
    const double d = v;
    const Rounding f = round_f16(v), b = round_bf16(v);
    const bool ok = (f == Rounding::Flush) == (d <= kF16FlushMax) &&
                    (f == Rounding::Overflow) == (d >= kF16OverflowMin) &&
                    (f == Rounding::Subnormal) == (d > kF16FlushMax && d < kF16MinNormal - 0x1p-25) &&
                    (b == Rounding::Flush) == (d <= kBF16FlushMax) &&
                    (b == Rounding::Overflow) == (d >= kBF16OverflowMin) &&
                    (b == Rounding::Subnormal) == (d > kBF16FlushMax && d < kBF16MinNormal - 0x1p-134);
    if (!ok) FAIL_CHECK("rounding class disagrees with the thresholds at " << d);
    mismatches += !ok;
  }
  CHECK(mismatches == 0);
}

TEST_CASE("swamping: exact F16 rounding vs the rule of thumb |w| >= 2048 |u|", "[inspect][cpu]") {
  struct Case {
    double w, u;
    bool exact, rule;
  };
  const std::vector<Case> cases = {
      {1.0, 0x1p-12, true, true},          // a quarter ulp: lost either way
      {1.9, 0x1.8p-11, false, true},       // 0.75 ulp of 1.9 moves it; the rule says lost
      {1.0, -0x1.8p-12, false, true},      // below a power of two the ulp halves: -1.5 * 2^-12 moves 1
      {1000.0, 0.25, true, true},          // a tie (half of 1000's ulp 0.5), back to even 1000
      {1000.0, 0.3, false, true},          // just past the tie: 1000.5
      {1.0, 0.001, false, false},          // large enough for both
  };
  std::vector<double> w, u;
  int64_t exact = 0, rule = 0;
  for (const Case& c : cases) {
    INFO("w=" << c.w << " u=" << c.u);
    CHECK(swamped_f16(static_cast<float>(c.w), static_cast<float>(c.u)) == c.exact);
    CHECK(swamped_f16_rule_of_thumb(c.w, c.u) == c.rule);
    w.push_back(c.w);
    u.push_back(c.u);
    exact += c.exact;
    rule += c.rule;
  }
  w.push_back(5.0);
  u.push_back(0.0);  // a zero update is not an update that was lost
  GradientHistogram h;
  h.record_update("p", f32(w), f32(u));
  const LayerStats& s = h.at("p", Kind::Update);
  CHECK(s.updates == 6);
  CHECK(s.f16_swamped == exact);
  CHECK(s.f16_swamped_rule == rule);
  CHECK(s.swamped_fraction(s.f16_swamped) == Approx(2.0 / 6.0));
  CHECK(s.zeros == 1);
  // |u| / ulp16(w): 0.25 and 0.375 (bin -2), 0.75, 0.5 and 0.6 (bin -1), 1.024 (bin 0); the zero update
  // is not counted. Bin -2 is below half a spacing, yet -1.5 * 2^-12 moves 1.0 (the spacing below halves).
  CHECK(s.ulp_bin(-2) == 2);
  CHECK(s.ulp_bin(-1) == 3);
  CHECK(s.ulp_bin(0) == 1);
  CHECK(s.ulp_bin(-3) + s.ulp_bin(1) == 0);
  CHECK(f16_spacing(1.0) == 0x1p-10);
  CHECK(f16_spacing(1.9) == 0x1p-10);
  CHECK(f16_spacing(-1000.0) == 0x1p-1);
  CHECK(f16_spacing(65504.0) == 32.0);
  CHECK(f16_spacing(0x1p-14) == 0x1p-24);  // the smallest normal: its spacing is the subnormals'
  CHECK(f16_spacing(0x1p-20) == 0x1p-24);
  CHECK(f16_spacing(0.0) == 0x1p-24);
  CHECK(std::isinf(f16_spacing(1e6)));     // rounds to inf in F16

  // against an exact-arithmetic reference, with updates F32 adds exactly (a few significant bits)
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> wd(0.01, 1000.0);
  std::uniform_int_distribution<int> k(-40, 40), sh(-14, -8);
  int disagreements_with_rule = 0, mismatches = 0;
  for (int i = 0; i < 5000; ++i) {
    const float w16 = f16_bits_to_float(float_to_f16_bits(static_cast<float>(wd(rng))));
    int e = 0;
    std::frexp(w16, &e);
    const double du = std::ldexp(k(rng), e - 1 + sh(rng) - 2);
    if (du == 0) continue;
    if (swamped_f16(w16, static_cast<float>(du)) != swamped_reference(w16, du)) {
      FAIL_CHECK("swamped_f16 disagrees with the reference at w=" << w16 << " u=" << du);
      ++mismatches;
    }
    disagreements_with_rule += swamped_f16(w16, static_cast<float>(du)) != swamped_f16_rule_of_thumb(w16, du);
  }
  CHECK(mismatches == 0);
  CHECK(disagreements_with_rule > 0);  // the rule is only an approximation
}

TEST_CASE("watching a model records activations and their gradients without changing any gradient",
          "[inspect][cpu]") {
  manual_seed(3);
  nn::Sequential model(nn::Linear(4, 8), nn::ReLU(), nn::Linear(8, 3));
  const Tensor x = randn({5, 4});
  auto grads = [&] {
    model.zero_grad();
    sum(model(x)).backward();
    std::vector<std::vector<double>> g;
    for (const Tensor& p : model.parameters()) g.push_back(p.grad().to_vector<double>());
    return g;
  };
  const auto plain = grads();
  GradientHistogram h;
  h.watch(model);
  CHECK(model[0]->num_forward_hooks() == 1);
  const auto watched = grads();
  CHECK(watched == plain);  // bit for bit

  using K = std::pair<std::string, Kind>;
  CHECK(h.keys() == std::vector<K>{{"0", Kind::Activation}, {"1", Kind::Activation}, {"2", Kind::Activation},
                                   {"2", Kind::ActivationGrad}, {"1", Kind::ActivationGrad},
                                   {"0", Kind::ActivationGrad}});
  CHECK(h.at("0", Kind::Activation).count == 40);
  const LayerStats& out_grad = h.at("2", Kind::ActivationGrad);  // d sum(y) / dy = 1 everywhere
  CHECK(out_grad.count == 15);
  CHECK(out_grad.bin(0) == 15);
  CHECK(h.at("1", Kind::ActivationGrad).count == 40);

  h.record_weights(model);
  h.record_weight_grads(model);
  CHECK(h.at("0.weight", Kind::Weight).count == 32);
  CHECK(h.at("2.bias", Kind::WeightGrad).bin(0) == 0);
  CHECK(h.at("2.bias", Kind::WeightGrad).nonzero() == 3);  // d sum / d b = batch size 5: bin 2
  CHECK(h.at("2.bias", Kind::WeightGrad).bin(2) == 3);

  h.unwatch();
  CHECK(model[0]->num_forward_hooks() == 0);
  model(x);
  CHECK(h.at("0", Kind::Activation).count == 40);  // nothing new
}

TEST_CASE("a histogram destroyed before its model leaves no hook behind", "[inspect][cpu]") {
  nn::Sequential model(nn::Linear(2, 2), nn::Tanh());
  Tensor y;
  {
    GradientHistogram h;
    h.watch(model);
    y = model(ones({1, 2}));  // the graph holds a gradient hook into h's counts
  }
  CHECK(model[0]->num_forward_hooks() == 0);
  sum(y).backward();  // the gradient hook finds the counts gone and does nothing
  CHECK(model.parameters()[0].grad().defined());
  // a leaf module watched directly is named by its type
  nn::Linear fc(2, 2);
  GradientHistogram h;
  h.watch(fc, {.activation_grads = false});
  sum(fc(ones({1, 2}))).backward();
  CHECK(h.keys() == std::vector<std::pair<std::string, Kind>>{{"Linear", Kind::Activation}});
}

TEST_CASE("record_updates compares a snapshot with the weights after an optimizer step", "[inspect][cpu]") {
  nn::Linear fc(3, 2);
  nn::set_data(fc.weight, from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3}));  // exact sums below
  const WeightSnapshot before = snapshot_weights(fc);
  test::set_grad(fc.weight, {1, -2, 0, 4, 0.5, 1e-3});
  test::set_grad(fc.bias, {1, 0});
  optim::SGD opt(fc.parameters(), {.lr = 0.5});
  opt.step();
  GradientHistogram h;
  h.record_updates(before, fc);
  const LayerStats& s = h.at("weight", Kind::Update);
  CHECK(s.count == 6);
  CHECK(s.zeros == 1);
  CHECK(s.updates == 5);
  CHECK(s.bin(-1) == 1);  // -0.5 * 1
  CHECK(s.bin(0) == 1);   // -0.5 * -2
  CHECK(s.bin(1) == 1);   // -0.5 * 4
  CHECK(s.bin(-2) == 1);  // -0.5 * 0.5
  const std::vector<double> w = before.at("weight").to_vector<double>();
  const std::vector<double> g = {1, -2, 0, 4, 0.5, 1e-3};
  int64_t swamped = 0;
  for (size_t i = 0; i < w.size(); ++i)
    if (g[i] != 0) swamped += swamped_f16(static_cast<float>(w[i]), static_cast<float>(-0.5 * g[i]));
  CHECK(s.f16_swamped == swamped);
  CHECK(h.at("bias", Kind::Update).updates == 1);
}

TEST_CASE("write_csv and write_json write reports that read back", "[inspect][cpu]") {
  test::TempDir dir("inspect_hist");
  GradientHistogram h;
  h.set_loss_scale(1024.0);
  h.record("fc.weight", Kind::WeightGrad, f32({0x1p-30, 0x1p-24, 2.0, 0.0, kNaN}));
  h.record("odd,\"name\"", Kind::Activation, f32({1.0, 3.0}));
  h.record_update("fc.weight", f32({1.0, 1.0}), f32({0x1p-12, 0.25}));
  const std::string csv = dir / "hist.csv", json = dir / "hist.json";
  h.write_csv(csv);
  h.write_json(json);

  const auto rows = read_csv(csv);
  REQUIRE(rows.size() == 1 + 3 * (kNumExponentBins + 5) + kNumExponentBins);  // + the update's ulp16 bins
  CHECK(rows[0] == std::vector<std::string>{"layer", "kind", "bin", "lower", "upper", "count"});
  std::map<std::string, int64_t> totals;
  for (size_t i = 1; i < rows.size(); ++i) {
    REQUIRE(rows[i].size() == 6);
    totals[rows[i][0] + "/" + rows[i][1]] += std::stoll(rows[i][5]);
    if (rows[i][0] == "fc.weight" && rows[i][1] == "weight_grad" && rows[i][2] == "-24") {
      CHECK(std::strtod(rows[i][3].c_str(), nullptr) == 0x1p-24);
      CHECK(std::strtod(rows[i][4].c_str(), nullptr) == 0x1p-23);
      CHECK(rows[i][5] == "1");
    }
  }
  CHECK(totals["fc.weight/weight_grad"] == 5);
  CHECK(totals["odd,\"name\"/activation"] == 2);  // the quoted name read back
  CHECK(totals["fc.weight/update"] == 2);
  CHECK(totals["fc.weight/update_ulp16"] == 2);

  const test::Json j = test::JsonReader(read_text(json)).parse();
  CHECK(j["format"].str == "halfgrad.gradient_histogram");
  CHECK(j["bins"]["min_exponent"].number == kMinExponent);
  CHECK(j["markers"]["f16_min_subnormal"]["log2"].number == -24);
  CHECK(j["markers"]["f16_min_normal"]["value"].number == kF16MinNormal);
  CHECK(j["markers"]["f16_max"]["value"].number == 65504);
  CHECK(j["markers"]["bf16_min_subnormal"]["log2"].number == -133);
  REQUIRE(j["entries"].array.size() == 3);
  const test::Json& g = j["entries"][0];
  CHECK(g["layer"].str == "fc.weight");
  CHECK(g["kind"].str == "weight_grad");
  CHECK(g["loss_scale"].number == 1024);
  CHECK(g["count"].number == 5);
  CHECK(g["nonzero"].number == 3);
  CHECK(g["nans"].number == 1);
  CHECK(g["min_exponent"].number == -30);
  CHECK(g["max_exponent"].number == 1);
  CHECK(g["f16"]["flush"].number == 0);      // scaled by 2^10: 2^-20 (a subnormal), 2^-14 (normal), 2^11
  CHECK(g["f16"]["subnormal"].number == 1);
  CHECK(g["f16"]["subnormal_fraction"].number == Approx(1.0 / 3.0));
  CHECK(g["f16"]["below_min_subnormal"].number == 0);
  CHECK(g["bf16"]["flush"].number == 0);
  CHECK(j["entries"][1]["layer"].str == "odd,\"name\"");
  CHECK(j["entries"][1]["min_exponent"].number == 0);
  const test::Json& u = j["entries"][2]["swamping"];
  CHECK(u["updates"].number == 2);
  CHECK(u["f16_swamped"].number == 1);
  CHECK(u["f16_swamped_rule_of_thumb"].number == 1);
  CHECK(u["ulp16_ratio_bins"]["-2"].number == 1);  // 2^-12 / 2^-10
  CHECK(u["ulp16_ratio_bins"]["8"].number == 1);   // 0.25 / 2^-10 = 256
  CHECK(std::distance(std::filesystem::directory_iterator(dir.dir), std::filesystem::directory_iterator()) == 2);
}

TEST_CASE("GradientHistogram errors name the call, the values and the fix", "[inspect][cpu]") {
  GradientHistogram h;
  CHECK_THROWS_WITH(h.set_loss_scale(0.0), Catch::Contains("set_loss_scale: scale=0"));
  CHECK_THROWS_WITH(h.record("i", Kind::Activation, from_vector(std::vector<int64_t>{1}, {1}, {.dtype = DType::I64})),
                    Catch::Contains("'i' has dtype I64"));
  CHECK_THROWS_WITH(h.record_update("p", f32({1, 2}), f32({1})), Catch::Contains("'p' has 2 weights but 1 update"));
  h.record("a", Kind::Weight, f32({1}));
  CHECK_THROWS_WITH(h.at("b", Kind::Weight), Catch::Contains("nothing recorded for 'b' (weight); recorded: a/weight"));
  CHECK_THROWS_WITH(h.write_csv("/nonexistent_hg_dir/h.csv"),
                    Catch::Contains("GradientHistogram::write_csv: cannot create '/nonexistent_hg_dir/h.csv.hg-tmp."));
  CHECK_THROWS_WITH(h.write_json(""), Catch::Contains("GradientHistogram::write_json: the path is empty"));
}
