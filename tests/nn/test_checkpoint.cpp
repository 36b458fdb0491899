// nn::save/load and training checkpoints: module round trips that keep parameter identity, strict
// errors, and a resumed run that matches an uninterrupted one bit for bit (SGD momentum, Adam).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>

#include "amp/opt_level.h"
#include "core/rng.h"
#include "core/safetensors.h"
#include "nn/checkpoint.h"
#include "nn/nn.h"
#include "ops/autocast/autocast.h"
#include "ops/loss.h"
#include "optim/adam.h"
#include "optim/sgd.h"
#include "test_util.h"

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
          return std::make_unique<optim::SGD>(m.parameters(), optim::SGDArgs{.lr = 0.05, .momentum = 0.9});
        },
        path);
  }
  SECTION("Adam") {
    check_resume(
        [](nn::Module& m) {
          return std::make_unique<optim::Adam>(m.parameters(), optim::AdamArgs{.lr = 0.01, .weight_decay = 0.01});
        },
        path);
  }
  SECTION("Adam on an F16 model: the F32 master weights come back too") {
    check_resume(
        [](nn::Module& m) { return std::make_unique<optim::Adam>(m.parameters(), optim::AdamArgs{.lr = 0.01}); },
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

namespace {

// One mixed-precision run as amp::initialize sets it up: the model (F16 parameters under O2), Adam (with
// FP32 masters under O2) and a GradScaler whose first scale overflows F16 and which grows every 3 clean
// steps, so the saved scaler state is not its initial one.
struct AmpRun {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::Adam> opt;
  amp::Properties props;
  std::unique_ptr<amp::GradScaler> scaler;
  int skipped = 0;  // overflowing steps (hysteresis 1: each backs the scale off)

  AmpRun(uint64_t seed, amp::OptLevel level) : model(make_mlp(seed)) {
    opt = std::make_unique<optim::Adam>(model->parameters(), optim::AdamArgs{.lr = 0.01});
    props = amp::initialize(*model, *opt, level, {.verbose = false});
    amp::GradScalerOptions so = props.scaler_options();
    so.init_scale = 1048576.0;  // 2^20: the first steps overflow F16 and are skipped
    so.growth_interval = 3;
    scaler = std::make_unique<amp::GradScaler>(so);
  }
  void train(int steps) {
    Generator g(1234);
    const Tensor x = randn({16, 4}, {}, &g), y = randn({16, 3}, {}, &g);
    for (int s = 0; s < steps; ++s) {
      Tensor loss;
      {
        std::optional<amp::Autocast> ac;
        if (props.autocast) ac.emplace(DeviceType::CPU, props.dtype);
        loss = mse_loss((*model)(props.cast_model ? x.to(props.dtype) : x), y);
      }
      opt->zero_grad();
      scaler->scale(loss).backward();
      scaler->step(*opt);
      const double before = scaler->get_scale();
      scaler->update();
      skipped += scaler->get_scale() < before;
    }
  }
};

bool same_scaler(const amp::GradScaler& a, const amp::GradScaler& b) {
  return a.get_scale() == b.get_scale() && a.growth_tracker() == b.growth_tracker() &&
         a.hysteresis_left() == b.hysteresis_left();
}

}  // namespace

TEST_CASE("a mixed-precision run (O1, O2) resumes bit for bit with its scaler and masters", "[checkpoint][amp][cpu]") {
  TempDir tmp("amp_resume");
  const std::string path = tmp / "run.safetensors";
  constexpr int kN = 5, kM = 7;
  for (const amp::OptLevel level : {amp::OptLevel::O1, amp::OptLevel::O2}) {
    CAPTURE(static_cast<int>(level));
    AmpRun straight(7, level);
    straight.train(kN + kM);
    AmpRun first(7, level);
    first.train(kN);
    CHECK(straight.skipped >= 1);              // some steps overflowed and were skipped,
    CHECK(straight.skipped <= (kN + kM) / 2);  // most stepped
    CHECK(first.skipped < kN);                 // the first part too
    nn::save_checkpoint(path, *first.model, *first.opt, {.step = kN, .scaler = first.scaler->state_dict()});

    AmpRun resumed(99, level);
    REQUIRE(!same_bits(*resumed.model, *first.model));
    const nn::Checkpoint ck = nn::load_checkpoint(path, *resumed.model, *resumed.opt);
    resumed.scaler->load_state_dict(ck.scaler);
    CHECK(same_scaler(*resumed.scaler, *first.scaler));
    CHECK(resumed.model->parameters()[0].dtype() == (level == amp::OptLevel::O2 ? DType::F16 : DType::F32));
    resumed.train(kM);
    CHECK(same_bits(*resumed.model, *straight.model));
    CHECK(same_scaler(*resumed.scaler, *straight.scaler));
    if (level == amp::OptLevel::O2)
      for (size_t i = 0; i < straight.model->parameters().size(); ++i)
        CHECK(bits(resumed.opt->master(i)) == bits(straight.opt->master(i)));

    // Without the scaler's state the resumed run rescales from 2^20 and differs, so the checks above can fail.
    AmpRun no_scaler(99, level);
    (void)nn::load_checkpoint(path, *no_scaler.model, *no_scaler.opt);
    no_scaler.train(kM);
    CHECK(!same_scaler(*no_scaler.scaler, *straight.scaler));
  }
}

TEST_CASE("a checkpoint of named parts: two models with two optimizers resume bit for bit, all or nothing",
          "[checkpoint][cpu]") {
  TempDir tmp("parts");
  const std::string path = tmp / "gan.safetensors";
  constexpr int kN = 4, kM = 5;
  const auto sgd = [](nn::Module& m) { return optim::SGD(m.parameters(), {.lr = 0.05, .momentum = 0.9}); };
  const auto adam = [](nn::Module& m) { return optim::Adam(m.parameters(), {.lr = 0.01}); };
  auto g_straight = make_mlp(1), d_straight = make_mlp(2);
  auto og_s = sgd(*g_straight);
  auto od_s = adam(*d_straight);
  train(*g_straight, og_s, kN + kM);
  train(*d_straight, od_s, kN + kM);

  auto g = make_mlp(1), d = make_mlp(2);
  auto og = sgd(*g);
  auto od = adam(*d);
  train(*g, og, kN);
  train(*d, od, kN);
  nn::save_checkpoint(path, {.modules = {{"gen", g.get()}, {"disc", d.get()}}, .optimizers = {{"gen", &og}, {"disc", &od}}},
                      {.step = kN});
  const SafetensorsFile f = load_safetensors(path);
  CHECK(f.tensors.count("model.gen.0.weight") == 1);
  CHECK(f.tensors.count("optim.disc.state.0.exp_avg") == 1);
  CHECK(f.metadata.at("halfgrad.models") == "disc,gen");

  auto g2 = make_mlp(11), d2 = make_mlp(12);
  auto og2 = sgd(*g2);
  auto od2 = adam(*d2);
  const nn::Checkpoint ck = nn::load_checkpoint(
      path, {.modules = {{"gen", g2.get()}, {"disc", d2.get()}}, .optimizers = {{"gen", &og2}, {"disc", &od2}}});
  CHECK(ck.step == kN);
  CHECK(ck.models.size() == 2);
  CHECK(ck.metadata.count("halfgrad.models") == 0);
  CHECK(same_bits(*g2, *g));
  CHECK(same_bits(*d2, *d));
  train(*g2, og2, kM);
  train(*d2, od2, kM);
  CHECK(same_bits(*g2, *g_straight));
  CHECK(same_bits(*d2, *d_straight));

  // other part names: refused, nothing changed
  auto g3 = make_mlp(21), d3 = make_mlp(22);
  auto og3 = sgd(*g3);
  auto od3 = adam(*d3);
  REQUIRE_THROWS_WITH(nn::load_checkpoint(path, {.modules = {{"gen", g3.get()}}, .optimizers = {{"gen", &og3}}}),
                      Catch::Contains("holds the modules [disc,gen]"));
  // a part that does not fit (the discriminator's optimizer is an SGD here): the generator, already
  // restored, is put back
  auto before = make_mlp(21);
  auto od_wrong = sgd(*d3);
  REQUIRE_THROWS(nn::load_checkpoint(
      path, {.modules = {{"gen", g3.get()}, {"disc", d3.get()}}, .optimizers = {{"gen", &og3}, {"disc", &od_wrong}}}));
  CHECK(same_bits(*g3, *before));
  CHECK(!same_bits(*g3, *g));
  // names are checked when saving
  REQUIRE_THROWS_WITH(nn::save_checkpoint(tmp / "bad.safetensors", {.modules = {{"a.b", g.get()}, {"c", d.get()}}}),
                      Catch::Contains("part name 'a.b'"));
}
