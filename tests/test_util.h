#pragma once
// Shared by the tests: dtype tolerances, seeded random inputs, comparisons of results with references,
// parameters with gradients, temporary directories, captured stderr and threads.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "ops/elementwise.h"

namespace hg::test {

// 0, 1, 2, ... in shape s and dtype dt (row-major), and a tensor's values as doubles
inline Tensor iota(Shape s, DType dt = DType::F32) {
  std::vector<double> v(static_cast<size_t>(s.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i);
  return from_vector(v, std::move(s), {.dtype = dt});
}
inline std::vector<double> vals(const Tensor& t) { return t.to_vector<double>(); }

// The relative tolerance of a result stored in each dtype, against the F64 result of the same rounded
// inputs (about a few units of the dtype's last place, with room for F32 accumulation order).
inline double dtype_tolerance(DType dt) {
  switch (dt) {
    case DType::BF16: return 1e-2;  // 8-bit significand: 2^-8 = 3.9e-3 per rounding
    case DType::F16: return 2e-3;   // 11-bit significand: 2^-11 = 4.9e-4 per rounding
    case DType::F64: return 1e-12;
    default: return 1e-5;
  }
}

// N(0,1) values from Generator(seed), times scale plus shift, drawn in F64 and rounded to dt once. Drawing
// in dt rounds the same F64 draws the same way (through float), so each seed gives one set of values.
// Scale and shift are applied only when given, so the plain draws reach dt untouched.
inline Tensor randn_t(Shape s, DType dt, uint64_t seed, double scale = 1.0, double shift = 0.0) {
  Generator gen(seed);
  Tensor t = randn(std::move(s), {.dtype = DType::F64}, &gen);
  if (scale != 1.0) t = mul(t, scale);
  if (shift != 0.0) t = add(t, shift);
  return t.to(dt);
}

// Whether got is within atol + rtol * |want| of want. A NaN is met only by a NaN (a mean over nothing).
inline bool is_close(double got, double want, double rtol, double atol) {
  return std::isnan(want) ? std::isnan(got) : std::fabs(got - want) <= atol + rtol * std::fabs(want);
}

namespace detail {
// One assertion per element; stop makes a miss a REQUIRE, which ends the test there.
inline void compare_close(const std::vector<double>& got, const std::vector<double>& want, double rtol, double atol,
                          bool stop) {
  REQUIRE(got.size() == want.size());
  INFO("rtol " << rtol << " atol " << atol);
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << " want " << want[i]);
    const bool close = is_close(got[i], want[i], rtol, atol);
    if (stop) REQUIRE(close);
    else CHECK(close);
  }
}
}  // namespace detail

// Every element of got close to want's (is_close), one CHECK each: every miss is reported.
inline void check_close(const std::vector<double>& got, const std::vector<double>& want, double rtol, double atol) {
  detail::compare_close(got, want, rtol, atol, false);
}

// As check_close, but each element is a REQUIRE: the test stops at the first miss.
inline void require_close(const std::vector<double>& got, const std::vector<double>& want, double rtol, double atol) {
  detail::compare_close(got, want, rtol, atol, true);
}

namespace detail {
// One CHECK that ok(i) holds for every element, naming the first that does not.
template <class Ok>
inline void check_each(const std::string& what, const std::vector<double>& got, const std::vector<double>& want,
                       const Ok& ok) {
  REQUIRE(got.size() == want.size());
  size_t bad = got.size();
  for (size_t i = 0; i < got.size() && bad == got.size(); ++i)
    if (!ok(i)) bad = i;
  INFO(what << ": first mismatch at " << bad << " of " << got.size()
            << (bad < got.size() ? ": got " + std::to_string(got[bad]) + " want " + std::to_string(want[bad])
                                 : std::string()));
  CHECK(bad == got.size());
}
}  // namespace detail

// |got - want| <= t * max(scale, min_scale) for every element, where scale is the magnitude of the
// computation (the sum of |terms| a result adds up): a result near 0 may be a large cancelling sum. A NaN
// or infinity on either side misses, so an output a kernel never wrote (left NaN) fails.
inline void check_close_scaled(const std::string& what, const std::vector<double>& got, const std::vector<double>& want,
                               const std::vector<double>& scale, double t, double min_scale) {
  detail::check_each(what, got, want,
                     [&](size_t i) { return std::fabs(got[i] - want[i]) <= t * std::max(scale[i], min_scale); });
}

// The same bound with min_scale 1, for results that may be NaN or infinite: there a NaN must meet a NaN
// and an infinity the same infinity. An empty scale measures against |want|.
inline void check_same_or_close_scaled(const std::string& what, const std::vector<double>& got,
                                       const std::vector<double>& want, const std::vector<double>& scale, double t) {
  detail::check_each(what, got, want, [&](size_t i) {
    if (std::isnan(want[i]) || std::isnan(got[i])) return std::isnan(want[i]) == std::isnan(got[i]);
    if (std::isinf(want[i]) || std::isinf(got[i])) return got[i] == want[i];
    return !(std::fabs(got[i] - want[i]) > t * std::max(1.0, scale.empty() ? std::fabs(want[i]) : scale[i]));
  });
}

// A 1-D parameter (or of shape s) holding v in dtype dt, requiring grad.
inline Tensor make_param(const std::vector<double>& v, DType dt = DType::F32, Shape s = {}) {
  if (s.ndim() == 0) s = Shape{static_cast<int64_t>(v.size())};
  Tensor p = from_vector(v, s, {.dtype = dt});
  p.requires_grad_();
  return p;
}

// Sets p's gradient to g (rounded to p's dtype), as a backward would.
inline void set_grad(const Tensor& p, const std::vector<double>& g) {
  Tensor q = p;
  q.set_grad(from_vector(g, p.shape(), {.dtype = p.dtype()}));
}

inline std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

// n class labels (I64) in [0, classes), every class used, on `dev`: a training step's targets.
inline Tensor class_labels(int64_t n, int64_t classes, Device dev = Device::cpu()) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = (i * 7) % classes;
  return from_vector(v, {n}, {.dtype = DType::I64}).to(dev);
}

// A fresh directory for one test under the system temp dir, removed (permissions restored) afterwards.
struct TempDir {
  std::filesystem::path dir;
  explicit TempDir(const std::string& tag) {
    dir = std::filesystem::temp_directory_path() / ("hg_" + tag + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all, std::filesystem::perm_options::add, ec);
    std::filesystem::remove_all(dir, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& name) const { return (dir / name).string(); }
};

// What fn writes to stderr (file descriptor 2, where the warnings go through fprintf).
template <class Fn>
inline std::string capture_stderr(const Fn& fn) {
  std::fflush(stderr);
  char path[] = "/tmp/hg_test_stderr_XXXXXX";
  const int fd = mkstemp(path);
  HG_CHECK(fd >= 0, "capture_stderr: cannot create a temporary file in /tmp");
  struct Redirect {  // restores fd 2 also when a REQUIRE inside fn throws
    int saved;
    explicit Redirect(int to) : saved(dup(2)) { dup2(to, 2); }
    ~Redirect() {
      std::fflush(stderr);
      dup2(saved, 2);
      close(saved);
    }
  };
  {
    Redirect r(fd);
    fn();
  }
  std::string text;
  char buf[512];
  lseek(fd, 0, SEEK_SET);
  for (ssize_t k; (k = read(fd, buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(k));
  close(fd);
  unlink(path);
  return text;
}

// Runs fn(0) .. fn(n-1) on n threads at once, joins them all, then rethrows on this thread the first
// exception any of them threw: one escaping a std::thread would abort the whole test run instead of
// failing this test.
template <class Fn>
inline void run_threads(int n, const Fn& fn) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int t = 0; t < n; ++t)
    threads.emplace_back([&fn, &errors, t] {
      try {
        fn(t);
      } catch (...) {
        errors[static_cast<size_t>(t)] = std::current_exception();
      }
    });
  for (auto& th : threads) th.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// The message of the hg::Error that f throws ("" and a failed check when it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const hg::Error& e) {
    return e.what();
  }
  FAIL_CHECK("no hg::Error was thrown");
  return "";
}

}  // namespace hg::test
