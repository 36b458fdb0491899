// Strided tensors: the view ops share storage with torch's sizes, strides and offsets; every op gives on a view
// what it gives on the view's contiguous copy; gradients flow through views to their base; in-place ops write
// through views, bump versions, and a backward that would read a changed value raises torch's error.
#include <catch2/catch.hpp>

#include <functional>
#include <string>
#include <vector>

#include "autograd/gradcheck.h"
#include "halfgrad.h"
#include "test_util.h"

using namespace hg;
using Catch::Contains;

using test::iota;
using test::vals;
namespace {
using Strides = std::vector<int64_t>;
}  // namespace

TEST_CASE("views: torch's sizes, strides and offsets, sharing storage", "[ops][views]") {
  const Tensor x = iota({2, 3, 4});
  CHECK(x.strides() == Strides{12, 4, 1});
  CHECK(x.transpose(0, 2).strides() == Strides{1, 4, 12});
  CHECK(x.permute({1, 2, 0}).strides() == Strides{4, 1, 12});
  const Tensor s = x.select(1, 1);
  CHECK(s.shape() == Shape{2, 4});
  CHECK(s.strides() == Strides{12, 1});
  CHECK(s.storage_offset() == 4);
  CHECK(x.slice(2, 1, 4, 2).strides() == Strides{12, 4, 2});
  CHECK(x.slice(2, 1, 4, 2).storage_offset() == 1);
  CHECK(x.narrow(0, 1, 1).storage_offset() == 12);
  CHECK(x.unsqueeze(1).strides() == Strides{12, 12, 4, 1});
  CHECK(x.unsqueeze(3).strides() == Strides{12, 4, 1, 1});
  CHECK(x[1][2].storage_offset() == 20);
  const Tensor e = iota({3, 1}).expand({2, 3, 4});
  CHECK(e.strides() == Strides{0, 1, 0});
  CHECK(vals(e)[5] == 1);  // e[0][1][1] = x[1][0]
  // views are contiguous when their strides say so, whatever made them
  CHECK(x.narrow(0, 1, 1).is_contiguous());
  CHECK(x.transpose(0, 2).transpose(0, 2).is_contiguous());
  CHECK_FALSE(x.select(2, 0).is_contiguous());
  // one storage: a write through a view shows in the base
  Tensor base = zeros({3, 4});
  Tensor row = base.select(0, 2);
  row.data<float>()[3] = 7;
  CHECK(vals(base)[11] == 7);
  CHECK(base.t().strided_data_ptr() == base.data_ptr());
  CHECK(x.transpose(0, 1).is_view());
  CHECK_FALSE(x.is_view());
}

TEST_CASE("reshape is a view when the strides allow it, and view refuses otherwise", "[ops][views]") {
  const Tensor x = iota({2, 3, 4});
  const Tensor t = x.transpose(0, 1);  // (3, 2, 4), strides (4, 12, 1)
  const Tensor split = t.view({3, 2, 2, 2});
  CHECK(split.strides() == Strides{4, 12, 2, 1});
  CHECK(split.strided_data_ptr() == x.data_ptr());
  CHECK(vals(split) == vals(t.contiguous()));
  CHECK_THROWS_WITH(t.view({3, 8}), Contains("reshape"));
  const Tensor r = t.reshape({3, 8});  // a copy, with the right values
  CHECK(r.is_contiguous());
  CHECK(vals(r) == vals(t.contiguous()));
  CHECK(x.t().t().view({24}).strided_data_ptr() == x.data_ptr());  // contiguous again: a view
  CHECK(iota({4, 6}).slice(1, 0, 3).view({2, 2, 3}).strides() == Strides{12, 6, 1});
  CHECK(vals(iota({4, 1}).expand({4, 3}).reshape({12})) == std::vector<double>{0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3});
}

TEST_CASE("every op gives on a view what it gives on the view's contiguous copy", "[ops][views]") {
  Generator g(11);
  const Tensor big = randn({6, 8, 10}, {}, &g);
  // a non-contiguous (4, 5, 6) view of it: a transpose of a stepped slice
  const Tensor v = big.slice(0, 1, 6).slice(1, 0, 8, 2).slice(2, 2, 8).transpose(0, 2).transpose(1, 2);
  REQUIRE(v.shape() == Shape{6, 5, 4});
  REQUIRE_FALSE(v.is_contiguous());
  const Tensor c = v.contiguous();
  const Tensor w = randn({3, 4}, {}, &g);
  const Tensor ids = from_vector(std::vector<int64_t>{2, 0, 1, 2, 3}, {5});
  std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>> ops = {
      {"exp", [](const Tensor& t) { return exp(t); }},
      {"add broadcast", [](const Tensor& t) { return t + t.select(0, 1); }},
      {"mul view by view", [](const Tensor& t) { return t * t.transpose(1, 2).transpose(1, 2); }},
      {"sum(dim)", [](const Tensor& t) { return t.sum(1); }},
      {"sum over two dims", [](const Tensor& t) { return t.sum({0, 2}); }},
      {"mean", [](const Tensor& t) { return t.mean(); }},
      {"max(dim)", [](const Tensor& t) { return std::get<0>(t.max(2)); }},
      {"argmax", [](const Tensor& t) { return t.argmax(1).to(DType::F32); }},
      {"softmax", [](const Tensor& t) { return softmax(t, 1); }},
      {"log_softmax", [](const Tensor& t) { return log_softmax(t, -1); }},
      {"matmul", [](const Tensor& t) { return matmul(t, t.transpose(1, 2)); }},
      {"linear", [&](const Tensor& t) { return linear(t, w); }},
      {"to(F16)", [](const Tensor& t) { return t.to(DType::F16).to(DType::F32); }},
      {"cat", [](const Tensor& t) { return cat({t, t}, 1); }},
      {"clone", [](const Tensor& t) { return t.clone(); }},
      {"layer_norm", [](const Tensor& t) { return layer_norm(t, {4}); }},
      {"max_pool2d", [](const Tensor& t) { return max_pool2d(t.unsqueeze(0), {.kernel_size = 2}); }},
      {"conv2d", [&](const Tensor& t) { return conv2d(t.unsqueeze(0), ones({2, 6, 2, 2})); }},
      {"cross_entropy", [](const Tensor& t) {
         return cross_entropy(t.select(2, 0), from_vector(std::vector<int64_t>{0, 1, 2, 3, 4, 0}, {6}));
       }},
      {"embedding", [&](const Tensor& t) { return embedding(ids, t.select(0, 0)); }},
      {"mse_loss", [](const Tensor& t) { return mse_loss(t, zeros_like(t)); }},
      {"flip", [](const Tensor& t) { return flip(t, {0, 2}); }},
      {"where", [](const Tensor& t) { return where(gt(t, zeros({})), t, -t); }},
  };
  for (const auto& [name, f] : ops) {
    INFO(name);
    const Tensor on_view = f(v), on_copy = f(c);
    CHECK(on_view.shape() == on_copy.shape());
    CHECK(vals(on_view) == vals(on_copy));  // bit for bit: the same kernels read the same values
  }
  CHECK(vals(v.to(DType::F64)) == vals(c));
  CHECK_THROWS_WITH(v.data_ptr(), Contains("contiguous()"));
}

TEST_CASE("gradients flow through views to their base", "[ops][views][gradcheck]") {
  const auto in = [](Shape s, uint64_t seed) {
    Generator g(seed);
    return randn(std::move(s), {.dtype = DType::F64}, &g).requires_grad_();
  };
  using Ts = std::vector<Tensor>;
  const std::vector<std::pair<std::string, std::function<Tensor(const Ts&)>>> cases = {
      {"t * y", [](const Ts& v) { return v[0].t() * v[1]; }},
      {"select, narrow", [](const Ts& v) { return exp(v[0].select(1, 1)) * v[0].narrow(1, 0, 1).squeeze(1); }},
      {"expand", [](const Ts& v) { return v[0].narrow(1, 0, 1).expand({3, 3}) * v[1].t().narrow(1, 0, 1).expand({3, 3}); }},
      {"unsqueeze", [](const Ts& v) { return v[0].unsqueeze(0) * v[1].t().unsqueeze(1); }},
      {"matmul with a transposed view", [](const Ts& v) { return matmul(v[1].t(), v[0].t()); }},
      {"view of a view", [](const Ts& v) { return v[0].t().reshape({-1}) * 2.0; }},
      {"slice step, sum", [](const Ts& v) { return v[0].slice(0, 0, 3, 2).sum(0); }},
  };
  for (const auto& [name, f] : cases) {
    INFO(name);
    const GradcheckResult r = gradcheck(f, {in({3, 2}, 1), in({2, 3}, 2)});
    CHECK(r.ok);
    INFO(r.message);
  }
}

TEST_CASE("matmul reads a transposed operand in place", "[ops][views]") {
  Generator g(3);
  const Tensor a = randn({5, 7}, {}, &g), b = randn({4, 7}, {}, &g);
  CHECK(vals(matmul(a, b.t())) == vals(matmul(a, b.t().contiguous())));
  CHECK(vals(matmul(b.t().t(), a.t())) == vals(matmul(b, a.t().contiguous())));
  const Tensor bb = randn({2, 4, 7}, {}, &g);
  CHECK(vals(matmul(a, bb.transpose(1, 2))) == vals(matmul(a, bb.transpose(1, 2).contiguous())));
}

// Large transposed views take the CPU's tiled paths: contiguous() copies them in 64x64 tiles through a buffer, and
// an elementwise op first copies such an input dense. Each element must land where the index arithmetic says,
// for every element size, edges that are not multiples of the tile, and a transpose inside a 3-D permute.
TEST_CASE("a large transposed view copies and computes as element-by-element indexing says", "[ops][views]") {
  const int64_t r = 131, c = 197, d = 3;  // 77k elements: above the elementwise engine's threshold
  const Tensor x = arange(r * c * d, {.dtype = DType::F64}).reshape({d, r, c});
  const Tensor idx = (x - floor(x / 256.0) * 256.0);  // 0..255: exact in every dtype below
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64, DType::Bool}) {
    INFO(dtype_name(dt));
    const Tensor src = dt == DType::Bool ? gt(idx, full({}, 127.0, {.dtype = DType::F64})) : idx.to(dt);
    const Tensor t = src.permute({2, 0, 1});  // (c, d, r): its innermost dim is src's rows, src's dense dim is first
    REQUIRE_FALSE(t.is_contiguous());
    const std::vector<double> got = vals(t.contiguous().to(DType::F64)), all = vals(src.to(DType::F64));
    int64_t bad = 0;
    for (int64_t k = 0; k < c; ++k)
      for (int64_t b = 0; b < d; ++b)
        for (int64_t i = 0; i < r; ++i)
          bad += got[static_cast<size_t>((k * d + b) * r + i)] != all[static_cast<size_t>((b * r + i) * c + k)];
    CHECK(bad == 0);
    // and back: written through a transposed view of a dense tensor (the destination read across its dense dim)
    Tensor back = zeros({d, r, c}, {.dtype = dt});
    {
      NoGradGuard no_grad;
      back.permute({2, 0, 1}).copy_(t.contiguous());
    }
    CHECK(vals(back.to(DType::F64)) == all);
  }
  Generator g(5);
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    INFO(dtype_name(dt));
    const Tensor a = randn({c, r}, {}, &g).to(dt), b = randn({r, c}, {}, &g).to(dt);
    const Tensor bt = b.t(), dense_bt = bt.contiguous();
    CHECK(vals(a + bt) == vals(a + dense_bt));
    CHECK(vals(bt * a) == vals(dense_bt * a));
    CHECK(vals(exp(bt)) == vals(exp(dense_bt)));
  }
}

TEST_CASE("a transposing copy puts every element where its index says, past tile and work-item edges", "[ops][views]") {
  // distinct values (exact in F32 below 2^24), so no misplaced element can hide behind an equal one; the sizes
  // cross the tiled copy's 128-element tiles and 1024-column work items with ragged ends, and rows of 4-byte
  // elements go through the 8x8 register transposes where the CPU has AVX2 (HG_CONVERT_ISA=scalar: without)
  for (const auto& [r, c] : std::vector<std::pair<int64_t, int64_t>>{{1100, 37}, {37, 1100}, {129, 1031}, {8, 2048}}) {
    for (DType dt : {DType::F32, DType::I64, DType::F16}) {
      INFO(r << "x" << c << " " << dtype_name(dt));
      const int64_t wrap = dt == DType::F16 ? 2048 : r * c;  // F16 holds integers exactly up to 2048
      const Tensor x = arange(r * c, {.dtype = DType::F64}), idx = x - floor(x / double(wrap)) * double(wrap);
      const Tensor src = idx.reshape({r, c}).to(dt);
      const std::vector<double> got = vals(src.t().contiguous().to(DType::F64)), all = vals(idx);
      int64_t bad = 0;
      for (int64_t j = 0; j < c; ++j)
        for (int64_t i = 0; i < r; ++i) bad += got[static_cast<size_t>(j * r + i)] != all[static_cast<size_t>(i * c + j)];
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("as_strided: a bounds-checked view, not differentiable", "[ops][views]") {
  const Tensor x = iota({10});
  CHECK(vals(x.as_strided({3, 3}, {3, 1}, 1)) == std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(vals(x.as_strided({2, 2}, {1, 2}, 0)) == std::vector<double>{0, 2, 1, 3});
  CHECK_THROWS_WITH(x.as_strided({4, 4}, {3, 1}, 0), Contains("outside the storage"));
  CHECK_THROWS_WITH(x.as_strided({2}, {1, 1}, 0), Contains("one stride per dim"));
  CHECK_THROWS_WITH(iota({4}).requires_grad_().as_strided({2}, {1}, 0), Contains("not differentiable"));
}

TEST_CASE("in-place ops write into the tensor and through views into the base", "[ops][inplace]") {
  Tensor x = iota({2, 3});
  x.add_(1);
  CHECK(vals(x) == std::vector<double>{1, 2, 3, 4, 5, 6});
  x += from_vector(std::vector<float>{10, 20, 30}, {3});  // broadcast operand
  CHECK(vals(x) == std::vector<double>{11, 22, 33, 14, 25, 36});
  x -= 1;
  x *= 2;
  x /= from_vector(std::vector<float>{2}, {1});
  CHECK(vals(x) == std::vector<double>{10, 21, 32, 13, 24, 35});
  x.narrow(1, 1, 2).zero_();
  CHECK(vals(x) == std::vector<double>{10, 0, 0, 13, 0, 0});
  x.t().select(0, 0).fill_(-1);  // column 0
  CHECK(vals(x) == std::vector<double>{-1, 0, 0, -1, 0, 0});
  x.mul_(x.add(3)).sub_(0.5).div_(2.0);
  CHECK(vals(x) == std::vector<double>{-1.25, -0.25, -0.25, -1.25, -0.25, -0.25});
  x.clamp_(-1, 0);
  CHECK(vals(x) == std::vector<double>{-1, -0.25, -0.25, -1, -0.25, -0.25});
  relu_(x);
  CHECK(vals(x) == std::vector<double>(6, 0.0));
  x.masked_fill_(from_vector(std::vector<float>{1, 0, 1}, {3}), 5);
  CHECK(vals(x) == std::vector<double>{5, 0, 5, 5, 0, 5});
  // copy_ across dtypes (rounded to F16 as .to does), devices and shapes (broadcast)
  Tensor h = zeros({2, 2}, {.dtype = DType::F16});
  h.copy_(from_vector(std::vector<double>{1.0 / 3, 2049}, {2}, {.dtype = DType::F64}));
  CHECK(vals(h) == std::vector<double>{0.333251953125, 2048, 0.333251953125, 2048});
  Tensor t = zeros({3, 2});
  t.t().copy_(iota({2, 3}));
  CHECK(vals(t) == std::vector<double>{0, 3, 1, 4, 2, 5});
  CHECK_THROWS_WITH(t.copy_(zeros({4})), Contains("copy_"));
  CHECK_THROWS_WITH(t.add_(zeros({2, 3, 2})), Contains("cannot change the shape"));
  Tensor n = arange(int64_t{3}).to(DType::I64);
  CHECK_THROWS_WITH(n.add_(0.5), Contains("I64"));
}

TEST_CASE("in-place arithmetic writes into the tensor without a temporary, with the out-of-place op's bits",
          "[ops][inplace]") {
  Generator gen(7);
  for (const DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    CAPTURE(dt);
    const Tensor a = randn({5, 33}, {}, &gen).to(dt), row = randn({33}, {}, &gen).to(dt);
    const auto same = [](const Tensor& x, const Tensor& y) { return x.dtype() == y.dtype() && vals(x) == vals(y); };
    CHECK(same(a.clone().add_(row), add(a, row)));  // a broadcast operand
    CHECK(same(a.clone().sub_(a), sub(a, a)));
    CHECK(same(a.clone().mul_(row), mul(a, row)));
    CHECK(same(a.clone().div_(row), div(a, row)));
    CHECK(same(a.clone().add_(0.1), add(a, 0.1)));
    CHECK(same(a.clone().sub_(0.1), sub(a, 0.1)));
    CHECK(same(a.clone().mul_(1.0 / 3), mul(a, 1.0 / 3)));
    CHECK(same(a.clone().div_(3.0), div(a, 3.0)));
    Tensor x = a.clone();
    CHECK(same(x.mul_(x), mul(a, a)));  // the operand is the tensor itself
  }
  // no temporary: the peak stays where the tensor alone puts it; the version moves; a view writes into its base
  Tensor big = ones({1 << 16});
  const int64_t before = memory::allocated(Device::cpu());
  memory::reset_peak(Device::cpu());
  big.mul_(3.0).add_(big).div_(2.0).sub_(1.0);
  CHECK(memory::peak_allocated(Device::cpu()) == before);
  CHECK(big.version() == 4);
  CHECK(vals(big.narrow(0, 0, 2)) == std::vector<double>{2, 2});
  Tensor base = zeros({6});
  base.narrow(0, 2, 3).add_(1.5);
  CHECK(vals(base) == std::vector<double>{0, 0, 1.5, 1.5, 1.5, 0});
  // operands that overlap the tensor partly are read before the write, as out of place
  Tensor r = iota({6});
  r.narrow(0, 1, 5).add_(r.narrow(0, 0, 5));
  CHECK(vals(r) == std::vector<double>{0, 1, 3, 5, 7, 9});
  // another dtype: computed in the promoted type, rounded once to the tensor's (torch's)
  Tensor h = full({2}, 1.0, {.dtype = DType::F16});
  h.add_(full({2}, 1.0 / 4096, {.dtype = DType::F32}));
  CHECK(vals(h) == std::vector<double>{1, 1});
  h.mul_(full({2}, 1.0 + 1.0 / 1024, {.dtype = DType::F64}));
  CHECK(vals(h) == std::vector<double>{1.0 + 1.0 / 1024, 1.0 + 1.0 / 1024});
}

TEST_CASE("versions: in-place ops bump them, and backward refuses changed saved values", "[ops][inplace][autograd]") {
  Tensor x = iota({3}).requires_grad_();
  CHECK(x.version() == 0);
  CHECK_THROWS_WITH(x.add_(1), Contains("leaf Variable that requires grad"));
  {
    NoGradGuard ng;
    x.add_(1);  // as an optimizer does
  }
  CHECK(x.version() == 1);
  CHECK(x.detach().version() == 1);  // detach shares the counter, as torch's
  // exp saves its output: changing it before backward is torch's error
  Tensor y = x.exp();
  y.add_(1);
  CHECK_THROWS_WITH(y.sum().backward(), Contains("modified by an inplace operation"));
  // mul saves its inputs: changing one (here under no_grad) is refused too
  Tensor a = x * 1.0;
  Tensor z = a * a;
  {
    NoGradGuard ng;
    a.add_(1);
  }
  CHECK_THROWS_WITH(z.sum().backward(), Contains("is at version 1; expected version 0"));
  // add saves nothing: changing its input afterwards is fine, as in torch
  x.zero_grad();
  Tensor b = x * 2.0;
  Tensor s = b + b;
  {
    NoGradGuard ng;
    b.zero_();
  }
  s.sum().backward();
  CHECK(vals(x.grad()) == std::vector<double>{4, 4, 4});
}

TEST_CASE("in-place ops under autograd give the out-of-place gradients", "[ops][inplace][autograd]") {
  Generator g(5);
  const Tensor x0 = randn({4, 3}, {.dtype = DType::F64}, &g), w0 = randn({2, 3}, {.dtype = DType::F64}, &g);
  const auto grads = [&](bool in_place) {
    Tensor x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_();
    Tensor h = linear(x, w);
    if (in_place) {
      relu_(h);
      h.mul_(h);
      h += x.narrow(1, 0, 2);
      h.div_(3.0);
    } else {
      h = relu(h);
      h = h * h;
      h = h + x.narrow(1, 0, 2);
      h = h / 3.0;
    }
    h.sum().backward();
    return std::pair{vals(x.grad()), vals(w.grad())};
  };
  const auto a = grads(true), b = grads(false);
  CHECK(a.first == b.first);
  CHECK(a.second == b.second);
}

TEST_CASE("an in-place op on a view while recording rewrites its base's history, as torch's CopySlices",
          "[ops][views][inplace]") {
  // every expected gradient is torch 1.13's for the same statements
  const Tensor x0 = iota({2, 3});
  Tensor p = x0.clone().requires_grad_();
  Tensor q = p * 2.0;
  q.narrow(0, 0, 1).zero_();  // the zeroed row's old history gets no gradient
  q.sum().backward();
  CHECK(vals(p.grad()) == std::vector<double>{0, 0, 0, 2, 2, 2});
  {
    Tensor x = (iota({2, 3}) / 4.0).requires_grad_();
    Tensor w = from_vector(std::vector<float>{2, 3}, {2, 1}).requires_grad_();
    Tensor b = x * 1.0;
    Tensor v = b.slice(1, 1, 3);
    v.mul_(w);
    CHECK(std::string(b.grad_fn()->name) == "CopySlices");
    (sum(b * b) + v.sum()).backward();  // the view's own history runs through the base's new one
    CHECK(vals(x.grad()) == std::vector<double>{0, 4, 6, 1.5, 21, 25.5});
    CHECK(vals(w.grad()) == std::vector<double>{2, 17.625});
  }
  {
    // a view of a view: the write lands in the first base's history
    Tensor x = (iota({2, 3}) / 4.0).requires_grad_();
    Tensor y = ones({1, 2}).requires_grad_();
    Tensor b = x * 1.0;
    b.t().narrow(0, 1, 2).narrow(1, 1, 1).add_(y.t() * 5.0);
    sum(b * b).backward();
    CHECK(vals(x.grad()) == std::vector<double>{0, 0.5, 1, 1.5, 12, 12.5});
    CHECK(vals(y.grad()) == std::vector<double>{60, 62.5});
  }
  // gradcheck through a write into a view, in F64
  Generator g(8);
  const auto f = [](const std::vector<Tensor>& in) {
    Tensor b = in[0] * 1.0;
    b.narrow(1, 1, 2).mul_(in[1]);
    b.select(0, 0).add_(in[1].t().squeeze(0).sum());
    return b * b;
  };
  CHECK(gradcheck(f, {randn({2, 4}, {.dtype = DType::F64}, &g).requires_grad_(),
                      randn({2, 1}, {.dtype = DType::F64}, &g).requires_grad_()}).ok);
  // refusals, before anything is written
  Tensor leaf = x0.clone().requires_grad_();
  CHECK_THROWS_WITH(leaf.narrow(0, 0, 1).mul_(2.0), Contains("leaf Variable that requires grad"));
  Tensor h = leaf * 1.0;
  const std::vector<double> before = vals(h);
  CHECK_THROWS_WITH(h.narrow(0, 0, 1).expand({3, 3}).add_(leaf.narrow(0, 0, 1)), Contains("single memory location"));
  CHECK(vals(h) == before);
  // a value the backward saved, changed through a view, is still refused at backward
  Tensor e = h * h;
  h.narrow(1, 0, 1).add_(1.0);
  CHECK_THROWS_WITH(e.sum().backward(), Contains("modified by an inplace operation"));
}

TEST_CASE("index: torch::indexing's Slice, integers, None, Ellipsis and booleans make views", "[ops][indexing]") {
  using namespace hg::indexing;
  const Tensor x = iota({2, 3, 4});
  const Tensor a = x.index({Slice(), Slice(1, 3)});
  CHECK(a.shape() == Shape{2, 2, 4});
  CHECK(vals(a) == vals(x.slice(1, 1, 3)));
  CHECK(a.strided_data_ptr() != nullptr);
  CHECK(a.is_view());
  CHECK(vals(x.index({"...", 0})) == std::vector<double>{0, 4, 8, 12, 16, 20});
  CHECK(vals(x.index({Ellipsis, 0})) == std::vector<double>{0, 4, 8, 12, 16, 20});
  CHECK(x.index({None}).shape() == Shape{1, 2, 3, 4});
  const Tensor b = x.index({Slice(), None, 1});
  CHECK(b.shape() == Shape{2, 1, 4});
  CHECK(vals(b) == std::vector<double>{4, 5, 6, 7, 16, 17, 18, 19});
  CHECK(vals(x.index({1, Slice(None, None, 2)})) == std::vector<double>{12, 13, 14, 15, 20, 21, 22, 23});
  CHECK(x.index({-1, -1, -1}).item() == 23);
  CHECK(x.index({-1, -1, -1}).ndim() == 0);
  CHECK(x.index({true}).shape() == Shape{1, 2, 3, 4});
  CHECK(x.index({false}).shape() == Shape{0, 2, 3, 4});
  CHECK(x.index({Ellipsis, Slice(-2)}).shape() == Shape{2, 3, 2});
  CHECK(vals(x.index({Ellipsis, Slice(-2)}).select(0, 0).select(0, 0)) == std::vector<double>{2, 3});
  CHECK_THROWS_WITH(x.index({0, 0, 0, 0}), Contains("too many indices"));
  CHECK_THROWS_WITH(x.index({"...", 0, "..."}), Contains("single ellipsis"));
  CHECK_THROWS_WITH(x.index({"::"}), Contains("\"...\""));
  CHECK_THROWS_WITH(x.index({5}), Contains("out of range"));
  CHECK_THROWS_WITH(x.index({Slice(None, None, -1)}), Contains("positive"));
}

TEST_CASE("index: a tensor of indices or a mask picks along its dims", "[ops][indexing]") {
  using namespace hg::indexing;
  const Tensor x = iota({2, 3, 4});
  const Tensor idx = from_vector(std::vector<int64_t>{2, 0, -1}, {3});
  const Tensor r = x.index({Slice(), idx});
  CHECK(r.shape() == Shape{2, 3, 4});
  CHECK(vals(r.select(0, 0)) == std::vector<double>{8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11});
  const Tensor idx2 = from_vector(std::vector<int64_t>{1, 0, 0, 1}, {2, 2});
  CHECK(x.index({idx2}).shape() == Shape{2, 2, 3, 4});
  CHECK(vals(x.index({idx2}).select(0, 0).select(0, 0)) == vals(x.select(0, 1)));
  // a mask: what a comparison returns (0/1), over as many dims as it has
  const Tensor big = x.index({x > 10.0});
  CHECK(big.shape() == Shape{13});
  CHECK(vals(big).front() == 11);
  CHECK(vals(big).back() == 23);
  CHECK(x.index({from_vector(std::vector<float>{0, 1}, {2})}).shape() == Shape{1, 3, 4});
  const Tensor m2 = iota({3, 4}) < 3.0;  // the first three of each (3, 4) plane
  CHECK(vals(x.index({Slice(), m2})) == std::vector<double>{0, 1, 2, 12, 13, 14});
  const Tensor labels = from_vector(std::vector<int64_t>{5, 6, 7}, {3});
  CHECK(labels.index({from_vector(std::vector<int64_t>{2, 2, 0}, {3})}).to_vector<int64_t>() ==
        std::vector<int64_t>{7, 7, 5});
  CHECK_THROWS_WITH(x.index({from_vector(std::vector<int64_t>{0, 1}, {2}), from_vector(std::vector<int64_t>{0, 1, 2}, {3})}),
                    Contains("cannot be broadcast"));
  CHECK_THROWS_WITH(x.index({Slice(), from_vector(std::vector<int64_t>{3}, {1})}), Contains("out of range"));
  CHECK_THROWS_WITH(x.index({iota({2, 4}) > 1.0}), Contains("does not match"));
  // differentiable: repeated picks add up
  const auto pick = [](const std::vector<Tensor>& v) {
    return v[0].index({Slice(), from_vector(std::vector<int64_t>{0, 0, 2}, {3})}) * 1.5;
  };
  Generator g(4);
  const GradcheckResult gr = gradcheck(pick, {randn({2, 3}, {.dtype = DType::F64}, &g).requires_grad_()});
  CHECK(gr.ok);
}

TEST_CASE("several tensor indices broadcast together, in place when adjacent and in front when not, as torch's",
          "[ops][indexing]") {
  using namespace hg::indexing;
  const Tensor x = iota({2, 3, 4});
  const auto I = [](std::vector<int64_t> v, Shape s) { return from_vector(v, s); };
  // the expected values are torch 1.13's for the same expressions on torch.arange(24.).reshape(2, 3, 4)
  CHECK(vals(x.index({I({0, 1}, {2}), I({1, 2}, {2})})) == std::vector<double>{4, 5, 6, 7, 20, 21, 22, 23});
  const Tensor adj = x.index({Slice(), I({0, 2}, {2}), I({1, 3}, {2})});
  CHECK(adj.shape() == Shape{2, 2});
  CHECK(vals(adj) == std::vector<double>{1, 11, 13, 23});
  const Tensor apart = x.index({I({0, 1}, {2}), Slice(), I({1, 3}, {2})});  // a slice between: index dims first
  CHECK(apart.shape() == Shape{2, 3});
  CHECK(vals(apart) == std::vector<double>{1, 5, 9, 15, 19, 23});
  const Tensor bc = x.index({I({0, 1}, {2, 1}), Slice(), I({1, 3}, {2})});  // (2, 1) and (2,) broadcast to (2, 2)
  CHECK(bc.shape() == Shape{2, 2, 3});
  CHECK(vals(bc) == std::vector<double>{1, 5, 9, 3, 7, 11, 13, 17, 21, 15, 19, 23});
  // a mask over two dims is two indices of its count (4 here), broadcast with the third
  CHECK(vals(x.index({x.select(2, 0) > 5.0, I({0, 1, 3, 2}, {4})})) == std::vector<double>{8, 13, 19, 22});
  CHECK(x.index({None, I({0, 1}, {2}), I({1, 2}, {2})}).shape() == Shape{1, 2, 4});
  const Tensor none_between = x.index({I({0, 1}, {2}), None, I({1, 2}, {2})});
  CHECK(none_between.shape() == Shape{2, 1, 4});
  CHECK(vals(none_between) == std::vector<double>{4, 5, 6, 7, 20, 21, 22, 23});
  CHECK(x.index({0, Slice(), I({1, 2}, {2})}).shape() == Shape{3, 2});  // an integer is a select, as torch's
  // writes through the same positions
  Tensor y = zeros({2, 3, 4});
  y.index_put_({I({0, 1}, {2}), Slice(), I({1, 3}, {2})}, iota({2, 3}));
  CHECK(vals(y) == std::vector<double>{0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0, 5});
  Tensor w = zeros({2, 3, 4});
  w.index_put_({Slice(), I({0, 2}, {2}), I({1, 3}, {2})}, from_vector(std::vector<float>{7, 8}, {2}));
  CHECK(vals(w) == std::vector<double>{0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 8, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 8});
  // differentiable through both indices
  Generator g(6);
  const auto f = [&](const std::vector<Tensor>& v) { return v[0].index({I({0, 1, 1}, {3}), Slice(), I({2, 0, 2}, {3})}); };
  CHECK(gradcheck(f, {randn({2, 3, 4}, {.dtype = DType::F64}, &g).requires_grad_()}).ok);
}

TEST_CASE("index_put_, masked_select and nonzero", "[ops][indexing]") {
  using namespace hg::indexing;
  Tensor y = zeros({3, 4});
  y.index_put_({Slice(), 1}, 5);
  y.index_put_({0}, from_vector(std::vector<float>{1, 2, 3, 4}, {4}));
  CHECK(vals(y) == std::vector<double>{1, 2, 3, 4, 0, 5, 0, 0, 0, 5, 0, 0});
  y.index_put_({y > 4.0}, -1);
  CHECK(vals(y) == std::vector<double>{1, 2, 3, 4, 0, -1, 0, 0, 0, -1, 0, 0});
  y.index_put_({Slice(), from_vector(std::vector<int64_t>{3, 0}, {2})}, iota({3, 2}).add(10));
  CHECK(vals(y) == std::vector<double>{11, 2, 3, 10, 13, -1, 0, 12, 15, -1, 0, 14});
  Tensor z = iota({2, 3});
  z.index_put_({z > 2.0}, from_vector(std::vector<float>{10, 20, 30}, {3}));
  CHECK(vals(z) == std::vector<double>{0, 1, 2, 10, 20, 30});
  CHECK(z.version() == 1);
  Tensor n = from_vector(std::vector<int64_t>{1, 2, 3}, {3});
  n.index_put_({from_vector(std::vector<int64_t>{1}, {1})}, 9);
  CHECK(n.to_vector<int64_t>() == std::vector<int64_t>{1, 9, 3});
  CHECK(vals(iota({2, 3}).masked_select(iota({3}) >= 1.0)) == std::vector<double>{1, 2, 4, 5});
  CHECK(from_vector(std::vector<float>{0, 1, 0, 2}, {2, 2}).nonzero().to_vector<int64_t>() ==
        std::vector<int64_t>{0, 1, 1, 1});
  CHECK(zeros({3}).nonzero().shape() == Shape{0, 1});
}

TEST_CASE("linear and the norms save their input and weight, never the bias: changing a bias before backward "
          "is allowed, changing a weight refused, as torch's", "[ops][inplace]") {
  Generator g(9);
  const auto run = [&](bool touch_weight, const auto& op) {
    const Tensor x = randn({4, 6}, {}, &g).requires_grad_();
    const Tensor w = randn({6}, {}, &g).requires_grad_(), b = randn({6}, {}, &g).requires_grad_();
    const Tensor y = op(x, w, b);
    {
      NoGradGuard ng;
      (touch_weight ? w : b).add_(1.0);  // as an optimizer's step between forward and backward would
    }
    y.sum().backward();
    return x.grad().defined();
  };
  const auto lin = [](const Tensor& x, const Tensor& w, const Tensor& b) { return linear(x, w.unsqueeze(0), b.narrow(0, 0, 1)); };
  const auto ln = [](const Tensor& x, const Tensor& w, const Tensor& b) { return layer_norm(x, {6}, w, b) * x; };
  const auto bn = [](const Tensor& x, const Tensor& w, const Tensor& b) {
    return batch_norm(x, Tensor(), Tensor(), w, b, {.training = true}) * x;
  };
  CHECK(run(false, lin));
  CHECK(run(false, ln));
  CHECK(run(false, bn));
  CHECK_THROWS_WITH(run(true, lin), Contains("modified by an inplace operation"));
  CHECK_THROWS_WITH(run(true, ln), Contains("modified by an inplace operation"));
  CHECK_THROWS_WITH(run(true, bn), Contains("modified by an inplace operation"));
}
