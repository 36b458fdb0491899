// cuda/counters.h: what each kind of call adds to the counts (the same on a GPU and on the emulated device).
#include <catch2/catch.hpp>

#include "cuda/graph.h"
#include "halfgrad.h"

using namespace hg;

TEST_CASE("gpu: counters count kernels, library calls, copies, graph launches and host syncs", "[gpu]") {
  const Tensor a = randn({8, 8}).to(Device::cuda()), b = randn({8, 8}).to(Device::cuda());
  cuda::synchronize(0);
  cuda::Counters c0 = cuda::counters();
  const Tensor s = a + b;  // one elementwise kernel
  cuda::Counters d = cuda::counters() - c0;
  CHECK(d.kernels == 1);
  CHECK(d.launches() == 1);
  CHECK(d.syncs == 0);

  c0 = cuda::counters();
  const Tensor m = matmul(a, b);  // one cuBLAS call
  d = cuda::counters() - c0;
  CHECK(d.library_calls == 1);
  CHECK(d.kernels == 0);

  c0 = cuda::counters();
  const Tensor up = randn({4}).to(Device::cuda());  // an upload through the staging ring: no wait
  d = cuda::counters() - c0;
  CHECK(d.copies == 1);
  CHECK(d.syncs == 0);

  c0 = cuda::counters();
  (void)sum(m).item<float>();  // a reduction, then a download: the host waits
  d = cuda::counters() - c0;
  CHECK(d.copies == 1);
  CHECK(d.syncs == 1);
  CHECK(d.kernels >= 1);

  c0 = cuda::counters();
  cuda::synchronize(0);
  CHECK((cuda::counters() - c0).syncs == 1);

  // (the body frees what it allocates: a graph allocation left alive cannot be relaunched)
  cuda::Graph g = cuda::Graph::capture(0, [&] { (void)(a * b + a); });
  c0 = cuda::counters();
  g.launch();
  g.launch();
  d = cuda::counters() - c0;
  CHECK(d.graph_launches == 2);  // a replay is one launch, whatever it holds
  CHECK(d.kernels == 0);
  CHECK(d.launches() == 2);
  cuda::synchronize(0);
  (void)s;
  (void)up;
}
