// Embedding gather and its scatter-add gradient on the GPU, one thread per element of the (n, dim)
// lookup. The gradient accumulates with atomicAdd into a float (double for F64) buffer that the
// launcher zeroes first; ops/embedding.cpp casts it to weight's dtype once. An index outside
// [0, num) cannot throw here without a host sync: its output row is NaN and it adds no gradient.
#include <cmath>

#include "cuda/check.h"
#include "cuda/context.h"
#include "cuda/kernels/kernels.h"
#include "cuda/kernels/loss.h"
#include "cuda/launch.h"
#include "cuda/register.h"
#include "ops/kernels/embedding.h"

namespace hg::cuda {
namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void __launch_bounds__(kThreads)
    gather_kernel(const int64_t* __restrict__ indices, const T* __restrict__ w, T* __restrict__ y, int64_t n,
                  int64_t num, int64_t dim) {
  const int64_t total = n * dim, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t row = i / dim, k = i - row * dim, v = indices[row];
    y[i] = v >= 0 && v < num ? w[v * dim + k] : store<T>(compute_t<T>(NAN));
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    scatter_add_kernel(const int64_t* __restrict__ indices, const T* __restrict__ dy, compute_t<T>* __restrict__ grad,
                       int64_t n, int64_t num, int64_t dim, int64_t padding_idx) {
  const int64_t total = n * dim, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t row = i / dim, k = i - row * dim, v = indices[row];
    if (v >= 0 && v < num && v != padding_idx) atomicAdd(grad + v * dim + k, load(dy[i]));
  }
}

}  // namespace

template <class T>
void embedding_forward(const EmbeddingArgs& a) {
  if (a.n * a.dim == 0) return;
  DeviceContext& ctx = context_for(a.y);
  launch(gather_kernel<T>, grid_for(ctx, a.n * a.dim, kThreads), kThreads, 0, ctx.stream,
      a.indices, static_cast<const T*>(a.weight), static_cast<T*>(a.y), a.n, a.num, a.dim);
}

template <class T>
void embedding_backward(const EmbeddingArgs& a) {
  if (a.num * a.dim == 0) return;
  DeviceContext& ctx = context_for(a.grad);
  detail::count_kernel();
  HG_CUDA_CHECK(cudaMemsetAsync(a.grad, 0, static_cast<size_t>(a.num * a.dim) * sizeof(compute_t<T>), ctx.stream));
  if (a.n == 0) return;
  launch(scatter_add_kernel<T>, grid_for(ctx, a.n * a.dim, kThreads), kThreads, 0, ctx.stream,
      a.indices, static_cast<const T*>(a.dy), static_cast<compute_t<T>*>(a.grad), a.n, a.num, a.dim, a.padding_idx);
}

#define HG_INSTANTIATE(T)                                         \
  template void embedding_forward<T>(const EmbeddingArgs&);       \
  template void embedding_backward<T>(const EmbeddingArgs&);
HG_FOR_FLOATING(HG_INSTANTIATE)
#undef HG_INSTANTIATE

void register_embedding() {
  embedding_kernels().set_floating(DeviceType::CUDA, []<class T>(type_tag<T>) { return &embedding_forward<T>; });
  embedding_backward_kernels().set_floating(DeviceType::CUDA, []<class T>(type_tag<T>) { return &embedding_backward<T>; });
}

}  // namespace hg::cuda
