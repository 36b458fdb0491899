// conv2d on the GPU (cuDNN graph API, cuda/dnn.cpp; bias kernels in cuda/kernels/conv_bias.cu)
// against the CPU backend, in F32, F16, BF16 and F64:
//  * the three kernel tables directly (forward with bias, backward-data, backward-weight with the bias
//    gradient), every output poisoned with NaN first so an unwritten element fails;
//  * the reference is the CPU kernel in F64 on the same rounded inputs; the error is the relative norm
//    ||gpu - ref|| / ||ref|| (docs/ARCHITECTURE.md, "GPU tolerances"): F32 <= 1e-5 (true fp32: TF32 engines are filtered out),
//    F16 <= 2e-3, BF16 <= 1e-2 (one rounding of the output dominates), F64 <= 1e-12;
//  * empty reductions (no input channels, no batch) write zeros (+ bias), as the CPU does;
//  * the public op conv2d with autograd on both devices;
//  * the device's cuDNN device-property JSON is printed (and written to $HG_DEVPROP_OUT when set) so
//    the guessed fixture of tests/cuda/test_cudnn_plans.cpp can be replaced by a measured one.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "conv_problems.h"
#include "halfgrad.h"
#include "ops/conv.h"
#include "ops/kernels/conv.h"
#include "test_util.h"

namespace hg::cuda::dnn {
std::string device_prop_json(int device);  // cuda/dnn.h (which needs cudnn.h, not on this target's path)
}

using namespace hg;
using test::ConvProblem;
using test::kCnnConv2Batch64;
using test::kConvProblems;

namespace {

const Device kGpu = Device::cuda();
const DType kTypes[] = {DType::F32, DType::F16, DType::BF16, DType::F64};

double bound(DType dt) { return test::dtype_tolerance(dt); }

ConvArgs args_of(const ConvProblem& p, DType dt) {
  return {.dtype = dt, .n = p.n, .c = p.c, .h = p.h, .w = p.w, .k = p.k, .r = p.r, .s = p.s, .oh = p.oh(),
          .ow = p.ow(), .stride_h = p.stride, .stride_w = p.stride, .pad_h = p.pad, .pad_w = p.pad, .dil_h = p.dil,
          .dil_w = p.dil, .groups = p.groups};
}

// The inputs of one problem, rounded to dt once, on the CPU.
struct Inputs {
  Tensor x, w, b, dy;
};

Inputs make_inputs(const ConvArgs& a, DType dt) {
  auto rnd = [dt](Shape s) { return randn(std::move(s), {.dtype = DType::F64}).to(dt); };
  return {rnd({a.n, a.c, a.h, a.w}), rnd({a.k, a.c / a.groups, a.r, a.s}), rnd({a.k}), rnd({a.n, a.k, a.oh, a.ow})};
}

Tensor nan_tensor(Shape s, DType dt, Device dev) {
  return full(std::move(s), std::numeric_limits<double>::quiet_NaN(), {.dtype = dt, .device = dev});
}

// The three outputs of forward + backward of `a` on `dev`, from inputs given in any dtype.
struct Outputs {
  Tensor y, dx, dw, db;
};

Outputs run(ConvArgs a, const Inputs& in, DType dt, Device dev) {
  a.dtype = dt;
  const Tensor x = in.x.to(dt).to(dev), w = in.w.to(dt).to(dev), b = in.b.to(dt).to(dev), dy = in.dy.to(dt).to(dev);
  Outputs o{nan_tensor({a.n, a.k, a.oh, a.ow}, dt, dev), nan_tensor({a.n, a.c, a.h, a.w}, dt, dev),
            nan_tensor({a.k, a.c / a.groups, a.r, a.s}, dt, dev), nan_tensor({a.k}, dt, dev)};
  a.x = x.data_ptr(), a.wt = w.data_ptr(), a.b = b.data_ptr(), a.dy = dy.data_ptr();
  a.y = o.y.data_ptr(), a.dx = o.dx.data_ptr(), a.dw = o.dw.data_ptr(), a.db = o.db.data_ptr();
  conv2d_forward_kernels().get(dev, dt)(a);
  conv2d_backward_data_kernels().get(dev, dt)(a);
  conv2d_backward_weight_kernels().get(dev, dt)(a);
  return {o.y.to(Device::cpu()), o.dx.to(Device::cpu()), o.dw.to(Device::cpu()), o.db.to(Device::cpu())};
}

// ||got - ref|| / ||ref||; NaN anywhere fails.
void check_rel(const Tensor& ref, const Tensor& got, double limit, const std::string& what) {
  INFO(what);
  REQUIRE(ref.shape() == got.shape());
  const std::vector<double> a = ref.to_vector<double>(), b = got.to_vector<double>();
  double num = 0, den = 0;
  int64_t nans = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    nans += std::isnan(b[i]) ? 1 : 0;
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += a[i] * a[i];
  }
  const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  INFO("relative error " << rel << " (bound " << limit << "), " << nans << " NaN of " << b.size());
  CHECK(nans == 0);
  CHECK(rel <= limit);
}

std::string describe(const char* part, const ConvProblem& p, DType dt) {
  std::ostringstream os;
  os << part << " " << p.name << " " << dt << " n=" << p.n << " c=" << p.c << " h=" << p.h << " w=" << p.w
     << " k=" << p.k << " r=" << p.r << " s=" << p.s << " stride=" << p.stride << " pad=" << p.pad
     << " dil=" << p.dil << " groups=" << p.groups;
  return os.str();
}

}  // namespace

TEST_CASE("gpu conv: the device's cuDNN properties as JSON", "[gpu][conv]") {
  const std::string json = cuda::dnn::device_prop_json(0);
  CHECK(json.find("\"deviceVer\"") != std::string::npos);
  CHECK(json.find("\"multiProcessorCount\"") != std::string::npos);
  std::printf("cuDNN device properties of cuda:0:\n%s\n", json.c_str());
  if (const char* out = std::getenv("HG_DEVPROP_OUT")) {
    std::ofstream(out) << json;
    std::printf("written to %s\n", out);
  }
}

TEST_CASE("gpu conv: forward and both backward passes against the CPU", "[gpu][conv]") {
  for (const ConvProblem& p : kConvProblems)
    for (DType dt : kTypes) {
      const ConvArgs a = args_of(p, dt);
      const Inputs in = make_inputs(a, dt);
      const Outputs ref = run(a, in, DType::F64, Device::cpu());
      const Outputs gpu = run(a, in, dt, kGpu);
      check_rel(ref.y, gpu.y, bound(dt), describe("forward (bias)", p, dt));
      check_rel(ref.dx, gpu.dx, bound(dt), describe("backward data", p, dt));
      check_rel(ref.dw, gpu.dw, bound(dt), describe("backward weight", p, dt));
      check_rel(ref.db, gpu.db, bound(dt), describe("backward bias", p, dt));
    }
}

TEST_CASE("gpu conv: a cached plan gives the same forward result again", "[gpu][conv]") {
  const ConvArgs a = args_of(kCnnConv2Batch64, DType::F16);
  const Inputs in = make_inputs(a, DType::F16);
  const Outputs first = run(a, in, DType::F16, kGpu);
  const Outputs second = run(a, in, DType::F16, kGpu);
  CHECK(first.y.to_vector<double>() == second.y.to_vector<double>());
  CHECK(first.dx.to_vector<double>() == second.dx.to_vector<double>());
}

TEST_CASE("gpu conv: empty reductions write zeros and the bias", "[gpu][conv]") {
  for (DType dt : kTypes) {
    INFO(dtype_name(dt));
    // No input channels: y = b everywhere, db = sum of dy (dx and dw have no elements).
    const ConvArgs no_channels = args_of({"c=0", 2, 0, 5, 5, 3, 3, 3, 1, 1, 1, 1}, dt);
    const Inputs in = make_inputs(no_channels, dt);
    const Outputs got = run(no_channels, in, dt, kGpu);
    const Tensor b64 = in.b.to(DType::F64);
    const Tensor want_y = add(zeros({2, 3, 5, 5}, {.dtype = DType::F64}), b64.reshape({1, 3, 1, 1}));
    check_rel(want_y, got.y, bound(dt), "c=0: y = b");
    check_rel(sum(in.dy.to(DType::F64), {0, 2, 3}), got.db, bound(dt), "c=0: db = sum(dy)");
    // No batch: dw = 0 and db = 0 (y and dx have no elements).
    const ConvArgs no_batch = args_of({"n=0", 0, 4, 5, 5, 3, 3, 3, 1, 1, 1, 1}, dt);
    const Outputs zero = run(no_batch, make_inputs(no_batch, dt), dt, kGpu);
    for (double v : zero.dw.to_vector<double>()) CHECK(v == 0.0);
    for (double v : zero.db.to_vector<double>()) CHECK(v == 0.0);
    CHECK(zero.dw.numel() == 3 * 4 * 3 * 3);
  }
}

TEST_CASE("gpu conv: conv2d with autograd matches the CPU", "[gpu][conv]") {
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    const Conv2dFuncOptions o{.stride = 2, .padding = 1, .dilation = 1, .groups = 2};
    const Tensor x = randn({4, 6, 11, 9}, {.dtype = DType::F64}).to(dt);
    const Tensor w = randn({8, 3, 3, 3}, {.dtype = DType::F64}).to(dt);
    const Tensor b = randn({8}, {.dtype = DType::F64}).to(dt);
    Tensor xc = x.to(DType::F64), wc = w.to(DType::F64), bc = b.to(DType::F64);
    Tensor xg = x.to(kGpu), wg = w.to(kGpu), bg = b.to(kGpu);
    for (Tensor* t : {&xc, &wc, &bc, &xg, &wg, &bg}) t->requires_grad_();
    const Tensor yc = conv2d(xc, wc, bc, o);
    const Tensor yg = conv2d(xg, wg, bg, o);
    REQUIRE(yg.device() == kGpu);
    const Tensor dy = randn(yc.shape(), {.dtype = DType::F64}).to(dt);
    yc.backward(dy.to(DType::F64));
    yg.backward(dy.to(kGpu));
    const std::string what = std::string("conv2d autograd ") + dtype_name(dt);
    check_rel(yc, yg.to(Device::cpu()), bound(dt), what + " y");
    check_rel(xc.grad(), xg.grad().to(Device::cpu()), bound(dt), what + " dx");
    check_rel(wc.grad(), wg.grad().to(Device::cpu()), bound(dt), what + " dw");
    check_rel(bc.grad(), bg.grad().to(Device::cpu()), bound(dt), what + " db");
  }
}
