#include "data/dataset.h"

#include "core/parallel.h"

namespace hg::data {

void TensorDataset::check(const char* op) const {
  HG_CHECK(inputs.defined() && targets.defined(), op, ": the dataset's ", inputs.defined() ? "targets" : "inputs",
           " tensor is undefined; build it as TensorDataset{inputs, targets}");
  HG_CHECK(inputs.ndim() >= 1 && targets.ndim() >= 1, op, ": inputs ", inputs.shape(), " and targets ",
           targets.shape(), " both need a first (sample) dim");
  HG_CHECK(inputs.size(0) == targets.size(0), op, ": inputs have ", inputs.size(0), " samples (shape ",
           inputs.shape(), ") but targets have ", targets.size(0), " (shape ", targets.shape(),
           "); the first dims must match");
  HG_CHECK(inputs.device().is_cpu() && targets.device().is_cpu(), op, ": the dataset lives on ", inputs.device(),
           "/", targets.device(), "; keep it on the CPU and move each batch with .to(device)");
}

int64_t TensorDataset::size() const {
  check("TensorDataset::size");
  return inputs.size(0);
}

void normalize_(Tensor& images, const std::vector<float>& mean, const std::vector<float>& std) {
  HG_CHECK(images.defined() && images.ndim() >= 2, "normalize_: images need shape (N,C,...), got ",
           images.defined() ? images.shape().str() : "an undefined tensor");
  const int64_t n = images.size(0), c = images.size(1), plane = n * c == 0 ? 0 : images.numel() / (n * c);
  HG_CHECK(images.dtype() == DType::F32 && images.device().is_cpu(), "normalize_: images are ", images.dtype(),
           " on ", images.device(), "; normalise the F32 CPU images before casting or moving them");
  HG_CHECK(!images.requires_grad(), "normalize_: images require grad; normalise data before it enters autograd");
  const auto channels_ok = [c](const std::vector<float>& v) {
    return v.size() == 1 || static_cast<int64_t>(v.size()) == c;
  };
  HG_CHECK(channels_ok(mean) && channels_ok(std), "normalize_: images have ", c, " channels but mean has ",
           mean.size(), " values and std ", std.size(), "; pass one value per channel (or one for all)");
  for (float s : std) HG_CHECK(s > 0.0f, "normalize_: std ", s, " is not > 0; pass the data set's standard deviation");
  float* d = images.data<float>();
  parallel_for(n * c, true, [&](int64_t p) {
    const size_t ch = static_cast<size_t>(p % c);
    const float m = mean[mean.size() == 1 ? 0 : ch], s = std[std.size() == 1 ? 0 : ch];
    float* x = d + p * plane;
    for (int64_t i = 0; i < plane; ++i) x[i] = (x[i] - m) / s;
  });
}

}  // namespace hg::data
