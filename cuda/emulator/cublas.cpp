// The emulated cuBLAS (HG_CUDA=EMULATE): the handle calls and the two GEMMs halfgrad makes, with the
// real headers' signatures. The GEMMs follow cuBLAS's column-major contract with a reference loop of
// their own (fp32 accumulation, k in increasing order, one rounding into C), written apart from
// halfgrad's row-major GEMM so that cuda/blas.cpp's mapping onto cuBLAS is checked independently.
// Arguments are validated as cuBLAS does; every matrix the call touches must lie in emulated device
// memory, or the device faults (a sticky error), as a GPU would on an illegal address.
#include <cublas_v2.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include "core/half.h"
#include "cuda/emulator/runtime.h"

struct cublasContext {
  cudaStream_t stream = nullptr;  // the legacy default stream until cublasSetStream
  void* workspace = nullptr;      // null: cuBLAS's own default pool
  size_t workspace_bytes = 0;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
};

namespace hg::emu {

std::string hex(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

// Whether batch b's [p + b*stride, + extent) elements lie in emulated device memory for every b. The
// whole span of all batches is tried first (one lookup); only when it fails is each batch checked
// (batches in different allocations would still work on a GPU). On failure the device faults with a
// message naming the call, the matrix, the pointer and the extent. Arithmetic in 128 bits: lda*(k-1)
// times the element size, or stride*(batch-1), can exceed 64.
bool check_matrix(const char* fn, const char* name, const void* p, size_t elem, int64_t extent,
                  const char* extent_formula, long long stride, int64_t batch) {
  using I = __int128;
  const I bytes = I(extent) * I(elem);
  const auto in_device = [&](I offset, I length) {
    const I start = I(reinterpret_cast<uintptr_t>(p)) + offset;
    if (start < 0 || start + length > I(UINTPTR_MAX)) return false;
    return is_device_range(reinterpret_cast<const void*>(static_cast<uintptr_t>(start)),
                                    static_cast<size_t>(length));
  };
  const I last = I(stride) * I(batch - 1) * I(elem);
  const I lo = std::min<I>(0, last), hi = std::max<I>(0, last) + bytes;
  if (in_device(lo, hi - lo)) return true;
  for (int64_t b = 0; b < batch; ++b) {
    const I offset = I(stride) * I(b) * I(elem);
    if (in_device(offset, bytes)) continue;
    std::string why = std::string(fn) + ": matrix " + name + " at " + hex(p);
    if (batch > 1) {
      why += " (batch " + std::to_string(b) + " of " + std::to_string(batch) + ", stride " + std::to_string(stride) +
             " elements)";
    }
    why += " spans " + std::to_string(extent) + " elements (" + extent_formula + ") of " + std::to_string(elem) +
           " bytes, which are not inside one live device allocation: illegal address";
    fail_sticky(why);
    return false;
  }
  return true;
}

}  // namespace hg::emu

namespace {

using hg::emu::check_matrix;
using hg::emu::hex;

// ---- the reference GEMM ----

// One validated call, captured by value into the enqueued work.
struct GemmCall {
  cublasOperation_t op_a = CUBLAS_OP_N, op_b = CUBLAS_OP_N;
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 1;
  long long stride_a = 0;
  const void* b = nullptr;
  int64_t ldb = 1;
  long long stride_b = 0;
  void* c = nullptr;
  int64_t ldc = 1;
  long long stride_c = 0;
  int64_t batch = 1;
  bool tf32 = false;  // CUBLAS_COMPUTE_32F_FAST_TF32: A and B are read rounded to TF32
};

// Storage type T computes in Acc<T>: double for double, float for float, f16 and bf16. Widening is
// exact; hg::store rounds to nearest even once (into C's type TC: T, or float for 16-bit A and B with
// Ctype CUDA_R_32F).
template <class T> using Acc = hg::compute_t<T>;

// C[b] = alpha * op(A[b]) * op(B[b]) + beta * C[b] for every batch b. Each C(i, j) is the plain running
// sum acc = acc + op(A)(i, l) * op(B)(l, j) for l = 0, 1, ..., k-1 from acc = 0; the two loop orders
// below (axpy-style for op(A) = A, dot-style for op(A) = A^T) perform exactly these operations and only
// differ in which one walks memory contiguously. Needs -ffp-contract=off (the project's flags): a fused
// multiply-add would round differently.
template <class T, class TC = T> void reference_gemm(const GemmCall& g, Acc<T> alpha, Acc<T> beta) {
  using F = Acc<T>;
  auto in = [&g](T v) -> F {  // an element of A or B
    if constexpr (std::is_same_v<T, float>) return g.tf32 ? hg::round_to_tf32(v) : v;
    else return hg::load(v);
  };
  std::vector<F> acc(static_cast<size_t>(g.m)), b_col(static_cast<size_t>(g.k));
  for (int64_t bt = 0; bt < g.batch; ++bt) {
    const T* A = static_cast<const T*>(g.a) + bt * g.stride_a;
    const T* B = static_cast<const T*>(g.b) + bt * g.stride_b;
    TC* C = static_cast<TC*>(g.c) + bt * g.stride_c;
    for (int64_t j = 0; j < g.n; ++j) {
      TC* c = C + j * g.ldc;
      if (g.k == 0) {  // nothing to sum: C = beta * C, and C is not read when beta == 0
        for (int64_t i = 0; i < g.m; ++i)
          c[i] = beta == F(0) ? hg::store<TC>(F(0)) : hg::store<TC>(beta * hg::load(c[i]));
        continue;
      }
      // op(B)(:, j), widened once
      for (int64_t l = 0; l < g.k; ++l)
        b_col[l] = in(g.op_b == CUBLAS_OP_N ? B[l + j * g.ldb] : B[j + l * g.ldb]);
      if (g.op_a == CUBLAS_OP_N) {  // op(A)(i, l) = A[i + l*lda]: column l is contiguous
        std::fill(acc.begin(), acc.end(), F(0));
        for (int64_t l = 0; l < g.k; ++l) {
          const T* a = A + l * g.lda;
          const F bl = b_col[l];
          for (int64_t i = 0; i < g.m; ++i) acc[i] += in(a[i]) * bl;
        }
      } else {  // op(A)(i, l) = A[l + i*lda]: row i of op(A) is contiguous
        for (int64_t i = 0; i < g.m; ++i) {
          const T* a = A + i * g.lda;
          F s = 0;
          for (int64_t l = 0; l < g.k; ++l) s += in(a[l]) * b_col[l];
          acc[i] = s;
        }
      }
      if (beta == F(0)) {  // C is write-only: a NaN already there must not propagate
        for (int64_t i = 0; i < g.m; ++i) c[i] = hg::store<TC>(alpha * acc[i]);
      } else {
        for (int64_t i = 0; i < g.m; ++i) c[i] = hg::store<TC>(alpha * acc[i] + beta * hg::load(c[i]));
      }
    }
  }
}

// ---- argument checks ----

bool valid_op(cublasOperation_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; }

size_t element_bytes(cudaDataType t) {
  switch (t) {
    case CUDA_R_32F: return 4;
    case CUDA_R_64F: return 8;
    case CUDA_R_16F:
    case CUDA_R_16BF: return 2;
    default: return 0;
  }
}

// Host pointer mode: alpha and beta are host memory. On a GPU, cuBLAS would dereference a device
// pointer on the host and crash; here device memory is host memory, so say so instead.
bool check_scalar(const char* fn, const char* name, const void* p, size_t bytes) {
  if (!hg::emu::is_device_range(p, bytes)) return true;
  hg::emu::fail_sticky(std::string(fn) + ": " + name + " (" + hex(p) +
                       ") points into device memory, but the handle's pointer mode is host");
  return false;
}

cublasStatus_t gemm(const char* fn, cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                    int n, int k, const void* alpha, const void* A, cudaDataType Atype, int lda, long long strideA,
                    const void* B, cudaDataType Btype, int ldb, long long strideB, const void* beta, void* C,
                    cudaDataType Ctype, int ldc, long long strideC, int batchCount, cublasComputeType_t computeType) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (m < 0 || n < 0 || k < 0 || batchCount < 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (!valid_op(transa) || !valid_op(transb)) return CUBLAS_STATUS_INVALID_VALUE;
  const bool a_n = transa == CUBLAS_OP_N, b_n = transb == CUBLAS_OP_N;  // OP_C is OP_T for real types
  if (lda < std::max(1, a_n ? m : k)) return CUBLAS_STATUS_INVALID_VALUE;
  if (ldb < std::max(1, b_n ? k : n)) return CUBLAS_STATUS_INVALID_VALUE;
  if (ldc < std::max(1, m)) return CUBLAS_STATUS_INVALID_VALUE;

  // A and B share a type; C has it too, or is F32 under 16-bit A and B (computed in F32)
  const bool wide_c = Ctype == CUDA_R_32F && (Atype == CUDA_R_16F || Atype == CUDA_R_16BF);
  if (Atype != Btype || (Atype != Ctype && !wide_c)) return CUBLAS_STATUS_NOT_SUPPORTED;
  // TF32 (CUBLAS_COMPUTE_32F_FAST_TF32) takes F32 matrices only
  const bool tf32 = computeType == CUBLAS_COMPUTE_32F_FAST_TF32 && Atype == CUDA_R_32F && Ctype == CUDA_R_32F;
  const bool f32_compute = tf32 || (computeType == CUBLAS_COMPUTE_32F &&
                                    (Ctype == CUDA_R_32F || Ctype == CUDA_R_16F || Ctype == CUDA_R_16BF));
  const bool f64_compute = computeType == CUBLAS_COMPUTE_64F && Ctype == CUDA_R_64F;
  if (!f32_compute && !f64_compute) return CUBLAS_STATUS_NOT_SUPPORTED;

  if (m == 0 || n == 0 || batchCount == 0) return CUBLAS_STATUS_SUCCESS;
  if (alpha == nullptr || beta == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  const size_t scalar = f64_compute ? sizeof(double) : sizeof(float);
  if (!check_scalar(fn, "alpha", alpha, scalar) || !check_scalar(fn, "beta", beta, scalar))
    return CUBLAS_STATUS_EXECUTION_FAILED;

  const GemmCall g{.op_a = a_n ? CUBLAS_OP_N : CUBLAS_OP_T, .op_b = b_n ? CUBLAS_OP_N : CUBLAS_OP_T,
                   .m = m, .n = n, .k = k,
                   .a = A, .lda = lda, .stride_a = strideA,
                   .b = B, .ldb = ldb, .stride_b = strideB,
                   .c = C, .ldc = ldc, .stride_c = strideC,
                   .batch = batchCount,
                   .tf32 = tf32};

  // Every byte the call reads or writes: stored A is (a_n ? m x k : k x m), stored B (b_n ? k x n : n x k).
  const size_t elem = element_bytes(Atype), c_elem = element_bytes(Ctype);
  if (k > 0) {
    const int64_t a_extent = a_n ? int64_t{lda} * (k - 1) + m : int64_t{lda} * (m - 1) + k;
    const int64_t b_extent = b_n ? int64_t{ldb} * (n - 1) + k : int64_t{ldb} * (k - 1) + n;
    if (!check_matrix(fn, "A", A, elem, a_extent, a_n ? "lda*(k-1)+m" : "lda*(m-1)+k", strideA, batchCount) ||
        !check_matrix(fn, "B", B, elem, b_extent, b_n ? "ldb*(n-1)+k" : "ldb*(k-1)+n", strideB, batchCount))
      return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  const int64_t c_extent = int64_t{ldc} * (n - 1) + m;
  if (!check_matrix(fn, "C", C, c_elem, c_extent, "ldc*(n-1)+m", strideC, batchCount))
    return CUBLAS_STATUS_EXECUTION_FAILED;

  cudaError_t e = cudaSuccess;
  if (f64_compute) {
    const double al = *static_cast<const double*>(alpha), be = *static_cast<const double*>(beta);
    e = hg::emu::enqueue(handle->stream, fn, [g, al, be] { reference_gemm<double>(g, al, be); });
  } else {
    const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
    const auto run = [&](auto a_tag, auto c_tag) {
      using T = decltype(a_tag);
      using TC = decltype(c_tag);
      return hg::emu::enqueue(handle->stream, fn, [g, al, be] { reference_gemm<T, TC>(g, al, be); });
    };
    if (Atype == CUDA_R_32F) e = run(float{}, float{});
    else if (Atype == CUDA_R_16F) e = wide_c ? run(hg::f16{}, float{}) : run(hg::f16{}, hg::f16{});
    else e = wide_c ? run(hg::bf16{}, float{}) : run(hg::bf16{}, hg::bf16{});  // CUDA_R_16BF
  }
  return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

// cublasCreate and cublasDestroy: a handle is a heap object.
template <class H>
cublasStatus_t create_handle(H** handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new (std::nothrow) H;
  return *handle != nullptr ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

template <class H>
cublasStatus_t destroy_handle(H* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

extern "C" {

// ---- handles ----

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) { return create_handle(handle); }
cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) { return destroy_handle(handle); }

// As in cuBLAS, setting the stream also drops a user workspace (back to the default pool): a
// workspace must be set after the stream.
cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = streamId;
  handle->workspace = nullptr;
  handle->workspace_bytes = 0;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* streamId) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (streamId == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *streamId = handle->stream;
  return CUBLAS_STATUS_SUCCESS;
}

// cuBLAS wants a user workspace aligned to 256 bytes. The reference GEMM never uses it.
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, size_t workspaceSizeInBytes) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (workspace == nullptr && workspaceSizeInBytes != 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (reinterpret_cast<uintptr_t>(workspace) % 256 != 0) return CUBLAS_STATUS_INVALID_VALUE;
  handle->workspace = workspace;
  handle->workspace_bytes = workspaceSizeInBytes;
  return CUBLAS_STATUS_SUCCESS;
}

// The mode is kept but changes nothing: the reference GEMM is exact fp32/fp64 (TF32 or a reduced
// precision reduction, where allowed, is only permitted, never required).
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  constexpr unsigned kKnownBits = CUBLAS_TENSOR_OP_MATH | CUBLAS_PEDANTIC_MATH | CUBLAS_FP32_EMULATED_BF16X9_MATH |
                                  CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH |
                                  CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
  if ((static_cast<unsigned>(mode) & ~kKnownBits) != 0) return CUBLAS_STATUS_INVALID_VALUE;
  handle->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = handle->math;
  return CUBLAS_STATUS_SUCCESS;
}

// ---- version and status ----

// The stand-in reports the version of the headers it is compiled against (13.1.0 for CUDA 13.1).
cublasStatus_t cublasGetProperty(libraryPropertyType type, int* value) {
  if (value == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (type) {
    case MAJOR_VERSION: *value = CUBLAS_VER_MAJOR; return CUBLAS_STATUS_SUCCESS;
    case MINOR_VERSION: *value = CUBLAS_VER_MINOR; return CUBLAS_STATUS_SUCCESS;
    case PATCH_LEVEL: *value = CUBLAS_VER_PATCH; return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

// major * 10000 + minor * 100 + patch, as CUBLAS_VERSION. The handle is not needed.
cublasStatus_t cublasGetVersion_v2(cublasHandle_t handle, int* version) {
  (void)handle;
  if (version == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *version = CUBLAS_VER_MAJOR * 10000 + CUBLAS_VER_MINOR * 100 + CUBLAS_VER_PATCH;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "<unknown>";
}

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library or the handle was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "a resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an unsupported value or parameter was passed";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "the device lacks a feature the call needs";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the requested functionality is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "a license check failed";
  }
  return "unknown cuBLAS status";
}

// ---- GEMM ----

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  (void)algo;  // any algorithm computes the same contract
  return gemm("cublasGemmEx", handle, transa, transb, m, n, k, alpha, A, Atype, lda, 0, B, Btype, ldb, 0, beta, C,
              Ctype, ldc, 0, 1, computeType);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long int strideA, const void* B, cudaDataType Btype, int ldb,
                                          long long int strideB, const void* beta, void* C, cudaDataType Ctype,
                                          int ldc, long long int strideC, int batchCount,
                                          cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  (void)algo;
  return gemm("cublasGemmStridedBatchedEx", handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype,
              ldb, strideB, beta, C, Ctype, ldc, strideC, batchCount, computeType);
}

}  // extern "C"
