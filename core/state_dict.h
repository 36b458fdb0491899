#pragma once
// Name -> tensor, sorted by name: the one state-dict type of modules, optimizers, LR schedulers, the
// grad scaler and checkpoints (safetensors files store tensors sorted by name too).
#include <map>
#include <string>

#include "core/tensor.h"

namespace hg {

using StateDict = std::map<std::string, Tensor>;

}  // namespace hg
