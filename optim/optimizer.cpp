// The optimizer-independent parts of Optimizer: parameter bookkeeping, lazily created state, and the
// state dict's checked reading and writing.
#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "autograd/node.h"
#include "ops/kernels/optim.h"

namespace hg::optim {
namespace {

// A new tensor with t's bytes on `dev` (the state dict hands out and takes in copies).
Tensor copy_to(const Tensor& t, Device dev) {
  Tensor c = empty(t.shape(), {.dtype = t.dtype(), .device = dev});
  copy_bytes(c.data_ptr(), dev, t.data_ptr(), t.device(), t.nbytes());
  return c;
}

std::string state_key(size_t i, const char* name) { return "state." + std::to_string(i) + "." + name; }

}  // namespace

void Optimizer::zero_grad() {
  for (size_t g = 0; g < num_param_groups(); ++g)
    for (Tensor p : group_params(g)) p.zero_grad();  // a handle: drops the shared tensor's gradient
}

void Optimizer::step() { step(AmpStep{}); }

void Optimizer::set_master_weights(MasterWeights mode) {
  HG_CHECK(mode == MasterWeights::Off || rounding_ == ParamRounding::Nearest, "Optimizer.set_master_weights: the "
           "parameters' rounding is ", rounding_ == ParamRounding::Kahan ? "Kahan" : "Stochastic",
           ", which replaces master copies; call set_param_rounding(ParamRounding::Nearest) first");
  master_weights_ = mode;
  if (mode == MasterWeights::Off)
    for (ParamState& s : state_) s.master = Tensor();
}

void Optimizer::set_param_rounding(ParamRounding rounding, uint64_t seed) {
  HG_CHECK(rounding == ParamRounding::Nearest || master_weights_ == MasterWeights::Off,
           "Optimizer.set_param_rounding: stochastic and Kahan rounding are for F16/BF16 parameters without master "
           "copies (with masters the update is exact in F32 and rounded to nearest once); call "
           "set_master_weights(MasterWeights::Off) first");
  rounding_ = rounding;
  rounding_gen_.manual_seed(seed);
  if (rounding != ParamRounding::Kahan)
    for (ParamState& s : state_) s.compensation = Tensor();
}

ParamStore Optimizer::param_store(size_t i, const Tensor& p) {
  ParamStore st;
  if (!is_low_precision(p.dtype()) || master_weights_ != MasterWeights::Off || rounding_ == ParamRounding::Nearest)
    return st;
  st.rounding = rounding_;
  if (rounding_ == ParamRounding::Stochastic) {
    const auto [seed, offset] = reserve_blocks(rounding_gen_, static_cast<uint64_t>((p.numel() + 3) / 4));
    st.seed = seed;
    st.offset = offset;
    return st;
  }
  Tensor& c = state_[i].compensation;
  if (!c.defined()) c = zeros(p.shape(), {.dtype = p.dtype(), .device = p.device()});
  HG_CHECK(c.numel() == p.numel() && c.device() == p.device(), "Optimizer.step: parameter ", i, " has shape ",
           p.shape(), " on ", p.device(), " but its Kahan compensation has shape ", c.shape(), " on ", c.device(),
           "; parameters must not be replaced after the optimizer is made");
  st.compensation = c.data_ptr();
  return st;
}

Tensor Optimizer::compensation(size_t i) const {
  HG_CHECK(i < state_.size(), "Optimizer.compensation: parameter ", i, " does not exist; the optimizer has ",
           state_.size(), " parameter(s)");
  return state_[i].compensation;
}

Tensor Optimizer::master(size_t i) const {
  HG_CHECK(i < state_.size(), "Optimizer.master: parameter ", i, " does not exist; the optimizer has ", state_.size(),
           " parameter(s)");
  return state_[i].master;
}

const std::vector<Tensor>& Optimizer::state_buffers(size_t i) const {
  HG_CHECK(i < state_.size(), "Optimizer.state_buffers: parameter ", i, " does not exist; the optimizer has ",
           state_.size(), " parameter(s)");
  return state_[i].buffers;
}

Optimizer::StepCount Optimizer::step_count(size_t i) const {
  HG_CHECK(i < state_.size(), "Optimizer.step_count: parameter ", i, " does not exist; the optimizer has ",
           state_.size(), " parameter(s)");
  return {state_[i].step, state_[i].steps};
}

void Optimizer::upload_hyper(size_t g, std::span<const double> hyper) {
  if (g >= device_hyper_.size() || !device_hyper_[g].value.defined()) return;
  DeviceHyper& d = device_hyper_[g];
  if (std::equal(hyper.begin(), hyper.end(), d.host.begin(), d.host.end())) return;
  HG_CHECK(static_cast<int64_t>(hyper.size()) == d.value.numel(), "Optimizer: group ", g, " has ", hyper.size(),
           " hyper-parameters, its device copy ", d.value.numel());
  copy_bytes(d.value.data_ptr(), d.value.device(), hyper.data(), Device::cpu(), hyper.size_bytes());
  d.host.assign(hyper.begin(), hyper.end());
}

DeviceStep Optimizer::device_step(size_t i, size_t g, const Tensor& p, const float* found_inf,
                                  const GradUnscale& unscale, int64_t steps_so_far, bool counts,
                                  std::span<const double> hyper) {
  ParamState& s = state_[i];
  DeviceStep a{.found_inf = found_inf, .inv_scale = unscale.inv_scale, .clip = unscale.clip};
  const bool cuda = p.device().is_cuda();
  if (cuda) {
    if (device_hyper_.size() <= g) device_hyper_.resize(g + 1);
    DeviceHyper& d = device_hyper_[g];
    if (!d.value.defined()) {
      d.value = empty({static_cast<int64_t>(hyper.size())}, {.dtype = DType::F64, .device = p.device()});
      d.host.clear();  // differs from any values: uploaded below
    }
    if (d.value.device() == p.device()) {  // (a group spread over devices keeps its values by value)
      upload_hyper(g, hyper);  // a no-op unless an option changed since the last step or set_lr
      a.hyper = static_cast<const double*>(d.value.data_ptr());
    }
  }
  if (counts && (found_inf != nullptr || cuda) && !s.steps.defined()) {
    // made once, at a parameter's first step on the device path (a host-to-device copy)
    s.steps = empty({1}, {.dtype = DType::I64, .device = p.device()});
    copy_bytes(s.steps.data_ptr(), p.device(), &steps_so_far, Device::cpu(), sizeof steps_so_far);
  }
  if (s.steps.defined()) a.steps = static_cast<int64_t*>(s.steps.data_ptr());
  return a;
}

int64_t Optimizer::steps_taken(size_t i) const {
  const ParamState& s = state_[i];
  if (!s.steps.defined()) return s.step;
  int64_t v = 0;
  copy_bytes(&v, Device::cpu(), s.steps.data_ptr(), s.steps.device(), sizeof v);
  return v;
}

float* Optimizer::master_for(size_t i, const Tensor& p) {
  if (!is_low_precision(p.dtype()) || master_weights_ == MasterWeights::Off) return nullptr;
  Tensor& m = state_[i].master;
  if (!m.defined()) {
    NoGradGuard no_grad;
    m = p.detach().to(DType::F32);  // exact: every F16/BF16 value is an F32 value
  }
  HG_CHECK(m.numel() == p.numel() && m.device() == p.device(), "Optimizer.step: parameter ", i, " has shape ",
           p.shape(), " on ", p.device(), " but its master has shape ", m.shape(), " on ", m.device(),
           "; parameters must not be replaced after the optimizer is made");
  return static_cast<float*>(m.data_ptr());
}

std::vector<Tensor> Optimizer::parameters() const {
  std::vector<Tensor> all;
  for (size_t g = 0; g < num_param_groups(); ++g)
    all.insert(all.end(), group_params(g).begin(), group_params(g).end());
  return all;
}

void Optimizer::add_params(const char* opt, const std::vector<Tensor>& params) {
  std::set<const TensorImpl*> seen;
  for (size_t g = 0; g < num_param_groups(); ++g)
    for (const Tensor& p : group_params(g)) seen.insert(p.unsafe_impl());
  for (size_t j = 0; j < params.size(); ++j) {
    const Tensor& p = params[j];
    HG_CHECK(p.defined(), opt, ": parameter ", j, " of the group is undefined; pass initialised tensors");
    HG_CHECK(is_floating(p.dtype()) && !is_fp8(p.dtype()), opt, ": parameter ", j, " has dtype ", p.dtype(),
             "; only F32, F16, BF16 and F64 tensors can be optimized (FP8 is a storage format: keep the parameter "
             "in BF16 or F32 and quantize it for the GEMM)");
    HG_CHECK(p.is_leaf(), opt, ": parameter ", j, " is not a leaf (it was made by '", p.grad_fn()->name,
             "'); optimize leaf tensors, e.g. the model's parameters or x.detach().requires_grad_()");
    HG_CHECK(seen.insert(p.unsafe_impl()).second, opt, ": parameter ", j,
             " appears more than once among the groups; give each parameter to one group");
  }
  group_begin_.push_back(state_.size());
  state_.resize(state_.size() + params.size());
}

bool Optimizer::ensure_state(const char* opt, size_t i, const Tensor& p, size_t num_buffers) {
  ParamState& s = state_[i];
  if (num_buffers == 0) return false;  // a stateless update (SGD without momentum)
  if (s.buffers.size() == num_buffers) {
    HG_CHECK(s.buffers[0].numel() == p.numel() && s.buffers[0].device() == p.device(), opt, ": parameter ", i,
             " has shape ", p.shape(), " on ", p.device(), " but its state has shape ", s.buffers[0].shape(), " on ",
             s.buffers[0].device(), "; parameters must not be replaced after the optimizer is made");
    return false;
  }
  HG_CHECK(s.buffers.empty(), opt, ": parameter ", i, " has ", s.buffers.size(), " state buffers but its options now need ",
           num_buffers, " (an option such as amsgrad changed after the first step); make a new optimizer instead");
  const TensorOptions o{.dtype = state_dtype(p.dtype()), .device = p.device()};
  for (size_t k = 0; k < num_buffers; ++k) s.buffers.push_back(zeros(p.shape(), o));
  return true;
}

void Optimizer::bad_grad(const char* opt, size_t i, const Tensor& p, const Tensor& g) {
  HG_FAIL(opt, ": parameter ", i, " (shape ", p.shape(), ", ", p.dtype(), ", ", p.device(), ") has a gradient of shape ",
          g.shape(), ", ", g.dtype(), ", ", g.device(), "; a gradient must match its parameter");
}

std::string Optimizer::group_key(size_t g, const char* option) { return "group." + std::to_string(g) + "." + option; }

Tensor Optimizer::scalar(double v) { return full(Shape{}, v, {.dtype = DType::F64}); }

void Optimizer::save_state(StateDict& sd, const std::vector<StateNames>& names, bool with_step) const {
  if (rounding_ == ParamRounding::Stochastic) {
    const GeneratorState g = rounding_gen_.state();
    sd["rounding.generator"] = from_vector(std::vector<int64_t>{static_cast<int64_t>(g.seed), static_cast<int64_t>(g.offset)},
                                           Shape{2});
  }
  for (size_t g = 0; g < num_param_groups(); ++g) {
    const std::vector<Tensor>& params = group_params(g);
    std::vector<int64_t> idx(params.size());
    for (size_t j = 0; j < params.size(); ++j) idx[j] = static_cast<int64_t>(group_begin_[g] + j);
    sd[group_key(g, "params")] = from_vector(idx, {static_cast<int64_t>(idx.size())}, {.dtype = DType::I64});
    for (size_t j = 0; j < params.size(); ++j) {
      const size_t i = group_begin_[g] + j;
      const ParamState& s = state_[i];
      if (s.master.defined()) sd[state_key(i, "master")] = copy_to(s.master, s.master.device());
      if (s.compensation.defined()) sd[state_key(i, "compensation")] = copy_to(s.compensation, s.compensation.device());
      if (s.buffers.empty() || names[g].empty()) continue;  // no state (yet), or a now stateless update
      HG_CHECK(s.buffers.size() == names[g].size(), "state_dict: parameter ", i, " has ", s.buffers.size(),
               " state buffers but its group's options name ", names[g].size());
      if (with_step) sd[state_key(i, "step")] = scalar(static_cast<double>(steps_taken(i)));
      for (size_t k = 0; k < names[g].size(); ++k) sd[state_key(i, names[g][k])] = copy_to(s.buffers[k], s.buffers[k].device());
    }
  }
}

// A 0-d F64 entry that must be present.
double Optimizer::read_option(const char* opt, const StateDict& sd, const std::string& key, std::set<std::string>& used) {
  auto it = sd.find(key);
  HG_CHECK(it != sd.end() && it->second.defined(), opt, ".load_state_dict: missing entry '", key,
           "'; the state dict was saved by another optimizer or with other parameter groups");
  const Tensor& t = it->second;
  HG_CHECK(t.ndim() == 0 && t.dtype() == DType::F64, opt, ".load_state_dict: entry '", key, "' has shape ", t.shape(),
           " and dtype ", t.dtype(), "; it must be a 0-d F64 tensor");
  used.insert(key);
  return t.item<double>();
}

namespace {

// group.<g>.params must list exactly the indices [begin, begin + n).
void check_group_params(const char* opt, const StateDict& sd, size_t g, size_t begin, size_t n,
                        std::set<std::string>& used) {
  const std::string key = "group." + std::to_string(g) + ".params";
  auto it = sd.find(key);
  HG_CHECK(it != sd.end() && it->second.defined(), opt, ".load_state_dict: missing entry '", key,
           "'; the state dict was saved by another optimizer or with other parameter groups");
  const Tensor& t = it->second;
  HG_CHECK(t.dtype() == DType::I64 && t.ndim() == 1 && t.numel() == static_cast<int64_t>(n), opt,
           ".load_state_dict: entry '", key, "' has shape ", t.shape(), " and dtype ", t.dtype(), " but group ", g,
           " has ", n, " parameter(s); it must be a 1-d I64 tensor of their indices");
  const std::vector<int64_t> idx = t.to_vector<int64_t>();
  for (size_t j = 0; j < n; ++j)
    HG_CHECK(idx[j] == static_cast<int64_t>(begin + j), opt, ".load_state_dict: entry '", key, "' lists parameter ",
             idx[j], " at position ", j, " but this optimizer's group ", g, " has parameter ", begin + j,
             " there; load into an optimizer over the same parameters in the same groups and order");
  used.insert(key);
}

// Parameter i's buffer `key`, checked against the parameter, copied to its device.
Tensor read_buffer(const char* opt, const Tensor& t, const std::string& key, const Tensor& p) {
  const DType want = state_dtype(p.dtype());
  HG_CHECK(t.shape() == p.shape() && t.dtype() == want, opt, ".load_state_dict: entry '", key, "' has shape ",
           t.shape(), " and dtype ", t.dtype(), " but its parameter needs shape ", p.shape(), " and dtype ", want,
           "; the state dict belongs to other parameters");
  return copy_to(t, p.device());
}

}  // namespace

void Optimizer::read_master(const char* opt, const StateDict& sd, size_t i, const Tensor& p, ParamState& out,
                            std::set<std::string>& used) const {
  const std::string key = state_key(i, "master");
  auto it = sd.find(key);
  if (it == sd.end()) return;  // none saved: a master is made from the parameter at its next step
  HG_CHECK(is_low_precision(p.dtype()), opt, ".load_state_dict: entry '", key, "' is a master copy but parameter ", i,
           " is ", p.dtype(), "; only F16/BF16 parameters have masters");
  HG_CHECK(master_weights_ != MasterWeights::Off, opt, ".load_state_dict: entry '", key,
           "' is a master copy but this optimizer has master weights Off; call set_master_weights(MasterWeights::Auto) "
           "before loading, or drop the state.<i>.master entries");
  out.master = read_buffer(opt, it->second, key, p);  // F32, the parameter's shape
  used.insert(key);
}

bool Optimizer::read_rounding(const char* opt, const StateDict& sd, GeneratorState& out, std::set<std::string>& used) const {
  auto it = sd.find("rounding.generator");
  if (it == sd.end()) return false;
  HG_CHECK(rounding_ == ParamRounding::Stochastic, opt, ".load_state_dict: entry 'rounding.generator' is a stochastic "
           "rounding stream but this optimizer does not round stochastically; call "
           "set_param_rounding(ParamRounding::Stochastic) before loading");
  const Tensor& t = it->second;
  HG_CHECK(t.defined() && t.dtype() == DType::I64 && t.numel() == 2, opt, ".load_state_dict: entry 'rounding.generator' "
           "has shape ", t.shape(), "; it must be a 1-d I64 tensor {seed, offset}");
  const std::vector<int64_t> v = t.to_vector<int64_t>();
  out = {static_cast<uint64_t>(v[0]), static_cast<uint64_t>(v[1])};
  used.insert("rounding.generator");
  return true;
}

std::vector<Optimizer::ParamState> Optimizer::read_state(const char* opt, const StateDict& sd,
                                                         const std::vector<StateNames>& names, bool with_step,
                                                         std::set<std::string>& used) const {
  std::vector<ParamState> out(state_.size());
  for (size_t g = 0; g < num_param_groups(); ++g) {
    const std::vector<Tensor>& params = group_params(g);
    check_group_params(opt, sd, g, group_begin_[g], params.size(), used);
    for (size_t j = 0; j < params.size(); ++j) {
      const size_t i = group_begin_[g] + j;
      read_master(opt, sd, i, params[j], out[i], used);
      if (const auto it = sd.find(state_key(i, "compensation")); it != sd.end()) {
        HG_CHECK(rounding_ == ParamRounding::Kahan && is_low_precision(params[j].dtype()), opt, ".load_state_dict: entry '",
                 it->first, "' is a Kahan compensation but this optimizer's parameter ", i, " (", params[j].dtype(),
                 ") takes none; call set_param_rounding(ParamRounding::Kahan) (masters Off) before loading");
        const Tensor& c = it->second;
        HG_CHECK(c.shape() == params[j].shape() && c.dtype() == params[j].dtype(), opt, ".load_state_dict: entry '",
                 it->first, "' has shape ", c.shape(), " and dtype ", c.dtype(), " but its parameter has ",
                 params[j].shape(), " ", params[j].dtype(), "; the state dict belongs to other parameters");
        out[i].compensation = copy_to(c, params[j].device());
        used.insert(it->first);
      }
      StateNames all = names[g];
      if (with_step && !all.empty()) all.insert(all.begin(), "step");
      size_t present = 0;
      for (const char* name : all) present += sd.count(state_key(i, name));
      if (present == 0) continue;  // this parameter never took a step
      for (const char* name : all)
        HG_CHECK(sd.count(state_key(i, name)) && sd.at(state_key(i, name)).defined(), opt,
                 ".load_state_dict: missing entry '", state_key(i, name), "' (other state of parameter ", i,
                 " is there); the state dict is incomplete");
      if (with_step) {
        const double step = read_option(opt, sd, state_key(i, "step"), used);
        HG_CHECK(step >= 0 && step == std::floor(step), opt, ".load_state_dict: entry '", state_key(i, "step"),
                 "' is ", step, "; a step count is a whole number >= 0");
        out[i].step = static_cast<int64_t>(step);
      }
      for (const char* name : names[g]) {
        const std::string key = state_key(i, name);
        out[i].buffers.push_back(read_buffer(opt, sd.at(key), key, params[j]));
        used.insert(key);
      }
    }
  }
  for (const auto& [key, t] : sd)
    HG_CHECK(used.count(key), opt, ".load_state_dict: unexpected entry '", key,
             "'; the state dict was saved by another optimizer, with other options or other parameters");
  return out;
}

// The optimizer's tables (ops/kernels/optim.h), built as every table is (core/dispatch_table.h); their CPU
}  // namespace hg::optim
