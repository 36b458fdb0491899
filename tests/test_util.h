#pragma once
// Shared by the op tests: the relative tolerance of a result stored in each dtype, against the F64
// result of the same rounded inputs (about a few units of the dtype's last place, with room for
// F32 accumulation order).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace hg::test {

inline double dtype_tolerance(DType dt) {
  switch (dt) {
    case DType::BF16: return 1e-2;  // 8-bit significand: 2^-8 = 3.9e-3 per rounding
    case DType::F16: return 2e-3;   // 11-bit significand: 2^-11 = 4.9e-4 per rounding
    case DType::F64: return 1e-12;
    default: return 1e-5;
  }
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

}  // namespace hg::test
