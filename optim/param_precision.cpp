// The parameters' store precision: masters, stochastic and Kahan rounding, and their state-dict entries.
#include "optim/param_precision.h"

#include "autograd/node.h"
#include "ops/kernels/optim.h"
#include "optim/state_entries.h"

namespace hg::optim {

using detail::copy_to;
using detail::state_key;

void ParamPrecision::add_params(size_t n) {
  masters_.resize(masters_.size() + n);
  compensations_.resize(compensations_.size() + n);
}

void ParamPrecision::set_master_weights(MasterWeights mode) {
  HG_CHECK(mode == MasterWeights::Off || rounding_ == ParamRounding::Nearest, "Optimizer.set_master_weights: the "
           "parameters' rounding is ", rounding_ == ParamRounding::Kahan ? "Kahan" : "Stochastic",
           ", which replaces master copies; call set_param_rounding(ParamRounding::Nearest) first");
  mode_ = mode;
  if (mode == MasterWeights::Off)
    for (Tensor& m : masters_) m = Tensor();
}

void ParamPrecision::set_param_rounding(ParamRounding rounding, uint64_t seed) {
  HG_CHECK(rounding == ParamRounding::Nearest || mode_ == MasterWeights::Off,
           "Optimizer.set_param_rounding: stochastic and Kahan rounding are for F16/BF16 parameters without master "
           "copies (with masters the update is exact in F32 and rounded to nearest once); call "
           "set_master_weights(MasterWeights::Off) first");
  rounding_ = rounding;
  gen_.manual_seed(seed);
  if (rounding != ParamRounding::Kahan)
    for (Tensor& c : compensations_) c = Tensor();
}

float* ParamPrecision::master_for(size_t i, const Tensor& p) {
  if (!is_low_precision(p.dtype()) || mode_ == MasterWeights::Off) return nullptr;
  Tensor& m = masters_[i];
  if (!m.defined()) {
    NoGradGuard no_grad;
    m = p.detach().to(DType::F32);  // exact: every F16/BF16 value is an F32 value
  }
  HG_CHECK(m.numel() == p.numel() && m.device() == p.device(), "Optimizer.step: parameter ", i, " has shape ",
           p.shape(), " on ", p.device(), " but its master has shape ", m.shape(), " on ", m.device(),
           "; parameters must not be replaced after the optimizer is made");
  return static_cast<float*>(m.data_ptr());
}

ParamStore ParamPrecision::store_for(size_t i, const Tensor& p) {
  ParamStore st;
  if (!is_low_precision(p.dtype()) || mode_ != MasterWeights::Off || rounding_ == ParamRounding::Nearest) return st;
  st.rounding = rounding_;
  if (rounding_ == ParamRounding::Stochastic) {
    st.rng = reserve_draw(gen_, static_cast<uint64_t>((p.numel() + 3) / 4), p.device());
    return st;
  }
  Tensor& c = compensations_[i];
  if (!c.defined()) c = zeros(p.shape(), {.dtype = p.dtype(), .device = p.device()});
  HG_CHECK(c.numel() == p.numel() && c.device() == p.device(), "Optimizer.step: parameter ", i, " has shape ",
           p.shape(), " on ", p.device(), " but its Kahan compensation has shape ", c.shape(), " on ", c.device(),
           "; parameters must not be replaced after the optimizer is made");
  st.compensation = c.data_ptr();
  return st;
}

void ParamPrecision::save_generator(StateDict& sd) const {
  if (rounding_ != ParamRounding::Stochastic) return;
  const GeneratorState g = gen_.state();
  sd["rounding.generator"] =
      from_vector(std::vector<int64_t>{static_cast<int64_t>(g.seed), static_cast<int64_t>(g.offset)}, Shape{2});
}

void ParamPrecision::save(StateDict& sd, size_t i) const {
  if (const Tensor& m = masters_[i]; m.defined()) sd[state_key(i, "master")] = copy_to(m, m.device());
  if (const Tensor& c = compensations_[i]; c.defined()) sd[state_key(i, "compensation")] = copy_to(c, c.device());
}

ParamPrecision::Loaded ParamPrecision::begin_load(const char* opt, const StateDict& sd,
                                                  std::set<std::string>& used) const {
  Loaded out{.generator = std::nullopt,
             .masters = std::vector<Tensor>(masters_.size()),
             .compensations = std::vector<Tensor>(compensations_.size())};
  auto it = sd.find("rounding.generator");
  if (it == sd.end()) return out;
  HG_CHECK(rounding_ == ParamRounding::Stochastic, opt, ".load_state_dict: entry 'rounding.generator' is a stochastic "
           "rounding stream but this optimizer does not round stochastically; call "
           "set_param_rounding(ParamRounding::Stochastic) before loading");
  const Tensor& t = it->second;
  HG_CHECK(t.defined() && t.dtype() == DType::I64 && t.numel() == 2, opt, ".load_state_dict: entry 'rounding.generator' "
           "has shape ", t.shape(), "; it must be a 1-d I64 tensor {seed, offset}");
  const std::vector<int64_t> v = t.to_vector<int64_t>();
  out.generator = GeneratorState{static_cast<uint64_t>(v[0]), static_cast<uint64_t>(v[1])};
  used.insert("rounding.generator");
  return out;
}

void ParamPrecision::read_param(const char* opt, const StateDict& sd, size_t i, const Tensor& p, Loaded& out,
                                std::set<std::string>& used) const {
  // none saved: a master is made from the parameter at its next step
  if (const auto it = sd.find(state_key(i, "master")); it != sd.end()) {
    HG_CHECK(is_low_precision(p.dtype()), opt, ".load_state_dict: entry '", it->first, "' is a master copy but parameter ",
             i, " is ", p.dtype(), "; only F16/BF16 parameters have masters");
    HG_CHECK(mode_ != MasterWeights::Off, opt, ".load_state_dict: entry '", it->first,
             "' is a master copy but this optimizer has master weights Off; call set_master_weights(MasterWeights::Auto) "
             "before loading, or drop the state.<i>.master entries");
    out.masters[i] = detail::read_buffer(opt, it->second, it->first, p);  // F32, the parameter's shape
    used.insert(it->first);
  }
  if (const auto it = sd.find(state_key(i, "compensation")); it != sd.end()) {
    HG_CHECK(rounding_ == ParamRounding::Kahan && is_low_precision(p.dtype()), opt, ".load_state_dict: entry '",
             it->first, "' is a Kahan compensation but this optimizer's parameter ", i, " (", p.dtype(),
             ") takes none; call set_param_rounding(ParamRounding::Kahan) (masters Off) before loading");
    const Tensor& c = it->second;
    HG_CHECK(c.shape() == p.shape() && c.dtype() == p.dtype(), opt, ".load_state_dict: entry '", it->first,
             "' has shape ", c.shape(), " and dtype ", c.dtype(), " but its parameter has ", p.shape(), " ", p.dtype(),
             "; the state dict belongs to other parameters");
    out.compensations[i] = copy_to(c, p.device());
    used.insert(it->first);
  }
}

void ParamPrecision::commit(Loaded&& in) {
  masters_ = std::move(in.masters);
  compensations_ = std::move(in.compensations);
  if (in.generator) gen_.set_state(*in.generator);
}

}  // namespace hg::optim
