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
//
// Several models and optimizers (a GAN's generator and discriminator, each with its optimizer) are named
// parts, as torch.save({"gen": G.state_dict(), "opt_g": og.state_dict(), ...}) names them:
//   nn::save_checkpoint("gan.safetensors", {.modules = {{"gen", &G}, {"disc", &D}},
//                                           .optimizers = {{"gen", &og}, {"disc", &od}}}, {.step = step});
//   nn::load_checkpoint("gan.safetensors", {.modules = {...}, .optimizers = {...}});  // all or nothing
// Their keys are model.<part>.<name> and optim.<part>.<key>; the metadata lists the parts
// ("halfgrad.models", "halfgrad.optimizers"). The one-model form above is the part named "".
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
  StateDict scaler = {};  // a GradScaler's state_dict, or empty for none
  StateDict extra = {};
  std::map<std::string, std::string> metadata = {};
};

// Named modules and optimizers (the names: letters, digits, '_' and '-'; "" is the one-model form).
struct CheckpointParts {
  std::map<std::string, const Module*> modules = {};
  std::map<std::string, const optim::Optimizer*> optimizers = {};
};
struct CheckpointTargets {  // what load_checkpoint restores into
  std::map<std::string, Module*> modules = {};
  std::map<std::string, optim::Optimizer*> optimizers = {};
};

struct Checkpoint {
  StateDict model;                               // the part "" (the one-model form)
  StateDict optimizer;                           // likewise
  std::map<std::string, StateDict> models;      // every part by name ("" included)
  std::map<std::string, StateDict> optimizers;
  StateDict scaler;  // empty when none was saved
  StateDict extra;
  std::map<std::string, std::string> metadata;  // the caller's (halfgrad's own key removed)
  GeneratorState rng;
  int64_t step = 0;
};

void save_checkpoint(const std::string& path, const Module& m, const optim::Optimizer& opt, CheckpointOptions o = {});
void save_checkpoint(const std::string& path, const CheckpointParts& parts, CheckpointOptions o = {});

// Reads and checks a checkpoint without restoring anything.
Checkpoint read_checkpoint(const std::string& path);

// Restores the module (strict unless o says otherwise), the optimizer and the default generator, all
// or nothing: when any part does not fit, hg::Error names it and the module and optimizer are left as
// they were. Returns the checkpoint so the caller restores the rest (step, scaler, extra).
Checkpoint load_checkpoint(const std::string& path, Module& m, optim::Optimizer& opt, LoadOptions o = {});
// The same for named parts: the file's parts must be exactly these; every module and optimizer is
// restored, or none (a failing one puts back those already restored).
Checkpoint load_checkpoint(const std::string& path, const CheckpointTargets& parts, LoadOptions o = {});

}  // namespace hg::nn
