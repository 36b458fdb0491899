#pragma once
// torch.nn.functional's names for the ops a model's forward calls (libtorch's namespace
// torch::nn::functional, usually aliased F): the same functions as hg::relu, hg::conv2d, ... (ops/*.h), so
// F::relu(x) and hg::relu(x) are one op.
//   namespace F = hg::nn::functional;
//   x = F::relu(F::conv2d(x, w, b, {.padding = 1}));
#include "ops/conv.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/loss.h"
#include "ops/matmul.h"
#include "ops/norm.h"
#include "ops/pool.h"
#include "ops/reduce.h"

namespace hg::nn::functional {

using hg::adaptive_avg_pool2d;
using hg::avg_pool2d;
using hg::batch_norm;
using hg::binary_cross_entropy_with_logits;
using hg::conv2d;
using hg::cross_entropy;
using hg::dropout;
using hg::embedding;
using hg::gelu;
using hg::l1_loss;
using hg::layer_norm;
using hg::linear;
using hg::log_softmax;
using hg::max_pool2d;
using hg::mse_loss;
using hg::nll_loss;
using hg::relu;
using hg::sigmoid;
using hg::silu;
using hg::softmax;
using hg::tanh;

}  // namespace hg::nn::functional
