// PrecisionTrace (amp/inspect/trace.h): one entry per observed op, the kernel math behind it, and the
// table / JSON reports.
#include "amp/inspect/trace.h"

#include <algorithm>
#include <array>
#include <sstream>

#include "amp/inspect/text_file.h"
#include "core/atomic_file.h"
#include "cuda/available.h"
#include "cpu/conv.h"
#include "cpu/gemm.h"

namespace hg::amp::inspect {

const char* math_kind_name(MathKind k) {
  switch (k) {
    case MathKind::F32: return "F32";
    case MathKind::F64: return "F64";
    case MathKind::F16AccumulateF32: return "F16 x F16 -> F32 accumulate";
    case MathKind::BF16AccumulateF32: return "BF16 x BF16 -> F32 accumulate";
    case MathKind::TF32AccumulateF32: return "TF32 x TF32 -> F32 accumulate";
    case MathKind::FP8AccumulateF32: return "FP8 x FP8 -> F32 accumulate";
    case MathKind::F32OnF16Storage: return "F32 math on F16 storage";
    case MathKind::F32OnBF16Storage: return "F32 math on BF16 storage";
    case MathKind::Copy: return "copy, no arithmetic";
    case MathKind::Integer: return "I64";
  }
  return "?";
}

namespace {

// The kind of a kernel that widens F16/BF16 to F32 (or computes F32/F64/I64 as it is).
MathKind storage_kind(DType dt) {
  switch (dt) {
    case DType::F32: return MathKind::F32;
    case DType::F64: return MathKind::F64;
    case DType::F16: return MathKind::F32OnF16Storage;
    case DType::BF16: return MathKind::F32OnBF16Storage;
    case DType::I64: return MathKind::Integer;
    case DType::F8E4M3:
    case DType::F8E5M2:  // no kernel computes on FP8 storage (its GEMM decodes it first)
    case DType::Bool: break;  // nor on Bool (comparisons compute in their operands' dtype)
  }
  return MathKind::F32;
}

std::string with_engine(const std::string& what, const std::string& engine) { return what + " (" + engine + ")"; }

// A CPU GEMM or convolution: `engine` is cpu::gemm_engine / cpu::conv_engine, `what` "GEMM" or
// "convolution". A widening engine is named "widen:..."; any other multiplies BF16 directly.
KernelMath cpu_contraction(DType dt, const std::string& engine, const std::string& what) {
  const std::string name = dtype_name(dt);
  if (dt == DType::BF16 && engine.rfind("widen:", 0) != 0)
    return {MathKind::BF16AccumulateF32, with_engine("BF16 x BF16 -> F32 accumulate", engine)};
  if (is_low_precision(dt)) return {storage_kind(dt), with_engine(name + " widened to F32, F32 " + what, engine)};
  return {storage_kind(dt), with_engine(name + " " + what, engine)};
}

// A CUDA GEMM (cuBLAS) or convolution (cuDNN): F16/BF16 accumulate in F32; F32 is true F32 unless
// cuda::allow_tf32(), when cuBLAS rounds F32 inputs to TF32 and cuDNN may pick a tensor-core engine that
// does. cuBLAS's default algorithm runs F16/BF16 on Tensor Cores; cuDNN's heuristics may pick an engine
// without them.
KernelMath cuda_contraction(DType dt, const std::string& library) {
  const std::string name = dtype_name(dt);
  const std::string how = library == "cuBLAS" ? name + " Tensor Cores" : name + " x " + name;
  if (dt == DType::F16) return {MathKind::F16AccumulateF32, with_engine(how + ", F32 accumulate", library)};
  if (dt == DType::BF16) return {MathKind::BF16AccumulateF32, with_engine(how + ", F32 accumulate", library)};
  if (dt == DType::F32 && cuda::allow_tf32()) {
    if (library == "cuBLAS") return {MathKind::TF32AccumulateF32, with_engine("TF32 Tensor Cores, F32 accumulate", library)};
    return {MathKind::F32, with_engine("F32, TF32 allowed: cuDNN may pick a tensor-core engine", library)};
  }
  if (dt == DType::F32) return {MathKind::F32, with_engine("F32, no TF32", library)};
  return {storage_kind(dt), with_engine(name, library)};
}

bool is_copy(OpId op) { return op == OpId::Cat || op == OpId::Embedding || op == OpId::Where; }

}  // namespace

// Where each fact comes from:
//  * CPU matmul/linear: cpu/gemm.cpp. oneDNN matmul for F32, and for BF16 where oneDNN has BF16
//    dot products (AVX512_BF16, AMX: BF16 products, F32 accumulation, one rounding on store); F16, and
//    BF16 on other CPUs, widened to F32, run as an F32 GEMM and rounded once; Eigen for F64, and for
//    every dtype in a build without oneDNN. cpu::gemm_engine names the engine chosen on this CPU.
//  * CPU conv2d: cpu/conv.cpp, the same split (cpu::conv_engine), im2col + GEMM in place of Eigen.
//    oneDNN may refuse one problem, which then runs on im2col: a per-problem fallback not seen here.
//  * CUDA matmul/linear: cuda/blas.cpp. cublasGemmEx with CUBLAS_COMPUTE_32F and CUBLAS_GEMM_DEFAULT:
//    F16/BF16 on Tensor Cores with F32 accumulation; F32 stays F32 unless cuda::allow_tf32()
//    (CUBLAS_COMPUTE_32F_FAST_TF32); F64 uses CUBLAS_COMPUTE_64F.
//  * CUDA conv2d: cuda/dnn.cpp numerics_ok: engines with reduced-precision reduction are rejected (F16/
//    BF16 accumulate in F32), and unless cuda::allow_tf32() (PlanOptions::tf32, cuda/dnn.h) Tensor Core
//    and down-converting engines are rejected for F32: no TF32.
//  * Every other op: cpu/elementwise.cpp, reduce.cpp, loss.cpp, pool.cpp and the CUDA kernels over
//    the same functors (docs/ARCHITECTURE.md, Principles 2): F16/BF16 are storage, widened to F32 for the math and rounded
//    on store; F64 computes in double. The norms (cpu/norm.cpp) too, with F32 statistics.
//  * cat, embedding and where copy or select values: no arithmetic, exact in any dtype.
KernelMath kernel_math(OpId op, DeviceType dev, DType dtype) {
  HG_CHECK(static_cast<int>(op) < kNumOps, "kernel_math: op=", static_cast<int>(op), " is not an amp::OpId; pass ",
           "one of amp::OpId's values (ops/autocast/policy.h)");
  if (is_copy(op)) return {MathKind::Copy, std::string("copy, no arithmetic (") + dtype_name(dtype) + ")"};
  if (op == OpId::Fp8Linear)  // ops/fp8_linear.cpp: FP8 decoded exactly to BF16, the BF16 GEMM with an F32 result
    return {MathKind::FP8AccumulateF32,
            std::string("FP8 x FP8 -> F32 accumulate (decoded to BF16; ") +
                (dev == DeviceType::CUDA ? std::string("cuBLAS") : cpu::gemm_engine(DType::BF16)) + ")"};
  if (dtype == DType::I64) return {MathKind::Integer, "I64"};
  const bool gemm = op == OpId::Matmul || op == OpId::Linear;
  if (gemm || op == OpId::Conv2d) {
    if (dev == DeviceType::CUDA) return cuda_contraction(dtype, gemm ? "cuBLAS" : "cuDNN");
    return gemm ? cpu_contraction(dtype, cpu::gemm_engine(dtype), "GEMM")
                : cpu_contraction(dtype, cpu::conv_engine(dtype), "convolution");
  }
  if (is_low_precision(dtype))
    return {storage_kind(dtype), std::string("F32 math on ") + dtype_name(dtype) + " storage"};
  return {storage_kind(dtype), dtype_name(dtype)};
}

namespace {

// The dtype the kernel computes in: the promotion of the inputs it ran on (ops promote natively:
// core/dtype.h's promote_types; I64 indices and targets give way to the floating input).
DType compute_dtype(const std::vector<Tensor>& ran, const Tensor& output) {
  std::optional<DType> dt;
  for (const Tensor& t : ran)
    if (t.defined()) dt = dt ? promote_types(*dt, t.dtype()) : t.dtype();
  return dt ? *dt : output.dtype();
}

}  // namespace

PrecisionTrace::PrecisionTrace(const nn::Module* root) : names_(root), observe_(*this) {}

void PrecisionTrace::on_op(const OpCall& call, const Tensor& output) {
  TraceEntry e;
  e.op = call.op;
  e.module = names_.current().path;
  for (const Tensor& t : call.inputs)
    e.input_dtypes.push_back(t.defined() ? std::optional<DType>(t.dtype()) : std::nullopt);
  e.policy = call.policy;
  e.output_dtype = output.dtype();
  e.output_shape = output.shape();
  e.device = output.device();
  e.casts = call.casts;
  e.math = kernel_math(call.op, e.device.type, compute_dtype(call.ran, output));
  if (!call.note.empty()) e.math.detail += "; " + call.note;
  entries_.push_back(std::move(e));
}

TraceSummary PrecisionTrace::summary() const {
  TraceSummary s;
  std::array<int64_t, static_cast<size_t>(MathKind::Integer) + 1> per_kind{};
  for (const TraceEntry& e : entries_) {
    ++s.ops;
    ++per_kind[static_cast<size_t>(e.math.kind)];
    for (const CastRecord& c : e.casts) {
      ++s.casts;
      if (c.cache_hit) {
        ++s.cache_hits;
        s.cache_hit_bytes += c.bytes;
        continue;
      }
      s.cast_bytes += c.bytes;
      if (c.cacheable) ++s.cache_misses;
    }
  }
  for (size_t k = 0; k < per_kind.size(); ++k)
    if (per_kind[k] > 0) s.ops_per_math.emplace_back(static_cast<MathKind>(k), per_kind[k]);
  return s;
}

// ---- reports ---------------------------------------------------------------------------------------

namespace {

std::string policy_text(const std::optional<CastPolicy>& p) { return p ? cast_policy_name(*p) : "off"; }

std::string inputs_text(const TraceEntry& e) {
  std::vector<std::string> names;
  for (const auto& d : e.input_dtypes) names.emplace_back(d ? dtype_name(*d) : "-");
  return join(names, ",");
}

// "0:F32->BF16 64B" per cast (input index, dtypes, bytes of the cast copy); a cast through the cast cache
// ends in " miss" (copied and stored) or " hit" (found: nothing copied).
std::string casts_text(const TraceEntry& e) {
  if (e.casts.empty()) return "-";
  std::string s;
  for (const CastRecord& c : e.casts) {
    s += s.empty() ? "" : ", ";
    s += std::to_string(c.input) + ":" + dtype_name(c.from) + "->" + dtype_name(c.to) + " " + std::to_string(c.bytes) +
         "B";
    if (c.cacheable) s += c.cache_hit ? " hit" : " miss";
  }
  return s;
}

using Row = std::array<std::string, 8>;

Row entry_row(size_t i, const TraceEntry& e) {
  return {std::to_string(i),
          op_name(e.op),
          e.module.empty() ? "-" : e.module,
          inputs_text(e),
          policy_text(e.policy),
          std::string(dtype_name(e.output_dtype)) + " " + e.output_shape.str(),
          casts_text(e),
          e.math.detail};
}

void print_rows(std::ostream& os, const std::vector<Row>& rows) {
  Row::value_type::size_type width[8] = {};
  for (const Row& r : rows)
    for (size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
  for (const Row& r : rows) {
    std::string line;
    for (size_t c = 0; c < r.size(); ++c) {
      line += r[c];
      if (c + 1 < r.size()) line += std::string(width[c] - r[c].size() + 2, ' ');
    }
    os << line << '\n';
  }
}

void print_summary(std::ostream& os, const TraceSummary& s) {
  os << "ops: " << s.ops << '\n';
  for (const auto& [kind, n] : s.ops_per_math) os << "  " << math_kind_name(kind) << ": " << n << '\n';
  os << "casts: " << s.casts << ", " << s.cast_bytes << " bytes copied\n";
  os << "cast cache: " << s.cache_hits << " hits (" << s.cache_hit_bytes << " bytes not copied), " << s.cache_misses
     << " misses\n";
}

}  // namespace

void PrecisionTrace::print(std::ostream& os) const {
  std::vector<Row> rows{{"#", "op", "module", "inputs", "policy", "output", "casts", "math"}};
  for (size_t i = 0; i < entries_.size(); ++i) rows.push_back(entry_row(i, entries_[i]));
  print_rows(os, rows);
  print_summary(os, summary());
}

namespace {

std::string cast_json(const CastRecord& c) {
  std::ostringstream os;
  os << "{\"input\": " << c.input << ", \"from\": " << json_string(dtype_name(c.from))
     << ", \"to\": " << json_string(dtype_name(c.to)) << ", \"bytes\": " << c.bytes
     << ", \"cacheable\": " << (c.cacheable ? "true" : "false")
     << ", \"cache_hit\": " << (c.cache_hit ? "true" : "false") << "}";
  return os.str();
}

std::string entry_json(size_t i, const TraceEntry& e) {
  std::vector<std::string> inputs, shape, casts;
  for (const auto& d : e.input_dtypes) inputs.push_back(d ? json_string(dtype_name(*d)) : "null");
  for (int64_t n : e.output_shape) shape.push_back(std::to_string(n));
  for (const CastRecord& c : e.casts) casts.push_back(cast_json(c));
  std::ostringstream os;
  os << "{\"index\": " << i << ", \"op\": " << json_string(op_name(e.op)) << ", \"module\": " << json_string(e.module)
     << ", \"device\": " << json_string(e.device.str()) << ", \"inputs\": [" << join(inputs, ", ") << "]"
     << ", \"policy\": " << json_string(policy_text(e.policy)) << ", \"output\": {\"dtype\": "
     << json_string(dtype_name(e.output_dtype)) << ", \"shape\": [" << join(shape, ", ") << "]}"
     << ", \"casts\": [" << join(casts, ", ") << "], \"math\": {\"kind\": "
     << json_string(math_kind_name(e.math.kind)) << ", \"detail\": " << json_string(e.math.detail) << "}}";
  return os.str();
}

std::string summary_json(const TraceSummary& s) {
  std::vector<std::string> kinds;
  for (const auto& [kind, n] : s.ops_per_math)
    kinds.push_back(json_string(math_kind_name(kind)) + ": " + std::to_string(n));
  std::ostringstream os;
  os << "{\"ops\": " << s.ops << ", \"ops_per_math\": {" << join(kinds, ", ") << "}, \"casts\": " << s.casts
     << ", \"cast_bytes\": " << s.cast_bytes << ", \"cache_hits\": " << s.cache_hits
     << ", \"cache_hit_bytes\": " << s.cache_hit_bytes << ", \"cache_misses\": " << s.cache_misses << "}";
  return os.str();
}

}  // namespace

void PrecisionTrace::write_json(const std::string& path) const {
  std::vector<std::string> rows;
  for (size_t i = 0; i < entries_.size(); ++i) rows.push_back(entry_json(i, entries_[i]));
  std::string text = "{\n  \"format\": \"halfgrad.precision_trace\",\n  \"version\": 1,\n  \"entries\": [";
  text += rows.empty() ? "]" : "\n    " + join(rows, ",\n    ") + "\n  ]";
  text += ",\n  \"summary\": " + summary_json(summary()) + "\n}\n";
  write_file_atomic("PrecisionTrace::write_json", path, text);
}

}  // namespace hg::amp::inspect
