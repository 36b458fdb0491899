// The CPU backend's one registration entry, announced to core at start-up and run at the first lookup
// on the CPU (core/allocator.h's load_backend), as the CUDA backend's is at the first lookup on a GPU.
#include "cpu/register.h"

#include "core/allocator.h"

namespace hg::cpu {

void register_kernels() { HG_KERNEL_FAMILIES(HG_CALL_KERNEL_FAMILY) }

namespace {
const BackendRegistration g_cpu{DeviceType::CPU, &register_kernels};
}  // namespace

}  // namespace hg::cpu
