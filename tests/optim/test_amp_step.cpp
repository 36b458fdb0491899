// The optimizers' side of the grad scaler's device path (optim/amp_step.h's AmpStep): a found_inf flag in
// the parameters' memory makes the update kernels skip, and the step counter that then lives beside the
// parameter advances only with steps taken. Run on the CPU, whose kernels read the same pointers.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "optim/adam.h"
#include "optim/sgd.h"
#include "test_util.h"

using namespace hg;
using hg::optim::SGD;
using Vec = std::vector<double>;
using test::make_param;
using test::set_grad;
using test::values;

namespace {

std::string bytes_of(const Tensor& t) { return std::string(static_cast<const char*>(t.data_ptr()), t.nbytes()); }

}  // namespace

TEST_CASE("Optimizer.step(AmpStep): a set found_inf flag leaves parameters and state untouched, steps count only when taken",
          "[optim][amp]") {
  for (DType dt : {DType::F32, DType::BF16}) {
    INFO(dt);
    Tensor p = make_param({1.0, -2.0, 0.5}, dt), q = make_param({1.0, -2.0, 0.5}, dt);
    SGD opt({p}, {.lr = 0.5, .momentum = 0.5, .dampening = 0.5}), ref({q}, {.lr = 0.5, .momentum = 0.5, .dampening = 0.5});
    float flag = 1.0f;
    set_grad(p, {1.0, 2.0, 3.0});
    opt.step(optim::AmpStep{.found_inf = &flag});  // skipped: the momentum buffer stays unset
    CHECK(values(p) == values(q));
    flag = 0.0f;
    for (int k = 0; k < 2; ++k) {
      set_grad(p, {0.5, -1.0, 4.0});
      set_grad(q, {0.5, -1.0, 4.0});
      opt.step(optim::AmpStep{.found_inf = &flag});
      ref.step();
      CHECK(values(p) == values(q));  // the first step taken is torch's first step (buf = g, undamped)
    }
    const optim::StateDict a = opt.state_dict(), b = ref.state_dict();
    CHECK(bytes_of(a.at("state.0.momentum_buffer")) == bytes_of(b.at("state.0.momentum_buffer")));
  }
  Tensor p = make_param({1.0, -2.0}), q = make_param({1.0, -2.0});
  optim::AdamW opt({p}, {.lr = 0.1}), ref({q}, {.lr = 0.1});
  float flag = 1.0f;
  for (int k = 0; k < 3; ++k) {
    flag = k == 1 ? 1.0f : 0.0f;
    set_grad(p, {0.25 * (k + 1), -1.0});
    opt.step(optim::AmpStep{.found_inf = &flag});
    if (k != 1) {
      set_grad(q, {0.25 * (k + 1), -1.0});
      ref.step();
    }
    CHECK(values(p) == values(q));  // the bias corrections follow the steps taken (1, 1, 2)
  }
  CHECK(opt.state_dict().at("state.0.step").item<double>() == 2.0);
  opt.step();  // without a flag the device counter still counts (it is authoritative once made)
  CHECK(opt.state_dict().at("state.0.step").item<double>() == 3.0);
}
