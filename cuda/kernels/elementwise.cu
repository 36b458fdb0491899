// Elementwise kernels for F32 and F64 (the engine is in elementwise.cuh).
#include "cuda/kernels/elementwise.cuh"

namespace hg::cuda {

template void elementwise<float>(const EwCall&, const BroadcastPlan&, const void* const*, void*);
template void elementwise<double>(const EwCall&, const BroadcastPlan&, const void* const*, void*);

}  // namespace hg::cuda
