#pragma once
// Kernel tables indexed by [device][dtype]. The CPU backend fills its entries when a table is first
// used; the CUDA backend (cuda/register.cpp) fills its own the first time a CUDA tensor reaches a
// table, so a CPU-only program never touches the CUDA driver. Public ops look kernels up here and
// never include backend headers.
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "ops/ew.h"

namespace hg {

// Loads the CUDA backend library (cuda/api/loader.cpp) and its registrations once; a no-op for the CPU.
// Throws hg::Error naming what is missing (the backend, a CUDA library, the driver, a device).
void ensure_backend(DeviceType t);

// Which kernels a process has looked up, per table and device: a backend's test suite prints it
// (tests/gpu) to show that every kernel it registered ran. Counts distinct dtype slots.
struct KernelCoverage {
  std::string table;
  int registered = 0, called = 0;
  std::vector<DType> missing;  // registered, never looked up
};
std::vector<KernelCoverage> kernel_coverage(DeviceType d);
// The elementwise table's finer grain: which (EwOp, dtype) pairs ran on device d (ops/elementwise.cpp).
void note_ew_call(DeviceType d, EwOp op, DType t);

// Every table (and each copy) registers itself for kernel_coverage; a lookup marks its slot.
class DispatchTableBase {
 public:
  const char* name() const { return name_; }

 protected:
  explicit DispatchTableBase(const char* name);
  DispatchTableBase(const DispatchTableBase& o);
  DispatchTableBase& operator=(const DispatchTableBase&) = delete;
  ~DispatchTableBase();
  void mark_set(DeviceType d, DType t) { state_[static_cast<int>(d)][static_cast<int>(t)] |= kSet; }
  void mark_called(DeviceType d, DType t) const {
    state_[static_cast<int>(d)][static_cast<int>(t)].fetch_or(kCalled, std::memory_order_relaxed);
  }

 private:
  friend std::vector<KernelCoverage> kernel_coverage(DeviceType d);
  static constexpr uint8_t kSet = 1, kCalled = 2;
  const char* name_;
  mutable std::atomic<uint8_t> state_[kNumDeviceTypes][kNumDTypes] = {};
};

template <class Fn>
class DispatchTable : public DispatchTableBase {
 public:
  explicit DispatchTable(const char* name) : DispatchTableBase(name) {}
  void set(DeviceType d, DType t, Fn f) {
    fns_[static_cast<int>(d)][static_cast<int>(t)] = f;
    mark_set(d, t);
  }
  void set_all_floating(DeviceType d, Fn f) {
    for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64}) set(d, t, f);
  }
  Fn get(Device dev, DType t) const {
    if (!dev.is_cpu()) ensure_backend(dev.type);
    Fn f = fns_[static_cast<int>(dev.type)][static_cast<int>(t)];
    HG_CHECK(f != nullptr, name(), ": no kernel for dtype ", t, " on device ", dev,
             "; supported dtypes are the floating ones (F32, F16, BF16, F64) unless the op says otherwise");
    mark_called(dev.type, t);
    return f;
  }

 private:
  Fn fns_[kNumDeviceTypes][kNumDTypes] = {};
};

}  // namespace hg
