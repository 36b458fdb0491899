// Elementwise kernels for F16 and BF16 (the engine is in elementwise.cuh).
#include "cuda/kernels/elementwise.cuh"

namespace hg::cuda {

template void elementwise<f16>(const EwCall&, const BroadcastPlan&, const void* const*, void*);
template void elementwise<bf16>(const EwCall&, const BroadcastPlan&, const void* const*, void*);

}  // namespace hg::cuda
