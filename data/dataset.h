#pragma once
// What the readers return and the DataLoader consumes: labelled image sets, (inputs, targets) pairs
// and per-channel normalisation.
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace hg::data {

enum class Split { Train, Test };

// images is F32 (N,C,H,W) in [0,1]; labels is I64 (N) with values in [0, classes).
struct LabeledImages {
  Tensor images;
  Tensor labels;
};
using MnistSplit = LabeledImages;
using CifarSplit = LabeledImages;

// Sample i is (inputs[i], targets[i]): inputs is (N, ...) of any dtype, targets is (N, ...) (usually
// I64 class indices). Both live on the CPU; a training loop moves each batch with .to(device).
struct TensorDataset {
  Tensor inputs;
  Tensor targets;
  // Throws naming op when a tensor is undefined, 0-d, not on the CPU, or the first dims differ.
  void check(const char* op = "TensorDataset") const;
  int64_t size() const;  // N (checks first)
};

// images (N,C,...) F32 on the CPU: x = (x - mean[c]) / std[c] in place, per channel c.
// mean and std hold C values each (or one value for all channels); every std must be > 0.
void normalize_(Tensor& images, const std::vector<float>& mean, const std::vector<float>& std);

}  // namespace hg::data
