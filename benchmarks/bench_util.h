#pragma once
// Timing for the benchmarks: warm-up, then the median of `samples` samples, each running the body
// back to back until it lasts at least min_seconds.
#include <algorithm>
#include <chrono>
#include <vector>

namespace hg::bench {

template <class F>
double median_seconds(F&& body, int samples = 7, double min_seconds = 0.1) {
  using clock = std::chrono::steady_clock;
  body();  // warm-up: first-touch pages, primitive caches
  std::vector<double> per_call;
  for (int s = 0; s < samples; ++s) {
    int64_t calls = 0;
    const auto t0 = clock::now();
    double dt = 0;
    do {
      body();
      ++calls;
      dt = std::chrono::duration<double>(clock::now() - t0).count();
    } while (dt < min_seconds);
    per_call.push_back(dt / static_cast<double>(calls));
  }
  std::sort(per_call.begin(), per_call.end());
  return per_call[per_call.size() / 2];
}

}  // namespace hg::bench
