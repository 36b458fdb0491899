// amp::initialize: Apex's opt levels resolved into properties, applied to a model and optimizer.
#include <catch2/catch.hpp>

#include <cmath>
#include <sstream>

#include "amp/grad_scaler.h"
#include "amp/opt_level.h"
#include "core/rng.h"
#include "nn/nn.h"
#include "ops/loss.h"
#include "ops/shape.h"
#include "optim/sgd.h"

using namespace hg;

namespace {
struct Net : nn::Module {
  std::shared_ptr<nn::Conv2d> conv = register_module("conv", std::make_shared<nn::Conv2d>(1, 4, 3));
  std::shared_ptr<nn::BatchNorm2d> bn = register_module("bn", std::make_shared<nn::BatchNorm2d>(4));
  std::shared_ptr<nn::Linear> fc = register_module("fc", std::make_shared<nn::Linear>(4 * 4 * 4, 3));
  std::string type_name() const override { return "Net"; }
  Tensor forward(const Tensor& x) override { return fc->forward(flatten(relu(bn->forward(conv->forward(x))), 1)); }
};

const amp::Overrides kQuiet{.verbose = false};
}  // namespace

TEST_CASE("amp::initialize O0 and O1 keep F32 parameters", "[amp][cpu]") {
  for (amp::OptLevel level : {amp::OptLevel::O0, amp::OptLevel::O1}) {
    Net net;
    optim::SGD opt(net.parameters(), {.lr = 0.1});
    const amp::Properties p = amp::initialize(net, opt, level, kQuiet);
    for (const Tensor& t : net.parameters()) CHECK(t.dtype() == DType::F32);
    CHECK(p.autocast == (level == amp::OptLevel::O1));
    CHECK(p.scaler_options().enabled == (level == amp::OptLevel::O1));
    if (level == amp::OptLevel::O1) {
      CHECK(p.dtype == DType::F16);
      CHECK(p.dynamic_loss_scale);
      CHECK(p.scaler_options().init_scale == 65536.0);
    }
  }
}

TEST_CASE("amp::initialize O2 casts to F16 except batch norm and keeps FP32 masters", "[amp][cpu]") {
  manual_seed(1);
  Net net;
  optim::SGD opt(net.parameters(), {.lr = 0.1});
  const Tensor conv_w = net.conv->weight;
  const std::vector<float> before = conv_w.to_vector<float>();
  const amp::Properties p = amp::initialize(net, opt, amp::OptLevel::O2, kQuiet);
  CHECK(net.conv->weight.dtype() == DType::F16);
  CHECK(net.fc->weight.dtype() == DType::F16);
  CHECK(net.bn->weight.dtype() == DType::F32);
  CHECK(net.bn->running_var.dtype() == DType::F32);
  CHECK(conv_w.same(net.conv->weight));  // the optimizer's handle is the converted parameter
  CHECK(p.master_weights);
  amp::GradScaler scaler(p.scaler_options());
  const Tensor x = randn({2, 1, 6, 6}).to(DType::F16);
  const Tensor y = from_vector(std::vector<int64_t>{0, 2}, {2}, {.dtype = DType::I64});
  scaler.scale(cross_entropy(net.forward(x), y)).backward();
  CHECK(scaler.step(opt).stepped());
  scaler.update();
  const Tensor master = opt.master(0);
  REQUIRE(master.defined());
  CHECK(master.dtype() == DType::F32);
  CHECK(conv_w.to_vector<float>() == master.to(DType::F16).to_vector<float>());  // re-rounded from the master
  CHECK(conv_w.to_vector<float>() != before);
}

TEST_CASE("amp::initialize O3 is pure F16 without masters or scaling", "[amp][cpu]") {
  Net net;
  optim::SGD opt(net.parameters(), {.lr = 0.1});
  const amp::Properties p = amp::initialize(net, opt, amp::OptLevel::O3, kQuiet);
  for (const Tensor& t : net.parameters()) CHECK(t.dtype() == DType::F16);
  CHECK_FALSE(p.master_weights);
  CHECK(opt.master_weights() == optim::MasterWeights::Off);
  CHECK_FALSE(p.scaler_options().enabled);  // loss scale 1
}

TEST_CASE("amp::initialize overrides replace the level's defaults and are checked", "[amp][cpu]") {
  Net a;
  optim::SGD oa(a.parameters(), {.lr = 0.1});
  const amp::Properties p = amp::initialize(
      a, oa, amp::OptLevel::O2,
      {.keep_batchnorm_fp32 = false, .loss_scale = 128.0, .dtype = DType::BF16, .verbose = false});
  CHECK(a.bn->weight.dtype() == DType::BF16);
  CHECK(a.fc->weight.dtype() == DType::BF16);
  CHECK_FALSE(p.dynamic_loss_scale);
  CHECK(p.scaler_options().enabled);
  CHECK_FALSE(p.scaler_options().dynamic);
  CHECK(p.scaler_options().init_scale == 128.0);
  Net b;
  optim::SGD ob(b.parameters(), {.lr = 0.1});
  CHECK_THROWS_WITH(amp::initialize(b, ob, amp::OptLevel::O1, {.dtype = DType::F64, .verbose = false}),
                    Catch::Contains("is not a low precision"));
  CHECK_THROWS_WITH(amp::initialize(b, ob, amp::OptLevel::O1, {.loss_scale = 0.0, .verbose = false}),
                    Catch::Contains("loss_scale 0 must be > 0"));
}

TEST_CASE("amp::initialize prints the resolved properties", "[amp][cpu]") {
  amp::Properties p;
  p.level = amp::OptLevel::O2;
  p.dtype = DType::F16;
  p.cast_model = p.keep_batchnorm_fp32 = p.master_weights = p.dynamic_loss_scale = true;
  p.loss_scale = 65536;
  std::ostringstream os;
  os << p;
  CHECK(os.str().find("opt_level O2") != std::string::npos);
  CHECK(os.str().find("keep_batchnorm_fp32 : True") != std::string::npos);
  CHECK(os.str().find("loss_scale          : dynamic (initial 65536)") != std::string::npos);
}

// Apex O2 keeps F16 parameters with F16 gradients; after scaler.unscale_ those are still scaled (unscaling
// them in F16 would flush small values) and their 1/scale waits for the update. Clipping by the model's
// parameters, as a PyTorch recipe writes it, must still see the unscaled norm and clip the real gradients.
TEST_CASE("O2: nn::utils::clip_grad_norm_(model.parameters()) after unscale_ gives the unscaled norm", "[amp][cpu]") {
  for (amp::StepSkip path : {amp::StepSkip::Host, amp::StepSkip::Kernel}) {
    INFO((path == amp::StepSkip::Host ? "host path" : "device path"));
    manual_seed(7);
    Net f32;
    manual_seed(7);
    Net o2;
    manual_seed(7);
    Net o2_opt;  // the same run, clipped through the optimizer's overload
    manual_seed(8);
    const Tensor x = randn({4, 1, 6, 6});
    const Tensor y = from_vector(std::vector<int64_t>{0, 2, 1, 2}, {4}, {.dtype = DType::I64});
    optim::SGD f32_opt(f32.parameters(), {.lr = 0.1});
    cross_entropy(f32.forward(x), y).backward();
    const double f32_norm = nn::utils::clip_grad_norm_(f32.parameters(), 1e9);  // no clipping: the norm only

    for (int which = 0; which < 2; ++which) {
      Net& net = which == 0 ? o2 : o2_opt;
      optim::SGD opt(net.parameters(), {.lr = 0.1});
      const amp::Properties p = amp::initialize(net, opt, amp::OptLevel::O2, kQuiet);
      amp::GradScalerOptions so = p.scaler_options();
      so.init_scale = 1024.0;
      so.step_skip = path;
      amp::GradScaler scaler(so);
      scaler.scale(cross_entropy(net.forward(x.to(DType::F16)), y)).backward();
      scaler.unscale_(opt);
      // the norm from the gradients as they are: F16 ones still carry the scale, F32 ones (batch norm) do not
      double sum = 0.0;
      for (const Tensor& t : net.parameters())
        for (double g : t.grad().to_vector<double>()) {
          const double u = t.dtype() == DType::F16 ? g / 1024.0 : g;
          sum += u * u;
        }
      const double unscaled = std::sqrt(sum);
      const double max_norm = unscaled / 2;  // clips by one half
      const double norm = which == 0 ? nn::utils::clip_grad_norm_(net.parameters(), max_norm)
                                     : optim::clip_grad_norm_(opt, max_norm);
      CHECK(norm == Approx(unscaled).epsilon(1e-9));
      CHECK(norm == Approx(f32_norm).epsilon(0.02));  // F16 forward and backward against F32
      CHECK(norm < 10 * f32_norm);                    // (the scaled norm would be about 1024 times larger)
      CHECK(scaler.step(opt).stepped());
      scaler.update();
    }
    // both overloads clipped the same gradients by the same factor: the same masters and parameters
    const std::vector<Tensor> pa = o2.parameters(), pb = o2_opt.parameters();
    for (size_t i = 0; i < pa.size(); ++i) CHECK(pa[i].to_vector<double>() == pb[i].to_vector<double>());
  }
}
