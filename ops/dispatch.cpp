#include "ops/dispatch.h"

#include <mutex>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/register.h"
#include "ops/kernels/elementwise.h"
#include "ops/kernels/gemm.h"
#include "ops/kernels/reduce.h"

namespace hg {

namespace cuda {
// cuda/api/loader.cpp: loads the CUDA backend library and registers its kernels; throws hg::Error naming
// what is missing (the library, a driver, a device) and the fix.
void register_backend();
}  // namespace cuda

void ensure_backend(DeviceType t) {
  if (t == DeviceType::CPU) return;
  static std::once_flag once;
  std::call_once(once, [] { cuda::register_backend(); });  // a failure throws and is retried next time
}

namespace {
// Lets core/ load a backend when memory is first allocated on its device.
const bool g_loader_registered = [] {
  set_backend_loader(&ensure_backend);
  return true;
}();
}  // namespace

// ---- kernel coverage: the elementwise table per op ----
namespace {
std::atomic<uint8_t> g_ew_calls[kNumDeviceTypes][kNumEwOps][kNumDTypes] = {};
}  // namespace

void note_ew_call(DeviceType d, EwOp op, DType t) {
  g_ew_calls[static_cast<int>(d)][static_cast<int>(op)][static_cast<int>(t)].store(1, std::memory_order_relaxed);
}

std::vector<KernelCoverage> kernel_coverage(DeviceType d) {
  const DispatchTableBase& ew = ew_kernels();
  std::vector<KernelCoverage> rows;
  for (KernelCoverage& row : table_coverage(d)) {
    const bool is_ew = row.table == ew.name();
    rows.push_back(std::move(row));
    if (!is_ew) continue;
    // the elementwise table runs one kernel per (op, dtype): each op is a row of its own
    for (int op = 0; op < kNumEwOps; ++op) {
      KernelCoverage e{std::string("elementwise ") + ew_op_name(static_cast<EwOp>(op)), 0, 0, {}};
      for (int i = 0; i < kNumDTypes; ++i) {
        const DType t = static_cast<DType>(i);
        if (!ew.registered(d, t)) continue;
        ++e.registered;
        if (g_ew_calls[static_cast<int>(d)][op][i].load()) ++e.called;
        else e.missing.push_back(t);
      }
      rows.push_back(std::move(e));
    }
  }
  return rows;
}

DispatchTable<EwKernel>& ew_kernels() {
  static DispatchTable<EwKernel> t{"elementwise", cpu::register_elementwise};
  return t;
}

DispatchTable<CastKernel>& cast_kernels() {
  static DispatchTable<CastKernel> t{"to(dtype)", cpu::register_cast};
  return t;
}

DispatchTable<CopyKernel>& copy_kernels() {
  static DispatchTable<CopyKernel> t{"copy", cpu::register_copy};
  return t;
}

DispatchTable<GemmKernel>& gemm_kernels() {
  static DispatchTable<GemmKernel> t{"matmul", cpu::register_gemm};
  return t;
}

DispatchTable<ReduceKernel>& reduce_kernels() {
  static DispatchTable<ReduceKernel> t{"reduce", cpu::register_reduce};
  return t;
}

DispatchTable<SoftmaxKernel>& softmax_kernels() {
  static DispatchTable<SoftmaxKernel> t{"softmax", cpu::register_softmax};
  return t;
}

DispatchTable<SoftmaxBackwardKernel>& softmax_backward_kernels() {
  static DispatchTable<SoftmaxBackwardKernel> t{"softmax backward", cpu::register_softmax_backward};
  return t;
}

}  // namespace hg
