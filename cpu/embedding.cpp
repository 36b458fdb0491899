// CPU embedding kernels: the row gather (with the bounds check that names a bad index) and the
// deterministic scatter-add of its gradient.
#include <omp.h>

#include <cstring>

#include "core/dispatch_table.h"
#include "core/parallel.h"
#include "cpu/register.h"
#include "ops/embedding.h"
#include "ops/kernels/embedding.h"

namespace hg::cpu {
namespace {

constexpr int64_t kParallel = 32768;  // elements below which one thread is faster

template <class T>
void embedding_forward(const EmbeddingArgs& a) {
  for (int64_t i = 0; i < a.n; ++i) {  // before the parallel region: an exception must not leave one
    const int64_t v = a.indices[i];
    HG_CHECK(v >= 0 && v < a.num, "embedding: index ", v, " at position ", i, " is out of range for ", a.num,
             " embeddings; indices must be in [0, ", a.num, ")");
  }
  const T* w = static_cast<const T*>(a.weight);
  T* y = static_cast<T*>(a.y);
  const size_t row_bytes = static_cast<size_t>(a.dim) * sizeof(T);
  if (row_bytes == 0) return;  // rows of no elements (an empty tensor's data pointer may be null)
  parallel_for(a.n, a.n * a.dim > kParallel,
               [&](int64_t i) { std::memcpy(y + i * a.dim, w + a.indices[i] * a.dim, row_bytes); });
}

// Each piece (one per thread) owns a contiguous range of weight rows and adds, in index order, every dy
// row whose index falls in it: no two threads touch one row, and each row's sum has the same order for
// any thread count.
template <class T>
void embedding_backward(const EmbeddingArgs& a) {
  using C = compute_t<T>;
  C* g = static_cast<C*>(a.grad);
  const T* dy = static_cast<const T*>(a.dy);
  if (a.num * a.dim == 0) return;  // nothing to write (the pointer may be null)
  std::memset(g, 0, static_cast<size_t>(a.num * a.dim) * sizeof(C));
  const bool parallel = a.n * a.dim > kParallel;
  const int64_t pieces = parallel ? runtime_threads() : 1;
  parallel_for(pieces, parallel, [&](int64_t p) {
    const int64_t lo = a.num * p / pieces, hi = a.num * (p + 1) / pieces;
    for (int64_t i = 0; i < a.n; ++i) {
      const int64_t v = a.indices[i];
      if (v < lo || v >= hi || v == a.padding_idx) continue;
      C* dst = g + v * a.dim;
      const T* src = dy + i * a.dim;
      for (int64_t k = 0; k < a.dim; ++k) dst[k] += load(src[k]);
    }
  });
}

}  // namespace


// This family's CPU kernels into their tables (cpu/register.cpp's register_kernels calls it).
void register_embedding() {
  embedding_kernels().set_floating(DeviceType::CPU, []<class T>(type_tag<T>) { return &embedding_forward<T>; });
  embedding_backward_kernels().set_floating(DeviceType::CPU, []<class T>(type_tag<T>) { return &embedding_backward<T>; });
}

}  // namespace hg::cpu
