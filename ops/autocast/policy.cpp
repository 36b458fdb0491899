#include "ops/autocast/policy.h"

#include <atomic>
#include <iterator>

namespace hg::amp {

const char* op_name(OpId op) {
  static constexpr const char* names[] = {
      "matmul", "linear", "conv2d", "add", "sub", "mul", "div", "maximum", "minimum", "where", "cat",
      "exp", "log", "pow", "rsqrt", "softmax", "log_softmax", "sum", "mean", "var", "batch_norm", "layer_norm",
      "cross_entropy", "nll_loss", "mse_loss", "l1_loss", "binary_cross_entropy_with_logits", "relu", "sigmoid",
      "tanh", "gelu", "silu", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "embedding", "dropout", "fp8_linear"};
  static_assert(std::size(names) == kNumOps, "op_name: one name per amp::OpId, in enum order");
  const auto i = static_cast<size_t>(op);
  return i < std::size(names) ? names[i] : "?";
}

const char* cast_policy_name(CastPolicy p) {
  switch (p) {
    case CastPolicy::Lower: return "Lower";
    case CastPolicy::Fp32: return "Fp32";
    case CastPolicy::Promote: return "Promote";
    case CastPolicy::Keep: return "Keep";
  }
  return "?";
}

namespace {

constexpr OpId kGemmLike[] = {OpId::Matmul, OpId::Linear, OpId::Conv2d};
constexpr OpId kLosses[] = {OpId::CrossEntropy, OpId::NllLoss, OpId::MseLoss, OpId::L1Loss, OpId::BceWithLogits};

Policy with(Policy p, std::initializer_list<OpId> ops, CastPolicy c) {
  for (OpId op : ops) p.set(op, c);
  return p;
}

Policy lower_and_losses() {
  Policy p;
  for (OpId op : kGemmLike) p.set(op, CastPolicy::Lower);
  for (OpId op : kLosses) p.set(op, CastPolicy::Fp32);
  return p;
}

}  // namespace

Policy Policy::pytorch_cuda() {
  return with(lower_and_losses(),
              {OpId::Exp, OpId::Log, OpId::Pow, OpId::Rsqrt, OpId::Softmax, OpId::LogSoftmax, OpId::Sum, OpId::LayerNorm},
              CastPolicy::Fp32);
}

Policy Policy::pytorch_cpu() { return with(lower_and_losses(), {OpId::Cat}, CastPolicy::Promote); }

Policy Policy::apex_o1() {
  const Policy p = with(lower_and_losses(),
                        {OpId::Exp, OpId::Log, OpId::Pow, OpId::Rsqrt, OpId::Softmax, OpId::LogSoftmax, OpId::Sum, OpId::Var,
                         OpId::LayerNorm},
                        CastPolicy::Fp32);
  return with(p, {OpId::Add, OpId::Sub, OpId::Mul, OpId::Div, OpId::Cat}, CastPolicy::Promote);
}

namespace {

Policy default_policy(DeviceType dev) {
  return dev == DeviceType::CUDA ? Policy::pytorch_cuda() : Policy::pytorch_cpu();
}

// One atomic cell per (device type, op): the hook reads one relaxed load, no lock.
struct ActiveTables {
  std::array<std::array<std::atomic<uint8_t>, kNumOps>, kNumDeviceTypes> cells;
  ActiveTables() {
    for (int d = 0; d < kNumDeviceTypes; ++d) store(static_cast<DeviceType>(d), default_policy(static_cast<DeviceType>(d)));
  }
  void store(DeviceType dev, const Policy& p) {
    for (int i = 0; i < kNumOps; ++i)
      cells[static_cast<size_t>(dev)][static_cast<size_t>(i)].store(static_cast<uint8_t>(p.get(static_cast<OpId>(i))),
                                                                    std::memory_order_relaxed);
  }
};

ActiveTables& active() {
  static ActiveTables t;
  return t;
}

}  // namespace

CastPolicy op_policy(DeviceType dev, OpId op) {
  return static_cast<CastPolicy>(
      active().cells[static_cast<size_t>(dev)][static_cast<size_t>(op)].load(std::memory_order_relaxed));
}

Policy active_policy(DeviceType dev) {
  Policy p;
  for (int i = 0; i < kNumOps; ++i) p.set(static_cast<OpId>(i), op_policy(dev, static_cast<OpId>(i)));
  return p;
}

void set_policy(DeviceType dev, const Policy& p) { active().store(dev, p); }

void set_op_policy(DeviceType dev, OpId op, CastPolicy p) {
  active().cells[static_cast<size_t>(dev)][static_cast<size_t>(op)].store(static_cast<uint8_t>(p),
                                                                          std::memory_order_relaxed);
}

void reset_policy(DeviceType dev) { set_policy(dev, default_policy(dev)); }

}  // namespace hg::amp
