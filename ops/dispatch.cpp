#include "ops/dispatch.h"

#include <mutex>

#include "core/allocator.h"

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

DispatchTable<EwKernel>& ew_kernels() {
  static DispatchTable<EwKernel> t = [] {
    DispatchTable<EwKernel> d("elementwise");
    cpu::register_elementwise(d);
    return d;
  }();
  return t;
}

DispatchTable<CastKernel>& cast_kernels() {
  static DispatchTable<CastKernel> t = [] {
    DispatchTable<CastKernel> d("to(dtype)");
    d.set(DeviceType::CPU, DType::F32, &cpu::cast);
    return d;
  }();
  return t;
}

DispatchTable<CopyKernel>& copy_kernels() {
  static DispatchTable<CopyKernel> t = [] {
    DispatchTable<CopyKernel> d("copy");
    d.set(DeviceType::CPU, DType::F32, &cpu::strided_copy);
    return d;
  }();
  return t;
}

DispatchTable<GemmKernel>& gemm_kernels() {
  static DispatchTable<GemmKernel> t = [] {
    DispatchTable<GemmKernel> d("matmul");
    d.set_all_floating(DeviceType::CPU, &cpu::gemm);
    return d;
  }();
  return t;
}

DispatchTable<ReduceKernel>& reduce_kernels() {
  static DispatchTable<ReduceKernel> t = [] {
    DispatchTable<ReduceKernel> d("reduce");
    cpu::register_reduce(d);
    return d;
  }();
  return t;
}

namespace {
struct SoftmaxTables {
  DispatchTable<SoftmaxKernel> fwd{"softmax"};
  DispatchTable<SoftmaxBackwardKernel> bwd{"softmax backward"};
  SoftmaxTables() { cpu::register_softmax(fwd, bwd); }
};
SoftmaxTables& softmax_tables() {
  static SoftmaxTables t;
  return t;
}
}  // namespace

DispatchTable<SoftmaxKernel>& softmax_kernels() { return softmax_tables().fwd; }
DispatchTable<SoftmaxBackwardKernel>& softmax_backward_kernels() { return softmax_tables().bwd; }

}  // namespace hg
