#pragma once
// Timing for the benchmarks and the examples' ms/step, one helper for the CPU and the GPU: warm-up calls,
// then `samples` samples, each running the body back to back as many times as make min_seconds (counted
// once, before the samples), and the median, fastest, slowest and mean sample per call. On a CUDA device
// the device is synchronized before a sample's clock starts and again before it stops, so a sample times
// the device's work and not only its launches (a GPU call returns when its work is queued).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

#include "core/device.h"
#include "cuda/graph.h"  // cuda::synchronize

namespace hg::bench {

struct Timing {
  double median = 0, min = 0, max = 0, mean = 0;  // seconds per call, over the samples
  int samples = 0;
  // (max - min) / median: how far apart the samples were (0.05 is 5% of the median)
  double spread() const { return median > 0 ? (max - min) / median : 0.0; }
};

struct TimingOptions {
  int warmup = 1;             // untimed calls first: first-touch pages, primitive and plan caches, handles
  int samples = 7;
  double min_seconds = 0.1;   // per sample; 0: one call per sample
  Device device = Device::cpu();
};

// The statistics of per-call times in seconds.
inline Timing timing_of(std::vector<double> per_call) {
  Timing t;
  if (per_call.empty()) return t;
  t.samples = static_cast<int>(per_call.size());
  t.mean = std::accumulate(per_call.begin(), per_call.end(), 0.0) / static_cast<double>(per_call.size());
  std::sort(per_call.begin(), per_call.end());
  t.median = per_call[per_call.size() / 2];
  t.min = per_call.front();
  t.max = per_call.back();
  return t;
}

inline void sync_device(Device d) {
  if (d.is_cuda()) cuda::synchronize(d.index);
}

template <class F>
Timing time_calls(F&& body, const TimingOptions& o = {}) {
  using clock = std::chrono::steady_clock;
  const auto seconds_since = [](clock::time_point t0) { return std::chrono::duration<double>(clock::now() - t0).count(); };
  for (int i = 0; i < o.warmup; ++i) body();
  // how many calls make min_seconds: found once, so a sample synchronizes once, at its end, and a GPU
  // queues its calls back to back as in a training loop
  int64_t calls = 1;
  if (o.min_seconds > 0) {
    sync_device(o.device);
    const auto t0 = clock::now();
    for (calls = 0; calls == 0 || seconds_since(t0) < o.min_seconds; ++calls) {
      body();
      sync_device(o.device);
    }
  }
  std::vector<double> per_call;
  for (int s = 0; s < std::max(o.samples, 1); ++s) {
    sync_device(o.device);
    const auto t0 = clock::now();
    for (int64_t c = 0; c < calls; ++c) body();
    sync_device(o.device);
    per_call.push_back(seconds_since(t0) / static_cast<double>(calls));
  }
  return timing_of(std::move(per_call));
}

// The same statistics for a loop timed as it runs (the examples' training steps): lap(n) after n steps
// synchronizes the device and records their mean time since the previous lap (or since start()) as one
// sample. A lap every step times each step; a lap every N steps waits for the device once per N steps,
// which a loop that never waits otherwise (a captured step, losses read in windows) keeps that way.
class StepTimer {
 public:
  explicit StepTimer(Device device = Device::cpu()) : device_(device) {}
  void start() {
    sync_device(device_);
    last_ = std::chrono::steady_clock::now();
  }
  void lap(int64_t steps = 1) {
    sync_device(device_);
    const auto now = std::chrono::steady_clock::now();
    if (steps > 0) {
      seconds_.push_back(std::chrono::duration<double>(now - last_).count() / static_cast<double>(steps));
      steps_ += steps;
    }
    last_ = now;
  }
  // A lap that is not a sample (a warm-up step: it makes the plans and buffers): its steps still count.
  void skip(int64_t steps = 1) {
    sync_device(device_);
    last_ = std::chrono::steady_clock::now();
    steps_ += steps;
  }
  int64_t steps() const { return steps_; }
  Timing summary() const { return timing_of(seconds_); }

 private:
  Device device_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
  std::vector<double> seconds_;
  int64_t steps_ = 0;
};

// The median alone, what most tables print.
template <class F>
double median_seconds(F&& body, int samples = 7, double min_seconds = 0.1, Device device = Device::cpu()) {
  return time_calls(body, {.samples = samples, .min_seconds = min_seconds, .device = device}).median;
}

}  // namespace hg::bench
