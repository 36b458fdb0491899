#pragma once
// The CPU backend's registration, the peer of cuda/register.h (docs/ARCHITECTURE.md, "Dispatch and
// registration"): register_kernels() (cpu/register.cpp) fills the CPU's slots of every kernel table by
// calling each family's register_<family>() (ops/kernels/families.h), and core's load_backend runs it once,
// at the first lookup on the CPU. Each family's function sets its tables' CPU slots, one line per
// kernel, beside those kernels (cpu/<family>.cpp).
#include "ops/kernels/families.h"

namespace hg::cpu {

void register_kernels();
HG_KERNEL_FAMILIES(HG_DECLARE_KERNEL_FAMILY)

}  // namespace hg::cpu
