#include "nn/layers.h"

#include <cmath>
#include <sstream>

#include "autograd/node.h"
#include "nn/init.h"
#include "ops/dropout.h"
#include "ops/embedding.h"
#include "ops/matmul.h"
#include "ops/norm.h"

namespace hg::nn {

namespace {

const char* py_bool(bool b) { return b ? "True" : "False"; }

std::string pair_str(Size2 s) {
  std::ostringstream os;
  os << "(" << s.h << ", " << s.w << ")";
  return os.str();
}

// torch's Linear/Conv reset_parameters(): kaiming_uniform_(a=sqrt(5)) and a bias bound of 1/sqrt(fan_in).
void reset_weight_and_bias(const Tensor& w, const Tensor& b) {
  init::kaiming_uniform_(w, {.a = std::sqrt(5.0)});
  if (!b.defined()) return;
  const int64_t fan_in = init::compute_fans(w).in;
  const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
  init::uniform_(b, -bound, bound);
}

void check_positive(const char* layer, const char* what, int64_t v) {
  HG_CHECK(v > 0, layer, ": ", what, " must be positive, got ", v);
}

}  // namespace

// ---- Linear ---------------------------------------------------------------------------------
Linear::Linear(int64_t in, int64_t out, LinearArgs o) : in_features(in), out_features(out) {
  HG_CHECK(in >= 0 && out >= 0, "Linear: in_features=", in, " and out_features=", out, " must be >= 0");
  weight = register_parameter("weight", empty({out, in}));
  if (o.bias) bias = register_parameter("bias", empty({out}));
  reset_weight_and_bias(weight, bias);
}
std::string Linear::extra_repr() const {
  std::ostringstream os;
  os << "in_features=" << in_features << ", out_features=" << out_features << ", bias=" << py_bool(bias.defined());
  return os.str();
}
Tensor Linear::forward(const Tensor& x) { return linear(x, weight, bias); }

// ---- Conv2d ---------------------------------------------------------------------------------
Conv2d::Conv2d(int64_t in, int64_t out, Size2 k, Conv2dArgs o)
    : in_channels(in), out_channels(out), kernel_size(k), options(o) {
  check_positive("Conv2d", "in_channels", in);
  check_positive("Conv2d", "out_channels", out);
  check_positive("Conv2d", "groups", o.groups);
  HG_CHECK(in % o.groups == 0 && out % o.groups == 0, "Conv2d: in_channels=", in, " and out_channels=", out,
           " must both be divisible by groups=", o.groups);
  HG_CHECK(k.h > 0 && k.w > 0, "Conv2d: kernel_size ", pair_str(k), " must be positive");
  weight = register_parameter("weight", empty({out, in / o.groups, k.h, k.w}));
  if (o.bias) bias = register_parameter("bias", empty({out}));
  reset_weight_and_bias(weight, bias);
}
std::string Conv2d::extra_repr() const {
  std::ostringstream os;
  os << in_channels << ", " << out_channels << ", kernel_size=" << pair_str(kernel_size)
     << ", stride=" << pair_str(options.stride);
  if (!(options.padding == Size2(0))) os << ", padding=" << pair_str(options.padding);
  if (!(options.dilation == Size2(1))) os << ", dilation=" << pair_str(options.dilation);
  if (options.groups != 1) os << ", groups=" << options.groups;
  if (!bias.defined()) os << ", bias=False";
  return os.str();
}
Tensor Conv2d::forward(const Tensor& x) {
  return conv2d(x, weight, bias,
                {.stride = options.stride, .padding = options.padding, .dilation = options.dilation,
                 .groups = options.groups});
}

// ---- Conv1d ---------------------------------------------------------------------------------
Conv1d::Conv1d(int64_t in, int64_t out, int64_t k, Conv1dArgs o)
    : in_channels(in), out_channels(out), kernel_size(k), options(o) {
  check_positive("Conv1d", "in_channels", in);
  check_positive("Conv1d", "out_channels", out);
  check_positive("Conv1d", "groups", o.groups);
  check_positive("Conv1d", "kernel_size", k);
  HG_CHECK(in % o.groups == 0 && out % o.groups == 0, "Conv1d: in_channels=", in, " and out_channels=", out,
           " must both be divisible by groups=", o.groups);
  weight = register_parameter("weight", empty({out, in / o.groups, k}));
  if (o.bias) bias = register_parameter("bias", empty({out}));
  reset_weight_and_bias(weight, bias);
}
std::string Conv1d::extra_repr() const {
  std::ostringstream os;
  os << in_channels << ", " << out_channels << ", kernel_size=(" << kernel_size << ",), stride=(" << options.stride
     << ",)";
  if (options.padding != 0) os << ", padding=(" << options.padding << ",)";
  if (options.dilation != 1) os << ", dilation=(" << options.dilation << ",)";
  if (options.groups != 1) os << ", groups=" << options.groups;
  if (!bias.defined()) os << ", bias=False";
  return os.str();
}
Tensor Conv1d::forward(const Tensor& x) {
  HG_CHECK(x.ndim() == 2 || x.ndim() == 3, "Conv1d: expected 2-D (C, L) or 3-D (N, C, L) input, got shape ", x.shape());
  const Tensor x4 = x.unsqueeze(-2);  // (N, C, 1, L): a conv2d over a height of 1
  const Tensor y = conv2d(x4, weight.unsqueeze(2), bias,
                          {.stride = Size2(1, options.stride), .padding = Size2(0, options.padding),
                           .dilation = Size2(1, options.dilation), .groups = options.groups});
  return y.squeeze(-2);
}

// ---- BatchNorm1d, BatchNorm2d ----------------------------------------------------------------
BatchNormBase::BatchNormBase(const char* name, int64_t c, BatchNormArgs o, int64_t min_rank, int64_t max_rank,
                             const char* layout)
    : num_features(c), options(o), name_(name), min_rank_(min_rank), max_rank_(max_rank), layout_(layout) {
  check_positive(name, "num_features", c);
  if (o.affine) {
    weight = register_parameter("weight", ones({c}));
    bias = register_parameter("bias", zeros({c}));
  }
  if (o.track_running_stats) {
    running_mean = register_buffer("running_mean", zeros({c}));
    running_var = register_buffer("running_var", ones({c}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, {.dtype = DType::I64}));
  }
}
std::string BatchNormBase::extra_repr() const {
  std::ostringstream os;
  os << num_features << ", eps=" << options.eps << ", momentum=" << options.momentum
     << ", affine=" << py_bool(options.affine) << ", track_running_stats=" << py_bool(options.track_running_stats);
  return os.str();
}
Tensor BatchNormBase::forward(const Tensor& x) {
  HG_CHECK(x.ndim() >= min_rank_ && x.ndim() <= max_rank_, name_, ": expected input ", layout_, ", got shape ", x.shape());
  // torch: batch statistics in training, or in eval when no running statistics are tracked
  const bool use_batch = is_training() || !options.track_running_stats;
  if (is_training() && options.track_running_stats) {
    NoGradGuard ng;
    // +1 on the buffer's device, through F64 (exact below 2^53): reading the count back would make the
    // host wait for a GPU every step (and break CUDA graph capture)
    set_data(num_batches_tracked, add(num_batches_tracked.to(DType::F64), 1.0).to(DType::I64));
  }
  // without track_running_stats the running tensors are undefined, so eval uses batch statistics
  return batch_norm(x, running_mean, running_var, weight, bias,
                    {.training = use_batch, .momentum = options.momentum, .eps = options.eps});
}

// ---- LayerNorm ------------------------------------------------------------------------------
LayerNorm::LayerNorm(std::vector<int64_t> shape, LayerNormArgs o)
    : normalized_shape(std::move(shape)), options(o) {
  HG_CHECK(!normalized_shape.empty(), "LayerNorm: normalized_shape must have at least one dim");
  if (o.elementwise_affine) {
    weight = register_parameter("weight", ones(Shape(normalized_shape)));
    bias = register_parameter("bias", zeros(Shape(normalized_shape)));
  }
}
std::string LayerNorm::extra_repr() const {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < normalized_shape.size(); ++i) os << (i ? ", " : "") << normalized_shape[i];
  os << (normalized_shape.size() == 1 ? ",)" : ")") << ", eps=" << options.eps
     << ", elementwise_affine=" << py_bool(options.elementwise_affine);
  return os.str();
}
Tensor LayerNorm::forward(const Tensor& x) {
  return layer_norm(x, normalized_shape, weight, bias, {.eps = options.eps});
}

// ---- Embedding ------------------------------------------------------------------------------
Embedding::Embedding(int64_t num, int64_t dim, EmbeddingArgs o)
    : num_embeddings(num), embedding_dim(dim), options(o) {
  check_positive("Embedding", "num_embeddings", num);
  check_positive("Embedding", "embedding_dim", dim);
  if (options.padding_idx) {
    int64_t& pad = *options.padding_idx;
    HG_CHECK(pad >= -num && pad < num, "Embedding: padding_idx=", pad, " must be within num_embeddings=", num,
             " (in [", -num, ", ", num, "); a negative one counts from the end)");
    if (pad < 0) pad += num;  // torch stores it counted from the start
  }
  weight = register_parameter("weight", empty({num, dim}));
  init::normal_(weight, 0.0, 1.0);
  if (options.padding_idx) {
    NoGradGuard ng;
    std::vector<float> v = weight.to_vector<float>();
    std::fill_n(v.begin() + *options.padding_idx * dim, dim, 0.f);
    set_data(weight, from_vector(v, {num, dim}));
  }
}
std::string Embedding::extra_repr() const {
  std::ostringstream os;
  os << num_embeddings << ", " << embedding_dim;
  if (options.padding_idx) os << ", padding_idx=" << *options.padding_idx;
  return os.str();
}
Tensor Embedding::forward(const Tensor& indices) {
  return embedding(indices, weight, {.padding_idx = options.padding_idx.value_or(-1)});
}

// ---- Dropout --------------------------------------------------------------------------------
Dropout::Dropout(double p_) : p(p_) {
  HG_CHECK(p >= 0.0 && p <= 1.0, "Dropout: p=", p, " must be in [0, 1]");
}
std::string Dropout::extra_repr() const {
  std::ostringstream os;
  os << "p=" << p << ", inplace=False";
  return os.str();
}
Tensor Dropout::forward(const Tensor& x) { return dropout(x, {.p = p, .training = is_training()}); }

}  // namespace hg::nn
