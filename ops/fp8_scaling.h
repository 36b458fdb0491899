#pragma once
// The FP8 recipes' behaviour, one class per Fp8Scaling (ops/fp8_scaling.cpp; used by ops/fp8_linear.cpp only):
// how a tensor of one role is cast for a GEMM, and what state the recipe keeps between calls, which is what a
// checkpoint saves and loads. Fp8Recipe is the user's configuration (as Transformer Engine's recipe objects);
// these classes are what the configuration does. A new recipe: its class in ops/fp8_scaling.cpp, its
// Fp8Scaling value, and one line in that file's with_scaling_class.
#include <map>
#include <memory>
#include <ostream>
#include <string>

#include "ops/fp8_linear.h"

namespace hg {

// What a GEMM reads for one operand. Per-tensor recipes: `q` (FP8) and `scale_inv` (0-d F32), the operand
// being decode(q) * scale_inv; the native FP8 GEMM takes q as it is. Block-scaled recipes (MX): `value`, the
// decoded elements multiplied by their block scales (BF16, exact: the scales are powers of two).
struct Fp8Operand {
  Tensor q, scale_inv;
  Tensor value;
  bool per_tensor() const { return q.defined(); }
};

class Fp8ScalingRule {
 public:
  virtual ~Fp8ScalingRule() = default;
  // Casts x (2-D) for a GEMM that reduces along x's dimension `dim`, as the recipe casts `role`, and notes
  // in st what it did (last_scale; stats when st.track_stats). update = false (evaluation): cast with the
  // state as it is and leave it unchanged.
  virtual Fp8Operand cast(Fp8LinearState& st, Fp8Role role, const Tensor& x, DType f8, int64_t dim, bool update) = 0;
  // true: one scale per tensor, so the forward's casts of x and w serve the backward's GEMMs as they are;
  // false (MX): the blocks run along each GEMM's reduction dimension, so backward casts x and w again.
  virtual bool per_tensor() const = 0;
  // The state between calls (delayed scaling's amax histories and scales; nothing for the others).
  virtual void to(Device) {}
  virtual void save_into(std::map<std::string, Tensor>&, const std::string&) const {}
  virtual void load_from(const std::map<std::string, Tensor>&, const std::string&) {}
  virtual Fp8DelayedScaling* delayed(Fp8Role) { return nullptr; }
};

// The class of r.scaling, made for r (its state on dev).
std::unique_ptr<Fp8ScalingRule> make_fp8_scaling(const Fp8Recipe& r, Device dev);
// a and b configure the same scaling (the fields their class reads are equal).
bool same_fp8_scaling(const Fp8Recipe& a, const Fp8Recipe& b);
void describe_fp8_scaling(const Fp8Recipe& r, std::ostream& os);

}  // namespace hg
