#pragma once
// The coverage of the kernels a process looked up, with the elementwise table's per-op detail. The tables
// themselves are core/dispatch_table.h (a backend is loaded at the first lookup on its device: core's
// load_backend); each family's tables and kernel signatures are ops/kernels/<family>.h.
#include <vector>

#include "core/dispatch_table.h"
#include "core/tensor.h"
#include "ops/ew.h"

namespace hg {

// Runs one elementwise kernel (any mode) on same-dtype, same-device inputs into out: the building
// block of the elementwise ops (ops/elementwise.h), also used by backward functions.
void run_elementwise(const char* op, const EwCall& call, const std::vector<Tensor>& ins, Tensor& out);

// table_coverage(d) with the elementwise table's finer grain: a row per EwOp after the table's own row.
std::vector<KernelCoverage> kernel_coverage(DeviceType d);
// Records that (op, dtype) ran on device d (ops/elementwise.cpp), for kernel_coverage.
void note_ew_call(DeviceType d, EwOp op, DType t);

}  // namespace hg
