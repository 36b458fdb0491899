// Convolution on the cuDNN 9 graph API (contract in ops/conv.h, design in cuda/dnn.h).
// Descriptor chain per problem: 3 tensors -> convolution -> one operation -> operation graph ->
// heuristics (mode A, then FALLBACK) -> engine configs -> execution plans. Every status is checked;
// a failure names the problem and carries cudnnGetLastErrorString's reason (e.g. "is_valid_spatial_dim").
#include "cuda/dnn.h"

#include <type_traits>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/allocator.h"
#include "core/error.h"
#include "core/half.h"
#include "cuda/available.h"
#include "cuda/counters.h"
#include "cuda/check.h"
#include "cuda/context.h"
#include "cuda/register.h"
#include "cuda/workspace.h"
#include "ops/kernels/conv.h"

namespace hg::cuda::dnn {
namespace {

std::string last_error_string() {
  char buf[2048] = {};
  cudnnGetLastErrorString(buf, sizeof buf);
  return buf;
}

// Each dtype's row (core/dtype.h) holds its cudnnDataType_t value; the asserts tie them to the library's.
static_assert(dtype_info(DType::F32).cudnn_data_type == CUDNN_DATA_FLOAT &&
              dtype_info(DType::F16).cudnn_data_type == CUDNN_DATA_HALF &&
              dtype_info(DType::BF16).cudnn_data_type == CUDNN_DATA_BFLOAT16 &&
              dtype_info(DType::F64).cudnn_data_type == CUDNN_DATA_DOUBLE &&
              dtype_info(DType::F8E4M3).cudnn_data_type == CUDNN_DATA_FP8_E4M3 &&
              dtype_info(DType::F8E5M2).cudnn_data_type == CUDNN_DATA_FP8_E5M2);
cudnnDataType_t data_type(DType t) {
  const int v = dtype_info(t).cudnn_data_type;
  HG_CHECK(v >= 0, "conv2d (cuDNN): dtype ", t, " is not supported; use F32, F16, BF16 or F64");
  return static_cast<cudnnDataType_t>(v);
}

// F16/BF16 accumulate in F32 (docs/ARCHITECTURE.md, Principles 2); F64 in F64.
cudnnDataType_t compute_type(DType t) { return t == DType::F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT; }

BackendDesc make_tensor(int64_t uid, const int64_t (&dims)[4], const ConvPlanKey& key) {
  const int64_t strides[4] = {dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1};
  const cudnnDataType_t dt = data_type(key.dtype);
  BackendDesc t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  HG_DNN_SET(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, &key);
  HG_DNN_SET(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims, &key);
  HG_DNN_SET(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides, &key);
  HG_DNN_SET(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, &key);
  HG_DNN_SET(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &key.alignment, &key);
  finalize(t, "finalize a tensor descriptor", &key);
  return t;
}

// Symmetric padding as in torch (post = pre); cross-correlation, as every DL framework means by "conv".
BackendDesc make_convolution(const ConvPlanKey& key) {
  const cudnnDataType_t ct = compute_type(key.dtype);
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t spatial = 2;
  const int64_t dil[2] = {key.dil_h, key.dil_w}, stride[2] = {key.stride_h, key.stride_w};
  const int64_t pad[2] = {key.pad_h, key.pad_w};
  BackendDesc c(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  HG_DNN_SET(c, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &ct, &key);
  HG_DNN_SET(c, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode, &key);
  HG_DNN_SET(c, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &spatial, &key);
  HG_DNN_SET(c, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil, &key);
  HG_DNN_SET(c, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, stride, &key);
  HG_DNN_SET(c, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad, &key);
  HG_DNN_SET(c, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad, &key);
  finalize(c, "finalize the convolution descriptor", &key);
  return c;
}

struct OpAttrs {
  cudnnBackendDescriptorType_t type;
  cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
};

OpAttrs op_attrs(ConvDir dir) {
  switch (dir) {
    case ConvDir::Fprop:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA};
    case ConvDir::Dgrad:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA};
    case ConvDir::Wgrad:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA};
  }
  HG_FAIL("conv2d (cuDNN): unknown direction ", static_cast<int>(dir));
}

// y (or dx, dw) = 1 * conv + 0 * old: kernels overwrite their outputs (ops/conv.h).
BackendDesc make_operation(const ConvPlanKey& key, const BackendDesc& x, const BackendDesc& w, const BackendDesc& y,
                           const BackendDesc& conv) {
  const OpAttrs a = op_attrs(key.dir);
  BackendDesc op(a.type);
  const cudnnBackendDescriptor_t xd = x.get(), wd = w.get(), yd = y.get(), cd = conv.get();
  HG_DNN_CHECK(cudnnBackendSetAttribute(op.get(), a.x, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &xd), "set the x tensor", &key);
  HG_DNN_CHECK(cudnnBackendSetAttribute(op.get(), a.w, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &wd), "set the w tensor", &key);
  HG_DNN_CHECK(cudnnBackendSetAttribute(op.get(), a.y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &yd), "set the y tensor", &key);
  HG_DNN_CHECK(cudnnBackendSetAttribute(op.get(), a.conv, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd),
               "set the convolution descriptor", &key);
  if (key.dtype == DType::F64) {
    const double alpha = 1, beta = 0;
    HG_DNN_CHECK(cudnnBackendSetAttribute(op.get(), a.alpha, CUDNN_TYPE_DOUBLE, 1, &alpha), "set alpha", &key);
    HG_DNN_CHECK(cudnnBackendSetAttribute(op.get(), a.beta, CUDNN_TYPE_DOUBLE, 1, &beta), "set beta", &key);
  } else {
    const float alpha = 1, beta = 0;
    HG_DNN_CHECK(cudnnBackendSetAttribute(op.get(), a.alpha, CUDNN_TYPE_FLOAT, 1, &alpha), "set alpha", &key);
    HG_DNN_CHECK(cudnnBackendSetAttribute(op.get(), a.beta, CUDNN_TYPE_FLOAT, 1, &beta), "set beta", &key);
  }
  finalize(op, "finalize the convolution operation", &key);
  return op;
}

// With a handle, the graph and the plan are bound to it (CUDNN_ATTR_*_HANDLE, marked deprecated in
// 9.x but the proven execution path); devicelessly, heuristics and plan take the device properties.
BackendDesc make_graph(const ConvPlanKey& key, const BackendDesc& op, const PlanTarget& target) {
  BackendDesc g(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  const cudnnBackendDescriptor_t od = op.get();
  HG_DNN_SET(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &od, &key);
  if (target.handle) HG_DNN_SET(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &target.handle, &key);
  finalize(g, "finalize the operation graph", &key);
  return g;
}

const char* heur_mode_name(cudnnBackendHeurMode_t m) { return m == CUDNN_HEUR_MODE_A ? "A" : "FALLBACK"; }

// The engine configs proposed by one heuristics mode (none, with the reason, when the mode has none).
std::vector<BackendDesc> heuristic_configs(const ConvPlanKey& key, const BackendDesc& graph,
                                           const PlanTarget& target, cudnnBackendHeurMode_t mode,
                                           std::vector<std::string>& rejected) {
  BackendDesc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  const cudnnBackendDescriptor_t gd = graph.get();
  HG_DNN_SET(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &gd, &key);
  HG_DNN_SET(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, &key);
  if (target.device_prop)
    HG_DNN_SET(heur, CUDNN_ATTR_ENGINEHEUR_DEVICEPROP, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &target.device_prop, &key);
  const cudnnStatus_t st = cudnnBackendFinalize(heur.get());
  if (CUDNN_STATUS_CATEGORY(st) == CUDNN_STATUS_NOT_SUPPORTED) {
    rejected.push_back(std::string("heuristics ") + heur_mode_name(mode) + ": " + cudnnGetErrorString(st) + " (" +
                       last_error_string() + ")");
    return {};
  }
  HG_DNN_CHECK(st, "finalize the engine heuristics", &key);
  int64_t count = 0;
  HG_DNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                        &count, nullptr),
               "count the heuristic results", &key);
  std::vector<BackendDesc> cfgs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    cfgs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(cfgs.back().get());
  }
  int64_t got = 0;
  HG_DNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                        count, &got, raw.data()),
               "get the heuristic results", &key);
  cfgs.resize(static_cast<size_t>(std::clamp<int64_t>(got, 0, count)));
  return cfgs;
}

struct EngineInfo {
  int64_t index = -1;
  std::vector<cudnnBackendNumericalNote_t> notes;
  bool has(cudnnBackendNumericalNote_t n) const { return std::find(notes.begin(), notes.end(), n) != notes.end(); }
};

EngineInfo engine_info(const ConvPlanKey& key, const BackendDesc& cfg) {
  BackendDesc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t ed = engine.get();
  int64_t n = 0;
  HG_DNN_CHECK(cudnnBackendGetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                                        &ed),
               "get an engine config's engine", &key);
  EngineInfo info;
  HG_DNN_CHECK(cudnnBackendGetAttribute(ed, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &info.index),
               "get an engine's index", &key);
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  HG_DNN_CHECK(cudnnBackendGetAttribute(ed, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                        CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes),
               "get an engine's numerical notes", &key);
  info.notes.assign(notes, notes + std::clamp<int64_t>(n, 0, CUDNN_NUMERICAL_NOTE_TYPE_COUNT));
  return info;
}

// F16/BF16 must accumulate in F32 (as cuBLAS with DISALLOW_REDUCED_PRECISION_REDUCTION); F32 stays
// fp32 unless TF32 is allowed (tensor-core engines and down-converting engines compute it in TF32).
bool numerics_ok(const ConvPlanKey& key, const EngineInfo& e, const PlanOptions& opt) {
  if (e.has(CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION)) return false;
  if (key.dtype == DType::F32 && opt.tf32 == Tf32::Disallow)
    return !e.has(CUDNN_NUMERICAL_NOTE_TENSOR_CORE) && !e.has(CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS);
  return true;
}

// A finalized plan, or none (and the reason in `rejected`) when the engine does not take the problem.
bool try_plan(const ConvPlanKey& key, BackendDesc& cfg, const EngineInfo& e, const PlanTarget& target,
              ConvPlans& out) {
  BackendDesc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  const cudnnBackendDescriptor_t cd = cfg.get();
  HG_DNN_SET(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd, &key);
  if (target.handle)
    HG_DNN_SET(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &target.handle, &key);
  else
    HG_DNN_SET(plan, CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &target.device_prop,
               &key);
  const cudnnStatus_t st = cudnnBackendFinalize(plan.get());
  if (st != CUDNN_STATUS_SUCCESS) {
    out.rejected.push_back("engine " + std::to_string(e.index) + ": " + cudnnGetErrorString(st) + " (" +
                           last_error_string() + ")");
    return false;
  }
  ConvPlan p;
  int64_t n = 0;
  HG_DNN_CHECK(cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                                        &n, &p.workspace_bytes),
               "get a plan's workspace size", &key);
  p.plan = std::move(plan);
  p.engine_config = std::move(cfg);
  p.engine_index = e.index;
  p.tensor_core = e.has(CUDNN_NUMERICAL_NOTE_TENSOR_CORE);
  out.plans.push_back(std::move(p));
  return true;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : "; ") + x;
  return s.empty() ? "none" : s;
}

void check_target(const PlanTarget& t) {
  HG_CHECK((t.handle != nullptr) != (t.device_prop != nullptr),
           "conv2d (cuDNN): a PlanTarget needs exactly one of a handle or a device-property descriptor; got ",
           t.handle ? "both" : "neither");
  HG_CHECK(t.handle || cudnn_version() >= kDevicelessMinVersion, "conv2d (cuDNN): deviceless planning needs cuDNN >= ",
           kDevicelessMinVersion, " but the runtime is ", cudnn_version(), "; install a newer cuDNN 9");
}

}  // namespace

// ---- planning ---------------------------------------------------------------------------------

[[noreturn]] void throw_cudnn(cudnnStatus_t st, const char* what, const ConvPlanKey* key) {
  const std::string why = last_error_string();
  HG_FAIL("cudnn: ", what, " failed: ", cudnnGetErrorString(st), why.empty() ? "" : " (" + why + ")",
          key ? " for " + key->str() : std::string(), "; cuDNN runtime version ", cudnnGetVersion(),
          CUDNN_STATUS_CATEGORY(st) == CUDNN_STATUS_BAD_PARAM
              ? ": the descriptors are inconsistent, check the shapes above"
              : ": see the reason in parentheses");
}

void finalize(const BackendDesc& d, const char* what, const ConvPlanKey* key) {
  HG_DNN_CHECK(cudnnBackendFinalize(d.get()), what, key);
}

const char* dir_name(ConvDir d) {
  switch (d) {
    case ConvDir::Fprop: return "fprop";
    case ConvDir::Dgrad: return "dgrad";
    case ConvDir::Wgrad: return "wgrad";
  }
  return "?";
}

std::string ConvPlanKey::str() const {
  std::ostringstream os;
  os << "conv2d " << dir_name(dir) << " " << dtype << " x=(" << n << "," << c << "," << h << "," << w << ") w=(" << k
     << "," << (groups > 0 ? c / groups : c) << "," << r << "," << s << ") y=(" << n << "," << k << "," << oh << ","
     << ow << ") stride=(" << stride_h << "," << stride_w << ") pad=(" << pad_h << "," << pad_w << ") dilation=("
     << dil_h << "," << dil_w << ") groups=" << groups << " alignment=" << alignment << (tf32 ? " tf32" : "");
  return os.str();
}

ConvPlanKey plan_key(const ConvArgs& a, ConvDir dir, int64_t alignment) {
  return {.dir = dir, .dtype = a.dtype, .n = a.n, .c = a.c, .h = a.h, .w = a.w, .k = a.k, .r = a.r, .s = a.s,
          .oh = a.oh, .ow = a.ow, .stride_h = a.stride_h, .stride_w = a.stride_w, .pad_h = a.pad_h,
          .pad_w = a.pad_w, .dil_h = a.dil_h, .dil_w = a.dil_w, .groups = a.groups, .alignment = alignment};
}

void validate(const ConvPlanKey& k) {
  const std::string p = k.str();
  HG_CHECK(k.dtype != DType::I64, "conv2d (cuDNN): dtype I64 is not supported for ", p, "; use a floating dtype");
  HG_CHECK(k.n > 0 && k.c > 0 && k.h > 0 && k.w > 0 && k.k > 0 && k.r > 0 && k.s > 0 && k.oh > 0 && k.ow > 0,
           "conv2d (cuDNN): every size must be >= 1 for ", p, "; empty problems are handled before planning");
  HG_CHECK(k.stride_h > 0 && k.stride_w > 0 && k.dil_h > 0 && k.dil_w > 0 && k.pad_h >= 0 && k.pad_w >= 0,
           "conv2d (cuDNN): strides and dilations must be >= 1 and paddings >= 0 for ", p);
  HG_CHECK(k.groups > 0 && k.c % k.groups == 0 && k.k % k.groups == 0, "conv2d (cuDNN): groups=", k.groups,
           " must divide c=", k.c, " and k=", k.k, " for ", p);
  const int64_t oh = (k.h + 2 * k.pad_h - k.dil_h * (k.r - 1) - 1) / k.stride_h + 1;
  const int64_t ow = (k.w + 2 * k.pad_w - k.dil_w * (k.s - 1) - 1) / k.stride_w + 1;
  HG_CHECK(k.oh == oh && k.ow == ow, "conv2d (cuDNN): output size (", k.oh, ",", k.ow, ") does not match (", oh, ",",
           ow, ") = (in + 2*pad - dil*(kernel-1) - 1) / stride + 1 for ", p);
  HG_CHECK(k.alignment >= static_cast<int64_t>(dtype_size(k.dtype)) && (k.alignment & (k.alignment - 1)) == 0,
           "conv2d (cuDNN): alignment=", k.alignment, " must be a power of two >= the element size ",
           dtype_size(k.dtype), " for ", p, "; pass pointers aligned to their element type");
}

BackendDesc::BackendDesc(cudnnBackendDescriptorType_t type) {
  HG_DNN_CHECK(cudnnBackendCreateDescriptor(type, &d_), "cudnnBackendCreateDescriptor", nullptr);
}

BackendDesc::~BackendDesc() {
  if (d_) (void)cudnnBackendDestroyDescriptor(d_);
}

BackendDesc& BackendDesc::operator=(BackendDesc&& o) noexcept {
  if (this != &o) {
    if (d_) (void)cudnnBackendDestroyDescriptor(d_);
    d_ = o.d_;
    o.d_ = nullptr;
  }
  return *this;
}

int64_t cudnn_version() { return static_cast<int64_t>(cudnnGetVersion()); }

BackendDesc device_prop_from_json(const std::string& json) {
  HG_CHECK(cudnn_version() >= kDevicelessMinVersion, "cudnn: device-property descriptors need cuDNN >= ",
           kDevicelessMinVersion, " but the runtime is ", cudnn_version(), "; install a newer cuDNN 9");
  BackendDesc d(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR);
  HG_DNN_SET(d, CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, static_cast<int64_t>(json.size()),
             json.data(), nullptr);
  finalize(d, "finalize the device properties from JSON", nullptr);
  return d;
}

ConvPlans build_conv_plans(const ConvPlanKey& key, const PlanTarget& target, PlanOptions opt) {
  check_target(target);
  if (opt.shape_check == ShapeCheck::Halfgrad) validate(key);
  ConvPlans out;
  out.key = key;
  const int64_t g = key.groups > 0 ? key.groups : 1;
  const int64_t xd[4] = {key.n, key.c, key.h, key.w}, wd[4] = {key.k, key.c / g, key.r, key.s};
  const int64_t yd[4] = {key.n, key.k, key.oh, key.ow};
  BackendDesc x = make_tensor(kUidX, xd, key), w = make_tensor(kUidW, wd, key), y = make_tensor(kUidY, yd, key);
  BackendDesc conv = make_convolution(key);
  BackendDesc op = make_operation(key, x, w, y, conv);
  BackendDesc graph = make_graph(key, op, target);
  std::set<int64_t> planned;  // FALLBACK repeats engines of mode A
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    std::vector<BackendDesc> cfgs = heuristic_configs(key, graph, target, mode, out.rejected);
    out.heuristic_configs += static_cast<int64_t>(cfgs.size());
    for (BackendDesc& cfg : cfgs) {
      if (static_cast<int>(out.plans.size()) >= opt.max_plans) break;
      const EngineInfo e = engine_info(key, cfg);
      if (mode == CUDNN_HEUR_MODE_FALLBACK && planned.count(e.index)) continue;
      if (!numerics_ok(key, e, opt)) {
        ++out.filtered;
        continue;
      }
      if (try_plan(key, cfg, e, target, out)) planned.insert(e.index);
    }
    if (static_cast<int>(out.plans.size()) >= opt.max_plans) break;
  }
  HG_CHECK(!out.plans.empty(), "cudnn: no execution plan finalized for ", key.str(), " (", out.heuristic_configs,
           " engine configs proposed, ", out.filtered, " dropped for their numerics: ",
           key.dtype == DType::F32 ? "TF32 is disallowed for F32" : "reduced-precision reduction",
           "; rejections: ", join(out.rejected), "); cuDNN runtime version ", cudnn_version());
  for (BackendDesc* d : {&x, &w, &y, &conv, &op, &graph}) out.keep.push_back(std::move(*d));
  return out;
}

// ---- execution --------------------------------------------------------------------------------
namespace {

struct CacheKey {
  ConvPlanKey key;
  int device = 0;
  bool operator==(const CacheKey&) const = default;
};

struct CacheKeyHash {
  size_t operator()(const CacheKey& c) const {
    const ConvPlanKey& k = c.key;
    size_t h = std::hash<int>{}(c.device);
    for (int64_t v : {int64_t(k.dir), int64_t(k.dtype), k.n, k.c, k.h, k.w, k.k, k.r, k.s, k.oh, k.ow, k.stride_h,
                      k.stride_w, k.pad_h, k.pad_w, k.dil_h, k.dil_w, k.groups, k.alignment, int64_t(k.tf32)})
      h ^= std::hash<int64_t>{}(v) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    return h;
  }
};

// The first plan (heuristic order) of `key` on ctx's device, built on the first call. Plans live until
// the process ends, like the contexts: destroying descriptors from static destructors races cuDNN's
// own teardown. A failed build leaves no entry, so the next call reports the error again.
const ConvPlan& cached_plan(const ConvPlanKey& key, DeviceContext& ctx) {
  static std::mutex m;
  static auto* cache = new std::unordered_map<CacheKey, std::unique_ptr<ConvPlans>, CacheKeyHash>;
  std::lock_guard<std::mutex> lock(m);
  auto it = cache->find({key, ctx.device});
  if (it == cache->end()) {
    auto plans = std::make_unique<ConvPlans>(
        build_conv_plans(key, device_target(ctx), {.tf32 = key.tf32 ? Tf32::Allow : Tf32::Disallow}));
    it = cache->emplace(CacheKey{key, ctx.device}, std::move(plans)).first;
  }
  return it->second->plans.front();
}

// The largest power of two <= 16 dividing every pointer: the alignment the plan may assume.
int64_t alignment_of(std::initializer_list<const void*> ptrs) {
  int64_t a = 16;
  for (const void* p : ptrs)
    while (a > 1 && reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(a) != 0) a /= 2;
  return a;
}

// Runs the plan of `key` on x (or dx), w (or dw), y (or dy); `out` is the pointer written.
void execute(ConvPlanKey key, const void* x, const void* w, const void* y, const void* out) {
  DeviceContext& ctx = context_for(out);
  std::lock_guard<std::mutex> lock(ctx.handle_mutex);  // the plan's build and execution use the handle
  key.alignment = alignment_of({x, w, y});
  key.tf32 = key.dtype == DType::F32 && allow_tf32();
  const ConvPlan& plan = cached_plan(key, ctx);
  Workspace ws(static_cast<size_t>(plan.workspace_bytes), Device::cuda(ctx.device));
  run_plan(key, plan, x, w, y, ws.get(), ctx);
}

void zero(void* p, int64_t elems, DType t, const DeviceContext& ctx) {
  detail::count_kernel();
  HG_CUDA_CHECK(cudaMemsetAsync(p, 0, static_cast<size_t>(elems) * dtype_size(t), ctx.stream));
}

// f(T{}) for a's floating dtype (the bias kernels exist for those only).
template <class F>
void visit_conv_dtype(const ConvArgs& a, const char* op, F&& f) {
  HG_CHECK(is_floating(a.dtype), op, ": dtype ", a.dtype, " has no CUDA bias kernel; use F32, F16, BF16 or F64");
  visit_dtype(a.dtype, [&](auto tag) {
    if constexpr (!std::is_same_v<decltype(tag), int64_t>) f(tag);
  });
}

void bias_add(const ConvArgs& a, const DeviceContext& ctx) {
  visit_conv_dtype(a, "conv2d", [&](auto tag) {
    conv_bias_add<decltype(tag)>(a.y, a.b, a.n, a.k, a.oh * a.ow, ctx);
  });
}

void bias_grad(const ConvArgs& a, const DeviceContext& ctx) {
  visit_conv_dtype(a, "conv2d backward", [&](auto tag) {
    conv_bias_grad<decltype(tag)>(a.dy, a.db, a.n, a.k, a.oh * a.ow, ctx);
  });
}

void check_pointers(bool ok, const char* op, const char* which, const ConvArgs& a) {
  HG_CHECK(ok, op, ": ", which, " is null for ", plan_key(a, ConvDir::Fprop).str(),
           "; pass device pointers of contiguous tensors");
}

}  // namespace

// Empty outputs return at once; an empty reduction (no input channels, no output channels, no
// batch) writes zeros, as the sum over nothing.
void conv2d_forward(const ConvArgs& a) {
  const int64_t y_elems = a.n * a.k * a.oh * a.ow;
  if (y_elems == 0) return;
  check_pointers(a.y && (a.c == 0 || (a.x && a.wt)), "conv2d", "y, x or w", a);
  DeviceContext& ctx = context_for(a.y);
  if (a.c == 0) zero(a.y, y_elems, a.dtype, ctx);
  else execute(plan_key(a, ConvDir::Fprop), a.x, a.wt, a.y, a.y);
  if (a.b) bias_add(a, ctx);
}

void conv2d_backward_data(const ConvArgs& a) {
  const int64_t dx_elems = a.n * a.c * a.h * a.w;
  if (dx_elems == 0) return;
  check_pointers(a.dx && (a.k == 0 || (a.dy && a.wt)), "conv2d backward (data)", "dx, dy or w", a);
  DeviceContext& ctx = context_for(a.dx);
  if (a.k == 0 || a.oh * a.ow == 0) zero(a.dx, dx_elems, a.dtype, ctx);
  else execute(plan_key(a, ConvDir::Dgrad), a.dx, a.wt, a.dy, a.dx);
}

void conv2d_backward_weight(const ConvArgs& a) {
  const int64_t groups = a.groups > 0 ? a.groups : 1;
  const int64_t dw_elems = a.k * (a.c / groups) * a.r * a.s;
  const bool empty_sum = a.n * a.oh * a.ow == 0;
  if (a.dw && dw_elems > 0) {
    check_pointers(empty_sum || (a.x && a.dy), "conv2d backward (weight)", "x or dy", a);
    DeviceContext& ctx = context_for(a.dw);
    if (empty_sum) zero(a.dw, dw_elems, a.dtype, ctx);
    else execute(plan_key(a, ConvDir::Wgrad), a.x, a.dw, a.dy, a.dw);
  }
  if (a.db && a.k > 0) {
    check_pointers(empty_sum || a.dy, "conv2d backward (bias)", "dy", a);
    DeviceContext& ctx = context_for(a.db);
    if (empty_sum) zero(a.db, a.k, a.dtype, ctx);
    else bias_grad(a, ctx);
  }
}

}  // namespace hg::cuda::dnn

namespace hg::cuda {

void register_conv() {
  conv2d_forward_kernels().set_all_floating(DeviceType::CUDA, &dnn::conv2d_forward);
  conv2d_backward_data_kernels().set_all_floating(DeviceType::CUDA, &dnn::conv2d_backward_data);
  conv2d_backward_weight_kernels().set_all_floating(DeviceType::CUDA, &dnn::conv2d_backward_weight);
}

}  // namespace hg::cuda
