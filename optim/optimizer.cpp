// The optimizer-independent parts of Optimizer: parameter bookkeeping, lazily created state, each
// parameter's update arguments, and the state dict's checked reading and writing.
#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>

#include "autograd/node.h"
#include "ops/kernels/optim.h"
#include "optim/state_entries.h"
#include "optim/update.h"

namespace hg::optim {

using detail::copy_to;
using detail::read_buffer;
using detail::state_key;

void Optimizer::zero_grad() {
  for (size_t g = 0; g < num_param_groups(); ++g)
    for (Tensor p : group_params(g)) p.zero_grad();  // a handle: drops the shared tensor's gradient
}

void Optimizer::step() { step(AmpStep{}); }

std::unique_ptr<Optimizer> Optimizer::clone_for(std::vector<Tensor> params) const {
  (void)params;
  HG_FAIL("Optimizer.clone_for: this optimizer cannot make a copy of itself over other parameters");
}

void Optimizer::set_master_weights(MasterWeights mode) { precision_.set_master_weights(mode); }

void Optimizer::set_param_rounding(ParamRounding rounding, uint64_t seed) {
  precision_.set_param_rounding(rounding, seed);
}

Tensor Optimizer::compensation(size_t i) const {
  HG_CHECK(i < state_.size(), "Optimizer.compensation: parameter ", i, " does not exist; the optimizer has ",
           state_.size(), " parameter(s)");
  return precision_.compensation(i);
}

Tensor Optimizer::master(size_t i) const {
  HG_CHECK(i < state_.size(), "Optimizer.master: parameter ", i, " does not exist; the optimizer has ", state_.size(),
           " parameter(s)");
  return precision_.master(i);
}

const std::vector<Tensor>& Optimizer::state_buffers(size_t i) const {
  HG_CHECK(i < state_.size(), "Optimizer.state_buffers: parameter ", i, " does not exist; the optimizer has ",
           state_.size(), " parameter(s)");
  return state_[i].buffers;
}

Optimizer::StepCount Optimizer::step_count(size_t i) const {
  HG_CHECK(i < state_.size(), "Optimizer.step_count: parameter ", i, " does not exist; the optimizer has ",
           state_.size(), " parameter(s)");
  return {state_[i].step, mirror_.steps(i)};
}

UpdateArgs Optimizer::prepare_update(const char* opt, size_t i, size_t g, const Tensor& p, const Tensor& grad,
                                     const AmpStep& amp, size_t num_buffers, bool counts_steps,
                                     std::span<const double> hyper) {
  check_grad(opt, i, p, grad);
  HG_CHECK(num_buffers <= kMaxUpdateBuffers && hyper.size() <= kMaxHyper, opt, ": ", num_buffers, " buffers and ",
           hyper.size(), " hyper-parameters; an update takes at most ", kMaxUpdateBuffers, " and ", kMaxHyper);
  ParamState& s = state_[i];
  const bool first = ensure_state(opt, i, p, num_buffers);
  const GradUnscale unscale = p.grad_unscale();
  // A device counter where the update depends on the steps taken: their number (Adam's bias corrections),
  // or whether this is the first (SGD's momentum buffer starts as the gradient); a stateless update has none.
  const DeviceStep dev = mirror_.device_step(i, g, p, amp.found_inf, unscale, counts_steps ? s.step : (first ? 0 : 1),
                                             counts_steps || num_buffers != 0, hyper);
  if (counts_steps && dev.steps == nullptr) s.step += 1;  // else the kernel counts the steps taken on the device
  // the update writes p in place, as torch's in-place update under no_grad: a graph that saved p and runs its
  // backward after the step raises the "modified by an inplace operation" error instead of using the new values
  ++p.unsafe_impl()->storage->version;
  UpdateArgs a{.n = p.numel(),
               .param = p.data_ptr(),
               .grad = grad.data_ptr(),
               .num_buffers = static_cast<int>(num_buffers),
               .master = precision_.master_for(i, p),
               .store = precision_.store_for(i, p),
               .step = s.step,
               .first_step = first,
               .unscale = unscale.host,
               .amp = dev};
  for (size_t k = 0; k < num_buffers; ++k) a.buffers[k] = s.buffers[k].data_ptr();
  std::copy(hyper.begin(), hyper.end(), a.hyper);
  return a;
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
  precision_.add_params(params.size());
  mirror_.add_params(params.size());
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
  precision_.save_generator(sd);
  for (size_t g = 0; g < num_param_groups(); ++g) {
    const std::vector<Tensor>& params = group_params(g);
    std::vector<int64_t> idx(params.size());
    for (size_t j = 0; j < params.size(); ++j) idx[j] = static_cast<int64_t>(group_begin_[g] + j);
    sd[group_key(g, "params")] = from_vector(idx, {static_cast<int64_t>(idx.size())}, {.dtype = DType::I64});
    for (size_t j = 0; j < params.size(); ++j) {
      const size_t i = group_begin_[g] + j;
      const ParamState& s = state_[i];
      precision_.save(sd, i);
      if (s.buffers.empty() || names[g].empty()) continue;  // no state (yet), or a now stateless update
      HG_CHECK(s.buffers.size() == names[g].size(), "state_dict: parameter ", i, " has ", s.buffers.size(),
               " state buffers but its group's options name ", names[g].size());
      if (with_step) sd[state_key(i, "step")] = scalar(static_cast<double>(mirror_.steps_taken(i, s.step)));
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

}  // namespace

void Optimizer::load_state(const char* opt, const StateDict& sd, const std::vector<StateNames>& names,
                           bool with_step, std::set<std::string>& used) {
  ParamPrecision::Loaded precision = precision_.begin_load(opt, sd, used);
  std::vector<ParamState> state = read_state(opt, sd, names, with_step, precision, used);
  precision_.commit(std::move(precision));
  state_ = std::move(state);
  mirror_.drop_steps();  // the loaded counts: a device counter starts again from them at the next step
}

std::vector<Optimizer::ParamState> Optimizer::read_state(const char* opt, const StateDict& sd,
                                                         const std::vector<StateNames>& names, bool with_step,
                                                         ParamPrecision::Loaded& precision,
                                                         std::set<std::string>& used) const {
  std::vector<ParamState> out(state_.size());
  for (size_t g = 0; g < num_param_groups(); ++g) {
    const std::vector<Tensor>& params = group_params(g);
    check_group_params(opt, sd, g, group_begin_[g], params.size(), used);
    for (size_t j = 0; j < params.size(); ++j) {
      const size_t i = group_begin_[g] + j;
      precision_.read_param(opt, sd, i, params[j], precision, used);
      std::vector<const char*> all(names[g].begin(), names[g].end());
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

}  // namespace hg::optim
