// nn::save/load and training checkpoints: module round trips that keep parameter identity, strict
// errors, and a resumed run that matches an uninterrupted one bit for bit (SGD momentum, Adam).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>

#include "test_util.h"
#include "core/rng.h"
#include "core/safetensors.h"
#include "nn/checkpoint.h"
#include "nn/nn.h"
#include "ops/loss.h"
#include "optim/adam.h"
#include "optim/sgd.h"

using namespace hg;
namespace fs = std::filesystem;

namespace {

using test::TempDir;

std::shared_ptr<nn::Sequential> make_mlp(uint64_t seed, DType dt = DType::F32) {
  manual_seed(seed);
  auto m = std::make_shared<nn::Sequential>(nn::Linear(4, 8), nn::ReLU(), nn::Linear(8, 3));
  m->to(dt);
  return m;
}

std::string bits(const Tensor& t) { return std::string(static_cast<const char*>(t.data_ptr()), t.nbytes()); }

bool same_bits(const nn::Module& a, const nn::Module& b) {
  const nn::StateDict sa = a.state_dict(), sb = b.state_dict();
  if (sa.size() != sb.size()) return false;
  for (const auto& [k, t] : sa)
    if (!sb.count(k) || bits(t) != bits(sb.at(k))) return false;
  return true;
}

// Full-batch regression on fixed data: the same steps give the same bits.
void train(nn::Module& m, optim::Optimizer& opt, int steps) {
  Generator g(1234);
  const DType dt = m.parameters()[0].dtype();
  const Tensor x = randn({16, 4}, {.dtype = dt}, &g), y = randn({16, 3}, {.dtype = dt}, &g);
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    Tensor loss = mse_loss(m(x), y);
    loss.backward();
    opt.step();
  }
}

using MakeOpt = std::function<std::unique_ptr<optim::Optimizer>(nn::Module&)>;

void check_resume(const MakeOpt& make_opt, const std::string& path, DType dt = DType::F32) {
  constexpr int kN = 5, kM = 7;
  auto straight = make_mlp(7, dt);
  auto opt_s = make_opt(*straight);
  train(*straight, *opt_s, kN + kM);

  auto first = make_mlp(7, dt);
  auto opt_f = make_opt(*first);
  train(*first, *opt_f, kN);
  nn::save_checkpoint(path, *first, *opt_f, {.step = kN});
  nn::save(*first, path + ".model");

  auto resumed = make_mlp(99, dt);  // another init: everything must come from the file
  auto opt_r = make_opt(*resumed);
  REQUIRE(!same_bits(*resumed, *first));
  const nn::Checkpoint ck = nn::load_checkpoint(path, *resumed, *opt_r);
  CHECK(ck.step == kN);
  CHECK(same_bits(*resumed, *first));
  train(*resumed, *opt_r, kM);
  CHECK(same_bits(*resumed, *straight));

  // Without the optimizer's state the run differs, so the check above can fail.
  auto model_only = make_mlp(99, dt);
  nn::load(*model_only, path + ".model");
  auto opt_m = make_opt(*model_only);
  train(*model_only, *opt_m, kM);
  CHECK(!same_bits(*model_only, *straight));
}

}  // namespace

TEST_CASE("nn::save and nn::load round trip a module and keep its parameters' identity", "[checkpoint][cpu]") {
  TempDir tmp("module");
  const std::string path = tmp / "mlp.safetensors";
  auto a = make_mlp(1), b = make_mlp(2);
  REQUIRE(!same_bits(*a, *b));
  nn::save(*a, path);
  const SafetensorsFile f = load_safetensors(path);
  CHECK(f.metadata.at("format") == "pt");
  std::vector<std::string> keys;
  for (const auto& [k, t] : f.tensors) keys.push_back(k);
  CHECK(keys == std::vector<std::string>{"0.bias", "0.weight", "2.bias", "2.weight"});
  CHECK(f.tensors.at("0.weight").shape() == Shape{8, 4});

  const std::vector<Tensor> handles = b->parameters();
  optim::SGD opt(b->parameters(), {.lr = 0.1});
  nn::load(*b, path);
  CHECK(same_bits(*a, *b));
  const std::vector<Tensor> after = b->parameters();
  REQUIRE(after.size() == handles.size());
  for (size_t i = 0; i < after.size(); ++i) {
    CHECK(after[i].same(handles[i]));  // the optimizer's handles still see the loaded values
    CHECK(after[i].requires_grad());
    CHECK(bits(after[i]) == bits(opt.parameters()[i]));
  }
}

TEST_CASE("nn::load is strict and names the keys that do not fit", "[checkpoint][cpu]") {
  TempDir tmp("strict");
  const std::string path = tmp / "mlp.safetensors";
  nn::save(*make_mlp(1), path);
  nn::Sequential smaller(nn::Linear(4, 8));
  CHECK_THROWS_WITH(nn::load(smaller, path), Catch::Contains("unexpected keys: '2.bias' '2.weight'"));
  nn::load(smaller, path, {.strict = false});
  CHECK(bits(smaller.state_dict().at("0.weight")) == bits(make_mlp(1)->state_dict().at("0.weight")));
  nn::Sequential wider(nn::Linear(4, 8), nn::ReLU(), nn::Linear(8, 5));
  CHECK_THROWS_WITH(nn::load(wider, path), Catch::Contains("'2.weight' has shape [3, 8]"));
  nn::Sequential bigger(nn::Linear(4, 8), nn::ReLU(), nn::Linear(8, 3), nn::ReLU(), nn::Linear(3, 1));
  CHECK_THROWS_WITH(nn::load(bigger, path), Catch::Contains("missing keys: '4.weight' '4.bias'"));
}

TEST_CASE("a checkpoint resumes SGD with momentum and Adam bit for bit", "[checkpoint][cpu]") {
  TempDir tmp("resume");
  const std::string path = tmp / "run.safetensors";
  SECTION("SGD momentum") {
    check_resume(
        [](nn::Module& m) {
          return std::make_unique<optim::SGD>(m.parameters(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
        },
        path);
  }
  SECTION("Adam") {
    check_resume(
        [](nn::Module& m) {
          return std::make_unique<optim::Adam>(m.parameters(), optim::AdamOptions{.lr = 0.01, .weight_decay = 0.01});
        },
        path);
  }
  SECTION("Adam on an F16 model: the F32 master weights come back too") {
    check_resume(
        [](nn::Module& m) { return std::make_unique<optim::Adam>(m.parameters(), optim::AdamOptions{.lr = 0.01}); },
        path, DType::F16);
    const SafetensorsFile f = load_safetensors(path);
    CHECK(f.tensors.at("model.0.weight").dtype() == DType::F16);
    CHECK(f.tensors.at("optim.state.0.exp_avg").dtype() == DType::F32);
    REQUIRE(f.tensors.count("optim.state.0.master") == 1);
    CHECK(f.tensors.at("optim.state.0.master").dtype() == DType::F32);
  }
}

TEST_CASE("a checkpoint keeps the step, RNG, scaler slot, extras and metadata", "[checkpoint][cpu]") {
  TempDir tmp("extras");
  const std::string path = tmp / "run.safetensors";
  auto m = make_mlp(3);
  optim::Adam opt(m->parameters(), {.lr = 0.01});
  train(*m, opt, 2);
  manual_seed(0xF00DF00DF00DF00Dull);  // a seed above 2^63 survives the I64 storage
  (void)rand({10});
  const std::map<std::string, Tensor> scaler = {{"scale", full(Shape{}, 65536.0, {.dtype = DType::F64})},
                                                {"growth_tracker", zeros(Shape{}, {.dtype = DType::I64})}};
  nn::save_checkpoint(path, *m, opt,
                      {.step = 1234567890123, .scaler = scaler, .extra = {{"epoch", ones({1})}}, .metadata = {{"run", "x"}}});
  const std::vector<float> expected = rand({5}).to_vector<float>();
  const std::vector<float> later = rand({5}).to_vector<float>();
  REQUIRE(expected != later);

  auto m2 = make_mlp(4);
  optim::Adam opt2(m2->parameters(), {.lr = 0.5});
  const nn::Checkpoint ck = nn::load_checkpoint(path, *m2, opt2);
  CHECK(rand({5}).to_vector<float>() == expected);  // the default generator was restored
  CHECK(ck.rng.seed == 0xF00DF00DF00DF00Dull);
  CHECK(ck.step == 1234567890123);
  CHECK(opt2.lr(0) == 0.01);
  REQUIRE(ck.scaler.size() == 2);
  CHECK(ck.scaler.at("scale").item<double>() == 65536.0);
  CHECK(ck.scaler.at("growth_tracker").dtype() == DType::I64);
  CHECK(ck.extra.at("epoch").item<double>() == 1.0);
  CHECK(ck.metadata == std::map<std::string, std::string>{{"run", "x"}});
  const SafetensorsFile f = load_safetensors(path);
  for (const char* key : {"model.0.weight", "optim.group.0.lr", "optim.state.0.exp_avg", "scaler.scale", "extra.epoch",
                          "rng.seed", "rng.offset", "step"})
    CHECK(f.tensors.count(key) == 1);
}

TEST_CASE("load_checkpoint rejects what does not fit and changes nothing", "[checkpoint][cpu]") {
  TempDir tmp("errors");
  const std::string path = tmp / "run.safetensors", module_file = tmp / "mlp.safetensors";
  auto m = make_mlp(3);
  optim::SGD sgd(m->parameters(), {.lr = 0.1, .momentum = 0.9});
  train(*m, sgd, 2);
  nn::save_checkpoint(path, *m, sgd);
  nn::save(*m, module_file);

  auto other = make_mlp(5);
  const nn::StateDict before = other->state_dict();
  optim::Adam adam(other->parameters(), {.lr = 0.5});
  CHECK_THROWS_WITH(nn::load_checkpoint(path, *other, adam), Catch::Contains("Adam.load_state_dict"));
  CHECK(same_bits(*other, *make_mlp(5)));  // the model was put back
  CHECK(adam.lr(0) == 0.5);
  nn::Sequential wrong(nn::Linear(4, 2));
  optim::SGD sgd2(wrong.parameters(), {.lr = 0.1});
  CHECK_THROWS_WITH(nn::load_checkpoint(path, wrong, sgd2), Catch::Contains("'0.weight' has shape [8, 4]"));
  CHECK_THROWS_WITH(nn::load_checkpoint(module_file, *other, adam), Catch::Contains("not a training checkpoint"));
  CHECK_THROWS_WITH(nn::load(*other, path), Catch::Contains("is a training checkpoint"));
  save_safetensors(path, {{"rng.seed", zeros(Shape{}, {.dtype = DType::I64})}, {"rng.offset", zeros(Shape{}, {.dtype = DType::I64})},
                          {"step", zeros(Shape{}, {.dtype = DType::I64})}, {"stray", zeros({1})}},
                   {{"halfgrad.checkpoint", "1"}});
  CHECK_THROWS_WITH(nn::read_checkpoint(path), Catch::Contains("entry 'stray' outside the sections"));
  CHECK_THROWS_WITH(nn::save_checkpoint(path, *m, sgd, {.metadata = {{"halfgrad.checkpoint", "2"}}}),
                    Catch::Contains("halfgrad's own"));
}
