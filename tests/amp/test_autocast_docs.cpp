// docs/AMP.md held to the autocast code: section 10's F16-overflow snippet and section 5's cast-policy table.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ops/autocast/autocast.h"
#include "ops/autocast/policy.h"
#include "ops/reduce.h"

using namespace hg;
using amp::CastPolicy;
using amp::OpId;

// docs/AMP.md section 10's "an op that fails in F16": the sum of 4096 twenties, 81920, is past F16's 65504. The CPU
// policy keeps sum in the input's dtype (inf); the page's override to F32, as on CUDA, gives the exact sum.
TEST_CASE("docs/AMP.md: a sum that overflows in F16 under the CPU policy is exact once sum runs in F32", "[amp][docs]") {
  using namespace hg;
  // docs/AMP.md snippet begin
  Tensor x = full({4096}, 20.0).to(DType::F16);
  Tensor a, b;
  { amp::Autocast ac(DeviceType::CPU, DType::F16); a = x.sum(); }  // the CPU policy keeps F16: inf
  {
    amp::PolicyGuard restore(DeviceType::CPU, amp::active_policy(DeviceType::CPU));  // put back on exit
    amp::set_op_policy(DeviceType::CPU, amp::OpId::Sum, amp::CastPolicy::Fp32);       // as on CUDA
    amp::Autocast ac(DeviceType::CPU, DType::F16);
    b = x.sum();                                                                      // F32: 81920
  }
  // docs/AMP.md snippet end
  CHECK(a.dtype() == DType::F16);
  CHECK(std::isinf(a.item()));
  CHECK(b.dtype() == DType::F32);
  CHECK(b.item() == 81920);
  // the guard put the CPU policy back: sum keeps F16 again
  amp::Autocast ac(DeviceType::CPU, DType::F16);
  CHECK(x.sum().dtype() == DType::F16);
}

// docs/AMP.md section 5's table of the four cast policies names, per policy, the ops the CUDA preset gives it; each
// named op (and "all losses", "pools", the Promote row's "none on CUDA; cat on the CPU") must be what the presets do.
TEST_CASE("docs/AMP.md's cast-policy table says what Policy::pytorch_cuda() and pytorch_cpu() do", "[amp][docs]") {
  std::ifstream doc(std::string(HG_SOURCE_DIR) + "/docs/AMP.md");
  REQUIRE(doc.good());
  const amp::Policy cuda = amp::Policy::pytorch_cuda(), cpu = amp::Policy::pytorch_cpu();
  const auto trim = [](std::string s) {
    s.erase(0, s.find_first_not_of(" `"));
    s.erase(s.find_last_not_of(" `") + 1);
    return s;
  };
  std::string line;
  bool in_table = false;
  int rows = 0, checked = 0;
  while (std::getline(doc, line)) {
    if (line.rfind("| policy | inputs become |", 0) == 0) in_table = true;
    if (!in_table || line.rfind("| `", 0) != 0) {
      if (in_table && rows > 0 && line.rfind("|", 0) != 0) break;  // the table ended
      continue;
    }
    ++rows;
    const std::string name = trim(line.substr(2, line.find('|', 2) - 2));
    const CastPolicy want = name == "Lower" ? CastPolicy::Lower : name == "Fp32" ? CastPolicy::Fp32
                            : name == "Promote" ? CastPolicy::Promote : CastPolicy::Keep;
    REQUIRE(amp::cast_policy_name(want) == name);
    const size_t last = line.rfind('|'), before = line.rfind('|', last - 1);
    const std::string ops = line.substr(before + 1, last - before - 1);
    INFO(name << ": " << ops);
    if (want == CastPolicy::Promote) {  // "(none on CUDA; `cat` on the CPU)"
      REQUIRE(ops.find("none on CUDA") != std::string::npos);
      for (int k = 0; k < amp::kNumOps; ++k) CHECK(cuda.get(static_cast<OpId>(k)) != CastPolicy::Promote);
      CHECK(cpu.get(OpId::Cat) == CastPolicy::Promote);
      checked += 2;
      continue;
    }
    std::stringstream items(ops);
    std::string item;
    while (std::getline(items, item, ',')) {
      std::stringstream parts(item);
      std::string token;
      while (std::getline(parts, token, '/')) {  // "add/mul"
        token = trim(token);
        std::vector<OpId> named;
        if (token == "all losses") named = {OpId::CrossEntropy, OpId::NllLoss, OpId::MseLoss, OpId::L1Loss, OpId::BceWithLogits};
        if (token == "pools") named = {OpId::MaxPool2d, OpId::AvgPool2d, OpId::AdaptiveAvgPool2d};
        for (int k = 0; k < amp::kNumOps; ++k)
          if (token == amp::op_name(static_cast<OpId>(k))) named.push_back(static_cast<OpId>(k));
        if (token != "...") CHECK_FALSE(named.empty());  // a name the table uses that no op has
        for (OpId op : named) {
          INFO(token);
          CHECK(cuda.get(op) == want);
          ++checked;
        }
      }
    }
  }
  CHECK(rows == 4);
  CHECK(checked >= 25);
}
