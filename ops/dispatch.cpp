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

// ---- kernel coverage ----
namespace {

struct Registry {
  std::mutex mu;
  std::vector<const DispatchTableBase*> tables;
  std::atomic<uint8_t> ew_calls[kNumDeviceTypes][kNumEwOps][kNumDTypes] = {};
};

Registry& registry() {
  static Registry* r = new Registry;  // outlives the tables, which are function-local statics
  return *r;
}

}  // namespace

DispatchTableBase::DispatchTableBase(const char* name) : name_(name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.tables.push_back(this);
}

DispatchTableBase::DispatchTableBase(const DispatchTableBase& o) : DispatchTableBase(o.name_) {
  for (int d = 0; d < kNumDeviceTypes; ++d)
    for (int t = 0; t < kNumDTypes; ++t) state_[d][t] = o.state_[d][t].load();
}

DispatchTableBase::~DispatchTableBase() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::erase(r.tables, this);
}

void note_ew_call(DeviceType d, EwOp op, DType t) {
  registry().ew_calls[static_cast<int>(d)][static_cast<int>(op)][static_cast<int>(t)].store(
      1, std::memory_order_relaxed);
}

std::vector<KernelCoverage> kernel_coverage(DeviceType d) {
  const DispatchTableBase* ew = &ew_kernels();
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<KernelCoverage> rows;
  const int dev = static_cast<int>(d);
  for (const DispatchTableBase* tb : r.tables) {
    KernelCoverage row{tb->name_, 0, 0, {}};
    for (int t = 0; t < kNumDTypes; ++t) {
      const uint8_t st = tb->state_[dev][t].load();
      if (!(st & DispatchTableBase::kSet)) continue;
      ++row.registered;
      if (st & DispatchTableBase::kCalled) ++row.called;
      else row.missing.push_back(static_cast<DType>(t));
    }
    if (row.registered == 0) continue;
    rows.push_back(std::move(row));
    if (tb != ew) continue;
    // the elementwise table runs one kernel per (op, dtype): each op is a row of its own
    for (int op = 0; op < kNumEwOps; ++op) {
      KernelCoverage e{std::string("elementwise ") + ew_op_name(static_cast<EwOp>(op)), 0, 0, {}};
      for (int t = 0; t < kNumDTypes; ++t) {
        if (!(tb->state_[dev][t].load() & DispatchTableBase::kSet)) continue;
        ++e.registered;
        if (r.ew_calls[dev][op][t].load()) ++e.called;
        else e.missing.push_back(static_cast<DType>(t));
      }
      rows.push_back(std::move(e));
    }
  }
  return rows;
}

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
