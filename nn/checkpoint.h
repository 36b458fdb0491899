#pragma once
// Saving modules and training runs as safetensors files (core/safetensors.h).
//
//   nn::save(model, "model.safetensors");            // the state_dict, keys as torch names them
//   nn::load(model, "model.safetensors");            // strict by default; errors name the bad keys
//
//   nn::save_checkpoint("run.safetensors", model, opt, {.step = step, .scaler = scaler.state_dict()});
//   nn::Checkpoint ck = nn::load_checkpoint("run.safetensors", model, opt);  // restores model, optimizer, RNG
//   scaler.load_state_dict(ck.scaler);  step = ck.step;
//
// A training checkpoint is one safetensors file whose keys say what they hold:
//   model.<name>    the module's state_dict (parameters and buffers)
//   optim.<key>     the optimizer's state_dict (optim/optimizer.h: group.<g>.<option>, state.<i>.<buffer>)
//   scaler.<key>    the GradScaler's state_dict, when one was given (amp::GradScaler::state_dict())
//   extra.<key>     anything else the caller wants back (an LR scheduler's state_dict, data order, ...)
//   rng.seed, rng.offset   the default generator's Philox state, 0-d I64 (the u64 bits)
//   step            the caller's step counter, 0-d I64
// and whose metadata carries "halfgrad.checkpoint": "1" plus the caller's metadata.
#include <cstdint>
#include <map>
#include <string>

#include "core/rng.h"
#include "nn/module.h"
#include "optim/optimizer.h"

namespace hg::nn {

// The module's state_dict, with metadata {"format": "pt"} as torch's safetensors files carry.
void save(const Module& m, const std::string& path);
// load_state_dict from the file (converting to each parameter's dtype and device).
void load(Module& m, const std::string& path, LoadOptions o = {});

struct CheckpointOptions {
  int64_t step = 0;
  std::map<std::string, Tensor> scaler = {};  // a GradScaler's state_dict, or empty for none
  std::map<std::string, Tensor> extra = {};
  std::map<std::string, std::string> metadata = {};
};

struct Checkpoint {
  StateDict model;
  std::map<std::string, Tensor> optimizer;
  std::map<std::string, Tensor> scaler;  // empty when none was saved
  std::map<std::string, Tensor> extra;
  std::map<std::string, std::string> metadata;  // the caller's (halfgrad's own key removed)
  GeneratorState rng;
  int64_t step = 0;
};

void save_checkpoint(const std::string& path, const Module& m, const optim::Optimizer& opt, CheckpointOptions o = {});

// Reads and checks a checkpoint without restoring anything.
Checkpoint read_checkpoint(const std::string& path);

// Restores the module (strict unless o says otherwise), the optimizer and the default generator, all
// or nothing: when any part does not fit, hg::Error names it and the module and optimizer are left as
// they were. Returns the checkpoint so the caller restores the rest (step, scaler, extra).
Checkpoint load_checkpoint(const std::string& path, Module& m, optim::Optimizer& opt, LoadOptions o = {});

}  // namespace hg::nn
