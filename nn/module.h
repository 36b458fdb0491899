#pragma once
// Module: the base of every layer. It owns named parameters (leaf tensors that require grad),
// buffers (state that is saved but not trained, e.g. batch norm's running statistics) and child
// modules, in registration order, so names and state_dict keys read like PyTorch's
// ("0.weight", "features.conv1.bias").
//
// Parameters are shared handles: `weight` in a layer, the entry in parameters() and the tensor an
// optimizer holds are the same tensor. to(Device)/to(DType)/load_state_dict replace a parameter's
// data in place (like torch's `param.data = ...`), so an optimizer built before them stays valid.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/state_dict.h"
#include "core/tensor.h"

namespace hg::nn {

using hg::StateDict;  // core/state_dict.h

class Module;

// Called after every call through Module::operator() with the module, its input and its output
// (torch's register_forward_hook). Hooks observe; they cannot replace the output.
using ForwardHook = std::function<void(const Module& m, const Tensor& input, const Tensor& output)>;


using HookHandle = hg::HookHandle;  // core/hook.h

struct LoadOptions {
  bool strict = true;  // a missing or unexpected entry is an error (torch's strict=True)
};

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  Module(Module&&) = default;
  Module& operator=(Module&&) = default;

  // The type name printed by operator<< ("Linear") and the text inside its parentheses.
  virtual std::string type_name() const = 0;
  virtual std::string extra_repr() const { return ""; }

  // The single-tensor forward that Sequential chains. A module with another signature defines its
  // own forward overloads and leaves this one throwing.
  virtual Tensor forward(const Tensor& x);
  // forward(x), then the forward hooks in registration order. As in torch, hooks fire only for calls
  // through operator(): Sequential calls its children this way, and a custom module should call its
  // children as (*child)(x) rather than child->forward(x) for their hooks to fire.
  Tensor operator()(const Tensor& x) {
    CallScope in_call(this);
    Tensor y = forward(x);
    if (!forward_hooks_->empty()) [[unlikely]] run_forward_hooks(x, y);
    return y;
  }

  // The modules being called through operator() on this thread, outermost first (empty outside any
  // module call): inspectors use it to name the module an op runs in (amp/inspect's PrecisionTrace).
  static const std::vector<const Module*>& call_stack();

  // operator() with f(x) in place of forward(x) and no hooks run: for a container fusing this module with
  // the next (nn::Sequential: Linear + ReLU), which calls it only when this module has no forward hooks.
  // The module is on call_stack() while f runs, as in operator().
  template <class F> Tensor call_fused(const Tensor& x, F&& f) {
    CallScope in_call(this);
    return f(x);
  }

  // Hooks of this module only (not of its children). A hook may register or remove hooks; those
  // changes apply from the next call. handle.remove() unregisters one (torch's RemovableHandle), as
  // remove_forward_hook(handle) does.
  HookHandle register_forward_hook(ForwardHook hook);
  bool remove_forward_hook(const HookHandle& h);  // false when h is not (or no longer) registered here
  size_t num_forward_hooks() const { return forward_hooks_->size(); }

  // Registration: the returned handle is the registered tensor/module itself.
  Tensor register_parameter(const std::string& name, Tensor t);  // marks it requires_grad
  Tensor register_buffer(const std::string& name, Tensor t);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m);
    return m;
  }

  // Puts m in the place of the child registered as `name` (libtorch's replace_module), in its train/eval mode,
  // and returns m. Only the list of children changes: a module that also keeps the old child in a member of
  // its own goes on calling that one (nn::convert_to_fp8 refuses such a child).
  std::shared_ptr<Module> replace_module(const std::string& name, std::shared_ptr<Module> m);

  // All parameters of this module and its descendants, depth first in registration order.
  std::vector<Tensor> parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const { return children_; }
  // This module (name "", first) and every descendant with its dotted name ("features.conv1"), depth
  // first, parents before children: torch's named_modules(). The root's pointer does not own it (a module
  // need not live in a shared_ptr); it is valid while the module lives.
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_modules() const;
  int64_t num_parameters() const;  // total element count

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Moves every parameter and buffer (to(Device)), or converts the floating ones (to(DType); integer
  // buffers such as num_batches_tracked stay I64), in place. Gradients are dropped.
  Module& to(Device d);
  Module& to(DType t);
  void zero_grad();

  // Parameters and buffers by dotted name, detached (sharing storage with the module), then each module's
  // extra state as "<module>._extra_state.<key>".
  StateDict state_dict() const;
  // Copies values into the existing tensors (converting dtype/device to theirs). Wrong shapes are
  // always an error; missing/unexpected names are errors when strict. Each error names the key.
  void load_state_dict(const StateDict& sd, LoadOptions o = {});

  // Extra state (torch's get_extra_state / set_extra_state): tensors a module keeps besides its parameters
  // and buffers, such as an Fp8Linear's FP8 scaling state, saved by state_dict() and so by checkpoints.
  // load_state_dict first asks every module to check the entries under its "_extra_state." prefix (an
  // empty map when there are none), then, once everything fits, hands them over.
  virtual StateDict extra_state() const { return {}; }
  virtual void check_extra_state(const StateDict& s) const;  // default: s must be empty
  virtual void set_extra_state(const StateDict& s) { (void)s; }

  friend std::ostream& operator<<(std::ostream& os, const Module& m);

 protected:
  void add_child(const std::string& name, std::shared_ptr<Module> m);

 private:
  void print(std::ostream& os, int indent) const;
  template <class F> void visit(const std::string& prefix, F&& f) const;
  void run_forward_hooks(const Tensor& x, const Tensor& y) const;
  struct CallScope {  // pushes onto call_stack() for one operator() call, exceptions included
    explicit CallScope(const Module* m);
    ~CallScope();
    CallScope(const CallScope&) = delete;
    CallScope& operator=(const CallScope&) = delete;
  };

  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  // in registration order; shared with the handles, which do not keep it alive
  std::shared_ptr<HookList<ForwardHook>> forward_hooks_ = std::make_shared<HookList<ForwardHook>>();
  bool training_ = true;
};

// Replaces dst's data (storage, dtype, shape) with src's while keeping dst's identity and
// requires_grad, like torch's `param.data = src`. dst must be a leaf; its gradient is dropped.
void set_data(const Tensor& dst, const Tensor& src);

// A module given by value (moved into shared ownership) or as a shared_ptr, as the containers hold it
// (Sequential, ModuleList, ModuleDict).
template <class M>
std::shared_ptr<Module> module_ptr(M&& m) {
  using D = std::decay_t<M>;
  if constexpr (std::is_convertible_v<D, std::shared_ptr<Module>>) {
    return std::shared_ptr<Module>(std::forward<M>(m));
  } else {
    static_assert(std::is_base_of_v<Module, D>, "containers hold nn::Module subclasses");
    return std::make_shared<D>(std::forward<M>(m));
  }
}

}  // namespace hg::nn
