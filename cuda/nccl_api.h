#pragma once
// The part of NCCL's C API that halfgrad calls (cuda/nccl.cpp), declared here from NCCL's documented
// interface (nccl.h of NCCL 2.x: the enums' values and the functions' signatures are its stable ABI), so that
// building halfgrad needs no NCCL: libnccl.so.2 is opened at run time, and on the emulated device
// (cuda/emulator/nccl.cpp) a stand-in fills the same table. Only cuda/nccl.cpp and the stand-in include this.
#include <cuda_runtime.h>

#include <cstddef>

namespace hg::cuda::nccl {

typedef struct ncclComm* ncclComm_t;
constexpr int kUniqueIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES
typedef struct {
  char internal[kUniqueIdBytes];
} ncclUniqueId;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
} ncclResult_t;

typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;

typedef enum {
  ncclInt8 = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclFloat32 = 7,
  ncclFloat64 = 8,
  ncclBfloat16 = 9,
} ncclDataType_t;

// The functions, by the names libnccl.so.2 exports them under (each field is looked up with dlsym by its name).
struct Library {
  ncclResult_t (*ncclGetVersion)(int* version) = nullptr;
  ncclResult_t (*ncclGetUniqueId)(ncclUniqueId* id) = nullptr;
  ncclResult_t (*ncclCommInitRank)(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) = nullptr;
  ncclResult_t (*ncclCommDestroy)(ncclComm_t comm) = nullptr;
  ncclResult_t (*ncclCommAbort)(ncclComm_t comm) = nullptr;
  ncclResult_t (*ncclCommGetAsyncError)(ncclComm_t comm, ncclResult_t* async_error) = nullptr;
  const char* (*ncclGetErrorString)(ncclResult_t result) = nullptr;
  const char* (*ncclGetLastError)(ncclComm_t comm) = nullptr;
  ncclResult_t (*ncclAllReduce)(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                                ncclComm_t comm, cudaStream_t stream) = nullptr;
  ncclResult_t (*ncclBroadcast)(const void* send, void* recv, size_t count, ncclDataType_t type, int root,
                                ncclComm_t comm, cudaStream_t stream) = nullptr;
  ncclResult_t (*ncclAllGather)(const void* send, void* recv, size_t send_count, ncclDataType_t type,
                                ncclComm_t comm, cudaStream_t stream) = nullptr;
  ncclResult_t (*ncclReduceScatter)(const void* send, void* recv, size_t recv_count, ncclDataType_t type,
                                    ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) = nullptr;
};

#if HG_CUDA_EMULATE
// The emulated device's stand-in (cuda/emulator/nccl.cpp).
const Library& emulated_library();
#endif

}  // namespace hg::cuda::nccl
