// cuDNN graph-API planning (cuda/dnn.h) checked with no GPU: a device-property descriptor loaded from
// tests/cuda/fixtures/a100_sm80.json (an A100, sm_80, the oldest architecture built) stands in for the
// device, so every descriptor halfgrad builds -- tensors, convolution, operation, graph, heuristics,
// engine configs, execution plans -- is finalized by the real cuDNN for the convolutions the models
// use, in every dtype and direction, and bad problems are rejected with readable errors.
// The fixture's values are the A100-SXM4-80GB's published properties (108 SMs, 164 KB opt-in shared
// memory, 40 MB L2, 1410 MHz), not read from a device: the GPU tests print the real JSON
// (dnn::device_prop_json) so it can replace this one the day a device is lent.
// Needs libcudnn >= 9.8 (deviceless planning); with an older one the tests fail and say so.
#if HG_HAS_CUDA

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "conv_problems.h"
#include "core/error.h"
#include "cuda/available.h"
#include "cuda/context.h"
#include "cuda/dnn.h"
#include "ops/kernels/conv.h"

using namespace hg;
using namespace hg::cuda::dnn;
using Catch::Matchers::Contains;
using test::ConvProblem;
using test::kCnnConv1;
using test::kCnnConv2;
using test::kConvProblems;

namespace {

namespace fs = std::filesystem;

// __FILE__ is relative when ccache rewrites paths (CCACHE_BASEDIR): relative to the compile directory,
// which is the test binary's directory (Makefiles) or one of its parents (Ninja).
fs::path fixture_dir() {
  const fs::path rel = fs::path(__FILE__).parent_path() / "fixtures";
  std::vector<fs::path> tries;
  if (const char* env = std::getenv("HG_TEST_FIXTURES")) tries.emplace_back(env);
  if (rel.is_absolute()) {
    tries.push_back(rel);
  } else {
    std::error_code ec;
    fs::path dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
    for (int up = 0; up < 3 && !dir.empty(); ++up, dir = dir.parent_path()) tries.push_back(dir / rel);
    tries.push_back(fs::current_path() / rel);
  }
  for (const fs::path& p : tries)
    if (fs::exists(p / "a100_sm80.json")) return p;
  std::ostringstream msg;
  msg << "test_cudnn_plans: tests/cuda/fixtures/a100_sm80.json not found in:";
  for (const fs::path& p : tries) msg << " " << p;
  msg << "; set HG_TEST_FIXTURES to the fixtures folder";
  throw Error(msg.str());
}

std::string read_fixture(const std::string& name) {
  std::ifstream f(fixture_dir() / name);
  REQUIRE(f.good());
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The A100 device properties, or a failed test that says why planning cannot run devicelessly here.
BackendDesc a100() {
  const int64_t v = cudnn_version();
  INFO("cuDNN runtime version " << v << " (header " << CUDNN_VERSION << "); deviceless plans need >= "
                                << kDevicelessMinVersion
                                << " (CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR); install a newer libcudnn 9");
  REQUIRE(v >= kDevicelessMinVersion);
  return device_prop_from_json(read_fixture("a100_sm80.json"));
}

ConvPlanKey key_of(const ConvProblem& p, ConvDir dir, DType dt) {
  return {.dir = dir, .dtype = dt, .n = p.n, .c = p.c, .h = p.h, .w = p.w, .k = p.k, .r = p.r, .s = p.s,
          .oh = p.oh(), .ow = p.ow(), .stride_h = p.stride, .stride_w = p.stride, .pad_h = p.pad, .pad_w = p.pad,
          .dil_h = p.dil, .dil_w = p.dil, .groups = p.groups};
}

constexpr ConvDir kDirs[] = {ConvDir::Fprop, ConvDir::Dgrad, ConvDir::Wgrad};

// A wrong output height (13 instead of 14).
ConvPlanKey bad_height_key() {
  ConvPlanKey k = key_of({"bad", 8, 16, 14, 14, 32, 3, 3, 1, 1, 1, 1}, ConvDir::Fprop, DType::F16);
  k.oh = 13;
  return k;
}

}  // namespace

TEST_CASE("cudnn: the library and its sub-libraries load", "[cudnn][cuda]") {
  const int64_t v = cudnn_version();
  INFO("libcudnn runtime version " << v << ", header " << CUDNN_VERSION);
  CHECK(v / 10000 == 9);
  CHECK(v / 10000 == CUDNN_VERSION / 10000);
  CHECK(cudnnGraphVersionCheck() == CUDNN_STATUS_SUCCESS);
  CHECK(cudnnCnnVersionCheck() == CUDNN_STATUS_SUCCESS);
  REQUIRE_NOTHROW(BackendDesc(CUDNN_BACKEND_TENSOR_DESCRIPTOR));
}

TEST_CASE("cudnn: deviceless plans finalize for every conv in every dtype and direction", "[cudnn][cuda]") {
  const BackendDesc dev = a100();
  const PlanTarget target{.device_prop = dev.get()};
  const bool verbose = std::getenv("HG_CUDNN_VERBOSE") != nullptr;
  const auto t0 = std::chrono::steady_clock::now();
  int problems = 0;
  std::vector<ConvProblem> all(std::begin(kConvProblems), std::end(kConvProblems));
  all.push_back(kCnnConv2);  // the CNN's conv2 at its training batch of 128
  for (const ConvProblem& p : all)
    for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64})
      for (ConvDir dir : kDirs) {
        const ConvPlanKey key = key_of(p, dir, dt);
        INFO(p.name << ": " << key.str());
        ConvPlans plans;
        REQUIRE_NOTHROW(plans = build_conv_plans(key, target, {.max_plans = 64}));
        REQUIRE(!plans.plans.empty());
        CHECK(plans.heuristic_configs >= static_cast<int64_t>(plans.plans.size()));
        CHECK(plans.key == key);
        int tensor_core = 0;
        for (const ConvPlan& c : plans.plans) {
          CHECK(c.plan.get() != nullptr);
          CHECK(c.engine_config.get() != nullptr);
          CHECK(c.engine_index >= 0);
          CHECK(c.workspace_bytes >= 0);
          tensor_core += c.tensor_core;
        }
        // F32 stays true fp32 (no TF32 engine); F16/BF16 have tensor-core engines on sm_80.
        if (dt == DType::F32) CHECK(tensor_core == 0);
        if (is_low_precision(dt)) CHECK(tensor_core > 0);
        if (verbose)
          std::printf("%-24s %-6s %-5s proposed=%3lld dropped=%2lld plans=%2zu tensor-core=%2d workspace[0]=%lld\n",
                      p.name, dtype_name(dt), dir_name(dir), static_cast<long long>(plans.heuristic_configs),
                      static_cast<long long>(plans.filtered), plans.plans.size(), tensor_core,
                      static_cast<long long>(plans.plans[0].workspace_bytes));
        ++problems;
      }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (verbose) std::printf("%d problems planned in %.2f s\n", problems, s);
  CHECK(problems == static_cast<int>(all.size()) * 4 * 3);
}

TEST_CASE("cudnn: the executor's single plan and the TF32 switch", "[cudnn][cuda]") {
  const BackendDesc dev = a100();
  const PlanTarget target{.device_prop = dev.get()};
  const ConvPlanKey key = key_of(kCnnConv2, ConvDir::Fprop, DType::F32);
  const ConvPlans one = build_conv_plans(key, target);  // the executor's default: the first plan only
  CHECK(one.plans.size() == 1);
  const ConvPlans strict = build_conv_plans(key, target, {.max_plans = 64});
  const ConvPlans tf32 = build_conv_plans(key, target, {.max_plans = 64, .tf32 = Tf32::Allow});
  CHECK(strict.filtered > 0);  // the filter has work to do: the heuristics propose TF32 engines
  int tf32_engines = 0;
  for (const ConvPlan& p : tf32.plans) tf32_engines += p.tensor_core;
  CHECK(tf32_engines > 0);
  CHECK(tf32.plans.size() > strict.plans.size());
  // The heuristics are deterministic, so a cached plan is the one a rebuild would choose.
  const ConvPlans again = build_conv_plans(key, target, {.max_plans = 64});
  REQUIRE(again.plans.size() == strict.plans.size());
  for (size_t i = 0; i < again.plans.size(); ++i) CHECK(again.plans[i].engine_index == strict.plans[i].engine_index);
}

TEST_CASE("cudnn: views aligned only to their element size still get plans", "[cudnn][cuda]") {
  const BackendDesc dev = a100();
  for (ConvDir dir : kDirs) {
    ConvPlanKey key = key_of(kCnnConv2, dir, DType::F16);
    key.alignment = 2;
    INFO(key.str());
    CHECK(!build_conv_plans(key, {.device_prop = dev.get()}).plans.empty());
  }
  ConvPlanKey f32 = key_of(kCnnConv2, ConvDir::Fprop, DType::F32);
  f32.alignment = 2;
  CHECK_THROWS_WITH(build_conv_plans(f32, {.device_prop = dev.get()}),
                    Contains("alignment=2 must be a power of two >= the element size 4"));
}

TEST_CASE("cudnn: inconsistent problems are rejected with the problem named", "[cudnn][cuda]") {
  const BackendDesc dev = a100();
  const PlanTarget target{.device_prop = dev.get()};
  // halfgrad's own check, before cuDNN sees anything.
  CHECK_THROWS_WITH(build_conv_plans(bad_height_key(), target),
                    Contains("output size (13,14) does not match (14,14)") && Contains("y=(8,32,13,14)"));
  // cuDNN's rejection of the same problem, with its reason from cudnnGetLastErrorString.
  for (ConvDir dir : kDirs) {
    ConvPlanKey k = bad_height_key();
    k.dir = dir;
    CHECK_THROWS_WITH(build_conv_plans(k, target, {.shape_check = ShapeCheck::CudnnOnly}),
                      Contains("CUDNN_STATUS_BAD_PARAM") && Contains("finalize the convolution operation") &&
                          Contains("is_valid_spatial_dim") && Contains(std::string("conv2d ") + dir_name(dir)) &&
                          Contains("y=(8,32,13,14)"));
  }
  // Groups live in the filter's C (c/groups): cuDNN itself rejects a C that does not divide x's.
  ConvPlanKey g = key_of({"g", 8, 16, 14, 14, 30, 3, 3, 1, 1, 1, 3}, ConvDir::Fprop, DType::F16);
  CHECK_THROWS_WITH(build_conv_plans(g, target), Contains("groups=3 must divide c=16 and k=30"));
  CHECK_THROWS_WITH(build_conv_plans(g, target, {.shape_check = ShapeCheck::CudnnOnly}),
                    Contains("CUDNN_STATUS_BAD_PARAM") && Contains("w=(30,5,3,3)"));
  ConvPlanKey empty = key_of(kCnnConv1, ConvDir::Wgrad, DType::BF16);
  empty.n = 0;
  CHECK_THROWS_WITH(build_conv_plans(empty, target), Contains("every size must be >= 1") && Contains("x=(0,1,28,28)"));
  ConvPlanKey i64 = key_of(kCnnConv1, ConvDir::Fprop, DType::I64);
  CHECK_THROWS_WITH(build_conv_plans(i64, target), Contains("dtype I64 is not supported"));
  CHECK_THROWS_WITH(build_conv_plans(key_of(kCnnConv1, ConvDir::Fprop, DType::F32), PlanTarget{}),
                    Contains("exactly one of a handle or a device-property descriptor"));
}

TEST_CASE("cudnn: a device-property JSON without a required key is rejected", "[cudnn][cuda]") {
  REQUIRE(cudnn_version() >= kDevicelessMinVersion);
  std::string json = read_fixture("a100_sm80.json");
  const size_t at = json.find("\"maxGridSize\"");
  REQUIRE(at != std::string::npos);
  json.replace(at, 13, "\"maxGridSizeX\"");
  CHECK_THROWS_WITH(device_prop_from_json(json), Contains("CUDNN_STATUS_BAD_PARAM") && Contains("maxGridSize"));
  CHECK_THROWS_WITH(device_prop_from_json("{}"), Contains("finalize the device properties from JSON"));
}

TEST_CASE("cudnn: plan keys carry every field of ConvArgs", "[cudnn][cuda]") {
  ConvArgs a;
  a.dtype = DType::BF16;
  a.n = 2, a.c = 6, a.h = 11, a.w = 13, a.k = 9, a.r = 3, a.s = 5, a.oh = 5, a.ow = 5;
  a.stride_h = 2, a.stride_w = 3, a.pad_h = 1, a.pad_w = 2, a.dil_h = 2, a.dil_w = 1, a.groups = 3;
  const ConvPlanKey k = plan_key(a, ConvDir::Dgrad, 8);
  const ConvPlanKey want{.dir = ConvDir::Dgrad, .dtype = DType::BF16, .n = 2, .c = 6, .h = 11, .w = 13, .k = 9,
                         .r = 3, .s = 5, .oh = 5, .ow = 5, .stride_h = 2, .stride_w = 3, .pad_h = 1, .pad_w = 2,
                         .dil_h = 2, .dil_w = 1, .groups = 3, .alignment = 8};
  CHECK(k == want);
  CHECK_NOTHROW(validate(k));
  CHECK(k.str() ==
        "conv2d dgrad BF16 x=(2,6,11,13) w=(9,2,3,5) y=(2,9,5,5) stride=(2,3) pad=(1,2) dilation=(2,1) groups=3 "
        "alignment=8");
  ConvPlanKey other = k;
  other.pad_w = 1;
  CHECK_FALSE(other == k);
}

TEST_CASE("cudnn: the executor without a device", "[cudnn][cuda]") {
  if (cuda::is_available()) {
    WARN("a CUDA device is present: tests/gpu/test_gpu_conv.cpp runs the executor there");
    return;
  }
  ConvArgs a;
  a.dtype = DType::F16;
  a.n = 0, a.c = 4, a.h = 5, a.w = 5, a.k = 3, a.r = 3, a.s = 3, a.oh = 3, a.ow = 3;
  // Empty outputs return before any CUDA call, so they work (and cost nothing) anywhere.
  CHECK_NOTHROW(conv2d_forward(a));
  CHECK_NOTHROW(conv2d_backward_data(a));
  a.n = 2;
  int fake = 0;  // never dereferenced: the device lookup fails first
  a.x = a.wt = a.dy = &fake;
  a.y = a.dx = a.dw = &fake;
  CHECK_THROWS_WITH(conv2d_forward(a), Contains("no CUDA device is available"));
  CHECK_THROWS_WITH(conv2d_backward_weight(a), Contains("no CUDA device is available"));
  a.y = nullptr;
  CHECK_THROWS_WITH(conv2d_forward(a), Contains("conv2d: y, x or w is null"));
}

#endif  // HG_HAS_CUDA
