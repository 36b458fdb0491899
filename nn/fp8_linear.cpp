#include "nn/fp8_linear.h"

#include <sstream>
#include <utility>
#include <vector>

#include "ops/matmul.h"

namespace hg::nn {

Fp8Linear::Fp8Linear(int64_t in, int64_t out, LinearArgs o, const Fp8Recipe& recipe)
    : Fp8Linear(Linear(in, out, o), recipe) {}

Fp8Linear::Fp8Linear(const Linear& l, const Fp8Recipe& recipe) : in_features(l.in_features), out_features(l.out_features) {
  weight = register_parameter("weight", l.weight);
  if (l.bias.defined()) bias = register_parameter("bias", l.bias);
  train(l.is_training());
  state_ = std::make_shared<Fp8LinearState>(recipe, weight.device());
}

std::string Fp8Linear::extra_repr() const {
  std::ostringstream os;
  os << "in_features=" << in_features << ", out_features=" << out_features
     << ", bias=" << (bias.defined() ? "True" : "False") << ", fp8=" << describe(state_->recipe());
  return os.str();
}

Tensor Fp8Linear::forward(const Tensor& x) {
  const Fp8Recipe* r = amp::fp8_recipe();
  if (r == nullptr) return linear(x, weight, bias);
  if (!state_->compatible(*r)) {
    HG_CHECK(!loaded_, "Fp8Linear: its FP8 state was loaded from a checkpoint trained with ", describe(state_->recipe()),
             " but the Fp8Autocast recipe is ", describe(*r), "; resume with the recipe the checkpoint was trained with");
    auto next = std::make_shared<Fp8LinearState>(*r, weight.device());
    next->track_stats = state_->track_stats;
    state_ = std::move(next);
  }
  loaded_ = false;
  if (state_->device() != weight.device()) state_->to(weight.device());
  return fp8_linear(x, weight, bias, state_, {.training = is_training()});
}

StateDict Fp8Linear::extra_state() const {
  StateDict s;
  state_->save_into(s, "fp8.");
  return s;
}

void Fp8Linear::check_extra_state(const StateDict& s) const {
  for (const auto& [k, t] : s) {
    const bool known = k.rfind("fp8.", 0) == 0 && t.defined() && t.dtype() == DType::F32;
    HG_CHECK(known, "load_state_dict: Fp8Linear's extra state '", k, "' is not an F32 FP8 scaling tensor (",
             t.defined() ? dtype_name(t.dtype()) : "undefined", "); expected fp8.<input|weight|grad_output>.",
             "<amax_history|scale|scale_inv>");
  }
  if (s.empty()) return;  // a checkpoint without FP8 state (a Linear's, or a recipe that keeps none): a fresh state
  const Fp8Recipe& r = state_->recipe();
  HG_CHECK(state_->has_delayed(), "load_state_dict: the checkpoint holds delayed-scaling FP8 state but this Fp8Linear's "
           "recipe is ", describe(r), ", which keeps none; make the layer with the recipe the checkpoint was trained "
           "with (nn::convert_to_fp8(model, recipe) before loading)");
  try {  // a trial load into a scratch state of the same recipe: shapes and completeness, before anything changes
    Fp8LinearState scratch(r, Device::cpu());
    scratch.load_from(s, "fp8.");
  } catch (const Error& e) {
    HG_FAIL("load_state_dict: Fp8Linear (", describe(r), "): ", e.what(),
            "; make the layer with the recipe the checkpoint was trained with (nn::convert_to_fp8(model, recipe))");
  }
}

void Fp8Linear::set_extra_state(const StateDict& s) {
  if (s.empty()) return;
  state_->load_from(s, "fp8.");
  loaded_ = true;
}

namespace {

struct Swap {
  Module* parent;
  std::string name, path;
  const Linear* layer;
};

void find_linears(Module& parent, const std::string& prefix, const Fp8ConvertOptions& o, std::vector<Swap>& out) {
  for (const auto& [name, child] : parent.named_children()) {
    const std::string path = prefix.empty() ? name : prefix + "." + name;
    const auto* l = dynamic_cast<const Linear*>(child.get());
    if (l == nullptr) {
      find_linears(*child, path, o, out);
      continue;
    }
    if (o.filter && !o.filter(path, *l)) continue;
    HG_CHECK(l->num_forward_hooks() == 0, "convert_to_fp8: '", path, "' (Linear) has ", l->num_forward_hooks(),
             " forward hook(s), which its replacement would not have; convert before registering hooks");
    // one owner is the parent's list of children; any other would go on calling the old layer
    HG_CHECK(child.use_count() == 1, "convert_to_fp8: '", path, "' (Linear) is also held outside its parent's list of "
             "children (", child.use_count() - 1, " more owner(s), such as a custom module's std::shared_ptr<nn::Linear> "
             "member), which would go on calling the high-precision layer; declare it as nn::Fp8Linear in that module, "
             "or leave it out with Fp8ConvertOptions::filter");
    out.push_back({&parent, name, path, l});
  }
}

}  // namespace

int64_t convert_to_fp8(Module& root, const Fp8Recipe& recipe, const Fp8ConvertOptions& o) {
  HG_CHECK(dynamic_cast<const Linear*>(&root) == nullptr, "convert_to_fp8: the root module is itself a Linear, which "
           "cannot replace itself; make nn::Fp8Linear(linear, recipe) instead");
  check_fp8_recipe(recipe, "convert_to_fp8");  // before any swap
  std::vector<Swap> swaps;
  find_linears(root, "", o, swaps);  // every check passes before the first swap
  for (const Swap& s : swaps) s.parent->replace_module(s.name, std::make_shared<Fp8Linear>(*s.layer, recipe));
  return static_cast<int64_t>(swaps.size());
}

}  // namespace hg::nn
