#pragma once
// Convolution through the cuDNN 9 graph (backend) API, not the deprecated legacy cudnnConvolution*
// functions (docs/ARCHITECTURE.md, "Facts the code relies on"). Two layers:
//  * planning, which needs no GPU: a ConvPlanKey (one problem in one direction) becomes cuDNN backend
//    descriptors (tensors, convolution, operation, operation graph), heuristics (mode A, then the
//    fallback list) and finalized execution plans with their workspace sizes. It runs against a live
//    cudnnHandle_t or, devicelessly (cuDNN >= 9.8), against a device-property descriptor loaded from
//    JSON, which is how CI checks every descriptor without a device (tests/cuda/test_cudnn_plans.cpp);
//  * execution: a plan cache per (key, device) and the workspace from the device allocator (cuda/dnn.cpp);
//    what needs the device itself (the handle plans are built against, a variant pack with the device
//    pointers, cudnnBackendExecute on the device's stream) is cuda/dnn_device.cpp, which a build for the
//    emulated device replaces with cuda/emulator/cudnn.cpp; bias add / bias grad kernels in
//    cuda/kernels/conv_bias.cu.
// Layouts are ops/conv.h's: x, y, dy, dx are NCHW with NCHW strides; w, dw are KCRS with C = c/groups
// (the graph API has no group-count attribute: it infers groups from x's C over w's C).
// Only files under cuda/ and tests include this header.
#include <cudnn.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "ops/conv.h"
#include "ops/kernels/conv.h"

namespace hg::cuda {
struct DeviceContext;  // cuda/context.h
}

namespace hg::cuda::dnn {

enum class ConvDir : uint8_t { Fprop, Dgrad, Wgrad };
const char* dir_name(ConvDir d);

// Everything that decides a plan: shapes, dtype, direction, and the byte alignment promised for the
// data pointers (16 for fresh allocations; smaller for views at odd offsets).
struct ConvPlanKey {
  ConvDir dir = ConvDir::Fprop;
  DType dtype = DType::F32;
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t k = 0, r = 0, s = 0;
  int64_t oh = 0, ow = 0;
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dil_h = 1, dil_w = 1, groups = 1;
  int64_t alignment = 16;
  bool tf32 = false;  // F32 only: TF32 allowed (cuda::allow_tf32() when the op ran), so tensor-core engines qualify
  bool operator==(const ConvPlanKey&) const = default;
  // "conv2d fprop F16 x=(128,1,28,28) w=(32,1,3,3) y=(128,32,28,28) stride=(1,1) pad=(1,1) ..."
  std::string str() const;
};

ConvPlanKey plan_key(const ConvArgs& a, ConvDir dir, int64_t alignment = 16);
// hg::Error naming the field when the key is not a consistent non-empty convolution (ops/conv.h's
// output-size formula, c and k divisible by groups, ...).
void validate(const ConvPlanKey& key);

// RAII owner of one cudnnBackendDescriptor_t (move-only).
class BackendDesc {
 public:
  BackendDesc() = default;
  explicit BackendDesc(cudnnBackendDescriptorType_t type);
  ~BackendDesc();
  BackendDesc(BackendDesc&& o) noexcept : d_(o.d_) { o.d_ = nullptr; }
  BackendDesc& operator=(BackendDesc&& o) noexcept;
  BackendDesc(const BackendDesc&) = delete;
  BackendDesc& operator=(const BackendDesc&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }
  explicit operator bool() const { return d_ != nullptr; }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

// cuDNN's runtime version, e.g. 91900; the deviceless path needs >= 90800.
int64_t cudnn_version();
constexpr int64_t kDevicelessMinVersion = 90800;

// A finalized CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR from cuDNN's JSON (the keys cuDNN's
// cudnnBackendDeviceProp JSON carries). Throws hg::Error quoting cuDNN's reason, e.g. a missing key.
BackendDesc device_prop_from_json(const std::string& json);
// The JSON of a real device's properties (needs the GPU); the GPU tests print it so that the
// fixtures in tests/cuda/fixtures/ can be replaced by measured values.
std::string device_prop_json(int device);

// Where plans are built for: exactly one of a live handle (plans that can execute) or a
// device-property descriptor (deviceless: plans that can be inspected, not executed).
struct PlanTarget {
  cudnnHandle_t handle = nullptr;
  cudnnBackendDescriptor_t device_prop = nullptr;
};

enum class Tf32 : uint8_t { Disallow, Allow };
enum class ShapeCheck : uint8_t { Halfgrad, CudnnOnly };  // CudnnOnly: tests of cuDNN's own rejection

struct PlanOptions {
  int max_plans = 1;  // stop after this many finalize (the executor needs one; tests ask for more)
  // F32 stays true fp32 unless allowed, as in cuda/blas.cpp (tensor-core engines compute F32 in TF32).
  Tf32 tf32 = Tf32::Disallow;
  ShapeCheck shape_check = ShapeCheck::Halfgrad;
};

struct ConvPlan {
  BackendDesc plan;
  BackendDesc engine_config;  // kept alive with its plan
  int64_t workspace_bytes = 0;
  int64_t engine_index = -1;  // CUDNN_ATTR_ENGINE_GLOBAL_INDEX
  bool tensor_core = false;   // CUDNN_NUMERICAL_NOTE_TENSOR_CORE
};

// The plans of one problem; owns the whole descriptor chain the plans were built from.
struct ConvPlans {
  ConvPlanKey key;
  std::vector<BackendDesc> keep;  // tensors, convolution, operation, operation graph
  std::vector<ConvPlan> plans;    // finalized, in heuristic order (the first one is executed)
  int64_t heuristic_configs = 0;  // engine configs proposed by the heuristics (all modes tried)
  int64_t filtered = 0;           // proposed but dropped for their numerical notes
  std::vector<std::string> rejected;  // "engine 12: CUDNN_STATUS_NOT_SUPPORTED_... (reason)"
};

// Builds and finalizes plans for `key`. Throws hg::Error (the problem, cuDNN's status and
// cudnnGetLastErrorString) when a descriptor does not finalize or no plan does.
ConvPlans build_conv_plans(const ConvPlanKey& key, const PlanTarget& target, PlanOptions opt = {});

// ---- the device (cuda/dnn_device.cpp; on the emulated device cuda/emulator/cudnn.cpp) ----------
// What needs a cuDNN device. The build links one of the two files, as it links cudart or the emulated
// runtime; cuDNN itself stays the real library in both, since planning needs no device.

// Where the plans that run on ctx's device are built: its cuDNN handle (created on first use).
PlanTarget device_target(DeviceContext& ctx);
// Runs `plan` (built for `key` against device_target) on x (or dx), w (or dw), y (or dy) with
// `workspace` (plan.workspace_bytes of it) on ctx's stream. The caller holds ctx.handle_mutex.
void run_plan(const ConvPlanKey& key, const ConvPlan& plan, const void* x, const void* w, const void* y,
              void* workspace, DeviceContext& ctx);

// Variant-pack ids. Each direction names its three tensors x (or dx), w (or dw), y (or dy).
constexpr int64_t kUidX = 'x', kUidW = 'w', kUidY = 'y';

// Checked cuDNN calls, for cuda/dnn.cpp and cuda/dnn_device.cpp: a failure throws hg::Error naming the
// call (`what`), the problem (key, when there is one), cuDNN's status and cudnnGetLastErrorString's reason.
[[noreturn]] void throw_cudnn(cudnnStatus_t st, const char* what, const ConvPlanKey* key);
void finalize(const BackendDesc& d, const char* what, const ConvPlanKey* key);

#define HG_DNN_CHECK(expr, what, key)                                              \
  do {                                                                             \
    const cudnnStatus_t hg_dnn_st_ = (expr);                                       \
    if (hg_dnn_st_ != CUDNN_STATUS_SUCCESS) [[unlikely]]                           \
      ::hg::cuda::dnn::throw_cudnn(hg_dnn_st_, what, key);                         \
  } while (0)

// Sets one attribute; the attribute's enum name goes into the error message.
#define HG_DNN_SET(desc, attr, type, count, ptr, key) \
  HG_DNN_CHECK(cudnnBackendSetAttribute((desc).get(), attr, type, count, ptr), "set " #attr, key)

// ---- execution ---------------------------------------------------------------------------------
// The CUDA ConvKernels of ops/conv.h (F32, F16, BF16, F64), and their registration.
void conv2d_forward(const ConvArgs& a);
void conv2d_backward_data(const ConvArgs& a);
void conv2d_backward_weight(const ConvArgs& a);

// Launchers in cuda/kernels/conv_bias.cu, on ctx.stream, T = float, f16, bf16 or double:
// y (n, k, hw) += b (k), in compute_t<T>, one rounding; db (k) = sum of dy over n and hw, accumulated
// in compute_t<T>.
template <class T>
void conv_bias_add(void* y, const void* b, int64_t n, int64_t k, int64_t hw, const DeviceContext& ctx);
template <class T>
void conv_bias_grad(const void* dy, void* db, int64_t n, int64_t k, int64_t hw, const DeviceContext& ctx);

}  // namespace hg::cuda::dnn
