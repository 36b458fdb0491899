#pragma once
#include <concepts>
// Layers with parameters. Constructors initialise like PyTorch's reset_parameters() (Linear and Conv2d:
// kaiming-uniform with a = sqrt(5) for the weight, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for the bias),
// so accuracies are comparable with the same recipe in PyTorch.
#include <vector>

#include "nn/module.h"
#include "ops/conv.h"
#include "ops/elementwise.h"

namespace hg::nn {

struct LinearOptions {
  bool bias = true;
};
// x (*, in_features) -> (*, out_features); weight (out, in), bias (out). Its FP8 counterpart is nn::Fp8Linear
// (nn/fp8_linear.h), which nn::convert_to_fp8 swaps in.
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, LinearOptions o = {});
  // libtorch's positional Linear(in, out, /*bias=*/false) (a bool only: {} still means LinearOptions)
  template <std::same_as<bool> B>
  Linear(int64_t in_features, int64_t out_features, B bias) : Linear(in_features, out_features, LinearOptions{.bias = bias}) {}
  std::string type_name() const override { return "Linear"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;
  int64_t in_features, out_features;
};

// A module's options (libtorch's nn::Conv2dOptions); the function conv2d takes hg::Conv2dFuncOptions.
struct Conv2dArgs {
  Size2 stride = 1;
  Size2 padding = 0;
  Size2 dilation = 1;
  int64_t groups = 1;
  bool bias = true;
};
// libtorch's chained options: nn::Conv2d(nn::Conv2dOptions(1, 16, 3).padding(1).bias(false)), the same module as
// nn::Conv2d(1, 16, 3, {.padding = 1, .bias = false}) (the braces are a Conv2dArgs). Each setter returns the options.
class Conv2dOptions {
 public:
  Conv2dOptions(int64_t in_channels, int64_t out_channels, Size2 kernel_size)
      : in_(in_channels), out_(out_channels), kernel_(kernel_size) {}
  Conv2dOptions& stride(Size2 v) { return set(args_.stride, v); }
  Conv2dOptions& padding(Size2 v) { return set(args_.padding, v); }
  Conv2dOptions& dilation(Size2 v) { return set(args_.dilation, v); }
  Conv2dOptions& groups(int64_t v) { return set(args_.groups, v); }
  Conv2dOptions& bias(bool v) { return set(args_.bias, v); }
  int64_t in_channels() const { return in_; }
  int64_t out_channels() const { return out_; }
  Size2 kernel_size() const { return kernel_; }
  Size2 stride() const { return args_.stride; }
  Size2 padding() const { return args_.padding; }
  Size2 dilation() const { return args_.dilation; }
  int64_t groups() const { return args_.groups; }
  bool bias() const { return args_.bias; }
  const Conv2dArgs& args() const { return args_; }

 private:
  template <class T, class V>
  Conv2dOptions& set(T& field, V v) {
    field = v;
    return *this;
  }
  int64_t in_, out_;
  Size2 kernel_;
  Conv2dArgs args_;
};
// x (N, in, H, W) -> (N, out, OH, OW); weight (out, in/groups, kh, kw), bias (out).
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Conv2dArgs o = {});
  explicit Conv2d(const Conv2dOptions& o) : Conv2d(o.in_channels(), o.out_channels(), o.kernel_size(), o.args()) {}
  std::string type_name() const override { return "Conv2d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;
  int64_t in_channels, out_channels;
  Size2 kernel_size;
  Conv2dArgs options;
};

struct Conv1dOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;
  int64_t groups = 1;
  bool bias = true;
};
// x (N, in, L) or (in, L) -> (N, out, OL); weight (out, in/groups, kernel_size), bias (out), as torch's. Runs as
// a conv2d over a height of 1 (the weight viewed as (out, in/groups, 1, kernel_size)).
class Conv1d : public Module {
 public:
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv1dOptions o = {});
  std::string type_name() const override { return "Conv1d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;
  int64_t in_channels, out_channels, kernel_size;
  Conv1dOptions options;
};

struct BatchNormOptions {
  double eps = 1e-5;
  double momentum = 0.1;
  bool affine = true;
  bool track_running_stats = true;
};
// Batch normalization over dim 1 (channels); weight/bias (C) when affine; buffers running_mean, running_var (C)
// and num_batches_tracked (I64 scalar), as in PyTorch's state_dict. BatchNorm1d and BatchNorm2d differ only in
// the inputs they take (amp's O2 keeps every BatchNormBase in F32).
class BatchNormBase : public Module {
 public:
  std::string type_name() const override { return name_; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;
  int64_t num_features;
  BatchNormOptions options;

 protected:
  // the input ranks taken are min_rank..max_rank; `layout` names them in the error, e.g. "(N, C) or (N, C, L)"
  BatchNormBase(const char* name, int64_t num_features, BatchNormOptions o, int64_t min_rank, int64_t max_rank,
                const char* layout);

 private:
  const char* name_;
  int64_t min_rank_, max_rank_;
  const char* layout_;
};
class BatchNorm1d : public BatchNormBase {  // x (N, C) or (N, C, L)
 public:
  explicit BatchNorm1d(int64_t c, BatchNormOptions o = {}) : BatchNormBase("BatchNorm1d", c, o, 2, 3, "(N, C) or (N, C, L)") {}
};
class BatchNorm2d : public BatchNormBase {  // x (N, C, H, W)
 public:
  explicit BatchNorm2d(int64_t c, BatchNormOptions o = {}) : BatchNormBase("BatchNorm2d", c, o, 4, 4, "(N, C, H, W)") {}
};

struct LayerNormOptions {
  double eps = 1e-5;
  bool elementwise_affine = true;
};
class LayerNorm : public Module {
 public:
  explicit LayerNorm(std::vector<int64_t> normalized_shape, LayerNormOptions o = {});
  std::string type_name() const override { return "LayerNorm"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;
  std::vector<int64_t> normalized_shape;
  LayerNormOptions options;
};

struct EmbeddingOptions {
  int64_t padding_idx = -1;  // >= 0: that row starts at zero and gets no gradient
};
// indices (I64, any shape) -> indices.shape + (embedding_dim); weight ~ N(0, 1) like torch.
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, EmbeddingOptions o = {});
  std::string type_name() const override { return "Embedding"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& indices) override;
  Tensor weight;
  int64_t num_embeddings, embedding_dim;
  EmbeddingOptions options;
};

// Dropout: active in train(), identity in eval().
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  std::string type_name() const override { return "Dropout"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  double p;
};

}  // namespace hg::nn
