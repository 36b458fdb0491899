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
#include "ops/broadcast.h"
#include "ops/ew.h"
#include "ops/gemm.h"

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

// ---- kernel signatures ----------------------------------------------------------------------
// Elementwise: out[i] = adapter(ins[0][...], ...) over a broadcast plan; all buffers of the table's dtype.
using EwKernel = void (*)(const EwCall& call, const BroadcastPlan& plan, const void* const* ins, void* out);
// Conversion of n contiguous elements between any two dtypes on one device.
using CastKernel = void (*)(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n);
// Strided copy (permute, transpose, slice, cat): dst[sum i_d*dst_strides_d] = src[sum i_d*src_strides_d].
struct StridedCopy {
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t src_strides[kMaxDims] = {};
  int64_t dst_strides[kMaxDims] = {};
  const void* src = nullptr;
  void* dst = nullptr;
  int elem_size = 4;
};
using CopyKernel = void (*)(const StridedCopy& c);
using GemmKernel = void (*)(const GemmArgs& args);
// Reduction over the middle dim of contiguous x viewed as (outer, r, inner) -> out (outer, inner).
// Accumulates in F32 (F64 for F64); the result is multiplied by `scale` before the one rounding
// (mean passes 1/r). Max/Min also write the first index of the extreme into `indices` when non-null,
// and propagate NaN like torch.max.
enum class ReduceOp : uint8_t { Sum, Max, Min };
struct ReduceArgs {
  ReduceOp op = ReduceOp::Sum;
  int64_t outer = 1, r = 1, inner = 1;
  double scale = 1.0;
  const void* x = nullptr;
  void* out = nullptr;
  int64_t* indices = nullptr;
};
using ReduceKernel = void (*)(const ReduceArgs& args);
// Softmax (or log-softmax) over the middle dim of (outer, r, inner), max-subtracted, F32 math.
struct SoftmaxArgs {
  bool log = false;
  int64_t outer = 1, r = 1, inner = 1;
  const void* x = nullptr;
  void* y = nullptr;
};
using SoftmaxKernel = void (*)(const SoftmaxArgs& args);
// dx from y = softmax(x) (or log_softmax) and dy, same layout.
struct SoftmaxBackwardArgs {
  bool log = false;
  int64_t outer = 1, r = 1, inner = 1;
  const void* y = nullptr;
  const void* dy = nullptr;
  void* dx = nullptr;
};
using SoftmaxBackwardKernel = void (*)(const SoftmaxBackwardArgs& args);

DispatchTable<EwKernel>& ew_kernels();
DispatchTable<CastKernel>& cast_kernels();  // indexed by the source dtype's slot F32 ("any")
DispatchTable<CopyKernel>& copy_kernels();  // indexed by slot F32 ("any")
DispatchTable<GemmKernel>& gemm_kernels();
DispatchTable<ReduceKernel>& reduce_kernels();
DispatchTable<SoftmaxKernel>& softmax_kernels();
DispatchTable<SoftmaxBackwardKernel>& softmax_backward_kernels();

// CPU registrations (ops/cpu/*.cpp).
namespace cpu {
void register_elementwise(DispatchTable<EwKernel>& t);
void cast(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n);
void strided_copy(const StridedCopy& c);
void register_reduce(DispatchTable<ReduceKernel>& t);                    // ops/cpu/reduce.cpp
void register_softmax(DispatchTable<SoftmaxKernel>& fwd, DispatchTable<SoftmaxBackwardKernel>& bwd);
}  // namespace cpu

}  // namespace hg
