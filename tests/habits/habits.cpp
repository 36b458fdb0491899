// The everyday one-liners of a PyTorch user, as libtorch spells them, each printing its result in one line:
// `name: shape=[d0,d1] values=v0 v1 ...`. tests/habits/torch_habits.py runs the same one-liners in PyTorch and
// wrote expected.txt; tests/habits/compare.py checks this program's output against it (CTest: habits).
// A habit that only compiles here (x.to("cuda") without a GPU) prints what it can.
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "halfgrad.h"
#include "nn/nn.h"
#include "optim/adam.h"
#include "optim/sgd.h"

using namespace hg;
using namespace hg::indexing;
namespace F = hg::nn::functional;

namespace {
void show(const char* name, const Tensor& t) {
  std::printf("%s: shape=[", name);
  for (int64_t d = 0; d < t.ndim(); ++d) std::printf("%s%lld", d ? "," : "", static_cast<long long>(t.size(d)));
  std::printf("] values=");
  const std::vector<double> v = t.to(Device::cpu()).to_vector<double>();
  for (size_t i = 0; i < v.size(); ++i) std::printf("%s%.9g", i ? " " : "", v[i]);
  std::printf("\n");
}
void show(const char* name, double v) { std::printf("%s: shape=[] values=%.9g\n", name, v); }
Tensor arange_f(int64_t n, Shape s) { return arange(n).to(DType::F32).reshape(std::move(s)); }
}  // namespace

int main() {
  const Tensor x = arange_f(12, {3, 4});
  const Tensor y = arange_f(4, {4});
  show("unsqueeze", x.unsqueeze(0));
  show("squeeze", x.unsqueeze(0).unsqueeze(2).squeeze());
  show("dim", static_cast<double>(x.dim()));
  show("sizes", static_cast<double>(x.sizes()[0] * 10 + x.sizes()[1]));
  show("mul", x.mul(y));
  show("contiguous", x.t().contiguous());
  show("is_contiguous", x.t().is_contiguous() ? 1.0 : 0.0);
  show("half", x.div(7).half());
  show("half_to_float", x.div(7).half().to(DType::F32));
  const Tensor w = arange_f(8, {4, 2});
  show("matmul", x.matmul(w));
  show("mm", x.mm(w));
  show("bmm", arange_f(24, {2, 3, 4}).bmm(arange_f(16, {2, 4, 2}).div(10)));
  show("matmul_vector", x.matmul(y));                                   // (3, 4) @ (4) -> (3)
  show("matmul_dot", y.matmul(y));                                      // (4) @ (4) -> ()
  show("matmul_4d", arange_f(24, {2, 1, 3, 4}).matmul(arange_f(16, {2, 4, 2}).div(8)));  // batch (2,1) x (2)
  show("mean_dim", x.mean(1));
  show("sum_keepdim", x.sum(1, true));
  auto [mv, mi] = x.mul(y.sub(1.5).abs()).max(1);
  show("max_values", mv);
  show("max_indices", mi);
  Tensor z = x.clone();
  z.add_(y);
  show("add_", z);
  z += 1;
  show("iadd", z);
  z.fill_(0);
  show("fill_", z);
  Tensor z2 = x.clone();
  z2.zero_();
  show("zero_", z2);
  z2.copy_(y);
  show("copy_", z2);
  show("stack", stack({y, y.mul(2)}));
  show("chunk1", x.chunk(2, 1)[1]);
  show("split", x.split(3, 1)[1]);
  show("split_sizes", x.split(std::vector<int64_t>{1, 2}, 0)[1]);
  const Tensor idx = from_vector(std::vector<int64_t>{3, 0}, {2});
  show("index_select", x.index_select(1, idx));
  show("gather", x.gather(1, from_vector(std::vector<int64_t>{0, 0, 1, 0, 3, 2}, {3, 2})));
  show("masked_fill", x.masked_fill(x > 5.0, -1));
  const Tensor sidx = from_vector(std::vector<int64_t>{2, 0, 1, 0, 0, 2, 1, 1}, {2, 4});
  show("scatter_add", zeros({3, 4}).scatter_add(0, sidx, x.narrow(0, 0, 2)));
  show("scatter", zeros({3, 4}).scatter(0, from_vector(std::vector<int64_t>{2, 0, 1, 0}, {1, 4}), x));
  show("scatter_value", x.scatter(1, from_vector(std::vector<int64_t>{3, 1, 0}, {3, 1}), -5));
  show("index_add", x.index_add(0, from_vector(std::vector<int64_t>{2, 2}, {2}), x.narrow(0, 0, 2), 0.5));
  Tensor ia = x.clone();
  ia.index_add_(1, from_vector(std::vector<int64_t>{0, 3}, {2}), ones({3, 2}));
  show("index_add_", ia);
  show("unbind", x.unbind(1)[2]);
  const Tensor halves = from_vector(std::vector<float>{-2.5f, -1.5f, -0.5f, 0.5f, 1.5f, 2.5f, -1.7f, 1.2f}, {8});
  show("floor", halves.floor());
  show("ceil", halves.ceil());
  show("round", halves.round());
  show("trunc", halves.trunc());
  const Tensor ia64 = from_vector(std::vector<int64_t>{7, -7, 9, -9, 0}, {5}), ib64 = from_vector(std::vector<int64_t>{2, 2, -4, -4, 3}, {5});
  show("int_add", ia64 + ib64);
  show("int_mul_scalar", ia64 * 3);
  show("int_true_div", ia64 / ib64);
  show("int_floor_divide", ia64.floor_divide(ib64));
  show("int_remainder", ia64.remainder(ib64));
  show("float_remainder", halves.remainder(0.75));
  show("int_neg_abs", ia64.neg().abs().sub(1));
  auto [tv, ti] = x.topk(2);
  show("topk_values", tv);
  show("topk_indices", ti);
  show("cumsum", x.cumsum(1));
  show("cumprod", x.add(1).div(4).cumprod(1));
  show("gt_is_bool", (x > 5.0).dtype() == DType::Bool ? 1.0 : 0.0);
  show("mask_sum", (x > 5.0).sum());
  show("mask_and", (x > 2.0) & (x < 9.0));
  show("mask_any", (x > 10.0).any());
  show("mask_mul", (x > 5.0) * x);
  show("one_hot", one_hot(from_vector(std::vector<int64_t>{0, 2, 1}, {3}), 3));
  show("expand", y.expand({3, 4}));
  show("index_slice", x.index({Slice(), Slice(2, 5)}));
  show("index_two_tensors", x.index({from_vector(std::vector<int64_t>{2, 0}, {2}), from_vector(std::vector<int64_t>{1, 3}, {2})}));
  show("std", x.std());
  show("norm", x.norm());
  show("clamp", x.clamp(2, 7));
  show("is_cuda", x.is_cuda() ? 1.0 : 0.0);
  if (cuda::is_available()) show("to_cuda", x.to("cuda").is_cuda() ? 1.0 : 0.0);
  else show("to_cuda", 1.0);  // compiled; no GPU to run it on (torch's value on a GPU: true)
  show("F_relu", F::relu(x.sub(5)));
  show("F_softmax", F::softmax(x.div(4), 1));
  show("F_mse_loss", F::mse_loss(x, x.mul(0.5)));
  show("cross_entropy_probs", F::cross_entropy(x.div(5), F::softmax(x.div(-3), 1)));
  show("cross_entropy_smoothing", F::cross_entropy(x.div(5), F::softmax(x.div(-3), 1), {.label_smoothing = 0.2}));
  // one step of an optimizer made with (params, lr) on a Linear with set weights
  const auto one_step = [&](auto make_optimizer) {
    nn::Linear lin(4, 2);
    {
      NoGradGuard ng;
      lin.weight.copy_(arange_f(8, {2, 4}).div(10));
      lin.bias.fill_(0.5);
    }
    auto opt = make_optimizer(lin.parameters());
    lin(x).pow(2).sum().backward();
    opt.step();
    return lin.weight;
  };
  show("AdamW", one_step([](const std::vector<Tensor>& p) { return optim::AdamW(p, 0.01); }));
  show("SGD", one_step([](const std::vector<Tensor>& p) { return optim::SGD(p, 0.01); }));
  {
    nn::Linear lin(8, 2, false);
    show("Linear_no_bias", lin.bias.defined() ? 1.0 : 0.0);
  }
  show("MaxPool2d", nn::MaxPool2d(2)(arange_f(16, {1, 1, 4, 4})));
  show("x0", x[0]);
  Tensor r = x.sub(5);
  relu_(r);
  show("relu_", r);
  {
    nn::Conv2d conv(nn::Conv2dOptions(1, 2, 3).padding(1));
    {
      NoGradGuard ng;
      conv.weight.fill_(1);
      conv.bias.zero_();
    }
    show("Conv2dOptions", conv(arange_f(16, {1, 1, 4, 4})));
  }
  show("MaxPool2dOptions", nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2).padding(1))(arange_f(16, {1, 1, 4, 4})));
  {
    nn::BatchNorm2d bn(nn::BatchNorm2dOptions(1).eps(0.5).affine(false));
    show("BatchNorm2dOptions", bn(arange_f(16, {1, 1, 4, 4})));
  }
  // type promotion with 0-d tensors (torch.result_type): the 0-d operand does not widen a tensor with dims
  const Tensor h = x.div(7).half(), tenth = full({}, 0.1);
  show("half_times_0d_float", h * tenth);
  show("half_times_0d_float_is_half", (h * tenth).dtype() == DType::F16 ? 1.0 : 0.0);
  show("half_lt_0d_float", (x.div(70).half() < tenth).to(DType::F32));
  show("long_times_0d_half", arange(int64_t{4}).to(DType::I64) * full({}, 0.3, {.dtype = DType::F16}));
  show("long_times_0d_half_is_half",
       (arange(int64_t{4}).to(DType::I64) * full({}, 0.3, {.dtype = DType::F16})).dtype() == DType::F16 ? 1.0 : 0.0);
  show("half_times_1d_float_is_float", (h * full({1}, 0.1)).dtype() == DType::F32 ? 1.0 : 0.0);
  show("0d_half_plus_0d_float_is_float",
       (full({}, 1.0, {.dtype = DType::F16}) + full({}, 0.1)).dtype() == DType::F32 ? 1.0 : 0.0);
  show("bool_times_0d_half_is_half",
       ((x > 5.0) * full({}, 2.0, {.dtype = DType::F16})).dtype() == DType::F16 ? 1.0 : 0.0);
  show("where_0d_float", where(x > 5.0, h, tenth));
  // an integer tensor clamped to fractional bounds is a float one; log_softmax keeps its bits under a large max
  const Tensor ints = from_vector(std::vector<int64_t>{-7, -3, 3, 7}, {4});
  show("long_clamp_fraction", ints.clamp(-2.5, 2.5));
  show("long_clamp_fraction_is_float", ints.clamp(-2.5, 2.5).dtype() == DType::F32 ? 1.0 : 0.0);
  show("long_clamp_min_fraction", ints.clamp_min(2.5));
  show("long_clamp_integral_is_long", ints.clamp(-2, 2).dtype() == DType::I64 ? 1.0 : 0.0);
  // integer and boolean tensors reduce to their own dtype; a mask with a scalar counts as 0/1 integers
  show("long_max", ints.max());
  show("long_max_is_long", ints.max().dtype() == DType::I64 ? 1.0 : 0.0);
  show("long_argmax_dim", from_vector(std::vector<int64_t>{3, 9, 9, 1, 7, 2}, {2, 3}).argmax(1));
  show("long_min_dim_values", std::get<0>(from_vector(std::vector<int64_t>{3, 9, 9, 1, 7, 2}, {2, 3}).min(1)));
  show("bool_plus_one", (x > 5.0) + 1);
  show("bool_plus_one_is_long", ((x > 5.0) + 1).dtype() == DType::I64 ? 1.0 : 0.0);
  show("bool_times_fraction", (x > 5.0) * 2.5);
  show("bool_max_is_bool", (x > 5.0).max().dtype() == DType::Bool ? 1.0 : 0.0);
  show("log_softmax_large", log_softmax(from_vector(std::vector<float>{60000, 60000, 1, 0, 1e6, 1e6, 0, 0}, {2, 4}), -1));
  // exp/log/sqrt/sigmoid/tanh of integers and Bools compute in F32; pow by an integer, relu and where keep integers
  show("long_exp", ints.exp());
  show("long_exp_is_float", ints.exp().dtype() == DType::F32 ? 1.0 : 0.0);
  show("bool_sqrt", (x > 5.0).sqrt());
  show("long_sigmoid", sigmoid(ints));
  show("long_tanh", tanh(ints));
  show("long_log_abs", log(abs(ints)));
  show("long_pow_2", pow(ints, 2));
  show("long_pow_2_is_long", pow(ints, 2).dtype() == DType::I64 ? 1.0 : 0.0);
  show("long_pow_half", pow(abs(ints), 0.5));
  show("bool_pow_3_is_long", pow(x > 5.0, 3).dtype() == DType::I64 ? 1.0 : 0.0);
  show("long_relu", relu(ints));
  show("long_relu_is_long", relu(ints).dtype() == DType::I64 ? 1.0 : 0.0);
  show("long_where", where(ints > 0.0, ints, -ints * 10));
  show("long_where_is_long", where(ints > 0.0, ints, ints).dtype() == DType::I64 ? 1.0 : 0.0);
  show("bool_where_is_bool", where(x > 5.0, x > 2.0, x > 9.0).dtype() == DType::Bool ? 1.0 : 0.0);
  show("bool_clamp_is_long", (x > 5.0).clamp(0, 1).dtype() == DType::I64 ? 1.0 : 0.0);
  return 0;
}
