// The emulated device itself (HG_CUDA=EMULATE builds only): that its executor keeps CUDA's rules and
// shows their breaches (a race changes results between thread orders, a divergent barrier or a bad
// shuffle mask is a device fault), that capture refuses what the driver refuses, that freed memory is
// poisoned, and that the cuBLAS and cuBLASLt stand-ins validate like the libraries. The rest of tests/gpu runs the real
// kernels on it.
#if defined(HG_CUDA_EMULATE)
#define HG_EMU_KERNEL_SOURCE 1  // this file's kernels see device.h's vocabulary, like cuda/kernels/*.cu
#include "cuda/emulator/device.h"

#include <catch2/catch.hpp>
#include <cublasLt.h>
#include <cublas_v2.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "cuda/emulator/runtime.h"
#include "cuda/graph.h"
#include "cuda/launch.h"
#include "halfgrad.h"

using Catch::Matchers::Contains;

namespace {

constexpr int kWarp = 32;

// Sum of 1..blockDim.x: warp shuffles, then one value per warp through shared memory.
__global__ void block_sum_kernel(long long* out) {
  __shared__ long long sh[1024 / kWarp];
  long long v = threadIdx.x + 1;
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % kWarp == 0) sh[threadIdx.x / kWarp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    long long s = 0;
    for (unsigned w = 0; w < blockDim.x / kWarp; ++w) s += sh[w];
    out[blockIdx.x] = s;
  }
}

// Each thread reads its neighbour's slot; `barrier` says whether it waits for the neighbour to write it.
__global__ void neighbour_kernel(int* out, bool init, bool barrier) {
  __shared__ int sh[256];
  const int t = static_cast<int>(threadIdx.x), n = static_cast<int>(blockDim.x);
  if (init) {
    sh[t] = -1;
    return;
  }
  sh[t] = t;
  if (barrier) __syncthreads();
  out[t] = sh[(t + 1) % n];
}

__global__ void divergent_barrier_kernel(int* out) {
  if (threadIdx.x < 16) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

__global__ void half_mask_kernel(int* out) {
  out[threadIdx.x] = __shfl_xor_sync(0x0000ffffu, static_cast<int>(threadIdx.x), 1);
}

__global__ void add_one_kernel(int* p) { p[threadIdx.x] += 1; }

template <class T>
T* device_alloc(size_t n) {
  void* p = nullptr;
  REQUIRE(cudaMalloc(&p, n * sizeof(T)) == cudaSuccess);
  return static_cast<T*>(p);
}

template <class T>
std::vector<T> to_host(const T* p, size_t n) {
  std::vector<T> v(n);
  REQUIRE(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
  return v;
}

std::vector<int> neighbours(hg::emu::Order order, bool barrier) {
  hg::emu::set_order(order);
  int* out = device_alloc<int>(256);
  hg::cuda::launch(neighbour_kernel, 1, 256, 0, nullptr, out, true, false);
  hg::cuda::launch(neighbour_kernel, 1, 256, 0, nullptr, out, false, barrier);
  std::vector<int> v = to_host(out, 256);
  REQUIRE(cudaFree(out) == cudaSuccess);
  return v;
}

struct OrderGuard {
  hg::emu::Order saved = hg::emu::order();
  ~OrderGuard() { hg::emu::set_order(saved); }
};

}  // namespace

TEST_CASE("emulator: a block reduction through shuffles and shared memory, in both thread orders", "[gpu][emulator]") {
  OrderGuard guard;
  for (auto order : {hg::emu::Order::Forward, hg::emu::Order::Reverse}) {
    hg::emu::set_order(order);
    for (unsigned threads : {32u, 96u, 256u, 1024u}) {
      long long* out = device_alloc<long long>(3);
      hg::cuda::launch(block_sum_kernel, 3, threads, 0, nullptr, out);
      const long long want = static_cast<long long>(threads) * (threads + 1) / 2;
      for (long long got : to_host(out, 3)) CHECK(got == want);
      REQUIRE(cudaFree(out) == cudaSuccess);
    }
  }
}

TEST_CASE("emulator: a missing barrier gives different results in the two thread orders", "[gpu][emulator]") {
  OrderGuard guard;
  std::vector<int> want(256);
  for (int t = 0; t < 256; ++t) want[static_cast<size_t>(t)] = (t + 1) % 256;
  CHECK(neighbours(hg::emu::Order::Forward, true) == want);
  CHECK(neighbours(hg::emu::Order::Reverse, true) == want);
  const std::vector<int> fwd = neighbours(hg::emu::Order::Forward, false);
  const std::vector<int> rev = neighbours(hg::emu::Order::Reverse, false);
  CHECK(fwd != rev);
  CHECK(fwd != want);
  CHECK(fwd[0] == -1);  // forward: thread 0 reads slot 1 before thread 1 has written it
  CHECK(rev[0] == 1);   // reverse: thread 1 ran first
}

TEST_CASE("emulator: a divergent __syncthreads and a shuffle mask without every lane are device faults",
          "[gpu][emulator]") {
  int* out = device_alloc<int>(64);
  CHECK_THROWS_WITH(hg::cuda::launch(divergent_barrier_kernel, 1, 64, 0, nullptr, out),
                    Contains("cudaErrorLaunchFailure"));
  // the fault is sticky, as on a GPU: every later call reports it
  CHECK(cudaStreamSynchronize(nullptr) == cudaErrorLaunchFailure);
  hg::emu::clear_fault();
  CHECK_THROWS_WITH(hg::cuda::launch(half_mask_kernel, 1, 32, 0, nullptr, out), Contains("cudaErrorLaunchFailure"));
  hg::emu::clear_fault();
  // launch configurations the hardware rejects are launch errors, not faults
  CHECK_THROWS_WITH(hg::cuda::launch(add_one_kernel, 1, 2048, 0, nullptr, out), Contains("cudaErrorInvalidConfiguration"));
  CHECK_THROWS_WITH(hg::cuda::launch(add_one_kernel, 0, 32, 0, nullptr, out), Contains("cudaErrorInvalidConfiguration"));
  CHECK(cudaStreamSynchronize(nullptr) == cudaSuccess);
  REQUIRE(cudaFree(out) == cudaSuccess);
}

TEST_CASE("emulator: capture records work for each replay and refuses synchronising calls", "[gpu][emulator]") {
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  int* p = device_alloc<int>(32);
  REQUIRE(cudaMemsetAsync(p, 0, 32 * sizeof(int), s) == cudaSuccess);

  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  hg::cuda::launch(add_one_kernel, 1, 32, 0, s, p);
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);
  CHECK(to_host(p, 32)[5] == 0);  // capturing ran nothing
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
  for (int k = 0; k < 3; ++k) REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
  CHECK(to_host(p, 32)[5] == 3);
  REQUIRE(cudaGraphExecDestroy(exec) == cudaSuccess);

  // a sync, a synchronous copy to the host or cudaMalloc inside a capture: refused, the capture is void
  int host = 0;
  for (int what = 0; what < 3; ++what) {
    REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    void* q = nullptr;
    const cudaError_t e = what == 0   ? cudaStreamSynchronize(s)
                          : what == 1 ? cudaMemcpyAsync(&host, p, sizeof(int), cudaMemcpyDeviceToHost, s)
                                      : cudaMalloc(&q, 16);
    CHECK(e == cudaErrorStreamCaptureUnsupported);
    cudaGraph_t g = nullptr;
    CHECK(cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated);
    CHECK(g == nullptr);
  }
  (void)cudaGetLastError();
  REQUIRE(cudaFree(p) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);

  // through halfgrad: a host read inside Graph::capture fails with the reason
  const hg::Tensor t = hg::ones({4}, {.device = hg::Device::cuda()});
  CHECK_THROWS_WITH(hg::cuda::Graph::capture(0, [&] { (void)hg::sum(t).item<float>(); }),
                    Contains("cannot be captured"));
  (void)cudaGetLastError();
}

TEST_CASE("emulator: an allocation a graph makes and does not free is handed to the program at each launch",
          "[gpu][emulator]") {
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* inner = nullptr;
  void* escapes = nullptr;
  REQUIRE(cudaMallocAsync(&inner, 64, s) == cudaSuccess);
  REQUIRE(cudaMallocAsync(&escapes, 32 * sizeof(int), s) == cudaSuccess);
  REQUIRE(cudaMemsetAsync(escapes, 0, 32 * sizeof(int), s) == cudaSuccess);
  hg::cuda::launch(add_one_kernel, 1, 32, 0, s, static_cast<int*>(escapes));
  REQUIRE(cudaFreeAsync(inner, s) == cudaSuccess);  // freed inside: lives only during each launch
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);

  REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
  CHECK(to_host(static_cast<int*>(escapes), 32)[7] == 1);
  // relaunching while the program still holds the last launch's allocation: the driver refuses
  CHECK(cudaGraphLaunch(exec, s) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
  REQUIRE(cudaFreeAsync(escapes, s) == cudaSuccess);  // freed like any allocation
  CHECK(cudaFreeAsync(escapes, s) == cudaErrorLaunchFailure);  // a second free: a device fault
  hg::emu::clear_fault();
  REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);  // (the first free above handed it back)
  CHECK(to_host(static_cast<int*>(escapes), 32)[7] == 1);
  // destroying the graph leaves the allocation the program holds alive: one free, no double free
  REQUIRE(cudaGraphExecDestroy(exec) == cudaSuccess);
  CHECK(hg::emu::is_device_range(escapes, 32 * sizeof(int)));
  CHECK_FALSE(hg::emu::is_device_range(inner, 64));
  REQUIRE(cudaFree(escapes) == cudaSuccess);
  CHECK_FALSE(hg::emu::is_device_range(escapes, 4));
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("emulator: uploads do not wait for the stream, and arrive intact when the staging ring wraps",
          "[gpu][emulator]") {
  const hg::Device gpu = hg::Device::cuda();
  (void)hg::ones({1}, {.device = gpu});  // the context exists
  // 40 uploads of 1 MiB each go round the 16 MiB pinned ring more than twice; none waits for the stream
  std::vector<hg::Tensor> host, dev;
  const long before = hg::emu::stream_syncs();
  for (int k = 0; k < 40; ++k) {
    host.push_back(hg::full({256 * 1024}, double(k) + 0.5));
    dev.push_back(host.back().to(gpu));
  }
  const hg::Tensor scalar = hg::full({}, 3.25).to(gpu);
  CHECK(hg::emu::stream_syncs() == before);
  for (int k = 0; k < 40; ++k) {
    INFO("upload " << k);
    CHECK(dev[size_t(k)].to(hg::Device::cpu()).to_vector<float>() == host[size_t(k)].to_vector<float>());
  }
  CHECK(scalar.to(hg::Device::cpu()).item<float>() == 3.25f);
  // a copy larger than the ring takes (4 MiB) waits as before, and arrives intact
  const hg::Tensor big = hg::arange(0.0, double(2 << 20), 1.0);
  const long before_big = hg::emu::stream_syncs();
  const hg::Tensor big_dev = big.to(gpu);
  CHECK(hg::emu::stream_syncs() == before_big + 1);
  CHECK(big_dev.to(hg::Device::cpu()).to_vector<float>() == big.to_vector<float>());
  // inside a graph capture an upload is refused with the reason, never recorded from reused bytes
  CHECK_THROWS_WITH(hg::cuda::Graph::capture(0, [&] { (void)hg::full({4}, 1.0).to(gpu); }),
                    Contains("cannot be captured"));
  (void)cudaGetLastError();
}

TEST_CASE("emulator: new and freed device memory reads as NaN, a freed block is no device memory", "[gpu][emulator]") {
  float* p = device_alloc<float>(8);
  for (float v : to_host(p, 8)) CHECK(std::isnan(v));  // never written: the allocation's poison
  const std::vector<float> ones(8, 1.0f);
  REQUIRE(cudaMemcpy(p, ones.data(), sizeof(float) * 8, cudaMemcpyHostToDevice) == cudaSuccess);
  CHECK(to_host(p, 8) == ones);
  REQUIRE(cudaFree(p) == cudaSuccess);
  CHECK_FALSE(hg::emu::is_device_range(p, 4));
  float back = 0;
  CHECK(cudaMemcpy(&back, p, sizeof(float), cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);
  CHECK(cudaFree(p) == cudaErrorInvalidValue);  // a double free is reported
  (void)cudaGetLastError();
}

TEST_CASE("emulator: the cuBLAS stand-in validates like cuBLAS and ignores C when beta is 0", "[gpu][emulator]") {
  cublasHandle_t h = nullptr;
  REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
  // column-major 2x3 A, 3x2 B, 2x2 C
  const std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {1, 0, 1, 0, 1, 0};
  const std::vector<float> c0(4, std::numeric_limits<float>::quiet_NaN());
  float *da = device_alloc<float>(6), *db = device_alloc<float>(6), *dc = device_alloc<float>(4);
  REQUIRE(cudaMemcpy(da, a.data(), 24, cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaMemcpy(db, b.data(), 24, cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaMemcpy(dc, c0.data(), 16, cudaMemcpyHostToDevice) == cudaSuccess);
  const float one = 1, zero = 0;
  REQUIRE(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, da, CUDA_R_32F, 2, db, CUDA_R_32F, 3, &zero, dc,
                       CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
  // C(:,0) = A(:,0) + A(:,2) = (6, 8); C(:,1) = A(:,1) = (3, 4)
  CHECK(to_host(dc, 4) == std::vector<float>{6, 8, 3, 4});
  // lda smaller than m: rejected before anything runs
  CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, da, CUDA_R_32F, 1, db, CUDA_R_32F, 3, &zero, dc,
                     CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_INVALID_VALUE);
  // mixed types and TF32 compute are not what halfgrad asks for: not supported
  CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, da, CUDA_R_16F, 2, db, CUDA_R_32F, 3, &zero, dc,
                     CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_NOT_SUPPORTED);
  for (float* p : {da, db, dc}) REQUIRE(cudaFree(p) == cudaSuccess);
  REQUIRE(cublasDestroy(h) == CUBLAS_STATUS_SUCCESS);
}

// The cuBLASLt stand-in: an FP8 "TN" matmul with scale pointers computes scale_A * scale_B * A^T B exactly for
// small integers; the FP8 kernels' rules are enforced (NN layout, E5M2 x E5M2, a leading dimension that is no
// multiple of 16 bytes: no algorithm), and a scale pointer into host memory is an illegal address.
TEST_CASE("emulator: the cuBLASLt stand-in runs FP8 TN matmuls with scale pointers and keeps their rules",
          "[gpu][emulator]") {
  cublasLtHandle_t h = nullptr;
  REQUIRE(cublasLtCreate(&h) == CUBLAS_STATUS_SUCCESS);
  const int k = 16, m = 16, n = 16;  // column-major A (k x m, read transposed), B (k x n), D (m x n)
  std::vector<uint8_t> a(k * m), b(k * n);
  std::vector<float> av(k * m), bv(k * n);
  const float* e4m3 = hg::fp8_decode_table(hg::DType::F8E4M3);
  for (int i = 0; i < k * m; ++i) {  // small integers, which E4M3 holds exactly: codes of 1, 2, -1
    const float v = float(i % 3 == 0 ? 1 : i % 3 == 1 ? 2 : -1);
    a[size_t(i)] = hg::float_to_f8e4m3_bits(v);
    av[size_t(i)] = v;
  }
  for (int i = 0; i < k * n; ++i) {
    const float v = float(i % 4) - 1.0f;
    b[size_t(i)] = hg::float_to_f8e4m3_bits(v);
    bv[size_t(i)] = v;
    REQUIRE(e4m3[b[size_t(i)]] == v);
  }
  uint8_t *da = device_alloc<uint8_t>(a.size()), *db = device_alloc<uint8_t>(b.size());
  float *dd = device_alloc<float>(m * n), *scales = device_alloc<float>(2);
  const float host_scales[2] = {0.5f, 4.0f};
  REQUIRE(cudaMemcpy(da, a.data(), a.size(), cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaMemcpy(db, b.data(), b.size(), cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaMemcpy(scales, host_scales, sizeof host_scales, cudaMemcpyHostToDevice) == cudaSuccess);

  cublasLtMatmulDesc_t op = nullptr;
  REQUIRE(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
  const int32_t t = CUBLAS_OP_T, nn = CUBLAS_OP_N;
  REQUIRE(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &nn, sizeof nn) == CUBLAS_STATUS_SUCCESS);
  const void* sa = scales;
  const void* sb = scales + 1;
  REQUIRE(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb) == CUBLAS_STATUS_SUCCESS);
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr, la_e5 = nullptr, lb_e5 = nullptr, ld_odd = nullptr;
  REQUIRE(cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, k, m, k) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, k, n, k) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, m, n, m) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasLtMatrixLayoutCreate(&la_e5, CUDA_R_8F_E5M2, k, m, k) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasLtMatrixLayoutCreate(&lb_e5, CUDA_R_8F_E5M2, k, n, k) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasLtMatrixLayoutCreate(&ld_odd, CUDA_R_32F, m, n, m + 1) == CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulPreference_t pref = nullptr;
  REQUIRE(cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulHeuristicResult_t r{};
  int found = -1;
  REQUIRE(cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, ld, ld, pref, 1, &r, &found) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(found == 1);
  const float one = 1, zero = 0;
  REQUIRE(cublasLtMatmul(h, op, &one, da, la, db, lb, &zero, dd, ld, dd, ld, &r.algo, nullptr, 0, nullptr) ==
          CUBLAS_STATUS_SUCCESS);
  const std::vector<float> d = to_host(dd, m * n);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      float acc = 0;
      for (int l = 0; l < k; ++l) acc += av[size_t(l + i * k)] * bv[size_t(l + j * k)];
      INFO("D(" << i << ", " << j << ")");
      CHECK(d[size_t(i + j * m)] == 2.0f * acc);  // 0.5 * 4
    }
  // what the FP8 kernels do not take: no algorithm
  CHECK(cublasLtMatmulAlgoGetHeuristic(h, op, la_e5, lb_e5, ld, ld, pref, 1, &r, &found) == CUBLAS_STATUS_NOT_SUPPORTED);
  CHECK(found == 0);
  CHECK(cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, ld_odd, ld_odd, pref, 1, &r, &found) == CUBLAS_STATUS_NOT_SUPPORTED);
  REQUIRE(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &nn, sizeof nn) == CUBLAS_STATUS_SUCCESS);
  CHECK(cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, ld, ld, pref, 1, &r, &found) == CUBLAS_STATUS_NOT_SUPPORTED);
  REQUIRE(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t) == CUBLAS_STATUS_SUCCESS);
  // a scale pointer into host memory: the GPU would fault on it
  const void* host_scale = &host_scales[0];
  REQUIRE(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &host_scale, sizeof host_scale) ==
          CUBLAS_STATUS_SUCCESS);
  CHECK(cublasLtMatmul(h, op, &one, da, la, db, lb, &zero, dd, ld, dd, ld, &r.algo, nullptr, 0, nullptr) ==
        CUBLAS_STATUS_EXECUTION_FAILED);
  CHECK(cudaDeviceSynchronize() == cudaErrorLaunchFailure);
  hg::emu::clear_fault();
  (void)cudaGetLastError();
  for (cublasLtMatrixLayout_t l : {la, lb, ld, la_e5, lb_e5, ld_odd}) REQUIRE(cublasLtMatrixLayoutDestroy(l) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasLtMatmulPreferenceDestroy(pref) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasLtMatmulDescDestroy(op) == CUBLAS_STATUS_SUCCESS);
  for (void* p : {static_cast<void*>(da), static_cast<void*>(db), static_cast<void*>(dd), static_cast<void*>(scales)})
    REQUIRE(cudaFree(p) == cudaSuccess);
  REQUIRE(cublasLtDestroy(h) == CUBLAS_STATUS_SUCCESS);
}

#endif  // HG_CUDA_EMULATE
