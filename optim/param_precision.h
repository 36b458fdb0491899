#pragma once
// The precision of the parameters' store, the part of an Optimizer that is the same for every optimizer
// (docs/ARCHITECTURE.md, Principles 6): F32 master copies of F16/BF16 parameters, or, without them, how the
// update is rounded into the parameter (nearest, stochastic with its Philox stream, Kahan with its
// compensation buffers), and their state-dict entries state.<i>.master, state.<i>.compensation and
// rounding.generator. Indexed by the optimizer's parameter index <i>.
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/state_dict.h"
#include "core/stochastic_round.h"
#include "core/tensor.h"

namespace hg::optim {

struct ParamStore;  // ops/kernels/optim.h

// FP32 master weights (docs/ARCHITECTURE.md, Principles 6; Micikevicius et al. 2018). With Auto (the default) an F16/BF16
// parameter gets an F32 master copy at its first step, made from the parameter's values; every step
// then updates the master (moments are F32 in any case) and rounds it once (RNE) into the parameter,
// so updates below half an F16/BF16 ulp of the weight accumulate instead of being swamped. F32 and
// F64 parameters are their own master. Off updates the low-precision parameter directly (widened to
// F32, updated, rounded): Apex's O3, pure F16.
enum class MasterWeights : uint8_t { Auto, Off };

class ParamPrecision {
 public:
  // The optimizer's new group: n more parameters, none with a master or compensation yet.
  void add_params(size_t n);

  // Optimizer::set_master_weights and set_param_rounding (optim/optimizer.h), checked as they document.
  void set_master_weights(MasterWeights mode);
  MasterWeights master_weights() const { return mode_; }
  void set_param_rounding(ParamRounding rounding, uint64_t seed);
  ParamRounding param_rounding() const { return rounding_; }
  const Tensor& master(size_t i) const { return masters_[i]; }
  const Tensor& compensation(size_t i) const { return compensations_[i]; }

  // The master copy parameter i's update reads and writes (made from p at its first step), or null when
  // p is its own master or masters are Off.
  float* master_for(size_t i, const Tensor& p);
  // How parameter i's update is rounded into it (ops/kernels/optim.h): reserves its Philox blocks for a
  // stochastic store, makes its compensation buffer (zeros) at its first Kahan store.
  ParamStore store_for(size_t i, const Tensor& p);

  // rounding.generator (stochastic rounding only) and parameter i's state.<i>.master and .compensation.
  void save_generator(StateDict& sd) const;
  void save(StateDict& sd, size_t i) const;
  // What load_state_dict reads, checked, before anything changes (a load is all or nothing).
  struct Loaded {
    std::optional<GeneratorState> generator;
    std::vector<Tensor> masters, compensations;  // by <i>; undefined where the dict has none
  };
  // The load starts with rounding.generator, when the dict has it (checked against this rounding), then
  // reads parameter i's master and compensation, when the dict has them (checked against p), for each
  // parameter; each marks the entries it used. commit replaces every master and compensation (a parameter
  // without one in the dict gets none: a master is made from the parameter at its next step) and, when
  // the dict had one, the Philox stream.
  Loaded begin_load(const char* opt, const StateDict& sd, std::set<std::string>& used) const;
  void read_param(const char* opt, const StateDict& sd, size_t i, const Tensor& p, Loaded& out,
                  std::set<std::string>& used) const;
  void commit(Loaded&& in);

 private:
  MasterWeights mode_ = MasterWeights::Auto;
  ParamRounding rounding_ = ParamRounding::Nearest;
  Generator gen_{0};
  std::vector<Tensor> masters_;        // F32 master of an F16/BF16 parameter; undefined otherwise
  std::vector<Tensor> compensations_;  // Kahan's buffer of an F16/BF16 parameter without master; undefined otherwise
};

}  // namespace hg::optim
