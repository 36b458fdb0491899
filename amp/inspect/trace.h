#pragma once
// PrecisionTrace: what autocast did to every op of a region and which math the kernel then ran --
// the answer to "which precision does my model actually compute in?".
//
//   hg::amp::inspect::PrecisionTrace trace(&model);      // names ops by module path ("0", "features.3")
//   { hg::amp::Autocast ac(hg::DeviceType::CPU);          // BF16 on the CPU
//     hg::Tensor loss = hg::cross_entropy(model(x), t); }
//   trace.print(std::cout);                               // aligned table + summary
//   trace.write_json("trace.json");
//
// What is recorded: every outermost call of a public op that calls the autocast hook (amp::OpId, see
// ops/autocast/policy.h) on the trace's thread while it lives, through amp::ObserveOps. An op made of other
// ops (linear -> matmul + add, var -> mean, mul, sum...) is one entry. Shape ops and casts that the
// user calls directly (reshape, Tensor::to) are not amp ops and are not listed; backward never is.
// Observers are per thread: ops that other threads run (a DataLoader's workers) are not recorded.
// Observing changes no numbers: the same casts run, in the same order, with or without a trace.
//
// Module paths: the innermost module on nn::Module::call_stack() that has a name under `root`
// (root->named_modules(), taken when the trace is built); "" outside named modules or without root.
// Only calls through Module::operator() push the stack (Sequential's children, `model(x)`).
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "amp/inspect/module_names.h"
#include "core/tensor.h"
#include "nn/module.h"
#include "ops/autocast/autocast.h"

namespace hg::amp::inspect {

// How a kernel computes. F16/BF16 tensors are storage formats for most kernels (widened to F32 on
// load, rounded on store); only GEMM/convolution engines multiply the 16-bit values directly, and
// they accumulate in F32. TF32 only with cuda::set_allow_tf32(true) (cuda/available.h), on CUDA.
enum class MathKind : uint8_t {
  F32,
  F64,
  F16AccumulateF32,   // F16 x F16 products, F32 accumulation (Tensor Cores)
  BF16AccumulateF32,  // BF16 x BF16 products, F32 accumulation (oneDNN AVX512_BF16, Tensor Cores)
  TF32AccumulateF32,  // F32 inputs rounded to TF32, F32 accumulation (cuBLAS with allow_tf32)
  FP8AccumulateF32,   // E4M3/E5M2 x E4M3/E5M2 products, F32 accumulation (fp8_linear)
  F32OnF16Storage,    // F16 data widened to F32, F32 math, result rounded to F16
  F32OnBF16Storage,   // the same for BF16
  Copy,               // moves values without arithmetic (cat, embedding, where)
  Integer,            // I64 data
};
const char* math_kind_name(MathKind k);  // "F32", "BF16 x BF16 -> F32 accumulate", ...

struct KernelMath {
  MathKind kind = MathKind::F32;
  std::string detail;  // what runs, with the engine: "BF16 x BF16 -> F32 accumulate (onednn)"
};

// The math halfgrad's kernel for `op` runs on a device type when it computes in `dtype` (the
// promoted dtype of the inputs it ran on, after autocast). CPU engines are asked at run time
// (cpu::gemm_engine, cpu::conv_engine), so the answer follows the build (oneDNN or not).
KernelMath kernel_math(OpId op, DeviceType dev, DType dtype);

struct TraceEntry {
  OpId op = OpId::Count_;
  std::string module;                              // "" outside named modules
  std::vector<std::optional<DType>> input_dtypes;  // as passed; nullopt: an undefined input ("-")
  std::optional<CastPolicy> policy;                // nullopt: autocast off for this call ("off")
  DType output_dtype = DType::F32;
  Shape output_shape;
  Device device;
  std::vector<CastRecord> casts;  // input index, from -> to, bytes, through the cast cache, hit
  KernelMath math;
};

struct TraceSummary {
  std::vector<std::pair<MathKind, int64_t>> ops_per_math;  // kinds that occurred, in enum order
  int64_t ops = 0;
  int64_t casts = 0;            // every cast record, cache hits included
  int64_t cast_bytes = 0;       // bytes of the copies made (uncached casts and cache misses)
  int64_t cache_hits = 0;       // casts served by the cast cache (no copy)
  int64_t cache_hit_bytes = 0;  // the bytes those hits did not copy
  int64_t cache_misses = 0;     // cacheable casts that were copied and stored
};

class PrecisionTrace : public OpObserver {
 public:
  // Starts recording on this thread. root (optional) names modules; it must outlive the trace.
  explicit PrecisionTrace(const nn::Module* root = nullptr);
  ~PrecisionTrace() override = default;  // stops recording (observe_ unregisters first)
  PrecisionTrace(const PrecisionTrace&) = delete;
  PrecisionTrace& operator=(const PrecisionTrace&) = delete;
  PrecisionTrace(PrecisionTrace&&) = delete;  // registered by address with amp::ObserveOps
  PrecisionTrace& operator=(PrecisionTrace&&) = delete;

  const std::vector<TraceEntry>& entries() const { return entries_; }
  TraceSummary summary() const;
  void clear() { entries_.clear(); }

  // One row per entry (#, op, module, inputs, policy, output, casts, math) with aligned columns,
  // then the summary.
  void print(std::ostream& os) const;
  // {"format": "halfgrad.precision_trace", "version": 1, "entries": [...], "summary": {...}},
  // written atomically (core/atomic_file.h).
  void write_json(const std::string& path) const;

  void on_op(const OpCall& call, const Tensor& output) override;

 private:
  ModuleNames names_;
  std::vector<TraceEntry> entries_;
  ObserveOps observe_;  // last: registers after the members above exist, unregisters before they die
};

}  // namespace hg::amp::inspect
