#pragma once
// nn::Fp8Linear, a linear layer that computes in FP8 under amp::Fp8Autocast (Transformer Engine's te.Linear),
// and convert_to_fp8, which swaps a model's nn::Linear layers for it (torchao's convert_to_float8_training).
// nn::Linear itself knows nothing of FP8.
//
//   nn::Sequential model(nn::Linear(784, 256), nn::ReLU(), nn::Linear(256, 10));
//   const hg::Fp8Recipe recipe{.scaling = hg::Fp8Scaling::Delayed};   // TE's default: HYBRID, history 1024
//   nn::convert_to_fp8(model, recipe);   // both layers are Fp8Linear now, holding the same parameter tensors
//   { hg::amp::Fp8Autocast fp8(recipe);
//     loss = hg::cross_entropy(model(x), t); }
//   loss.backward();
//
// The layer owns its FP8 state (ops/fp8_linear.h, Fp8LinearState) from construction, made from the recipe it
// is given, so its statistics, GEMM counters and (delayed scaling) scaling tensors exist before its first FP8
// call: a checkpoint loads into them and the memory ledger counts them.
//   - Under amp::Fp8Autocast the layer is fp8_linear with the guard's recipe. When that recipe is not the
//     state's (Fp8LinearState::compatible), the layer replaces its state by one made from the guard's recipe,
//     as TE re-initialises a module's FP8 metadata when the recipe changes (track_stats carries over); a
//     state loaded from a checkpoint and not used yet is never replaced: that is an error naming the recipe
//     to resume with.
//   - Outside a guard (or under Fp8Autocast(recipe, false)) it is hg::linear in the input's precision, as TE's.
//   - In eval() or under no_grad the FP8 casts use the current scales and change no state
//     (Fp8LinearOptions::training), so an evaluation pass between training steps changes nothing.
// state_dict: "weight" and "bias" as Linear's, and a delayed-scaling state as extra state
// "_extra_state.fp8.<input|weight|grad_output>.<amax_history|scale|scale_inv>".
#include <functional>
#include <memory>
#include <string>

#include "nn/layers.h"
#include "ops/fp8_linear.h"

namespace hg::nn {

class Fp8Linear : public Module {
 public:
  Fp8Linear(int64_t in_features, int64_t out_features, LinearArgs o = {}, const Fp8Recipe& recipe = {});
  // The FP8 layer of `linear`: the same weight and bias tensors (an optimizer built on them stays valid) and
  // its train/eval mode.
  explicit Fp8Linear(const Linear& linear, const Fp8Recipe& recipe = {});
  std::string type_name() const override { return "Fp8Linear"; }
  std::string extra_repr() const override;  // Linear's, then "fp8=<describe(recipe)>"
  Tensor forward(const Tensor& x) override;
  StateDict extra_state() const override;
  void check_extra_state(const StateDict& s) const override;
  void set_extra_state(const StateDict& s) override;
  // The FP8 state: statistics (track_stats, stats), counters (calls, gemms, native_gemms), the scaling state.
  // A forward under an incompatible recipe replaces it; a reference taken before then refers to the old one.
  Fp8LinearState& fp8_state() { return *state_; }
  const Fp8LinearState& fp8_state() const { return *state_; }
  const std::shared_ptr<Fp8LinearState>& fp8_state_ptr() const { return state_; }
  Tensor weight, bias;
  int64_t in_features, out_features;

 private:
  std::shared_ptr<Fp8LinearState> state_;
  bool loaded_ = false;  // the state came from load_state_dict and has not run since
};

struct Fp8ConvertOptions {
  // which layers to convert, by dotted name ("encoder.fc1") and layer; empty: all of them
  std::function<bool(const std::string& name, const Linear& layer)> filter;
};
// Replaces every nn::Linear below `root` (at any depth) that the filter accepts by an nn::Fp8Linear made from it
// with `recipe`, and returns how many it replaced. The swap changes the parents' lists of children (Module::
// replace_module), which is what Sequential calls. A Linear that something else also holds (a custom module's
// std::shared_ptr<nn::Linear> member, which its forward would go on calling) or that has forward hooks would
// leave the model computing in high precision or lose its hooks, so either is an error naming the layer, and
// nothing is replaced; declare such a layer as nn::Fp8Linear in the module instead. The root itself is never
// replaced: make Fp8Linear(linear, recipe) for a lone layer.
int64_t convert_to_fp8(Module& root, const Fp8Recipe& recipe = {}, const Fp8ConvertOptions& o = {});

}  // namespace hg::nn
