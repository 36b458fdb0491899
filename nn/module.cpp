#include "nn/module.h"

#include <set>
#include <sstream>

#include "autograd/node.h"

namespace hg::nn {

namespace {

void check_name(const char* what, const std::string& name) {
  HG_CHECK(!name.empty() && name.find('.') == std::string::npos, "Module::register_", what, ": name '", name,
           "' must be non-empty and contain no '.' (dots separate nested module names)");
}

template <class V>
bool has_name(const V& v, const std::string& name) {
  for (const auto& e : v)
    if (e.first == name) return true;
  return false;
}

}  // namespace

void set_data(const Tensor& dst, const Tensor& src) {
  HG_CHECK(dst.is_leaf(), "set_data: the destination was produced by an op; only leaf tensors (parameters, "
                          "buffers) can have their data replaced");
  TensorImpl* d = dst.unsafe_impl();
  const TensorImpl* s = src.unsafe_impl();
  d->storage = s->storage;
  d->offset = s->offset;
  d->strides = s->strides;
  d->shape = s->shape;
  d->dtype = s->dtype;
  if (d->autograd) d->autograd->grad = Tensor();
}

Tensor Module::forward(const Tensor&) {
  HG_FAIL(type_name(), ": this module has no single-tensor forward(x); call its own forward overload, or "
                       "override `Tensor forward(const Tensor&)` to use it in Sequential");
}

HookHandle Module::register_forward_hook(ForwardHook hook) {
  HG_CHECK(hook != nullptr, type_name(), ": register_forward_hook got an empty std::function; pass a callable");
  return HookHandle(forward_hooks_->add(std::move(hook)), forward_hooks_);
}

bool Module::remove_forward_hook(const HookHandle& h) { return forward_hooks_->remove(h.id()); }

namespace {
thread_local std::vector<const Module*> t_call_stack;
}  // namespace

const std::vector<const Module*>& Module::call_stack() { return t_call_stack; }
Module::CallScope::CallScope(const Module* m) { t_call_stack.push_back(m); }
Module::CallScope::~CallScope() { t_call_stack.pop_back(); }

void Module::run_forward_hooks(const Tensor& x, const Tensor& y) const {
  // a copy: a hook may add or remove hooks of this module while we iterate
  const auto hooks = forward_hooks_->items;
  for (const auto& [id, hook] : hooks) hook(*this, x, y);
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_modules() const {
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
  // the aliasing constructor with no owner: a pointer to this module that owns nothing
  out.emplace_back("", std::shared_ptr<Module>(std::shared_ptr<Module>(), const_cast<Module*>(this)));
  for (const auto& [n, c] : children_) {
    auto sub = c->named_modules();
    out.emplace_back(n, c);  // the child's own shared_ptr, not its non-owning root entry
    for (size_t k = 1; k < sub.size(); ++k) out.emplace_back(n + "." + sub[k].first, std::move(sub[k].second));
  }
  return out;
}

Tensor Module::register_parameter(const std::string& name, Tensor t) {
  check_name("parameter", name);
  HG_CHECK(!has_name(params_, name) && !has_name(buffers_, name) && !has_name(children_, name),
           type_name(), ": '", name, "' is already registered");
  if (t.defined() && !t.requires_grad()) t.requires_grad_(true);
  params_.emplace_back(name, t);
  return t;
}

Tensor Module::register_buffer(const std::string& name, Tensor t) {
  check_name("buffer", name);
  HG_CHECK(!has_name(params_, name) && !has_name(buffers_, name) && !has_name(children_, name),
           type_name(), ": '", name, "' is already registered");
  buffers_.emplace_back(name, t);
  return t;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> m) {
  check_name("module", name);
  HG_CHECK(m != nullptr, type_name(), ": register_module('", name, "') got a null module");
  HG_CHECK(!has_name(params_, name) && !has_name(buffers_, name) && !has_name(children_, name),
           type_name(), ": '", name, "' is already registered");
  m->train(training_);
  children_.emplace_back(name, std::move(m));
}

std::shared_ptr<Module> Module::replace_module(const std::string& name, std::shared_ptr<Module> m) {
  HG_CHECK(m != nullptr, type_name(), ": replace_module('", name, "') got a null module");
  for (auto& [n, child] : children_) {
    if (n != name) continue;
    m->train(training_);
    child = m;
    return m;
  }
  HG_FAIL(type_name(), ": replace_module('", name, "'): no child is registered under that name");
}

// f(kind, dotted name, tensor) for every defined parameter ('p') and buffer ('b'), depth first.
template <class F>
void Module::visit(const std::string& prefix, F&& f) const {
  for (const auto& [n, t] : params_)
    if (t.defined()) f('p', prefix + n, t);
  for (const auto& [n, t] : buffers_)
    if (t.defined()) f('b', prefix + n, t);
  for (const auto& [n, c] : children_) c->visit(prefix + n + ".", f);
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  visit("", [&](char k, const std::string&, const Tensor& t) {
    if (k == 'p') out.push_back(t);
  });
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  visit("", [&](char k, const std::string& n, const Tensor& t) {
    if (k == 'p') out.emplace_back(n, t);
  });
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out;
  visit("", [&](char k, const std::string& n, const Tensor& t) {
    if (k == 'b') out.emplace_back(n, t);
  });
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

Module& Module::to(Device d) {
  NoGradGuard ng;
  visit("", [&](char, const std::string&, const Tensor& t) {
    if (t.device() != d) set_data(t, t.detach().to(d));
  });
  return *this;
}

Module& Module::to(DType dt) {
  HG_CHECK(is_floating(dt), "Module::to: dtype ", dt, " is not floating; modules convert their floating "
                            "parameters and buffers to F32, F16, BF16 or F64");
  HG_CHECK(!is_storage_only(dt), "Module::to: dtype ", dt, " is an FP8 storage format that no op computes in; keep the "
                        "parameters in F32, F16, BF16 or F64 and quantize them for the GEMM");
  NoGradGuard ng;
  visit("", [&](char, const std::string&, const Tensor& t) {
    if (is_floating(t.dtype()) && t.dtype() != dt) set_data(t, t.detach().to(dt));
  });
  return *this;
}

void Module::zero_grad() {
  for (Tensor p : parameters()) p.zero_grad();
}

namespace {
constexpr const char* kExtra = "_extra_state.";
std::string module_prefix(const std::string& name) { return name.empty() ? "" : name + "."; }
}  // namespace

StateDict Module::state_dict() const {
  StateDict sd;
  visit("", [&](char, const std::string& n, const Tensor& t) { sd.emplace(n, t.detach()); });
  for (const auto& [name, m] : named_modules())
    for (const auto& [k, t] : m->extra_state()) sd.emplace(module_prefix(name) + kExtra + k, t.detach());
  return sd;
}

void Module::check_extra_state(const StateDict& s) const {
  HG_CHECK(s.empty(), "load_state_dict: ", type_name(), " keeps no extra state but the state dict has '",
           s.begin()->first, "' for it; load it into the model it was saved from");
}

void Module::load_state_dict(const StateDict& sd, LoadOptions o) {
  std::vector<std::pair<std::string, Tensor>> mine;
  visit("", [&](char, const std::string& n, const Tensor& t) { mine.emplace_back(n, t); });
  std::set<std::string> seen;
  std::vector<std::string> missing;
  for (const auto& [n, t] : mine) {
    const auto it = sd.find(n);
    if (it == sd.end()) {
      missing.push_back(n);
      continue;
    }
    seen.insert(n);
    HG_CHECK(it->second.defined(), "load_state_dict: entry '", n, "' is an undefined tensor");
    HG_CHECK(it->second.shape() == t.shape(), "load_state_dict: '", n, "' has shape ", it->second.shape(),
             " in the state dict but ", t.shape(), " in the module (", type_name(), ")");
  }
  // each module's extra state: the entries under "<module>._extra_state."
  std::vector<std::pair<Module*, StateDict>> extras;
  for (const auto& [name, m] : named_modules()) {
    const std::string p = module_prefix(name) + kExtra;
    StateDict mine_extra;
    for (auto it = sd.lower_bound(p); it != sd.end() && it->first.compare(0, p.size(), p) == 0; ++it) {
      mine_extra.emplace(it->first.substr(p.size()), it->second);
      seen.insert(it->first);
    }
    m->check_extra_state(mine_extra);
    extras.emplace_back(m.get(), std::move(mine_extra));
  }
  std::ostringstream err;
  if (o.strict && !missing.empty()) {
    err << "missing keys:";
    for (const auto& n : missing) err << " '" << n << "'";
  }
  if (o.strict) {
    std::string unexpected;
    for (const auto& [n, t] : sd)
      if (!seen.count(n)) unexpected += " '" + n + "'";
    if (!unexpected.empty()) err << (err.tellp() > 0 ? "; " : "") << "unexpected keys:" << unexpected;
  }
  HG_CHECK(err.tellp() == 0, "load_state_dict: ", err.str(),
           "; pass LoadOptions{.strict = false} to load a partial state dict");
  NoGradGuard ng;
  for (const auto& [n, t] : mine) {
    const auto it = sd.find(n);
    if (it == sd.end()) continue;
    Tensor v = it->second.detach().to(t.dtype()).to(t.device());
    // never alias the caller's tensor: later training must not write into their state dict
    set_data(t, v.unsafe_impl()->storage == it->second.unsafe_impl()->storage ? v.clone() : v);
  }
  for (auto& [m, extra] : extras) m->set_extra_state(extra);
}

void Module::print(std::ostream& os, int indent) const {
  os << type_name() << "(" << extra_repr();
  if (children_.empty()) {
    os << ")";
    return;
  }
  os << "\n";
  const std::string pad(static_cast<size_t>(indent + 2), ' ');
  for (const auto& [n, c] : children_) {
    os << pad << "(" << n << "): ";
    c->print(os, indent + 2);
    os << "\n";
  }
  os << std::string(static_cast<size_t>(indent), ' ') << ")";
}

std::ostream& operator<<(std::ostream& os, const Module& m) {
  m.print(os, 0);
  return os;
}

}  // namespace hg::nn
