// Results do not depend on the thread count: every kernel splits its work so that each output sum
// has one order (fixed pieces, or no split of a reduction), and oneDNN primitives run with the thread
// count they were made for. This is what lets halfgrad drop to one thread on a busy machine
// (core/parallel.h) without changing a single bit of a training run.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "halfgrad.h"
#include "test_util.h"

using namespace hg;

namespace {

struct Threads {
  int saved = get_num_threads();
  explicit Threads(int n) {
    set_adaptive_threads({.enabled = false});
    set_num_threads(n);
  }
  ~Threads() {
    set_num_threads(saved);
    set_adaptive_threads({});
  }
};

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.data_ptr());  // tensors are contiguous
  return std::vector<uint8_t>(p, p + t.nbytes());
}

// The bytes of every tensor `run` returns, computed with `threads` threads from the same seed.
template <class Run>
std::vector<std::vector<uint8_t>> with_threads(int threads, const Run& run) {
  Threads t(threads);
  manual_seed(7);
  std::vector<std::vector<uint8_t>> out;
  for (const Tensor& r : run()) out.push_back(bytes_of(r));
  return out;
}

template <class Run>
void check_thread_independent(const std::string& what, const Run& run) {
  const auto one = with_threads(1, run);
  for (int threads : {2, 3}) {
    const auto many = with_threads(threads, run);
    REQUIRE(many.size() == one.size());
    for (size_t i = 0; i < one.size(); ++i) {
      const auto first = std::mismatch(one[i].begin(), one[i].end(), many[i].begin(), many[i].end());
      INFO(what << ": result " << i << " with " << threads << " threads, first differing byte "
                << (first.first - one[i].begin()) << " of " << one[i].size());
      CHECK(first.first == one[i].end());
    }
  }
}

}  // namespace

TEST_CASE("matmul and linear give the same bits on any thread count", "[cpu][gemm][threads]") {
  struct Shape3 { int64_t m, k, n; };
  for (DType dt : {DType::F32, DType::BF16, DType::F16})
    for (Shape3 s : {Shape3{10, 128, 128}, Shape3{128, 1568, 64}, Shape3{64, 784, 256}, Shape3{3, 5000, 7}})
      check_thread_independent("linear " + std::string(dtype_name(dt)) + " " + std::to_string(s.m) + "x" +
                                   std::to_string(s.k) + "x" + std::to_string(s.n),
                               [&] {
                                 Tensor x = randn({s.m, s.k}).to(dt), w = randn({s.n, s.k}).to(dt), b = randn({s.n}).to(dt);
                                 x.requires_grad_(), w.requires_grad_(), b.requires_grad_();
                                 Tensor y = linear(x, w, b);
                                 y.backward(randn(y.shape()).to(dt));
                                 return std::vector<Tensor>{y, x.grad(), w.grad(), b.grad()};
                               });
  check_thread_independent("batched matmul", [] {
    Tensor a = randn({6, 33, 70}), b = randn({6, 70, 41});
    Tensor bt = randn({6, 41, 70});
    return std::vector<Tensor>{matmul(a, b), matmul(a, bt, {.trans_b = Trans::T})};
  });
}

TEST_CASE("conv2d gives the same bits on any thread count", "[cpu][conv][threads]") {
  struct Conv { int64_t c, k, hw; };
  for (DType dt : {DType::F32, DType::BF16})
    for (int64_t batch : {1, 5, 32})
      for (Conv cv : {Conv{16, 32, 14}, Conv{1, 32, 28}, Conv{32, 64, 28}})
      check_thread_independent("conv2d " + std::string(dtype_name(dt)) + " batch " + std::to_string(batch) + " " +
                                   std::to_string(cv.c) + "->" + std::to_string(cv.k) + " at " + std::to_string(cv.hw),
                               [&] {
        Tensor x = randn({batch, cv.c, cv.hw, cv.hw}).to(dt), w = randn({cv.k, cv.c, 3, 3}).to(dt), b = randn({cv.k}).to(dt);
        x.requires_grad_(), w.requires_grad_(), b.requires_grad_();
        Tensor y = conv2d(x, w, b, {.padding = 1});
        y.backward(randn(y.shape()).to(dt));
        return std::vector<Tensor>{y, x.grad(), w.grad(), b.grad()};
      });
}

TEST_CASE("a CNN training step gives the same bits on any thread count", "[cpu][threads][slow]") {
  check_thread_independent("CNN step", [] {
    nn::Sequential m(nn::Conv2d(1, 32, 3, {.padding = 1}), nn::ReLU(), nn::MaxPool2d({.kernel_size = 2}),
                     nn::Conv2d(32, 64, 3, {.padding = 1}), nn::ReLU(), nn::MaxPool2d({.kernel_size = 2}),
                     nn::Flatten(), nn::Linear(3136, 128), nn::ReLU(), nn::Linear(128, 10));
    optim::Adam opt(m.parameters(), {.lr = 1e-3});
    const Tensor x = randn({104, 1, 28, 28});
    std::vector<int64_t> labels(104);
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>(i * 7 % 10);
    const Tensor y = from_vector(labels, {104}, {.dtype = DType::I64});
    for (int step = 0; step < 2; ++step) {
      opt.zero_grad();
      cross_entropy(m.forward(x), y).backward();
      opt.step();
    }
    std::vector<Tensor> out;
    for (const auto& [name, p] : m.named_parameters()) out.push_back(p);
    return out;
  });
}
