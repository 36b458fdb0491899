#pragma once
// The kernel families of the backend contract, in one list: each is one ops/kernels/<family>.h (or, for
// conv, gemm and scaler, the header of that name), and every backend implements each one as
// `void register_<family>()`, which sets that family's slots of its tables (cpu/register.h,
// cuda/register.h). A backend's register_kernels() calls them all through this list, so a backend that
// lacks a family fails to link instead of failing at a lookup. A new family is one line here.
#define HG_KERNEL_FAMILIES(X) \
  X(conv)                     \
  X(dropout)                  \
  X(elementwise)              \
  X(embedding)                \
  X(fp8)                      \
  X(gemm)                     \
  X(loss)                     \
  X(norm)                     \
  X(optim)                    \
  X(pool)                     \
  X(reduce)                   \
  X(rounding)                 \
  X(scaler)

#define HG_DECLARE_KERNEL_FAMILY(family) void register_##family();
#define HG_CALL_KERNEL_FAMILY(family) register_##family();
