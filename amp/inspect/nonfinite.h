#pragma once
// NonFiniteOrigin: when a step overflows (GradScaler's found_inf), re-run that step's forward and backward
// inside one of these and it names the FIRST op or backward node that turned finite values into inf/NaN,
// and whether that was an overflow (a result beyond the dtype's max, e.g. F16's 65504) or an invalid
// operation (0/0, inf-inf, 0*inf, log or sqrt of a negative: NaN).
//
//   // the step at which scaler.step(opt) reported found_inf: same batch, same weights, no optimizer step
//   hg::amp::inspect::NonFiniteOrigin origin(&model);      // root: name modules by their dotted path
//   { hg::amp::Autocast ac(dev.type, DType::F16); loss = cross_entropy(model(x), y); }
//   (loss * scale).backward();
//   if (origin.found()) std::puts(origin.first()->describe().c_str());
//   // first non-finite in backward of 'cross_entropy', outside any module, gradient of input 0
//   // (F16 [64, 10]): F16 overflow (|x| > 65504) ...
//   // (an autocast cast's backward is named as "'to(dtype)' (autocast cast of input 0 of 'mse_loss')")
//
// While alive, on the constructing thread (destroy it there too), it observes:
//  * every public op that passes through the autocast hook (amp::ObserveOps; ops/autocast/policy.h's amp::OpId list),
//    outermost calls only. An op whose floating inputs, as run, are all finite and whose output is not is
//    an origin (site Output). An autocast cast that turned a finite input into inf (an F32 value beyond
//    65504 cast to F16) is an origin too (site AutocastCast). Ops that do not pass through the hook (a
//    scalar mul, neg, Tensor::to, reshape) are not seen: a non-finite value they make is reported at the
//    next observed op, as site Input with cause Upstream.
//  * every backward node (autograd::ObserveBackward): a node whose incoming gradient is finite and one of
//    whose returned gradients is not is an origin (site Gradient, naming the input index). A node that
//    receives a non-finite gradient while no origin is known (a non-finite seed, the engine's sum of two
//    contributions overflowing, a hook) gives site IncomingGradient with cause Upstream. Nodes are named
//    by the forward op that recorded them and the module that op ran in.
// Only the first finding is kept: everything after it is usually its propagation. Counts of ops and nodes
// that saw a non-finite value keep running.
//
// Costs: every observed op's inputs and output, and every node's gradients, are copied to the host (a
// device sync on CUDA) and scanned in double. Opt-in debugging, not a training path. It reads only: the
// numbers (outputs, gradients) are bit-identical with and without it.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/tensor.h"
#include "nn/module.h"

namespace hg::amp::inspect {

enum class Pass : uint8_t { Forward, Backward };

enum class Site : uint8_t {
  Output,            // forward: the op's output (its inputs as run were finite)
  AutocastCast,      // forward: the autocast cast of one input (finite before, non-finite after)
  Input,             // forward: an input was already non-finite (made by a leaf or an unobserved op)
  Gradient,          // backward: a gradient the node returned (its incoming gradient was finite)
  IncomingGradient,  // backward: the gradient the node received was already non-finite
};

enum class Cause : uint8_t {
  Overflow,      // inf from finite values: the result's magnitude exceeds the dtype's max
  DivideByZero,  // inf from a zero operand of div, log, pow or rsqrt (forward only)
  Invalid,       // NaN (and no inf) from finite values: 0/0, inf-inf, 0*inf, log/sqrt of a negative
  Upstream,      // the values were non-finite on arrival: the origin is something not observed
};

const char* pass_name(Pass p);    // "forward", "backward"
const char* site_name(Site s);    // "output", "autocast_cast", "input", "gradient", "incoming_gradient"
const char* cause_name(Cause c);  // "overflow", "divide_by_zero", "invalid", "upstream"
double dtype_max(DType dt);       // largest finite value: F16 65504, BF16 3.39e38, F32 3.40e38, F64 1.80e308

// The non-finite elements of one tensor.
struct NonFiniteCounts {
  int64_t pos_inf = 0, neg_inf = 0, nan = 0;
  int64_t first_index = -1;  // flat (row-major) index of the first non-finite element; -1: none
  int64_t total() const { return pos_inf + neg_inf + nan; }
};

struct NonFiniteFinding {
  Pass pass = Pass::Forward;
  Site site = Site::Output;
  Cause cause = Cause::Overflow;
  std::string op = {};     // forward: the op ("linear"); backward: the node ("linear", "to(dtype)")
  std::string forward_op = {};  // backward: the observed forward op the node belongs to ("" when unknown)
  bool node_is_cast = false;  // backward: the node is the autocast cast of input `input` of forward_op
  int64_t cast_input = -1;    // ... which input of forward_op that cast was for
  std::string module = {};    // dotted path under the root ("features.3"), the root's type name when
                              // the op ran in the root itself, a type name without a root; "" outside
  std::string module_type = {};  // "Linear"; "" outside any module
  uint64_t seq = 0;           // backward: the node's sequence number; forward: the output's node (0: none)
  int64_t input = -1;         // the input (forward Input/AutocastCast) or gradient index (backward Gradient)
  DType dtype = DType::F32;   // the non-finite tensor's
  Shape shape = {};
  NonFiniteCounts counts = {};
  double largest_finite_input = 0;  // max finite |x| over the inputs (forward) or incoming gradient (backward)

  std::string describe() const;  // one line, starting "first non-finite in <pass> of '<op>'"
};

class NonFiniteOrigin {
 public:
  // root (optional, must outlive this): modules are named by their path in root.named_modules().
  explicit NonFiniteOrigin(const nn::Module* root = nullptr);
  ~NonFiniteOrigin();
  NonFiniteOrigin(const NonFiniteOrigin&) = delete;
  NonFiniteOrigin& operator=(const NonFiniteOrigin&) = delete;

  bool found() const;
  const std::optional<NonFiniteFinding>& first() const;  // the first finding, if any
  // Ops (forward) and nodes (backward) that saw a non-finite value in an input, output or gradient.
  int64_t nonfinite_ops() const;
  int64_t nonfinite_nodes() const;
  int64_t ops_seen() const;    // ops observed
  int64_t nodes_seen() const;  // backward nodes observed
  // first()->describe(), or "no non-finite value in N ops and M backward nodes".
  std::string describe() const;
  void clear();  // forgets the finding, the counts and the op -> node map (keeps observing)

  struct State;  // nonfinite.cpp

 private:
  std::unique_ptr<State> state_;  // declared first: the observer guards below die before it
  struct Guards;
  std::unique_ptr<Guards> guards_;
};

}  // namespace hg::amp::inspect
