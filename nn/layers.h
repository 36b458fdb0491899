#pragma once
#include <concepts>
// Layers with parameters. Constructors initialise like PyTorch's reset_parameters() (Linear and Conv2d:
// kaiming-uniform with a = sqrt(5) for the weight, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for the bias),
// so accuracies are comparable with the same recipe in PyTorch.
#include <optional>
#include <vector>

#include "nn/module.h"
#include "core/chained_options.h"
#include "ops/conv.h"
#include "ops/elementwise.h"

namespace hg::nn {

struct LinearArgs {
  bool bias = true;
};
// libtorch's nn::LinearOptions(in, out).bias(false)
class LinearOptions : public ChainedOptions<LinearArgs> {
 public:
  LinearOptions(int64_t in_features, int64_t out_features) : in_(in_features), out_(out_features) {}
  HG_OPTION(LinearOptions, bool, bias)
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

 private:
  int64_t in_, out_;
};
// x (*, in_features) -> (*, out_features); weight (out, in), bias (out). Its FP8 counterpart is nn::Fp8Linear
// (nn/fp8_linear.h), which nn::convert_to_fp8 swaps in.
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, LinearArgs o = {});
  explicit Linear(const LinearOptions& o) : Linear(o.in_features(), o.out_features(), o.args()) {}
  // libtorch's positional Linear(in, out, /*bias=*/false) (a bool only: {} still means LinearArgs)
  template <std::same_as<bool> B>
  Linear(int64_t in_features, int64_t out_features, B bias) : Linear(in_features, out_features, LinearArgs{.bias = bias}) {}
  std::string type_name() const override { return "Linear"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;
  int64_t in_features, out_features;
};

// A convolution module's options; K is Size2 for Conv2d, int64_t for Conv1d. The function conv2d takes
// hg::Conv2dFuncOptions.
template <class K>
struct ConvArgs {
  K stride = 1;
  K padding = 0;
  K dilation = 1;
  int64_t groups = 1;
  bool bias = true;
};
using Conv2dArgs = ConvArgs<Size2>;
using Conv1dArgs = ConvArgs<int64_t>;
// libtorch's chained options: nn::Conv2d(nn::Conv2dOptions(1, 16, 3).padding(1).bias(false)), the same module as
// nn::Conv2d(1, 16, 3, {.padding = 1, .bias = false}) (the braces are a Conv2dArgs); Conv1dOptions likewise.
template <class K>
class ConvOptions : public ChainedOptions<ConvArgs<K>> {
 public:
  ConvOptions(int64_t in_channels, int64_t out_channels, K kernel_size)
      : in_(in_channels), out_(out_channels), kernel_(kernel_size) {}
  HG_OPTION(ConvOptions, K, stride)
  HG_OPTION(ConvOptions, K, padding)
  HG_OPTION(ConvOptions, K, dilation)
  HG_OPTION(ConvOptions, int64_t, groups)
  HG_OPTION(ConvOptions, bool, bias)
  int64_t in_channels() const { return in_; }
  int64_t out_channels() const { return out_; }
  K kernel_size() const { return kernel_; }

 private:
  int64_t in_, out_;
  K kernel_;
};
using Conv2dOptions = ConvOptions<Size2>;
using Conv1dOptions = ConvOptions<int64_t>;
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

// x (N, in, L) or (in, L) -> (N, out, OL); weight (out, in/groups, kernel_size), bias (out), as torch's. Runs as
// a conv2d over a height of 1 (the weight viewed as (out, in/groups, 1, kernel_size)).
class Conv1d : public Module {
 public:
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv1dArgs o = {});
  explicit Conv1d(const Conv1dOptions& o) : Conv1d(o.in_channels(), o.out_channels(), o.kernel_size(), o.args()) {}
  std::string type_name() const override { return "Conv1d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;
  int64_t in_channels, out_channels, kernel_size;
  Conv1dArgs options;
};

struct BatchNormArgs {
  double eps = 1e-5;
  double momentum = 0.1;
  bool affine = true;
  bool track_running_stats = true;
};
// libtorch's nn::BatchNorm2dOptions(c).eps(1e-3).momentum(0.01) (BatchNorm1dOptions the same)
class BatchNormOptions : public ChainedOptions<BatchNormArgs> {
 public:
  explicit BatchNormOptions(int64_t num_features) : num_features_(num_features) {}
  HG_OPTION(BatchNormOptions, double, eps)
  HG_OPTION(BatchNormOptions, double, momentum)
  HG_OPTION(BatchNormOptions, bool, affine)
  HG_OPTION(BatchNormOptions, bool, track_running_stats)
  int64_t num_features() const { return num_features_; }

 private:
  int64_t num_features_;
};
using BatchNorm1dOptions = BatchNormOptions;
using BatchNorm2dOptions = BatchNormOptions;
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
  BatchNormArgs options;

 protected:
  // the input ranks taken are min_rank..max_rank; `layout` names them in the error, e.g. "(N, C) or (N, C, L)"
  BatchNormBase(const char* name, int64_t num_features, BatchNormArgs o, int64_t min_rank, int64_t max_rank,
                const char* layout);

 private:
  const char* name_;
  int64_t min_rank_, max_rank_;
  const char* layout_;
};
class BatchNorm1d : public BatchNormBase {  // x (N, C) or (N, C, L)
 public:
  explicit BatchNorm1d(int64_t c, BatchNormArgs o = {}) : BatchNormBase("BatchNorm1d", c, o, 2, 3, "(N, C) or (N, C, L)") {}
  explicit BatchNorm1d(const BatchNormOptions& o) : BatchNorm1d(o.num_features(), o.args()) {}
};
class BatchNorm2d : public BatchNormBase {  // x (N, C, H, W)
 public:
  explicit BatchNorm2d(int64_t c, BatchNormArgs o = {}) : BatchNormBase("BatchNorm2d", c, o, 4, 4, "(N, C, H, W)") {}
  explicit BatchNorm2d(const BatchNormOptions& o) : BatchNorm2d(o.num_features(), o.args()) {}
};

struct LayerNormArgs {
  double eps = 1e-5;
  bool elementwise_affine = true;
};
// libtorch's nn::LayerNormOptions({64}).eps(1e-6).elementwise_affine(false)
class LayerNormOptions : public ChainedOptions<LayerNormArgs> {
 public:
  LayerNormOptions(std::vector<int64_t> normalized_shape) : shape_(std::move(normalized_shape)) {}
  HG_OPTION(LayerNormOptions, double, eps)
  HG_OPTION(LayerNormOptions, bool, elementwise_affine)
  const std::vector<int64_t>& normalized_shape() const { return shape_; }

 private:
  std::vector<int64_t> shape_;
};
class LayerNorm : public Module {
 public:
  explicit LayerNorm(std::vector<int64_t> normalized_shape, LayerNormArgs o = {});
  explicit LayerNorm(const LayerNormOptions& o) : LayerNorm(o.normalized_shape(), o.args()) {}
  std::string type_name() const override { return "LayerNorm"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  Tensor weight, bias;
  std::vector<int64_t> normalized_shape;
  LayerNormArgs options;
};

struct EmbeddingArgs {
  // that row starts at zero and gets no gradient; a negative value counts from the end (torch's)
  std::optional<int64_t> padding_idx;
};
// libtorch's nn::EmbeddingOptions(num, dim).padding_idx(0)
class EmbeddingOptions : public ChainedOptions<EmbeddingArgs> {
 public:
  EmbeddingOptions(int64_t num_embeddings, int64_t embedding_dim) : num_(num_embeddings), dim_(embedding_dim) {}
  HG_OPTION(EmbeddingOptions, std::optional<int64_t>, padding_idx)
  int64_t num_embeddings() const { return num_; }
  int64_t embedding_dim() const { return dim_; }

 private:
  int64_t num_, dim_;
};
// indices (I64, any shape) -> indices.shape + (embedding_dim); weight ~ N(0, 1) like torch.
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, EmbeddingArgs o = {});
  explicit Embedding(const EmbeddingOptions& o) : Embedding(o.num_embeddings(), o.embedding_dim(), o.args()) {}
  std::string type_name() const override { return "Embedding"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& indices) override;
  Tensor weight;
  int64_t num_embeddings, embedding_dim;
  EmbeddingArgs options;  // padding_idx as stored: counted from the start
};

struct DropoutArgs {
  double p = 0.5;
};
// libtorch's nn::DropoutOptions(0.2), nn::DropoutOptions().p(0.2)
class DropoutOptions : public ChainedOptions<DropoutArgs> {
 public:
  DropoutOptions(double p = 0.5) { args_.p = p; }
  HG_OPTION(DropoutOptions, double, p)
};
// Dropout: active in train(), identity in eval().
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  explicit Dropout(const DropoutOptions& o) : Dropout(o.p()) {}
  std::string type_name() const override { return "Dropout"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  double p;
};

}  // namespace hg::nn
