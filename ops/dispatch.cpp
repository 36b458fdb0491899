#include "ops/dispatch.h"

#include <mutex>

#include "core/allocator.h"

namespace hg {

#if HG_HAS_CUDA
namespace cuda {
void register_backend();  // cuda/register.cpp
}
#endif

void ensure_backend(DeviceType t) {
  if (t == DeviceType::CPU) return;
#if HG_HAS_CUDA
  static std::once_flag once;
  std::call_once(once, [] { cuda::register_backend(); });
#else
  HG_FAIL("device: this halfgrad was built without the CUDA backend (HG_CUDA=OFF or no nvcc); rebuild with "
          "-DHG_CUDA=ON or keep tensors on Device::cpu()");
#endif
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

#if !HG_HAS_CUDA
namespace cuda {
bool is_available() { return false; }
int device_count() { return 0; }
}  // namespace cuda
#endif

}  // namespace hg
