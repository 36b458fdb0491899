// Tensor factories. Values are made on the CPU (in parallel, thread-count independent) and copied
// when the requested device is a GPU, except constants (zeros/ones/full), which the device's allocator
// fills in place without waiting; empty() allocates on the device directly.
#include <cmath>
#include <cstring>
#include <mutex>
#include <optional>
#include <utility>

#include "core/convert.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "core/tensor.h"

namespace hg {
namespace {

void check_shape(const char* op, const Shape& s) {
  for (int64_t d : s)
    HG_CHECK(d >= 0, op, ": negative size ", d, " in shape ", s, "; sizes must be >= 0");
}

// Fills a new CPU tensor of o.dtype from double values produced by gen(i), then moves it to o.device.
template <class Gen>
Tensor make_filled(const char* op, Shape s, TensorOptions o, Gen gen) {
  check_shape(op, s);
  Tensor t = empty(s, {.dtype = o.dtype});
  const int64_t n = t.numel();
  visit_storage_dtype(o.dtype, [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(t.data_ptr());
    auto fill = [&](int64_t i) {
      const double v = gen(i);
      if constexpr (std::is_same_v<T, bool>) p[i] = v != 0;
      else if constexpr (sizeof(T) <= 2) p[i] = from_float<T>(static_cast<float>(v));
      else p[i] = static_cast<T>(v);
    };
    parallel_for(n, n > 65536, fill);  // small fills stay off the OpenMP team
  });
  if (!o.device.is_cpu()) t = t.to(o.device);
  if (o.requires_grad) t.requires_grad_(true);
  return t;
}

// A constant fill on a non-CPU device: the value's bits in o.dtype, written by the device itself (no
// host buffer, no copy, no wait).
Tensor device_constant(const char* op, Shape s, double value, TensorOptions o) {
  check_shape(op, s);
  Tensor t = empty(std::move(s), {.dtype = o.dtype, .device = o.device});
  uint64_t bits = 0;
  visit_storage_dtype(o.dtype, [&](auto tag) {
    using T = decltype(tag);
    T v;
    if constexpr (std::is_same_v<T, bool>) v = value != 0;
    else if constexpr (sizeof(T) <= 2) v = from_float<T>(static_cast<float>(value));
    else v = static_cast<T>(value);
    std::memcpy(&bits, &v, sizeof(T));  // little-endian: the low bytes
  });
  if (t.numel()) get_allocator(o.device.type)->fill(t.data_ptr(), o.device, t.numel(), dtype_size(o.dtype), bits);
  if (o.requires_grad) t.requires_grad_(true);
  return t;
}

std::mutex& generator_mutex() {
  static std::mutex m;
  return m;
}

}  // namespace

std::pair<uint64_t, uint64_t> reserve_blocks(Generator& g, uint64_t blocks) {
  std::lock_guard<std::mutex> lock(generator_mutex());
  return {g.seed(), g.advance(blocks)};
}

namespace {
struct CaptureSession {
  int device = 0;
  uint64_t* state_at = nullptr;
  std::vector<rng_capture::Use> uses;
};
thread_local std::optional<CaptureSession> t_capture;
}  // namespace

PhiloxDraw reserve_draw(Generator& g, uint64_t blocks, Device dev) {
  CaptureSession* c = t_capture ? &*t_capture : nullptr;
  if (c == nullptr || !dev.is_cuda() || dev.index != c->device) {
    const auto [seed, offset] = reserve_blocks(g, blocks);
    return {.seed = seed, .offset = offset};
  }
  size_t k = 0;
  while (k < c->uses.size() && c->uses[k].generator != &g) ++k;
  if (k == c->uses.size()) {
    HG_CHECK(k < static_cast<size_t>(rng_capture::kMaxGenerators), "cuda::Graph::capture: the body draws from more than ",
             rng_capture::kMaxGenerators, " random generators; draw from fewer (the default one serves every op)");
    c->uses.push_back({&g, 0});
  }
  const uint64_t offset = c->uses[k].blocks;
  c->uses[k].blocks += blocks;
  return {.seed = g.seed(), .offset = offset, .state_at = c->state_at + 2 * k};
}

namespace rng_capture {
void begin(int device, uint64_t* state_at) {
  HG_CHECK(!t_capture, "cuda::Graph::capture: a capture is already open on this thread; captures do not nest");
  t_capture.emplace(CaptureSession{device, state_at, {}});
}
std::vector<Use> end() {
  std::vector<Use> uses;
  if (t_capture) uses = std::move(t_capture->uses);
  t_capture.reset();
  return uses;
}
}  // namespace rng_capture

Generator& default_generator() {
  static Generator g;
  return g;
}
void manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(generator_mutex());  // not in the middle of another thread's reserve
  default_generator().manual_seed(seed);
}

Tensor empty(Shape s, TensorOptions o) {
  check_shape("empty", s);
  auto impl = std::make_shared<TensorImpl>();
  const size_t nbytes = static_cast<size_t>(s.numel()) * dtype_size(o.dtype);
  impl->storage = std::make_shared<Storage>(nbytes, o.device, o.dtype);
  impl->shape = std::move(s);
  impl->dtype = o.dtype;
  Tensor t(std::move(impl));
  if (o.requires_grad) t.requires_grad_(true);
  return t;
}

Tensor full(Shape s, double value, TensorOptions o) {
  if (!o.device.is_cpu()) return device_constant("full", std::move(s), value, o);
  return make_filled("full", std::move(s), o, [value](int64_t) { return value; });
}
Tensor zeros(Shape s, TensorOptions o) {
  check_shape("zeros", s);
  if (o.device.is_cpu()) {
    Tensor t = empty(std::move(s), {.dtype = o.dtype});
    if (t.numel()) std::memset(t.data_ptr(), 0, t.nbytes());  // all-zero bits is 0 in every dtype
    if (o.requires_grad) t.requires_grad_(true);
    return t;
  }
  return device_constant("zeros", std::move(s), 0.0, o);
}
Tensor ones(Shape s, TensorOptions o) {
  if (!o.device.is_cpu()) return device_constant("ones", std::move(s), 1.0, o);
  return make_filled("ones", std::move(s), o, [](int64_t) { return 1.0; });
}

Tensor arange(double start, double end, double step, TensorOptions o) {
  HG_CHECK(step != 0 && std::isfinite(step) && std::isfinite(start) && std::isfinite(end), "arange: step=", step,
           " start=", start, " end=", end, "; need finite values and a nonzero step");
  const double len = std::ceil((end - start) / step);
  const int64_t n = len > 0 ? static_cast<int64_t>(len) : 0;
  return make_filled("arange", Shape{n}, o, [=](int64_t i) { return start + step * static_cast<double>(i); });
}
Tensor arange(int64_t end, TensorOptions o) { return arange(0.0, static_cast<double>(end), 1.0, o); }
Tensor linspace(double start, double end, int64_t steps, TensorOptions o) {
  HG_CHECK(steps >= 0, "linspace: steps=", steps, " must be >= 0");
  const double step = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0.0;
  const int64_t half = steps / 2;
  return make_filled("linspace", Shape{steps}, o, [=](int64_t i) {
    if (steps == 1) return start;
    return i < half ? start + step * static_cast<double>(i) : end - step * static_cast<double>(steps - 1 - i);
  });
}

Tensor rand(Shape s, TensorOptions o, Generator* gen) {
  HG_CHECK(is_floating(o.dtype), "rand: dtype ", o.dtype, " is not a floating dtype; use F32, F16, BF16 or F64");
  check_shape("rand", s);  // before the generator advances
  Generator& g = gen ? *gen : default_generator();
  if (o.dtype == DType::F64) {  // 53-bit doubles: two words each, two per Philox block
    const std::pair<uint64_t, uint64_t> so = reserve_blocks(g, static_cast<uint64_t>((s.numel() + 1) / 2));
    const uint64_t seed = so.first, off = so.second;
    return make_filled("rand", std::move(s), o, [=](int64_t i) {
      uint32_t w[4];
      Philox4x32::words(seed, off, static_cast<uint64_t>(i / 2), w);
      const int l = static_cast<int>(i % 2) * 2;
      return Philox4x32::uniform_double(w[l], w[l + 1]);
    });
  }
  // F16/BF16 keep only as many random bits as their significand holds (11, 8), so every value is exact
  // and rounding never reaches 1.0 (torch's uniform_real_distribution does the same).
  const int bits = o.dtype == DType::F16 ? 11 : o.dtype == DType::BF16 ? 8 : 24;
  const double scale = std::ldexp(1.0, -bits);
  const std::pair<uint64_t, uint64_t> so = reserve_blocks(g, static_cast<uint64_t>((s.numel() + 3) / 4));
  const uint64_t seed = so.first, off = so.second;
  return make_filled("rand", std::move(s), o, [=](int64_t i) {
    uint32_t w[4];
    Philox4x32::words(seed, off, static_cast<uint64_t>(i / 4), w);
    return static_cast<double>(w[i % 4] >> (32 - bits)) * scale;
  });
}

Tensor randn(Shape s, TensorOptions o, Generator* gen) {
  HG_CHECK(is_floating(o.dtype), "randn: dtype ", o.dtype, " is not a floating dtype; use F32, F16, BF16 or F64");
  check_shape("randn", s);  // before the generator advances
  Generator& g = gen ? *gen : default_generator();
  const std::pair<uint64_t, uint64_t> so = reserve_blocks(g, static_cast<uint64_t>((s.numel() + 1) / 2));
  const uint64_t seed = so.first, off = so.second;
  // Box-Muller on two 53-bit uniforms per block: elements 2j and 2j+1 take the cos and sin halves.
  return make_filled("randn", std::move(s), o, [=](int64_t i) {
    uint32_t w[4];
    Philox4x32::words(seed, off, static_cast<uint64_t>(i / 2), w);
    const double u1 = Philox4x32::uniform_double(w[0], w[1]);
    const double u2 = Philox4x32::uniform_double(w[2], w[3]);
    const double r = std::sqrt(-2.0 * std::log1p(-u1));
    const double a = 6.283185307179586 * u2;
    return i % 2 == 0 ? r * std::cos(a) : r * std::sin(a);
  });
}

namespace {
template <class T>
Tensor from_vector_impl(const std::vector<T>& v, Shape s, TensorOptions o) {
  check_shape("from_vector", s);
  HG_CHECK(static_cast<int64_t>(v.size()) == s.numel(), "from_vector: ", v.size(), " values do not fill shape ", s,
           " (", s.numel(), " elements); pass a shape whose product is ", v.size());
  Tensor t = empty(std::move(s), {.dtype = o.dtype});
  convert_any(v.data(), dtype_v<T>, t.data_ptr(), o.dtype, t.numel());
  if (!o.device.is_cpu()) t = t.to(o.device);
  if (o.requires_grad) t.requires_grad_(true);
  return t;
}
}  // namespace

Tensor from_vector(const std::vector<float>& v, Shape s, TensorOptions o) { return from_vector_impl(v, std::move(s), o); }
Tensor from_vector(const std::vector<double>& v, Shape s, TensorOptions o) { return from_vector_impl(v, std::move(s), o); }
Tensor from_vector(const std::vector<int64_t>& v, Shape s, TensorOptions o) { return from_vector_impl(v, std::move(s), o); }
Tensor from_vector(const std::vector<int64_t>& v, Shape s) {
  return from_vector_impl(v, std::move(s), {.dtype = DType::I64});
}

Tensor from_vector(const std::vector<bool>& v, Shape s) {  // std::vector<bool> packs bits: through bytes
  const std::vector<uint8_t> bytes(v.begin(), v.end());
  check_shape("from_vector", s);
  HG_CHECK(static_cast<int64_t>(v.size()) == s.numel(), "from_vector: ", v.size(), " values do not fill shape ", s,
           " (", s.numel(), " elements); pass a shape whose product is ", v.size());
  Tensor t = empty(std::move(s), {.dtype = DType::Bool});
  if (!bytes.empty()) std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

Tensor empty_like(const Tensor& t) { return empty(t.shape(), {.dtype = t.dtype(), .device = t.device()}); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), {.dtype = t.dtype(), .device = t.device()}); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), {.dtype = t.dtype(), .device = t.device()}); }

}  // namespace hg
