// The device half of cuda/dnn (contract in cuda/dnn.h, "the device"): what needs a cuDNN device. A
// build for the emulated device (HG_CUDA=EMULATE) leaves this file out and links
// cuda/emulator/cudnn.cpp in its place, as it links the emulated runtime in place of cudart.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "cuda/context.h"
#include "cuda/counters.h"
#include "cuda/dnn.h"

namespace hg::cuda::dnn {

PlanTarget device_target(DeviceContext& ctx) { return {.handle = dnn_handle(ctx)}; }

void run_plan(const ConvPlanKey& key, const ConvPlan& plan, const void* x, const void* w, const void* y,
              void* workspace, DeviceContext& ctx) {
  BackendDesc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  const int64_t uids[3] = {kUidX, kUidW, kUidY};
  void* ptrs[3] = {const_cast<void*>(x), const_cast<void*>(w), const_cast<void*>(y)};
  HG_DNN_SET(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids, &key);
  HG_DNN_SET(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs, &key);
  HG_DNN_SET(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace, &key);
  finalize(pack, "finalize the variant pack", &key);
  detail::count_library_call();
  HG_DNN_CHECK(cudnnBackendExecute(dnn_handle(ctx), plan.plan.get(), pack.get()), "cudnnBackendExecute", &key);
}

std::string device_prop_json(int device) {
  BackendDesc d(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR);
  const int32_t id = device;
  HG_DNN_SET(d, CUDNN_ATTR_DEVICEPROP_DEVICE_ID, CUDNN_TYPE_INT32, 1, &id, nullptr);
  finalize(d, "finalize the device properties of a device", nullptr);
  int64_t size = 0;
  HG_DNN_CHECK(cudnnBackendGetAttribute(d.get(), CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, 0, &size,
                                        nullptr),
               "get the device properties' JSON size", nullptr);
  std::string json(static_cast<size_t>(std::max<int64_t>(size, 0)), '\0');
  HG_DNN_CHECK(cudnnBackendGetAttribute(d.get(), CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, size,
                                        &size, json.data()),
               "get the device properties' JSON", nullptr);
  json.resize(std::strlen(json.c_str()));
  return json;
}

}  // namespace hg::cuda::dnn
