#include "ops/dispatch.h"

#include <mutex>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "ops/kernels/elementwise.h"
#include "ops/kernels/gemm.h"
#include "ops/kernels/reduce.h"

namespace hg {

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

}  // namespace hg
