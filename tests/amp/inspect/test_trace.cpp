// amp::inspect::PrecisionTrace: the trace of a known model (Linear, ReLU, Linear + cross_entropy) under
// BF16 autocast, with autocast off and with F16 under Apex O1's policy; composite ops recorded once;
// nothing recorded in backward or after the trace dies; numbers unchanged by tracing; kernel_math
// against the CPU engines; the table and the JSON report.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "amp/inspect/trace.h"
#include "cuda/available.h"
#include "json_reader.h"
#include "nn/nn.h"
#include "ops/autocast/autocast.h"
#include "cpu/conv.h"
#include "cpu/gemm.h"
#include "ops/loss.h"
#include "ops/matmul.h"
#include "ops/norm.h"
#include "ops/reduce.h"
#include "test_util.h"

using namespace hg;
using namespace hg::amp;
using namespace hg::amp::inspect;

namespace {

constexpr int64_t kBatch = 2, kIn = 6, kHidden = 8, kOut = 4;

struct Net {
  nn::Sequential seq{nn::Linear(kIn, kHidden), nn::ReLU(), nn::Linear(kHidden, kOut)};
  Tensor x = randn({kBatch, kIn});
  Tensor target = from_vector(std::vector<int64_t>{1, 3}, {kBatch}, {.dtype = DType::I64});
};

std::vector<uint32_t> bits(const Tensor& t) {
  const std::vector<float> v = t.to(DType::F32).to_vector<float>();
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
  return b;
}

int64_t bytes(int64_t numel, DType dt) { return numel * static_cast<int64_t>(dtype_size(dt)); }

// The math the CPU GEMM engine of this build runs for a low-precision dtype.
MathKind expected_gemm_kind(DType dt) {
  if (dt == DType::BF16 && cpu::gemm_engine(dt).rfind("widen:", 0) != 0) return MathKind::BF16AccumulateF32;
  return dt == DType::F16 ? MathKind::F32OnF16Storage : MathKind::F32OnBF16Storage;
}

void check_cast(const CastRecord& c, size_t input, DType from, DType to, int64_t nbytes, bool cacheable, bool hit) {
  CHECK(c.input == input);
  CHECK(c.from == from);
  CHECK(c.to == to);
  CHECK(c.bytes == nbytes);
  CHECK(c.cacheable == cacheable);
  CHECK(c.cache_hit == hit);
}

std::vector<std::string> op_names(const PrecisionTrace& t) {
  std::vector<std::string> names;
  for (const TraceEntry& e : t.entries()) names.push_back(op_name(e.op));
  return names;
}

std::vector<std::optional<DType>> dts(std::initializer_list<DType> l) { return {l.begin(), l.end()}; }

// One forward of the known model (logits, loss) inside the current autocast state.
std::pair<Tensor, Tensor> forward(Net& net) {
  Tensor logits = net.seq(net.x);
  return {logits, cross_entropy(logits, net.target)};
}

// The entries of one forward under BF16 autocast: weights cached on `second` pass (hits).
void check_bf16_forward(const std::vector<TraceEntry>& e, size_t at, bool second) {
  const TraceEntry& l0 = e[at];
  CHECK(l0.module == "0");
  CHECK(l0.input_dtypes == dts({DType::F32, DType::F32, DType::F32}));
  CHECK(l0.policy == CastPolicy::Lower);
  CHECK(l0.output_dtype == DType::BF16);
  CHECK(l0.output_shape == Shape{kBatch, kHidden});
  REQUIRE(l0.casts.size() == 3);
  check_cast(l0.casts[0], 0, DType::F32, DType::BF16, bytes(kBatch * kIn, DType::BF16), false, false);
  check_cast(l0.casts[1], 1, DType::F32, DType::BF16, bytes(kHidden * kIn, DType::BF16), true, second);
  check_cast(l0.casts[2], 2, DType::F32, DType::BF16, bytes(kHidden, DType::BF16), true, second);
  CHECK(l0.math.kind == expected_gemm_kind(DType::BF16));
  CHECK_THAT(l0.math.detail, Catch::EndsWith(std::string("(") + cpu::gemm_engine(DType::BF16) + ")"));

  const TraceEntry& r = e[at + 1];
  CHECK(r.module == "1");
  CHECK(r.input_dtypes == dts({DType::BF16}));
  CHECK(r.policy == CastPolicy::Keep);  // relu is in no torch CPU list
  CHECK(r.casts.empty());
  CHECK(r.output_dtype == DType::BF16);
  CHECK(r.math.kind == MathKind::F32OnBF16Storage);

  const TraceEntry& l2 = e[at + 2];
  CHECK(l2.module == "2");
  CHECK(l2.input_dtypes == dts({DType::BF16, DType::F32, DType::F32}));
  REQUIRE(l2.casts.size() == 2);  // x is BF16 already
  check_cast(l2.casts[0], 1, DType::F32, DType::BF16, bytes(kOut * kHidden, DType::BF16), true, second);
  check_cast(l2.casts[1], 2, DType::F32, DType::BF16, bytes(kOut, DType::BF16), true, second);
  CHECK(l2.output_dtype == DType::BF16);
  CHECK(l2.output_shape == Shape{kBatch, kOut});

  const TraceEntry& ce = e[at + 3];
  CHECK(ce.module == "");
  CHECK(ce.input_dtypes == dts({DType::BF16, DType::I64}));
  CHECK(ce.policy == CastPolicy::Fp32);
  CHECK(ce.casts.empty());  // the loss kernel reads the BF16 logits in F32 itself: the same values, no copy
  CHECK(ce.output_dtype == DType::F32);
  CHECK(ce.output_shape == Shape{});
  CHECK(ce.math.kind == MathKind::F32OnBF16Storage);  // BF16 widened as loaded, F32 math
}

}  // namespace

TEST_CASE("PrecisionTrace lists the ops, dtypes, policies and casts of a model under BF16 autocast",
          "[inspect][trace]") {
  Net net;
  PrecisionTrace trace(&net.seq);
  Tensor logits, loss;
  {
    Autocast ac(DeviceType::CPU, DType::BF16);
    std::tie(logits, loss) = forward(net);
    std::tie(logits, loss) = forward(net);  // the same region: the weights' casts hit the cache
  }
  CHECK(logits.dtype() == DType::BF16);
  CHECK(loss.dtype() == DType::F32);
  const std::vector<std::string> one = {"linear", "relu", "linear", "cross_entropy"};
  std::vector<std::string> two = one;
  two.insert(two.end(), one.begin(), one.end());
  REQUIRE(op_names(trace) == two);
  check_bf16_forward(trace.entries(), 0, false);
  check_bf16_forward(trace.entries(), 4, true);

  const TraceSummary s = trace.summary();
  CHECK(s.ops == 8);
  CHECK(s.casts == 10);  // per pass: the input and, the first time, the four weights
  CHECK(s.cache_hits == 4);
  CHECK(s.cache_misses == 4);
  const int64_t weights = bytes(kHidden * kIn + kHidden + kOut * kHidden + kOut, DType::BF16);
  const int64_t per_pass = bytes(kBatch * kIn, DType::BF16);
  CHECK(s.cache_hit_bytes == weights);
  CHECK(s.cast_bytes == weights + 2 * per_pass);
  int64_t counted = 0;
  for (const auto& [kind, n] : s.ops_per_math) counted += n;
  CHECK(counted == 8);
}

TEST_CASE("PrecisionTrace with autocast off: policy off, no casts, F32 math", "[inspect][trace]") {
  Net net;
  PrecisionTrace trace(&net.seq);
  const auto [logits, loss] = forward(net);
  REQUIRE(op_names(trace) == std::vector<std::string>{"linear", "relu", "linear", "cross_entropy"});
  const std::vector<std::string> modules = {"0", "1", "2", ""};
  for (size_t i = 0; i < 4; ++i) {
    const TraceEntry& e = trace.entries()[i];
    CHECK(e.module == modules[i]);
    CHECK_FALSE(e.policy.has_value());
    CHECK(e.casts.empty());
    CHECK(e.math.kind == MathKind::F32);
    CHECK(e.input_dtypes[0] == DType::F32);
  }
  CHECK(trace.entries()[0].output_dtype == DType::F32);
  CHECK_THAT(trace.entries()[0].math.detail, Catch::Contains(cpu::gemm_engine(DType::F32)));
  CHECK(trace.summary().cast_bytes == 0);
}

TEST_CASE("PrecisionTrace records F16 under the Apex O1 policy", "[inspect][trace]") {
  Net net;
  PolicyGuard apex(DeviceType::CPU, Policy::apex_o1());
  PrecisionTrace trace(&net.seq);
  {
    Autocast ac(DeviceType::CPU, DType::F16);
    forward(net);
  }
  REQUIRE(op_names(trace) == std::vector<std::string>{"linear", "relu", "linear", "cross_entropy"});
  const auto& e = trace.entries();
  CHECK(e[0].policy == CastPolicy::Lower);
  CHECK(e[0].output_dtype == DType::F16);
  REQUIRE(e[0].casts.size() == 3);
  check_cast(e[0].casts[1], 1, DType::F32, DType::F16, bytes(kHidden * kIn, DType::F16), true, false);
  CHECK(e[0].math.kind == MathKind::F32OnF16Storage);  // no F16 GEMM on the CPU: widened
  CHECK_THAT(e[0].math.detail, Catch::Contains(cpu::gemm_engine(DType::F16)));
  CHECK(e[1].policy == CastPolicy::Keep);  // relu is in none of Apex's lists
  CHECK(e[1].input_dtypes == dts({DType::F16}));
  CHECK(e[1].math.kind == MathKind::F32OnF16Storage);
  CHECK(e[3].policy == CastPolicy::Fp32);
  CHECK(e[3].casts.empty());  // F16 logits read in F32 by the loss kernel
  CHECK(e[3].output_dtype == DType::F32);
}

TEST_CASE("PrecisionTrace records composite ops once and names nested modules", "[inspect][trace]") {
  nn::Sequential model(std::make_shared<nn::Sequential>(nn::Linear(3, 5), nn::ReLU()), nn::Linear(5, 2));
  PrecisionTrace trace(&model);
  Tensor x = randn({4, 3});
  Tensor y = model(x);
  Tensor n = layer_norm(y, {2});  // no weight or bias: recorded as undefined inputs
  Tensor v = var(y, {1});          // composed of mean, sub, mul, sum and div: one entry
  Tensor m = matmul(x, x.transpose(0, 1));
  REQUIRE(op_names(trace) == std::vector<std::string>{"linear", "relu", "linear", "layer_norm", "var", "matmul"});
  CHECK(trace.entries()[0].module == "0.0");
  CHECK(trace.entries()[1].module == "0.1");
  CHECK(trace.entries()[2].module == "1");
  CHECK(trace.entries()[3].module == "");
  CHECK(trace.entries()[3].input_dtypes == std::vector<std::optional<DType>>{DType::F32, std::nullopt, std::nullopt});

  PrecisionTrace unnamed;  // no root: no module paths
  model(x);
  REQUIRE(unnamed.entries().size() == 3);
  CHECK(unnamed.entries()[0].module == "");
  CHECK(trace.entries().size() == 9);  // both live traces record
}

TEST_CASE("PrecisionTrace records nothing in backward or after it dies", "[inspect][trace]") {
  struct Counting : PrecisionTrace {
    explicit Counting(int& n) : n_(n) {}
    void on_op(const OpCall& call, const Tensor& output) override {
      ++n_;
      PrecisionTrace::on_op(call, output);
    }
    int& n_;
  };
  Net net;
  int calls = 0;
  {
    Counting trace(calls);
    Tensor loss;
    {
      Autocast ac(DeviceType::CPU, DType::BF16);
      loss = forward(net).second;
    }
    REQUIRE(trace.entries().size() == 4);
    loss.backward();  // linear's bias gradient sums, relu's mask...: none observed
    CHECK(trace.entries().size() == 4);
    CHECK(calls == 4);
  }
  forward(net);
  Autocast ac(DeviceType::CPU, DType::BF16);
  forward(net);
  CHECK(calls == 4);
}

TEST_CASE("PrecisionTrace changes no numbers", "[inspect][trace]") {
  Net net;
  struct Run {
    std::vector<uint32_t> logits, loss;
    std::vector<std::vector<uint32_t>> grads;
  };
  auto run = [&](bool traced) {
    net.seq.zero_grad();
    std::optional<PrecisionTrace> trace;
    if (traced) trace.emplace(&net.seq);
    Tensor logits, loss;
    {
      Autocast ac(DeviceType::CPU, DType::BF16);
      std::tie(logits, loss) = forward(net);
    }
    loss.backward();
    if (traced) REQUIRE(trace->entries().size() == 4);
    Run r{bits(logits), bits(loss), {}};
    for (const Tensor& p : net.seq.parameters()) r.grads.push_back(bits(p.grad()));
    return r;
  };
  const Run plain = run(false), traced = run(true);
  CHECK(plain.logits == traced.logits);
  CHECK(plain.loss == traced.loss);
  REQUIRE(plain.grads.size() == 4);
  CHECK(plain.grads == traced.grads);
}

TEST_CASE("kernel_math follows the CPU engines and the CUDA libraries", "[inspect][trace]") {
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    INFO("dtype " << dtype_name(dt));
    for (OpId op : {OpId::Matmul, OpId::Linear}) {
      const KernelMath m = kernel_math(op, DeviceType::CPU, dt);
      CHECK_THAT(m.detail, Catch::EndsWith(std::string("(") + cpu::gemm_engine(dt) + ")"));
      if (is_low_precision(dt)) CHECK(m.kind == expected_gemm_kind(dt));
    }
    const KernelMath conv = kernel_math(OpId::Conv2d, DeviceType::CPU, dt);
    CHECK_THAT(conv.detail, Catch::EndsWith(std::string("(") + cpu::conv_engine(dt) + ")"));
  }
  CHECK(kernel_math(OpId::Linear, DeviceType::CPU, DType::F32).kind == MathKind::F32);
  CHECK(kernel_math(OpId::Linear, DeviceType::CPU, DType::F64).kind == MathKind::F64);
  CHECK(kernel_math(OpId::Linear, DeviceType::CUDA, DType::F16).kind == MathKind::F16AccumulateF32);
  CHECK(kernel_math(OpId::Conv2d, DeviceType::CUDA, DType::BF16).kind == MathKind::BF16AccumulateF32);
  CHECK(kernel_math(OpId::Matmul, DeviceType::CUDA, DType::F32).detail == "F32, no TF32 (cuBLAS)");
  CHECK(kernel_math(OpId::Linear, DeviceType::CUDA, DType::F16).detail == "F16 Tensor Cores, F32 accumulate (cuBLAS)");
  CHECK(kernel_math(OpId::Conv2d, DeviceType::CUDA, DType::F32).kind == MathKind::F32);
  cuda::set_allow_tf32(true);  // (a flag only: loads nothing)
  CHECK(kernel_math(OpId::Linear, DeviceType::CUDA, DType::F32).kind == MathKind::TF32AccumulateF32);
  CHECK(kernel_math(OpId::Linear, DeviceType::CPU, DType::F32).kind == MathKind::F32);  // the CPU has no TF32
  cuda::set_allow_tf32(false);
  CHECK(kernel_math(OpId::Linear, DeviceType::CUDA, DType::F32).kind == MathKind::F32);
  CHECK(kernel_math(OpId::Softmax, DeviceType::CUDA, DType::F16).kind == MathKind::F32OnF16Storage);
  CHECK(kernel_math(OpId::Add, DeviceType::CPU, DType::BF16).detail == "F32 math on BF16 storage");
  CHECK(kernel_math(OpId::Cat, DeviceType::CPU, DType::F16).kind == MathKind::Copy);
  CHECK(kernel_math(OpId::Sum, DeviceType::CPU, DType::I64).kind == MathKind::Integer);
  CHECK_THROWS_WITH(kernel_math(OpId::Count_, DeviceType::CPU, DType::F32), Catch::Contains("is not an amp::OpId"));
}

TEST_CASE("PrecisionTrace prints an aligned table and a summary", "[inspect][trace]") {
  Net net;
  PrecisionTrace trace(&net.seq);
  {
    Autocast ac(DeviceType::CPU, DType::BF16);
    forward(net);
    forward(net);
  }
  std::ostringstream os;
  trace.print(os);
  std::istringstream in(os.str());
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  REQUIRE(lines.size() >= 9);
  const size_t policy_col = lines[0].find("policy"), math_col = lines[0].find("math");
  CHECK(lines[1].find("Lower") == policy_col);
  CHECK(lines[4].find("Fp32") == policy_col);
  CHECK(lines[1].substr(math_col) == trace.entries()[0].math.detail);
  auto cast = [](int input, int64_t numel, const char* cache) {
    return std::to_string(input) + ":F32->BF16 " + std::to_string(bytes(numel, DType::BF16)) + "B" + cache;
  };
  CHECK_THAT(lines[1], Catch::Contains(cast(0, kBatch * kIn, "") + ", " + cast(1, kHidden * kIn, " miss") + ", " +
                                       cast(2, kHidden, " miss")));
  CHECK_THAT(lines[5], Catch::Contains(cast(1, kHidden * kIn, " hit")));
  CHECK_THAT(os.str(), Catch::Contains("ops: 8"));
  CHECK_THAT(os.str(), Catch::Contains("cast cache: 4 hits"));
  CHECK_THAT(os.str(), Catch::Contains("4 misses"));
}

TEST_CASE("PrecisionTrace writes JSON that reads back", "[inspect][trace]") {
  test::TempDir dir("trace_json");
  Net net;
  PrecisionTrace trace(&net.seq);
  {
    Autocast ac(DeviceType::CPU, DType::BF16);
    forward(net);
  }
  forward(net);  // autocast off
  trace.write_json(dir / "trace.json");
  std::ifstream f(dir / "trace.json");
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const test::Json j = test::JsonReader(text).parse();
  CHECK(j["format"].str == "halfgrad.precision_trace");
  const auto& entries = j["entries"].array;
  REQUIRE(entries.size() == 8);
  for (size_t i = 0; i < entries.size(); ++i) {
    const TraceEntry& e = trace.entries()[i];
    CHECK(entries[i]["op"].str == op_name(e.op));
    CHECK(entries[i]["module"].str == e.module);
    CHECK(entries[i]["casts"].array.size() == e.casts.size());
    CHECK(entries[i]["math"]["detail"].str == e.math.detail);
  }
  CHECK(entries[0]["policy"].str == "Lower");
  CHECK(entries[4]["policy"].str == "off");
  CHECK(entries[3]["inputs"][1].str == "I64");
  CHECK(entries[0]["casts"][1]["bytes"].number == bytes(kHidden * kIn, DType::BF16));
  CHECK(entries[0]["casts"][1]["cacheable"].boolean);
  CHECK(entries[0]["output"]["shape"][1].number == kHidden);
  const TraceSummary s = trace.summary();
  CHECK(j["summary"]["ops"].number == 8);
  CHECK(j["summary"]["cast_bytes"].number == s.cast_bytes);
  CHECK(j["summary"]["cache_misses"].number == 4);
}

TEST_CASE("PrecisionTrace write_json failures throw and leave no file", "[inspect][trace]") {
  test::TempDir dir("trace_fail");
  PrecisionTrace trace;
  relu(randn({3}));
  CHECK_THROWS_AS(trace.write_json(dir / "no/such/dir.json"), hg::Error);
  std::filesystem::create_directory(dir / "taken");  // a directory where the file would go
  CHECK_THROWS_WITH(trace.write_json(dir / "taken"), Catch::Contains("PrecisionTrace::write_json"));
  CHECK_THROWS_WITH(trace.write_json(""), Catch::Contains("the path is empty"));
  std::vector<std::string> left;
  for (const auto& p : std::filesystem::directory_iterator(dir.dir)) left.push_back(p.path().filename().string());
  CHECK(left == std::vector<std::string>{"taken"});
  CHECK(std::filesystem::is_empty(dir / "taken"));
}
