// libtorch's spellings of what halfgrad has: each habit of a PyTorch user compiles
// and gives torch's result; the expected values are torch's semantics written out (shapes, first-occurrence
// indices, chunk sizes, the unbiased std, the norm's zero subgradient).
#include <catch2/catch.hpp>

#include <cmath>
#include <tuple>
#include <vector>

#include "autograd/gradcheck.h"
#include "halfgrad.h"
#include "nn/nn.h"
#include "optim/adam.h"
#include "optim/sgd.h"
#include "test_util.h"

using namespace hg;
using Catch::Contains;

using test::iota;
using test::vals;

TEST_CASE("torch spellings: dim, sizes, is_cuda, contiguous, device strings", "[ops][spellings]") {
  const Tensor x = iota({2, 3, 4});
  CHECK(x.dim() == 3);
  CHECK(x.sizes()[1] == 3);
  CHECK(x.sizes() == Shape{2, 3, 4});
  CHECK(x.sizes().dims() == std::vector<int64_t>{2, 3, 4});
  CHECK_FALSE(x.is_cuda());
  CHECK(x.is_cpu());
  CHECK(x.is_contiguous());
  CHECK(x.contiguous().same(x));
  CHECK(x.to("cpu").same(x));
  CHECK(Device::parse("cuda:1") == Device::cuda(1));
  CHECK(Device::parse("cuda") == Device::cuda(0));
  CHECK_THROWS_WITH(Device::parse("gpu"), Contains("\"cpu\", \"cuda\" or \"cuda:N\""));
  CHECK_THROWS_WITH(Device::parse("cuda:x"), Contains("is not a device"));
  CHECK(x.half().dtype() == DType::F16);
  CHECK(x.bfloat16().dtype() == DType::BF16);
}

TEST_CASE("torch spellings: unsqueeze, squeeze, select, operator[], narrow share or copy as torch's values", "[ops][spellings]") {
  const Tensor x = iota({2, 1, 3});
  CHECK(x.unsqueeze(0).sizes() == Shape{1, 2, 1, 3});
  CHECK(x.unsqueeze(-1).sizes() == Shape{2, 1, 3, 1});
  CHECK(x.unsqueeze(3).sizes() == Shape{2, 1, 3, 1});
  CHECK_THROWS_WITH(x.unsqueeze(4), Contains("unsqueeze: dim 4 is out of range"));
  CHECK(x.squeeze().sizes() == Shape{2, 3});
  CHECK(x.squeeze(1).sizes() == Shape{2, 3});
  CHECK(x.squeeze(0).sizes() == Shape{2, 1, 3});  // not of size 1: unchanged
  CHECK(x.unsqueeze(0).data_ptr() == x.data_ptr());  // a view today too
  CHECK(vals(x[1]) == std::vector<double>{3, 4, 5});
  CHECK(x[1].sizes() == Shape{1, 3});
  CHECK(vals(x.select(2, -1)) == std::vector<double>{2, 5});
  CHECK_THROWS_WITH(x.select(0, 2), Contains("select: index 2 is out of range for dim 0 of size 2"));
  CHECK(vals(iota({5}).narrow(0, 1, 3)) == std::vector<double>{1, 2, 3});
  CHECK_THROWS_WITH(iota({5}).narrow(0, 3, 3), Contains("narrow: start 3 and length 3 do not fit"));
  // gradients flow back through them
  const Tensor g = iota({2, 3}, DType::F64).requires_grad_(true);
  (sum(mul(g[1], 2.0)) + sum(g.unsqueeze(0).squeeze().select(1, 0))).backward();
  CHECK(vals(g.grad()) == std::vector<double>{1, 0, 0, 3, 2, 2});
}

TEST_CASE("torch spellings: chunk, split, stack and expand", "[ops][spellings]") {
  const Tensor x = iota({7, 2});
  const std::vector<Tensor> c = x.chunk(3);  // torch: sizes 3, 3, 1
  REQUIRE(c.size() == 3);
  CHECK(c[0].sizes() == Shape{3, 2});
  CHECK(c[2].sizes() == Shape{1, 2});
  CHECK(vals(c[2]) == std::vector<double>{12, 13});
  CHECK(iota({2, 2}).chunk(5).size() == 2);  // torch gives fewer chunks when the dim is short
  const std::vector<Tensor> s = x.split(2);  // 2, 2, 2, 1
  REQUIRE(s.size() == 4);
  CHECK(s[3].sizes() == Shape{1, 2});
  const std::vector<Tensor> sw = x.split(std::vector<int64_t>{5, 2});
  REQUIRE(sw.size() == 2);
  CHECK(sw[1].sizes() == Shape{2, 2});
  CHECK_THROWS_WITH(x.split(std::vector<int64_t>{5, 1}), Contains("split: the sizes sum to 6 but dim 0 has size 7"));
  CHECK(x.split(1, 1).size() == 2);
  const Tensor st = stack({iota({2}), add(iota({2}), 10.0)}, 1);
  CHECK(st.sizes() == Shape{2, 2});
  CHECK(vals(st) == std::vector<double>{0, 10, 1, 11});
  CHECK(stack({iota({2}), iota({2})}).sizes() == Shape{2, 2});
  CHECK_THROWS_WITH(stack({iota({2}), iota({3})}), Contains("stack: tensor 1 has shape [3]"));
  const Tensor e = iota({3, 1}).expand({2, 3, -1 + 5});
  CHECK(e.sizes() == Shape{2, 3, 4});
  CHECK(vals(e.select(0, 1).select(0, 2)) == std::vector<double>{2, 2, 2, 2});
  CHECK_THROWS_WITH(iota({3}).expand({4}), Contains("expand: dim 0 of size 3 cannot become 4"));
  // expand's backward sums back; chunk/split's backward places each piece
  const Tensor g = iota({3, 1}, DType::F64).requires_grad_(true);
  sum(g.expand({2, 3, 4})).backward();
  CHECK(vals(g.grad()) == std::vector<double>{8, 8, 8});
  const Tensor h = iota({5}, DType::F64).requires_grad_(true);
  const std::vector<Tensor> parts = h.split(2);
  sum(mul(parts[0], 1.0) + 0.0).backward();
  sum(mul(parts[2], 3.0)).backward();
  CHECK(vals(h.grad()) == std::vector<double>{1, 1, 0, 0, 3});
}

TEST_CASE("torch spellings: arithmetic and matmul members, mm and bmm", "[ops][spellings]") {
  const Tensor a = iota({2, 3}), b = add(iota({2, 3}), 1.0);
  CHECK(vals(a.mul(b)) == vals(a * b));
  CHECK(vals(a.add(b)) == vals(a + b));
  CHECK(vals(a.sub(2.0)) == vals(sub(a, 2.0)));
  CHECK(vals(a.div(b)) == vals(a / b));
  CHECK(vals(a.neg()) == vals(-a));
  const Tensor w = iota({3, 4});
  CHECK(vals(a.matmul(w)) == vals(matmul(a, w)));
  CHECK(vals(a.mm(w)) == vals(matmul(a, w)));
  CHECK(iota({5, 2, 3}).bmm(iota({5, 3, 4})).sizes() == Shape{5, 2, 4});
  CHECK_THROWS_WITH(iota({2, 2, 3}).mm(w), Contains("mm: takes two 2-D tensors"));
  CHECK_THROWS_WITH(iota({2, 2, 3}).bmm(iota({3, 3, 4})), Contains("bmm: takes two 3-D tensors with one batch size"));
}

TEST_CASE("torch spellings: sum/mean with an integer dim, max/min with indices, argmin, std, var, norm, clamp", "[ops][spellings]") {
  const Tensor x = from_vector(std::vector<double>{3, 1, 4, 1, 5, 9}, {2, 3});
  CHECK(vals(x.sum(1)) == std::vector<double>{8, 15});
  CHECK(x.sum(1, true).sizes() == Shape{2, 1});
  CHECK(vals(x.mean(0)) == std::vector<double>{2, 3, 6.5});
  CHECK(x.mean(-1, true).sizes() == Shape{2, 1});
  CHECK(vals(x.sum({0, 1})) == std::vector<double>{23});  // a braced list is still the dims
  CHECK(vals(x.sum({1})) == std::vector<double>{8, 15});
  auto [v, i] = x.max(1);
  CHECK(vals(v) == std::vector<double>{4, 9});
  CHECK(vals(i) == std::vector<double>{2, 2});
  auto [mv, mi] = x.min(0, true);
  CHECK(mv.sizes() == Shape{1, 3});
  CHECK(vals(mi) == std::vector<double>{1, 0, 0});
  CHECK(x.argmin().item<int64_t>() == 1);  // the first of the two 1s
  CHECK(vals(x.argmin(1)) == std::vector<double>{1, 0});
  // squared deviations from the mean 23/6 sum to 133 - 529/6 = 269/6; unbiased divides by 5, else by 6
  CHECK(x.var().item() == Approx(269.0 / 30));
  CHECK(x.std().item() == Approx(std::sqrt(269.0 / 30)));
  CHECK(x.std(false).item() == Approx(std::sqrt(269.0 / 36)));
  CHECK(x.norm().item() == Approx(std::sqrt(133.0)));
  CHECK(vals(x.clamp(2, 4)) == std::vector<double>{3, 2, 4, 2, 4, 4});
  CHECK(vals(x.clamp_min(4)) == std::vector<double>{4, 4, 4, 4, 5, 9});
  CHECK(vals(x.clamp_max(1)) == std::vector<double>{1, 1, 1, 1, 1, 1});
  // norm: F16 sums in F32 (256 values of 300: 300^2*256 overflows F16), gradient x/norm and 0 at 0
  CHECK(full({256}, 300.0, {.dtype = DType::F16}).norm().item() == Approx(4800.0));
  const Tensor z = zeros({3}, {.dtype = DType::F64}).requires_grad_(true);
  z.norm().backward();
  CHECK(vals(z.grad()) == std::vector<double>{0, 0, 0});
  const Tensor p = from_vector(std::vector<double>{3, -4}, {2}, {.dtype = DType::F64}).requires_grad_(true);
  p.norm().backward();
  CHECK(p.grad().to_vector<double>()[0] == Approx(0.6));
  CHECK(p.grad().to_vector<double>()[1] == Approx(-0.8));
  const auto r = gradcheck([](const std::vector<Tensor>& in) { return in[0].norm(); },
                           {from_vector(std::vector<double>{0.3, -1.2, 2.0}, {3}, {.dtype = DType::F64}).requires_grad_(true)});
  INFO(r.message);
  CHECK(r.ok);
}

TEST_CASE("torch spellings: nn::functional, positional module and optimizer constructors", "[nn][spellings]") {
  namespace F = hg::nn::functional;
  const Tensor x = from_vector(std::vector<double>{-1, 2}, {1, 2});
  CHECK(vals(F::relu(x)) == std::vector<double>{0, 2});
  CHECK(vals(F::softmax(x, 1)) == vals(softmax(x, 1)));
  nn::Linear no_bias(8, 2, false);
  CHECK_FALSE(no_bias.bias.defined());
  CHECK(no_bias.named_parameters().size() == 1);
  nn::Linear with_bias(8, 2, true);
  CHECK(with_bias.bias.defined());
  nn::Linear by_options(8, 2, {.bias = false});
  CHECK_FALSE(by_options.bias.defined());
  nn::MaxPool2d pool(2);
  CHECK(pool.options.kernel_size == Size2(2));
  CHECK(pool(iota({1, 1, 4, 4})).sizes() == Shape{1, 1, 2, 2});
  nn::AvgPool2d avg(2);
  CHECK(vals(avg(iota({1, 1, 2, 2}))) == std::vector<double>{1.5});
  optim::SGD sgd(with_bias.parameters(), 0.01);
  CHECK(sgd.param_groups()[0].options.lr == 0.01);
  CHECK(sgd.param_groups()[0].options.momentum == 0.0);
  optim::AdamW adamw(with_bias.parameters(), 1e-3);
  CHECK(adamw.param_groups()[0].options.lr == 1e-3);
  CHECK(adamw.param_groups()[0].options.weight_decay == 1e-2);  // AdamW's default, kept
  optim::Adam by_opts(no_bias.parameters(), {.lr = 0.5});
  CHECK(by_opts.param_groups()[0].options.lr == 0.5);
  optim::Adam by_default(no_bias.parameters(), {});
  CHECK(by_default.param_groups()[0].options.lr == 1e-3);
}

// libtorch's chained optimizer options set the same fields as the designated initializers, keep every other
// field at its default, and the two optimizers then step to the same bits.
TEST_CASE("torch spellings: chained optimizer options, as libtorch's", "[optim][spellings]") {
  const auto fields = [](const auto& opt) {
    std::vector<std::pair<std::string, double>> f;
    visit_options(opt.param_groups()[0].options, [&](const char* n, const auto& v) { f.emplace_back(n, double(v)); });
    return f;
  };
  const auto param = [] { return from_vector(std::vector<float>{0.5f, -1.f, 2.f}, {3}).requires_grad_(); };
  // the same steps on a chained and a designated optimizer: same options, same parameter bits
  const auto same = [&](auto make_chained, auto make_designated) {
    Tensor a = param(), b = param();
    auto oa = make_chained(a);
    auto ob = make_designated(b);
    CHECK(fields(oa) == fields(ob));
    for (int s = 0; s < 3; ++s) {
      for (Tensor* p : {&a, &b}) {
        p->zero_grad();
        (*p * *p * 0.5 + *p).sum().backward();
      }
      oa.step();
      ob.step();
    }
    CHECK(vals(a) == vals(b));
  };
  same([](Tensor p) { return optim::Adam({p}, optim::AdamOptions(0.1).betas({0.8, 0.9}).weight_decay(1e-2).amsgrad(true)); },
       [](Tensor p) { return optim::Adam({p}, {.lr = 0.1, .betas = {0.8, 0.9}, .weight_decay = 1e-2, .amsgrad = true}); });
  same([](Tensor p) { return optim::AdamW({p}, optim::AdamWOptions(0.05).betas(std::make_tuple(0.5, 0.99)).eps(1e-6)); },
       [](Tensor p) { return optim::AdamW({p}, {.lr = 0.05, .betas = {0.5, 0.99}, .eps = 1e-6}); });
  same([](Tensor p) { return optim::SGD({p}, optim::SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(1e-3)); },
       [](Tensor p) { return optim::SGD({p}, {.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true}); });
  same([](Tensor p) { return optim::RMSprop({p}, optim::RMSpropOptions(0.01).alpha(0.9).momentum(0.5).centered(true)); },
       [](Tensor p) { return optim::RMSprop({p}, {.lr = 0.01, .alpha = 0.9, .momentum = 0.5, .centered = true}); });
  // the getters read what the setters wrote, and the defaults are torch's
  const optim::AdamWOptions w(3e-4);
  CHECK(w.lr() == 3e-4);
  CHECK(w.weight_decay() == 1e-2);
  CHECK(w.betas() == std::make_tuple(0.9, 0.999));
  CHECK(optim::AdamOptions().lr() == 1e-3);
  CHECK(optim::RMSpropOptions().alpha() == 0.99);
  // a bad value is refused by the optimizer as from the designated struct
  CHECK_THROWS_WITH(optim::Adam({param()}, optim::AdamOptions(0.1).betas({1.5, 0.9})), Catch::Contains("betas"));
}

TEST_CASE("torch spellings: flip, roll, repeat, tril, triu, one_hot, arange, linspace", "[ops][spellings]") {
  const Tensor x = iota({2, 3});
  CHECK(vals(flip(x, {1})) == std::vector<double>{2, 1, 0, 5, 4, 3});
  CHECK(vals(flip(x, {0, 1})) == std::vector<double>{5, 4, 3, 2, 1, 0});
  CHECK(vals(flip(x, {})) == vals(x));
  CHECK_THROWS_WITH(flip(x, {1, -1}), Contains("flip: dim -1 appears twice"));
  CHECK(vals(roll(iota({5}), 2, 0)) == std::vector<double>{3, 4, 0, 1, 2});
  CHECK(vals(roll(iota({5}), -1, 0)) == std::vector<double>{1, 2, 3, 4, 0});
  CHECK(vals(roll(x, 4, 1)) == std::vector<double>{2, 0, 1, 5, 3, 4});
  const Tensor r = repeat(from_vector(std::vector<double>{1, 2}, {2}), {2, 2});
  CHECK(r.sizes() == Shape{2, 4});
  CHECK(vals(r) == std::vector<double>{1, 2, 1, 2, 1, 2, 1, 2});
  CHECK(vals(repeat(x, {1, 2})) == std::vector<double>{0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5});
  CHECK_THROWS_WITH(repeat(x, {2}), Contains("repeat: 1 repeats are fewer than the tensor's 2 dims"));
  const Tensor m = iota({3, 3});
  CHECK(vals(tril(m)) == std::vector<double>{0, 0, 0, 3, 4, 0, 6, 7, 8});
  CHECK(vals(triu(m, 1)) == std::vector<double>{0, 1, 2, 0, 0, 5, 0, 0, 0});
  CHECK(vals(tril(m, -1)) == std::vector<double>{0, 0, 0, 3, 0, 0, 6, 7, 0});
  const Tensor inf_m = full({2, 2}, INFINITY);
  CHECK(vals(triu(inf_m))[2] == 0.0);  // exact zeros, not inf * 0
  CHECK(tril(iota({2, 2}, DType::I64)).dtype() == DType::I64);
  CHECK_THROWS_WITH(tril(iota({3})), Contains("tril: needs at least 2 dims"));
  const Tensor oh = one_hot(from_vector(std::vector<int64_t>{2, 0, 1}, {3}), 4);
  CHECK(oh.dtype() == DType::I64);
  CHECK(oh.sizes() == Shape{3, 4});
  CHECK(vals(oh) == std::vector<double>{0, 0, 1, 0, 1, 0, 0, 0, 0, 1, 0, 0});
  CHECK(one_hot(from_vector(std::vector<int64_t>{2, 0}, {2})).sizes() == Shape{2, 3});  // inferred: max + 1
  CHECK_THROWS_WITH(one_hot(from_vector(std::vector<int64_t>{4}, {1}), 4), Contains("index 4 is not smaller than num_classes=4"));
  CHECK_THROWS_WITH(one_hot(from_vector(std::vector<int64_t>{-1}, {1}), 4), Contains("index -1 is negative"));
  CHECK(vals(linspace(0, 1, 5)) == std::vector<double>{0, 0.25, 0.5, 0.75, 1});
  CHECK(vals(linspace(-1, 1, 1)) == std::vector<double>{-1});
  CHECK(linspace(0, 1, 0).numel() == 0);
  const Tensor ls = linspace(0, 1, 7, {.dtype = DType::F64});
  CHECK(vals(ls).back() == 1.0);  // the end is exact (torch computes the upper half from it)
  // gradients: flip and roll put each gradient back where its value came from; repeat sums the copies
  const Tensor g = iota({4}, DType::F64).requires_grad_(true);
  sum(mul(flip(g, {0}), iota({4}, DType::F64))).backward();
  CHECK(vals(g.grad()) == std::vector<double>{3, 2, 1, 0});
  const Tensor h = iota({3}, DType::F64).requires_grad_(true);
  sum(mul(roll(h, 1, 0), iota({3}, DType::F64))).backward();
  CHECK(vals(h.grad()) == std::vector<double>{1, 2, 0});
  const Tensor q = iota({2}, DType::F64).requires_grad_(true);
  sum(repeat(q, {3, 2})).backward();
  CHECK(vals(q.grad()) == std::vector<double>{6, 6});
}

TEST_CASE("torch spellings: index_select, gather and masked_fill, with their gradients", "[ops][spellings]") {
  const Tensor x = iota({3, 4});
  const Tensor rows = from_vector(std::vector<int64_t>{2, 0, 2}, {3});
  CHECK(vals(index_select(x, 0, rows)) == std::vector<double>{8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11});
  const Tensor cols = from_vector(std::vector<int64_t>{3, 1}, {2});
  const Tensor sc = index_select(x, 1, cols);
  CHECK(sc.sizes() == Shape{3, 2});
  CHECK(vals(sc) == std::vector<double>{3, 1, 7, 5, 11, 9});
  CHECK(index_select(x, -1, from_vector(std::vector<int64_t>{1}, {1})).sizes() == Shape{3, 1});
  CHECK_THROWS_WITH(index_select(x, 1, from_vector(std::vector<int64_t>{4}, {1})),
                    Contains("index_select: index 4 is out of range for dim 1 of size 4"));
  // torch.gather(x, 1, [[0, 0], [1, 0], [3, 3]]) and along dim 0 with a smaller index
  const Tensor gi = from_vector(std::vector<int64_t>{0, 0, 1, 0, 3, 3}, {3, 2});
  CHECK(vals(gather(x, 1, gi)) == std::vector<double>{0, 0, 5, 4, 11, 11});
  const Tensor g0 = from_vector(std::vector<int64_t>{2, 1, 0}, {1, 3});
  CHECK(vals(gather(x, 0, g0)) == std::vector<double>{8, 5, 2});
  CHECK_THROWS_WITH(gather(x, 1, from_vector(std::vector<int64_t>{0, 1}, {2})), Contains("same number of dims"));
  CHECK_THROWS_WITH(gather(x, 1, from_vector(std::vector<int64_t>{-1, 0, 0, 0, 0, 0}, {3, 2})),
                    Contains("gather: index -1 is out of range for dim 1 of size 4"));
  const Tensor mask = from_vector(std::vector<double>{1, 0, 0, 1}, {4});
  CHECK(vals(masked_fill(iota({2, 4}), mask, -5)) == std::vector<double>{-5, 1, 2, -5, -5, 5, 6, -5});
  // gradients: repeated picks add up; filled places get none
  const Tensor w = iota({3, 4}, DType::F64).requires_grad_(true);
  sum(index_select(w, 0, rows)).backward();
  CHECK(vals(w.grad()) == std::vector<double>{1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 2, 2});
  const Tensor v = iota({3, 4}, DType::F64).requires_grad_(true);
  sum(gather(v, 1, gi)).backward();
  CHECK(vals(v.grad()) == std::vector<double>{2, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 2});
  const Tensor u = iota({4}, DType::F64).requires_grad_(true);
  sum(masked_fill(u, mask, 7)).backward();
  CHECK(vals(u.grad()) == std::vector<double>{0, 1, 1, 0});
}

TEST_CASE("torch spellings: matmul of vectors and of many batch dims, cross_entropy with probabilities", "[ops][spellings]") {
  const auto in = [](Shape s, uint64_t seed) {
    Generator g(seed);
    return randn(std::move(s), {.dtype = DType::F64}, &g).requires_grad_();
  };
  CHECK(matmul(iota({3, 4}), iota({4})).shape() == Shape{3});
  CHECK(matmul(iota({4}), iota({4, 2})).shape() == Shape{2});
  CHECK(matmul(iota({4}), iota({4})).ndim() == 0);
  CHECK(matmul(iota({2, 1, 3, 4}), iota({5, 4, 2})).shape() == Shape{2, 5, 3, 2});
  CHECK_THROWS_WITH(matmul(iota({2, 3, 4}), iota({2, 5, 4, 2})), Contains("cannot be broadcast"));
  CHECK_THROWS_WITH(matmul(iota({4}), iota({3})), Contains("contracted"));
  using Ts = std::vector<Tensor>;
  CHECK(gradcheck([](const Ts& v) { return matmul(v[0], v[1]); }, {in({2, 1, 3, 4}, 1), in({3, 4, 2}, 2)}).ok);
  CHECK(gradcheck([](const Ts& v) { return matmul(v[0], v[1]); }, {in({4}, 3), in({2, 4, 3}, 4)}).ok);
  CHECK(gradcheck([](const Ts& v) { return cross_entropy(v[0], softmax(v[1], 1), {.label_smoothing = 0.1}); },
                  {in({3, 5}, 5), in({3, 5}, 6)}).ok);
  // probabilities that are one-hot give the class-index loss
  const Tensor logits = in({4, 3}, 7).detach();
  const Tensor labels = from_vector(std::vector<int64_t>{2, 0, 1, 1}, {4});
  CHECK(std::fabs(cross_entropy(logits, one_hot(labels, 3).to(DType::F64)).item() - cross_entropy(logits, labels).item()) < 1e-12);
  CHECK_THROWS_WITH(cross_entropy(logits, zeros({4, 2}, {.dtype = DType::F64})), Contains("input's shape"));
}
