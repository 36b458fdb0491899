#pragma once
// An FP8 linear layer, as Transformer Engine's te.Linear computes one under te.fp8_autocast: the input and
// the weight are quantized to FP8 with their scales, the GEMM multiplies the FP8 values exactly and sums in
// F32, the result is multiplied by the inverse scales (and the bias added, in F32) and rounded once to the
// input's dtype; backward quantizes the output gradient (E5M2 in the HYBRID format) and runs the two
// gradient GEMMs the same way (dgrad: dy and the forward's FP8 weight; wgrad: dy and the forward's FP8
// input). The bias gradient is the sum of the unquantized dy, as TE's.
//
//   hg::Fp8Recipe recipe{.scaling = hg::Fp8Scaling::Delayed};            // TE's DelayedScaling, HYBRID
//   hg::nn::convert_to_fp8(model, recipe);                                // Linear -> nn::Fp8Linear (nn/fp8_linear.h)
//   { hg::amp::Fp8Autocast fp8(recipe);                                   // nn::Fp8Linear layers run in FP8
//     loss = cross_entropy(model(x), t); }
//   loss.backward();
//
// How the GEMM runs. On a GPU with FP8 Tensor Cores (compute capability 8.9 and later) the per-tensor
// scalings run cuBLASLt's FP8 GEMM with the inverse scales as scale pointers (ops/kernels/fp8.h,
// GemmArgs with its FP8 fields): the FP8 bytes are the operands, products exact, sums in F32, F32 out. cuBLASLt takes only
// K-major operands ("TN"), so dgrad and wgrad first transpose their FP8 operands (1 byte per element, as
// TE keeps transposed FP8 copies), and only when m, n and k are multiples of 16. Everywhere else (the CPU,
// older GPUs, other shapes, MX): the FP8 values are decoded exactly to BF16 (every E4M3 and E5M2 value is
// a BF16 value) and the BF16 GEMM with an F32 result multiplies them (BF16 products are exact in F32) and
// sums in F32, the same arithmetic up to the order of the F32 additions: on the CPU the BF16 GEMM of
// cpu/gemm.cpp (oneDNN's AMX or AVX512_BF16 kernels, or F32 after widening), on CUDA cuBLAS's.
// Fp8LinearState::native_gemms() counts the GEMMs that ran natively.
//
// Scalings (Fp8Recipe::scaling; each is a class in ops/fp8_scaling.cpp):
//   Delayed  per tensor role (input, weight, output gradient) an Fp8DelayedScaling: the cast uses the scale
//            from the amax history of past calls and records this call's amax; the history is updated
//            right after each cast (TE updates once per step; the two agree when a layer runs once a step).
//   Current  the scale from this call's amax (one more pass over the tensor), nothing kept between calls.
//   Mx       MXFP8: one E8M0 scale per 32 values along the GEMM's reduction dimension (ops/fp8.h,
//            mx_quantize): x and w by rows for the forward, dy by rows and w by columns for dgrad, dy and
//            x by columns for wgrad, each quantized from the high-precision tensor (as TE's MXFP8 keeps a
//            rowwise and a columnwise copy). The scales multiply the decoded values before the GEMM, which is
//            exact (a power of two), so the GEMM is still exact products summed in F32.
//   Unscaled scale 1 for every tensor: a lesson in what the scales are for (weights and gradients of a
//            small network sit far below E4M3's and E5M2's normal range, and flush to zero).
#include <array>
#include <map>
#include <memory>
#include <string>

#include "core/tensor.h"
#include "ops/fp8.h"

namespace hg {

enum class Fp8Scaling : uint8_t { Delayed, Current, Mx, Unscaled };
// TE's Format: HYBRID (E4M3 forward, E5M2 gradients, the default) or E4M3 everywhere.
enum class Fp8Format : uint8_t { Hybrid, E4M3 };

struct Fp8Recipe {
  Fp8Scaling scaling = Fp8Scaling::Delayed;
  Fp8Format format = Fp8Format::Hybrid;
  int64_t amax_history_len = 1024;                    // Delayed: TE's default
  AmaxCompute amax_compute_algo = AmaxCompute::Max;   // Delayed: "max" (TE's default) or "most_recent"
  float margin = 0.0f;                                // Delayed, Current: scale = fp8_max * 2^-margin / amax
  bool pow2_scales = false;                           // Delayed, Current: scales rounded down to powers of two
  MxScaleRule mx_rule = MxScaleRule::Up;              // Mx: TE's rounding up (nothing clips); Floor is OCP's
  int64_t mx_block = 32;                              // Mx: values per scale
  DType forward_dtype() const { return DType::F8E4M3; }
  DType backward_dtype() const { return format == Fp8Format::Hybrid ? DType::F8E5M2 : DType::F8E4M3; }
};
std::string describe(const Fp8Recipe& r);  // "delayed HYBRID, history 1024 max, margin 0"
// An hg::Error naming `op` and the field when a recipe cannot run (history length or MX block below 1, a
// margin that is not finite); Fp8LinearState, amp::Fp8Autocast and nn::convert_to_fp8 all check with it.
void check_fp8_recipe(const Fp8Recipe& r, const char* op);

enum class Fp8Role : uint8_t { Input = 0, Weight = 1, GradOutput = 2 };
const char* fp8_role_name(Fp8Role r);  // "input", "weight", "grad_output"

// What the last cast of one role did (kept when Fp8LinearState::track_stats is on; it costs a copy of the
// tensor to the host): its amax, the scale used (Mx: the largest and smallest block scale), and the
// fractions of the elements that saturated (|x * scale| past the format's largest value) and that were
// flushed to zero (x != 0 but its FP8 value is 0).
struct Fp8CastStats {
  int64_t numel = 0;
  float amax = 0.0f;
  float scale = 1.0f, scale_min = 1.0f;  // per-tensor: both the scale; Mx: the largest and smallest block scale
  double saturated = 0.0, flushed = 0.0;
};

class Fp8ScalingRule;  // ops/fp8_scaling.h: what the recipe does, one class per Fp8Scaling

// The FP8 state of one linear layer: its recipe's scaling (a class per recipe, ops/fp8_scaling.h), whose state
// between calls (delayed scaling: the three roles' Fp8DelayedScaling) a checkpoint saves (save_into /
// load_from) so that a resumed run casts bit for bit as the unbroken one; the statistics and counters.
class Fp8LinearState {
 public:
  explicit Fp8LinearState(const Fp8Recipe& r, Device dev = Device::cpu());
  ~Fp8LinearState();
  Fp8LinearState(const Fp8LinearState&) = delete;
  Fp8LinearState& operator=(const Fp8LinearState&) = delete;
  const Fp8Recipe& recipe() const { return recipe_; }
  Device device() const { return device_; }
  bool has_delayed() const { return recipe_.scaling == Fp8Scaling::Delayed; }
  Fp8DelayedScaling& delayed(Fp8Role r);  // Delayed recipes only
  const Fp8DelayedScaling& delayed(Fp8Role r) const;
  Fp8ScalingRule& scaling() { return *scaling_; }
  bool track_stats = false;
  const Fp8CastStats& stats(Fp8Role r) const { return stats_[static_cast<size_t>(r)]; }
  Fp8CastStats& stats(Fp8Role r) { return stats_[static_cast<size_t>(r)]; }
  int64_t calls() const { return calls_; }  // forward calls so far
  // The FP8 GEMMs run so far (forward, dgrad, wgrad), and those of them that ran on FP8 Tensor Cores
  // (ops/kernels/fp8.h's native FP8 GEMM: cuBLASLt on sm_89 and later) rather than on FP8 values decoded to
  // BF16; native_gemms() is always 0 on the CPU and under Mx.
  int64_t gemms() const { return gemms_; }
  int64_t native_gemms() const { return native_gemms_; }
  void count_gemm(bool native) { ++gemms_, native_gemms_ += native; }
  // The scale (0-d F32) the last per-tensor cast of a role used; undefined before one and under Mx.
  const Tensor& last_scale(Fp8Role r) const { return last_scale_[static_cast<size_t>(r)]; }
  Tensor& last_scale(Fp8Role r) { return last_scale_[static_cast<size_t>(r)]; }
  void count_call() { ++calls_; }
  void to(Device dev);
  // "<role>.amax_history", "<role>.scale", "<role>.scale_inv" under prefix (Delayed; nothing otherwise).
  void save_into(std::map<std::string, Tensor>& out, const std::string& prefix) const;
  void load_from(const std::map<std::string, Tensor>& in, const std::string& prefix);
  bool compatible(const Fp8Recipe& r) const;  // the same scaling, formats and the fields that scaling reads

 private:
  Fp8Recipe recipe_;
  Device device_;
  std::unique_ptr<Fp8ScalingRule> scaling_;
  std::array<Fp8CastStats, 3> stats_{};
  std::array<Tensor, 3> last_scale_{};
  int64_t calls_ = 0;
  int64_t gemms_ = 0, native_gemms_ = 0;
};

struct Fp8LinearOptions {
  // false (evaluation; nn::Fp8Linear in eval()): cast with the scaling state as it is and leave it unchanged,
  // as also whenever grad mode is off (no_grad). Only delayed scaling keeps state; see fp8_linear below.
  bool training = true;
};
// y = x w^T + b computed in FP8 per the state's recipe (x: (*, in) F32/F16/BF16; w: (out, in); b: (out) or
// undefined). Differentiable in x, w and b; y has x's dtype. The state is shared with the backward node.
// A training call (o.training under grad mode) records the amaxes of x and w (and backward that of dy) in a
// delayed-scaling state and updates its scales; an evaluation call casts with the current scales and leaves
// the state bit for bit as it was, so an evaluation pass between training steps changes nothing (Transformer
// Engine likewise updates its scales only when its module is training and grad mode is on).
Tensor fp8_linear(const Tensor& x, const Tensor& w, const Tensor& b, const std::shared_ptr<Fp8LinearState>& state,
                  const Fp8LinearOptions& o = {});

}  // namespace hg

namespace hg::amp {

// Turns FP8 on for nn::Fp8Linear layers on this thread for the guard's lifetime (TE's fp8_autocast, which
// likewise leaves torch.nn.Linear alone): each runs with the guard's recipe (nn/fp8_linear.h says what
// happens to its state when the recipe is not the one it holds). Nestable; enabled = false turns FP8 off
// inside an enabled region. Backward needs no guard: the FP8 layers recorded what their backward does.
class Fp8Autocast {
 public:
  explicit Fp8Autocast(const Fp8Recipe& recipe, bool enabled = true);
  ~Fp8Autocast();
  Fp8Autocast(const Fp8Autocast&) = delete;
  Fp8Autocast& operator=(const Fp8Autocast&) = delete;

 private:
  const Fp8Recipe* prev_;
  Fp8Recipe recipe_;
};
// The recipe of the innermost enabled Fp8Autocast on this thread, or null.
const Fp8Recipe* fp8_recipe();

}  // namespace hg::amp
