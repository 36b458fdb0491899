// Autocast (ops/autocast/autocast.h, ops/autocast/policy.h): the policy table in executable form, nesting, eligibility,
// backward dtypes, the weight cast cache and thread-locality. Every op of the table runs under each
// preset and each autocast dtype against the same op run without autocast on inputs cast by a small
// reference of torch's rules written here; the presets are also checked against torch's lists by hand.
#include <catch2/catch.hpp>

#include "test_util.h"
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "autograd/node.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "ops/autocast/autocast.h"
#include "ops/autocast/policy.h"
#include "ops/conv.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/loss.h"
#include "ops/matmul.h"
#include "ops/fp8_linear.h"
#include "ops/norm.h"
#include "ops/pool.h"
#include "ops/reduce.h"
#include "ops/shape.h"

using namespace hg;
using hg::test::capture_stderr;
using amp::CastPolicy;
using amp::OpId;

namespace {

const DeviceType kCpu = DeviceType::CPU;

Tensor input(Shape s, DType dt, uint64_t seed) {  // values in [0.5, 1.5): safe for log, rsqrt, div
  Generator gen(seed);
  return add(rand(std::move(s), {}, &gen), 0.5).to(dt);
}

Tensor class_target(int64_t n, int64_t classes) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back((i * 3 + 1) % classes);
  return from_vector(v, {n}, {.dtype = DType::I64});
}

using Inputs = std::vector<Tensor>;
// An op's output dtype without autocast: the promotion of its floating inputs; its first input's dtype
// (the norms: F16 x with F32 weight and bias gives F16, as torch's mixed-dtype batch_norm/layer_norm); or
// the promotion widened to F32 (halfgrad's losses return F32 for F16/BF16 input, ops/loss.h).
enum class NativeOut { Promoted, First, Widened };
struct OpCase {
  OpId op;
  std::vector<Shape> shapes;  // of the floating inputs the hook sees
  std::function<Tensor(const Inputs&)> run;
  NativeOut native = NativeOut::Promoted;
};

std::vector<OpCase> op_cases() {
  const Tensor cond = from_vector(std::vector<int64_t>{1, 0, 0, 1, 1, 0, 1, 0, 0, 0, 1, 1}, {3, 4}, {.dtype = DType::I64});
  return {
      {OpId::Matmul, {{3, 4}, {4, 5}}, [](const Inputs& x) { return matmul(x[0], x[1]); }},
      {OpId::Linear, {{3, 4}, {5, 4}, {5}}, [](const Inputs& x) { return linear(x[0], x[1], x[2]); }},
      {OpId::Conv2d, {{1, 2, 5, 5}, {3, 2, 3, 3}, {3}}, [](const Inputs& x) { return conv2d(x[0], x[1], x[2]); }},
      {OpId::Add, {{3, 4}, {3, 4}}, [](const Inputs& x) { return add(x[0], x[1]); }},
      {OpId::Sub, {{3, 4}, {3, 4}}, [](const Inputs& x) { return sub(x[0], x[1]); }},
      {OpId::Mul, {{3, 4}, {3, 4}}, [](const Inputs& x) { return mul(x[0], x[1]); }},
      {OpId::Div, {{3, 4}, {3, 4}}, [](const Inputs& x) { return div(x[0], x[1]); }},
      {OpId::Maximum, {{3, 4}, {3, 4}}, [](const Inputs& x) { return maximum(x[0], x[1]); }},
      {OpId::Minimum, {{3, 4}, {3, 4}}, [](const Inputs& x) { return minimum(x[0], x[1]); }},
      {OpId::Where, {{3, 4}, {3, 4}}, [cond](const Inputs& x) { return where(cond, x[0], x[1]); }},
      {OpId::Cat, {{2, 3}, {2, 3}}, [](const Inputs& x) { return cat(x, 0); }},
      {OpId::Exp, {{3, 4}}, [](const Inputs& x) { return exp(x[0]); }},
      {OpId::Log, {{3, 4}}, [](const Inputs& x) { return log(x[0]); }},
      {OpId::Pow, {{3, 4}}, [](const Inputs& x) { return pow(x[0], 3.0); }},
      {OpId::Rsqrt, {{3, 4}}, [](const Inputs& x) { return rsqrt(x[0]); }},
      {OpId::Softmax, {{3, 4}}, [](const Inputs& x) { return softmax(x[0], 1); }},
      {OpId::LogSoftmax, {{3, 4}}, [](const Inputs& x) { return log_softmax(x[0], 1); }},
      {OpId::Sum, {{3, 4}}, [](const Inputs& x) { return sum(x[0]); }},
      {OpId::Mean, {{3, 4}}, [](const Inputs& x) { return mean(x[0], {1}); }},
      {OpId::Var, {{3, 4}}, [](const Inputs& x) { return var(x[0], {1}); }},
      {OpId::BatchNorm, {{4, 3}, {3}, {3}}, [](const Inputs& x) { return batch_norm(x[0], {}, {}, x[1], x[2]); },
       NativeOut::First},
      {OpId::LayerNorm, {{3, 4}, {4}, {4}}, [](const Inputs& x) { return layer_norm(x[0], {4}, x[1], x[2]); },
       NativeOut::First},
      {OpId::CrossEntropy, {{3, 5}}, [](const Inputs& x) { return cross_entropy(x[0], class_target(3, 5)); },
       NativeOut::Widened},
      {OpId::NllLoss, {{3, 5}}, [](const Inputs& x) { return nll_loss(x[0], class_target(3, 5)); },
       NativeOut::Widened},
      {OpId::MseLoss, {{3, 4}, {3, 4}}, [](const Inputs& x) { return mse_loss(x[0], x[1]); },
       NativeOut::Widened},
      {OpId::L1Loss, {{3, 4}, {3, 4}}, [](const Inputs& x) { return l1_loss(x[0], x[1]); },
       NativeOut::Widened},
      {OpId::BceWithLogits, {{3, 4}, {3, 4}}, [](const Inputs& x) { return binary_cross_entropy_with_logits(x[0], x[1]); },
       NativeOut::Widened},
      {OpId::Relu, {{3, 4}}, [](const Inputs& x) { return relu(x[0]); }},
      {OpId::Sigmoid, {{3, 4}}, [](const Inputs& x) { return sigmoid(x[0]); }},
      {OpId::Tanh, {{3, 4}}, [](const Inputs& x) { return tanh(x[0]); }},
      {OpId::Gelu, {{3, 4}}, [](const Inputs& x) { return gelu(x[0]); }},
      {OpId::Silu, {{3, 4}}, [](const Inputs& x) { return silu(x[0]); }},
      {OpId::MaxPool2d, {{1, 2, 4, 4}}, [](const Inputs& x) { return max_pool2d(x[0], {.kernel_size = 2}); }},
      {OpId::AvgPool2d, {{1, 2, 4, 4}}, [](const Inputs& x) { return avg_pool2d(x[0], {.kernel_size = 3, .stride = 1}); },
       NativeOut::Promoted},
      {OpId::AdaptiveAvgPool2d, {{2, 5, 5}}, [](const Inputs& x) { return adaptive_avg_pool2d(x[0], 2); }},
      {OpId::Embedding, {{5, 3}}, [](const Inputs& x) { return embedding(class_target(4, 5), x[0]); }},
      {OpId::Dropout, {{3, 4}}, [](const Inputs& x) {
         Generator g(5);  // a fresh generator per run: the autocast run and the reference draw the same mask
         return dropout(x[0], {.p = 0.5, .generator = &g});
       }},
      {OpId::Fp8Linear, {{3, 4}, {5, 4}}, [](const Inputs& x) {  // Keep in the presets: its output is x's dtype
         return fp8_linear(x[0], x[1], Tensor(), std::make_shared<Fp8LinearState>(Fp8Recipe{.scaling = Fp8Scaling::Current}));
       }, NativeOut::First},
  };
}

// The output dtype torch gives, written out: the op's own rule (NativeOut) applied to its inputs as the
// policy casts them: Lower -> all the autocast dtype, Fp32 -> all F32, Promote -> all the widest input
// (F32 wins over the autocast dtype), Keep (and disabled autocast) -> as they are.
DType expected_dtype(CastPolicy p, DType lower, NativeOut rule, std::vector<DType> ins) {
  auto widest = [&ins] {
    DType w = ins.front();
    for (DType d : ins) w = promote_types(w, d);
    return w;
  };
  const DType promoted = widest() == DType::F32 ? DType::F32 : lower;
  for (DType& d : ins) {
    if (p == CastPolicy::Lower) d = lower;
    if (p == CastPolicy::Fp32) d = DType::F32;
    if (p == CastPolicy::Promote) d = promoted;
  }
  if (rule == NativeOut::First) return ins.front();
  return rule == NativeOut::Widened && is_low_precision(widest()) ? DType::F32 : widest();
}

// torch's rules, written independently of ops/autocast/autocast.cpp: the inputs as the op should see them, or
// nullopt where torch raises (Promote over F16 and BF16).
std::optional<Inputs> reference_cast(CastPolicy p, DType lower, Inputs xs) {
  auto eligible = [](const Tensor& t) { return t.defined() && (is_low_precision(t.dtype()) || t.dtype() == DType::F32); };
  DType to = p == CastPolicy::Lower ? lower : DType::F32;
  if (p == CastPolicy::Keep) return xs;
  if (p == CastPolicy::Promote) {
    to = lower;
    for (const Tensor& t : xs) {
      if (t.dtype() == DType::F32) to = DType::F32;
      else if (t.dtype() != lower && to != DType::F32) return std::nullopt;
    }
  }
  for (Tensor& t : xs)
    if (eligible(t)) t = t.to(to);
  return xs;
}

std::vector<double> values(const Tensor& t) { return t.to(DType::F64).to_vector<double>(); }


Inputs make_inputs(const OpCase& c, const std::vector<DType>& dts) {
  Inputs xs;
  for (size_t i = 0; i < c.shapes.size(); ++i) xs.push_back(input(c.shapes[i], dts[std::min(i, dts.size() - 1)], 7 + i));
  return xs;
}

// One (preset, autocast mode) cell of the table: every op, every input mix, against the reference.
void check_table(const amp::Policy& policy, std::optional<DType> mode) {
  amp::PolicyGuard pg(kCpu, policy);
  const DType lo = mode.value_or(DType::F16);
  const DType other = lo == DType::F16 ? DType::BF16 : DType::F16;
  const std::vector<std::vector<DType>> mixes{{DType::F32}, {lo, DType::F32}, {lo}, {other}};
  for (const OpCase& c : op_cases()) {
    for (const auto& mix : mixes) {
      CAPTURE(amp::op_name(c.op), amp::cast_policy_name(policy.get(c.op)), mode.has_value(), lo, mix);
      const Inputs xs = make_inputs(c, mix);
      const auto ref_in = reference_cast(mode ? policy.get(c.op) : CastPolicy::Keep, lo, xs);
      amp::Autocast ac(kCpu, mode.value_or(DType::BF16), {.enabled = mode.has_value()});
      if (!ref_in) {
        REQUIRE_THROWS_WITH(c.run(xs), Catch::Contains(amp::op_name(c.op)) && Catch::Contains("Promote"));
        continue;
      }
      const Tensor got = c.run(xs);
      std::vector<DType> in_dtypes;
      for (const Tensor& x : xs) in_dtypes.push_back(x.dtype());
      REQUIRE(got.dtype() == expected_dtype(mode ? policy.get(c.op) : CastPolicy::Keep, lo, c.native, in_dtypes));
      Tensor want;
      {
        amp::Autocast off(kCpu, std::nullopt, {.enabled = false});
        want = c.run(*ref_in);
      }
      REQUIRE(got.dtype() == want.dtype());
      REQUIRE(got.shape() == want.shape());
      REQUIRE(values(got) == values(want));
    }
  }
}

bool is_gemm_like(OpId op) { return op == OpId::Matmul || op == OpId::Linear || op == OpId::Conv2d; }
bool is_loss(OpId op) {
  return op == OpId::CrossEntropy || op == OpId::NllLoss || op == OpId::MseLoss || op == OpId::L1Loss || op == OpId::BceWithLogits;
}

}  // namespace

TEST_CASE("autocast policy table: every op under every preset, BF16, F16 and disabled", "[amp][cpu]") {
  std::vector<int> cases_per_op(amp::kNumOps, 0);
  for (const OpCase& c : op_cases()) ++cases_per_op[static_cast<size_t>(c.op)];
  for (int i = 0; i < amp::kNumOps; ++i) {
    CAPTURE(amp::op_name(static_cast<OpId>(i)));
    REQUIRE(cases_per_op[static_cast<size_t>(i)] == 1);  // the table covers every amp::OpId exactly once
  }
  for (const auto& [name, policy] : {std::pair{"pytorch_cpu", amp::Policy::pytorch_cpu()},
                                     std::pair{"pytorch_cuda", amp::Policy::pytorch_cuda()},
                                     std::pair{"apex_o1", amp::Policy::apex_o1()}}) {
    for (std::optional<DType> mode : {std::optional<DType>(DType::BF16), std::optional<DType>(DType::F16),
                                      std::optional<DType>()}) {
      INFO("preset " << name);
      check_table(policy, mode);
    }
  }
}

TEST_CASE("autocast reaches every op: the table with every op Lower, every op Fp32, every op Promote", "[amp][cpu]") {
  // The presets leave many ops Keep, where a missing hook would go unseen; a uniform policy shows that
  // each public op calls the hook (a user override must reach it, and a tracer must see it).
  for (CastPolicy p : {CastPolicy::Lower, CastPolicy::Fp32, CastPolicy::Promote}) {
    amp::Policy uniform;
    for (int i = 0; i < amp::kNumOps; ++i) uniform.set(static_cast<OpId>(i), p);
    INFO("every op " << amp::cast_policy_name(p));
    check_table(uniform, DType::BF16);
    check_table(uniform, DType::F16);
  }
}

TEST_CASE("autocast presets hold torch's CPU and CUDA lists and Apex O1's", "[amp][cpu]") {
  const amp::Policy cpu = amp::Policy::pytorch_cpu(), cuda = amp::Policy::pytorch_cuda(), o1 = amp::Policy::apex_o1();
  for (int i = 0; i < amp::kNumOps; ++i) {
    const OpId op = static_cast<OpId>(i);
    CAPTURE(amp::op_name(op));
    const CastPolicy common = is_gemm_like(op) ? CastPolicy::Lower : is_loss(op) ? CastPolicy::Fp32 : CastPolicy::Keep;
    if (op != OpId::Cat) REQUIRE(cpu.get(op) == common);
    const bool cuda_fp32 = op == OpId::Exp || op == OpId::Log || op == OpId::Pow || op == OpId::Rsqrt || op == OpId::Softmax ||
                           op == OpId::LogSoftmax || op == OpId::Sum || op == OpId::LayerNorm;
    REQUIRE(cuda.get(op) == (cuda_fp32 ? CastPolicy::Fp32 : common));
    const bool o1_promote = op == OpId::Add || op == OpId::Sub || op == OpId::Mul || op == OpId::Div || op == OpId::Cat;
    // torch_overrides' FP32_FUNCS add var; F.gelu is in none of Apex's lists (issue NVIDIA/apex#555 hit it in F16)
    const bool o1_fp32 = cuda_fp32 || op == OpId::Var;
    REQUIRE(o1.get(op) == (o1_promote ? CastPolicy::Promote : o1_fp32 ? CastPolicy::Fp32 : common));
  }
  // in no list of torch CUDA, torch CPU (only 3-D pools there) or Apex O1: they run in their input's dtype
  for (OpId op : {OpId::Relu, OpId::Sigmoid, OpId::Tanh, OpId::Gelu, OpId::MaxPool2d, OpId::AvgPool2d, OpId::AdaptiveAvgPool2d, OpId::Embedding,
                OpId::Dropout}) {
    CAPTURE(amp::op_name(op));
    REQUIRE(cpu.get(op) == CastPolicy::Keep);
    REQUIRE(cuda.get(op) == CastPolicy::Keep);
    REQUIRE(o1.get(op) == CastPolicy::Keep);
  }
  REQUIRE(std::string(amp::op_name(OpId::AdaptiveAvgPool2d)) == "adaptive_avg_pool2d");
  REQUIRE(std::string(amp::op_name(OpId::Dropout)) == "dropout");
  REQUIRE(cpu.get(OpId::Cat) == CastPolicy::Promote);  // torch's CPU promote list: stack, cat, index_copy
  REQUIRE(cuda.get(OpId::Mean) == CastPolicy::Keep);   // mean is in no CUDA list: F16 in, F16 out
  REQUIRE(cuda.get(OpId::BatchNorm) == CastPolicy::Keep);
  REQUIRE(amp::active_policy(kCpu) == cpu);  // the defaults per device type
  REQUIRE(amp::active_policy(DeviceType::CUDA) == cuda);
}

TEST_CASE("autocast output dtypes match torch for a few ops written out by hand", "[amp][cpu]") {
  const Tensor a = input({3, 4}, DType::F32, 1), w = input({5, 4}, DType::F32, 2), h = input({3, 4}, DType::F16, 3);
  {
    amp::Autocast ac(kCpu);  // CPU default: BF16, pytorch_cpu lists
    REQUIRE(amp::get_dtype(kCpu) == DType::BF16);
    REQUIRE(linear(a, w).dtype() == DType::BF16);
    REQUIRE(matmul(a, w.t()).dtype() == DType::BF16);
    REQUIRE(softmax(a, 1).dtype() == DType::F32);
    REQUIRE(softmax(h, 1).dtype() == DType::F16);  // not in torch's CPU fp32 list
    REQUIRE(mse_loss(h, h).dtype() == DType::F32);
    REQUIRE(add(h, a).dtype() == DType::F32);  // native promotion
  }
  amp::PolicyGuard pg(kCpu, amp::Policy::pytorch_cuda());
  amp::Autocast ac(kCpu, DType::F16);
  REQUIRE(linear(a, w).dtype() == DType::F16);
  REQUIRE(softmax(h, 1).dtype() == DType::F32);  // fp32_set_opt_dtype on CUDA
  REQUIRE(sum(h).dtype() == DType::F32);
  REQUIRE(mean(h).dtype() == DType::F16);  // in no CUDA list
  REQUIRE(layer_norm(h, {4}).dtype() == DType::F32);
  REQUIRE(batch_norm(h, {}, {}, {}, {}).dtype() == DType::F16);
  REQUIRE(cross_entropy(linear(a, w), class_target(3, 5)).dtype() == DType::F32);
}

TEST_CASE("autocast guards nest, restore state on exit and on exceptions", "[amp][cpu]") {
  const Tensor a = input({2, 3}, DType::F32, 1), w = input({4, 3}, DType::F32, 2);
  REQUIRE_FALSE(amp::is_enabled(kCpu));
  REQUIRE(amp::get_dtype(kCpu) == DType::BF16);
  REQUIRE(amp::get_dtype(DeviceType::CUDA) == DType::F16);
  REQUIRE(amp::nesting() == 0);
  {
    amp::Autocast outer(kCpu);
    REQUIRE(amp::is_enabled(kCpu));
    REQUIRE_FALSE(amp::is_enabled(DeviceType::CUDA));
    REQUIRE(amp::nesting() == 1);
    {
      amp::Autocast off(kCpu, std::nullopt, {.enabled = false});
      REQUIRE_FALSE(amp::is_enabled(kCpu));
      REQUIRE(linear(a, w).dtype() == DType::F32);
      {
        amp::Autocast f16(kCpu, DType::F16);
        REQUIRE(amp::nesting() == 3);
        REQUIRE(linear(a, w).dtype() == DType::F16);
      }
      REQUIRE(linear(a, w).dtype() == DType::F32);
      REQUIRE(amp::get_dtype(kCpu) == DType::BF16);
    }
    REQUIRE(linear(a, w).dtype() == DType::BF16);
    try {
      amp::Autocast f16(kCpu, DType::F16, {.cache_enabled = false});
      REQUIRE_FALSE(amp::is_cache_enabled());
      throw std::runtime_error("boom");
    } catch (const std::runtime_error&) {
    }
    REQUIRE(amp::is_enabled(kCpu));
    REQUIRE(amp::get_dtype(kCpu) == DType::BF16);
    REQUIRE(amp::is_cache_enabled());
    REQUIRE(amp::nesting() == 1);
  }
  REQUIRE_FALSE(amp::is_enabled(kCpu));
  REQUIRE(amp::nesting() == 0);
  REQUIRE(linear(a, w).dtype() == DType::F32);
}

TEST_CASE("autocast with a dtype other than F16 or BF16 warns once and runs disabled, as torch's", "[amp][cpu]") {
  const Tensor a = input({3, 4}, DType::F32, 1), w = input({5, 4}, DType::F32, 2);
  // the only test constructing these guards: the once-per-(device type, dtype) flags are fresh here
  const std::string err = capture_stderr([&] {
    amp::Autocast outer(kCpu, DType::F16);
    {
      amp::Autocast bad(kCpu, DType::F32);
      REQUIRE_FALSE(amp::is_enabled(kCpu));
      REQUIRE(amp::get_dtype(kCpu) == DType::F16);  // unchanged: a nested default guard still lowers
      REQUIRE(amp::nesting() == 2);
      REQUIRE(linear(a, w).dtype() == DType::F32);
      amp::Autocast inner(kCpu);
      REQUIRE(linear(a, w).dtype() == DType::F16);
    }
    REQUIRE(amp::is_enabled(kCpu));
    REQUIRE(linear(a, w).dtype() == DType::F16);
  });
  REQUIRE_THAT(err, Catch::Contains("Autocast") && Catch::Contains("CPU") && Catch::Contains("F32") &&
                        Catch::Contains("Disabling autocast") && Catch::Contains("F16 and BF16"));
  const std::string again = capture_stderr([&] {
    amp::Autocast bad(kCpu, DType::F32);
    REQUIRE(linear(a, w).dtype() == DType::F32);
  });
  REQUIRE(again.empty());  // shown once
  const std::string other = capture_stderr([&] {
    amp::Autocast i64(kCpu, DType::I64);
    amp::Autocast f64(DeviceType::CUDA, DType::F64);
    REQUIRE_FALSE(amp::is_enabled(kCpu));
    REQUIRE_FALSE(amp::is_enabled(DeviceType::CUDA));
    REQUIRE(amp::get_dtype(DeviceType::CUDA) == DType::F16);
  });
  REQUIRE_THAT(other, Catch::Contains("CPU autocast, but the target dtype I64"));
  REQUIRE_THAT(other, Catch::Contains("CUDA autocast, but the target dtype F64"));
  const std::string quiet = capture_stderr([&] {  // torch warns only when the region asks to be enabled
    amp::Autocast off(kCpu, DType::F64, {.enabled = false});
    REQUIRE_FALSE(amp::is_enabled(kCpu));
  });
  REQUIRE(quiet.empty());
  REQUIRE_FALSE(amp::is_enabled(kCpu));
  REQUIRE(amp::get_dtype(kCpu) == DType::BF16);
  REQUIRE(amp::nesting() == 0);
}

TEST_CASE("autocast never touches F64 or I64 tensors, nor tensors of another device type", "[amp][cpu]") {
  amp::Autocast ac(kCpu);
  const Tensor d = input({3, 4}, DType::F64, 1), dw = input({5, 4}, DType::F64, 2);
  REQUIRE(linear(d, dw).dtype() == DType::F64);
  REQUIRE(values(linear(d, dw)) == values([&] {
            amp::Autocast off(kCpu, std::nullopt, {.enabled = false});
            return linear(d, dw);
          }()));
  REQUIRE(cat({d, d}, 0).dtype() == DType::F64);
  REQUIRE(matmul(d, input({4, 2}, DType::F32, 3)).dtype() == DType::F64);  // F32 lowered, then F64 wins
  const Tensor idx = class_target(3, 5);
  const auto cast = amp::autocast_inputs(OpId::MseLoss, {input({3, 5}, DType::BF16, 4), idx, Tensor()});
  REQUIRE(cast[0].dtype() == DType::F32);
  REQUIRE(cast[1].same(idx));
  REQUIRE_FALSE(cast[2].defined());
  // cross_entropy with class indices reads BF16 logits in F32 itself: autocast leaves them (same bits, below)
  const Tensor logits = input({3, 5}, DType::BF16, 4);
  REQUIRE(amp::autocast_inputs(OpId::CrossEntropy, {logits, idx})[0].same(logits));
  REQUIRE(amp::autocast_inputs(OpId::CrossEntropy, {logits, input({3, 5}, DType::F32, 7)})[0].dtype() == DType::F32);
  amp::Autocast cuda_only(DeviceType::CUDA);  // CPU stays on: the CPU state is per device type
  REQUIRE(linear(input({3, 4}, DType::F32, 5), input({5, 4}, DType::F32, 6)).dtype() == DType::BF16);
}

TEST_CASE("autocast: ops inside a policed op are not cast again", "[amp][cpu]") {
  // mse_loss is composed of sub and mul: with those set to Lower, a direct mul lowers, but the mul
  // inside mse_loss (Fp32) must not, as torch's wrappers exclude the autocast key while they run.
  amp::PolicyGuard pg(kCpu, amp::Policy::pytorch_cpu().set(OpId::Mul, CastPolicy::Lower).set(OpId::Sub, CastPolicy::Lower));
  const Tensor a = input({3, 4}, DType::F32, 1), b = input({3, 4}, DType::F32, 2);
  const Tensor want = mse_loss(a, b);
  amp::Autocast ac(kCpu);
  REQUIRE(mul(a, b).dtype() == DType::BF16);
  const Tensor got = mse_loss(a, b);
  REQUIRE(got.dtype() == DType::F32);
  REQUIRE(got.item() == want.item());
}

TEST_CASE("autocast per-op overrides change the dtype and are restored", "[amp][cpu]") {
  const Tensor a = input({3, 4}, DType::F32, 1), w = input({5, 4}, DType::F32, 2);
  amp::Autocast ac(kCpu);
  {
    amp::PolicyGuard pg(kCpu, amp::active_policy(kCpu));
    amp::set_op_policy(kCpu, OpId::Exp, CastPolicy::Lower);
    amp::set_op_policy(kCpu, OpId::Linear, CastPolicy::Keep);
    REQUIRE(amp::op_policy(kCpu, OpId::Exp) == CastPolicy::Lower);
    REQUIRE(exp(a).dtype() == DType::BF16);
    REQUIRE(linear(a, w).dtype() == DType::F32);
  }
  REQUIRE(exp(a).dtype() == DType::F32);
  REQUIRE(linear(a, w).dtype() == DType::BF16);
  amp::set_op_policy(kCpu, OpId::Linear, CastPolicy::Fp32);
  REQUIRE(linear(a, w).dtype() == DType::F32);
  amp::reset_policy(kCpu);
  REQUIRE(amp::active_policy(kCpu) == amp::Policy::pytorch_cpu());
}

TEST_CASE("autocast per-op overrides reach the activations, pools, embedding and dropout", "[amp][cpu]") {
  const Tensor h = input({1, 2, 4, 4}, DType::BF16, 1);
  const Tensor idx = from_vector(std::vector<int64_t>{3, 0, 3, 1}, {2, 2}, {.dtype = DType::I64});
  Tensor w = input({4, 3}, DType::F32, 2);
  w.requires_grad_();
  amp::Autocast ac(kCpu);
  // the defaults (pytorch_cpu): in no list, so they keep their input's dtype
  REQUIRE(gelu(h).dtype() == DType::BF16);
  REQUIRE(max_pool2d(h, {.kernel_size = 2}).dtype() == DType::BF16);
  REQUIRE(embedding(idx, w).dtype() == DType::F32);
  amp::PolicyGuard pg(kCpu, amp::active_policy(kCpu));
  amp::set_op_policy(kCpu, OpId::Gelu, CastPolicy::Fp32);
  amp::set_op_policy(kCpu, OpId::MaxPool2d, CastPolicy::Fp32);
  amp::set_op_policy(kCpu, OpId::Embedding, CastPolicy::Lower);
  amp::set_op_policy(kCpu, OpId::Dropout, CastPolicy::Fp32);
  const Tensor g = gelu(h);
  REQUIRE(g.dtype() == DType::F32);
  REQUIRE(values(g) == values(gelu(h.to(DType::F32))));  // computed from the F32 cast, not rounded to BF16
  REQUIRE(max_pool2d(h, {.kernel_size = 2}).dtype() == DType::F32);
  REQUIRE(avg_pool2d(h, {.kernel_size = 2}).dtype() == DType::BF16);  // its own entry: still Keep
  REQUIRE(relu(h).dtype() == DType::BF16);
  {
    Generator g1(9), g2(9);
    const Tensor d = dropout(h, {.p = 0.25, .generator = &g1});
    REQUIRE(d.dtype() == DType::F32);
    REQUIRE(values(d) == values(dropout(h.to(DType::F32), {.p = 0.25, .generator = &g2})));
  }
  // embedding: the F32 weight (a leaf that requires grad) is cast once through the cache; the I64
  // indices pass untouched, and the gradient arrives in F32 on the weight
  amp::reset_cast_cache_stats();
  const Tensor e1 = embedding(idx, w), e2 = embedding(idx, w);
  REQUIRE(e1.dtype() == DType::BF16);
  REQUIRE(e1.shape() == Shape({2, 2, 3}));
  REQUIRE(values(e1) == values(embedding(idx, w.detach().to(DType::BF16))));
  REQUIRE(amp::cast_cache_stats().misses == 1);
  REQUIRE(amp::cast_cache_stats().hits == 1);
  const auto cast = amp::autocast_inputs(OpId::Embedding, {idx, w});
  REQUIRE(cast[0].same(idx));
  REQUIRE(cast[1].dtype() == DType::BF16);
  sum(add(e1, e2).to(DType::F32)).backward();
  REQUIRE(w.grad().dtype() == DType::F32);
  REQUIRE(values(w.grad()) == std::vector<double>{2, 2, 2, 2, 2, 2, 0, 0, 0, 4, 4, 4});  // row r: 2 * uses of r
}

TEST_CASE("backward after an autocast region gives F32 grads close to the F32 computation", "[amp][cpu]") {
  Generator gen(11);
  const Tensor x = randn({8, 6}, {}, &gen), t = class_target(8, 4);
  const Tensor w1_0 = mul(randn({16, 6}, {}, &gen), 0.3), w2_0 = mul(randn({4, 16}, {}, &gen), 0.3);
  auto run = [&](std::optional<DType> mode) {
    Tensor w1 = w1_0.detach().clone(), w2 = w2_0.detach().clone(), b1 = zeros({16});
    for (Tensor* p : {&w1, &w2, &b1}) p->requires_grad_();
    Tensor loss;
    {
      amp::Autocast ac(kCpu, mode.value_or(DType::BF16), {.enabled = mode.has_value()});
      const Tensor h = relu(linear(x, w1, b1));
      REQUIRE(h.dtype() == mode.value_or(DType::F32));
      loss = cross_entropy(linear(h, w2), t);
      REQUIRE(loss.dtype() == DType::F32);
    }
    loss.backward();
    return std::vector<Tensor>{w1.grad(), w2.grad(), b1.grad()};
  };
  const auto ref = run(std::nullopt);
  for (DType mode : {DType::BF16, DType::F16}) {
    const auto g = run(mode);
    for (size_t i = 0; i < g.size(); ++i) {
      CAPTURE(mode, i);
      REQUIRE(g[i].dtype() == DType::F32);
      const auto gv = values(g[i]), rv = values(ref[i]);
      double err = 0, scale = 0;
      for (size_t k = 0; k < gv.size(); ++k) err = std::max(err, std::fabs(gv[k] - rv[k])), scale = std::max(scale, std::fabs(rv[k]));
      REQUIRE(scale > 0);
      REQUIRE(err <= (mode == DType::BF16 ? 3e-2 : 4e-3) * scale);
      REQUIRE(gv != rv);  // the low-precision run really ran in low precision
    }
  }
}

TEST_CASE("autocast cast cache: a region's first cast also casts the weights the last region used", "[amp][cpu]") {
  const Tensor x = input({2, 4}, DType::F32, 1);
  Tensor w1 = input({4, 4}, DType::F32, 2), w2 = input({3, 4}, DType::F32, 3), other = input({4, 4}, DType::F32, 4);
  for (Tensor* w : {&w1, &w2, &other}) w->requires_grad_();
  {
    amp::Autocast ac(kCpu);
    (void)linear(linear(x, w1), w2);
    (void)linear(x, other);
  }
  amp::reset_cast_cache_stats();
  Tensor h;
  {
    amp::Autocast ac(kCpu);
    const Tensor h1 = linear(x, w1);
    REQUIRE(amp::cast_cache_size() == 3);  // w2 and other cast ahead, with x and w1, in one batched call
    REQUIRE(amp::cast_cache_stats().misses == 1);  // a cast made ahead counts at its first use
    {
      NoGradGuard no_grad;
      w2.mul_(2.0);  // changed after the cast ahead, before its first use: cast again
    }
    h = linear(h1, w2);
    REQUIRE(amp::cast_cache_stats().misses == 2);
    REQUIRE(amp::cast_cache_stats().hits == 0);
  }
  {
    amp::Autocast ac(kCpu);
    (void)linear(x, w1);
    REQUIRE(amp::cast_cache_size() == 2);  // other went unused in the last region: not cast ahead again
  }
  mean(h).backward();
  const auto g1 = values(w1.grad()), g2 = values(w2.grad());
  w1.grad().zero_();
  w2.grad().zero_();
  Tensor ref;
  {
    amp::Autocast ac(kCpu, std::nullopt, {.cache_enabled = false});  // each weight cast where it is used
    ref = linear(linear(x, w1), w2);
  }
  mean(ref).backward();
  REQUIRE(values(h) == values(ref));
  REQUIRE(g1 == values(w1.grad()));
  REQUIRE(g2 == values(w2.grad()));
}

TEST_CASE("autocast cast cache: one weight passed twice to one op is cast once", "[amp][cpu]") {
  Tensor w = input({4, 4}, DType::F32, 2);
  w.requires_grad_();
  amp::reset_cast_cache_stats();
  Tensor y;
  {
    amp::Autocast ac(kCpu);
    y = matmul(w, w);
  }
  REQUIRE(amp::cast_cache_stats().misses == 1);
  REQUIRE(amp::cast_cache_stats().hits == 1);
  const Tensor w16 = w.detach().to(DType::BF16);
  REQUIRE(values(y) == values(matmul(w16, w16)));
  mean(y).backward();
  REQUIRE(w.grad().dtype() == DType::F32);
}

TEST_CASE("autocast cast cache: a weight used three times is cast once per outermost region", "[amp][cpu]") {
  const Tensor x = input({2, 4}, DType::F32, 1);
  Tensor w = input({4, 4}, DType::F32, 2);
  w.requires_grad_();
  amp::reset_cast_cache_stats();
  Tensor h;
  {
    amp::Autocast ac(kCpu);
    h = linear(linear(linear(x, w), w), w);
    REQUIRE(amp::cast_cache_stats().misses == 1);
    REQUIRE(amp::cast_cache_stats().hits == 2);
    REQUIRE(amp::cast_cache_size() == 1);
    {
      amp::Autocast inner(kCpu, std::nullopt, {.enabled = false});
      h = linear(h.to(DType::F32), w);  // disabled: no cast at all
    }
    REQUIRE(amp::cast_cache_size() == 1);  // an inner exit does not clear
    h = linear(h, w);
    REQUIRE(amp::cast_cache_stats().hits == 3);
  }
  REQUIRE(amp::cast_cache_size() == 0);
  mean(h).backward();  // the shared cast gathers all four gradients into w's F32 grad
  REQUIRE(w.grad().dtype() == DType::F32);
  // the same gradient as without the cache (one cast per use), up to BF16 accumulation order
  Tensor w2 = w.detach().clone();
  w2.requires_grad_();
  {
    amp::Autocast ac(kCpu, std::nullopt, {.cache_enabled = false});
    Tensor h2 = linear(linear(linear(x, w2), w2), w2);
    {
      amp::Autocast inner(kCpu, std::nullopt, {.enabled = false});
      h2 = linear(h2.to(DType::F32), w2);
    }
    h = linear(h2, w2);
  }
  mean(h).backward();
  const auto g1 = values(w.grad()), g2 = values(w2.grad());
  for (size_t k = 0; k < g1.size(); ++k) REQUIRE(std::fabs(g1[k] - g2[k]) <= 2e-2 * (std::fabs(g2[k]) + 1e-2));
  REQUIRE(amp::cast_cache_stats().misses == 1);
  {
    amp::Autocast ac(kCpu);
    linear(x, w);
  }
  REQUIRE(amp::cast_cache_stats().misses == 2);  // a new region casts again
}

TEST_CASE("autocast cast cache follows torch: only F32 leaves that require grad, grad mode on, cache on", "[amp][cpu]") {
  const Tensor x = input({2, 4}, DType::F32, 1), plain = input({4, 4}, DType::F32, 2);
  Tensor w = input({4, 4}, DType::F32, 3), w16 = input({4, 4}, DType::F16, 4);
  w.requires_grad_();
  w16.requires_grad_();
  amp::reset_cast_cache_stats();
  auto counted = [] { return amp::cast_cache_stats().hits + amp::cast_cache_stats().misses; };
  {
    amp::Autocast ac(kCpu);
    linear(x, plain);  // no requires_grad
    linear(x, w16);    // not F32
    linear(x, mul(w, 1.0));  // not a leaf
    {
      NoGradGuard ng;
      REQUIRE(linear(x, w).dtype() == DType::BF16);
    }
    REQUIRE(counted() == 0);
    const Tensor y = linear(x, w);  // grad mode on again: cached, and the cast has a grad_fn
    REQUIRE(y.requires_grad());
    REQUIRE(counted() == 1);
  }
  {
    amp::Autocast ac(kCpu, std::nullopt, {.cache_enabled = false});
    linear(x, w);
    linear(x, w);
  }
  REQUIRE(counted() == 1);
}

TEST_CASE("autocast cast cache never hits for a freed tensor whose address is reused", "[amp][cpu]") {
  const Tensor x = input({2, 4}, DType::F32, 1);
  amp::reset_cast_cache_stats();
  amp::Autocast ac(kCpu);
  const TensorImpl* old = nullptr;
  std::vector<double> first;
  {
    Tensor w = input({4, 4}, DType::F32, 2);
    w.requires_grad_();
    old = w.unsafe_impl();
    first = values(linear(x, w));
  }
  for (int i = 0; i < 8; ++i) {
    Tensor w = input({4, 4}, DType::F32, 100 + i);
    w.requires_grad_();
    const auto v = values(linear(x, w));
    REQUIRE(amp::cast_cache_stats().hits == 0);
    if (w.unsafe_impl() == old) REQUIRE(v != first);
  }
}

TEST_CASE("autocast Promote over F16 and BF16 inputs is an error naming the op, as torch's", "[amp][cpu]") {
  amp::Autocast ac(kCpu);
  const Tensor h = input({2, 3}, DType::F16, 1), f = input({2, 3}, DType::F32, 2);
  REQUIRE_THROWS_WITH(cat({h, h}, 0), Catch::Contains("cat") && Catch::Contains("F16") && Catch::Contains("BF16"));
  REQUIRE(cat({f, h}, 0).dtype() == DType::F32);
  REQUIRE(cat({input({2, 3}, DType::BF16, 3), h.to(DType::BF16)}, 0).dtype() == DType::BF16);
}

TEST_CASE("autocast state is thread-local: another thread sees autocast off", "[amp][cpu]") {
  const Tensor a = input({3, 4}, DType::F32, 1), w = input({5, 4}, DType::F32, 2);
  amp::Autocast ac(kCpu, DType::F16);
  bool enabled = true;
  DType dt = DType::F64, out = DType::F64;
  int depth = -1;
  test::run_threads(1, [&](int) {
    enabled = amp::is_enabled(kCpu);
    dt = amp::get_dtype(kCpu);
    depth = amp::nesting();
    out = linear(a, w).dtype();
  });
  REQUIRE_FALSE(enabled);
  REQUIRE(dt == DType::BF16);
  REQUIRE(depth == 0);
  REQUIRE(out == DType::F32);
  REQUIRE(linear(a, w).dtype() == DType::F16);
}

TEST_CASE("autocast ExcludeGuard turns the op casts off, e.g. around a backward inside a region", "[amp][cpu]") {
  amp::PolicyGuard pg(kCpu, amp::Policy::pytorch_cuda());  // sum is Fp32 there: a bias gradient would be re-cast
  const Tensor x = input({3, 4}, DType::F32, 1), t = input({3, 5}, DType::F32, 2);
  Tensor w = input({5, 4}, DType::F32, 3), b = input({5}, DType::F32, 4);
  w.requires_grad_();
  b.requires_grad_();
  amp::Autocast ac(kCpu, DType::F16);
  {
    amp::ExcludeGuard no_cast;
    REQUIRE(linear(x, w, b).dtype() == DType::F32);
    REQUIRE(amp::is_enabled(kCpu));
  }
  const Tensor loss = mse_loss(linear(x, w, b), t);
  {
    amp::ExcludeGuard no_cast;
    loss.backward();
  }
  REQUIRE(w.grad().dtype() == DType::F32);
  REQUIRE(b.grad().dtype() == DType::F32);
  REQUIRE(linear(x, w, b).dtype() == DType::F16);
}

TEST_CASE("backward inside an autocast region runs in the forward dtypes (autocast stays out of backward)",
          "[amp][cpu]") {
  amp::PolicyGuard pg(kCpu, amp::Policy::pytorch_cuda());  // sum is Fp32 there: linear's bias gradient
  const Tensor x = input({3, 4}, DType::F32, 1), t = input({3, 5}, DType::F32, 2);
  Tensor w = input({5, 4}, DType::F32, 3), b = input({5}, DType::F32, 4);
  w.requires_grad_();
  b.requires_grad_();
  amp::Autocast ac(kCpu, DType::F16);
  const Tensor loss = mse_loss(linear(x, w, b), t);
  loss.backward();  // no ExcludeGuard: the engine's in_backward() flag keeps the casts out
  REQUIRE(w.grad().dtype() == DType::F32);
  REQUIRE(b.grad().dtype() == DType::F32);
  REQUIRE(amp::is_enabled(kCpu));
  REQUIRE(linear(x, w, b).dtype() == DType::F16);  // forward after backward is cast again
}

