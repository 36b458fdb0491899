// cuda/counters.h: the counts live in libhalfgrad, so a program reads them without loading the backend,
// which increments them (relaxed atomics: a count, not an ordering).
#include "cuda/counters.h"

#include <atomic>

namespace hg::cuda {
namespace {
std::atomic<int64_t> g_kernels{0}, g_library_calls{0}, g_copies{0}, g_graph_launches{0}, g_syncs{0};
}  // namespace

Counters counters() {
  constexpr auto r = std::memory_order_relaxed;
  return {g_kernels.load(r), g_library_calls.load(r), g_copies.load(r), g_graph_launches.load(r), g_syncs.load(r)};
}

namespace detail {
void count_kernel() { g_kernels.fetch_add(1, std::memory_order_relaxed); }
void count_library_call() { g_library_calls.fetch_add(1, std::memory_order_relaxed); }
void count_copy() { g_copies.fetch_add(1, std::memory_order_relaxed); }
void count_graph_launch() { g_graph_launches.fetch_add(1, std::memory_order_relaxed); }
void count_sync() { g_syncs.fetch_add(1, std::memory_order_relaxed); }
}  // namespace detail

}  // namespace hg::cuda
