#include "core/allocator.h"

#include <atomic>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <sys/mman.h>

#include "core/error.h"

namespace hg {
namespace {

struct Stats {
  std::atomic<int64_t> current{0};
  std::atomic<int64_t> peak{0};
  std::atomic<int64_t> by_dtype[kNumDTypes] = {};
};
constexpr int kMaxDevices = 16;
Stats g_stats[kNumDeviceTypes][kMaxDevices];

Stats& stats(Device d) {
  HG_CHECK(d.index >= 0 && d.index < kMaxDevices, "memory: device index ", d.index, " is out of range [0, ",
           kMaxDevices, ")");
  return g_stats[static_cast<int>(d.type)][d.index];
}

// Host blocks are cached and reused. Large ones: a fresh 64 MiB block costs ~16K page faults and
// the kernel zeroing it, several times the cost of a memory-bound op on it; they are rounded to 2 MiB
// (transparent huge pages). Small ones (< 1 MiB) are rounded up to a power of two: a training step of
// a small model allocates dozens of activations and gradients, and malloc's aligned path
// (memalign, consolidation) cost more than the ops themselves. All cached bytes together stay under
// kCacheCap. Sanitizer builds skip the cache so ASan still sees every use after free.
class CpuAllocator final : public Allocator {
 public:
  void* raw_alloc(size_t nbytes, Device) override {
    const size_t size = rounded(nbytes);
    if (cacheable()) {
      std::lock_guard<std::mutex> lock(mu_);
      std::vector<void*>& list = bin(size);
      if (!list.empty()) {
        void* p = list.back();
        list.pop_back();
        cached_ -= size;
        return p;
      }
    }
    // 64-byte alignment: one cache line, and what AVX-512 loads like; 2 MiB for huge pages (only for
    // sizes that are multiples of it: aligned_alloc requires the size to be a multiple of the alignment).
    const bool huge = size % kHuge == 0;
    void* p = std::aligned_alloc(huge ? kHuge : 64, size);
    HG_CHECK(p != nullptr, "empty: out of host memory allocating ", nbytes, " bytes");
#ifdef MADV_HUGEPAGE
    if (huge) madvise(p, size, MADV_HUGEPAGE);
#endif
    return p;
  }
  void raw_free(void* p, size_t nbytes, Device) override {
    const size_t size = rounded(nbytes);
    if (cacheable()) {
      std::lock_guard<std::mutex> lock(mu_);
      if (cached_ + size <= kCacheCap) {
        bin(size).push_back(p);
        cached_ += size;
        return;
      }
    }
    std::free(p);
  }
  void empty_cache() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& blocks : small_)
      for (void* p : blocks) std::free(p);
    for (auto& [size, blocks] : large_)
      for (void* p : blocks) std::free(p);
    for (auto& blocks : small_) blocks.clear();
    large_.clear();
    cached_ = 0;
  }
  int64_t cached_bytes() {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int64_t>(cached_);
  }

 private:
  static constexpr size_t kBig = size_t{1} << 20, kHuge = size_t{2} << 20, kCacheCap = size_t{2} << 30;
  static constexpr int kSmallBins = 21;  // 2^0 .. 2^20 bytes (only 2^6 and up are used)
  static size_t rounded(size_t n) {
    if (n >= kBig) return (n + kHuge - 1) / kHuge * kHuge;
    size_t s = 64;
    while (s < n) s <<= 1;
    return s;
  }
  std::vector<void*>& bin(size_t size) {
    if (size >= kBig) return large_[size];
    return small_[std::countr_zero(size)];
  }
  static constexpr bool cacheable() {
#if defined(__SANITIZE_ADDRESS__)
    return false;
#else
    return true;
#endif
  }
  std::mutex mu_;
  std::vector<void*> small_[kSmallBins];
  std::unordered_map<size_t, std::vector<void*>> large_;
  size_t cached_ = 0;
};

// Never destroyed: tensors held in static objects may still free blocks after main returns.
CpuAllocator& g_cpu_allocator = *new CpuAllocator;
std::atomic<Allocator*> g_allocators[kNumDeviceTypes] = {&g_cpu_allocator, nullptr};

// Each device type's backend registration and whether it has run; constant-initialized, so a backend's
// start-up code may announce itself before or after this file's dynamic initializers run.
struct Backends {
  std::atomic<void (*)()> registration[kNumDeviceTypes] = {};
  std::atomic<bool> loaded[kNumDeviceTypes] = {};
  std::once_flag once[kNumDeviceTypes];
};
constinit Backends g_backends;

}  // namespace

void Allocator::copy(void* dst, Device, const void* src, Device, size_t nbytes) {
  std::memcpy(dst, src, nbytes);
}

void Allocator::fill(void* dst, Device, int64_t n, size_t elem_size, uint64_t pattern) {
  auto* bytes = static_cast<unsigned char*>(dst);
  for (int64_t i = 0; i < n; ++i) std::memcpy(bytes + static_cast<size_t>(i) * elem_size, &pattern, elem_size);
}

void copy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, size_t nbytes) {
  if (nbytes == 0) return;
  const Device dev = dst_dev.is_cpu() ? src_dev : dst_dev;
  Allocator* a = get_allocator(dev.type);
  HG_CHECK(a != nullptr, "copy: no backend for device ", dev, "; is this a CUDA build with a GPU?");
  a->copy(dst, dst_dev, src, src_dev, nbytes);
}

void set_allocator(DeviceType t, Allocator* a) { g_allocators[static_cast<int>(t)] = a; }
void set_backend_registration(DeviceType t, void (*register_kernels)()) {
  g_backends.registration[static_cast<int>(t)] = register_kernels;
}
void load_backend(DeviceType t) {
  const int i = static_cast<int>(t);
  if (g_backends.loaded[i].load(std::memory_order_acquire)) [[likely]] return;
  void (*reg)() = g_backends.registration[i].load();
  if (reg == nullptr) return;  // no backend for t in this build: the lookup or allocation says so
  // a registration that throws (no driver, no device) leaves the flag unset: the next call tries again
  std::call_once(g_backends.once[i], [&] {
    reg();
    g_backends.loaded[i].store(true, std::memory_order_release);
  });
}
Allocator* get_allocator(DeviceType t) {
  Allocator* a = g_allocators[static_cast<int>(t)];
  if (a == nullptr) {
    load_backend(t);  // throws a clear hg::Error when the backend is missing or has no device
    a = g_allocators[static_cast<int>(t)];
  }
  return a;
}

void* device_alloc(size_t nbytes, Device dev, std::optional<DType> dtype) {
  if (nbytes == 0) return nullptr;
  Allocator* a = get_allocator(dev.type);
  HG_CHECK(a != nullptr, "allocate: no allocator for device ", dev,
           "; no backend registered one (hg::cuda::unavailable_reason() says why); use Device::cpu()");
  void* p = a->raw_alloc(nbytes, dev);
  Stats& s = stats(dev);
  const int64_t now = s.current.fetch_add(static_cast<int64_t>(nbytes)) + static_cast<int64_t>(nbytes);
  int64_t peak = s.peak.load();
  while (now > peak && !s.peak.compare_exchange_weak(peak, now)) {
  }
  if (dtype) s.by_dtype[static_cast<int>(*dtype)].fetch_add(static_cast<int64_t>(nbytes));
  return p;
}

void device_free(void* p, size_t nbytes, Device dev, std::optional<DType> dtype) {
  if (p == nullptr) return;
  get_allocator(dev.type)->raw_free(p, nbytes, dev);
  stats(dev).current.fetch_sub(static_cast<int64_t>(nbytes));
  if (dtype) stats(dev).by_dtype[static_cast<int>(*dtype)].fetch_sub(static_cast<int64_t>(nbytes));
}

namespace memory {
int64_t allocated(Device dev) { return stats(dev).current.load(); }
int64_t peak_allocated(Device dev) { return stats(dev).peak.load(); }
void reset_peak(Device dev) { stats(dev).peak.store(stats(dev).current.load()); }
int64_t allocated(Device dev, DType dt) { return stats(dev).by_dtype[static_cast<int>(dt)].load(); }
int64_t cached_host_bytes() { return g_cpu_allocator.cached_bytes(); }
void empty_host_cache() { g_cpu_allocator.empty_cache(); }
}  // namespace memory

}  // namespace hg
