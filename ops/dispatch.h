#pragma once
// The ops' side of dispatch: loading a backend on its first use, and the coverage of the kernels a
// process looked up with the elementwise table's per-op detail. The tables themselves are
// core/dispatch_table.h; each family's tables and kernel signatures are ops/kernels/<family>.h.
#include <vector>

#include "core/dispatch_table.h"
#include "ops/ew.h"

namespace hg {

// Loads the CUDA backend library (cuda/api/loader.cpp) and its registrations once; a no-op for the CPU.
// Throws hg::Error naming what is missing (the backend, a CUDA library, the driver, a device). It is the
// loader core's load_backend calls (registered at start-up by ops/dispatch.cpp).
void ensure_backend(DeviceType t);

// table_coverage(d) with the elementwise table's finer grain: a row per EwOp after the table's own row.
std::vector<KernelCoverage> kernel_coverage(DeviceType d);
// Records that (op, dtype) ran on device d (ops/elementwise.cpp), for kernel_coverage.
void note_ew_call(DeviceType d, EwOp op, DType t);

}  // namespace hg
