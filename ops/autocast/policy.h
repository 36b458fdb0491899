#pragma once
// Autocast cast policies as data: one table OpId -> CastPolicy per preset (torch's autocast_mode.h lists,
// Apex O1's patch lists), with per-op overrides. The ACTIVE policy is process-global, one per device
// type (torch's lists are static per dispatch key, so every thread sees the same table); reads are
// lock-free atomics, so changing it while other threads run ops is safe (they see old or new per op).
#include <array>
#include <cstdint>

#include "core/device.h"

namespace hg::amp {

// halfgrad's autocast-relevant public ops (the ops whose public function calls the autocast hook).
enum class OpId : uint8_t {
  Matmul, Linear, Conv2d,                         // GEMM-like
  Add, Sub, Mul, Div, Maximum, Minimum, Where, Cat,  // multi-input, native type promotion
  Exp, Log, Pow, Rsqrt,                           // transcendental
  Softmax, LogSoftmax, Sum, Mean, Var,            // reductions
  BatchNorm, LayerNorm,                           // norms
  CrossEntropy, NllLoss, MseLoss, L1Loss, BceWithLogits,  // losses
  Relu, Sigmoid, Tanh, Gelu, Silu,                // unary activations
  MaxPool2d, AvgPool2d, AdaptiveAvgPool2d,        // 2-D pooling
  Embedding, Dropout,                             // embedding: only the weight is eligible (indices are I64)
  Fp8Linear,                                      // ops/fp8_linear.h: Keep in every preset (it picks its own formats)
  Count_
};
inline constexpr int kNumOps = static_cast<int>(OpId::Count_);

const char* op_name(OpId op);

// torch's CastPolicy, reduced to what halfgrad's ops need (fp32_set_opt_dtype and fp32_append_dtype
// give the same result as Fp32 for ops without a dtype argument):
//   Lower:   eligible floating inputs -> the autocast dtype (F16/BF16)
//   Fp32:    eligible F16/BF16 inputs -> F32
//   Promote: eligible inputs -> the widest of them, starting at the autocast dtype (F32 wins; F16 mixed
//            with BF16 is an error, as torch's prioritize())
//   Keep:    untouched; the op runs in its inputs' dtypes (native promotion)
// Eligible: defined, on the autocast device type, F32/F16/BF16 (F64 and I64 are never touched).
enum class CastPolicy : uint8_t { Lower, Fp32, Promote, Keep };

const char* cast_policy_name(CastPolicy p);

class Policy {
 public:
  Policy() { table_.fill(CastPolicy::Keep); }  // every op Keep: autocast does nothing

  CastPolicy get(OpId op) const { return table_[static_cast<size_t>(op)]; }
  Policy& set(OpId op, CastPolicy p) {  // per-op user override; chainable
    table_[static_cast<size_t>(op)] = p;
    return *this;
  }
  friend bool operator==(const Policy&, const Policy&) = default;

  // torch AutocastCUDA lists (autocast_mode.h): matmul/linear/conv lower; exp/log/pow/rsqrt, layer_norm and
  // the losses fp32; softmax/log_softmax/sum fp32 via fp32_set_opt_dtype; cross_entropy fp32 through its
  // decomposition. mean, var, batch_norm, cat, the binary ops, relu/sigmoid/tanh/gelu/silu, the 2-D pools,
  // embedding and dropout are in no list (Keep).
  static Policy pytorch_cuda();
  // torch AutocastCPU lists (autocast_mode.cpp): matmul/linear/conv lower; the losses fp32; cat promote.
  // Unlike CUDA, softmax, exp/log/pow, sum and layer_norm are in no CPU list (Keep). The CPU fp32 list has
  // only the 3-D pools (max_pool3d, avg_pool3d, adaptive_avg_pool3d, adaptive_max_pool3d) and
  // fractional_max_pool2d / max_unpool2d: max_pool2d, avg_pool2d and adaptive_avg_pool2d are Keep, as are
  // the activations, embedding and dropout.
  static Policy pytorch_cpu();
  // Apex O1 patch lists (apex/amp/lists): FP16_FUNCS lower; FP32_FUNCS (exp, log, pow, rsqrt, sum, var,
  // softmax, log_softmax, layer_norm, every loss) fp32; CASTS (add, sub, mul, div) and SEQUENCE_CASTS
  // (cat) promote. batch_norm is in no list (cuDNN takes fp16 with fp32 statistics), nor are relu, sigmoid
  // (Apex's BCELoss ban suggests registering it fp32 by hand), tanh, gelu and silu (newer than the lists), the
  // pools, embedding and dropout.
  static Policy apex_o1();

 private:
  std::array<CastPolicy, kNumOps> table_{};
};

// The active policy of a device type. Defaults: CPU -> pytorch_cpu(), CUDA -> pytorch_cuda().
Policy active_policy(DeviceType dev);
void set_policy(DeviceType dev, const Policy& p);
void set_op_policy(DeviceType dev, OpId op, CastPolicy p);  // override one op of the active policy
void reset_policy(DeviceType dev);                        // back to the device's default preset
CastPolicy op_policy(DeviceType dev, OpId op);              // what the hook reads

// Installs a policy for its lifetime and restores the previous one (tests, scoped experiments).
class PolicyGuard {
 public:
  PolicyGuard(DeviceType dev, const Policy& p) : dev_(dev), prev_(active_policy(dev)) { set_policy(dev, p); }
  ~PolicyGuard() { set_policy(dev_, prev_); }
  PolicyGuard(const PolicyGuard&) = delete;
  PolicyGuard& operator=(const PolicyGuard&) = delete;

 private:
  DeviceType dev_;
  Policy prev_;
};

}  // namespace hg::amp
